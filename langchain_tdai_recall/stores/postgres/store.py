"""`PostgresMemoryStore`: the memory store in PostgreSQL + pgvector, shared by many servers.

Records, vectors, persona and scenes live in PostgreSQL; every application server process keeps
its own derived search indexes (keyword postings and vectors, the same `LayerIndex` the local
store uses), built from the rows on a scope's first search and caught up by generation before
every search: one indexed query when nothing changed, the changed rows otherwise. Ranking is
therefore the local store's, to the last digit, and a write through one server is seen by recall
on any other at its next call. Why the legs run in-process rather than in SQL is measured in
`benchmarks/results/postgres.md` and summarised in the README.

Every call is bounded by `timeout_ms` (pool wait, server statement and lock timeouts, and a
watchdog for a server that stops answering); failures raise `StoreError` naming the server
without its password, and recall turns them into an empty injection with one warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import ConfigError, MissingDependencyError, StoreError

try:
    import psycopg
    import psycopg_pool  # noqa: F401 - part of the extra, checked here with psycopg
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    _PACKAGE = "psycopg"
    raise MissingDependencyError(_PACKAGE, extra="postgres") from exc

from langchain_tdai_recall.stores._index.layer import LayerIndex
from langchain_tdai_recall.stores._index.snapshot import SnapshotCache, index_cache_dir
from langchain_tdai_recall.stores.base import (
    LAYERS,
    BaseMemoryStore,
    DerivedIndexes,
    Layer,
    MemoryRow,
    MessageRow,
    PendingVector,
    Ref,
    StoredEmbedder,
    merge_embedders,
)
from langchain_tdai_recall.stores.postgres import _schema
from langchain_tdai_recall.stores.postgres._connection import Database, redact
from langchain_tdai_recall.stores.postgres._documents import PostgresDocuments
from langchain_tdai_recall.stores.postgres._formation import PostgresFormationState
from langchain_tdai_recall.stores.postgres._records import PostgresRecords
from langchain_tdai_recall.text.tokenize import Tokenizer
from langchain_tdai_recall.types import (
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Scope,
    ScopeStats,
)

__all__ = ["DEFAULT_POOL_SIZE", "DEFAULT_TIMEOUT_MS", "PostgresMemoryStore"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS: Final = 5000
"""Default bound of one call to the server."""
DEFAULT_POOL_SIZE: Final = 8
"""Default number of pooled connections per process."""
_SETUP_TIMEOUT_S: Final = 60.0
"""Bound of schema creation and migration at open."""


def _check_number(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        msg = f"{field} must be an integer in {low}..{high}, got {value!r}"
        raise ConfigError(msg)
    return value


class PostgresMemoryStore(BaseMemoryStore):
    """A memory store in a PostgreSQL database with the pgvector extension.

    Opening creates the tables (or migrates them) unless `read_only`; the database must have
    the `vector` extension or let this user create it.

    Args:
        url: A `postgresql://` URL (or a libpq connection string). Passwords in it are never
            logged or shown in errors.
        timeout_ms: Longest time one call may take (pool wait, statement, lock wait), 100..600000.
        pool_size: Most connections this process opens, 1..100.
        read_only: Serve reads only (nothing is created or migrated).
        tokenizer: Keyword tokenizer (`TdaiMemory.open` sets it from the configuration).
        embedder_id: Embedder identity (`TdaiMemory.open` sets it).
        index_cache: A local directory for persisted snapshots of this process's derived
            indexes, so a large scope's first search after a restart does not re-read every
            row (see `stores._index.snapshot`); `None` or `"auto"` (the default for URLs): off.

    Raises:
        ConfigError: If an argument is invalid.
        StoreError: If the server cannot be reached, pgvector is missing, or the schema is
            newer than this version knows.

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.stores.postgres import PostgresMemoryStore

        store = PostgresMemoryStore("postgresql://app@db.internal/memory", pool_size=16)
        memory = TdaiMemory.open(store)  # or simply TdaiMemory.open("postgresql://...")
        ```
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        pool_size: int = DEFAULT_POOL_SIZE,
        read_only: bool = False,
        tokenizer: Tokenizer | None = None,
        embedder_id: str | None = None,
        index_cache: Path | str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.strip():
            msg = f"url must be a postgresql:// URL, got {type(url).__name__}"
            raise ConfigError(msg)
        _check_number("timeout_ms", timeout_ms, 100, 600_000)
        _check_number("pool_size", pool_size, 1, 100)
        super().__init__(tokenizer=tokenizer, embedder_id=embedder_id, read_only=read_only)
        self._display = redact(url)
        self.db = Database(url, timeout_s=timeout_ms / 1000, min_size=1, max_size=pool_size)
        try:
            self._schema = self._prepare()
            self.db.open()
        except BaseException:
            self.db.close()
            raise
        self.records = PostgresRecords(self.db)
        self.documents = PostgresDocuments(self.db, self._resolve)
        self.formation = PostgresFormationState(self.db, self.records)
        cache_dir = index_cache_dir(index_cache, None)  # "auto": no local directory to use
        self._indexes = DerivedIndexes(
            SnapshotCache(cache_dir, self._display, writable=not read_only)
            if cache_dir is not None
            else None
        )

    def _prepare(self) -> int:
        """Create or check the schema on a direct connection; register the vector type."""
        with self.db.direct() as conn:
            conn.execute(f"SET statement_timeout = {int(_SETUP_TIMEOUT_S * 1000)}")
            conn.execute(f"SET lock_timeout = {int(_SETUP_TIMEOUT_S * 1000)}")
            try:
                if self.read_only:
                    version = _schema.check_schema(conn, self._display)
                else:
                    version = _schema.setup(conn, self._display)
                self.db.set_vector_type(_schema.vector_type(conn))
            except psycopg.Error as exc:
                msg = (
                    f"cannot prepare the memory store in PostgreSQL at {self._display}: "
                    f"{str(exc).strip()}"
                )
                raise StoreError(msg) from exc
        return version

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The server and database, without credentials."""
        return self._display

    def schema_version(self) -> int:
        """Number of schema migrations applied."""
        self._check_open()
        return self._schema

    def close(self) -> None:
        """Save the large indexes' snapshots (with an `index_cache`), close the pool."""
        if not self._closed:
            self._closed = True
            self._indexes.clear(save=True)
        self.db.close()

    def save_index_snapshots(self) -> int:
        """Write the snapshots of the large indexes that changed since theirs (also on close)."""
        self._check_open()
        return self._indexes.save_snapshots()

    def _resolve(self, scope: Scope, create: bool) -> int | None:
        if create:
            self._check_writable()
        else:
            self._check_open()
        return self.records.scope_id(scope, create=create)

    # -- scopes and counts ----------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The scope's key in this database (created when `create`)."""
        return self._resolve(scope, create)

    def scopes(self) -> list[Scope]:
        """Every scope in the database."""
        self._check_open()
        return [scope for _, scope in self.records.scopes()]

    def scope_stats(self, scope: Scope) -> ScopeStats:
        """Counts of one scope."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        return ScopeStats(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            memories=0 if scope_id is None else self.records.count("l1", scope_id),
            messages=0 if scope_id is None else self.records.count("l0", scope_id),
            scenes=self.documents.count_scenes(scope),
            has_persona=self.documents.get_persona(scope) is not None,
        )

    def loaded_indexes(self) -> int:
        """Scopes with derived indexes in this process."""
        return self._indexes.scopes()

    # -- L1 memories ----------------------------------------------------------------------------

    def put_memories(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
    ) -> list[MemoryRecord]:
        """Insert or update memories in one transaction (see `BaseMemoryStore.put_memories`)."""
        self._check_writable()
        if not records:
            return []
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        return self.records.upsert_memories(scope_id, records, dedupe=dedupe)

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord | None:
        """One memory of the scope by id, or `None`."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        return None if scope_id is None else self.records.get_memory(scope_id, memory_id, scope)

    def delete_memories(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete memories of the scope by id; returns how many existed."""
        self._check_writable()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None or not memory_ids:
            return 0
        return self.records.delete_memories(scope_id, memory_ids)

    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryVersion]:
        """Every version of a memory of the scope, oldest first (the current one last)."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return []
        return self.records.memory_history(scope_id, memory_id, scope)

    def list_memories(
        self, scope: Scope, *, type: MemoryType | None, limit: int | None, offset: int
    ) -> list[MemoryRecord]:
        """Memories of the scope, oldest first."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return []
        return self.records.list_memories(scope_id, scope, type=type, limit=limit, offset=offset)

    def memories_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MemoryRecord]:
        """Memories of the scope for search-hit references."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None or not refs:
            return {}
        return self.records.memories_by_rowid(scope_id, refs, scope)

    # -- L0 messages ----------------------------------------------------------------------------

    def put_messages(
        self,
        scope: Scope,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert messages (ids already stored are skipped); returns how many were new.

        `busy_timeout_ms` is accepted for the interface; the wait for other writers is bounded
        by the store's `timeout_ms` (PostgreSQL `lock_timeout`).
        """
        del busy_timeout_ms
        self._check_writable()
        if not records:
            return 0
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        return self.records.insert_messages(scope_id, records)

    def messages_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MessageRecord]:
        """Messages of the scope for search-hit references."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None or not refs:
            return {}
        return self.records.messages_by_rowid(scope_id, refs, scope)

    # -- copying a store ------------------------------------------------------------------------

    def export_rows(
        self, scope: Scope, layer: Layer, *, after: Ref, limit: int
    ) -> list[MemoryRow] | list[MessageRow]:
        """A page of a scope's rows as stored."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return []
        if layer == "l1":
            return self.records.export_memories(scope_id, scope, after=after, limit=limit)
        return self.records.export_messages(scope_id, scope, after=after, limit=limit)

    def import_rows(
        self, scope: Scope, layer: Layer, rows: Sequence[MemoryRow] | Sequence[MessageRow]
    ) -> int:
        """Write rows copied from another store as they are."""
        self._check_writable()
        if not rows:
            return 0
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        if layer == "l1":
            memories = [r for r in rows if isinstance(r, MemoryRow)]
            return self.records.import_memories(scope_id, memories)
        messages = [r for r in rows if isinstance(r, MessageRow)]
        return self.records.import_messages(scope_id, messages)

    def document_scopes(self) -> list[Scope]:
        """Scopes holding a persona or a scene."""
        self._check_open()
        return self.documents.scopes()

    # -- search legs ----------------------------------------------------------------------------

    def index(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """The scope's derived index of `layer`, caught up with every write so far."""
        self._check_open()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return None
        return self._indexes.get(
            self.records,
            scope_id,
            scope,
            layer,
            tokenizer=self.tokenizer,
            embedder=self.embedder_id,
        )

    # -- vector upkeep --------------------------------------------------------------------------

    def pending_vectors(
        self, layer: Layer, *, after: Ref, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows after `after` that need a vector from the current embedder."""
        self._check_writable()
        if self.embedder_id is None:
            return []
        return self.records.pending_vectors(
            layer, self.embedder_id, after=after, limit=limit, stale=stale
        )

    def set_vectors(
        self, layer: Layer, items: Sequence[PendingVector], vectors: npt.NDArray[np.float32]
    ) -> int:
        """Store the current embedder's vectors for rows still holding the same text."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self.records.set_vectors(layer, items, vectors, self.embedder_id)

    def pending_vector_count(self, scope: Scope | None = None) -> int:
        """Rows (in `scope`, or anywhere) still waiting for a current vector."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        scope_id = None if scope is None else self.records.scope_id(scope, create=False)
        if scope is not None and scope_id is None:
            return 0
        return sum(
            self.records.count_pending_vectors(layer, self.embedder_id, scope_id=scope_id)
            for layer in LAYERS
        )

    def vector_embedders(self) -> list[StoredEmbedder]:
        """Every embedder whose vectors the store holds, most rows first."""
        self._check_open()
        return merge_embedders(
            [c for layer in LAYERS for c in self.records.vector_embedders(layer)]
        )

    def count_foreign_vectors(self) -> int:
        """Rows whose vector another embedder made."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(self.records.count_foreign_vectors(layer, self.embedder_id) for layer in LAYERS)

    def count_missing_vectors(self) -> int:
        """Rows without any vector."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(
            self.records.count_pending_vectors(layer, self.embedder_id, stale=False)
            for layer in LAYERS
        )

    def vector_dimension(self, scope: Scope | None = None) -> int | None:
        """Dimension of the current embedder's stored vectors."""
        self._check_open()
        if self.embedder_id is None:
            return None
        if scope is None:
            return self.records.stored_dimension(self.embedder_id)
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return None
        return self.records.stored_dimension(self.embedder_id, scope_id)

    def drop_vectors_of_other_dimension(self, dimension: int) -> int:
        """Reset the current embedder's vectors of another dimension."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self.records.drop_vectors(self.embedder_id, keep_dimension=dimension)
