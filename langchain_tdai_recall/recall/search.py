"""L1/L0 search: the keyword and embedding legs, fused into one relevance and one ranking.

Recall, `search_memories`, `search_conversations` and the tools all rank through `Searcher`; they
differ only in how they gate the ranked hits (see `recall.gate`).

Every hit carries two numbers (hybrid search, with `W = EMBEDDING_WEIGHT = 0.7`):

- `score`, the relevance in [0, 1] that thresholds and readers see:
  `W · max(cosine, 0) + (1 - W) · keyword coverage`. Both legs depend only on the query and the
  memory, so adding memories never lowers an existing hit's score.
- `rank`, the order of the hits: the same mix with the keyword leg's coverage weighted by how rare
  each query word is in the scope (`stores._index.keyword`). Rare, decisive words ("peanuts")
  count for more than the words most memories share. It is never compared with a threshold.

Candidates: the embedding leg's `3 × limit` nearest memories and the keyword leg's `3 × limit`
best-ranked memories; every candidate gets both legs' numbers (the keyword leg scores the
embedding candidates, and the embedding leg the keyword candidates), so a memory found by one leg
is not penalised for being missed by the other's cut. A memory whose vector is not computed yet
is scored by its keyword leg alone. With one leg (`keyword`, `embedding`, or a hybrid search whose
query embedding failed or timed out) the score is that leg's number.

Ties break by rank, then priority, then recency, then id, so results never depend on insertion
order or dictionary iteration. Measurements behind the weights: `benchmarks/results/quality.md`.

**Time.** A search may carry a `TimeWindow` (the dates a message asks about, resolved by
`text.timeexpr`). The rows whose activity time (else write time) falls in it are looked up in the
index's time table (`stores._index.times`); up to `TIME_SCORE_ALL` of them are all scored by
both legs, up to `TIME_SCAN_MAX` are narrowed to the vector leg's best `3 × limit` among them,
and from a wider window the scope's `TIME_WIDE_DEPTH × 3 × limit` nearest that fall in it join
(with, always, the keyword leg's candidates that are in the window). The best `3 × limit` of
them join the candidates, flagged `in_range`, and every in-range hit ranks `TIME_RANK_BOOST`
higher. Their relevance (`score`) is unchanged: whether one is injected is the gate's decision
(`recall.gate`, `recall.when`).

In a scope of `PARALLEL_LEGS_MIN_ROWS` rows or more, the two legs of a hybrid search run at the
same time (the vector scan on a worker thread: FAISS and numpy release the GIL), and the keyword
leg then scores the vector candidates it did not find itself; the numbers are the same as when
the legs run one after the other. At 1M memories this takes the search from about 12.7 to about
9 ms p50 on two cores (`benchmarks/results/scale.md`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall._runtime.threads import DaemonExecutor
from langchain_tdai_recall.stores._index.extras import MemoryFilter
from langchain_tdai_recall.stores._index.keyword import KeywordHits
from langchain_tdai_recall.stores._index.layer import LayerIndex
from langchain_tdai_recall.stores._index.times import TimeWindow
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.records import Layer
from langchain_tdai_recall.types import RecallStrategy, Scope, Strategy

__all__ = [
    "CANDIDATES_PER_RESULT",
    "EMBEDDING_WEIGHT",
    "TIME_RANK_BOOST",
    "TIME_SCAN_MAX",
    "TIME_SCORE_ALL",
    "TIME_WIDE_DEPTH",
    "QueryEmbedding",
    "QueryVector",
    "RankedHit",
    "SearchOutcome",
    "Searcher",
    "normalize_rows",
]

logger = logging.getLogger(__name__)

EMBEDDING_WEIGHT: Final = 0.7
"""Share of the embedding leg in a hybrid score and rank; the keyword leg has the rest."""

CANDIDATES_PER_RESULT: Final = 3
"""Each leg contributes this many candidates per requested result."""

STUCK_EMBEDDINGS: Final = 2
"""Query embeddings still running past their timeout after which the embedder is skipped."""

PARALLEL_LEGS_MIN_ROWS: Final = 50_000
"""From this many rows in a scope, a hybrid search runs its two legs at the same time; below it
the legs take a millisecond or two and handing one to a thread would cost more than it saves."""

TIME_RANK_BOOST: Final = 0.15
"""Added to the rank of a hit whose time falls in the message's time window."""

TIME_SCORE_ALL: Final = 512
"""A time window holding at most this many rows has every one scored by both legs."""

TIME_SCAN_MAX: Final = 2048
"""A larger window is not scanned by the vector leg row by row (in a large scope the rows are
float16, and converting them costs about a microsecond per dimension and thousand rows): its
rows among the scope's `TIME_WIDE_DEPTH × 3 × limit` nearest join instead."""

TIME_WIDE_DEPTH: Final = 2
"""How much deeper than the search's own vector leg a wide window's candidates are fetched."""

_LEGS = DaemonExecutor(4, name="tdai-vector-leg")
"""Runs the vector leg of large hybrid searches (daemon threads: exit never waits for them)."""


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One ranked row of a search, before its record is loaded."""

    rowid: int
    """Row reference in the store."""
    score: float
    """Relevance in [0, 1] (see the module docstring); what thresholds compare."""
    rank: float
    """Ordering score; higher first."""
    keyword_score: float | None
    """Keyword coverage in [0, 1] when the keyword leg ran."""
    embedding_score: float | None
    """Cosine similarity when the embedding leg ran and the row has a vector."""
    priority: int
    """Priority of the row (0 for messages)."""
    in_range: bool = False
    """Whether the row's activity time (else write time) falls in the time the message asks
    about (`Searcher.search(when=...)`): the gate's signal for time questions."""
    by_vector: bool = False
    """Whether the vector leg found the row among its own nearest candidates (not only the
    keyword leg or the time leg): the gate lets only such rows lead (`recall.gate`)."""


@dataclass(slots=True)
class SearchOutcome:
    """Ranked candidates plus what the search actually did."""

    hits: list[RankedHit]
    """Every candidate, best ranked first; not thresholded and not cut to the limit."""
    strategy: RecallStrategy
    """Strategy that actually ran."""
    error: str | None = None
    """Why a leg was skipped, when it was."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Per-step durations."""
    scope_coverage: float = 0.0
    """Weighted share of the query's words that occur anywhere in the scope's layer."""
    pending_vectors: int = 0
    """Rows of the scope's layer without a vector yet (computed in the background after a
    write, or being re-embedded after an embedder change): the vector leg could not see them."""
    in_range_rows: int | None = None
    """With a time window: how many searchable rows of the scope fall in it (else `None`)."""
    time_only: bool = False
    """Set by the caller when the message asks only about a time ("what did I do last
    weekend?"): the gate then lets the in-range candidates through as ranked."""
    time_narrow: bool = False
    """Set by the caller when the message's time picks the writer's memories out (a question
    about the writer, a few months at most): the gate then lets in-range candidates that match
    the rest of the words through."""

    def top(self, limit: int, min_score: float) -> list[RankedHit]:
        """The best `limit` hits whose score reaches `min_score`.

        When the message asks only about a time, the in-range hits need no minimum.
        """
        return [
            h for h in self.hits if h.score >= min_score - 1e-6 or (self.time_only and h.in_range)
        ][:limit]


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A query's embedding as a search receives it: the vector, or why there is none."""

    vector: npt.NDArray[np.float32] | None
    """The L2-normalised query vector; `None` when the embedder gave none."""
    error: str | None = None
    """Why there is no vector (a timeout, a failure, an unresponsive embedder)."""


@dataclass(frozen=True, slots=True)
class QueryEmbedding:
    """A query embedding started on the embedder's threads; the caller waits for it.

    Recall waits for it on the caller's side (its own thread, or the event loop), never on a
    recall worker thread, so store work never queues behind a slow or hung embedder.
    """

    future: Future[Any]
    """The running `embed_query` call (or `start_query_embeddings`' batch)."""
    timeout_s: float
    """How long the caller may wait for it."""

    def vector(self, raw: object) -> QueryVector:
        """The query vector from the embedder's answer."""
        vector, error = _query_vector(raw)
        return QueryVector(vector, error)

    def vectors(self, raw: object, count: int) -> list[QueryVector]:
        """The `count` query vectors of a batch's answer (`Searcher.start_query_embeddings`)."""
        rows = list(raw) if isinstance(raw, (list, tuple)) else []
        if len(rows) != count:
            error = f"query embedding returned {len(rows)} vectors for {count} texts"
            return [QueryVector(None, error) for _ in range(count)]
        return [self.vector(row) for row in rows]

    def timed_out(self, limit_ms: float | None = None) -> QueryVector:
        """What a search gets when the embedding did not come in time.

        `limit_ms` is the limit to name (default: this call's own wait). The call is cancelled
        when it had not started yet.
        """
        self.future.cancel()
        limit = self.timeout_s * 1000 if limit_ms is None else limit_ms
        return QueryVector(None, f"query embedding exceeded {limit:.0f} ms")

    @staticmethod
    def failed(exc: BaseException) -> QueryVector:
        """What a search gets when the embedder raised."""
        return QueryVector(None, f"query embedding failed: {type(exc).__name__}: {exc}")


def _embed_queries(embeddings: Embeddings, texts: list[str]) -> list[list[float]]:
    """Several query embeddings in one call: the embedder's own batch when it has one."""
    batch = getattr(embeddings, "embed_queries", None)
    if callable(batch):
        vectors: list[list[float]] = batch(texts)
        return vectors
    return [embeddings.embed_query(t) for t in texts]


def normalize_rows(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """L2-normalise each row; zero rows stay zero; NaN/inf become 0."""
    matrix = np.nan_to_num(np.asarray(matrix, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalized: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
    return normalized


class Searcher:
    """Runs the legs of one search against a `MemoryStore`."""

    def __init__(
        self,
        store: BaseMemoryStore,
        embeddings: Embeddings | None,
        *,
        executor: Executor,
        query_timeout_ms: int,
        max_input_chars: int,
    ) -> None:
        self.store = store
        self.embeddings = embeddings
        self._executor = executor
        self._query_timeout_ms = query_timeout_ms
        self._max_input_chars = max_input_chars
        self._warned_no_embeddings = False
        self._lock = threading.Lock()
        self._running: dict[int, float] = {}
        """Query embeddings in flight: future id -> monotonic deadline."""

    # -- the embedding leg --------------------------------------------------------------------

    def _stuck(self) -> int:
        """Query embeddings still running past their own deadline."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for deadline in self._running.values() if deadline < now)

    def _track(self, future: Future[Any], deadline: float) -> None:
        key = id(future)
        with self._lock:
            self._running[key] = deadline

        def done(_: object) -> None:
            with self._lock:
                self._running.pop(key, None)

        future.add_done_callback(done)

    def start_query_embedding(
        self, text: str, *, timeout_ms: float
    ) -> QueryEmbedding | QueryVector:
        """Start embedding a query on the embedder's threads without waiting for it.

        Returns the running call, or at once a `QueryVector` without a vector when there is no
        embedder or when earlier query embeddings are still running past their timeout (a hung
        embedder): then the call is skipped instead of queueing behind them, so concurrent
        recalls degrade to keyword search within their budget.
        """
        return self._start(lambda e: e.embed_query(text[: self._max_input_chars]), timeout_ms)

    def start_query_embeddings(
        self, texts: list[str], *, timeout_ms: float
    ) -> QueryEmbedding | QueryVector:
        """Start embedding several queries in one call, as `start_query_embedding` one.

        The embedder's `embed_queries` when it has one, else one `embed_query` after the other
        on the same thread. The running call's answer is read with `QueryEmbedding.vectors`.
        """
        cut = [t[: self._max_input_chars] for t in texts]
        return self._start(lambda e: _embed_queries(e, cut), timeout_ms)

    def _start(
        self, call: Callable[[Embeddings], object], timeout_ms: float
    ) -> QueryEmbedding | QueryVector:
        """`call(embedder)` started on the embedder's threads, unless there is no point."""
        embeddings = self.embeddings
        if embeddings is None:
            return QueryVector(None, "no embedder configured")
        if timeout_ms <= 0:
            return QueryVector(None, "no time left for the query embedding")
        stuck = self._stuck()
        if stuck >= STUCK_EMBEDDINGS:
            return QueryVector(
                None, f"embedder unresponsive ({stuck} query embeddings still running)"
            )
        future = self._executor.submit(call, embeddings)
        self._track(future, time.monotonic() + timeout_ms / 1000.0)
        return QueryEmbedding(future, timeout_ms / 1000.0)

    def embed_query(self, text: str, *, timeout_ms: float) -> QueryVector:
        """Embed a query within `timeout_ms`, waiting on the caller's thread.

        See `start_query_embedding`; recall starts the call and waits for it itself.
        """
        call = self.start_query_embedding(text, timeout_ms=max(timeout_ms, 0.0))
        if isinstance(call, QueryVector):
            return call
        try:
            raw = call.future.result(timeout=call.timeout_s)
        except FutureTimeout:
            return call.timed_out()
        except Exception as exc:
            return call.failed(exc)
        return call.vector(raw)

    def wants_query_vector(self, scope: Scope, layer: Layer, strategy: Strategy) -> bool:
        """Whether a search of `scope`'s layer with `strategy` would use a query vector now.

        Not with the keyword strategy or without an embedder, and not while the layer is empty
        or has no vector at all (vectors being computed after a write or an embedder change).
        """
        if strategy == "keyword" or self.embeddings is None:
            return False
        index = self.store.index(scope, layer)
        return index is not None and bool(index.meta) and index.vector_count() > 0

    def _warn_keyword_only(self) -> None:
        with self._lock:
            if self._warned_no_embeddings:
                return
            self._warned_no_embeddings = True
        logger.warning(
            "this memory store has no embedder (embeddings=None); embedding and hybrid "
            "search fall back to keyword search"
        )

    def _embed_within(self, text: str, deadline: float | None) -> QueryVector:
        """Embed the query within its timeout and what is left before `deadline`."""
        budget = float(self._query_timeout_ms)
        if deadline is not None:
            budget = min(budget, (deadline - time.monotonic()) * 1000)
        return self.embed_query(text, timeout_ms=budget)

    # -- one search ---------------------------------------------------------------------------

    def _plan(self, strategy: Strategy) -> RecallStrategy:
        """The strategy that can run before looking at the scope (no embedder: keyword)."""
        if strategy == "keyword":
            return "keyword"
        if self.embeddings is None:
            self._warn_keyword_only()
            return "keyword"
        return strategy

    def _embedded(
        self,
        text: str,
        index: LayerIndex,
        deadline: float | None,
        query_vector: npt.NDArray[np.float32] | None,
        embedded: QueryVector | None,
    ) -> tuple[QueryVector, bool]:
        """The query vector for the vector leg (or why it cannot run), and whether it was refused.

        No embedder call when no memory of the layer has a vector yet; a vector whose dimension
        is not the stored vectors' (the embedder changed and the store is re-embedding) is
        refused.
        """
        if index.vector_count() == 0:
            return QueryVector(None, _backlog_error(index)), False
        if embedded is not None:
            given = embedded
        elif query_vector is not None:
            given = QueryVector(*_query_vector(query_vector))
        else:
            given = self._embed_within(text, deadline)
        if given.vector is None:
            return given, False
        dim = index.vector_dim()
        if dim is not None and dim != given.vector.shape[0]:
            error = (
                f"the query vector has dimension {given.vector.shape[0]} but the stored vectors "
                f"have {dim}; they are being re-embedded"
            )
            return QueryVector(None, error), True
        return given, False

    def search(
        self,
        scope: Scope,
        layer: Layer,
        text: str,
        *,
        limit: int,
        strategy: Strategy,
        kind: str | None = None,
        group: str | None = None,
        exact_group: bool = False,
        deadline: float | None = None,
        query_vector: npt.NDArray[np.float32] | None = None,
        embedded: QueryVector | None = None,
        where: MemoryFilter | None = None,
        when: TimeWindow | None = None,
    ) -> SearchOutcome:
        """Ranked candidates for `text` in one scope's layer.

        `limit` sizes the candidate pool (`3 × limit` per leg); callers gate and cut the hits.
        `kind` filters by memory type (L1) or role (L0); `group` by scene name (L1,
        case-insensitive substring) or session key (L0, exact when `exact_group`). `deadline` is a
        `time.monotonic()` bound for the query embedding on top of its own timeout.
        `query_vector`, an L2-normalised vector the caller already has for `text` (memory
        formation embeds its new memories once for their rows), replaces the query embedding;
        so does `embedded`, the outcome of a query embedding the caller started and waited for
        itself (recall: `start_query_embedding`), with which the search never calls the
        embedder. `where` filters L1 rows by metadata and times. `when` favours the rows whose time
        falls in a window (see the module docstring). Expired memories, and items
        stored with `index=False`, are never returned (`LayerIndex.excluded`).

        The outcome's `strategy` names the legs that produced its scores: `hybrid` or
        `embedding` only when the vector leg scored at least one memory, `keyword` otherwise
        (an empty scope, no vector computed yet, a query vector of another dimension, an
        embedder that failed, timed out or is not configured).
        """
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        index = self.store.index(scope, layer)
        timings["index"] = (time.perf_counter() - t0) * 1000
        effective = self._plan(strategy)
        if index is None or not index.meta:
            return SearchOutcome([], "keyword", None, timings)  # nothing stored: no leg scored
        allowed = index.allowed(kind=kind, group=group, exact_group=exact_group, where=where)
        depth = max(limit, 1) * CANDIDATES_PER_RESULT
        excluded, depth, allowed = _excluding(index, layer, depth, allowed)

        leg = _VectorLeg(pending=_pending(index))
        if effective in ("hybrid", "embedding"):
            leg = self._vector_leg(
                text,
                index,
                depth=depth,
                allowed=allowed,
                parallel=effective == "hybrid" and len(index.meta) >= PARALLEL_LEGS_MIN_ROWS,
                deadline=deadline,
                given=(query_vector, embedded),
                timings=timings,
            )
            if leg.vector is None:
                effective = "keyword"
        vector, cosines, found = leg.vector, leg.cosines, leg.found
        by_vector = frozenset(cosines)

        coverage: dict[int, float] = {}
        ranked: dict[int, float] = {}
        scope_coverage = 0.0
        if effective in ("hybrid", "keyword"):
            t3 = time.perf_counter()
            if found is None:
                found = index.keyword_search(
                    index.tokenizer.query(text), limit=depth, allowed=allowed, also=list(cosines)
                )
            coverage = dict(zip(found.ids.tolist(), found.coverage.tolist(), strict=True))
            ranked = dict(zip(found.ids.tolist(), found.ranked.tolist(), strict=True))
            scope_coverage = found.scope_coverage
            if vector is not None:
                keyword_only = [r for r in found.ids[: found.found].tolist() if r not in cosines]
                cosines.update(index.vector_scores(vector, keyword_only))
            timings["keyword"] = (time.perf_counter() - t3) * 1000

        in_range, in_range_rows = _time_leg(
            index,
            when,
            (allowed, excluded),
            text,
            vector,
            depth=depth,
            legs=(cosines, coverage, ranked),
            keyword=effective != "embedding",
            timings=timings,
        )
        return self._fused(
            (effective, leg.error, leg.pending, scope_coverage),
            (cosines, coverage, ranked),
            index,
            in_range=in_range,
            in_range_rows=in_range_rows,
            excluded=excluded,
            timings=timings,
            by_vector=by_vector,
        )

    @staticmethod
    def _fused(
        state: tuple[RecallStrategy, str | None, int, float],
        legs: tuple[dict[int, float], dict[int, float], dict[int, float]],
        index: LayerIndex,
        *,
        in_range: frozenset[int],
        in_range_rows: int | None,
        excluded: frozenset[int],
        timings: dict[str, float],
        by_vector: frozenset[int] = frozenset(),
    ) -> SearchOutcome:
        """The outcome of a search from its legs' numbers (strategy, error, pending, coverage)."""
        effective, error, pending, scope_coverage = state
        cosines, coverage, ranked = legs
        t4 = time.perf_counter()
        hits = _fuse(
            effective, cosines, coverage, ranked, index, in_range=in_range, by_vector=by_vector
        )
        if excluded:
            hits = [h for h in hits if h.rowid not in excluded]
        timings["fuse"] = (time.perf_counter() - t4) * 1000
        outcome = SearchOutcome(hits, effective, error, timings, scope_coverage, pending)
        outcome.in_range_rows = in_range_rows
        return outcome

    def _vector_leg(
        self,
        text: str,
        index: LayerIndex,
        *,
        depth: int,
        allowed: npt.NDArray[np.int64] | None,
        parallel: bool,
        deadline: float | None,
        given: tuple[npt.NDArray[np.float32] | None, QueryVector | None],
        timings: dict[str, float],
    ) -> _VectorLeg:
        """The vector leg of a search (with the keyword leg too when `parallel`).

        Its `vector` is `None` when it produced no score: then the search runs on keywords.
        """
        leg = _VectorLeg(pending=_pending(index))
        t1 = time.perf_counter()
        query, refused = self._embedded(text, index, deadline, *given)
        leg.vector, leg.error = query.vector, query.error
        if given[1] is None:  # the caller's own wait for an `embedded` vector is its to time
            timings["embed"] = (time.perf_counter() - t1) * 1000
        if refused:
            leg.pending = len(index.meta)  # no stored vector can be compared with the query
        if leg.vector is None:
            if index.vector_count():  # the vector leg failed, not merely behind
                logger.warning("embedding leg unavailable (%s); using keyword search", leg.error)
            else:
                logger.debug(
                    "no vectors yet in this scope (%d pending); keyword search", leg.pending
                )
            return leg
        if parallel:
            leg.found, leg.cosines = _both_legs(
                index, text, leg.vector, depth=depth, allowed=allowed, timings=timings
            )
        else:
            t2 = time.perf_counter()
            ids, scores = index.vector_search(leg.vector, limit=depth, allowed=allowed)
            leg.cosines = dict(zip(ids.tolist(), scores.tolist(), strict=True))
            timings["vector"] = (time.perf_counter() - t2) * 1000
        if not leg.cosines:
            # it scored nothing: no memory it may return has a vector of this dimension (the
            # vectors were dropped for re-embedding since the check, or a filter leaves only
            # memories whose vectors are still being computed)
            leg.vector, leg.pending = None, _pending(index)
            if allowed is None or allowed.size:
                leg.error = _backlog_error(index)
        return leg


@dataclass(slots=True)
class _VectorLeg:
    """What the vector leg of one search produced."""

    pending: int
    """Rows the vector leg could not compare with the query."""
    vector: npt.NDArray[np.float32] | None = None
    """The query vector, when the leg scored at least one row."""
    error: str | None = None
    """Why the leg produced no score, when it did not."""
    cosines: dict[int, float] = field(default_factory=dict)
    """Row -> cosine of the leg's candidates."""
    found: KeywordHits | None = None
    """The keyword leg's hits, when both legs ran at once."""


def _excluding(
    index: LayerIndex, layer: Layer, depth: int, allowed: npt.NDArray[np.int64] | None
) -> tuple[frozenset[int], int, npt.NDArray[np.int64] | None]:
    """The rows no search may return (expired, hidden), the leg depth and the allowed rows.

    Each leg asks for as many more candidates as there are such rows, so it still brings
    `depth` that may be returned; the hits are filtered after fusion.
    """
    excluded = index.excluded() if layer == "l1" else frozenset()
    if not excluded:
        return excluded, depth, allowed
    if allowed is not None:
        allowed = allowed[~np.isin(allowed, np.fromiter(excluded, np.int64, len(excluded)))]
    return excluded, depth + len(excluded), allowed


def _time_leg(
    index: LayerIndex,
    when: TimeWindow | None,
    filters: tuple[npt.NDArray[np.int64] | None, frozenset[int]],
    text: str,
    vector: npt.NDArray[np.float32] | None,
    *,
    depth: int,
    legs: tuple[dict[int, float], dict[int, float], dict[int, float]],
    keyword: bool,
    timings: dict[str, float],
) -> tuple[frozenset[int], int | None]:
    """The candidates inside `when` (added to `legs`) and how many rows the window holds."""
    if when is None:
        return frozenset(), None
    started = time.perf_counter()
    rows = _window_rows(index, when, *filters)
    inside = _score_window(index, rows, text, vector, depth=depth, legs=legs, keyword=keyword)
    timings["time"] = (time.perf_counter() - started) * 1000
    return inside, int(rows.size)


def _window_rows(
    index: LayerIndex,
    when: TimeWindow,
    allowed: npt.NDArray[np.int64] | None,
    excluded: frozenset[int],
) -> npt.NDArray[np.int64]:
    """The searchable rows (filters applied, expired and hidden left out) inside `when`."""
    rows = index.rows_in_time(when)
    if allowed is not None:
        rows = rows[np.isin(rows, allowed, assume_unique=True)]
    if excluded and rows.size:
        rows = rows[~np.isin(rows, np.fromiter(excluded, np.int64, len(excluded)))]
    return rows


def _score_window(
    index: LayerIndex,
    rows: npt.NDArray[np.int64],
    text: str,
    vector: npt.NDArray[np.float32] | None,
    *,
    depth: int,
    legs: tuple[dict[int, float], dict[int, float], dict[int, float]],
    keyword: bool,
) -> frozenset[int]:
    """Add the window's best rows to the legs' candidates; return every candidate in the window.

    `legs` are the (cosine, coverage, ranked) numbers of the candidates so far, updated in
    place: up to `TIME_SCORE_ALL` window rows are all scored by both legs and the best `depth`
    kept; from a larger window the vector leg's best `depth` (and the keyword candidates already
    in it) are.
    """
    cosines, coverage, ranked = legs
    if rows.size == 0:
        return frozenset()
    if rows.size > TIME_SCORE_ALL:
        known = np.fromiter({*cosines, *coverage}, np.int64)
        pool = rows[np.isin(rows, known)].tolist()
        if vector is not None and rows.size <= TIME_SCAN_MAX:
            ids, _ = index.vector_search(vector, limit=depth, allowed=rows)
            pool += ids.tolist()
        elif vector is not None:  # a wide window: the scope's nearest, as far as they fall in it
            ids, _ = index.vector_search(vector, limit=depth * TIME_WIDE_DEPTH, allowed=None)
            pool += ids[np.isin(ids, rows)].tolist()
        rows = np.unique(np.asarray(pool, dtype=np.int64))
    new = [r for r in rows.tolist() if r not in cosines and r not in coverage]
    cos: dict[int, float] = index.vector_scores(vector, new) if vector is not None else {}
    cov: dict[int, float] = {}
    rnk: dict[int, float] = {}
    if keyword and new:
        found = index.keyword_scores(index.tokenizer.query(text), new)
        cov = dict(zip(found.ids.tolist(), found.coverage.tolist(), strict=True))
        rnk = dict(zip(found.ids.tolist(), found.ranked.tolist(), strict=True))
    # keep the best `depth` of the newcomers: by the rank they will get, then as `_fuse` breaks
    # ties (priority, recency, id); only those at or above the depth-th rank are sorted
    w = EMBEDDING_WEIGHT
    rank = {r: w * max(cos.get(r, 0.0), 0.0) + (1 - w) * rnk.get(r, 0.0) for r in new}
    if len(new) > depth:
        cutoff = sorted(rank.values(), reverse=True)[depth - 1]
        new = [r for r in new if rank[r] >= cutoff]
    meta = index.meta
    order = sorted(new, key=lambda r: meta[r].id)
    order.sort(key=lambda r: meta[r].recency, reverse=True)
    order.sort(key=lambda r: (-rank[r], -meta[r].priority))
    for rowid in order[:depth]:
        if vector is not None:
            cosines[rowid] = cos.get(rowid, 0.0)
        if keyword:
            coverage[rowid] = cov.get(rowid, 0.0)
            ranked[rowid] = rnk.get(rowid, 0.0)
    candidates = np.fromiter({*cosines, *coverage}, np.int64)
    return frozenset(candidates[np.isin(candidates, rows)].tolist())


def _pending(index: LayerIndex) -> int:
    """Rows of the layer without a vector.

    Vectors are computed in the background after a write, and again while a store re-embeds
    after an embedder change.
    """
    return max(len(index.meta) - index.vector_count(), 0)


def _backlog_error(index: LayerIndex) -> str:
    """Why the vector leg scored nothing while vectors are being computed."""
    return f"vectors of {_pending(index)} memories are still being computed; keyword search only"


def _both_legs(
    index: LayerIndex,
    text: str,
    vector: npt.NDArray[np.float32],
    *,
    depth: int,
    allowed: npt.NDArray[np.int64] | None,
    timings: dict[str, float],
) -> tuple[KeywordHits, dict[int, float]]:
    """Both legs of a hybrid search at once; the same hits as `keyword_search(also=...)`.

    Returns the keyword hits (the leg's own candidates, then the vector candidates it did not
    find, scored) and the vector candidates' cosines.
    """

    def vector_leg() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], float]:
        t = time.perf_counter()
        ids, scores = index.vector_search(vector, limit=depth, allowed=allowed)
        return ids, scores, (time.perf_counter() - t) * 1000

    pending = _LEGS.submit(vector_leg)
    t = time.perf_counter()
    query = index.tokenizer.query(text)
    found = index.keyword_search(query, limit=depth, allowed=allowed)
    ids, scores, timings["vector"] = pending.result()
    cosines = dict(zip(ids.tolist(), scores.tolist(), strict=True))
    known = set(found.ids.tolist())
    missing = [rowid for rowid in cosines if rowid not in known]
    if missing:
        extra = index.keyword_scores(query, missing)
        found = KeywordHits(
            np.concatenate((found.ids, extra.ids)),
            np.concatenate((found.coverage, extra.coverage)),
            np.concatenate((found.ranked, extra.ranked)),
            np.concatenate((found.bm25, extra.bm25)),
            found=found.found,
            scope_coverage=found.scope_coverage,
        )
    timings["keyword"] = (time.perf_counter() - t) * 1000
    return found, cosines


def _query_vector(raw: object) -> tuple[npt.NDArray[np.float32] | None, str | None]:
    """A normalised query vector from an embedder's answer, or the reason it is unusable."""
    try:
        vector = np.asarray(raw, dtype=np.float32).reshape(1, -1)
    except (TypeError, ValueError):
        return None, "query embedding returned something that is not a vector"
    if vector.shape[1] == 0 or not np.isfinite(vector).all() or not vector.any():
        return None, "query embedding returned an empty, zero or non-finite vector"
    return normalize_rows(vector)[0], None


def _fuse(
    strategy: RecallStrategy,
    cosines: dict[int, float],
    coverage: dict[int, float],
    ranked: dict[int, float],
    index: LayerIndex,
    *,
    in_range: frozenset[int] = frozenset(),
    by_vector: frozenset[int] = frozenset(),
) -> list[RankedHit]:
    """Score and order the union of both legs' candidates (`in_range` rows rank higher)."""
    w = EMBEDDING_WEIGHT
    meta = index.meta
    hits: list[RankedHit] = []
    for rowid in dict.fromkeys([*cosines, *coverage]):
        row = meta.get(rowid)
        if row is None:
            continue
        cos = cosines.get(rowid)
        cov = coverage.get(rowid)
        if strategy == "embedding" or (strategy == "hybrid" and cov is None):
            assert cos is not None
            score = rank = max(cos, 0.0)
        elif strategy == "keyword" or cos is None:
            score, rank = cov or 0.0, ranked.get(rowid, 0.0)
        else:
            score = w * max(cos, 0.0) + (1 - w) * (cov or 0.0)
            rank = w * max(cos, 0.0) + (1 - w) * ranked.get(rowid, 0.0)
        inside = rowid in in_range
        hits.append(
            RankedHit(
                rowid=rowid,
                score=min(score, 1.0),
                rank=rank + TIME_RANK_BOOST if inside else rank,
                keyword_score=cov if strategy != "embedding" else None,
                embedding_score=cos,
                priority=row.priority,
                in_range=inside,
                by_vector=rowid in by_vector,
            )
        )
    # Stable sorts, least significant key first: id, recency (newest first), priority, rank.
    hits.sort(key=lambda h: meta[h.rowid].id)
    hits.sort(key=lambda h: meta[h.rowid].recency, reverse=True)
    hits.sort(key=lambda h: (-h.rank, -h.priority))
    return hits
