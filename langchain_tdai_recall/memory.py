"""`TdaiMemory`: the public facade over the store, the recall engine and the integrations.

The facade validates every call (`_exchange.records`), resolves its scope, and delegates: storage to
a backend (`stores.base.BaseMemoryStore`: a local directory, or PostgreSQL, chosen by
`_facade.backend`), ranking to `recall` (searches as hits: `recall.hits`), vector upkeep to
`_embedding.upkeep.VectorUpkeep`, the capture of finished turns to `_runtime.writer.TurnWriter`, and
memory formation (with a chat model) to `formation.scheduler.FormationScheduler` (started and run
now through `formation.control`), which the writer notifies after each captured turn
(`_after_capture`). It holds a lifecycle state that every public call checks: after `close()` each
of them raises `StoreClosedError`; `_facade.lifecycle` stops its background parts in order. Each
`a*` twin is built from its sync method (`_runtime.async_api`). What stays here is the public API
and its documentation, which `help()` shows.

Writes never wait for the embedder: they are durable and keyword-searchable when they return,
and vectors follow on a background thread. `close()` waits a bounded time (`close_timeout`,
5 s by default) for queued turns and pending vectors, and forms what is pending within
`pipeline.close_timeout_seconds`; it runs at interpreter exit for stores left open, and no
thread of a store ever delays process exit beyond those bounds.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self, cast

from langchain_core.embeddings import Embeddings

from langchain_tdai_recall._exchange.metadata import (
    ExpirySweeper,
    check_ttl,
    is_expired,
    memory_filter,
    states_expiry,
    with_expiry,
)
from langchain_tdai_recall._exchange.records import (
    MAX_SQL_INT,
    TimeInput,
    check_int,
    check_lookup,
    check_optional_str,
    check_store_path,
    clean_text,
    memory_records,
    message_records,
    now_iso,
    resolve_scope,
    shown,
    turn_records,
)
from langchain_tdai_recall._facade.backend import open_backend
from langchain_tdai_recall._facade.lifecycle import (
    check_flag,
    check_timeout,
    shutdown,
    writer_callbacks,
)
from langchain_tdai_recall._runtime.async_api import async_twin, in_thread
from langchain_tdai_recall._runtime.breaker import StoreBreaker
from langchain_tdai_recall._runtime.failure import log_failure
from langchain_tdai_recall._runtime.threads import DaemonExecutor
from langchain_tdai_recall._runtime.writer import TurnWriter
from langchain_tdai_recall._turn.budget import check_tools_guide
from langchain_tdai_recall._turn.host import MemoryHost, StoreHost
from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.errors import ConfigError, StoreClosedError, StoreReadOnlyError
from langchain_tdai_recall.recall.engine import RecallEngine, RecallRequest
from langchain_tdai_recall.recall.hits import HitSearch
from langchain_tdai_recall.recall.search import Searcher
from langchain_tdai_recall.recall.when import check_now
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.types import (
    MEMORY_TYPES,
    ForgetReport,
    ImportReport,
    MemoryHit,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageHit,
    MessageRecord,
    RecallResult,
    Reclaim,
    SceneBlock,
    SceneInfo,
    Scope,
    StoreStats,
)

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from langgraph.store.base import IndexConfig, TTLConfig

    from langchain_tdai_recall._embedding.upkeep import VectorUpkeep
    from langchain_tdai_recall._turn import ToolBudget
    from langchain_tdai_recall.formation.manager import MemoryManager
    from langchain_tdai_recall.formation.rating import Rater, RatingReport
    from langchain_tdai_recall.formation.report import ExtractionReport
    from langchain_tdai_recall.formation.scheduler import FormationScheduler
    from langchain_tdai_recall.graph_store import TdaiStore
    from langchain_tdai_recall.lcel import RecallChatModel, RecallRunnable
    from langchain_tdai_recall.middleware import OnTurn, TdaiRecallMiddleware
    from langchain_tdai_recall.retriever import SearchType, TdaiRetriever
    from langchain_tdai_recall.upstream.importer import ImportTarget

__all__ = ["DEFAULT_CLOSE_TIMEOUT_S", "TdaiMemory"]

logger = logging.getLogger(__name__)

EmbeddingsInput = Embeddings | Literal["default"] | None

DEFAULT_CLOSE_TIMEOUT_S: Final = 5.0
"""Longest time `close()` (and interpreter exit) waits for queued turns and pending vectors."""
DEFAULT_FORGET_TIMEOUT_S: Final = 120.0
"""Longest time `forget` waits for the background work that could write to the scope."""


def _nothing() -> None:
    """A callback with nothing to do."""


def _has_explicit_id(data: object) -> bool:
    if isinstance(data, MemoryRecord):
        return bool(data.id)
    return isinstance(data, Mapping) and bool(data.get("id"))


class TdaiMemory:
    """Layered long-term memory with automatic recall for LangChain agents.

    Open one per process and share it: it is thread-safe, and every call is scoped to a user
    (and optionally an agent).

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import HashEmbeddings

        with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
            memory.add_memory("The user is allergic to peanuts.", type="persona", user_id="u1")
            result = memory.recall("Can I eat this peanut cake?", user_id="u1")
            assert result is not None and "peanuts" in (result.prepend_context or "")
        ```
    """

    def __init__(
        self,
        *,
        store: BaseMemoryStore,
        embeddings: Embeddings | None,
        config: TdaiConfig,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
        show_progress: bool | None = None,
        reranker: BaseDocumentCompressor | None = None,
    ) -> None:
        """Use `TdaiMemory.open(...)`; this constructor wires already-built parts."""
        self.config = config
        self.embeddings = embeddings
        self._store = store
        self._close_timeout = check_timeout("close_timeout", close_timeout)
        self._closed = False
        self._state_lock = threading.Lock()
        self._warned_read_only_capture = False
        self._embed_pool = DaemonExecutor(2, name="tdai-embed")
        self._recall_pool = DaemonExecutor(4, name="tdai-recall")
        self._searcher = Searcher(
            store,
            embeddings,
            executor=self._embed_pool,
            query_timeout_ms=config.embedding.query_timeout_ms,
            max_input_chars=config.embedding.max_input_chars,
        )
        self._rerank_pool = DaemonExecutor(2, name="tdai-rerank")
        self._store_breaker = StoreBreaker.for_recall(config.recall.timeout_ms)
        """Memory tools fail fast for a while after the store did not answer a recall in time."""
        self._engine = RecallEngine(
            store,
            self._searcher,
            config,
            executor=self._recall_pool,
            reranker=reranker,
            rerank_executor=self._rerank_pool,
            breaker=self._store_breaker,
        )
        self._hits = HitSearch(store, self._searcher, config)
        self._upkeep: VectorUpkeep | None = None
        if embeddings is not None and store.embedder_id is not None and not store.read_only:
            from langchain_tdai_recall._embedding.upkeep import VectorUpkeep  # noqa: PLC0415

            self._upkeep = VectorUpkeep(
                store,
                embeddings,
                batch_size=config.embedding.batch_size,
                max_input_chars=config.embedding.max_input_chars,
                show_progress=show_progress,
            )
            self._upkeep.start()
        self._writer = TurnWriter(*writer_callbacks(self, store, self._upkeep))
        # -- expiry (issue 16): deletes expired memories in the background
        self._sweeper: ExpirySweeper | None = None
        if not store.read_only:
            self._sweeper = ExpirySweeper(store, config.store.expiry_sweep_seconds)
            self._sweeper.start()
        self._manager: MemoryManager | None = None
        self._rater: Rater | None = None
        """Rates LangGraph-store items in the background once `as_store()` needed it."""
        self._formation_slot: list[FormationScheduler] = []
        """Memory formation's scheduler once `_start_formation` built it (a slot, so the
        finalizer can reach it without holding this object)."""
        self._finalizer = weakref.finalize(
            self,
            shutdown,
            self._writer,
            self._formation_slot,
            self._upkeep,
            store,
            (self._recall_pool, self._embed_pool, self._rerank_pool),
            timeout=self._close_timeout,
            formation_timeout=config.pipeline.close_timeout_seconds,
        )

    @property
    def _formation(self) -> FormationScheduler | None:
        """The formation scheduler, or `None` without a chat model."""
        return self._formation_slot[0] if self._formation_slot else None

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | BaseMemoryStore | None = None,
        *,
        embeddings: EmbeddingsInput = "default",
        config: TdaiConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
        show_progress: bool | None = None,
        read_only: bool = False,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
        reranker: BaseDocumentCompressor | None = None,
        extraction_model: BaseChatModel | str | None = None,
        extraction_callbacks: Callbacks = None,
    ) -> Self:
        """Open (creating on first use) a memory store.

        Opening never calls the embedder on the caller's thread: stored rows that lack a vector
        from this embedder (new rows, or rows another embedder made) are embedded in the
        background, and are keyword-searchable meanwhile.

        Args:
            path: A directory for a durable local store; a `postgresql://` URL (or a libpq
                string such as `"host=db dbname=memory"`) for a store in
                PostgreSQL with pgvector (extra `postgres`; several application servers can
                share it); a store object (`stores.BaseMemoryStore`, e.g. a
                `PostgresMemoryStore` with its own pool settings), which this memory then owns
                and closes; or `None` (or `":memory:"`) for an in-memory store.
            embeddings: `"default"` (the bundled offline embedder, loaded on first use), any
                LangChain `Embeddings`, or `None` for keyword-only recall.
            config: A `TdaiConfig`, a dict (snake_case or upstream camelCase keys), or a path
                to a JSON file.
            show_progress: `True` draws a progress bar on standard error while a large number of
                stored rows is (re-)embedded in the background; otherwise progress is logged at
                INFO. `reindex(show_progress=...)` does the work in the foreground instead.
            read_only: Open an existing store for searching and recall only (also in a
                directory this process cannot write); every write raises `StoreReadOnlyError`.
            close_timeout: Longest time in seconds `close()` waits for captured turns and
                pending vectors (0..3600, default 5); formation has its own bound
                (`pipeline.close_timeout_seconds`).
            reranker: Any LangChain `BaseDocumentCompressor` (a cross-encoder, a hosted
                reranker, an LLM) that reorders and selects recall's candidates within the
                recall time budget; its selection replaces the relevance threshold, and when it
                fails or times out recall falls back to the fused order with a warning. Recall
                only: searches and tools are not reranked.
            extraction_model: A LangChain chat model (or a `provider:model` string for
                `init_chat_model`) that forms memories from the recorded conversations in the
                background (see "Memory formation" in the docs). Default: the
                `extraction.model` setting; without either, nothing is formed. Needs a
                writable store.
            extraction_callbacks: LangChain callbacks for background formation runs: they
                receive the `tdai_extraction` event and the model calls.

        Raises:
            ConfigError: If an argument is invalid.
            MissingDependencyError: For a `postgresql://` URL without the `postgres` extra.
            StoreReadOnlyError: If the store cannot be written and `read_only` is not set.
            StoreCorruptedError: If the database file is empty, damaged or not a memory store.
            StoreError: If the directory or the database cannot be opened for another reason
                (the message names it, without any password).
        """
        from langchain_tdai_recall.embeddings import (  # noqa: PLC0415 - keeps import light
            embedder_identity,
            resolve_embeddings,
        )

        where = path if isinstance(path, BaseMemoryStore) else check_store_path(path)
        check_flag("read_only", read_only)
        check_flag("show_progress", show_progress, optional=True)
        timeout = check_timeout("close_timeout", close_timeout)
        cfg = TdaiConfig.coerce(config)
        emb = resolve_embeddings(embeddings)
        store = open_backend(
            where,
            cfg,
            embedder_id=embedder_identity(emb) if emb is not None else None,
            read_only=read_only,
        )
        if reranker is not None and not callable(getattr(reranker, "compress_documents", None)):
            msg = (
                "reranker must be a LangChain BaseDocumentCompressor (with compress_documents), "
                f"got {type(reranker).__name__}"
            )
            raise ConfigError(msg)
        try:
            memory = cls(
                store=store,
                embeddings=emb,
                config=cfg,
                close_timeout=timeout,
                show_progress=show_progress,
                reranker=reranker,
            )
        except BaseException:
            store.close()
            raise
        memory._warm_up()
        try:
            memory._start_formation(extraction_model, extraction_callbacks)
        except BaseException:
            memory.close()
            raise
        return memory

    @staticmethod
    def open_store(
        path: str | os.PathLike[str] | None,
        *,
        config: TdaiConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
        read_only: bool = False,
    ) -> BaseMemoryStore:
        """The store object `open(path, config=config)` would use, without an embedder.

        Nothing runs in the background: for copying a whole store (`stores.migrate.copy_store`)
        or reading what it holds (`recorded_embedder()`) before choosing an embedder. The caller
        closes it.

        Raises:
            ConfigError: If an argument is invalid.
            MissingDependencyError: For a `postgresql://` URL without the `postgres` extra.
            StoreError: If the store cannot be opened (see `open`).
        """
        check_flag("read_only", read_only)
        where = check_store_path(path)
        return open_backend(where, TdaiConfig.coerce(config), embedder_id=None, read_only=read_only)

    def _warm_up(self) -> None:
        """Load the bundled embedder's model on a background thread.

        The model loads on first use; without this the first turn's query embedding would pay
        for the load and could exceed `embedding.query_timeout_ms` (falling back to keyword
        search). Only the bundled local model is warmed: a remote embedder is never called
        speculatively.
        """
        from langchain_tdai_recall.embeddings import DefaultEmbeddings  # noqa: PLC0415

        if isinstance(self.embeddings, DefaultEmbeddings) and not self.embeddings.loaded:
            self._embed_pool.submit(self.embeddings.embed_query, "warm-up")

    def _check_open(self) -> None:
        if self._closed:
            msg = (
                "this TdaiMemory is closed; open a new one with TdaiMemory.open(path) "
                "(or keep it open for the life of the process)"
            )
            raise StoreClosedError(msg)

    # -- for the adapters (the `MemoryHost` interface of `_turn/host.py`) -----------------------

    def check_open(self) -> None:
        """Raise `StoreClosedError` if `close()` was called (for the package's adapters)."""
        self._check_open()

    @property
    def store_breaker(self) -> StoreBreaker:
        """The breaker the memory tools consult (for the package's adapters).

        It opens for a while after the store did not answer a recall in time, so tool calls fail
        fast instead of waiting on the same store.
        """
        return self._store_breaker

    def capture_turn(
        self, messages: Sequence[Mapping[str, str]], *, scope: Scope, session_key: str
    ) -> None:
        """Store a finished turn in the background (for the package's adapters).

        The middleware, the wrapped model and the legacy executor call this once per turn;
        applications record messages with `record_messages`. See `_capture_turn`.
        """
        self._capture_turn(messages, scope=scope, session_key=session_key)

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with `read_only=True`."""
        return self._store.read_only

    def close(self, *, timeout: float | None = None) -> None:
        """Close the store; later calls raise `StoreClosedError`. Idempotent.

        Captured turns still queued are written and pending vectors embedded for at most
        `timeout` seconds (default: the store's `close_timeout`, 5 s); turns still queued then
        are reported in a WARNING with their count, and rows still without a vector are
        embedded by the next process that opens the store. A hung embedder is never waited for
        beyond that bound.
        """
        budget = self._close_timeout if timeout is None else check_timeout("timeout", timeout)
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        if self._sweeper is not None:
            self._sweeper.stop()
        if self._finalizer.detach() is not None:  # not already run by garbage collection
            pools = (self._recall_pool, self._embed_pool, self._rerank_pool)
            forming = self.config.pipeline.close_timeout_seconds
            if timeout is not None:
                forming = min(forming, budget)
            if self._manager is not None:  # the memory tool's background consolidations
                started = time.monotonic()
                self._manager.close(forming)
                forming = max(forming - (time.monotonic() - started), 0.0)
            if self._rater is not None:  # ratings of store items due now
                started = time.monotonic()
                self._rater.close(forming)
                forming = max(forming - (time.monotonic() - started), 0.0)
            shutdown(
                self._writer,
                self._formation_slot,
                self._upkeep,
                self._store,
                pools,
                timeout=budget,
                formation_timeout=forming,
            )

    def flush(self, *, timeout: float | None = None, show_progress: bool | None = None) -> bool:
        """Wait until the background work accepted so far is done.

        In order: every captured turn is written; with a chat model, everything pending in
        every scope is formed (as `extract(all_scopes=True)` does; a failed window stays
        pending and is retried later, see the `tdai_extraction` event or `extract()` for a
        report); and one pass over the rows waiting for a vector has run (rows whose embedding
        failed are retried once more). Returns `False` when `timeout` seconds passed first, or
        when formation left anything pending or failed (a window, a scene or persona update).

        Waiting for 1,000 or more vectors (after a bulk write) is logged at INFO with the
        counts, and drawn as a progress bar on standard error when `show_progress` is `True`,
        or is `None` (the default) and standard error is a terminal.
        """
        check_flag("show_progress", show_progress, optional=True)
        self._check_open()
        if timeout is not None:
            timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._writer.flush(timeout):
            return False
        manager = self._manager  # the memory tool's background consolidations come first
        if manager is not None and not manager.flush(deadline):
            return False
        rater = self._rater  # then the ratings of store items (a failed one waits: False)
        if rater is not None and not rater.flush(deadline):
            return False
        formation = self._formation
        if formation is not None and not formation.flush(deadline):
            return False
        if self._upkeep is None:
            return True
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return self._upkeep.flush(left, show_progress=show_progress)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await in_thread(self.close)

    def __repr__(self) -> str:
        where = self._store.location if self._store.durable else "in-memory"
        state = ", closed" if self._closed else (", read-only" if self.read_only else "")
        return f"TdaiMemory({where}, embedder={self._store.embedder_id!r}{state})"

    @property
    def path(self) -> Path | None:
        """The store directory of a local store; `None` for an in-memory or a database store."""
        return self._store.path

    @property
    def location(self) -> str:
        """Where the store lives: a directory, `:memory:`, or a database URL without password."""
        return self._store.location

    # -- scopes -------------------------------------------------------------------------------

    def scope(self, user_id: str | None = None, agent_id: str | None = None) -> Scope:
        """Validate and resolve a scope; `user_id=None` is `store.default_user_id`.

        Raises:
            ScopeError: If an id is not a non-empty string of at most 256 characters without
                control characters.
            StoreClosedError: After `close()`.
        """
        self._check_open()
        return resolve_scope(user_id, agent_id, default_user=self.config.store.default_user_id)

    def preload(self, *, user_id: str | None = None, agent_id: str | None = None) -> None:
        """Build a scope's in-memory indexes now instead of on its first search.

        Indexes are built from SQLite the first time a scope is searched, which takes about a
        second per 10k memories; a recall that meets a long build returns `None` (timeout) while
        the build finishes in the background. Servers holding large scopes can call this at
        start-up. A large index that had no current snapshot gets one written here (not only at
        `close()`), so the next start is fast even if this process is killed.
        """
        scope = self.scope(user_id, agent_id)
        self._store.index(scope, "l1")
        self._store.index(scope, "l0")
        try:
            self._store.save_index_snapshots()
        except Exception:  # a cache must never make preloading fail
            logger.warning("cannot save the index snapshots after preload", exc_info=True)

    # -- embedding upkeep ---------------------------------------------------------------------

    def _wake_upkeep(self) -> None:
        if self._upkeep is not None:
            self._upkeep.wake()

    def _fresh_vectors(self, scope: Scope) -> None:
        """Read-your-writes for a search by meaning: embed the scope's rows still without one.

        Bounded by `embedding.query_timeout_ms`; what is not done by then stays with the
        background upkeep. Automatic recall never calls this (it stays latency-first and
        reports `pending_vectors`). A read-only memory has nothing to do it with.
        """
        upkeep = self._upkeep
        if upkeep is None:
            return
        index = self._store.index(scope, "l1")
        if index is not None and index.unembedded_rows():
            upkeep.embed_scope_now(scope, self.config.embedding.query_timeout_ms / 1000)

    def reindex(self, *, show_progress: bool | None = None) -> int:
        """Embed now, on this thread, every stored row whose vector is missing or stale.

        A row's vector is stale when another embedder made it. The background upkeep does the
        same work without blocking; call this to wait for it (with a progress bar on a terminal
        unless `show_progress=False`). Stops early when the embedder fails; what is left stays
        pending. Returns how many rows were embedded.
        """
        self._check_open()
        check_flag("show_progress", show_progress, optional=True)
        if self._upkeep is None:
            return 0
        return self._upkeep.reindex(show_progress=show_progress)

    # -- L1 memories --------------------------------------------------------------------------

    def add_memory(
        self,
        content: str,
        *,
        type: MemoryType = "episodic",
        scene_name: str = "",
        priority: int = 50,
        activity_start_time: TimeInput = None,
        activity_end_time: TimeInput = None,
        timestamp: TimeInput = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        id: str | None = None,
        session_key: str = "",
        source_message_ids: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        expires_at: dt.datetime | str | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> MemoryRecord:
        """Store one L1 memory, or update it when `id` already exists in the scope.

        The memory is durable and keyword-searchable when this returns; its vector is computed
        in the background (the embedder is never waited for).

        Args:
            content: The memory text.
            type: `persona`, `episodic` or `instruction`.
            scene_name: Free-form situation label.
            priority: 0..100, higher is more important; -1 marks a strict global rule.
            activity_start_time: When the remembered activity started (date or date-time).
            activity_end_time: When it ended (not before the start).
            timestamp: When a point-in-time event happened.
            user_id: Owner; `None` is the default user.
            agent_id: Agent; `None` is the user's shared memory.
            id: Memory id; generated when omitted.
            session_key: Conversation the memory came from.
            source_message_ids: L0 message ids it was extracted from.
            metadata: A small JSON object of your own (str keys; at most 16 KiB as JSON);
                `search_memories(metadata=...)` filters on it by equality.
            expires_at: When the memory expires (a datetime, naive = UTC, or ISO text).
            ttl: Or: seconds (or a `timedelta`) from now until it expires. Without either,
                `store.default_ttl_seconds` applies (default: never).

        Returns:
            The stored record.

        Raises:
            ConfigError: If a field is invalid (the message names it).
            StoreReadOnlyError: If the store was opened read-only.
            StoreWriteError: If the database stayed locked or the disk is full (nothing was
                written).
        """
        record = {
            "content": content,
            "type": type,
            "scene_name": scene_name,
            "priority": priority,
            "activity_start_time": activity_start_time,
            "activity_end_time": activity_end_time,
            "timestamp": timestamp,
            "id": id,
            "session_key": session_key,
            "source_message_ids": source_message_ids,
            "metadata": metadata,
        }
        if expires_at is not None:  # else unstated: `ttl` or the store's default applies
            record["expires_at"] = expires_at
        return self.add_memories([record], user_id=user_id, agent_id=agent_id, ttl=ttl)[0]

    def add_memories(
        self,
        records: Iterable[MemoryRecord | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[MemoryRecord]:
        """Store many L1 memories in one scope.

        Every record is validated before anything is written, so a bad record loses nothing.
        A record's own `user_id`/`agent_id` are ignored: the scope is the call's. A record
        without an `id` whose text exactly duplicates a memory of the scope (same text after
        normalising case, width, whitespace and final punctuation) is not stored again: the
        existing memory is returned in its place. A given `id` is always written (an update
        keeps the replaced version in `history(id)`). The memories are durable and
        keyword-searchable when this returns; vectors follow in the background (`flush()` or
        `reindex()` wait for them).

        A record's `metadata` and `expires_at` are kept, `None` (never expires) included:
        `ttl` (seconds or a `timedelta`), else `store.default_ttl_seconds`, gives an expiry
        only to the records that do not state one, i.e. mappings without an `expires_at` key.
        A `MemoryRecord` (e.g. read from another store) and an exported JSONL line keep theirs.
        """
        scope = self.scope(user_id, agent_id)
        check_flag("show_progress", show_progress, optional=True)
        seconds = check_ttl(ttl)
        given: object = records
        if isinstance(records, Iterable) and not isinstance(
            records, str | bytes | Mapping | MemoryRecord
        ):
            given = list(records)
        prepared = memory_records(given, scope, now_iso())
        if not prepared:
            return []
        prepared = with_expiry(
            prepared,
            seconds if seconds is not None else self.config.store.default_ttl_seconds,
            [states_expiry(r) for r in cast("list[object]", given)],
        )
        # exact duplicates (memory formation): records without an id never pile up
        dedupe = [not _has_explicit_id(r) for r in cast("list[object]", given)]
        from langchain_tdai_recall._runtime.progress import progress  # noqa: PLC0415

        stored: list[MemoryRecord] = []
        chunk = max(self.config.embedding.batch_size, 256)
        show = (
            show_progress
            if show_progress is not None
            else (None if len(prepared) > 1000 else False)
        )
        try:
            with progress(len(prepared), desc="adding memories", enabled=show) as bar:
                for start in range(0, len(prepared), chunk):
                    part = prepared[start : start + chunk]
                    flags = dedupe[start : start + chunk]
                    stored += self._store.put_memories(scope, part, dedupe=flags)
                    bar.update(len(part))
        finally:
            if stored:
                self._wake_upkeep()
        return stored

    def get_memory(
        self, id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> MemoryRecord | None:
        """One memory of the scope by id, or `None` (also once it has expired)."""
        scope = self.scope(user_id, agent_id)
        found = self._store.get_memory(scope, check_lookup("id", id))
        return None if found is None or is_expired(found) else found

    def delete_memory(
        self, id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete one memory of the scope; returns whether it existed."""
        scope = self.scope(user_id, agent_id)
        return self._store.delete_memories(scope, [check_lookup("id", id)]) > 0

    def list_memories(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        type: MemoryType | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        """Memories of the scope, oldest first, optionally of one type.

        `limit=None` lists all; `offset` skips that many first. Expired memories are left out
        before paging, so a page is full while unexpired memories remain, swept or not.
        """
        scope = self.scope(user_id, agent_id)
        if type is not None and type not in MEMORY_TYPES:
            msg = f"type must be one of {list(MEMORY_TYPES)} or None, got {shown(type)}"
            raise ConfigError(msg)
        if limit is not None:
            check_int("limit", limit, low=0, high=MAX_SQL_INT, fix=" (or None for all)")
        check_int("offset", offset, low=0, high=MAX_SQL_INT)
        found = self._store.list_memories(scope, type=type, limit=limit, offset=offset)
        return [r for r in found if not is_expired(r)]

    def sweep_expired(self) -> int:
        """Delete the memories whose expiry has passed now, instead of waiting for the sweep.

        The background sweep does this at open and every `store.expiry_sweep_seconds`;
        expired memories are hidden from every read before either. Returns how many were
        deleted (each keeps its last version in `history(id)`).
        """
        self._check_open()
        if self._sweeper is None:
            msg = f"the memory store {self.location} was opened read-only; nothing can be deleted"
            raise StoreReadOnlyError(msg)
        deleted = 0
        while (swept := self._sweeper.sweep()) > 0:
            deleted += swept
        return deleted

    # -- L0 messages --------------------------------------------------------------------------

    def record_messages(
        self,
        messages: Iterable[object],
        *,
        session_key: str,
        session_id: str = "",
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """Store L0 conversation messages; returns how many were kept.

        Accepts LangChain messages or `{"role", "content"}` dicts (optional `id`,
        `recorded_at` as ISO-8601 or epoch milliseconds). Human and AI messages are kept
        (system and tool messages are not), with any injected memory blocks removed; empty
        messages and ids already stored are skipped. Text that cannot be stored as UTF-8 (lone
        surrogates) is kept with U+FFFD in their place. The messages are durable and
        keyword-searchable when this returns; vectors follow in the background.
        """
        scope = self.scope(user_id, agent_id)
        prepared = message_records(
            messages, scope, session_key=session_key, session_id=session_id, now=now_iso()
        )
        if not prepared:
            return 0
        kept = self._store.put_messages(scope, prepared)
        if kept:
            self._wake_upkeep()
            # A call is one turn for memory formation (an empty one is none, G-X20); turns the
            # agent adapters capture are counted by the background writer instead.
            self._after_capture(scope, prepared[0].session_key)
        return kept

    def _capture_turn(
        self, messages: Sequence[Mapping[str, str]], *, scope: Scope, session_key: str
    ) -> None:
        """Hand a finished turn's L0 messages to the store's background writer; return at once.

        `messages` are `{"role", "content"}` dicts (`user` / `assistant`). Never raises (a
        failure is logged), never blocks on the database or the embedder; `close()` flushes the
        writer within `close_timeout`. Text is repaired, not refused (lone surrogates become
        U+FFFD), and injected memory blocks are removed.
        """
        try:
            if self._closed:
                logger.warning("L0 capture after close() is dropped; keep the store open")
                return
            if self._store.read_only:
                if not self._warned_read_only_capture:
                    self._warned_read_only_capture = True
                    logger.warning("L0 capture is off: this memory store was opened read-only")
                return
            checked = resolve_scope(
                scope.user_id, scope.agent_id, default_user=self.config.store.default_user_id
            )
            records = turn_records(messages, checked, session_key, now_iso())
            if records and not self._writer.submit(checked, records[0].session_key, records):
                logger.warning("L0 capture during close() is dropped")
        except Exception as exc:  # never raises, whatever recall.on_error says
            log_failure(exc, action="L0 capture")

    def _after_capture(self, scope: Scope, session_key: str) -> None:
        """Count one stored turn for memory formation; never raises.

        Called by the background writer after each captured turn, and by `record_messages`
        after each call that stored a message (every N turns, warm-up, idle timer). It only puts
        the turn on the formation scheduler's queue, so it costs the writer's thread nothing
        measurable.
        """
        formation = self._formation
        if formation is None:
            return
        try:
            formation.notify(scope, session_key)
        except Exception as exc:  # formation must never fail a turn
            logger.warning("memory formation could not count a turn: %s", type(exc).__name__)

    # -- L2 / L3 ------------------------------------------------------------------------------

    def set_persona(
        self, text: str | None, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """Replace the scope's L3 persona (Markdown); `None` or blank deletes it."""
        scope = self.scope(user_id, agent_id)
        if text is not None and not isinstance(cast("object", text), str):
            msg = f"persona text must be a string or None, got {type(text).__name__}"
            raise ConfigError(msg)
        self._store.set_persona(scope, None if text is None else clean_text(text))

    def get_persona(self, *, user_id: str | None = None, agent_id: str | None = None) -> str | None:
        """The scope's persona, or `None`."""
        return self._store.get_persona(self.scope(user_id, agent_id))

    def upsert_scene(
        self,
        name: str,
        *,
        summary: str,
        body: str,
        heat: int | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> SceneInfo:
        """Create or rewrite an L2 scene block; returns its metadata (with its final name).

        `heat=None` starts a new scene at 1 and adds 1 on every rewrite. Reading a scene never
        changes it, so the scene navigation in the system prompt stays byte-stable.
        """
        scope = self.scope(user_id, agent_id)
        if heat is not None:
            check_int("heat", heat, low=0, high=MAX_SQL_INT, fix=" (or None)")
        for field, value in (("name", name), ("summary", summary), ("body", body)):
            if not isinstance(cast("object", value), str):
                msg = f"scene {field} must be a string, got {type(value).__name__}"
                raise ConfigError(msg)
        return self._store.upsert_scene(
            scope,
            clean_text(name),
            summary=clean_text(summary),
            body=clean_text(body),
            heat=heat,
        )

    def list_scenes(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[SceneInfo]:
        """The scope's scenes, highest heat first."""
        return self._store.list_scenes(self.scope(user_id, agent_id))

    def read_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """One scene of the scope by name; `None` if absent. Paths and `..` raise `ConfigError`."""
        scope = self.scope(user_id, agent_id)
        if not isinstance(cast("object", name), str):
            msg = f"scene name must be a string, got {type(name).__name__} {shown(name)}"
            raise ConfigError(msg)
        return self._store.read_scene(scope, clean_text(name))  # as `upsert_scene` stored it

    def delete_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete one scene of the scope; returns whether it existed."""
        scope = self.scope(user_id, agent_id)
        if not isinstance(cast("object", name), str):
            msg = f"scene name must be a string, got {type(name).__name__} {shown(name)}"
            raise ConfigError(msg)
        return self._store.delete_scene(scope, clean_text(name))  # as `upsert_scene` stored it

    # -- recall and search --------------------------------------------------------------------

    @staticmethod
    def _user_text(user_text: object) -> object:
        return clean_text(user_text) if isinstance(user_text, str) else user_text

    def recall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        system_prompt: str | None = None,
        tools_guide: bool | Sequence[str] = True,
        now: dt.datetime | None = None,
    ) -> RecallResult | None:
        """Recall memories for this turn's user text (a string or content blocks).

        Args:
            user_text: The user's message for this turn.
            user_id: Owner; `None` is the default user.
            agent_id: Agent; `None` is the user's shared memory.
            session_key: Conversation of the turn. A session keeps the user profile it was
                first shown (`recall.profile_hold_seconds`), so the system message does not
                change when memories are added during it; `None` chooses it afresh every turn.
            system_prompt: The app's own system prompt. With `recall.language="auto"` its
                language is the language of the system context (English when not given), which
                keeps the system context byte-identical from turn to turn.
            tools_guide: Write the memory-tools guide into the system context (when
                `tools.enabled`); pass `False` when the model does not have the memory tools,
                or the names of those it has (the guide then names only them).
            now: The time of the turn, against which time expressions such as "last month"
                are resolved (`recall.time_aware`); `None` is the clock. A naive datetime is
                taken to be in the configured `timezone`. Pass it when replaying a past
                conversation.

        Returns:
            The injection for this turn, or `None` when recall is disabled or exceeded
            `recall.timeout_ms` (one warning is logged; nothing should be injected). Never raises
            for a timeout or backend failure unless `recall.on_error="raise"`; raises
            `StoreClosedError` after `close()`.
        """
        scope = self.scope(user_id, agent_id)
        check_optional_str("session_key", session_key)
        check_optional_str("system_prompt", system_prompt)
        request = RecallRequest(
            system_prompt=system_prompt,
            tools_guide=check_tools_guide(tools_guide),
            session_key=session_key,
            now=check_now(now),
        )
        return self._engine.recall(self._user_text(user_text), scope, request)

    async def arecall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        system_prompt: str | None = None,
        tools_guide: bool | Sequence[str] = True,
        now: dt.datetime | None = None,
    ) -> RecallResult | None:
        """Async version of `recall`."""
        scope = self.scope(user_id, agent_id)
        check_optional_str("session_key", session_key)
        check_optional_str("system_prompt", system_prompt)
        request = RecallRequest(
            system_prompt=system_prompt,
            tools_guide=check_tools_guide(tools_guide),
            session_key=session_key,
            now=check_now(now),
        )
        return await self._engine.arecall(self._user_text(user_text), scope, request)

    def search_memories(
        self,
        query: str,
        *,
        limit: int = 5,
        type: MemoryType | None = None,
        scene: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_after: dt.datetime | dt.date | str | None = None,
        created_before: dt.datetime | dt.date | str | None = None,
        active_after: dt.datetime | dt.date | str | None = None,
        active_before: dt.datetime | dt.date | str | None = None,
        now: dt.datetime | None = None,
        wait_for_vectors: bool = False,
    ) -> list[MemoryHit]:
        """Search the scope's L1 memories with recall's ranking: the best hits the caller asked for.

        Unlike automatic recall, which injects a memory only when its relevance reaches
        `recall.score_threshold`, a search returns the best-ranked `limit` memories whose
        relevance reaches a low floor (`tools.min_score`, or `min_score` here), like the
        `tdai_memory_search` tool.

        Vectors are computed in the background after a write, so a search right after one may
        rank the newest memories by their keywords only. `wait_for_vectors=True` first embeds
        the scope's memories still without a vector (read-your-writes, as the retriever and
        the LangGraph store do), bounded by `embedding.query_timeout_ms`; past it the search
        runs with what it has.

        Args:
            query: What to look for.
            limit: Most hits, 1..100.
            type: Only memories of this type.
            scene: Only memories whose scene name contains this text (case-insensitive).
            user_id: Owner; `None` is the default user.
            agent_id: Agent; `None` is the user's shared memory.
            min_score: Relevance floor in 0..1; `None` uses `tools.min_score`.
            metadata: Only memories whose metadata matches this filter: a plain value is
                equality (a missing key is `None`), an operator dict tests the value
                (`{"source": {"$in": ["email", "chat"]}}`; `$eq $ne $gt $gte $lt $lte $in
                $nin`), a `datetime`/`date` or ISO date compares as a time range. The same
                language as the `tdai_memory_search` tool, the retriever's `filter` and
                `as_store().search(filter=...)`; any other operator is a `ConfigError`.
            created_after: Only memories first written at or after this (inclusive; a date is
                its first instant, naive times are UTC).
            created_before: Only memories first written at or before this (a date: its end).
            active_after: Only memories whose activity (start/end times or timestamp) ends at
                or after this; memories without activity times are left out.
            active_before: Only memories whose activity starts at or before this.
            now: The time against which a time named in `query` ("last month", "上周") is
                resolved when no `created_*` / `active_*` filter is given: memories of that time
                then rank first (`recall.time_aware`). `None` is the clock.
            wait_for_vectors: Embed the scope's memories still without a vector first.

        Returns:
            Hits, best ranked first; `score` is the relevance in 0..1. Expired memories are
            never returned.
        """
        scope = self.scope(user_id, agent_id)
        check_flag("wait_for_vectors", wait_for_vectors)
        if type is not None and type not in MEMORY_TYPES:
            msg = f"type must be one of {list(MEMORY_TYPES)} or None, got {shown(type)}"
            raise ConfigError(msg)
        check_optional_str("scene", scene)
        where = memory_filter(
            metadata=metadata,
            created_after=created_after,
            created_before=created_before,
            active_after=active_after,
            active_before=active_before,
        )
        if wait_for_vectors:
            self._fresh_vectors(scope)
        return self._hits.memories(
            scope,
            query,
            limit=limit,
            min_score=min_score,
            kind=type,
            scene=scene,
            where=where,
            now=check_now(now),
        )

    def search_conversations(
        self,
        query: str,
        *,
        limit: int = 5,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
    ) -> list[MessageHit]:
        """Search the scope's L0 messages (optionally one session) with recall's ranking.

        Returns the best-ranked `limit` messages whose relevance reaches `tools.min_score` (or
        `min_score`); `score` is the relevance in 0..1.
        """
        scope = self.scope(user_id, agent_id)
        check_optional_str("session_key", session_key)
        return self._hits.messages(
            scope, query, limit=limit, min_score=min_score, session_key=session_key
        )

    # -- stats --------------------------------------------------------------------------------

    def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """Counts per layer and scope, index state, embedder identity and pending vectors.

        With neither `user_id` nor `agent_id`, every scope is counted (an administrative view);
        otherwise only the given scope.
        """
        self._check_open()
        store = self._store
        selected: Scope | None = None
        if user_id is None and agent_id is None:
            per_scope = tuple(store.scope_stats(s) for s in store.scopes())
        else:
            selected = self.scope(user_id, agent_id)
            one = store.scope_stats(selected)
            has_any = one.memories or one.messages or one.scenes or one.has_persona
            per_scope = (one,) if has_any else ()
        return StoreStats(
            path=store.location if store.durable else None,
            embedder=store.embedder_id,
            dimensions=store.vector_dimension(selected),
            tokenizer=store.tokenizer.identity,
            memories=sum(s.memories for s in per_scope),
            messages=sum(s.messages for s in per_scope),
            scenes=sum(s.scenes for s in per_scope),
            personas=sum(s.has_persona for s in per_scope),
            indexed_scopes=store.loaded_indexes(),
            scopes=per_scope,
            pending_vectors=store.pending_vector_count(selected),
            index_cache=store.index_cache_stats(),
        )

    # -- memory formation (formation/) ---------------------------------------------------------

    def _start_formation(self, model: BaseChatModel | str | None, callbacks: Callbacks) -> None:
        """Build the formation scheduler when a chat model is configured, and resume work."""
        from langchain_tdai_recall.formation.control import start_formation  # noqa: PLC0415

        scheduler = start_formation(
            store=self._store,
            searcher=self._searcher,
            config=self.config,
            upkeep=self._upkeep,
            model=model,
            callbacks=callbacks,
        )
        if scheduler is not None:
            self._formation_slot.append(scheduler)
            scheduler.resume()

    def memory_manager(self) -> MemoryManager:
        """The writer behind `tdai_manage_memory`, built once on first use (for the tools)."""
        self._check_open()
        with self._state_lock:
            if self._manager is None:
                from langchain_tdai_recall.formation.manager import MemoryManager  # noqa: PLC0415

                formation = self._formation
                self._manager = MemoryManager(
                    store=self._store,
                    searcher=self._searcher,
                    config=self.config,
                    caller=formation.engine.caller if formation is not None else None,
                    wake_upkeep=self._upkeep.wake if self._upkeep is not None else _nothing,
                )
            return self._manager

    def _store_rater(self) -> Callable[[Scope, str], None] | None:
        """What queues a LangGraph-store item for rating; `None` without a formation model."""
        formation = self._formation
        if formation is None or self._store.read_only:
            return None
        with self._state_lock:
            if self._rater is None:
                from langchain_tdai_recall.formation.rating import Rater  # noqa: PLC0415

                self._rater = Rater(
                    store=self._store, caller=formation.engine.caller, config=self.config
                )
            return self._rater.enqueue

    def rating_report(self) -> RatingReport | None:
        """What the background rating of LangGraph-store items did (`None` when it never ran).

        Items that `as_store()` stores without a `priority` in their value are rated by the
        formation model (see `formation.rating`); the report counts the memories rated, the
        failed calls (each retried) and the memories still waiting.
        """
        rater = self._rater
        return rater.report() if rater is not None else None

    def _require_formation(self) -> FormationScheduler:
        self._check_open()
        formation = self._formation
        if formation is None:
            msg = (
                "memory formation needs a chat model: open the store with "
                "TdaiMemory.open(path, extraction_model=model) (or set extraction.model), and "
                "keep extraction.enabled true"
            )
            raise ConfigError(msg)
        return formation

    def extract(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        all_scopes: bool = False,
        show_progress: bool | None = None,
        config: RunnableConfig | None = None,
    ) -> ExtractionReport:
        """Form memories now from every recorded message past the extraction cursors.

        Runs in the calling thread and waits for the model (a background run of the same
        scope finishes first). Turns the agent adapters captured are written first (waiting at
        most `close_timeout` for them). Failed windows keep their messages for a later retry;
        they are reported, not raised.

        Args:
            user_id: The scope's user (`None`: the default user).
            agent_id: The scope's agent.
            session_key: Only this session of the scope.
            all_scopes: Every scope with pending messages (an administrative call; `user_id`,
                `agent_id` and `session_key` are then ignored).
            show_progress: Progress bar over the pending messages (`None`: only on a terminal).
            config: A `RunnableConfig` (callbacks, tags) for the run.

        Returns:
            What was formed: windows, decisions, scene edits, token usage, errors.

        Raises:
            ConfigError: If no chat model is configured.
        """
        formation = self._require_formation()
        check_flag("all_scopes", all_scopes)
        check_flag("show_progress", show_progress, optional=True)
        check_optional_str("session_key", session_key)
        scope = self.scope(user_id, agent_id)
        self._writer.flush(self._close_timeout)  # captured turns first (bounded: a locked store)
        from langchain_tdai_recall.formation.control import extract_now  # noqa: PLC0415

        return extract_now(
            formation,
            scope,
            session_key=session_key,
            all_scopes=all_scopes,
            show_progress=show_progress,
            config=config,
        )

    def end_session(
        self, session_key: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """Tell recall and formation a session ended.

        The user profile the session held (`recall.profile_hold_seconds`) is released, so its
        next recall chooses it afresh; with a chat model, the session's pending turns are formed
        now, in the background. Never waits for the model or the database.
        """
        scope = self.scope(user_id, agent_id)
        if not isinstance(cast("object", session_key), str):
            msg = f"session_key must be a string, got {type(session_key).__name__}"
            raise ConfigError(msg)
        self._engine.holds.end(scope, session_key)
        formation = self._formation
        if formation is not None:
            formation.end_session(scope, clean_text(session_key))

    async def aend_session(
        self, session_key: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """Async version of `end_session`."""
        self.end_session(session_key, user_id=user_id, agent_id=agent_id)

    def history(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[MemoryVersion]:
        """Every version of a memory of the scope, oldest first.

        Updates, merges and deletions (by formation, the memory tool or the API) keep the
        replaced version; the last item is the current memory unless it was deleted or merged
        into another one (`change="merged"`, `related_ids` names the survivor).

        An id the scope never held returns `[]`, also when another scope holds it: like
        `get_memory`, which returns `None` there, the API never tells one scope whether another
        holds an id. A DEBUG log line says so.
        """
        scope = self.scope(user_id, agent_id)
        versions = self._store.memory_history(scope, check_lookup("memory_id", memory_id))
        if not versions:
            logger.debug(
                "history(%r): the scope (user %r, agent %r) never held this id; ids of other "
                "scopes are never visible, so this is [] as for an unknown id",
                memory_id,
                scope.user_id,
                scope.agent_id,
            )
        return versions

    # -- integrations -------------------------------------------------------------------------

    def middleware(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        capture: bool | None = None,
        on_turn: OnTurn | None = None,
        tools: bool | Sequence[str] = True,
    ) -> TdaiRecallMiddleware:
        """A `TdaiRecallMiddleware` for `langchain.agents.create_agent` (SPEC §5).

        Args:
            user_id: User of the scope when a run names none (in `runtime.context` or
                `config["configurable"]`); `None` uses the store's default user.
            agent_id: Agent of the scope when a run names none.
            session_key: Session when a run names none (default: the thread id, else
                `"default"`).
            require_user_id: Raise `ScopeError` when a run names no user and none is given here,
                instead of using the default user.
            capture: Record each turn to L0; `None` follows `capture.enabled`.
            on_turn: Called with the `TurnEvent` of every turn (may be async in async runs).
            tools: `False` registers no memory tools and writes no tools guide, for a model
                without `bind_tools` (such as `GenericFakeChatModel`): recall still runs.
                `True` registers them when `tools.enabled` (the default). A list of tool
                names registers only those, and the tools guide names only them: beside
                LangMem's tools, `["tdai_conversation_search", "tdai_read_scene"]` keeps one
                tool that searches memories.

        Returns:
            The middleware; it registers the memory tools itself unless `tools` is off.

        Raises:
            ConfigError: If an argument is invalid (`ScopeError` for a bad id).
        """
        self._check_open()
        from langchain_tdai_recall.middleware import TdaiRecallMiddleware  # noqa: PLC0415

        return TdaiRecallMiddleware(
            self,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
            capture=capture,
            on_turn=on_turn,
            tools=tools,
        )

    def tools(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        budget: ToolBudget | None = None,
        names: Sequence[str] | None = None,
    ) -> list[BaseTool]:
        """The memory tools: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`.

        With `tools.manage_memory` set, `tdai_manage_memory` (memory formation) comes fourth.

        Args:
            user_id: User of the scope when a call names none (executors that pass no config to
                tools need it); `None` uses the store's default user.
            agent_id: Agent of the scope when a call names none.
            session_key: Session when a call names none (only reported, never searched).
            require_user_id: Raise `ScopeError` instead of falling back to the default user.
            budget: An explicit per-turn `ToolBudget` that you `reset()` every turn; without it
                the cap is `tools.max_calls_per_turn`, derived from the graph state inside an
                agent or kept per parent run elsewhere.
            names: Only these tools (a list of their names; `None`: all), for an agent that
                has other memory tools already, such as LangMem's.

        Returns:
            The three tools, always in this order (then `tdai_manage_memory`, when enabled);
            with `names`, those of them.

        Raises:
            ConfigError: If an argument is invalid (`ScopeError` for a bad id).
        """
        self._check_open()
        from langchain_tdai_recall.tools import create_memory_tools  # noqa: PLC0415

        return create_memory_tools(
            self,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
            budget=budget,
            names=names,
        )

    def as_runnable(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        tools_guide: bool = False,
    ) -> RecallRunnable:
        """A `Runnable` that injects recall into a prompt's messages (SPEC §5).

        Args:
            user_id: User when `config["configurable"]` names none at invoke time; `None` uses
                the store's default user.
            agent_id: Agent when `configurable` names none.
            session_key: Session when `configurable` names none (else its `thread_id`).
            require_user_id: Raise `ScopeError` instead of falling back to the default user.
            tools_guide: Write the memory-tools guide into the system context; only for a model
                that has the memory tools (`wrap_model` decides this from `bind_tools`).

        Returns:
            A runnable from a `PromptValue`, a message list or a string to the injected messages.

        Raises:
            ScopeError: If an id is invalid.
        """
        self._check_open()
        from langchain_tdai_recall.lcel import create_recall_runnable  # noqa: PLC0415

        return create_recall_runnable(
            self,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
            tools_guide=tools_guide,
        )

    def wrap_model(
        self,
        model: BaseChatModel,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        capture: bool | None = None,
    ) -> RecallChatModel:
        """A chat model whose `bind_tools(...)` result injects recall before every call.

        An answer that ends a turn (it asks for no tool) records the turn to L0 in the
        background (the human text as typed and the answer), like the agent middleware, so
        memory formation learns from chains too.

        Args:
            model: The chat model to wrap.
            user_id: User when `config["configurable"]` names none (executors that pass no
                config need it); `None` uses the store's default user.
            agent_id: Agent when `configurable` names none.
            session_key: Session when `configurable` names none.
            require_user_id: Raise `ScopeError` instead of falling back to the default user.
            capture: Record answered turns to L0; `None` follows `capture.enabled`.

        Returns:
            The wrapped model.

        Raises:
            ConfigError: If `model` is not a chat model (`ScopeError` for a bad id).
        """
        self._check_open()
        from langchain_tdai_recall.lcel import wrap_model  # noqa: PLC0415

        return wrap_model(
            self,
            model,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
            capture=capture,
        )

    def as_retriever(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        k: int = 5,
        search_type: SearchType = "similarity",
        score_threshold: float | None = None,
        require_user_id: bool = False,
        filter: Mapping[str, Any] | None = None,
        created_after: dt.datetime | dt.date | str | None = None,
        created_before: dt.datetime | dt.date | str | None = None,
        active_after: dt.datetime | dt.date | str | None = None,
        active_before: dt.datetime | dt.date | str | None = None,
    ) -> TdaiRetriever:
        """A LangChain `BaseRetriever` over this store's L1 memories (RAG chains, ensembles).

        It ranks like `search_memories` and the `tdai_memory_search` tool and returns one
        `Document` per memory (the memory text; id, scores, type, scene, priority, activity
        times, user and agent in `metadata`).

        Args:
            user_id: User when `config["configurable"]` names none at invoke time; `None` uses
                the store's default user.
            agent_id: Agent when `configurable` names none.
            k: Most documents per call, 1..100 (`invoke(query, k=...)` overrides it).
            search_type: `"similarity"`: the best `k` above the floor `tools.min_score`;
                `"similarity_score_threshold"`: the best `k` whose relevance reaches
                `score_threshold`.
            score_threshold: Relevance floor in 0..1 for `"similarity_score_threshold"`.
            require_user_id: Raise `ScopeError` instead of falling back to the default user.
            filter: Metadata filter of every call, in `search_memories`' language (plain
                values, `$eq $ne $gt $gte $lt $lte $in $nin`, times as ranges).
            created_after: Only memories first written at or after this.
            created_before: Only memories first written at or before this.
            active_after: Only memories whose activity ends at or after this.
            active_before: Only memories whose activity starts at or before this.

        Each filter can also be given to `invoke` for one call, as can `k`; any other
        `invoke` keyword is a `ConfigError`.

        Returns:
            The retriever.

        Raises:
            ConfigError: If an argument is invalid (`ScopeError` for a bad id).
        """
        self._check_open()
        from langchain_tdai_recall.retriever import TdaiRetriever  # noqa: PLC0415

        return TdaiRetriever(
            memory=self,
            user_id=user_id,
            agent_id=agent_id,
            k=k,
            search_type=search_type,
            score_threshold=score_threshold,
            require_user_id=require_user_id,
            filter=None if filter is None else dict(filter),
            created_after=created_after,
            created_before=created_before,
            active_after=active_after,
            active_before=active_before,
        )

    # -- LangGraph store (issue 16) --------------------------------------------------------------

    def as_store(
        self,
        *,
        namespace: Sequence[str] = ("memories", "{user_id}"),
        agent_id: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        memory_type: MemoryType = "episodic",
        cross_scope: bool = False,
    ) -> TdaiStore:
        """This memory as a LangGraph `BaseStore` (`TdaiStore`).

        For `create_agent(..., store=...)`, tools reading `runtime.store`, and LangMem's
        memory tools.

        Items are memories of the scope their namespace names: with the default template
        `("memories", "{user_id}")` the item `(("memories", "alice"), key)` is memory `key` of
        user `alice`, and so is `(("memories", "alice", "work"), key2)`; automatic recall for
        alice sees their text. See `graph_store` for values, `index`, search, filters and TTL.

        Args:
            namespace: The namespace template: literals and `"{user_id}"` (once), optionally
                `"{agent_id}"`. An item's namespace starts like it and may go deeper;
                namespaces that do not start like it are refused (`NamespaceError`, a
                `ScopeError`). `("{user_id}",)` makes the first element the user.
            agent_id: The agent of every item when the template has no `"{agent_id}"`.
            index: LangGraph's `IndexConfig`; its `fields` choose the text of a value.
            ttl: LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`;
                `sweep_interval_minutes` shortens the memory's background expiry sweep to that
                interval when `store.expiry_sweep_seconds` is longer).
            memory_type: Type of the memories new items become.
            cross_scope: Let a search whose prefix stops above the user element search every
                user's items (an administrative store: never give it to an agent). Without it
                such a search raises `NamespaceError`.

        Raises:
            ConfigError: If an argument is invalid.
        """
        self._check_open()
        from langchain_tdai_recall.graph_store import TdaiStore  # noqa: PLC0415 - langgraph

        upkeep = self._upkeep
        timeout = self.config.embedding.query_timeout_ms / 1000
        graph_store = TdaiStore(
            self,
            store=self._store,
            hits=self._hits,
            fresh=self._fresh_vectors if upkeep is not None else None,
            embed=(lambda texts: upkeep.embed_now(texts, timeout)) if upkeep is not None else None,
            namespace=namespace,
            agent_id=agent_id,
            index=index,
            ttl=ttl,
            memory_type=memory_type,
            rate=self._store_rater(),
            cross_scope=cross_scope,
        )
        if graph_store.sweep_seconds is not None and self._sweeper is not None:
            self._sweeper.sweep_at_least_every(graph_store.sweep_seconds)
        return graph_store

    def import_upstream(
        self,
        data_dir: str | os.PathLike[str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> ImportReport:
        """Import a TencentDB Agent Memory data directory into one scope (SPEC §8)."""
        self.scope(user_id, agent_id)
        if not isinstance(cast("object", data_dir), str | os.PathLike) or not str(data_dir).strip():
            msg = f"data_dir must be a directory path, got {shown(data_dir)}"
            raise ConfigError(msg)
        from langchain_tdai_recall.upstream import import_upstream  # noqa: PLC0415

        return import_upstream(
            self, data_dir, user_id=user_id, agent_id=agent_id, show_progress=show_progress
        )

    # -- erasure and L0 export (issue 16) -------------------------------------------------------

    def forget(
        self,
        *,
        user_id: str | None,
        agent_id: str | None = None,
        all_agents: bool = False,
        timeout: float = DEFAULT_FORGET_TIMEOUT_S,
        reclaim: Reclaim = "vacuum",
    ) -> ForgetReport:
        """Erase everything of a scope, or of every scope of a user (`all_agents=True`).

        `user_id` must be given (`None` names the configured default user). `agent_id=None` is
        the user's shared memory only, as everywhere else; `all_agents=True` (without
        `agent_id`) erases the shared memory and every agent's memory of the user, the erasure
        a request to delete a person's data needs.

        Erased, per scope: L1 memories with their vectors and version history, L0 messages,
        scenes, the persona, memory formation's state (session cursors, queued scene work,
        leases), this process's search indexes of the scope and their snapshot files. Captured
        turns still queued, the memory tool's background consolidations and a formation run of
        the scope are waited for first (at most `timeout` seconds), so none of them writes the
        scope again afterwards (see `_facade.forget`). Another process sees the erasure at its next
        call; a new process finds nothing.

        `reclaim` says how PostgreSQL drops the erased rows from its files afterwards
        (`Reclaim`: `"vacuum"` by default, `"full"` rewrites the tables, `"none"` leaves it to
        autovacuum, e.g. for many erasures followed by one `VACUUM`); the directory store
        overwrites the freed pages while it erases.

        Returns:
            A `ForgetReport` with the counts per scope and in total.

        Raises:
            StoreReadOnlyError: If the store was opened read-only.
            StoreWriteError: If the background work did not finish within `timeout` (nothing
                of the scope still waiting was erased).
        """
        check_flag("all_agents", all_agents)
        wait = check_timeout("timeout", timeout)
        if reclaim not in ("vacuum", "full", "none"):
            msg = (
                f"forget: reclaim must be 'vacuum', 'full' or 'none', got {shown(reclaim)}; "
                "'vacuum' is the default"
            )
            raise ConfigError(msg)
        scope = self.scope(user_id, agent_id)
        if all_agents and agent_id is not None:
            msg = (
                f"forget: all_agents=True erases every agent of the user; pass agent_id=None "
                f"with it, got agent_id={shown(agent_id)}"
            )
            raise ConfigError(msg)
        if self._store.read_only:
            msg = (
                f"the memory store {self._store.location} was opened read-only; open it without "
                "read_only=True to forget a scope"
            )
            raise StoreReadOnlyError(msg)
        scopes = [scope]
        if all_agents:
            scopes += [s for s in self._store.user_scopes(scope.user_id) if s != scope]
        from langchain_tdai_recall._facade.forget import erase_scopes  # noqa: PLC0415

        for each in scopes:  # the profiles sessions hold keep memory text: drop them too
            self._engine.holds.end(each)
        return erase_scopes(
            self._store,
            scopes,
            writer=self._writer,
            manager=self._manager,
            formation=self._formation,
            timeout=wait,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            all_agents=all_agents,
            reclaim=reclaim,
        )

    def list_messages(
        self,
        *,
        session_key: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[MessageRecord]:
        """L0 messages of the scope, in the order they were stored, optionally of one session.

        `limit=None` lists all; `offset` skips that many first (page through a large scope).
        `tdai-recall export --messages` writes them as JSON Lines that `import-jsonl` reads
        back.
        """
        scope = self.scope(user_id, agent_id)
        check_optional_str("session_key", session_key)
        if limit is not None:
            check_int("limit", limit, low=0, high=MAX_SQL_INT, fix=" (or None for all)")
        check_int("offset", offset, low=0, high=MAX_SQL_INT)
        return self._store.list_messages(scope, session_key=session_key, limit=limit, offset=offset)

    def delete_messages(
        self,
        ids: Sequence[str] | str | None = None,
        *,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """Delete L0 messages of the scope by id, or every message of one session.

        Give exactly one of `ids` (a list of ids, or one id) and `session_key`. Ids the scope
        does not hold are ignored. A message that followed a deleted one keeps no trace of it
        (its stored context is rebuilt, and it is embedded again). Memories formed from the
        messages are not touched (`delete_memory`, or `forget` for everything).

        Returns:
            How many messages were deleted.
        """
        scope = self.scope(user_id, agent_id)
        check_optional_str("session_key", session_key)
        if (ids is None) == (session_key is None):
            msg = (
                "delete_messages needs exactly one of ids=[...] (message ids) and "
                f"session_key=... (a whole session), got ids={shown(ids)} and "
                f"session_key={shown(session_key)}"
            )
            raise ConfigError(msg)
        wanted: list[str] | None = None
        if ids is not None:
            items: object = [ids] if isinstance(ids, str) else ids
            if not isinstance(items, Sequence):
                msg = f"ids must be a list of message ids, got {type(ids).__name__}"
                raise ConfigError(msg)
            wanted = [check_lookup("ids[]", i) for i in items]
            if not wanted:
                return 0
        deleted = self._store.delete_messages(scope, ids=wanted, session_key=session_key)
        if deleted:
            self._wake_upkeep()  # the messages after a deleted one wait for a new vector
        return deleted

    # -- async twins: each runs its sync version on a worker thread (`_runtime.async_api`) ----

    aadd_memory = async_twin(add_memory)
    aadd_memories = async_twin(add_memories)
    aget_memory = async_twin(get_memory)
    asweep_expired = async_twin(sweep_expired)
    adelete_memory = async_twin(delete_memory)
    alist_memories = async_twin(list_memories)
    arecord_messages = async_twin(record_messages)
    aset_persona = async_twin(set_persona)
    aget_persona = async_twin(get_persona)
    aupsert_scene = async_twin(upsert_scene)
    alist_scenes = async_twin(list_scenes)
    aread_scene = async_twin(read_scene)
    adelete_scene = async_twin(delete_scene)
    asearch_memories = async_twin(search_memories)
    asearch_conversations = async_twin(search_conversations)
    astats = async_twin(stats)
    apreload = async_twin(preload)
    areindex = async_twin(reindex)
    aflush = async_twin(flush)
    aclose = async_twin(close)
    aextract = async_twin(extract)
    ahistory = async_twin(history)
    aimport_upstream = async_twin(import_upstream)
    aforget = async_twin(forget)
    alist_messages = async_twin(list_messages)
    adelete_messages = async_twin(delete_messages)


_SATISFIES_HOST: type[MemoryHost] = TdaiMemory
"""The facade is the adapters' `MemoryHost` (mypy checks every member)."""

_SATISFIES_STORE_HOST: type[StoreHost] = TdaiMemory
"""The facade is the LangGraph store's `StoreHost` (mypy checks every member)."""
_SATISFIES_IMPORT_TARGET: type[ImportTarget] = TdaiMemory
"""And the upstream importer's `ImportTarget` (`upstream.importer`)."""
