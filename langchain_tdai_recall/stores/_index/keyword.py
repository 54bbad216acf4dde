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

Postings are growable C arrays (int32 slots, float32 weights), so adding a document costs
microseconds and a query costs a few vectorised passes over the posting lists of its tokens. A
document without any token (an emoji, punctuation) is indexed with no postings: it is never a
keyword hit and breaks nothing.

Memory. Tokens are numbered once per index; what each document contains (needed to forget it)
is kept as token numbers in one flat int32 array with per-slot offsets, not as a tuple of
strings per document, which cost about 0.5 KiB per memory. A small scope's first batch (a user's
few dozen memories, built in one go) is *packed*: every token's postings in two flat arrays with
per-token offsets, instead of two growable arrays per token (about 220 bytes each, most of a small
scope's keyword index, and the Python objects its build spent most of its time creating, issue
23). Later writes append to per-token lists; a token's postings are the packed ones followed by
its list's. `export_state` / `from_state` turn the index into plain arrays and back (for the
persisted snapshots of `stores._index.snapshot`).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.text.tokenize import Query

__all__ = ["KeywordHits", "KeywordIndex", "KeywordState"]

_K1: Final = 1.2
_B: Final = 0.75
_COMPACT_RATIO: Final = 0.3
_SPARSE_MIN_SLOTS: Final = 65_536
"""From this many documents a query whose postings are few is scored sparsely (see below)."""
_SPARSE_SHARE: Final = 4
"""Score sparsely when the query's postings number at most 1/4 of the documents: then the
query's work is proportional to its postings, not to the scope (a dense pass over 1M documents
costs about half a millisecond, and the dense path makes about eight)."""
_PACK_MAX_DOCS: Final = 4096
"""A first batch of at most this many documents into an empty index is packed (see `Memory`)."""
_UNPACK_RATIO: Final = 4
"""Packed postings move into the per-token lists once those hold this many times more."""
_EMPTY_SLOTS: Final = np.empty(0, dtype=np.int32)
_EMPTY_WEIGHTS: Final = np.empty(0, dtype=np.float32)
_REFERENCE_LENGTH: Final = 16.0
"""Document length (in tokens) at which BM25's length normalisation is neutral. A fixed
reference instead of the collection's average keeps each posting's weight independent of the
rest of the collection, so it is computed once, at insert."""


class _Postings:
    """Slots and BM25 term weights of one token, in growable C arrays.

    Appends are cheap, and numpy reads the arrays without copying.
    """

    __slots__ = ("slots", "weights")

    def __init__(self, slots: bytes = b"", weights: bytes = b"") -> None:
        self.slots = array("i", slots)
        self.weights = array("f", weights)

    def views(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        """Zero-copy numpy views; valid until the next append (callers hold the index lock)."""
        return (
            np.frombuffer(self.slots, dtype=np.int32),
            np.frombuffer(self.weights, dtype=np.float32),
        )


@dataclass(frozen=True, slots=True)
class KeywordState:
    """A `KeywordIndex` as plain arrays (live documents only), for persisting and restoring."""

    tokenizer_identity: str
    tokens: list[str]
    """Token of each posting list, in token-number order."""
    posting_starts: npt.NDArray[np.int64]
    """Offsets of each token's postings in `slots`/`weights` (len(tokens) + 1 entries)."""
    slots: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    doc_ids: npt.NDArray[np.int64]
    """Document id of each slot."""
    order_keys: npt.NDArray[np.int64]
    term_starts: npt.NDArray[np.int64]
    """Offsets of each slot's token numbers in `term_ids` (slots + 1 entries)."""
    term_ids: npt.NDArray[np.int32]


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
        self._vocab: dict[str, int] = {}
        """Token to token number."""
        self._lists: dict[int, _Postings] = {}
        """Postings appended by token number (after the packed ones, if any)."""
        self._packed_starts = np.zeros(1, dtype=np.int64)
        """Offsets of the packed postings of token numbers 0 .. len - 2 (see `Memory`)."""
        self._packed_slots = _EMPTY_SLOTS
        self._packed_weights = _EMPTY_WEIGHTS
        self._appended = 0
        """Postings held in `_lists`."""
        self._dead: dict[int, int] = {}
        """Per token number, postings that belong to removed documents (document frequency is
        the posting count minus this)."""
        self._slot_of: dict[int, int] = {}
        self._doc_ids = np.empty(16, dtype=np.int64)
        self._order_keys = np.zeros(16, dtype=np.int64)
        """Per slot: the caller's tie-break key (higher first) for equal BM25 scores."""
        self._alive = np.zeros(16, dtype=bool)
        self._term_ids = array("i")
        """Token numbers of every slot's distinct tokens, slot after slot."""
        self._term_starts = array("q", [0])
        """Offset of each slot's token numbers in `_term_ids` (one more entry than slots)."""
        self._n_slots = 0
        self._position: npt.NDArray[np.int32] | None = None
        """Scratch of the sparse search: a slot's position in the query's universe, else -1."""

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._slot_of

    @property
    def nbytes(self) -> int:
        """Approximate bytes held (arrays, posting lists, the vocabulary and the slot map), O(1).

        Per token: its string and a dict slot (about 100 bytes on CPython 3.11), plus about 220
        for a posting-list object when it has one (not packed); per posting: 8 bytes in the
        lists and 4 in the per-slot token numbers; per slot: the three arrays and a dict slot
        with two ints.
        """
        postings = len(self._term_ids)
        arrays = self._doc_ids.nbytes + self._order_keys.nbytes + self._alive.nbytes
        return (
            100 * len(self._vocab)
            + 220 * len(self._lists)
            + 8 * self._packed_starts.size
            + 12 * postings
            + 8 * len(self._term_starts)
            + arrays
            + 100 * len(self._slot_of)
        )

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

    def _token_number(self, token: str) -> int:
        number = self._vocab.get(token)
        if number is None:
            number = self._vocab[token] = len(self._vocab)
        return number

    def _list(self, number: int) -> _Postings:
        """The appended postings of a token, created on first use."""
        postings = self._lists.get(number)
        if postings is None:
            postings = self._lists[number] = _Postings()
        return postings

    def _postings(self, number: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        """A token's slots and weights: the packed ones, then the appended ones."""
        appended = self._lists.get(number)
        if number + 1 >= self._packed_starts.size:
            return appended.views() if appended is not None else (_EMPTY_SLOTS, _EMPTY_WEIGHTS)
        start, end = int(self._packed_starts[number]), int(self._packed_starts[number + 1])
        slots, weights = self._packed_slots[start:end], self._packed_weights[start:end]
        if appended is None or not appended.slots:
            return slots, weights
        more_slots, more_weights = appended.views()
        return np.concatenate((slots, more_slots)), np.concatenate((weights, more_weights))

    def _count(self, number: int) -> int:
        """A token's postings (live and dead)."""
        appended = self._lists.get(number)
        count = len(appended.slots) if appended is not None else 0
        if number + 1 < self._packed_starts.size:
            count += int(self._packed_starts[number + 1] - self._packed_starts[number])
        return count

    def _unpack(self) -> None:
        """Move the packed postings into the per-token lists (in front of what they hold)."""
        starts = self._packed_starts.tolist()
        slots, weights = self._packed_slots, self._packed_weights
        for number, (start, end) in enumerate(itertools.pairwise(starts)):
            if end == start:
                continue
            postings = _Postings(slots[start:end].tobytes(), weights[start:end].tobytes())
            appended = self._lists.get(number)
            if appended is not None:
                postings.slots.extend(appended.slots)
                postings.weights.extend(appended.weights)
            self._lists[number] = postings
            self._appended += end - start
        self._packed_starts = np.zeros(1, dtype=np.int64)
        self._packed_slots, self._packed_weights = _EMPTY_SLOTS, _EMPTY_WEIGHTS

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
        else:
            self._term_starts.extend([len(self._term_ids)] * n)
        self._doc_ids[slot0 : slot0 + n] = np.asarray(doc_ids, dtype=np.int64)
        self._order_keys[slot0 : slot0 + n] = np.asarray(keys, dtype=np.int64)
        self._alive[slot0 : slot0 + n] = True
        self._slot_of.update(zip(doc_ids, range(slot0, slot0 + n), strict=True))
        self._n_slots += n

    def _add_postings(
        self,
        flat: list[int],
        vocab: dict[str, int],
        token_lists: Sequence[Sequence[str]],
        slot0: int,
    ) -> None:
        """Append the postings and term lists of consecutive new slots from `slot0`."""
        n = len(token_lists)
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n)
        docs = np.repeat(np.arange(n, dtype=np.int64), lengths)
        vsize = max(len(vocab), 1)
        pack = not self._vocab and n <= _PACK_MAX_DOCS
        pairs, tfs = np.unique(docs * vsize + np.asarray(flat, dtype=np.int64), return_counts=True)
        pair_doc, pair_tok = np.divmod(pairs, vsize)  # sorted by document, then token
        number_of = np.fromiter(
            (self._token_number(tok) for tok in vocab), dtype=np.int32, count=len(vocab)
        )
        self._term_ids.frombytes(number_of[pair_tok].tobytes())
        ends = len(self._term_ids) - len(pair_doc) + np.cumsum(np.bincount(pair_doc, minlength=n))
        self._term_starts.frombytes(ends.astype(np.int64).tobytes())
        tf = tfs.astype(np.float64)
        norm = _K1 * (1.0 - _B + _B * lengths[pair_doc] / _REFERENCE_LENGTH)
        weights = (tf * (_K1 + 1.0) / (tf + norm)).astype(np.float32)
        order = np.argsort(pair_tok, kind="stable")  # by token, then by document
        tok_sorted = pair_tok[order]
        slots_sorted = (pair_doc[order] + slot0).astype(np.int32)
        weights_sorted = weights[order]
        if pack:  # the index was empty: its token numbers are this batch's, in order
            counts = np.bincount(tok_sorted, minlength=len(vocab))
            self._packed_starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            self._packed_slots = slots_sorted
            self._packed_weights = weights_sorted
            return
        bounds = np.flatnonzero(np.diff(tok_sorted)) + 1
        starts = np.concatenate(([0], bounds)).tolist()
        ends_list = np.concatenate((bounds, [len(tok_sorted)])).tolist()
        for start, end in zip(starts, ends_list, strict=True):
            postings = self._list(int(number_of[int(tok_sorted[start])]))
            postings.slots.frombytes(slots_sorted[start:end].tobytes())
            postings.weights.frombytes(weights_sorted[start:end].tobytes())
        self._appended += len(tok_sorted)
        packed = self._packed_slots.size
        if packed and self._appended > _UNPACK_RATIO * packed:
            self._unpack()

    def add(self, doc_id: int, tokens: Sequence[str], order_key: int = 0) -> None:
        """Index `tokens` under `doc_id`, replacing an earlier version of the same id."""
        if doc_id in self._slot_of:
            self.remove([doc_id])
        slot = self._n_slots
        self._reserve(slot + 1)
        counts = Counter(tokens)
        length_norm = _K1 * (1.0 - _B + _B * len(tokens) / _REFERENCE_LENGTH)
        for tok, tf in counts.items():
            number = self._token_number(tok)
            postings = self._list(number)
            self._appended += 1
            postings.slots.append(slot)
            postings.weights.append(tf * (_K1 + 1.0) / (tf + length_norm))
            self._term_ids.append(number)
        self._term_starts.append(len(self._term_ids))
        self._doc_ids[slot] = doc_id
        self._order_keys[slot] = order_key
        self._alive[slot] = True
        self._slot_of[doc_id] = slot
        self._n_slots += 1

    def remove(self, doc_ids: Sequence[int]) -> None:
        """Forget documents; unknown ids are ignored. Space is reclaimed in batches."""
        starts, term_ids, dead = self._term_starts, self._term_ids, self._dead
        for doc_id in doc_ids:
            slot = self._slot_of.pop(doc_id, None)
            if slot is None:
                continue
            self._alive[slot] = False
            for number in term_ids[starts[slot] : starts[slot + 1]]:
                dead[number] = dead.get(number, 0) + 1
        n_dead = self._n_slots - len(self._slot_of)
        if n_dead > 64 and n_dead > _COMPACT_RATIO * self._n_slots:
            self._compact()

    def _compact(self) -> None:
        """Drop dead slots and unused tokens: renumber live slots and tokens in order."""
        size = self._n_slots
        alive = self._alive[:size]
        live = np.flatnonzero(alive)
        remap = (np.cumsum(alive) - 1).astype(np.int32)
        kept: dict[int, _Postings] = {}
        token_remap = np.full(max(len(self._vocab), 1), -1, dtype=np.int32)
        names = list(self._vocab)
        vocab: dict[str, int] = {}
        appended = 0
        for number in range(len(names)):
            slots, weights = self._postings(number)
            keep = alive[slots]
            if not keep.any():
                continue
            token_remap[number] = len(kept)
            vocab[names[number]] = len(kept)
            kept[len(kept)] = _Postings(remap[slots[keep]].tobytes(), weights[keep].tobytes())
            appended += int(keep.sum())
        starts = np.frombuffer(self._term_starts, dtype=np.int64)
        lengths = np.diff(starts)
        owner = np.repeat(np.arange(size), lengths)
        term_ids = token_remap[np.frombuffer(self._term_ids, dtype=np.int32)[alive[owner]]]
        new_starts = np.concatenate(([0], np.cumsum(lengths[live]))).astype(np.int64)
        self._vocab, self._lists, self._dead, self._appended = vocab, kept, {}, appended
        self._packed_starts = np.zeros(1, dtype=np.int64)
        self._packed_slots, self._packed_weights = _EMPTY_SLOTS, _EMPTY_WEIGHTS
        self._term_ids = array("i", term_ids.astype(np.int32).tobytes())
        self._term_starts = array("q", new_starts.tobytes())
        n = len(live)
        capacity = max(16, 2 * n)
        self._doc_ids = np.resize(self._doc_ids[live], capacity)
        self._order_keys = np.resize(self._order_keys[live], capacity)
        self._alive = np.zeros(capacity, dtype=bool)
        self._alive[:n] = True
        self._slot_of = {int(d): i for i, d in enumerate(self._doc_ids[:n].tolist())}
        self._n_slots = n

    def export_state(self) -> KeywordState:
        """The live documents as plain arrays (compacts the index first when needed)."""
        if self._n_slots != len(self._slot_of) or self._dead:
            self._compact()
        n = self._n_slots
        n_tokens = len(self._vocab)
        counts = np.fromiter((self._count(k) for k in range(n_tokens)), np.int64, n_tokens)
        lists = [self._postings(k) for k in range(n_tokens)]
        return KeywordState(
            tokenizer_identity=self.tokenizer_identity,
            tokens=list(self._vocab),
            posting_starts=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            slots=np.concatenate([p[0] for p in lists] or [_EMPTY_SLOTS]).astype(
                np.int32, copy=False
            ),
            weights=np.concatenate([p[1] for p in lists] or [_EMPTY_WEIGHTS]).astype(
                np.float32, copy=False
            ),
            doc_ids=self._doc_ids[:n].copy(),
            order_keys=self._order_keys[:n].copy(),
            term_starts=np.frombuffer(self._term_starts, dtype=np.int64).copy(),
            term_ids=np.frombuffer(self._term_ids, dtype=np.int32).copy(),
        )

    @classmethod
    def from_state(cls, state: KeywordState) -> KeywordIndex:
        """An index equal to the one `state` was exported from.

        Raises:
            ValueError: If the arrays are inconsistent (a damaged snapshot).
        """
        n = int(state.doc_ids.size)
        n_tokens = len(state.tokens)
        ps, ts = state.posting_starts, state.term_starts
        if (
            ps.size != n_tokens + 1
            or int(ps[0]) != 0
            or int(ps[-1]) != state.slots.size
            or state.weights.size != state.slots.size
            or state.order_keys.size != n
            or ts.size != n + 1
            or int(ts[0]) != 0
            or int(ts[-1]) != state.term_ids.size
            or np.any(np.diff(ps) < 0)
            or np.any(np.diff(ts) < 0)
            or (state.slots.size and (state.slots.min() < 0 or state.slots.max() >= n))
            or (
                state.term_ids.size
                and (state.term_ids.min() < 0 or state.term_ids.max() >= n_tokens)
            )
            or len(set(state.tokens)) != n_tokens
        ):
            msg = "inconsistent keyword index arrays"
            raise ValueError(msg)
        index = cls(state.tokenizer_identity)
        index._vocab = {tok: i for i, tok in enumerate(state.tokens)}
        slots, weights = state.slots.tobytes(), state.weights.tobytes()
        bounds = (ps * 4).tolist()
        index._lists = {
            k: _Postings(slots[a:b], weights[a:b])
            for k, (a, b) in enumerate(itertools.pairwise(bounds))
        }
        index._appended = int(state.slots.size)
        index._reserve(n)
        index._doc_ids[:n] = state.doc_ids
        index._order_keys[:n] = state.order_keys
        index._alive[:n] = True
        index._term_ids = array("i", state.term_ids.astype(np.int32).tobytes())
        index._term_starts = array("q", ts.astype(np.int64).tobytes())
        index._slot_of = dict(zip(state.doc_ids.tolist(), range(n), strict=True))
        if len(index._slot_of) != n:
            msg = "duplicate document ids in the keyword index arrays"
            raise ValueError(msg)
        index._n_slots = n
        return index

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
        size = self._n_slots
        matched, idf_of, absent_idf = self._matched(query)
        touched = sum(len(m[2]) for m in matched)
        universe = None
        if size >= _SPARSE_MIN_SLOTS and touched * _SPARSE_SHARE <= size:
            universe = self._universe([m[2] for m in matched])
        try:
            return self._score(
                query,
                matched,
                universe,
                idf_of=idf_of,
                absent_idf=absent_idf,
                limit=limit,
                allowed=allowed,
                also=also,
            )
        finally:
            if universe is not None:
                assert self._position is not None
                self._position[universe] = -1

    def score(self, query: Query, doc_ids: Sequence[int]) -> KeywordHits:
        """Scores of the given documents only (unknown ids are skipped), as `search` gives them.

        The same numbers as `search(..., also=doc_ids)` reports for documents it did not pick,
        computed from the documents' own postings (a binary search per query token), so the
        keyword leg can run before the vector leg's candidates are known. `found` is 0, and
        `scope_coverage` is the one of the given documents, not of the scope.
        """
        total_weight = sum(u.weight for u in query.units)
        wanted = [d for d in dict.fromkeys(int(d) for d in doc_ids) if d in self._slot_of]
        if not wanted or total_weight <= 0:
            return KeywordHits.empty()
        targets = np.asarray(sorted(self._slot_of[d] for d in wanted), dtype=np.int32)
        matched, idf_of, absent_idf = self._matched(query)
        narrowed = []
        for token, idf, slots, weights in matched:
            at = np.minimum(np.searchsorted(slots, targets), slots.size - 1)
            hit = slots[at] == targets
            narrowed.append((token, idf, targets[hit], weights[at[hit]]))
        universe = self._universe([m[2] for m in narrowed])
        try:
            return self._score(
                query,
                narrowed,
                universe,
                idf_of=idf_of,
                absent_idf=absent_idf,
                limit=0,
                allowed=None,
                also=wanted,
            )
        finally:
            assert self._position is not None
            self._position[universe] = -1

    def _matched(
        self, query: Query
    ) -> tuple[
        list[tuple[str, float, npt.NDArray[np.int32], npt.NDArray[np.float32]]],
        dict[str, float],
        float,
    ]:
        """Per query token present in the index: (token, idf, slots, weights); and every idf."""
        n_docs = len(self._slot_of)
        idf_of: dict[str, float] = {}
        absent_idf = math.log1p((n_docs + 0.5) / 0.5)
        matched = []
        for token in query.tokens:
            number = self._vocab.get(token, -1)
            df = 0 if number < 0 else self._count(number) - self._dead.get(number, 0)
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5)) if df > 0 else absent_idf
            idf_of[token] = idf
            if df > 0:
                matched.append((token, idf, *self._postings(number)))
        return matched, idf_of, absent_idf

    def _universe(self, lists: list[npt.NDArray[np.int32]]) -> npt.NDArray[np.int32]:
        """The distinct slots of `lists`, numbered in `_position` in order of first appearance.

        O(postings) without sorting; the caller resets `_position[universe]` to -1 afterwards.
        """
        if self._position is None or self._position.size < self._n_slots:
            self._position = np.full(len(self._doc_ids), -1, dtype=np.int32)
        position = self._position
        parts: list[npt.NDArray[np.int32]] = []
        count = 0
        for slots in lists:
            new = slots[position[slots] < 0]
            position[new] = np.arange(count, count + new.size, dtype=np.int32)
            count += new.size
            parts.append(new)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)

    def _score(
        self,
        query: Query,
        matched: list[tuple[str, float, npt.NDArray[np.int32], npt.NDArray[np.float32]]],
        universe: npt.NDArray[np.int32] | None,
        *,
        idf_of: dict[str, float],
        absent_idf: float,
        limit: int,
        allowed: npt.NDArray[np.bool_] | None,
        also: Sequence[int],
    ) -> KeywordHits:
        """`search` over the slots (dense) or over the universe's positions (sparse).

        Both give the same numbers: each slot receives the same float32 additions in the same
        order, and the order of the hits is total (it ends with the doc id).
        """
        size = self._n_slots
        n = size if universe is None else universe.size
        position = self._position
        present: dict[str, npt.NDArray[np.int32]] = {}
        bm25 = np.zeros(n, dtype=np.float32)
        for token, idf, slots, weights in matched:
            at = slots if universe is None else position[slots]  # type: ignore[index]
            bm25[at] += np.float32(idf) * weights
            present[token] = at
        covered, covered_idf, scope_weight, idf_total = _coverage(
            query, present, idf_of, absent_idf, n
        )
        total_weight = sum(u.weight for u in query.units)
        scope_coverage = min(scope_weight / total_weight, 1.0)
        # scores are normalised only where they are needed (candidates, then the picked
        # hits): at 1M documents every pass over the whole scope costs about half a ms
        weight_norm = np.float32(total_weight)
        idf_norm = np.float32(max(idf_total, 1e-9))
        mask = covered > 0
        if len(self._slot_of) != size:
            mask &= self._alive[:size] if universe is None else self._alive[universe]
        if allowed is not None:
            mask &= allowed[:size] if universe is None else allowed[universe]
        candidates = np.flatnonzero(mask)  # positions (= slots when dense)
        ranked_c = np.minimum(covered_idf[candidates] / idf_norm, np.float32(1.0))
        if limit > 0 and candidates.size > limit:
            kth = np.partition(ranked_c, candidates.size - limit)[candidates.size - limit]
            keep = ranked_c >= kth
            candidates, ranked_c = candidates[keep], ranked_c[keep]
        slots_c = candidates if universe is None else universe[candidates]
        order = np.lexsort(
            (
                self._doc_ids[slots_c],
                -self._order_keys[slots_c],
                -bm25[candidates],
                -ranked_c,
            )
        )
        top = order[: max(limit, 0)]
        picked, picked_at = slots_c[top].astype(np.int64), candidates[top]
        chosen = set(picked.tolist())
        extra_slots = [
            slot
            for doc_id in dict.fromkeys(also)
            if (slot := self._slot_of.get(int(doc_id))) is not None and slot not in chosen
        ]
        found = len(picked)
        cov_p, idf_p, bm25_p = covered[picked_at], covered_idf[picked_at], bm25[picked_at]
        if extra_slots:
            extra = np.asarray(extra_slots, dtype=np.int64)
            cov_x, idf_x, bm25_x = self._at_slots(extra, universe, (covered, covered_idf, bm25))
            picked = np.concatenate((picked, extra))
            cov_p = np.concatenate((cov_p, cov_x))
            idf_p = np.concatenate((idf_p, idf_x))
            bm25_p = np.concatenate((bm25_p, bm25_x))
        return KeywordHits(
            self._doc_ids[picked].copy(),
            np.minimum(cov_p / weight_norm, np.float32(1.0)),
            np.minimum(idf_p / idf_norm, np.float32(1.0)),
            bm25_p,
            found=found,
            scope_coverage=scope_coverage,
        )

    def _at_slots(
        self,
        slots: npt.NDArray[np.int64],
        universe: npt.NDArray[np.int32] | None,
        arrays: tuple[npt.NDArray[np.float32], ...],
    ) -> list[npt.NDArray[np.float32]]:
        """Values of per-query score arrays at `slots`.

        Outside a sparse universe the values are zero: such a slot shares no token with the query.
        """
        if universe is None:
            return [a[slots] for a in arrays]
        assert self._position is not None
        at = self._position[slots]
        inside = at >= 0
        out = []
        for a in arrays:
            values = np.zeros(slots.size, dtype=np.float32)
            values[inside] = a[at[inside]]
            out.append(values)
        return out

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
    present: dict[str, npt.NDArray[np.int32]],
    idf_of: dict[str, float],
    absent_idf: float,
    size: int,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], float, float]:
    """Query coverage per slot, plain and idf-weighted, with the scope's and the query's totals.

    Returns (covered weight per slot, idf-weighted covered weight per slot, query weight whose
    base token occurs in the scope, idf-weighted query weight).

    Each unit adds its base strength where the base token occurs, and the rest of its weight
    where a boost token occurs (boost documents are a subset of base documents). A document
    holding several boosts gets the rest once: numpy's buffered `a[idx] += v` adds `v` once per
    distinct index, which is exactly the union, without sorting. The idf-weighted sums scale
    each unit by the inverse document frequency of its base token.
    """
    covered = np.zeros(size, dtype=np.float32)
    covered_idf = np.zeros(size, dtype=np.float32)
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
        extra = np.float32(unit.weight * (1.0 - unit.base_strength))
        union = boosts[0] if len(boosts) == 1 else np.concatenate(boosts)
        covered[union] += extra  # once per distinct slot, even if it holds several boosts
        covered_idf[union] += extra * np.float32(idf)
    return covered, covered_idf, scope_weight, idf_total
