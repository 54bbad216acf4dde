"""The PostgreSQL backend's record SQL: the server's spelling of `SqlRecords`.

The same meaning as the local store's records (`stores._sql.records` holds the statements both
share). Every write transaction starts by bumping its scope's generation (`UPDATE tdai_scopes
... RETURNING generation`), which locks the scope's row until the commit: writers of one scope
are serialised and commit in generation order, so a reader that sees generation G also sees
every row written up to G. This is what lets each application server keep its own derived search
index and catch up by generation (`RowSource`). Transactions touching several scopes lock them
in id order (no deadlocks).

This module adds the pooled, bounded connections, the scope lookup, and what PostgreSQL does its
own way: a batch of new memories in one pipelined insert, messages with their session's context
in one, and search hits by reference as one array. Vectors arrive as little-endian float32
bytes (the connection's `vector` loader), the form the index reads; stored text cannot hold NUL
(`pg_text`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import psycopg

from langchain_tdai_recall.stores._index.cache import SCOPE_KEYS_KEPT, LruDict
from langchain_tdai_recall.stores._sql.dialect import Dialect
from langchain_tdai_recall.stores._sql.records import (
    INSERT_MEMORY,
    SqlRecords,
    agent_key,
    memory_params,
)
from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.records import (
    MEMORY_COLUMNS,
    MESSAGE_COLUMNS,
    Layer,
    memory_from_row,
    message_from_row,
)
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import MemoryRecord, MessageRecord, Scope

__all__ = ["POSTGRES", "PostgresRecords", "pg_text"]

_MEMORY_COLS: Final = ", ".join(
    {"timestamp": '"timestamp"', "metadata": "NULLIF(metadata, '{}')"}.get(c, c)
    for c in MEMORY_COLUMNS
)
"""`timestamp` is a type name in PostgreSQL: quoted."""
_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_EMBEDDED_TEXT: Final[dict[Layer, str]] = {
    "l1": "content",
    "l0": "(CASE WHEN context = '' THEN content ELSE context || E'\\n' || content END)",
}
"""SQL for the text a row is embedded from: a message with its context (as the local store)."""


def pg_text(text: str | None) -> str | None:
    """Text as PostgreSQL can store it: NUL (U+0000), which `text` cannot hold, becomes U+FFFD."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


POSTGRES: Final = Dialect(
    prefix="tdai_",
    mark="%s",
    text=pg_text,
    arrays=True,
    for_update=" FOR UPDATE",
    collate_c=' COLLATE "C"',
    distinct_from="IS DISTINCT FROM",
    dimension="vector_dims(vector)",
    no_limit=None,
    item_namespace="(metadata::jsonb #>> '{tdai_store,ns}')",
    memory_columns=_MEMORY_COLS,
)
"""The statements shared with SQLite, as PostgreSQL reads them."""

_INSERT_MEMORY: Final = POSTGRES.sql(INSERT_MEMORY)


def bump(conn: psycopg.Connection[Any], scope_id: int) -> int:
    """Advance a scope's generation inside the caller's transaction (locking the scope)."""
    row = conn.execute(
        "UPDATE tdai_scopes SET generation = generation + 1 WHERE scope_id = %s "
        "RETURNING generation",
        (scope_id,),
    ).fetchone()
    if row is None:  # pragma: no cover - scope ids come from this store
        msg = f"unknown scope id {scope_id}"
        raise LookupError(msg)
    return int(row[0])


class PostgresRecords(SqlRecords):
    """All record SQL of the PostgreSQL backend. Thread-safe (the pool serialises nothing)."""

    dialect = POSTGRES

    def __init__(self, db: Database) -> None:
        self.db = db
        self._scope_cache: LruDict[tuple[str, str], int] = LruDict(SCOPE_KEYS_KEPT)
        self._cache_lock = threading.Lock()

    # -- the hooks of `SqlRecords` --------------------------------------------------------------

    @staticmethod
    def bump(conn: psycopg.Connection[Any], scope_id: int) -> int:
        """Advance a scope's generation inside the caller's transaction (locking the scope)."""
        return bump(conn, scope_id)

    def _reading(self, action: str) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self.db.connection(action)

    def _writing(
        self, action: str, *, timeout_s: float | None = None, busy_timeout_ms: int | None = None
    ) -> AbstractContextManager[psycopg.Connection[Any]]:
        # the wait for other writers is bounded by the store's `timeout_ms` (`lock_timeout`)
        return self.db.transaction(action, timeout_s=timeout_s)

    def _execute_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> int:
        with conn.cursor() as cur:
            cur.executemany(sql, rows)
            return max(int(cur.rowcount), 0)

    def _fetch_stored(self, action: str, sql: str, params: Sequence[object]) -> list[Any]:
        with self.db.connection(action) as conn, conn.cursor(binary=True) as cur:
            return list(cur.execute(sql, params).fetchall())

    def _vector_param(self, vector: npt.NDArray[np.float32]) -> object:
        return np.ascontiguousarray(vector, dtype=np.float32)

    def _stored_vector(self, blob: bytes | None, embedder: str | None) -> object | None:
        if not blob or embedder is None:
            return None
        return np.frombuffer(blob, dtype="<f4").astype(np.float32)

    def _embedded_text(self, layer: Layer) -> str:
        return _EMBEDDED_TEXT[layer]

    # -- scopes ---------------------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool) -> int | None:
        """The id of a scope; created on first write when `create`, else `None` if unknown."""
        key = (pg_text(scope.user_id) or "", pg_text(agent_key(scope.agent_id)) or "")
        with self._cache_lock:
            cached = self._scope_cache.get(key)
        if cached is not None:
            return cached
        sql = "SELECT scope_id FROM tdai_scopes WHERE user_id = %s AND agent_id = %s"
        if create:
            with self.db.connection("create a scope") as conn:
                row = conn.execute(
                    "INSERT INTO tdai_scopes (user_id, agent_id) VALUES (%s, %s) "
                    "ON CONFLICT (user_id, agent_id) DO NOTHING RETURNING scope_id",
                    key,
                ).fetchone()
                if row is None:
                    row = conn.execute(sql, key).fetchone()
        else:
            with self.db.connection("read a scope") as conn:
                row = conn.execute(sql, key).fetchone()
            if row is None:
                return None
        assert row is not None
        with self._cache_lock:
            self._scope_cache[key] = int(row[0])
        return int(row[0])

    def scopes(self) -> list[tuple[int, Scope]]:
        """Every scope that ever held a memory or a message: (scope_id, scope).

        A scope row made only for a persona or a scene has never been written to (generation
        0) and is left out, as in the local store; so is a scope erased by `TdaiMemory.forget`
        (its key row stays, see `_erasure`) until it holds a record again.
        """
        with self.db.connection("list scopes") as conn:
            rows = conn.execute(
                "SELECT scope_id, user_id, agent_id FROM tdai_scopes AS s WHERE generation > 0 "
                "AND (NOT EXISTS (SELECT 1 FROM tdai_tombstones AS t "
                "WHERE t.scope_id = s.scope_id AND t.layer = 'scope') "
                "OR EXISTS (SELECT 1 FROM tdai_memories WHERE scope_id = s.scope_id) "
                "OR EXISTS (SELECT 1 FROM tdai_messages WHERE scope_id = s.scope_id)) "
                "ORDER BY user_id, agent_id"
            ).fetchall()
        return [(int(s), Scope(u, a or None)) for s, u, a in rows]

    # -- L1 memories ----------------------------------------------------------------------------

    def _insert_new(
        self,
        conn: Any,
        scope_id: int,
        gen: int,
        records: Sequence[MemoryRecord],
        flags: Sequence[bool],
    ) -> list[MemoryRecord] | None:
        """A batch of ids the scope does not hold yet: dedupe, then one pipelined insert.

        `None` (record by record) when the scope holds one of the ids or the batch repeats one.
        """
        ids = [pg_text(r.id) or "" for r in records]
        taken = conn.execute(
            "SELECT 1 FROM tdai_memories WHERE scope_id = %s AND id = ANY(%s) LIMIT 1",
            (scope_id, ids),
        ).fetchone()
        if taken is not None or len(set(ids)) != len(ids):
            return None
        keys = [content_fingerprint(r.content) for r in records]
        wanted = sorted({k for k, f in zip(keys, flags, strict=True) if f})
        known: dict[str, MemoryRecord] = {}
        if wanted:
            scope = Scope(records[0].user_id, records[0].agent_id)
            for row in conn.execute(
                f"SELECT DISTINCT ON (content_key) {_MEMORY_COLS}, content_key FROM tdai_memories "
                "WHERE scope_id = %s AND content_key = ANY(%s) ORDER BY content_key, rowid",
                (scope_id, wanted),
            ):
                known[str(row[-1])] = memory_from_row(row, scope)
        stored: list[MemoryRecord] = []
        params: list[tuple[object, ...]] = []
        for rec, key, flag in zip(records, keys, flags, strict=True):
            if flag and key in known:
                stored.append(known[key])
                continue
            known.setdefault(key, rec)
            stored.append(rec)
            params.append((*memory_params(POSTGRES, scope_id, rec, gen), None, None, key))
        if params:
            self._execute_many(conn, _INSERT_MEMORY, params)
        return stored

    def memories_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MemoryRecord]:
        """Records of the scope for the given row ids (missing or foreign ones are left out)."""
        with self.db.connection("read memories") as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s AND rowid = ANY(%s)",
                (scope_id, list(rowids)),
            ).fetchall()
        return {int(r[0]): memory_from_row(r, scope) for r in rows}

    # -- L0 messages ----------------------------------------------------------------------------

    def messages_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MessageRecord]:
        """Messages of the scope for the given row ids."""
        with self.db.connection("read messages") as conn:
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLS} FROM tdai_messages "
                "WHERE scope_id = %s AND rowid = ANY(%s)",
                (scope_id, list(rowids)),
            ).fetchall()
        return {int(r[0]): message_from_row(r, scope) for r in rows}
