"""`PostgresMemoryStore`: the memory store in PostgreSQL + pgvector, shared by many servers.

Records, vectors, persona and scenes live in PostgreSQL; every application server process keeps
its own derived search indexes (keyword postings and vectors, the same `LayerIndex` the local
store uses), built from the rows on a scope's first search and caught up by generation before
every search: one indexed query when nothing changed, the changed rows otherwise. Ranking is
therefore the local store's, to the last digit, and a write through one server is seen by recall
on any other at its next call. Why the legs run in-process rather than in SQL is measured in
`benchmarks/results/postgres.md` and summarised in `docs/how-to/postgresql.md`.

Every call is bounded by `timeout_ms` (pool wait, server statement and lock timeouts, and a
watchdog for a server that stops answering); failures raise `StoreError` naming the server
without its password, and recall turns them into an empty injection with one warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from langchain_tdai_recall.errors import ConfigError, MissingDependencyError, StoreError

try:
    import psycopg
    import psycopg_pool  # noqa: F401 - part of the extra, checked here with psycopg
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    _PACKAGE = "psycopg"
    raise MissingDependencyError(_PACKAGE, extra="postgres") from exc

from langchain_tdai_recall.stores._index.cache import DEFAULT_INDEX_CACHE_MIB, budget_bytes
from langchain_tdai_recall.stores._index.snapshot import SnapshotCache, index_cache_dir
from langchain_tdai_recall.stores._scoped import ScopedStore, check_store_arguments
from langchain_tdai_recall.stores.postgres import _schema
from langchain_tdai_recall.stores.postgres._connection import Database, redact
from langchain_tdai_recall.stores.postgres._documents import PostgresDocuments
from langchain_tdai_recall.stores.postgres._formation import PostgresFormationState
from langchain_tdai_recall.stores.postgres._records import PostgresRecords
from langchain_tdai_recall.text.tokenize import Tokenizer
from langchain_tdai_recall.types import Reclaim, Scope

__all__ = ["DEFAULT_POOL_SIZE", "DEFAULT_TIMEOUT_MS", "PostgresMemoryStore"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS: Final = 5000
"""Default bound of one call to the server."""
DEFAULT_POOL_SIZE: Final = 8
"""Default number of pooled connections per process."""
_SETUP_TIMEOUT_S: Final = 60.0
"""Bound of schema creation and migration at open."""
_RECLAIM_TIMEOUT_S: Final = 600.0
"""Bound of one table's `VACUUM` after an erasure (`VACUUM (FULL)` rewrites the table)."""
_ERASED_TABLES: Final = (
    "tdai_memories",
    "tdai_messages",
    "tdai_memory_versions",
    "tdai_personas",
    "tdai_scenes",
    "tdai_formation_sessions",
    "tdai_formation_scopes",
    "tdai_formation_scene_queue",
    "tdai_formation_leases",
)
"""The tables `forget` deletes text from (the scope keys and tombstones hold none)."""


def _check_number(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        msg = f"{field} must be an integer in {low}..{high}, got {value!r}"
        raise ConfigError(msg)
    return value


class PostgresMemoryStore(ScopedStore):
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
        index_cache_mib: Budget in MiB of this process's in-memory search indexes (default
            512; `None`: unbounded). Past it the least recently used scopes' indexes are
            released and rebuilt from the rows on their next search (`store.index_cache_mib`).

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
        index_cache_mib: float | None = DEFAULT_INDEX_CACHE_MIB,
    ) -> None:
        budget_bytes(index_cache_mib)  # a bad budget fails before anything is opened
        if not isinstance(url, str) or not url.strip():
            msg = f"url must be a postgresql:// URL, got {type(url).__name__}"
            raise ConfigError(msg)
        _check_number("timeout_ms", timeout_ms, 100, 600_000)
        _check_number("pool_size", pool_size, 1, 100)
        check_store_arguments(
            "PostgresMemoryStore", tokenizer=tokenizer, embedder_id=embedder_id, read_only=read_only
        )
        self._display = redact(url)
        self.db = Database(url, timeout_s=timeout_ms / 1000, min_size=1, max_size=pool_size)
        try:
            self._schema = self._prepare(read_only=read_only)
            self.db.open()
        except BaseException:
            self.db.close()
            raise
        records = PostgresRecords(self.db)
        cache_dir = index_cache_dir(index_cache, None)  # "auto": no local directory to use
        super().__init__(
            records,
            snapshots=(
                SnapshotCache(cache_dir, self._display, writable=not read_only)
                if cache_dir is not None
                else None
            ),
            tokenizer=tokenizer,
            embedder_id=embedder_id,
            read_only=read_only,
            index_cache_mib=index_cache_mib,
        )
        self.documents = PostgresDocuments(self.db, self._resolve)
        self.formation = PostgresFormationState(self.db, records)

    def _prepare(self, *, read_only: bool) -> int:
        """Create or check the schema on a direct connection; register the vector type."""
        with self.db.direct() as conn:
            conn.execute(f"SET statement_timeout = {int(_SETUP_TIMEOUT_S * 1000)}")
            conn.execute(f"SET lock_timeout = {int(_SETUP_TIMEOUT_S * 1000)}")
            try:
                if read_only:
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

    def _release(self) -> None:
        self.db.close()

    def reclaim_erased(self, mode: Reclaim) -> tuple[str, ...]:
        """`VACUUM` (or `VACUUM (FULL)`) each table an erasure deletes from (`Reclaim`).

        Each runs outside a transaction, on its own, bounded by `_RECLAIM_TIMEOUT_S` and the
        store's lock timeout. A table the server refuses (the connecting role does not own it:
        PostgreSQL skips it with a warning) or cannot lock in time is logged and left out.
        """
        self._check_writable()
        if mode == "none":
            return ()
        statement = "VACUUM (FULL) {}" if mode == "full" else "VACUUM {}"
        done: list[str] = []
        for table in _ERASED_TABLES:
            skipped: list[str] = []

            def notice(diag: psycopg.errors.Diagnostic, out: list[str] = skipped) -> None:
                if diag.severity_nonlocalized == "WARNING":
                    out.append(diag.message_primary or "")

            try:
                with self.db.connection(f"vacuum {table}", timeout_s=_RECLAIM_TIMEOUT_S) as conn:
                    conn.add_notice_handler(notice)
                    try:
                        conn.execute(statement.format(table))
                    finally:
                        conn.remove_notice_handler(notice)
            except StoreError as exc:
                logger.warning("forget: %s was not vacuumed: %s", table, exc)
                continue
            if skipped:
                logger.warning(
                    "forget: PostgreSQL did not vacuum %s (%s); its erased rows stay on disk "
                    "until autovacuum or the table's owner vacuums it",
                    table,
                    skipped[0],
                )
                continue
            done.append(table)
        return tuple(done)

    def _resolve(self, scope: Scope, create: bool) -> int | None:
        return self.scope_id(scope, create=create)
