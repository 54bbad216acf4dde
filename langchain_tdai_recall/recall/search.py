"""L1/L0 search: the keyword and embedding legs, thresholds, fusion and tie-breaking.

Recall, `search_memories`, `search_conversations` and the tools all rank through `Searcher`, so
the agent's tools see the same ranking and thresholds as automatic recall.

- Keyword leg: hits whose keyword relevance (query coverage, see `store._keyword`) reaches the
  keyword threshold, ranked by BM25.
- Embedding leg: hits whose cosine similarity reaches `score_threshold`, ranked by cosine. The
  query embedding is bounded by `embedding.query_timeout_ms`; when it fails or times out the
  search continues with the keyword leg alone and reports that strategy.
- Hybrid: each leg contributes `3 × limit` candidates; reciprocal rank fusion with k = 60.
- Scores: a hit's `score` is always its RRF sum, 1 / (60 + rank) per leg that found it, so
  scores from any strategy share one scale; the legs' own numbers (keyword relevance, cosine)
  are reported beside it.
- Ties break by score, then priority, then recency, then id, so results never depend on
  insertion order or on dictionary iteration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.store._scope import LayerIndex
from langchain_tdai_recall.store._sqlite import Layer
from langchain_tdai_recall.store.store import MemoryStore, Scope
from langchain_tdai_recall.types import RecallStrategy, Strategy

__all__ = ["RRF_K", "FusedHit", "SearchOutcome", "Searcher", "normalize_rows"]

logger = logging.getLogger(__name__)

RRF_K: Final = 60
"""Reciprocal rank fusion constant: a hit at 1-based rank r in a leg contributes 1 / (60 + r)."""

CANDIDATES_PER_RESULT: Final = 3
"""Hybrid search takes this many candidates per requested result from each leg."""


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One ranked row of a search, before its record is loaded."""

    rowid: int
    score: float
    keyword_score: float | None
    embedding_score: float | None


@dataclass(slots=True)
class SearchOutcome:
    """Ranked hits plus what the search actually did."""

    hits: list[FusedHit]
    strategy: RecallStrategy
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    index: LayerIndex | None = None


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
        store: MemoryStore,
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
        self._warn_lock = threading.Lock()

    def embed_query(
        self, text: str, *, timeout_ms: float
    ) -> tuple[npt.NDArray[np.float32] | None, str | None]:
        """Embed a query within `timeout_ms`; returns (vector, error)."""
        if self.embeddings is None:
            return None, "no embedder configured"
        embeddings = self.embeddings
        future = self._executor.submit(embeddings.embed_query, text[: self._max_input_chars])
        try:
            raw = future.result(timeout=max(timeout_ms, 0.0) / 1000.0)
        except FutureTimeout:
            future.cancel()
            return None, f"query embedding exceeded {timeout_ms:.0f} ms"
        except Exception as exc:
            return None, f"query embedding failed: {type(exc).__name__}: {exc}"
        vector = np.asarray(raw, dtype=np.float32).reshape(1, -1)
        if vector.shape[1] == 0 or not np.isfinite(vector).all():
            return None, "query embedding returned an empty or non-finite vector"
        return normalize_rows(vector)[0], None

    def _warn_keyword_only(self) -> None:
        with self._warn_lock:
            if not self._warned_no_embeddings:
                self._warned_no_embeddings = True
                logger.warning(
                    "this memory store has no embedder (embeddings=None); embedding and hybrid "
                    "search fall back to keyword search"
                )

    def search(
        self,
        scope: Scope,
        layer: Layer,
        text: str,
        *,
        limit: int,
        strategy: Strategy,
        keyword_threshold: float,
        embedding_threshold: float,
        kind: str | None = None,
        group: str | None = None,
        exact_group: bool = False,
        deadline: float | None = None,
    ) -> SearchOutcome:
        """Ranked hits of `text` in one scope's layer.

        `kind` filters by memory type (L1) or role (L0); `group` by scene name (L1,
        case-insensitive substring) or session key (L0, exact when `exact_group`). `deadline` is
        a `time.monotonic()` bound for the query embedding on top of its own timeout.
        """
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        index = self.store.index(scope, layer)
        timings["index"] = (time.perf_counter() - t0) * 1000
        effective: RecallStrategy = strategy
        if strategy != "keyword" and self.embeddings is None:
            self._warn_keyword_only()
            effective = "keyword"
        if index is None or not index.meta:
            return SearchOutcome([], effective, None, timings, index)
        allowed = index.allowed(kind=kind, group=group, exact_group=exact_group)
        depth = limit * CANDIDATES_PER_RESULT if effective == "hybrid" else limit
        error: str | None = None

        vec_ids: npt.NDArray[np.int64] | None = None
        vec_scores: npt.NDArray[np.float32] | None = None
        if effective in ("hybrid", "embedding"):
            budget = float(self._query_timeout_ms)
            if deadline is not None:
                budget = min(budget, (deadline - time.monotonic()) * 1000)
            t1 = time.perf_counter()
            if budget <= 0:
                vector, error = None, "no time left for the query embedding"
            else:
                vector, error = self.embed_query(text, timeout_ms=budget)
            timings["embed"] = (time.perf_counter() - t1) * 1000
            if vector is None:
                logger.warning("embedding leg unavailable (%s); using keyword search", error)
                effective = "keyword"
                depth = limit
            else:
                t2 = time.perf_counter()
                vec_ids, vec_scores = index.vector_search(
                    vector, min_score=embedding_threshold, limit=depth, allowed=allowed
                )
                timings["vector"] = (time.perf_counter() - t2) * 1000

        kw_ids: npt.NDArray[np.int64] | None = None
        kw_bm25: npt.NDArray[np.floating[Any]] | None = None
        kw_rel: npt.NDArray[np.floating[Any]] | None = None
        if effective in ("hybrid", "keyword"):
            t3 = time.perf_counter()
            found = index.keyword_search(
                index.tokenizer.query(text),
                min_relevance=keyword_threshold,
                limit=depth,
                allowed=allowed,
            )
            kw_ids, kw_bm25, kw_rel = found.ids, found.bm25, found.relevance
            timings["keyword"] = (time.perf_counter() - t3) * 1000

        t4 = time.perf_counter()
        hits = _fuse(
            effective,
            kw_ids=kw_ids,
            kw_rank_scores=kw_bm25,
            kw_rel=kw_rel,
            vec_ids=vec_ids,
            vec_scores=vec_scores,
            index=index,
            depth=depth,
        )[:limit]
        timings["fuse"] = (time.perf_counter() - t4) * 1000
        return SearchOutcome(hits, effective, error, timings, index)


def _leg_order(
    ids: npt.NDArray[np.int64], scores: Sequence[float], index: LayerIndex, depth: int
) -> list[int]:
    """Positions of a leg's hits in final order (ties broken like the fused list), cut to depth."""
    keys = _tie_keys(index, [int(i) for i in ids], list(map(float, scores)))
    return keys[:depth]


def _tie_keys(index: LayerIndex, rowids: list[int], scores: list[float]) -> list[int]:
    """Indices into `rowids` sorted by score, priority, recency (newest first), then id."""
    order = list(range(len(rowids)))
    meta = index.meta
    order.sort(key=lambda i: meta[rowids[i]].id if rowids[i] in meta else "")
    order.sort(key=lambda i: meta[rowids[i]].recency if rowids[i] in meta else "", reverse=True)
    order.sort(key=lambda i: (-scores[i], -(meta[rowids[i]].priority if rowids[i] in meta else 0)))
    return order


def _fuse(
    strategy: RecallStrategy,
    *,
    kw_ids: npt.NDArray[np.int64] | None,
    kw_rank_scores: npt.NDArray[np.floating[Any]] | None,
    kw_rel: npt.NDArray[np.floating[Any]] | None,
    vec_ids: npt.NDArray[np.int64] | None,
    vec_scores: npt.NDArray[np.float32] | None,
    index: LayerIndex,
    depth: int,
) -> list[FusedHit]:
    keyword: dict[int, float] = {}
    kw_rank: list[int] = []
    if kw_ids is not None and kw_rank_scores is not None and kw_rel is not None:
        order = _leg_order(kw_ids, kw_rank_scores.tolist(), index, depth)
        kw_rank = [int(kw_ids[i]) for i in order]
        keyword = {int(kw_ids[i]): float(kw_rel[i]) for i in order}
    vector: dict[int, float] = {}
    vec_rank: list[int] = []
    if vec_ids is not None and vec_scores is not None:
        order = _leg_order(vec_ids, vec_scores.tolist(), index, depth)
        vec_rank = [int(vec_ids[i]) for i in order]
        vector = {int(vec_ids[i]): float(vec_scores[i]) for i in order}

    # One scale for every strategy: the score is the RRF sum over the legs that ran, so a
    # keyword-only or embedding-only score compares with a hybrid one; each leg's own number
    # is kept in keyword_score / embedding_score.
    fused: dict[int, float] = {}
    for ranking in (kw_rank, vec_rank):
        for rank, rowid in enumerate(ranking, start=1):
            fused[rowid] = fused.get(rowid, 0.0) + 1.0 / (RRF_K + rank)

    rowids = list(fused)
    scores = [fused[r] for r in rowids]
    order = _tie_keys(index, rowids, scores)
    return [
        FusedHit(
            rowid=rowids[i],
            score=scores[i],
            keyword_score=keyword.get(rowids[i]),
            embedding_score=vector.get(rowids[i]),
        )
        for i in order
    ]
