"""In-memory keyword index: coverage for the relevance threshold, weighted coverage for ranking.

A search scores every document that shares a token with the query, with three numbers:

- `coverage` in [0, 1]: the weighted share of the query's units of meaning (English words, CJK
  characters, see `text.tokenize.QueryUnit`) that the document covers. It depends only on the
  query and the document, never on the rest of the collection, so it does not collapse on small
  collections and adding memories can never push an existing hit below a threshold (recall
  stays monotonic). This is the keyword relevance that thresholds and readers see.
- `ranked` in [0, 1]: the same share with every unit weighted by its inverse document frequency
  in the scope (`ln(1 + (N - df + 0.5) / (df + 0.5))`), so a rare, decisive word ("peanuts")
  counts for more than one that most memories share (the user's own name). It orders hits; it
  is never compared with a threshold, because it moves as the scope grows.
- `bm25`: Okapi BM25 (k1=1.2, b=0.75, length normalised against a fixed reference length),
  which breaks ties between equally ranked hits by term frequency and length.

The search also reports the scope's coverage of the query: the weighted share of query units
that occur in any document of the scope. A message most of whose words never occur in a user's
memories is probably not about them.

Postings are growable numpy arrays, so adding a document costs microseconds and a query costs a
few vectorised passes over the posting lists of its tokens. A document without any token (an
emoji, punctuation) is indexed with no postings: it is never a keyword hit and breaks nothing.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.text.tokenize import Query

__all__ = ["KeywordHits", "KeywordIndex"]

_K1: Final = 1.2
_B: Final = 0.75
_COMPACT_RATIO: Final = 0.3
_REFERENCE_LENGTH: Final = 16.0
"""Document length (in tokens) at which BM25's length normalisation is neutral. A fixed
reference instead of the collection's average keeps each posting's weight independent of the
rest of the collection, so it is computed once, at insert."""


class _Postings:
    """Slots and BM25 term weights of one token, in growable C arrays.

    Appends are cheap, and numpy reads the arrays without copying.
    """

    __slots__ = ("slots", "weights")

    def __init__(self) -> None:
        self.slots = array("q")
        self.weights = array("f")

    def views(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Zero-copy numpy views; valid until the next append (callers hold the index lock)."""
        return (
            np.frombuffer(self.slots, dtype=np.int64),
            np.frombuffer(self.weights, dtype=np.float32),
        )


class KeywordHits:
    """Result of `KeywordIndex.search`: parallel arrays over the hits, best ranked first.

    The first `found` entries are the keyword candidates; any entries after them are the extra
    documents the caller asked to have scored (e.g. the embedding leg's candidates), which may
    have zero coverage.
    """

    __slots__ = ("bm25", "coverage", "found", "ids", "ranked", "scope_coverage")

    def __init__(
        self,
        ids: npt.NDArray[np.int64],
        coverage: npt.NDArray[np.float32],
        ranked: npt.NDArray[np.float32],
        bm25: npt.NDArray[np.float32],
        *,
        found: int,
        scope_coverage: float,
    ) -> None:
        self.ids = ids
        self.coverage = coverage
        self.ranked = ranked
        self.bm25 = bm25
        self.found = found
        self.scope_coverage = scope_coverage

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def empty(cls, scope_coverage: float = 0.0) -> KeywordHits:
        """No hits."""
        nothing = np.empty(0, dtype=np.float32)
        return cls(
            np.empty(0, dtype=np.int64),
            nothing,
            nothing,
            nothing,
            found=0,
            scope_coverage=scope_coverage,
        )


class KeywordIndex:
    """Keyword postings for one scope and layer. Not thread-safe: the caller locks."""

    def __init__(self, tokenizer_identity: str) -> None:
        self.tokenizer_identity: Final = tokenizer_identity
        self._postings: dict[str, _Postings] = {}
        self._dead: dict[str, int] = {}
        """Per token, postings that belong to removed documents (document frequency is the
        posting count minus this)."""
        self._slot_of: dict[int, int] = {}
        self._doc_ids = np.empty(16, dtype=np.int64)
        self._order_keys = np.zeros(16, dtype=np.int64)
        """Per slot: the caller's tie-break key (higher first) for equal BM25 scores."""
        self._alive = np.zeros(16, dtype=bool)
        self._terms: list[tuple[str, ...]] = []
        self._n_slots = 0

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._slot_of

    def _reserve(self, slots: int) -> None:
        if slots <= len(self._doc_ids):
            return
        size = max(slots, 2 * len(self._doc_ids))
        used = self._n_slots
        self._doc_ids = np.resize(self._doc_ids, size)
        self._order_keys = np.resize(self._order_keys, size)
        alive = np.zeros(size, dtype=bool)
        alive[:used] = self._alive[:used]
        self._alive = alive

    def add_many(
        self,
        doc_ids: Sequence[int],
        token_lists: Sequence[Sequence[str]],
        order_keys: Sequence[int] | None = None,
    ) -> None:
        """Index many documents at once; the same result as `add` in a loop, but faster.

        Postings are grouped with numpy instead of appended one by one. Of repeated ids, the
        last wins.
        """
        keys = list(order_keys) if order_keys is not None else [0] * len(doc_ids)
        last = {doc_id: k for k, doc_id in enumerate(doc_ids)}
        if len(last) != len(doc_ids):
            keep = sorted(last.values())
            doc_ids = [doc_ids[k] for k in keep]
            keys = [keys[k] for k in keep]
            token_lists = [token_lists[k] for k in keep]
        replaced = [d for d in doc_ids if d in self._slot_of]
        if replaced:
            self.remove(replaced)
        n = len(doc_ids)
        if n == 0:
            return
        slot0 = self._n_slots
        self._reserve(slot0 + n)
        vocab: dict[str, int] = {}
        flat = [vocab.setdefault(tok, len(vocab)) for tokens in token_lists for tok in tokens]
        if flat:
            self._add_postings(flat, vocab, token_lists, slot0)
        self._doc_ids[slot0 : slot0 + n] = np.asarray(doc_ids, dtype=np.int64)
        self._order_keys[slot0 : slot0 + n] = np.asarray(keys, dtype=np.int64)
        self._alive[slot0 : slot0 + n] = True
        self._terms.extend(tuple(dict.fromkeys(tokens)) for tokens in token_lists)
        self._slot_of.update(zip(doc_ids, range(slot0, slot0 + n), strict=True))
        self._n_slots += n

    def _add_postings(
        self,
        flat: list[int],
        vocab: dict[str, int],
        token_lists: Sequence[Sequence[str]],
        slot0: int,
    ) -> None:
        """Append the postings of consecutive new slots from `slot0` (at least one token)."""
        n = len(token_lists)
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n)
        docs = np.repeat(np.arange(n, dtype=np.int64), lengths)
        vsize = max(len(vocab), 1)
        pairs, tfs = np.unique(docs * vsize + np.asarray(flat, dtype=np.int64), return_counts=True)
        pair_doc, pair_tok = np.divmod(pairs, vsize)
        tf = tfs.astype(np.float64)
        norm = _K1 * (1.0 - _B + _B * lengths[pair_doc] / _REFERENCE_LENGTH)
        weights = (tf * (_K1 + 1.0) / (tf + norm)).astype(np.float32)
        order = np.argsort(pair_tok, kind="stable")  # by token, then by document
        tok_sorted = pair_tok[order]
        slots_sorted = (pair_doc[order] + slot0).astype(np.int64)
        weights_sorted = weights[order]
        bounds = np.flatnonzero(np.diff(tok_sorted)) + 1
        starts = np.concatenate(([0], bounds)).tolist()
        ends = np.concatenate((bounds, [len(tok_sorted)])).tolist()
        names = list(vocab)
        index = self._postings
        for start, end in zip(starts, ends, strict=True):
            tok = names[int(tok_sorted[start])]
            postings = index.get(tok)
            if postings is None:
                postings = index[tok] = _Postings()
            postings.slots.frombytes(slots_sorted[start:end].tobytes())
            postings.weights.frombytes(weights_sorted[start:end].tobytes())

    def add(self, doc_id: int, tokens: Sequence[str], order_key: int = 0) -> None:
        """Index `tokens` under `doc_id`, replacing an earlier version of the same id."""
        if doc_id in self._slot_of:
            self.remove([doc_id])
        slot = self._n_slots
        self._reserve(slot + 1)
        counts = Counter(tokens)
        index = self._postings
        length_norm = _K1 * (1.0 - _B + _B * len(tokens) / _REFERENCE_LENGTH)
        for tok, tf in counts.items():
            postings = index.get(tok)
            if postings is None:
                postings = index[tok] = _Postings()
            postings.slots.append(slot)
            postings.weights.append(tf * (_K1 + 1.0) / (tf + length_norm))
        self._doc_ids[slot] = doc_id
        self._order_keys[slot] = order_key
        self._alive[slot] = True
        self._terms.append(tuple(counts))
        self._slot_of[doc_id] = slot
        self._n_slots += 1

    def remove(self, doc_ids: Sequence[int]) -> None:
        """Forget documents; unknown ids are ignored. Space is reclaimed in batches."""
        for doc_id in doc_ids:
            slot = self._slot_of.pop(doc_id, None)
            if slot is None:
                continue
            self._alive[slot] = False
            for tok in self._terms[slot]:
                self._dead[tok] = self._dead.get(tok, 0) + 1
        dead = self._n_slots - len(self._slot_of)
        if dead > 64 and dead > _COMPACT_RATIO * self._n_slots:
            self._compact()

    def _compact(self) -> None:
        """Drop dead slots: renumber live slots in order and filter every posting list."""
        size = self._n_slots
        alive = self._alive[:size]
        live = np.flatnonzero(alive)
        remap = np.cumsum(alive) - 1
        for tok in list(self._postings):
            postings = self._postings[tok]
            slots, weights = postings.views()
            keep = alive[slots]
            if not keep.any():
                del self._postings[tok]
                continue
            postings.slots = array("q", remap[slots[keep]].astype(np.int64).tobytes())
            postings.weights = array("f", weights[keep].tobytes())
        self._dead = {}
        n = len(live)
        capacity = max(16, 2 * n)
        self._doc_ids = np.resize(self._doc_ids[live], capacity)
        self._order_keys = np.resize(self._order_keys[live], capacity)
        self._alive = np.zeros(capacity, dtype=bool)
        self._alive[:n] = True
        self._terms = [self._terms[s] for s in live.tolist()]
        self._slot_of = {int(d): i for i, d in enumerate(self._doc_ids[:n].tolist())}
        self._n_slots = n

    def search(
        self,
        query: Query,
        *,
        limit: int,
        allowed: npt.NDArray[np.bool_] | None = None,
        also: Sequence[int] = (),
    ) -> KeywordHits:
        """The `limit` best-ranked documents covering part of the query, plus `also`, scored.

        Order: `ranked`, then BM25, then the caller's order key (higher first), then doc id, so a
        cut through tied scores is decided in numpy. `allowed` is a mask over slots (see
        `slot_mask`) restricting the candidates, e.g. to one memory type; `also` are doc ids the
        caller wants scored whether or not they are keyword candidates (unknown ids are skipped).
        """
        total_weight = sum(u.weight for u in query.units)
        if not self._slot_of or total_weight <= 0:
            return KeywordHits.empty()
        n_docs = len(self._slot_of)
        size = self._n_slots
        present: dict[str, npt.NDArray[np.int64]] = {}
        bm25 = np.zeros(size, dtype=np.float32)
        idf_of: dict[str, float] = {}
        absent_idf = math.log1p((n_docs + 0.5) / 0.5)
        for token in query.tokens:
            postings = self._postings.get(token)
            df = 0 if postings is None else len(postings.slots) - self._dead.get(token, 0)
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5)) if df > 0 else absent_idf
            idf_of[token] = idf
            if postings is None or df <= 0:
                continue
            slots, weights = postings.views()
            bm25[slots] += np.float32(idf) * weights
            present[token] = slots
        covered, covered_idf, scope_weight, idf_total = _coverage(
            query, present, idf_of, absent_idf, size
        )
        scope_coverage = min(scope_weight / total_weight, 1.0)
        coverage = np.minimum(covered / np.float32(total_weight), np.float32(1.0))
        ranked = np.minimum(covered_idf / np.float32(max(idf_total, 1e-9)), np.float32(1.0))
        mask = covered > 0
        mask &= self._alive[:size]
        if allowed is not None:
            mask &= allowed[:size]
        candidates = np.flatnonzero(mask)
        if limit > 0 and candidates.size > limit:
            scores = ranked[candidates]
            kth = np.partition(scores, candidates.size - limit)[candidates.size - limit]
            candidates = candidates[scores >= kth]
        order = np.lexsort(
            (
                self._doc_ids[candidates],
                -self._order_keys[candidates],
                -bm25[candidates],
                -ranked[candidates],
            )
        )
        picked = candidates[order[: max(limit, 0)]]
        chosen = set(picked.tolist())
        extra_slots = [
            slot
            for doc_id in dict.fromkeys(also)
            if (slot := self._slot_of.get(int(doc_id))) is not None and slot not in chosen
        ]
        if extra_slots:
            picked = np.concatenate((picked, np.asarray(extra_slots, dtype=np.int64)))
        return KeywordHits(
            self._doc_ids[picked].copy(),
            coverage[picked],
            ranked[picked],
            bm25[picked],
            found=len(picked) - len(extra_slots),
            scope_coverage=scope_coverage,
        )

    def slot_mask(self, doc_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """A mask over this index's slots that is true for the given doc ids."""
        mask = np.zeros(self._n_slots, dtype=bool)
        for doc_id in doc_ids.tolist():
            slot = self._slot_of.get(int(doc_id))
            if slot is not None:
                mask[slot] = True
        return mask


def _coverage(
    query: Query,
    present: dict[str, npt.NDArray[np.int64]],
    idf_of: dict[str, float],
    absent_idf: float,
    size: int,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], float, float]:
    """Query coverage per slot, plain and idf-weighted, with the scope's and the query's totals.

    Returns (covered weight per slot, idf-weighted covered weight per slot, query weight whose
    base token occurs in the scope, idf-weighted query weight).

    Each unit adds its base strength where the base token occurs, and the rest of its weight
    where a boost token occurs (boost documents are a subset of base documents). A scratch array
    de-duplicates documents holding both boosts; only the boost postings, which are short, are
    touched twice. The idf-weighted sums scale each unit by the inverse document frequency of
    its base token.
    """
    covered = np.zeros(size, dtype=np.float32)
    covered_idf = np.zeros(size, dtype=np.float32)
    scratch = np.zeros(size, dtype=np.float32)
    scope_weight = 0.0
    idf_total = 0.0
    for unit in query.units:
        idf = idf_of.get(unit.base, absent_idf)
        idf_total += unit.weight * idf
        base = present.get(unit.base)
        if base is None:
            continue
        scope_weight += unit.weight
        strength = unit.weight * unit.base_strength
        covered[base] += np.float32(strength)
        covered_idf[base] += np.float32(strength * idf)
        boosts = [hit for tok in unit.boosts if (hit := present.get(tok)) is not None]
        if not boosts:
            continue
        extra = unit.weight * (1.0 - unit.base_strength)
        union = boosts[0] if len(boosts) == 1 else np.unique(np.concatenate(boosts))
        scratch[union] = np.float32(extra)
        covered[union] += scratch[union]
        covered_idf[union] += scratch[union] * np.float32(idf)
        scratch[union] = 0.0
    return covered, covered_idf, scope_weight, idf_total
