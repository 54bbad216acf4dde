"""The local store's record SQL: SQLite's spelling of `stores._sql.records.SqlRecords`.

Every write bumps its scope's `generation` and stamps the rows it touched (deletions leave a
tombstone), so an in-memory index that remembers the generation it has seen can catch up with
exactly the rows that changed since, including rows written by another process sharing the
directory. Vectors are stored next to their rows as float32 blobs tagged with the embedder
identity; rows are written without one and embedded later (`pending_vectors` / `set_vectors`),
so the upkeep resumes after a restart without extra bookkeeping.

The shared statements are `SqlRecords`'; this module adds its hooks over the connections
(`stores.local._connection`), the scope lookup, and the reads SQLite does its own way: search
hits by row id in bounded lists, with `+scope_id` to keep the planner on the rowid lookup.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.stores._index.cache import SCOPE_KEYS_KEPT, LruDict
from langchain_tdai_recall.stores._sql.dialect import Dialect
from langchain_tdai_recall.stores._sql.records import SqlRecords, agent_key
from langchain_tdai_recall.stores.local._connection import SqliteConnection
from langchain_tdai_recall.stores.local._schema import CONTEXT_SCHEMA, DB_FILENAME
from langchain_tdai_recall.stores.records import (
    MESSAGE_COLUMNS,
    Layer,
    MemoryRow,
    MessageRow,
    PendingVector,
    memory_from_row,
    message_from_row,
)
from langchain_tdai_recall.types import MemoryRecord, MessageRecord, Scope

__all__ = [
    "DB_FILENAME",
    "SQLITE",
    "Layer",
    "MemoryRow",
    "MessageRow",
    "PendingVector",
    "SqliteRecords",
]

SQLITE: Final = Dialect(prefix="", mark="?")
"""The statements shared with PostgreSQL, as SQLite reads them."""

_MEMORY_COLS: Final = SQLITE.memory_columns
_RETURNING: Final = sqlite3.sqlite_version_info >= (3, 35, 0)
"""Whether this SQLite has `UPDATE ... RETURNING` (3.35, 2021)."""
_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_EMBEDDED_TEXT: Final[dict[Layer, str]] = {
    "l1": "content",
    "l0": "(CASE WHEN context = '' THEN content ELSE context || char(10) || content END)",
}
"""SQL for the text a row is embedded (and keyword-indexed) from: a message with its context."""


class SqliteRecords(SqliteConnection, SqlRecords):
    """All record SQL of the local store, over its connections. Thread-safe.

    Args:
        directory: The store directory, or `None` for an in-memory database.
        synchronous: `"normal"` or `"full"` (SQLite `PRAGMA synchronous`).
        read_only: Open the file for reading only; every write raises `StoreReadOnlyError`.
    """

    dialect = SQLITE

    def __init__(
        self, directory: Path | None, *, synchronous: str = "normal", read_only: bool = False
    ) -> None:
        self._scope_cache: LruDict[tuple[str, str], int] = LruDict(SCOPE_KEYS_KEPT)
        super().__init__(directory, synchronous=synchronous, read_only=read_only)

    # -- the hooks of `SqlRecords` ------------------------------------------------------------

    def _reading(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        return self._read()

    def _writing(
        self, action: str, *, timeout_s: float | None = None, busy_timeout_ms: int | None = None
    ) -> AbstractContextManager[sqlite3.Connection]:
        return self._write(busy_timeout_ms=busy_timeout_ms)

    def _execute_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> int:
        return max(int(conn.executemany(sql, rows).rowcount), 0)

    def _vector_param(self, vector: npt.NDArray[np.float32]) -> object:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def _stored_vector(self, blob: bytes | None, embedder: str | None) -> object | None:
        return blob if blob and embedder is not None else None

    @property
    def _context_column(self) -> str:
        return "context" if self._schema >= CONTEXT_SCHEMA else "''"

    def _embedded_text(self, layer: Layer) -> str:
        return _EMBEDDED_TEXT[layer] if self._schema >= CONTEXT_SCHEMA else "content"

    def _has_history(self) -> bool:
        return self.has_formation_tables

    # -- scopes -------------------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool) -> int | None:
        """The id of a scope; created on first write when `create`, else `None` if unknown."""
        key = (scope.user_id, agent_key(scope.agent_id))
        cached = self._scope_cache.get(key)
        if cached is not None:
            return cached
        sql = "SELECT scope_id FROM scopes WHERE user_id = ? AND agent_id = ?"
        with self._read() as conn:
            row = conn.execute(sql, key).fetchone()
        if row is None:
            if not create:
                return None
            with self._write() as tx:
                tx.execute("INSERT OR IGNORE INTO scopes (user_id, agent_id) VALUES (?, ?)", key)
                row = tx.execute(sql, key).fetchone()
        self._scope_cache[key] = int(row[0])
        return int(row[0])

    def scopes(self) -> list[tuple[int, Scope]]:
        """Every scope that has ever held a memory or a message: (scope_id, scope).

        A scope erased by `TdaiMemory.forget` keeps its key row (see `_erasure`) but is left
        out until it holds a record again.
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT scope_id, user_id, agent_id FROM scopes AS s "
                "WHERE NOT EXISTS (SELECT 1 FROM tombstones AS t "
                "WHERE t.scope_id = s.scope_id AND t.layer = 'scope') "
                "OR EXISTS (SELECT 1 FROM memories WHERE scope_id = s.scope_id) "
                "OR EXISTS (SELECT 1 FROM messages WHERE scope_id = s.scope_id) "
                "ORDER BY user_id, agent_id"
            ).fetchall()
        return [(int(s), Scope(u, a or None)) for s, u, a in rows]

    @staticmethod
    def bump(conn: sqlite3.Connection, scope_id: int) -> int:
        """Advance a scope's generation inside the caller's transaction; returns the new one."""
        if _RETURNING:  # one statement: each lets other threads take the interpreter
            (gen,) = conn.execute(
                "UPDATE scopes SET generation = generation + 1 WHERE scope_id = ? "
                "RETURNING generation",
                (scope_id,),
            ).fetchone()
            return int(gen)
        conn.execute(
            "UPDATE scopes SET generation = generation + 1 WHERE scope_id = ?", (scope_id,)
        )
        (gen,) = conn.execute(
            "SELECT generation FROM scopes WHERE scope_id = ?", (scope_id,)
        ).fetchone()
        return int(gen)

    # -- reads by reference ------------------------------------------------------------------

    def memories_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MemoryRecord]:
        """Records of the scope for the given row ids (missing or foreign ones are left out)."""
        out: dict[int, MemoryRecord] = {}
        # `+scope_id` keeps SQLite on the rowid lookup: without it the planner walks the
        # (scope_id, id) index over the whole scope, 10 ms per search at 100k memories
        for part in self._parts(list(rowids)):
            marks = ",".join("?" * len(part))
            with self._read() as conn:
                rows = conn.execute(
                    f"SELECT {_MEMORY_COLS} FROM memories "
                    f"WHERE +scope_id = ? AND rowid IN ({marks})",
                    [scope_id, *part],
                ).fetchall()
            out.update((int(r[0]), memory_from_row(r, scope)) for r in rows)
        return out

    # -- L0 messages --------------------------------------------------------------------------

    def messages_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MessageRecord]:
        """Messages of the scope for the given row ids."""
        out: dict[int, MessageRecord] = {}
        for part in self._parts(list(rowids)):
            marks = ",".join("?" * len(part))
            with self._read() as conn:
                rows = conn.execute(
                    f"SELECT {_MESSAGE_COLS} FROM messages "
                    f"WHERE +scope_id = ? AND rowid IN ({marks})",
                    [scope_id, *part],
                ).fetchall()
            out.update((int(r[0]), message_from_row(r, scope)) for r in rows)
        return out

    # -- erasure (issue 16) -------------------------------------------------------------------

    @contextmanager
    def _erasing(self, action: str) -> Iterator[sqlite3.Connection]:
        """An erasure's transaction: freed pages are overwritten, the log is folded after.

        `secure_delete` (a setting of the connection, put back as it was) zeroes the pages the
        deletions free instead of leaving the erased text in them; `wal_checkpoint(TRUNCATE)`
        then copies the log into the database and empties it, so no older copy of those pages
        stays in `memory.sqlite3-wal` (best effort: a reader in another process can hold the log
        back until it finishes).
        """
        with self._write() as conn:
            (before,) = conn.execute("PRAGMA secure_delete").fetchone()
            conn.execute("PRAGMA secure_delete = ON")
            try:
                yield conn
            finally:
                conn.execute(f"PRAGMA secure_delete = {int(before)}")
        if self.path is not None:
            with suppress(Exception), self._write_lock:  # outside any transaction
                self._conn(write=True).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
