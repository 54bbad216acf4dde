"""In-memory keyword index: BM25 for ranking, query coverage for thresholding.

Two numbers come out of a search:

- `bm25`: Okapi BM25 (k1=1.2, b=0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))), used to rank
  keyword hits against each other.
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
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.text.tokenize import Query

__all__ = ["KeywordHits", "KeywordIndex"]

_K1: Final = 1.2
_B: Final = 0.75
_COMPACT_RATIO: Final = 0.3


class _Postings:
    """Slots and term frequencies of one token, in a growable pair of arrays."""

    __slots__ = ("n", "slots", "tfs")

    def __init__(self) -> None:
        self.slots = np.empty(4, dtype=np.int64)
        self.tfs = np.empty(4, dtype=np.float32)
        self.n = 0

    def append(self, slot: int, tf: int) -> None:
        if self.n == len(self.slots):
            self.slots = np.resize(self.slots, 2 * self.n)
            self.tfs = np.resize(self.tfs, 2 * self.n)
        self.slots[self.n] = slot
        self.tfs[self.n] = tf
        self.n += 1


class KeywordHits:
    """Result of `KeywordIndex.search`: parallel arrays, best BM25 first."""

    __slots__ = ("bm25", "ids", "relevance")

    def __init__(
        self,
        ids: npt.NDArray[np.int64],
        bm25: npt.NDArray[np.float64],
        relevance: npt.NDArray[np.float64],
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
        self._df: dict[str, int] = {}
        self._slot_of: dict[int, int] = {}
        self._doc_ids = np.empty(16, dtype=np.int64)
        self._lengths = np.empty(16, dtype=np.float32)
        self._alive = np.zeros(16, dtype=bool)
        self._terms: list[tuple[str, ...]] = []
        self._n_slots = 0
        self._total_len = 0.0

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._slot_of

    def add(self, doc_id: int, tokens: Sequence[str]) -> None:
        """Index `tokens` under `doc_id`, replacing an earlier version of the same id."""
        if doc_id in self._slot_of:
            self.remove([doc_id])
        slot = self._n_slots
        if slot == len(self._doc_ids):
            size = 2 * slot
            self._doc_ids = np.resize(self._doc_ids, size)
            self._lengths = np.resize(self._lengths, size)
            alive = np.zeros(size, dtype=bool)
            alive[:slot] = self._alive[:slot]
            self._alive = alive
        counts: dict[str, int] = {}
        for tok in tokens:
            counts[tok] = counts.get(tok, 0) + 1
        for tok, tf in counts.items():
            postings = self._postings.get(tok)
            if postings is None:
                postings = self._postings[tok] = _Postings()
            postings.append(slot, tf)
            self._df[tok] = self._df.get(tok, 0) + 1
        self._doc_ids[slot] = doc_id
        self._lengths[slot] = len(tokens)
        self._alive[slot] = True
        self._terms.append(tuple(counts))
        self._slot_of[doc_id] = slot
        self._n_slots += 1
        self._total_len += len(tokens)

    def remove(self, doc_ids: Sequence[int]) -> None:
        """Forget documents; unknown ids are ignored. Space is reclaimed in batches."""
        for doc_id in doc_ids:
            slot = self._slot_of.pop(doc_id, None)
            if slot is None:
                continue
            self._alive[slot] = False
            self._total_len -= float(self._lengths[slot])
            for tok in self._terms[slot]:
                self._df[tok] -= 1
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
            slots = postings.slots[: postings.n]
            keep = alive[slots]
            if not keep.any():
                del self._postings[tok]
                self._df.pop(tok, None)
                continue
            postings.slots = remap[slots[keep]].astype(np.int64)
            postings.tfs = postings.tfs[: postings.n][keep].copy()
            postings.n = len(postings.slots)
        n = len(live)
        capacity = max(16, 2 * n)
        self._doc_ids = np.resize(self._doc_ids[live], capacity)
        self._lengths = np.resize(self._lengths[live], capacity)
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

        Returns at most `limit` documents plus any that tie with the last one on BM25 (the
        caller breaks ties). `allowed` is a mask over slots (see `slot_mask`) restricting the
        candidates, e.g. to one memory type.
        """
        empty = KeywordHits(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), np.empty(0))
        total_weight = sum(u.weight for u in query.units)
        if not self._slot_of or total_weight <= 0 or limit <= 0:
            return empty
        n_docs = len(self._slot_of)
        avgdl = max(self._total_len / n_docs, 1.0)
        size = self._n_slots
        bm25 = np.zeros(size, dtype=np.float64)
        norm = _K1 * (1.0 - _B + _B * self._lengths[:size] / avgdl)
        present: dict[str, npt.NDArray[np.int64]] = {}
        for token in query.tokens:
            postings = self._postings.get(token)
            df = self._df.get(token, 0)
            if postings is None or df <= 0:
                continue
            slots = postings.slots[: postings.n]
            tfs = postings.tfs[: postings.n].astype(np.float64)
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
            bm25[slots] += idf * tfs * (_K1 + 1.0) / (tfs + norm[slots])
            present[token] = slots
        if not present:
            return empty
        covered = np.zeros(size, dtype=np.float64)
        unit_cover = np.zeros(size, dtype=np.float64)
        for unit in query.units:
            hit = False
            for token, strength in unit.alternatives:
                slots = present.get(token)
                if slots is not None:
                    if not hit:
                        unit_cover.fill(0.0)
                        hit = True
                    unit_cover[slots] = np.maximum(unit_cover[slots], strength)
            if hit:
                covered += unit.weight * unit_cover
        relevance = covered / total_weight
        mask = self._alive[:size] & (relevance >= min_relevance - 1e-9) & (covered > 0)
        if allowed is not None:
            mask &= allowed[:size]
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return empty
        scores = bm25[candidates]
        if candidates.size > limit:
            kth = np.partition(scores, candidates.size - limit)[candidates.size - limit]
            keep = scores >= kth
            candidates, scores = candidates[keep], scores[keep]
        order = np.lexsort((self._doc_ids[candidates], -scores))
        picked = candidates[order]
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
