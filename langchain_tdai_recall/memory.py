"""`TdaiMemory`: the public facade over the store, the recall engine and the integrations."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Self, TypeVar, cast

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import types as tdai_types
from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.errors import ConfigError, EmbeddingError, ScopeError
from langchain_tdai_recall.recall.engine import RecallEngine
from langchain_tdai_recall.recall.search import Searcher, SearchOutcome, normalize_rows
from langchain_tdai_recall.store.store import MemoryStore, Scope
from langchain_tdai_recall.text.clean import clean_query, content_text, strip_injected_blocks
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.text.tokenize import get_tokenizer
from langchain_tdai_recall.types import (
    MEMORY_TYPES,
    ImportReport,
    MemoryHit,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageHit,
    MessageRecord,
    RecallResult,
    SceneBlock,
    SceneInfo,
    ScopeStats,
    StoreStats,
)

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import BaseTool

    from langchain_tdai_recall.formation.report import ExtractionReport
    from langchain_tdai_recall.formation.scheduler import FormationScheduler
    from langchain_tdai_recall.middleware import TdaiRecallMiddleware

__all__ = ["TdaiMemory"]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

TimeInput = str | dt.date | dt.datetime | None
EmbeddingsInput = Embeddings | Literal["default"] | None
_MAX_ID_CHARS = 256
_LEGACY_ROLES = {"human": "user", "ai": "assistant", "user": "user", "assistant": "assistant"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_id(field: str, value: object, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        msg = f"{field} must be a non-empty string, got {value!r}"
        raise ScopeError(msg) if field in ("user_id", "agent_id") else ConfigError(msg)
    if len(value) > _MAX_ID_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in value):
        msg = (
            f"{field} {value[:40]!r} is invalid: use at most {_MAX_ID_CHARS} characters and no "
            "control characters"
        )
        raise ScopeError(msg) if field in ("user_id", "agent_id") else ConfigError(msg)
    return value


def _has_explicit_id(data: object) -> bool:
    if isinstance(data, MemoryRecord):
        return bool(data.id)
    return isinstance(data, Mapping) and bool(data.get("id"))


def _normalize_time(field: str, value: TimeInput) -> str | None:
    """Validate an activity time and return its ISO-8601 text (a date stays a date)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return dt.date.fromisoformat(text).isoformat()
            return dt.datetime.fromisoformat(text).isoformat()
        except ValueError:
            pass
    msg = (
        f"{field} must be an ISO-8601 date or date-time (e.g. '2025-05-01' or "
        f"'2025-05-01T14:30:00+08:00'), a date or a datetime, got {value!r}"
    )
    raise ConfigError(msg)


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
        store: MemoryStore,
        embeddings: Embeddings | None,
        config: TdaiConfig,
    ) -> None:
        """Use `TdaiMemory.open(...)`; this constructor wires already-built parts."""
        self.config = config
        self.embeddings = embeddings
        self._store = store
        self._embed_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tdai-embed")
        self._recall_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tdai-recall")
        self._searcher = Searcher(
            store,
            embeddings,
            executor=self._embed_pool,
            query_timeout_ms=config.embedding.query_timeout_ms,
            max_input_chars=config.embedding.max_input_chars,
        )
        self._engine = RecallEngine(store, self._searcher, config, executor=self._recall_pool)
        self._formation: FormationScheduler | None = None
        self._closed = False
        self._close_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        embeddings: EmbeddingsInput = "default",
        config: TdaiConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
        show_progress: bool | None = None,
        extraction_model: BaseChatModel | str | None = None,
        extraction_callbacks: Callbacks = None,
    ) -> Self:
        """Open (creating on first use) a memory store.

        Args:
            path: A directory for a durable store, or `None` for an in-memory store.
            embeddings: `"default"` (the bundled offline embedder, loaded on first use), any
                LangChain `Embeddings`, or `None` for keyword-only recall.
            config: A `TdaiConfig`, a dict (snake_case or upstream camelCase keys), or a path
                to a JSON file.
            show_progress: Show a progress bar when stored vectors must be re-embedded because
                the embedder changed (`None`: only on a terminal).
            extraction_model: A LangChain chat model (or a `provider:model` string for
                `init_chat_model`) that forms memories from the recorded conversations in the
                background (see "Memory formation" in the README). Default: the
                `extraction.model` setting; without either, nothing is formed.
            extraction_callbacks: LangChain callbacks for background formation runs: they
                receive the `tdai_extraction` event and the model calls.

        Raises:
            ConfigError: If `config`, `embeddings` or `extraction_model` is invalid.
            StoreError: If the directory cannot be opened.
        """
        from langchain_tdai_recall.embeddings import (  # noqa: PLC0415 - keeps import light
            embedder_identity,
            resolve_embeddings,
        )

        cfg = TdaiConfig.coerce(config)
        emb = resolve_embeddings(embeddings)
        store = MemoryStore(
            Path(path) if path is not None else None,
            tokenizer=get_tokenizer(cfg.store.tokenizer),
            embedder_id=embedder_identity(emb) if emb is not None else None,
            synchronous=cfg.store.synchronous,
        )
        memory = cls(store=store, embeddings=emb, config=cfg)
        try:
            memory.reindex(show_progress=show_progress)
        except BaseException:
            memory.close()
            raise
        memory._warm_up()
        try:
            memory._start_formation(extraction_model, extraction_callbacks)
        except BaseException:
            memory.close()
            raise
        return memory

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

    def close(self) -> None:
        """Close the store; later calls raise `StoreClosedError`. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._formation is not None:  # extracts what is pending, bounded in time
            self._formation.close(self.config.pipeline.close_timeout_seconds)
        self._recall_pool.shutdown(wait=False, cancel_futures=True)
        self._embed_pool.shutdown(wait=False, cancel_futures=True)
        self._store.close()

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
        self.close()

    def __repr__(self) -> str:
        where = str(self._store.path) if self._store.path else "in-memory"
        return f"TdaiMemory({where}, embedder={self._store.embedder_id!r})"

    @property
    def path(self) -> Path | None:
        """The store directory, or `None` for an in-memory store."""
        return self._store.path

    # -- scopes -------------------------------------------------------------------------------

    def scope(self, user_id: str | None = None, agent_id: str | None = None) -> Scope:
        """Validate and resolve a scope; `user_id=None` is `store.default_user_id`."""
        user = self.config.store.default_user_id if user_id is None else user_id
        return (
            _check_id("user_id", user, optional=False) or "",
            _check_id("agent_id", agent_id, optional=True),
        )

    def preload(self, *, user_id: str | None = None, agent_id: str | None = None) -> None:
        """Build a scope's in-memory indexes now instead of on its first search.

        Indexes are built from SQLite the first time a scope is searched, which takes about a
        second per 10k memories; a recall that meets a long build returns `None` (timeout) while
        the build finishes in the background. Servers holding large scopes can call this at
        start-up.
        """
        scope = self.scope(user_id, agent_id)
        self._store.index(scope, "l1")
        self._store.index(scope, "l0")

    # -- embedding helpers --------------------------------------------------------------------

    def _embed_texts(self, texts: Sequence[str]) -> npt.NDArray[np.float32] | None:
        """Embed texts in batches; `None` (with a warning) if the embedder fails."""
        if self.embeddings is None or not texts:
            return None
        limit = self.config.embedding.max_input_chars
        batch = self.config.embedding.batch_size
        try:
            parts = []
            for start in range(0, len(texts), batch):
                chunk = [t[:limit] for t in texts[start : start + batch]]
                vectors = self.embeddings.embed_documents(chunk)
                if len(vectors) != len(chunk):
                    msg = f"embedder returned {len(vectors)} vectors for {len(chunk)} texts"
                    raise EmbeddingError(msg)
                parts.append(np.asarray(vectors, dtype=np.float32))
            return normalize_rows(np.concatenate(parts))
        except Exception as exc:
            logger.warning(
                "embedding %d texts failed (%s: %s); storing them for keyword search and "
                "re-embedding on the next reindex()",
                len(texts),
                type(exc).__name__,
                exc,
            )
            return None

    def reindex(self, *, show_progress: bool | None = None) -> int:
        """Embed every stored row whose vector is missing or came from another embedder.

        Runs at `open()`, so a store opened with a new embedder is re-embedded (with progress)
        instead of mixing vectors. Returns how many rows were embedded.
        """
        store_embedder = self._store.embedder_id
        if self.embeddings is None or store_embedder is None:
            return 0
        from langchain_tdai_recall._progress import progress  # noqa: PLC0415

        done = 0
        for layer in ("l1", "l0"):
            stale = self._store.db.count_stale_vectors(layer, store_embedder)
            if not stale:
                continue
            logger.info("re-embedding %d %s rows for embedder %s", stale, layer, store_embedder)
            batches = self._store.db.stale_vector_batches(
                layer, store_embedder, self.config.embedding.batch_size
            )
            with progress(stale, desc=f"re-embedding {layer}", enabled=show_progress) as bar:
                for rows in batches:
                    vectors = self._embed_texts([text for _, _, text in rows])
                    if vectors is None:
                        return done
                    self._store.db.set_vectors(
                        layer, [(r, s) for r, s, _ in rows], vectors, store_embedder
                    )
                    done += len(rows)
                    bar.update(len(rows))
        return done

    # -- L1 memories --------------------------------------------------------------------------

    def _record(
        self, data: MemoryRecord | Mapping[str, Any], scope: Scope, now: str
    ) -> MemoryRecord:
        given = cast("object", data)
        if isinstance(given, MemoryRecord):
            fields: dict[str, Any] = {
                k: getattr(given, k) for k in MemoryRecord.__dataclass_fields__
            }
        elif isinstance(given, Mapping):
            unknown = set(given) - set(MemoryRecord.__dataclass_fields__)
            if unknown:
                msg = (
                    f"unknown memory field(s) {sorted(unknown)}; allowed: "
                    f"{sorted(MemoryRecord.__dataclass_fields__)}"
                )
                raise ConfigError(msg)
            fields = dict(given)
        else:
            msg = f"a memory must be a MemoryRecord or a dict, got {type(given).__name__}"
            raise ConfigError(msg)
        content = fields.get("content")
        if not isinstance(content, str) or not content.strip():
            msg = f"content must be a non-empty string, got {content!r}"
            raise ConfigError(msg)
        mtype = fields.get("type", "episodic")
        if mtype not in MEMORY_TYPES:
            msg = f"type must be one of {list(MEMORY_TYPES)}, got {mtype!r}"
            raise ConfigError(msg)
        priority = fields.get("priority", 50)
        if isinstance(priority, bool) or not isinstance(priority, int) or not -1 <= priority <= 100:
            msg = (
                f"priority must be an integer in -1..100 (-1: strict global rule), got {priority!r}"
            )
            raise ConfigError(msg)
        scene = fields.get("scene_name") or ""
        if not isinstance(scene, str):
            msg = f"scene_name must be a string, got {scene!r}"
            raise ConfigError(msg)
        session_key = fields.get("session_key") or ""
        if not isinstance(session_key, str):
            msg = f"session_key must be a string, got {session_key!r}"
            raise ConfigError(msg)
        sources = fields.get("source_message_ids") or ()
        if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
            msg = f"source_message_ids must be a list of strings, got {sources!r}"
            raise ConfigError(msg)
        memory_id = fields.get("id") or f"m_{uuid.uuid4().hex}"
        _check_id("id", memory_id, optional=False)
        created = fields.get("created_at") or now
        return MemoryRecord(
            id=memory_id,
            content=content.strip(),
            type=mtype,
            scene_name=scene.strip(),
            priority=priority,
            activity_start_time=_normalize_time(
                "activity_start_time", fields.get("activity_start_time")
            ),
            activity_end_time=_normalize_time("activity_end_time", fields.get("activity_end_time")),
            timestamp=_normalize_time("timestamp", fields.get("timestamp")),
            user_id=scope[0],
            agent_id=scope[1],
            session_key=session_key,
            source_message_ids=tuple(sources),
            created_at=str(created),
            updated_at=now,
        )

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
    ) -> MemoryRecord:
        """Store one L1 memory, or update it when `id` already exists in the scope.

        Args:
            content: The memory text.
            type: `persona`, `episodic` or `instruction`.
            scene_name: Free-form situation label.
            priority: 0..100, higher is more important; -1 marks a strict global rule.
            activity_start_time: When the remembered activity started (date or date-time).
            activity_end_time: When it ended.
            timestamp: When a point-in-time event happened.
            user_id: Owner; `None` is the default user.
            agent_id: Agent; `None` is the user's shared memory.
            id: Memory id; generated when omitted.
            session_key: Conversation the memory came from.
            source_message_ids: L0 message ids it was extracted from.

        Returns:
            The stored record.

        Raises:
            ConfigError: If a field is invalid (the message names it).
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
            "source_message_ids": tuple(source_message_ids),
        }
        return self.add_memories([record], user_id=user_id, agent_id=agent_id)[0]

    def add_memories(
        self,
        records: Iterable[MemoryRecord | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> list[MemoryRecord]:
        """Store many L1 memories in one scope; texts are embedded in batches.

        Every record is validated before anything is written, so a bad record loses nothing.
        A record's own `user_id`/`agent_id` are ignored: the scope is the call's. A record
        without an `id` whose text exactly duplicates a memory of the scope (same text after
        normalising case, width, whitespace and final punctuation) is not stored again: the
        existing memory is returned in its place. A given `id` is always written (upsert).
        """
        scope = self.scope(user_id, agent_id)
        now = _now()
        given = list(records)
        prepared = [self._record(r, scope, now) for r in given]
        if not prepared:
            return []
        # -- exact duplicates (formation issue): id-less records never pile up --------------
        dedupe = [not _has_explicit_id(r) for r in given]
        from langchain_tdai_recall._progress import progress  # noqa: PLC0415

        scope_id = self._store.scope_id(scope, create=True)
        assert scope_id is not None
        stored: list[MemoryRecord] = []
        chunk = max(self.config.embedding.batch_size, 256)
        show = (
            show_progress
            if show_progress is not None
            else (None if len(prepared) > 1000 else False)
        )
        with progress(len(prepared), desc="adding memories", enabled=show) as bar:
            for start in range(0, len(prepared), chunk):
                part = prepared[start : start + chunk]
                flags = dedupe[start : start + chunk]
                known = self._store.db.existing_duplicates(
                    scope_id, [r.content for r, f in zip(part, flags, strict=True) if f]
                )
                found: dict[int, MemoryRecord] = {}
                for i, (rec, flag) in enumerate(zip(part, flags, strict=True)):
                    key = content_fingerprint(rec.content)
                    if flag and key in known:  # a known duplicate is not embedded or written
                        old = self._store.db.get_memory(scope_id, known[key], scope)
                        if old is not None:
                            found[i] = old
                fresh = [i for i in range(len(part)) if i not in found]
                vectors = self._embed_texts([part[i].content for i in fresh])
                written = self._store.db.upsert_memories(
                    scope_id,
                    [part[i] for i in fresh],
                    embedder=self._store.embedder_id if vectors is not None else None,
                    vectors=vectors,
                    dedupe=[flags[i] for i in fresh],
                )
                found.update(zip(fresh, written, strict=True))
                original = [found[i] for i in range(len(part))]
                stored += original
                bar.update(len(original))
        return stored

    def get_memory(
        self, id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> MemoryRecord | None:
        """One memory of the scope by id, or `None`."""
        scope = self.scope(user_id, agent_id)
        scope_id = self._store.scope_id(scope)
        return None if scope_id is None else self._store.db.get_memory(scope_id, id, scope)

    def delete_memory(
        self, id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete one memory of the scope; returns whether it existed."""
        scope = self.scope(user_id, agent_id)
        scope_id = self._store.scope_id(scope)
        return scope_id is not None and self._store.db.delete_memories(scope_id, [id]) > 0

    def list_memories(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        type: MemoryType | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        """Memories of the scope, oldest first, optionally of one type."""
        scope = self.scope(user_id, agent_id)
        if type is not None and type not in MEMORY_TYPES:
            msg = f"type must be one of {list(MEMORY_TYPES)} or None, got {type!r}"
            raise ConfigError(msg)
        scope_id = self._store.scope_id(scope)
        if scope_id is None:
            return []
        return self._store.db.list_memories(scope_id, scope, type=type, limit=limit, offset=offset)

    # -- L0 messages --------------------------------------------------------------------------

    def _message(
        self, message: object, scope: Scope, session_key: str, session_id: str, now: str
    ) -> MessageRecord | None:
        if isinstance(message, Mapping):
            role, content = message.get("role"), message.get("content")
            msg_id = message.get("id")
            recorded = message.get("recorded_at") or message.get("timestamp") or now
        else:
            role = getattr(message, "type", None)
            content = getattr(message, "content", None)
            msg_id = getattr(message, "id", None)
            recorded = now
        mapped = _LEGACY_ROLES.get(str(role))
        if mapped is None:
            return None  # system, tool and function messages are not conversation memory
        text = strip_injected_blocks(content_text(content)).strip()
        if not text:
            return None
        if isinstance(recorded, int | float):
            recorded = dt.datetime.fromtimestamp(recorded / 1000, dt.UTC).isoformat()
        return MessageRecord(
            id=str(msg_id) if msg_id else f"msg_{uuid.uuid4().hex}",
            role=mapped,
            content=text,
            session_key=session_key,
            session_id=session_id,
            recorded_at=str(recorded),
            user_id=scope[0],
            agent_id=scope[1],
        )

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
        `recorded_at`). Human and AI messages are kept (system and tool messages are not), with
        any injected memory blocks removed; empty messages and ids already stored are skipped.
        """
        if not isinstance(cast("object", session_key), str):
            msg = f"session_key must be a string, got {session_key!r}"
            raise ConfigError(msg)
        scope = self.scope(user_id, agent_id)
        now = _now()
        prepared = [
            m
            for m in (self._message(x, scope, session_key, session_id, now) for x in messages)
            if m is not None
        ]
        if not prepared:
            return 0
        scope_id = self._store.scope_id(scope, create=True)
        assert scope_id is not None
        present = self._store.db.message_ids_present(scope_id, [m.id for m in prepared])
        fresh = [m for m in prepared if m.id not in present]
        if not fresh:
            return 0
        vectors = self._embed_texts([m.content for m in fresh])
        inserted = self._store.db.insert_messages(
            scope_id,
            fresh,
            embedder=self._store.embedder_id if vectors is not None else None,
            vectors=vectors,
        )
        if inserted:  # an empty capture is not a turn (G-X20)
            self._after_capture(tdai_types.Scope(scope[0], scope[1]), session_key)
        return inserted

    def _after_capture(self, scope: tdai_types.Scope, session_key: str) -> None:
        """The formation trigger: called once after each captured turn is stored.

        Counts the turn for memory formation (every N turns, warm-up, idle timer). It only
        hands the turn to the formation scheduler's queue, so it costs the turn nothing
        measurable and never raises into it.
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
        if text is not None and not isinstance(cast("object", text), str):
            msg = f"persona text must be a string or None, got {type(text).__name__}"
            raise ConfigError(msg)
        self._store.documents.set_persona(self.scope(user_id, agent_id), text)

    def get_persona(self, *, user_id: str | None = None, agent_id: str | None = None) -> str | None:
        """The scope's persona, or `None`."""
        return self._store.documents.get_persona(self.scope(user_id, agent_id))

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
        if heat is not None and (isinstance(heat, bool) or not isinstance(heat, int) or heat < 0):
            msg = f"heat must be a non-negative integer or None, got {heat!r}"
            raise ConfigError(msg)
        for field, value in (("name", name), ("summary", summary), ("body", body)):
            if not isinstance(cast("object", value), str):
                msg = f"scene {field} must be a string, got {type(value).__name__}"
                raise ConfigError(msg)
        return self._store.documents.upsert_scene(
            self.scope(user_id, agent_id), name, summary=summary, body=body, heat=heat
        )

    def list_scenes(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[SceneInfo]:
        """The scope's scenes, highest heat first."""
        return self._store.documents.list_scenes(self.scope(user_id, agent_id))

    def read_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """One scene of the scope by name; `None` if absent. Paths and `..` raise `ConfigError`."""
        return self._store.documents.read_scene(self.scope(user_id, agent_id), name)

    def delete_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete one scene of the scope; returns whether it existed."""
        return self._store.documents.delete_scene(self.scope(user_id, agent_id), name)

    # -- recall and search --------------------------------------------------------------------

    def recall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
    ) -> RecallResult | None:
        """Recall memories for this turn's user text (a string or content blocks).

        Returns `None` when recall is disabled or exceeded `recall.timeout_ms` (one warning is
        logged; nothing should be injected). Never raises for a timeout or backend failure
        unless `recall.on_error="raise"`.
        """
        return self._engine.recall(user_text, self.scope(user_id, agent_id))

    async def arecall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
    ) -> RecallResult | None:
        """Async version of `recall`."""
        return await self._engine.arecall(user_text, self.scope(user_id, agent_id))

    def _search(
        self,
        scope: Scope,
        layer: Literal["l1", "l0"],
        query: object,
        limit: object,
        **filters: Any,
    ) -> SearchOutcome | None:
        """Validate, clean the query and rank it with recall's strategy and thresholds."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            msg = f"limit must be an integer in 1..100, got {limit!r}"
            raise ConfigError(msg)
        text = clean_query(query if isinstance(query, str) else content_text(query))
        if not text:
            return None
        cfg = self.config.recall
        return self._searcher.search(
            scope,
            layer,
            text,
            limit=limit,
            strategy=cfg.strategy,
            keyword_threshold=cfg.keyword_threshold,
            embedding_threshold=cfg.score_threshold,
            **filters,
        )

    def search_memories(
        self,
        query: str,
        *,
        limit: int = 5,
        type: MemoryType | None = None,
        scene: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[MemoryHit]:
        """Search the scope's L1 memories with recall's ranking and thresholds.

        `type` filters by memory type; `scene` by scene name (case-insensitive substring).
        """
        if type is not None and type not in MEMORY_TYPES:
            msg = f"type must be one of {list(MEMORY_TYPES)} or None, got {type!r}"
            raise ConfigError(msg)
        scope = self.scope(user_id, agent_id)
        outcome = self._search(scope, "l1", query, limit, kind=type, group=scene or None)
        if outcome is None:
            return []
        records = self._store.db.memories_by_rowid([h.rowid for h in outcome.hits], scope)
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
            for h in outcome.hits
            if (rec := records.get(h.rowid)) is not None
        ]

    async def asearch_memories(
        self,
        query: str,
        *,
        limit: int = 5,
        type: MemoryType | None = None,
        scene: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[MemoryHit]:
        """Async version of `search_memories`."""
        return await _in_thread(
            self.search_memories,
            query,
            limit=limit,
            type=type,
            scene=scene,
            user_id=user_id,
            agent_id=agent_id,
        )

    def search_conversations(
        self,
        query: str,
        *,
        limit: int = 5,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[MessageHit]:
        """Search the scope's L0 messages (optionally one session) with recall's ranking."""
        scope = self.scope(user_id, agent_id)
        outcome = self._search(scope, "l0", query, limit, group=session_key, exact_group=True)
        if outcome is None:
            return []
        records = self._store.db.messages_by_rowid([h.rowid for h in outcome.hits], scope)
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
            for h in outcome.hits
            if (rec := records.get(h.rowid)) is not None
        ]

    async def asearch_conversations(
        self,
        query: str,
        *,
        limit: int = 5,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[MessageHit]:
        """Async version of `search_conversations`."""
        return await _in_thread(
            self.search_conversations,
            query,
            limit=limit,
            session_key=session_key,
            user_id=user_id,
            agent_id=agent_id,
        )

    # -- stats --------------------------------------------------------------------------------

    def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """Counts per layer and scope, index state and embedder identity.

        With neither `user_id` nor `agent_id`, every scope is counted (an administrative view);
        otherwise only the given scope.
        """
        db = self._store.db
        docs = self._store.documents
        if user_id is None and agent_id is None:
            scopes = db.scopes()
        else:
            scope = self.scope(user_id, agent_id)
            sid = self._store.scope_id(scope)
            scopes = [(sid, scope[0], scope[1])] if sid is not None else []
        per_scope = tuple(
            ScopeStats(
                user_id=u,
                agent_id=a,
                memories=db.count("l1", sid),
                messages=db.count("l0", sid),
                scenes=docs.count_scenes((u, a)),
                has_persona=docs.get_persona((u, a)) is not None,
            )
            for sid, u, a in scopes
        )
        dims = None
        for (sid, _layer), index in list(self._store._indexes.items()):
            if index.vectors is not None and any(sid == s for s, _, _ in scopes):
                dims = index.vectors.dim
                break
        return StoreStats(
            path=str(self._store.path) if self._store.path else None,
            embedder=self._store.embedder_id,
            dimensions=dims,
            tokenizer=self._store.tokenizer.identity,
            memories=sum(s.memories for s in per_scope),
            messages=sum(s.messages for s in per_scope),
            scenes=sum(s.scenes for s in per_scope),
            personas=sum(s.has_persona for s in per_scope),
            indexed_scopes=self._store.loaded_indexes(),
            scopes=per_scope,
        )

    # -- async twins (each runs its sync version on a worker thread) ---------------------------

    async def aadd_memory(
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
    ) -> MemoryRecord:
        """Async version of `add_memory`."""
        return await _in_thread(
            self.add_memory,
            content,
            type=type,
            scene_name=scene_name,
            priority=priority,
            activity_start_time=activity_start_time,
            activity_end_time=activity_end_time,
            timestamp=timestamp,
            user_id=user_id,
            agent_id=agent_id,
            id=id,
            session_key=session_key,
            source_message_ids=tuple(source_message_ids),
        )

    async def aadd_memories(
        self,
        records: Iterable[MemoryRecord | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> list[MemoryRecord]:
        """Async version of `add_memories`."""
        return await _in_thread(
            self.add_memories,
            list(records),
            user_id=user_id,
            agent_id=agent_id,
            show_progress=show_progress,
        )

    async def aget_memory(
        self,
        id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> MemoryRecord | None:
        """Async version of `get_memory`."""
        return await _in_thread(self.get_memory, id, user_id=user_id, agent_id=agent_id)

    async def adelete_memory(
        self,
        id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> bool:
        """Async version of `delete_memory`."""
        return await _in_thread(self.delete_memory, id, user_id=user_id, agent_id=agent_id)

    async def alist_memories(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        type: MemoryType | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        """Async version of `list_memories`."""
        return await _in_thread(
            self.list_memories,
            user_id=user_id,
            agent_id=agent_id,
            type=type,
            limit=limit,
            offset=offset,
        )

    async def arecord_messages(
        self,
        messages: Iterable[object],
        *,
        session_key: str,
        session_id: str = "",
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """Async version of `record_messages`."""
        return await _in_thread(
            self.record_messages,
            list(messages),
            session_key=session_key,
            session_id=session_id,
            user_id=user_id,
            agent_id=agent_id,
        )

    async def aset_persona(
        self, text: str | None, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """Async version of `set_persona`."""
        await _in_thread(self.set_persona, text, user_id=user_id, agent_id=agent_id)

    async def aget_persona(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> str | None:
        """Async version of `get_persona`."""
        return await _in_thread(self.get_persona, user_id=user_id, agent_id=agent_id)

    async def aupsert_scene(
        self,
        name: str,
        *,
        summary: str,
        body: str,
        heat: int | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> SceneInfo:
        """Async version of `upsert_scene`."""
        return await _in_thread(
            self.upsert_scene,
            name,
            summary=summary,
            body=body,
            heat=heat,
            user_id=user_id,
            agent_id=agent_id,
        )

    async def alist_scenes(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[SceneInfo]:
        """Async version of `list_scenes`."""
        return await _in_thread(self.list_scenes, user_id=user_id, agent_id=agent_id)

    async def aread_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """Async version of `read_scene`."""
        return await _in_thread(self.read_scene, name, user_id=user_id, agent_id=agent_id)

    async def adelete_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Async version of `delete_scene`."""
        return await _in_thread(self.delete_scene, name, user_id=user_id, agent_id=agent_id)

    async def astats(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> StoreStats:
        """Async version of `stats`."""
        return await _in_thread(self.stats, user_id=user_id, agent_id=agent_id)

    async def apreload(self, *, user_id: str | None = None, agent_id: str | None = None) -> None:
        """Async version of `preload`."""
        await _in_thread(self.preload, user_id=user_id, agent_id=agent_id)

    async def areindex(self, *, show_progress: bool | None = None) -> int:
        """Async version of `reindex`."""
        return await _in_thread(self.reindex, show_progress=show_progress)

    async def aimport_upstream(
        self,
        data_dir: str | os.PathLike[str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> ImportReport:
        """Async version of `import_upstream`."""
        return await _in_thread(
            self.import_upstream,
            data_dir,
            user_id=user_id,
            agent_id=agent_id,
            show_progress=show_progress,
        )

    # -- memory formation (formation/) ---------------------------------------------------------

    def _start_formation(self, model: BaseChatModel | str | None, callbacks: Callbacks) -> None:
        """Build the formation scheduler when a chat model is configured, and resume work."""
        cfg = self.config
        chosen = model if model is not None else cfg.extraction.model
        if chosen is None or not cfg.extraction.enabled:
            return
        from langchain_tdai_recall.formation._llm import resolve_chat_model  # noqa: PLC0415
        from langchain_tdai_recall.formation.pipeline import FormationEngine  # noqa: PLC0415
        from langchain_tdai_recall.formation.scheduler import (  # noqa: PLC0415
            FormationScheduler,
        )

        engine = FormationEngine(
            store=self._store,
            searcher=self._searcher,
            config=cfg,
            embed=self._embed_texts,
            model=resolve_chat_model(chosen),
            scene_model=resolve_chat_model(cfg.persona.model) if cfg.persona.model else None,
            callbacks=callbacks,
        )
        self._formation = FormationScheduler(
            engine, scope_id=lambda s: self._store.scope_id((s.user_id, s.agent_id))
        )
        self._formation.resume()

    def _require_formation(self) -> FormationScheduler:
        if self._formation is None:
            msg = (
                "memory formation needs a chat model: open the store with "
                "TdaiMemory.open(path, extraction_model=model) (or set extraction.model), and "
                "keep extraction.enabled true"
            )
            raise ConfigError(msg)
        return self._formation

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
        scope finishes first). Failed windows keep their messages for a later retry; they are
        reported, not raised.

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
        if all_scopes:
            targets = formation.pending_targets()
        else:
            scope = self.scope(user_id, agent_id)
            scope_id = self._store.scope_id(scope)
            targets = [] if scope_id is None else [(scope_id, tdai_types.Scope(*scope))]
        from langchain_tdai_recall._progress import progress  # noqa: PLC0415

        records = formation.engine.records
        total = sum(
            p.messages
            for sid, _ in targets
            for p in records.pending(sid, None if all_scopes else session_key)
        )
        with progress(total, desc="forming memories", enabled=show_progress) as bar:
            return formation.extract(
                targets,
                session_key=None if all_scopes else session_key,
                config=config,
                progress=bar.update,
            )

    async def aextract(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        all_scopes: bool = False,
        show_progress: bool | None = None,
        config: RunnableConfig | None = None,
    ) -> ExtractionReport:
        """Async version of `extract`."""
        return await _in_thread(
            self.extract,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            all_scopes=all_scopes,
            show_progress=show_progress,
            config=config,
        )

    def flush(self, *, timeout: float | None = None) -> ExtractionReport:
        """Form memories from everything pending in every scope now, and wait for it.

        Without a chat model there is nothing to form and the report is empty. `timeout`
        bounds the wait (seconds); what is not done stays pending and is retried.
        """
        from langchain_tdai_recall.formation.report import ExtractionReport  # noqa: PLC0415

        formation = self._formation
        if formation is None:
            return ExtractionReport()
        deadline = None if timeout is None else time.monotonic() + timeout
        return formation.extract(formation.pending_targets(), reason="flush", deadline=deadline)

    async def aflush(self, *, timeout: float | None = None) -> ExtractionReport:
        """Async version of `flush`."""
        return await _in_thread(self.flush, timeout=timeout)

    def end_session(
        self, session_key: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """Tell formation a session ended: its pending turns are formed now, in the background.

        Does nothing without a chat model. Never waits for the model.
        """
        scope = self.scope(user_id, agent_id)
        if self._formation is not None:
            self._formation.end_session(tdai_types.Scope(*scope), session_key)

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
        """
        from langchain_tdai_recall.store._formation import FormationRecords  # noqa: PLC0415

        scope = self.scope(user_id, agent_id)
        scope_id = self._store.scope_id(scope)
        if scope_id is None:
            return []
        return FormationRecords(self._store.db).history(scope_id, memory_id, scope)

    async def ahistory(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[MemoryVersion]:
        """Async version of `history`."""
        return await _in_thread(self.history, memory_id, user_id=user_id, agent_id=agent_id)

    # -- integrations -------------------------------------------------------------------------

    def middleware(self, **options: Any) -> TdaiRecallMiddleware:
        """A `TdaiRecallMiddleware` for `langchain.agents.create_agent` (SPEC §5)."""
        from langchain_tdai_recall.middleware import TdaiRecallMiddleware  # noqa: PLC0415

        return TdaiRecallMiddleware(self, **options)

    def tools(self, **options: Any) -> list[BaseTool]:
        """The memory tools: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`."""
        from langchain_tdai_recall.tools import create_memory_tools  # noqa: PLC0415

        return create_memory_tools(self, **options)

    def as_runnable(self, **options: Any) -> Runnable[Any, Any]:
        """A `Runnable` that injects recall into a prompt's messages (SPEC §5)."""
        from langchain_tdai_recall.lcel import create_recall_runnable  # noqa: PLC0415

        return create_recall_runnable(self, **options)

    def wrap_model(self, model: BaseChatModel, **options: Any) -> BaseChatModel:
        """A chat model whose `bind_tools(...)` result injects recall before every call."""
        from langchain_tdai_recall.lcel import wrap_model  # noqa: PLC0415

        return wrap_model(self, model, **options)

    def import_upstream(
        self,
        data_dir: str | os.PathLike[str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> ImportReport:
        """Import a TencentDB Agent Memory data directory into one scope (SPEC §8)."""
        from langchain_tdai_recall.upstream import import_upstream  # noqa: PLC0415

        return import_upstream(
            self, data_dir, user_id=user_id, agent_id=agent_id, show_progress=show_progress
        )


async def _in_thread(func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(func, *args, **kwargs))
