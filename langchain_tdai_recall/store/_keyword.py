"""In-memory keyword index: BM25 for ranking, query coverage for thresholding.

Two numbers come out of a search:

- `bm25`: Okapi BM25 (k1=1.2, b=0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), length
  normalised against a fixed reference length), used to rank keyword hits against each other.
- `relevance` in [0, 1]: the weighted share of the query's units of meaning (English words, CJK
  characters) that the memory covers (see `text.tokenize.QueryUnit`). This is the documented
  keyword score compared with `score_threshold`. It depends only on the query and the memory,
  never on the rest of the collection, so it does not collapse on small collections and adding
  memories can never push an existing hit below the threshold (recall is monotonic).

Postings are growable numpy arrays, so adding a document costs microseconds and a query costs a
few vectorised passes over the posting lists of its tokens.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

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
    """Result of `KeywordIndex.search`: parallel arrays, best BM25 first."""

    __slots__ = ("bm25", "ids", "relevance")

    def __init__(
        self,
        ids: npt.NDArray[np.int64],
        bm25: npt.NDArray[np.floating[Any]],
        relevance: npt.NDArray[np.floating[Any]],
    ) -> None:
        self.ids = ids
        self.bm25 = bm25
        self.relevance = relevance

    def __len__(self) -> int:
        return len(self.ids)


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
        self._doc_ids[slot0 : slot0 + n] = np.asarray(doc_ids, dtype=np.int64)
        self._order_keys[slot0 : slot0 + n] = np.asarray(keys, dtype=np.int64)
        self._alive[slot0 : slot0 + n] = True
        self._terms.extend(tuple(dict.fromkeys(tokens)) for tokens in token_lists)
        self._slot_of.update(zip(doc_ids, range(slot0, slot0 + n), strict=True))
        self._n_slots += n

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
        min_relevance: float,
        limit: int,
        allowed: npt.NDArray[np.bool_] | None = None,
    ) -> KeywordHits:
        """Documents whose relevance is at least `min_relevance`, best BM25 first.

        Returns at most `limit` documents, ordered by BM25, then the caller's order key (higher
        first), then doc id, so a cut through tied scores is decided in numpy. `allowed` is a
        mask over slots (see `slot_mask`) restricting the candidates, e.g. to one memory type.
        """
        empty = KeywordHits(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), np.empty(0))
        total_weight = sum(u.weight for u in query.units)
        if not self._slot_of or total_weight <= 0 or limit <= 0:
            return empty
        n_docs = len(self._slot_of)
        size = self._n_slots
        bm25 = np.zeros(size, dtype=np.float32)
        present: dict[str, npt.NDArray[np.int64]] = {}
        for token in query.tokens:
            postings = self._postings.get(token)
            if postings is None:
                continue
            df = len(postings.slots) - self._dead.get(token, 0)
            if df <= 0:
                continue
            slots, weights = postings.views()
            bm25[slots] += np.float32(math.log1p((n_docs - df + 0.5) / (df + 0.5))) * weights
            present[token] = slots
        if not present:
            return empty
        # Coverage: each unit adds its base strength where the base token occurs, and the rest
        # of its weight where a boost token occurs (boost documents are a subset of base
        # documents). A scratch array de-duplicates documents holding both boosts; only the
        # boost postings, which are short, are touched twice.
        covered = np.zeros(size, dtype=np.float32)
        scratch = np.zeros(size, dtype=np.float32)
        for unit in query.units:
            base = present.get(unit.base)
            if base is None:
                continue
            covered[base] += np.float32(unit.weight * unit.base_strength)
            boosts = [hit for tok in unit.boosts if (hit := present.get(tok)) is not None]
            extra = np.float32(unit.weight * (1.0 - unit.base_strength))
            if len(boosts) == 1:
                covered[boosts[0]] += extra
            elif boosts:
                union = np.concatenate(boosts)
                scratch[union] = extra
                covered[union] += scratch[union]
                scratch[union] = 0.0
        needed = np.float32((min_relevance - 1e-6) * total_weight)
        mask = (covered > 0) & (covered >= needed)
        mask &= self._alive[:size]
        if allowed is not None:
            mask &= allowed[:size]
        relevance = covered / np.float32(total_weight)
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return empty
        scores = bm25[candidates]
        if candidates.size > limit:
            kth = np.partition(scores, candidates.size - limit)[candidates.size - limit]
            keep = scores >= kth
            candidates, scores = candidates[keep], scores[keep]
        order = np.lexsort((self._doc_ids[candidates], -self._order_keys[candidates], -scores))
        picked = candidates[order[:limit]]
        return KeywordHits(
            self._doc_ids[picked].copy(), bm25[picked], np.minimum(relevance[picked], 1.0)
        )

    def slot_mask(self, doc_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """A mask over this index's slots that is true for the given doc ids."""
        mask = np.zeros(self._n_slots, dtype=bool)
        for doc_id in doc_ids.tolist():
            slot = self._slot_of.get(int(doc_id))
            if slot is not None:
                mask[slot] = True
        return mask
