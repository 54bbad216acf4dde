"""Per-scope vector index: exact cosine scores, fast candidate generation at scale.

Layout. Every vector is a row of one contiguous float32 array (the source of truth for scoring),
with a parallel int64 array of ids and a dict from id to row. Removal moves the last rows into
the holes, so rows stay dense and a removal batch costs O(batch) row moves, not O(size).

Search. Up to `EXACT_MAX_VECTORS` (4096) vectors, every row is scored by FAISS's flat inner
product. Above that, a 4-bit product quantiser in FAISS's SIMD "fast scan" layout
(`IndexPQFastScan`, two dimensions per sub-quantiser, dim / 4 bytes per vector) proposes a pool
of at least 256 candidates, which are rescored exactly. On the reference machine (2 cores,
384-d e5-like vectors, one thread, other jobs running) that took 1.7 ms p50 at 100k vectors with
recall@15 of 0.993 against the exact ranking (misses were near-ties, at most 0.0008 below the
exact 15th score), where the exact flat scan took 16 ms (7-8 ms on an idle machine; it is
memory-bound). The quantiser is trained on a 2048-vector sample when the index first grows
past the threshold (about 0.3-0.7 s) and again whenever it has grown 4x since.
`benchmarks/perf/README.md` has the measurements behind these choices (flat, numpy, scalar
quantisers, IVF, PQ fast scan).

Precision. Up to the PQ threshold rows are float32. When the quantiser is first trained the rows
become float16 (half the memory: 768 bytes instead of 1.5 KiB per 384-d vector, the largest part
of a big scope's footprint) and stay so while it exists; they go back to float32 when removals
drop the quantiser. A float16 component of a unit vector is within 2**-11 of its float32 value
relative, so a cosine moves by about 1e-5 (3.5e-5 at most on the quality benchmarks); rankings
on the quality benchmarks are unchanged (`benchmarks/perf/README.md`).

Scores. Every returned score is the inner product of the stored vectors (float32 or float16,
see above) with the float32 query, accumulated in float64 and rounded to float32, whichever path
produced the candidate; hits are ordered by score descending, then id ascending. In the exact
path the ranking is exact too: the flat scan's candidate list is widened until its float32
rounding error cannot change the top k.

Snapshots. `export_state` / `from_state` turn the index, quantiser included (FAISS's own binary
serialisation, not pickle), into plain arrays and back, for `stores._index.snapshot`.

Threads. On a 2-core machine one FAISS query is slower with 2 OpenMP threads than with 1, so
every FAISS call here runs with `omp_set_num_threads(1)` and restores the caller's value right
after. The setting is per thread in libgomp and LLVM libomp, so other threads of the application
are not affected, and setting it once at import would not reach the worker threads that serve
async calls.

Thread safety. `VectorIndex` is not thread-safe: the caller serialises every call (the store
holds a lock around each one). Nothing here pickles or deserialises data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import faiss
import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import ConfigError

__all__ = ["EXACT_MAX_VECTORS", "VectorIndex", "VectorState"]

logger = logging.getLogger(__name__)

EXACT_MAX_VECTORS: Final = 4096
"""Largest size searched by an exact flat scan; above it a PQ fast-scan proposes candidates."""
_PQ_DROP_BELOW: Final = 2048
"""Removals that shrink the index below this size drop the quantiser (hysteresis)."""
_RETRAIN_GROWTH: Final = 4
"""Retrain the quantiser when the index has grown this many times since the last training."""
_TRAIN_SAMPLE: Final = 2048
"""Vectors sampled (deterministically) to train the quantiser's codebooks."""
_TRAIN_ITERATIONS: Final = 10
"""k-means iterations per sub-quantiser (16 centroids in 2-D; FAISS's default is 25)."""
_POOL_MIN: Final = 256
"""Smallest candidate pool rescored exactly in the PQ path."""
_POOL_PER_K: Final = 16
"""Candidate pool size per requested hit in the PQ path."""
_EXACT_SUBSET_MAX: Final = 8192
"""A filter (`allowed`) of up to this many ids is searched exactly, row by row."""
_DICT_LOOKUP_MAX: Final = 2048
"""Up to this many filter ids are mapped to rows through the dict; more use a sorted view."""
_EXACT_SLACK: Final = 32
"""Extra candidates taken from the flat scan before exact rescoring."""
_GROWTH: Final = 1.5
"""Capacity growth factor of the row buffers."""
_HALF_ROWS = True
"""Keep rows as float16 while the quantiser exists (`benchmarks/quality/rank_compare.py`
turns it off to compare rankings with float32 rows)."""
_CHUNK: Final = 65_536
"""Rows converted to float32 at a time when (re)building the quantiser."""

_Ids = npt.NDArray[np.int64]
_Scores = npt.NDArray[np.float32]
_Rows = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class VectorState:
    """A `VectorIndex` as plain arrays, for persisting and restoring."""

    dim: int
    ids: npt.NDArray[np.int64]
    rows: npt.NDArray[np.float32] | npt.NDArray[np.float16]
    """One row per id: float32 without a quantiser, float16 with one."""
    quantiser: npt.NDArray[np.uint8]
    """FAISS's serialisation of the PQ fast-scan index (empty when there is none)."""
    trained_size: int


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run the enclosed FAISS calls on the calling thread only, then restore its setting."""
    previous = faiss.omp_get_max_threads()
    if previous == 1:
        yield
        return
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def _sorted_unique(values: _Ids) -> _Ids:
    """Sorted distinct values (sort-based; numpy's hash-based `unique` is slower here)."""
    out = np.sort(values)
    if out.size > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def _empty() -> tuple[_Ids, _Scores]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)


class VectorIndex:
    """Inner-product index over L2-normalised float32 vectors keyed by int64 ids.

    Scores are exact cosine similarities (for normalised inputs). Small indexes are searched
    exhaustively; large ones use a product-quantised candidate pool that is rescored exactly.

    Not thread-safe: serialise all calls.

    Args:
        dim: Dimension of every vector.

    Raises:
        ConfigError: If `dim` is not a positive integer.

    Example:
        ```python
        import numpy as np

        index = VectorIndex(3)
        index.add(np.array([7, 8]), np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
        ids, scores = index.search(np.array([1, 0, 0], dtype=np.float32), 1)
        assert ids.tolist() == [7] and scores.tolist() == [1.0]
        ```
    """

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            msg = f"dim must be a positive integer, got {dim!r}"
            raise ConfigError(msg)
        self._dim = dim
        self._rows: _Rows | npt.NDArray[np.float16] = np.empty((0, dim), dtype=np.float32)
        self._ids: _Ids = np.empty(0, dtype=np.int64)
        self._size = 0
        self._position: dict[int, int] = {}
        self._pq: faiss.IndexPQFastScan | None = None
        self._trained_size = 0
        self._sorted: tuple[_Ids, npt.NDArray[np.intp]] | None = None  # ids sorted, their rows

    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return self._dim

    def __len__(self) -> int:
        return self._size

    def __contains__(self, id_: object) -> bool:
        return id_ in self._position

    @property
    def nbytes(self) -> int:
        """Approximate bytes held by the index (buffers, quantiser codes and the id map)."""
        pq_bytes = 0 if self._pq is None else int(self._pq.codes.size())
        dict_bytes = 100 * len(self._position)  # dict slot plus two boxed ints, CPython 3.11
        return int(self._rows.nbytes + self._ids.nbytes) + pq_bytes + dict_bytes

    # ------------------------------------------------------------------ mutation

    def add(self, ids: npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Insert vectors; an id already present has its vector replaced.

        Args:
            ids: int64 ids, shape (n,). Within one call the last occurrence of an id wins.
            vectors: float32 vectors, shape (n, dim), already L2-normalised.

        Raises:
            ConfigError: If the shapes disagree or a vector is not finite.
        """
        id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        vec = np.asarray(vectors, dtype=np.float32)
        if vec.ndim == 1 and id_arr.size == 1:
            vec = vec.reshape(1, -1)
        if vec.ndim != 2 or vec.shape != (id_arr.size, self._dim):
            msg = (
                f"expected vectors of shape ({id_arr.size}, {self._dim}) for {id_arr.size} ids, "
                f"got {vec.shape}"
            )
            raise ConfigError(msg)
        if id_arr.size == 0:
            return
        if not np.isfinite(vec).all():
            msg = "vectors must be finite (no NaN or infinity)"
            raise ConfigError(msg)
        keep = self._last_occurrences(id_arr)
        if keep is not None:
            id_arr, vec = id_arr[keep], vec[keep]
        lookup = self._position.get
        found = [lookup(i) for i in id_arr.tolist()]
        is_new = np.fromiter((p is None for p in found), dtype=bool, count=len(found))
        if not is_new.all():
            old_rows = np.array([p for p in found if p is not None], dtype=np.int64)
            self._replace(old_rows, np.ascontiguousarray(vec[~is_new]))
        if is_new.any():
            self._append(id_arr[is_new], np.ascontiguousarray(vec[is_new]))
        self._maybe_train()

    def remove(self, ids: Sequence[int] | npt.ArrayLike) -> None:
        """Remove vectors by id; unknown ids are ignored.

        Cost is proportional to the number of ids removed (plus a light pass over the quantiser
        when there is one), so batch removals where possible.

        Args:
            ids: Ids to remove.
        """
        id_list = _sorted_unique(np.asarray(ids, dtype=np.int64).reshape(-1)).tolist()
        pop = self._position.pop
        gone = [p for p in (pop(i, None) for i in id_list) if p is not None]
        if not gone:
            return
        old_size = self._size
        new_size = old_size - len(gone)
        removed = np.zeros(old_size - new_size, dtype=bool)  # flags over the tail rows
        holes: list[int] = []
        for p in gone:
            if p >= new_size:
                removed[p - new_size] = True
            else:
                holes.append(p)
        if holes:
            sources = (np.flatnonzero(~removed) + new_size).astype(np.int64)
            dest = np.array(sorted(holes), dtype=np.int64)
            self._rows[dest] = self._rows[sources]
            self._ids[dest] = self._ids[sources]
            self._position.update(zip(self._ids[dest].tolist(), dest.tolist(), strict=True))
            if self._pq is not None:
                self._move_codes(sources, dest)
        self._size = new_size
        self._sorted = None
        if self._pq is not None:
            if new_size < _PQ_DROP_BELOW:
                self._pq = None
                self._trained_size = 0
                self._rows = self._rows.astype(np.float32)
            else:
                with _one_thread():
                    self._pq.remove_ids(faiss.IDSelectorRange(new_size, old_size))
        self._shrink()

    # ------------------------------------------------------------------ search

    def search(
        self,
        query: npt.ArrayLike,
        k: int,
        *,
        allowed: npt.ArrayLike | None = None,
    ) -> tuple[_Ids, _Scores]:
        """Return the ids and exact cosine scores of the best `k` vectors.

        Args:
            query: float32 vector of shape (dim,), L2-normalised.
            k: Maximum number of hits; fewer are returned when fewer vectors qualify.
            allowed: Optional ids restricting the candidates (unknown ids are ignored).

        Returns:
            (ids int64, scores float32), best first; equal scores are ordered by id ascending.

        Raises:
            ConfigError: If the query has the wrong shape or is not finite, or `k` is negative.
        """
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape != (self._dim,):
            msg = f"expected a query of shape ({self._dim},), got {np.shape(query)}"
            raise ConfigError(msg)
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            msg = f"k must be a non-negative integer, got {k!r}"
            raise ConfigError(msg)
        if not np.isfinite(q).all():
            msg = "query must be finite (no NaN or infinity)"
            raise ConfigError(msg)
        k = int(k)
        if k == 0 or self._size == 0:
            return _empty()
        q = np.ascontiguousarray(q)
        if allowed is not None:
            return self._search_allowed(q, k, allowed)
        if self._pq is None or self._size <= EXACT_MAX_VECTORS:
            return self._exact(q, k, None)
        pool = min(self._size, max(_POOL_MIN, _POOL_PER_K * k))
        with _one_thread():
            _, cand = self._pq.search(q.reshape(1, -1), pool)
        return self._rescore(q, cand[0][cand[0] >= 0], k)

    def scores(self, query: npt.ArrayLike, ids: npt.ArrayLike) -> dict[int, float]:
        """Exact cosine of `query` with each known id among `ids` (unknown ids are left out).

        Args:
            query: float32 vector of shape (dim,), L2-normalised.
            ids: Ids to score.

        Returns:
            Id to score.
        """
        q = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(-1))
        if q.shape != (self._dim,) or not np.isfinite(q).all():
            msg = f"expected a finite query of shape ({self._dim},), got {np.shape(query)}"
            raise ConfigError(msg)
        rows = self._rows_of(np.asarray(ids, dtype=np.int64).reshape(-1))
        if rows.size == 0:
            return {}
        values = self._exact_scores(q, rows)
        return dict(zip(self._ids[rows].tolist(), values.tolist(), strict=True))

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _last_occurrences(ids: _Ids) -> npt.NDArray[np.intp] | None:
        """Indices keeping the last occurrence of each id, or None when ids are unique."""
        if ids.size < 2:
            return None
        _, first_in_reversed = np.unique(ids[::-1], return_index=True)
        if first_in_reversed.size == ids.size:
            return None
        return np.sort(ids.size - 1 - first_in_reversed)

    def _replace(self, rows: _Ids, vectors: _Rows) -> None:
        self._rows[rows] = vectors
        if self._pq is not None:
            with _one_thread():
                codes = self._pq.sa_encode(vectors)
            packer = self._pq.get_CodePacker()  # type: ignore[attr-defined]  # not in faiss stubs
            target = self._pq.codes.data()
            for code, row in zip(codes, rows.tolist(), strict=True):
                packer.pack_1_c(faiss.swig_ptr(np.ascontiguousarray(code)), row, target)

    def _append(self, ids: _Ids, vectors: _Rows) -> None:
        start, end = self._size, self._size + ids.size
        if end > self._rows.shape[0]:
            # the first batch reserves only its own rows: most scopes (a user's few dozen
            # memories) never grow, and 64 rows of 384-d are 96 KiB each (issue 23)
            first = self._rows.shape[0] == 0
            self._reserve(end if first else max(end, int(self._rows.shape[0] * _GROWTH), 64))
        self._rows[start:end] = vectors
        self._ids[start:end] = ids
        self._position.update(zip(ids.tolist(), range(start, end), strict=True))
        self._size = end
        self._sorted = None
        if self._pq is not None:
            with _one_thread():
                self._pq.add(vectors)

    def _reserve(self, capacity: int) -> None:
        rows = np.empty((capacity, self._dim), dtype=self._rows.dtype)
        ids = np.empty(capacity, dtype=np.int64)
        rows[: self._size] = self._rows[: self._size]
        ids[: self._size] = self._ids[: self._size]
        self._rows, self._ids = rows, ids

    def _shrink(self) -> None:
        """Release buffer space after large removals (keeps amortised O(1) growth)."""
        capacity = self._rows.shape[0]
        if capacity > 64 and self._size * _GROWTH * _GROWTH < capacity:
            self._reserve(max(64, int(self._size * _GROWTH)))

    def _move_codes(self, sources: _Ids, dest: _Ids) -> None:
        assert self._pq is not None
        packer = self._pq.get_CodePacker()  # type: ignore[attr-defined]  # not in faiss stubs
        codes = self._pq.codes.data()
        buf = np.empty(packer.code_size, dtype=np.uint8)
        ptr = faiss.swig_ptr(buf)
        for src, dst in zip(sources.tolist(), dest.tolist(), strict=True):
            packer.unpack_1_c(codes, src, ptr)
            packer.pack_1_c(ptr, dst, codes)

    def _maybe_train(self) -> None:
        if self._size <= EXACT_MAX_VECTORS:
            return
        if self._pq is not None and self._size < _RETRAIN_GROWTH * self._trained_size:
            return
        dim = self._dim
        m = dim // 2 if dim % 2 == 0 else dim
        pq = faiss.IndexPQFastScan(dim, m, 4, faiss.METRIC_INNER_PRODUCT)
        pq.pq.cp.niter = _TRAIN_ITERATIONS
        sample = np.random.default_rng(0).choice(self._size, _TRAIN_SAMPLE, replace=False)
        with _one_thread():
            pq.train(np.ascontiguousarray(self._rows[np.sort(sample)], dtype=np.float32))
            for start in range(0, self._size, _CHUNK):
                block = self._rows[start : min(start + _CHUNK, self._size)]
                pq.add(np.ascontiguousarray(block, dtype=np.float32))
        if _HALF_ROWS and self._rows.dtype != np.float16:
            self._rows = self._rows.astype(np.float16)
        logger.debug("vector index: trained PQ fast-scan (%d sub-quantisers) at %d", m, self._size)
        self._pq = pq
        self._trained_size = self._size

    def _exact_scores(self, q: npt.NDArray[np.float32], rows: npt.NDArray[np.intp]) -> _Scores:
        """Inner products of the given rows with `q`, in float64, rounded to float32."""
        block = self._rows[rows].astype(np.float64)
        scores: _Scores = np.einsum("ij,j->i", block, q.astype(np.float64)).astype(np.float32)
        return scores

    def _rescore(
        self, q: npt.NDArray[np.float32], rows: npt.NDArray[np.intp], k: int
    ) -> tuple[_Ids, _Scores]:
        scores = self._exact_scores(q, rows)
        ids = self._ids[rows]
        order = np.lexsort((ids, -scores))[:k]
        return ids[order].copy(), scores[order]

    def _exact(
        self, q: npt.NDArray[np.float32], k: int, subset: npt.NDArray[np.intp] | None
    ) -> tuple[_Ids, _Scores]:
        """Exact top-k over all rows or over `subset`, robust to float32 scan rounding."""
        total = self._size if subset is None else subset.size
        # |float32 dot - exact| <= dim * 2**-24 for unit vectors; twice that covers both scans.
        slack = 2.0 * self._dim * 2.0**-24
        take = min(total, k + _EXACT_SLACK)
        while True:
            coarse, rows = self._flat_scan(q, take, subset)
            ids, scores = self._rescore(q, rows, k)
            if take >= total or coarse[-1] < float(scores[-1]) - slack:
                return ids, scores
            take = min(total, take * 4)

    def _flat_scan(
        self, q: npt.NDArray[np.float32], take: int, subset: npt.NDArray[np.intp] | None
    ) -> tuple[_Scores, npt.NDArray[np.intp]]:
        """Top `take` rows by float32 inner product (rows, best first)."""
        if self._rows.dtype == np.float16:
            return self._flat_scan_half(q, take, subset)
        qq = q.reshape(1, -1)
        with _one_thread():
            if subset is None:
                scores, rows = faiss.knn(
                    qq, self._rows[: self._size], take, faiss.METRIC_INNER_PRODUCT
                )
                return scores[0], rows[0]
            sub = np.ascontiguousarray(subset, dtype=np.int64)
            dist = np.empty(take, dtype=np.float32)
            labels = np.empty(take, dtype=np.int64)
            faiss.knn_inner_products_by_idx(  # type: ignore[attr-defined]  # not in faiss stubs
                faiss.swig_ptr(qq),
                faiss.swig_ptr(self._rows),
                faiss.swig_ptr(sub),
                self._dim,
                1,
                self._rows.shape[0],
                sub.size,
                take,
                faiss.swig_ptr(dist),
                faiss.swig_ptr(labels),
            )
        return dist, labels

    def _flat_scan_half(
        self, q: npt.NDArray[np.float32], take: int, subset: npt.NDArray[np.intp] | None
    ) -> tuple[_Scores, npt.NDArray[np.intp]]:
        """`_flat_scan` over float16 rows (only small sets: the quantiser serves the rest)."""
        rows = np.arange(self._size) if subset is None else np.asarray(subset, dtype=np.intp)
        # einsum, not `@`: a matrix-vector product goes to BLAS, whose threads spin for several
        # times the CPU of the product on a busy machine (7.5 vs 2 ms of CPU for 1,500 rows)
        scores = np.einsum("ij,j->i", self._rows[rows].astype(np.float32), q)
        if take < scores.size:
            part = np.argpartition(-scores, take - 1)[:take]
        else:
            part = np.arange(scores.size)
        order = part[np.argsort(-scores[part], kind="stable")]
        return scores[order], rows[order]

    # ------------------------------------------------------------------ snapshots

    def export_state(self) -> VectorState:
        """The index as plain arrays (copies: later changes do not affect the state)."""
        quantiser = np.empty(0, dtype=np.uint8)
        if self._pq is not None:
            quantiser = faiss.serialize_index(self._pq)
        return VectorState(
            dim=self._dim,
            ids=self._ids[: self._size].copy(),
            rows=self._rows[: self._size].copy(),
            quantiser=quantiser,
            trained_size=self._trained_size,
        )

    @classmethod
    def from_state(cls, state: VectorState) -> VectorIndex:
        """An index equal to the one `state` was exported from (the arrays are adopted).

        Raises:
            ValueError: If the arrays are inconsistent (a damaged snapshot).
        """
        index = cls(state.dim)
        n = int(state.ids.size)
        with_pq = state.quantiser.size > 0
        expected = np.float16 if with_pq and _HALF_ROWS else np.float32
        if state.rows.shape != (n, state.dim) or state.rows.dtype != expected:
            msg = "inconsistent vector index arrays"
            raise ValueError(msg)
        if with_pq:
            with _one_thread():
                pq = faiss.deserialize_index(state.quantiser)  # already of its concrete class
            if not isinstance(pq, faiss.IndexPQFastScan) or pq.ntotal != n or pq.d != state.dim:
                msg = "the vector quantiser does not match the vectors"
                raise ValueError(msg)
            index._pq = pq
            index._trained_size = state.trained_size
        index._rows = state.rows
        index._ids = state.ids
        index._size = n
        index._position = dict(zip(state.ids.tolist(), range(n), strict=True))
        if len(index._position) != n:
            msg = "duplicate ids in the vector index arrays"
            raise ValueError(msg)
        return index

    def _rows_of(self, ids: _Ids) -> _Ids:
        """Sorted unique rows of the known ids among `ids`."""
        if ids.size <= _DICT_LOOKUP_MAX:
            lookup = self._position.get
            found = (p for p in map(lookup, ids.tolist()) if p is not None)
            return _sorted_unique(np.fromiter(found, dtype=np.int64))
        if self._sorted is None:
            order = np.argsort(self._ids[: self._size], kind="stable")
            self._sorted = (self._ids[order], order)
        keys, order = self._sorted
        at = np.minimum(np.searchsorted(keys, ids), keys.size - 1)
        hit = keys[at] == ids
        return _sorted_unique(order[at[hit]].astype(np.int64))

    def _search_allowed(
        self, q: npt.NDArray[np.float32], k: int, allowed: npt.ArrayLike
    ) -> tuple[_Ids, _Scores]:
        rows = self._rows_of(np.asarray(allowed, dtype=np.int64).reshape(-1))
        if rows.size == 0:
            return _empty()
        if self._pq is None or self._size <= EXACT_MAX_VECTORS or rows.size <= _EXACT_SUBSET_MAX:
            return self._exact(q, k, rows)
        # Over-fetch in proportion to the filter's selectivity (twice, for headroom); fall back
        # to an exact scan of the allowed rows if too few candidates survive the filter.
        member = np.zeros(self._size, dtype=bool)
        member[rows] = True
        base = max(_POOL_MIN, _POOL_PER_K * k)
        pool = min(self._size, -(-2 * base * self._size // rows.size))
        with _one_thread():
            _, cand = self._pq.search(q.reshape(1, -1), pool)
        cand = cand[0][cand[0] >= 0]
        cand = cand[member[cand]]
        if cand.size < min(rows.size, base):
            return self._exact(q, k, rows)
        return self._rescore(q, cand, k)
