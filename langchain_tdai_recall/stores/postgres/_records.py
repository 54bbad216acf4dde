"""The SQL of L1 memories, L0 messages, scopes, generations, tombstones and vectors.

The same meaning as the local store's `SqliteRecords`, over PostgreSQL. Every write transaction
starts by bumping its scope's generation (`UPDATE tdai_scopes ... RETURNING generation`), which
locks the scope's row until the commit: writers of one scope are serialised and commit in
generation order, so a reader that sees generation G also sees every row written up to G. This
is what lets each application server keep its own derived search index and catch up by
generation (`RowSource`). Transactions touching several scopes lock them in id order (no
deadlocks).

This class is also the `RowSource` of the derived indexes: `generation`, `memory_rows_since`,
`message_rows_since` and `tombstones_since`. Vectors arrive as little-endian float32 bytes (the
connection's `vector` loader), the form the index reads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import psycopg

from langchain_tdai_recall.stores._sql.dialect import Dialect, utc_now
from langchain_tdai_recall.stores._sql.history import read_versions, record_version, snapshot_of
from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.records import (
    L0_CONTEXT_CHARS,
    MEMORY_COLUMNS,
    MESSAGE_COLUMNS,
    Layer,
    MemoryRow,
    MessageRow,
    PendingVector,
    memory_from_row,
    message_from_row,
)
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import (
    Change,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Scope,
)

__all__ = ["POSTGRES", "PostgresRecords", "pg_text"]

_TABLE: Final[dict[Layer, str]] = {"l1": "tdai_memories", "l0": "tdai_messages"}
_MEMORY_COLS: Final = ", ".join(f'"{c}"' if c == "timestamp" else c for c in MEMORY_COLUMNS)
"""`timestamp` is a type name in PostgreSQL: quoted."""
_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_EMBEDDED_TEXT: Final[dict[Layer, str]] = {
    "l1": "content",
    "l0": "(CASE WHEN context = '' THEN content ELSE context || E'\\n' || content END)",
}
"""SQL for the text a row is embedded from: a message with its context (as the local store)."""

_MEMORY_INSERT_COLS: Final = """
    INSERT INTO tdai_memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, "timestamp", session_key, source_message_ids,
        created_at, updated_at, generation, embedder, vector, content_key)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_INSERT_MEMORY: Final = _MEMORY_INSERT_COLS
_UPSERT_MEMORY: Final = (
    _MEMORY_INSERT_COLS
    + """
    ON CONFLICT (scope_id, id) DO UPDATE SET
        embedder = CASE WHEN excluded.vector IS NOT NULL THEN excluded.embedder
                   WHEN tdai_memories.content = excluded.content THEN tdai_memories.embedder END,
        vector = CASE WHEN excluded.vector IS NOT NULL THEN excluded.vector
                 WHEN tdai_memories.content = excluded.content THEN tdai_memories.vector END,
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, "timestamp" = excluded."timestamp",
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        updated_at = excluded.updated_at, generation = excluded.generation,
        content_key = excluded.content_key
"""
)


_COPY_MEMORY: Final = """
    INSERT INTO tdai_memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, "timestamp", session_key, source_message_ids,
        created_at, updated_at, generation, embedder, vector, content_key)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (scope_id, id) DO UPDATE SET
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, "timestamp" = excluded."timestamp",
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        generation = excluded.generation, embedder = excluded.embedder, vector = excluded.vector,
        content_key = excluded.content_key
"""

_COPY_TIMEOUT_S: Final = 120.0
"""Bound of one page of a store copy (large pages of vectors)."""


def _vector_or_none(blob: bytes | None, embedder: str | None) -> npt.NDArray[np.float32] | None:
    """A stored vector (little-endian float32 bytes) as a parameter; `None` without one."""
    if not blob or embedder is None:
        return None
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def _memory_params(scope_id: int, rec: MemoryRecord, gen: int) -> tuple[object, ...]:
    """The first 14 columns of a memory row (up to `generation`)."""
    return (
        scope_id,
        pg_text(rec.id),
        pg_text(rec.content),
        rec.type,
        pg_text(rec.scene_name),
        rec.priority,
        rec.activity_start_time,
        rec.activity_end_time,
        rec.timestamp,
        pg_text(rec.session_key),
        pg_text(json.dumps(list(rec.source_message_ids), ensure_ascii=False)),
        rec.created_at,
        rec.updated_at,
        gen,
    )


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
    memory_columns=_MEMORY_COLS,
)
"""The statements shared with SQLite, as PostgreSQL reads them."""


def _agent_key(agent_id: str | None) -> str:
    return agent_id or ""


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


class PostgresRecords:
    """All record SQL of the PostgreSQL backend. Thread-safe (the pool serialises nothing)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._scope_cache: dict[tuple[str, str], int] = {}
        self._cache_lock = threading.Lock()

    @staticmethod
    def bump(conn: psycopg.Connection[Any], scope_id: int) -> int:
        """Advance a scope's generation inside the caller's transaction (locking the scope)."""
        return bump(conn, scope_id)

    # -- scopes ---------------------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool) -> int | None:
        """The id of a scope; created on first write when `create`, else `None` if unknown."""
        key = (pg_text(scope.user_id) or "", pg_text(_agent_key(scope.agent_id)) or "")
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
        0) and is left out, as in the local store.
        """
        with self.db.connection("list scopes") as conn:
            rows = conn.execute(
                "SELECT scope_id, user_id, agent_id FROM tdai_scopes WHERE generation > 0 "
                "ORDER BY user_id, agent_id"
            ).fetchall()
        return [(int(s), Scope(u, a or None)) for s, u, a in rows]

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (bumped by every write to it)."""
        with self.db.connection("read a scope's generation") as conn:
            row = conn.execute(
                "SELECT generation FROM tdai_scopes WHERE scope_id = %s", (scope_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows in a layer, for one scope or all."""
        table = _TABLE[layer]
        with self.db.connection("count rows") as conn:
            if scope_id is None:
                row = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            else:
                row = conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE scope_id = %s", (scope_id,)
                ).fetchone()
        return int(row[0]) if row else 0

    # -- L1 memories ----------------------------------------------------------------------------

    def upsert_memories(
        self,
        scope_id: int,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
        actor: str = "api",
    ) -> list[MemoryRecord]:
        """Insert or update records (by id within the scope) in one transaction, in order.

        The same rules as the local store: an update keeps `created_at`, keeps the row's vector
        when the content did not change, and records the replaced version in the history; with
        `dedupe[i]`, an exact duplicate of a memory of the scope (or of an earlier record of the
        call) is not written and that memory is returned instead. A batch of new ids is
        written in one pipelined statement; anything else record by record.
        """
        flags = list(dedupe) if dedupe is not None else [False] * len(records)
        with self.db.transaction("write memories") as conn:
            gen = bump(conn, scope_id)  # locks the scope: what is read below stays true
            ids = [pg_text(r.id) or "" for r in records]
            taken = conn.execute(
                "SELECT 1 FROM tdai_memories WHERE scope_id = %s AND id = ANY(%s) LIMIT 1",
                (scope_id, ids),
            ).fetchone()
            if taken is None and len(set(ids)) == len(ids):
                return self._insert_new(conn, scope_id, gen, records, flags)
            return [
                (self.find_duplicate(conn, scope_id, rec) if flag else None)
                or self.write_memory_row(conn, scope_id, gen, rec, actor=actor)
                for rec, flag in zip(records, flags, strict=True)
            ]

    def _insert_new(
        self,
        conn: psycopg.Connection[Any],
        scope_id: int,
        gen: int,
        records: Sequence[MemoryRecord],
        flags: Sequence[bool],
    ) -> list[MemoryRecord]:
        """Records whose ids the scope does not hold yet: dedupe, then one pipelined insert."""
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
            params.append((*_memory_params(scope_id, rec, gen), None, None, key))
        if params:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_MEMORY, params)
        return stored

    @staticmethod
    def find_duplicate(
        conn: psycopg.Connection[Any], scope_id: int, rec: MemoryRecord
    ) -> MemoryRecord | None:
        """The scope's memory whose text is an exact duplicate of `rec`'s, or `None`."""
        row = conn.execute(
            f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s AND content_key = %s "
            "ORDER BY rowid LIMIT 1",
            (scope_id, content_fingerprint(rec.content)),
        ).fetchone()
        return memory_from_row(row, Scope(rec.user_id, rec.agent_id)) if row else None

    @staticmethod
    def write_memory_row(
        conn: psycopg.Connection[Any],
        scope_id: int,
        gen: int,
        rec: MemoryRecord,
        *,
        actor: str,
        embedder: str | None = None,
        vector: npt.NDArray[np.float32] | None = None,
        change: Change = "update",
        related: Sequence[str] = (),
    ) -> MemoryRecord:
        """Insert or update one row inside the caller's transaction; returns it as stored.

        An existing row keeps its `created_at` and its replaced version goes to the history as
        `change`; `vector` (made by `embedder` from the new content) is stored with the row,
        else an unchanged text keeps its vector and a changed one waits for the upkeep.
        """
        mid = pg_text(rec.id) or ""
        old = snapshot_of(conn, POSTGRES, scope_id, mid)
        created = str(old["created_at"]) if old is not None else rec.created_at
        if old is not None:
            record_version(
                conn,
                POSTGRES,
                scope_id,
                mid,
                change=change,
                actor=actor,
                at=rec.updated_at,
                related=related,
                replacement=rec,
                old=old,
            )
        given = vector is not None and embedder is not None
        conn.execute(
            _UPSERT_MEMORY,
            (
                *_memory_params(scope_id, rec, gen),
                embedder if given else None,
                np.ascontiguousarray(vector, dtype=np.float32) if given else None,
                content_fingerprint(rec.content),
            ),
        )
        return rec if created == rec.created_at else replace(rec, created_at=created)

    @staticmethod
    def delete_memory_row(
        conn: psycopg.Connection[Any],
        scope_id: int,
        gen: int,
        memory_id: str,
        *,
        actor: str,
        at: str,
        change: Change = "delete",
        related: Sequence[str] = (),
    ) -> bool:
        """Delete one row inside the caller's transaction; its last version goes to the history."""
        mid = pg_text(memory_id) or ""
        if not record_version(
            conn, POSTGRES, scope_id, mid, change=change, actor=actor, at=at, related=related
        ):
            return False
        row = conn.execute(
            "DELETE FROM tdai_memories WHERE scope_id = %s AND id = %s RETURNING rowid",
            (scope_id, mid),
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO tdai_tombstones (scope_id, layer, row_ref, generation) "
            "VALUES (%s, 'l1', %s, %s)",
            (scope_id, int(row[0]), gen),
        )
        return True

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""
        keys = sorted({content_fingerprint(t) for t in texts})
        if not keys:
            return {}
        with self.db.connection("look for duplicates") as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (content_key) content_key, id FROM tdai_memories "
                "WHERE scope_id = %s AND content_key = ANY(%s) ORDER BY content_key, rowid",
                (scope_id, keys),
            ).fetchall()
        return {str(k): str(i) for k, i in rows}

    def get_memory(self, scope_id: int, memory_id: str, scope: Scope) -> MemoryRecord | None:
        """One memory by id, or `None`."""
        with self.db.connection("read a memory") as conn:
            row = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s AND id = %s",
                (scope_id, pg_text(memory_id)),
            ).fetchone()
        return memory_from_row(row, scope) if row else None

    def delete_memories(
        self, scope_id: int, memory_ids: Sequence[str], *, actor: str = "api"
    ) -> int:
        """Delete by id (each deleted version is kept in the history); returns how many existed."""
        at = utc_now()
        with self.db.transaction("delete memories") as conn:
            gen = bump(conn, scope_id)
            return sum(
                self.delete_memory_row(conn, scope_id, gen, m, actor=actor, at=at)
                for m in memory_ids
            )

    def memory_history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        with self.db.connection("read a memory's history") as conn:
            row = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s AND id = %s",
                (scope_id, pg_text(memory_id)),
            ).fetchone()
            current = memory_from_row(row, scope) if row else None
            return read_versions(
                conn, POSTGRES, scope_id, pg_text(memory_id) or "", scope=scope, current=current
            )

    def list_memories(
        self,
        scope_id: int,
        scope: Scope,
        *,
        type: MemoryType | None,
        limit: int | None,
        offset: int,
    ) -> list[MemoryRecord]:
        """Memories of a scope, oldest first (stable order: creation, then id)."""
        sql = f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s"
        params: list[object] = [scope_id]
        if type is not None:
            sql += " AND type = %s"
            params.append(type)
        sql += ' ORDER BY created_at COLLATE "C", id COLLATE "C" LIMIT %s OFFSET %s'
        params += [limit, offset]
        with self.db.connection("list memories") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def memory_rows_since(self, scope_id: int, generation: int, scope: Scope) -> list[MemoryRow]:
        """Rows of a scope written after `generation`, with their vectors."""
        with self.db.connection("read memories to index") as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                f"SELECT {_MEMORY_COLS}, embedder, vector FROM tdai_memories "
                "WHERE scope_id = %s AND generation > %s ORDER BY rowid",
                (scope_id, generation),
            ).fetchall()
        return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]

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

    def insert_messages(
        self,
        scope_id: int,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert messages; ids already in the scope (or earlier in the batch) are skipped.

        Each new message records the end of the message before it in its session (from this
        batch, else the last one stored) as its context. Returns how many were new.
        `busy_timeout_ms` is accepted for the interface; the wait for other writers is bounded
        by the store's `timeout_ms` (PostgreSQL `lock_timeout`).
        """
        del busy_timeout_ms
        with self.db.transaction("write messages") as conn:
            gen = bump(conn, scope_id)  # also locks the scope: the reads below stay true
            ids = list(dict.fromkeys(pg_text(r.id) or "" for r in records))
            existing = {
                str(r[0])
                for r in conn.execute(
                    "SELECT id FROM tdai_messages WHERE scope_id = %s AND id = ANY(%s)",
                    (scope_id, ids),
                )
            }
            previous: dict[str, str] = {}
            params: list[tuple[object, ...]] = []
            for rec in records:
                mid = pg_text(rec.id) or ""
                if mid in existing:
                    continue
                existing.add(mid)
                session = pg_text(rec.session_key) or ""
                if session not in previous:
                    row = conn.execute(
                        "SELECT content FROM tdai_messages WHERE scope_id = %s "
                        "AND session_key = %s ORDER BY rowid DESC LIMIT 1",
                        (scope_id, session),
                    ).fetchone()
                    previous[session] = str(row[0]) if row else ""
                content = pg_text(rec.content) or ""
                params.append(
                    (
                        scope_id,
                        mid,
                        rec.role,
                        content,
                        session,
                        pg_text(rec.session_id),
                        rec.recorded_at,
                        previous[session][-L0_CONTEXT_CHARS:],
                        gen,
                    )
                )
                previous[session] = content
            if params:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tdai_messages (scope_id, id, role, content, session_key, "
                        "session_id, recorded_at, context, generation) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        params,
                    )
        return len(params)

    def message_rows_since(self, scope_id: int, generation: int, scope: Scope) -> list[MessageRow]:
        """Messages of a scope written after `generation`, with their vectors."""
        with self.db.connection("read messages to index") as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                f"SELECT {_MESSAGE_COLS}, context, embedder, vector FROM tdai_messages "
                "WHERE scope_id = %s AND generation > %s ORDER BY rowid",
                (scope_id, generation),
            ).fetchall()
        return [
            MessageRow(int(r[0]), message_from_row(r, scope), r[-2], r[-1], context=str(r[-3]))
            for r in rows
        ]

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

    # -- copying a store ------------------------------------------------------------------------

    def export_memories(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MemoryRow]:
        """A page of a scope's memory rows in reference order, with vectors."""
        with self.db.connection("read memories to copy") as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                f"SELECT {_MEMORY_COLS}, embedder, vector FROM tdai_memories "
                "WHERE scope_id = %s AND rowid > %s ORDER BY rowid LIMIT %s",
                (scope_id, after, limit),
            ).fetchall()
        return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]

    def export_messages(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MessageRow]:
        """A page of a scope's message rows in reference order, with context and vectors."""
        with self.db.connection("read messages to copy") as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                f"SELECT {_MESSAGE_COLS}, context, embedder, vector FROM tdai_messages "
                "WHERE scope_id = %s AND rowid > %s ORDER BY rowid LIMIT %s",
                (scope_id, after, limit),
            ).fetchall()
        return [
            MessageRow(int(r[0]), message_from_row(r, scope), r[-2], r[-1], context=str(r[-3]))
            for r in rows
        ]

    def import_memories(self, scope_id: int, rows: Sequence[MemoryRow]) -> int:
        """Write copied memory rows as they are (see `BaseMemoryStore.import_rows`)."""
        with self.db.transaction("write copied memories", timeout_s=_COPY_TIMEOUT_S) as conn:
            gen = bump(conn, scope_id)
            ids = [pg_text(r.record.id) or "" for r in rows]
            have = {
                str(i): (str(u), e)
                for i, u, e in conn.execute(
                    "SELECT id, updated_at, embedder FROM tdai_memories "
                    "WHERE scope_id = %s AND id = ANY(%s)",
                    (scope_id, ids),
                )
            }
            params = []
            for row, mid in zip(rows, ids, strict=True):
                rec = row.record
                vector = _vector_or_none(row.vector, row.embedder)
                if have.get(mid) == (rec.updated_at, row.embedder if vector is not None else None):
                    continue
                params.append(
                    (
                        scope_id,
                        mid,
                        pg_text(rec.content),
                        rec.type,
                        pg_text(rec.scene_name),
                        rec.priority,
                        rec.activity_start_time,
                        rec.activity_end_time,
                        rec.timestamp,
                        pg_text(rec.session_key),
                        pg_text(json.dumps(list(rec.source_message_ids), ensure_ascii=False)),
                        rec.created_at,
                        rec.updated_at,
                        gen,
                        row.embedder if vector is not None else None,
                        vector,
                        content_fingerprint(rec.content),
                    )
                )
            if params:
                with conn.cursor() as cur:
                    cur.executemany(_COPY_MEMORY, params)
        return len(params)

    def import_messages(self, scope_id: int, rows: Sequence[MessageRow]) -> int:
        """Write copied message rows as they are; ids already stored are skipped."""
        with self.db.transaction("write copied messages", timeout_s=_COPY_TIMEOUT_S) as conn:
            gen = bump(conn, scope_id)
            existing = {
                str(r[0])
                for r in conn.execute(
                    "SELECT id FROM tdai_messages WHERE scope_id = %s AND id = ANY(%s)",
                    (scope_id, [pg_text(r.record.id) for r in rows]),
                )
            }
            params = []
            for row in rows:
                rec = row.record
                mid = pg_text(rec.id) or ""
                if mid in existing:
                    continue
                existing.add(mid)
                vector = _vector_or_none(row.vector, row.embedder)
                params.append(
                    (
                        scope_id,
                        mid,
                        rec.role,
                        pg_text(rec.content),
                        pg_text(rec.session_key),
                        pg_text(rec.session_id),
                        rec.recorded_at,
                        pg_text(row.context),
                        gen,
                        row.embedder if vector is not None else None,
                        vector,
                    )
                )
            if params:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tdai_messages (scope_id, id, role, content, session_key, "
                        "session_id, recorded_at, context, generation, embedder, vector) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        params,
                    )
        return len(params)

    # -- shared ---------------------------------------------------------------------------------

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids deleted from a scope's layer after `generation`."""
        with self.db.connection("read deletions") as conn:
            rows = conn.execute(
                "SELECT row_ref FROM tdai_tombstones WHERE scope_id = %s AND layer = %s "
                "AND generation > %s",
                (scope_id, layer, generation),
            ).fetchall()
        return [int(r[0]) for r in rows]

    # -- vector upkeep --------------------------------------------------------------------------

    def count_pending_vectors(
        self, layer: Layer, embedder: str, *, scope_id: int | None = None, stale: bool = True
    ) -> int:
        """Rows without a vector (and, with `stale`, rows whose vector is another embedder's)."""
        where = "(vector IS NULL OR embedder IS DISTINCT FROM %s)" if stale else "vector IS NULL"
        params: list[object] = [embedder] if stale else []
        if scope_id is not None:
            where += " AND scope_id = %s"
            params.append(scope_id)
        with self.db.connection("count rows waiting for vectors") as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {_TABLE[layer]} WHERE {where}", params
            ).fetchone()
        return int(row[0]) if row else 0

    def vector_embedders(self, layer: Layer) -> list[tuple[str, int, int]]:
        """(embedder, dimension, rows) of every embedder that made stored vectors in a layer."""
        with self.db.connection("read the embedders of stored vectors") as conn:
            rows = conn.execute(
                f"SELECT embedder, vector_dims(vector), COUNT(*) FROM {_TABLE[layer]} "
                "WHERE vector IS NOT NULL AND embedder IS NOT NULL "
                "GROUP BY embedder, vector_dims(vector)"
            ).fetchall()
        return [(str(e), int(d), int(n)) for e, d, n in rows]

    def count_foreign_vectors(self, layer: Layer, embedder: str) -> int:
        """Rows holding a vector made by another embedder."""
        with self.db.connection("count vectors") as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {_TABLE[layer]} "
                "WHERE vector IS NOT NULL AND embedder IS DISTINCT FROM %s",
                (embedder,),
            ).fetchone()
        return int(row[0]) if row else 0

    def pending_vectors(
        self, layer: Layer, embedder: str, *, after: int, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows after ref `after` that need a vector, in ref order."""
        text = _EMBEDDED_TEXT[layer]
        condition = (
            "(vector IS NULL OR embedder IS DISTINCT FROM %s)" if stale else "vector IS NULL"
        )
        params: tuple[object, ...] = (embedder, after, limit) if stale else (after, limit)
        with self.db.connection("read rows waiting for vectors") as conn:
            rows = conn.execute(
                f"SELECT rowid, {text} FROM {_TABLE[layer]} "
                f"WHERE {condition} AND rowid > %s ORDER BY rowid LIMIT %s",
                params,
            ).fetchall()
        return [PendingVector(int(r), str(t)) for r, t in rows]

    def set_vectors(
        self,
        layer: Layer,
        items: Sequence[PendingVector],
        vectors: npt.NDArray[np.float32],
        embedder: str,
    ) -> int:
        """Store vectors for pending rows whose text is still the embedded text.

        A row updated or deleted since it was read is left alone. Returns rows updated.
        """
        if not items:
            return 0
        table = _TABLE[layer]
        with self.db.transaction("store vectors") as conn:
            scope_of = {
                int(r): int(s)
                for r, s in conn.execute(
                    f"SELECT rowid, scope_id FROM {table} WHERE rowid = ANY(%s)",
                    ([item.ref for item in items],),
                )
            }
            gens = {s: bump(conn, s) for s in sorted(set(scope_of.values()))}
            params = [
                (
                    np.ascontiguousarray(vec, dtype=np.float32),
                    embedder,
                    gens[scope_of[item.ref]],
                    item.ref,
                    item.text,
                )
                for item, vec in zip(items, vectors, strict=True)
                if item.ref in scope_of
            ]
            with conn.cursor() as cur:
                cur.executemany(
                    f"UPDATE {table} SET vector = %s, embedder = %s, generation = %s "
                    f"WHERE rowid = %s AND {_EMBEDDED_TEXT[layer]} = %s",
                    params,
                )
                return max(cur.rowcount, 0)

    def stored_dimension(self, embedder: str, scope_id: int | None = None) -> int | None:
        """Dimension of the vectors `embedder` made (optionally in one scope), if any."""
        with self.db.connection("read the vector dimension") as conn:
            for table in _TABLE.values():
                sql = (
                    f"SELECT vector_dims(vector) FROM {table} "
                    "WHERE embedder = %s AND vector IS NOT NULL"
                )
                params: list[object] = [embedder]
                if scope_id is not None:
                    sql += " AND scope_id = %s"
                    params.append(scope_id)
                row = conn.execute(sql + " LIMIT 1", params).fetchone()
                if row is not None:
                    return int(row[0])
        return None

    def drop_vectors(self, embedder: str, *, keep_dimension: int) -> int:
        """Forget `embedder`'s vectors of another dimension; returns how many rows were reset."""
        reset = 0
        with self.db.transaction("reset vectors") as conn:
            for table in _TABLE.values():
                scope_ids = sorted(
                    int(r[0])
                    for r in conn.execute(
                        f"SELECT DISTINCT scope_id FROM {table} "
                        "WHERE embedder = %s AND vector_dims(vector) != %s",
                        (embedder, keep_dimension),
                    )
                )
                for scope_id in scope_ids:
                    gen = bump(conn, scope_id)
                    cur = conn.execute(
                        f"UPDATE {table} SET vector = NULL, embedder = NULL, generation = %s "
                        "WHERE scope_id = %s AND embedder = %s AND vector_dims(vector) != %s",
                        (gen, scope_id, embedder, keep_dimension),
                    )
                    reset += max(cur.rowcount, 0)
        return reset
