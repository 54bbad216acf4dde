"""Searches as result objects: `search_memories` and `search_conversations` behind the facade.

A search ranks like recall (`recall.search.Searcher`) but gates differently: instead of the
injection gate it keeps the best `limit` hits whose relevance reaches a low floor
(`tools.min_score`, or the caller's `min_score`). The ranked rows are then loaded in one read and
assembled into the public `MemoryHit` / `MessageHit` values, dropping any row deleted between the
search and the read. The memory tools and the retriever reach these through the facade.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall._exchange.records import check_int, clean_text, shown
from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.search import RankedHit, Searcher
from langchain_tdai_recall.recall.when import asked_time
from langchain_tdai_recall.stores._index.extras import MemoryFilter
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.text.clean import clean_query, content_text
from langchain_tdai_recall.types import MemoryHit, MemoryType, MessageHit, Scope

__all__ = ["HitSearch"]

logger = logging.getLogger(__name__)


class HitSearch:
    """The scope searches of the public API, from the query to the hits it returns."""

    def __init__(self, store: BaseMemoryStore, searcher: Searcher, config: TdaiConfig) -> None:
        self._store = store
        self._searcher = searcher
        self._config = config

    def memories(
        self,
        scope: Scope,
        query: object,
        *,
        limit: object,
        min_score: object,
        kind: MemoryType | None,
        scene: str | None,
        where: MemoryFilter | None = None,
        now: dt.datetime | None = None,
    ) -> list[MemoryHit]:
        """The best L1 memories of `scope` for `query` (arguments as `search_memories` takes).

        `where` filters by metadata and times (`stores._index.extras.MemoryFilter`). Without a
        time filter, a time named in the query ("last month") favours the memories of that
        time (`recall.time_aware`), resolved at `now` (default: the clock).
        """
        timed = where is None or (
            where.created_after is None
            and where.created_before is None
            and where.active_after is None
            and where.active_before is None
        )
        hits = self._ranked(
            scope,
            "l1",
            query,
            limit,
            min_score,
            kind=kind,
            group=scene or None,
            where=where,
            timed=timed and self._config.recall.time_aware,
            now=now,
        )
        records = self._store.memories_by_ref(scope, [h.rowid for h in hits])
        return [
            MemoryHit(
                id=rec.id,
                content=rec.content,
                type=rec.type,
                scene_name=rec.scene_name,
                priority=rec.priority,
                score=h.score,
                keyword_score=h.keyword_score,
                embedding_score=h.embedding_score,
                record=rec,
            )
            for h in hits
            if (rec := records.get(h.rowid)) is not None
        ]

    def messages(
        self,
        scope: Scope,
        query: object,
        *,
        limit: object,
        min_score: object,
        session_key: str | None,
    ) -> list[MessageHit]:
        """The best L0 messages of `scope` (one session when given) for `query`."""
        hits = self._ranked(
            scope, "l0", query, limit, min_score, group=session_key, exact_group=True
        )
        records = self._store.messages_by_ref(scope, [h.rowid for h in hits])
        return [
            MessageHit(
                id=rec.id,
                role=rec.role,
                content=rec.content,
                session_key=rec.session_key,
                recorded_at=rec.recorded_at,
                score=h.score,
                keyword_score=h.keyword_score,
                embedding_score=h.embedding_score,
            )
            for h in hits
            if (rec := records.get(h.rowid)) is not None
        ]

    def query_vector(self, query: str) -> tuple[npt.NDArray[np.float32] | None, str]:
        """A store query cleaned as searches clean theirs, and its vector (`None` without one).

        For `graph_store.TdaiStore`, which ranks every item itself. The vector is `None` with
        the `keyword` strategy, without an embedder, or when the embedding failed or took
        longer than `embedding.query_timeout_ms` (logged); the store then ranks by keywords.
        """
        text = clean_query(clean_text(content_text(query)))
        if not text or self._config.recall.strategy == "keyword":
            return None, text
        if self._searcher.embeddings is None:
            return None, text
        embedded = self._searcher.embed_query(
            text, timeout_ms=self._config.embedding.query_timeout_ms
        )
        if embedded.vector is None:
            logger.warning("store search: %s; ranking by keywords", embedded.error)
        return embedded.vector, text

    def _ranked(
        self,
        scope: Scope,
        layer: Literal["l1", "l0"],
        query: object,
        limit: object,
        min_score: object,
        *,
        timed: bool = False,
        now: dt.datetime | None = None,
        **filters: Any,
    ) -> list[RankedHit]:
        """Validate, clean the query, rank it like recall and keep the best hits above the floor.

        With `timed`, a time the query names favours the memories of that time.
        """
        check_int("limit", limit, low=1, high=100)
        floor = self._config.tools.min_score if min_score is None else min_score
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1:
            msg = f"min_score must be a number in 0..1 or None, got {shown(min_score)}"
            raise ConfigError(msg)
        if query is not None and not isinstance(query, str | list | tuple):
            msg = f"query must be a string, got {type(query).__name__} {query!r:.60}"
            raise ConfigError(msg)
        text = clean_query(clean_text(content_text(query)))
        if not text:
            return []
        asked = asked_time(text, now=now, tz=self._config.tzinfo()) if timed else None
        outcome = self._searcher.search(
            scope,
            layer,
            text,
            limit=cast("int", limit),
            strategy=self._config.recall.strategy,
            when=asked.window if asked is not None else None,
            **filters,
        )
        outcome.time_only = asked is not None and asked.only_time
        return outcome.top(cast("int", limit), float(floor))
