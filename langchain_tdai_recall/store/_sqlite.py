"""SQLite: the durable record of L1 memories and L0 messages.

One database per store (`memory.sqlite3` in the store directory, or `:memory:`). WAL journal,
explicit `BEGIN IMMEDIATE` transactions, and a per-scope `generation` counter: every write bumps
its scope's generation and stamps the rows it touched (deletions leave a tombstone), so an
in-memory index that remembers the generation it has seen can catch up with exactly the rows that
changed since, including rows written by another process sharing the directory.

Vectors are stored next to their rows as float32 blobs tagged with the embedder identity, so
derived FAISS indexes are rebuilt without re-embedding, and rows embedded by another embedder are
recognised and re-embedded instead of being mixed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import StoreClosedError, StoreError
from langchain_tdai_recall.store._history import Change, record_version
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import MemoryRecord, MemoryType, MessageRecord

__all__ = ["DB_FILENAME", "Layer", "MemoryRow", "MessageRow", "SqliteRecords"]

DB_FILENAME: Final = "memory.sqlite3"

Layer = Literal["l1", "l0"]

_MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE scopes (
        scope_id   INTEGER PRIMARY KEY,
        user_id    TEXT NOT NULL,
        agent_id   TEXT NOT NULL,          -- '' is the user's shared memory
        generation INTEGER NOT NULL DEFAULT 0,
        UNIQUE (user_id, agent_id)
    );
    CREATE TABLE memories (
        rowid               INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id            INTEGER NOT NULL REFERENCES scopes(scope_id),
        id                  TEXT NOT NULL,
        content             TEXT NOT NULL,
        type                TEXT NOT NULL,
        scene_name          TEXT NOT NULL DEFAULT '',
        priority            INTEGER NOT NULL DEFAULT 50,
        activity_start_time TEXT,
        activity_end_time   TEXT,
        timestamp           TEXT,
        session_key         TEXT NOT NULL DEFAULT '',
        source_message_ids  TEXT NOT NULL DEFAULT '[]',
        created_at          TEXT NOT NULL,
        updated_at          TEXT NOT NULL,
        generation          INTEGER NOT NULL,
        embedder            TEXT,
        vector              BLOB,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX memories_scope_generation ON memories (scope_id, generation);
    CREATE TABLE messages (
        rowid       INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id    INTEGER NOT NULL REFERENCES scopes(scope_id),
        id          TEXT NOT NULL,
        role        TEXT NOT NULL,
        content     TEXT NOT NULL,
        session_key TEXT NOT NULL DEFAULT '',
        session_id  TEXT NOT NULL DEFAULT '',
        recorded_at TEXT NOT NULL,
        generation  INTEGER NOT NULL,
        embedder    TEXT,
        vector      BLOB,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX messages_scope_generation ON messages (scope_id, generation);
    CREATE TABLE tombstones (
        scope_id   INTEGER NOT NULL,
        layer      TEXT NOT NULL,
        row_ref    INTEGER NOT NULL,
        generation INTEGER NOT NULL
    );
    CREATE INDEX tombstones_scope_generation ON tombstones (scope_id, layer, generation);
    """,
    # 2: memory formation (store/_formation.py, store/_history.py). `content_key` is the
    # exact-duplicate fingerprint (text/fingerprint.py), filled for existing rows here.
    """
    ALTER TABLE memories ADD COLUMN content_key TEXT;
    UPDATE memories SET content_key = tdai_fingerprint(content);
    CREATE INDEX memories_scope_content_key ON memories (scope_id, content_key);
    CREATE INDEX messages_scope_session ON messages (scope_id, session_key, rowid);
    CREATE TABLE memory_versions (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id    INTEGER NOT NULL,
        memory_id   TEXT NOT NULL,
        version     INTEGER NOT NULL,
        change      TEXT NOT NULL,         -- update | merge | merged | delete
        actor       TEXT NOT NULL,         -- api | extraction | tool
        related_ids TEXT NOT NULL DEFAULT '[]',
        snapshot    TEXT NOT NULL,         -- the replaced version as JSON
        replaced_at TEXT NOT NULL,
        UNIQUE (scope_id, memory_id, version)
    );
    CREATE TABLE formation_sessions (
        scope_id    INTEGER NOT NULL,
        session_key TEXT NOT NULL,
        cursor      INTEGER NOT NULL DEFAULT 0,   -- last L0 rowid extracted (messages.rowid)
        warmup      INTEGER NOT NULL DEFAULT 1,   -- warm-up threshold, 0 once graduated
        situation   TEXT NOT NULL DEFAULT '',
        failures    INTEGER NOT NULL DEFAULT 0,   -- consecutive failed attempts
        retry_at    REAL NOT NULL DEFAULT 0,      -- epoch seconds, no attempt before
        last_error  TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (scope_id, session_key)
    );
    CREATE TABLE formation_scopes (
        scope_id               INTEGER PRIMARY KEY,
        scenes_at              REAL NOT NULL DEFAULT 0,
        memories_since_persona INTEGER NOT NULL DEFAULT 0,
        persona_at             REAL NOT NULL DEFAULT 0,
        failures               INTEGER NOT NULL DEFAULT 0,
        retry_at               REAL NOT NULL DEFAULT 0,
        last_error             TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE formation_scene_queue (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id  INTEGER NOT NULL,
        memory_id TEXT NOT NULL
    );
    CREATE INDEX formation_scene_queue_scope ON formation_scene_queue (scope_id, seq);
    CREATE TABLE formation_leases (
        scope_id   INTEGER PRIMARY KEY,
        owner      TEXT NOT NULL,
        host       TEXT NOT NULL,
        pid        INTEGER NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
)
"""Append-only schema migrations; `PRAGMA user_version` is the number applied."""

_TABLE: Final[dict[Layer, str]] = {"l1": "memories", "l0": "messages"}
_MEMORY_COLS: Final = (
    "rowid, id, content, type, scene_name, priority, activity_start_time, activity_end_time, "
    "timestamp, session_key, source_message_ids, created_at, updated_at"
)
_MESSAGE_COLS: Final = "rowid, id, role, content, session_key, session_id, recorded_at"


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """A memory row as the index needs it: metadata for ranking, text, and the vector."""

    rowid: int
    record: MemoryRecord
    embedder: str | None
    vector: bytes | None


@dataclass(frozen=True, slots=True)
class MessageRow:
    """A message row as the index needs it."""

    rowid: int
    record: MessageRecord
    embedder: str | None
    vector: bytes | None


def _agent_key(agent_id: str | None) -> str:
    return agent_id or ""


class SqliteRecords:
    """All SQL of the store. Thread-safe: one connection, serialised by a lock."""

    def __init__(self, directory: Path | None, *, synchronous: str = "normal") -> None:
        self.path = directory / DB_FILENAME if directory is not None else None
        target = str(self.path) if self.path is not None else ":memory:"
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                target, check_same_thread=False, isolation_level=None, timeout=10.0
            )
        except sqlite3.Error as exc:
            msg = f"cannot open the memory database at {target!r}: {exc}"
            raise StoreError(msg) from exc
        self._lock = threading.RLock()
        self._scope_cache: dict[tuple[str, str], int] = {}
        conn = self._conn
        if self.path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.create_function("tdai_fingerprint", 1, content_fingerprint, deterministic=True)
        self._migrate()

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection; raises `StoreClosedError` after `close()`."""
        if self._conn is None:
            msg = "the memory store is closed; open a new one with TdaiMemory.open(path)"
            raise StoreClosedError(msg)
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction (`BEGIN IMMEDIATE` … `COMMIT`, rolled back on error).

        For modules beside this one that keep their own tables (store/_formation.py).
        """
        return self._write()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, held for a few reads (no transaction)."""
        with self._lock:
            yield self.conn

    def _migrate(self) -> None:
        with self._lock:
            (version,) = self.conn.execute("PRAGMA user_version").fetchone()
            if version > len(_MIGRATIONS):
                msg = (
                    f"the memory database {self.path} was written by a newer version "
                    f"(schema {version}, this version knows {len(_MIGRATIONS)}); upgrade "
                    "langchain-tdai-recall"
                )
                raise StoreError(msg)
            for number in range(version, len(_MIGRATIONS)):
                with self._write() as conn:
                    for statement in _MIGRATIONS[number].split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version={number + 1}")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- scopes -------------------------------------------------------------------------------

    def scope_id(self, user_id: str, agent_id: str | None, *, create: bool) -> int | None:
        """The id of a scope; created on first write when `create`, else `None` if unknown."""
        key = (user_id, _agent_key(agent_id))
        cached = self._scope_cache.get(key)
        if cached is not None:
            return cached
        with self._lock:
            row = self.conn.execute(
                "SELECT scope_id FROM scopes WHERE user_id = ? AND agent_id = ?", key
            ).fetchone()
            if row is None:
                if not create:
                    return None
                with self._write() as conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO scopes (user_id, agent_id) VALUES (?, ?)", key
                    )
                    row = conn.execute(
                        "SELECT scope_id FROM scopes WHERE user_id = ? AND agent_id = ?", key
                    ).fetchone()
            self._scope_cache[key] = int(row[0])
            return int(row[0])

    def scopes(self) -> list[tuple[int, str, str | None]]:
        """Every scope: (scope_id, user_id, agent_id)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT scope_id, user_id, agent_id FROM scopes ORDER BY user_id, agent_id"
            ).fetchall()
        return [(int(s), u, a or None) for s, u, a in rows]

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (bumped by every write to it)."""
        with self._lock:
            row = self.conn.execute(
                "SELECT generation FROM scopes WHERE scope_id = ?", (scope_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def bump(conn: sqlite3.Connection, scope_id: int) -> int:
        """Advance a scope's generation inside the caller's transaction; returns the new one."""
        return SqliteRecords._bump(conn, scope_id)

    @staticmethod
    def _bump(conn: sqlite3.Connection, scope_id: int) -> int:
        conn.execute(
            "UPDATE scopes SET generation = generation + 1 WHERE scope_id = ?", (scope_id,)
        )
        (gen,) = conn.execute(
            "SELECT generation FROM scopes WHERE scope_id = ?", (scope_id,)
        ).fetchone()
        return int(gen)

    # -- L1 memories --------------------------------------------------------------------------

    def upsert_memories(
        self,
        scope_id: int,
        records: Sequence[MemoryRecord],
        *,
        embedder: str | None,
        vectors: npt.NDArray[np.float32] | None,
        dedupe: Sequence[bool] | None = None,
        actor: str = "api",
    ) -> list[MemoryRecord]:
        """Insert or update records (by id within the scope) in one transaction.

        An update keeps the original `created_at` and records the replaced version in the
        history. With `dedupe[i]`, a record whose text is an exact duplicate (see
        `text.fingerprint`) of a memory already in the scope is not written; the existing
        memory is returned in its place. Returns the records as stored.
        """
        stored: list[MemoryRecord] = []
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for i, rec in enumerate(records):
                if dedupe is not None and dedupe[i]:
                    existing = self.find_duplicate(conn, scope_id, rec)
                    if existing is not None:
                        stored.append(existing)
                        continue
                blob = vectors[i].astype(np.float32).tobytes() if vectors is not None else None
                stored.append(
                    self.write_memory_row(
                        conn, scope_id, gen, rec, embedder=embedder, blob=blob, actor=actor
                    )
                )
        return stored

    @staticmethod
    def find_duplicate(
        conn: sqlite3.Connection, scope_id: int, rec: MemoryRecord
    ) -> MemoryRecord | None:
        """The scope's memory whose text is an exact duplicate of `rec`'s, or `None`."""
        row = conn.execute(
            f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ? AND content_key = ? "
            "ORDER BY rowid LIMIT 1",
            (scope_id, content_fingerprint(rec.content)),
        ).fetchone()
        return _memory(row, (rec.user_id, rec.agent_id)) if row else None

    @staticmethod
    def write_memory_row(
        conn: sqlite3.Connection,
        scope_id: int,
        gen: int,
        rec: MemoryRecord,
        *,
        embedder: str | None,
        blob: bytes | None,
        actor: str,
        change: Change = "update",
        related: Sequence[str] = (),
    ) -> MemoryRecord:
        """Insert or update one row inside the caller's transaction; returns it as stored.

        An existing row keeps its `created_at`; its replaced version goes to the history as
        `change` (by `actor`, naming `related` ids).
        """
        row = conn.execute(
            "SELECT created_at FROM memories WHERE scope_id = ? AND id = ?",
            (scope_id, rec.id),
        ).fetchone()
        created = row[0] if row else rec.created_at
        if row:
            record_version(
                conn,
                scope_id,
                rec.id,
                change=change,
                actor=actor,
                at=rec.updated_at,
                related=related,
                replacement=rec,
            )
        conn.execute(
            """
            INSERT INTO memories (scope_id, id, content, type, scene_name, priority,
                activity_start_time, activity_end_time, timestamp, session_key,
                source_message_ids, created_at, updated_at, generation, embedder, vector,
                content_key)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (scope_id, id) DO UPDATE SET
                content = excluded.content, type = excluded.type,
                scene_name = excluded.scene_name, priority = excluded.priority,
                activity_start_time = excluded.activity_start_time,
                activity_end_time = excluded.activity_end_time,
                timestamp = excluded.timestamp, session_key = excluded.session_key,
                source_message_ids = excluded.source_message_ids,
                updated_at = excluded.updated_at, generation = excluded.generation,
                embedder = excluded.embedder, vector = excluded.vector,
                content_key = excluded.content_key
            """,
            (
                scope_id,
                rec.id,
                rec.content,
                rec.type,
                rec.scene_name,
                rec.priority,
                rec.activity_start_time,
                rec.activity_end_time,
                rec.timestamp,
                rec.session_key,
                json.dumps(list(rec.source_message_ids), ensure_ascii=False),
                created,
                rec.updated_at,
                gen,
                embedder if blob is not None else None,
                blob,
                content_fingerprint(rec.content),
            ),
        )
        return _replace_created(rec, created)

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint → existing id."""
        keys = sorted({content_fingerprint(t) for t in texts})
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT content_key, id FROM memories WHERE scope_id = ? "
                f"AND content_key IN ({marks}) ORDER BY rowid DESC",
                [scope_id, *keys],
            ).fetchall()
        return {str(k): str(i) for k, i in rows}

    def get_memory(
        self, scope_id: int, memory_id: str, user: tuple[str, str | None]
    ) -> MemoryRecord | None:
        """One memory by id, or `None`."""
        with self._lock:
            row = self.conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ? AND id = ?",
                (scope_id, memory_id),
            ).fetchone()
        return _memory(row, user) if row else None

    def delete_memories(
        self, scope_id: int, memory_ids: Sequence[str], *, actor: str = "api", at: str = ""
    ) -> int:
        """Delete by id (keeping each deleted version in the history); returns how many existed."""
        deleted = 0
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for memory_id in memory_ids:
                deleted += self.delete_memory_row(
                    conn, scope_id, gen, memory_id, actor=actor, at=at or _utc_now()
                )
        return deleted

    @staticmethod
    def delete_memory_row(
        conn: sqlite3.Connection,
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
        if not record_version(
            conn, scope_id, memory_id, change=change, actor=actor, at=at, related=related
        ):
            return False
        row = conn.execute(
            "DELETE FROM memories WHERE scope_id = ? AND id = ? RETURNING rowid",
            (scope_id, memory_id),
        ).fetchone()
        conn.execute(
            "INSERT INTO tombstones (scope_id, layer, row_ref, generation) VALUES (?, 'l1', ?, ?)",
            (scope_id, row[0], gen),
        )
        return True

    def list_memories(
        self,
        scope_id: int,
        user: tuple[str, str | None],
        *,
        type: MemoryType | None,
        limit: int | None,
        offset: int,
    ) -> list[MemoryRecord]:
        """Memories of a scope, oldest first (stable order: creation, then id)."""
        sql = f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ?"
        params: list[object] = [scope_id]
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        sql += " ORDER BY created_at, id LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        with self._lock:
            rows = self.conn.execute(sql, params).fetchall()
        return [_memory(r, user) for r in rows]

    def memory_rows_since(
        self, scope_id: int, generation: int, user: tuple[str, str | None]
    ) -> list[MemoryRow]:
        """Rows of a scope written after `generation`, with their vectors."""
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {_MEMORY_COLS}, embedder, vector FROM memories "
                "WHERE scope_id = ? AND generation > ? ORDER BY rowid",
                (scope_id, generation),
            ).fetchall()
        return [MemoryRow(int(r[0]), _memory(r, user), r[-2], r[-1]) for r in rows]

    def memories_by_rowid(
        self, rowids: Sequence[int], user: tuple[str, str | None]
    ) -> dict[int, MemoryRecord]:
        """Records for the given row ids (missing ones are left out)."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE rowid IN ({marks})", list(rowids)
            ).fetchall()
        return {int(r[0]): _memory(r, user) for r in rows}

    # -- L0 messages --------------------------------------------------------------------------

    def insert_messages(
        self,
        scope_id: int,
        records: Sequence[MessageRecord],
        *,
        embedder: str | None,
        vectors: npt.NDArray[np.float32] | None,
    ) -> int:
        """Insert messages; ids already in the scope are skipped. Returns how many were new."""
        inserted = 0
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for i, rec in enumerate(records):
                blob = vectors[i].astype(np.float32).tobytes() if vectors is not None else None
                cur = conn.execute(
                    """
                    INSERT OR IGNORE INTO messages (scope_id, id, role, content, session_key,
                        session_id, recorded_at, generation, embedder, vector)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    (
                        scope_id,
                        rec.id,
                        rec.role,
                        rec.content,
                        rec.session_key,
                        rec.session_id,
                        rec.recorded_at,
                        gen,
                        embedder if blob is not None else None,
                        blob,
                    ),
                )
                inserted += cur.rowcount
        return inserted

    def message_ids_present(self, scope_id: int, ids: Sequence[str]) -> set[str]:
        """Which of `ids` are already stored in the scope."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT id FROM messages WHERE scope_id = ? AND id IN ({marks})",
                [scope_id, *ids],
            ).fetchall()
        return {r[0] for r in rows}

    def message_rows_since(
        self, scope_id: int, generation: int, user: tuple[str, str | None]
    ) -> list[MessageRow]:
        """Messages of a scope written after `generation`, with their vectors."""
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {_MESSAGE_COLS}, embedder, vector FROM messages "
                "WHERE scope_id = ? AND generation > ? ORDER BY rowid",
                (scope_id, generation),
            ).fetchall()
        return [MessageRow(int(r[0]), _message(r, user), r[-2], r[-1]) for r in rows]

    def messages_by_rowid(
        self, rowids: Sequence[int], user: tuple[str, str | None]
    ) -> dict[int, MessageRecord]:
        """Messages for the given row ids."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {_MESSAGE_COLS} FROM messages WHERE rowid IN ({marks})", list(rowids)
            ).fetchall()
        return {int(r[0]): _message(r, user) for r in rows}

    # -- shared -------------------------------------------------------------------------------

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids deleted from a scope's layer after `generation`."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT row_ref FROM tombstones WHERE scope_id = ? AND layer = ? "
                "AND generation > ?",
                (scope_id, layer, generation),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows in a layer, for one scope or all."""
        table = _TABLE[layer]
        with self._lock:
            if scope_id is None:
                (n,) = self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            else:
                (n,) = self.conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE scope_id = ?", (scope_id,)
                ).fetchone()
        return int(n)

    def count_stale_vectors(self, layer: Layer, embedder: str) -> int:
        """Rows whose vector is missing or was made by another embedder."""
        with self._lock:
            (n,) = self.conn.execute(
                f"SELECT COUNT(*) FROM {_TABLE[layer]} WHERE embedder IS NOT ? OR vector IS NULL",
                (embedder,),
            ).fetchone()
        return int(n)

    def stale_vector_batches(
        self, layer: Layer, embedder: str, batch_size: int
    ) -> Iterator[list[tuple[int, int, str]]]:
        """Batches of (rowid, scope_id, text) whose vectors need (re-)embedding."""
        text_col = "content"
        last = 0
        while True:
            with self._lock:
                rows = self.conn.execute(
                    f"SELECT rowid, scope_id, {text_col} FROM {_TABLE[layer]} "
                    "WHERE (embedder IS NOT ? OR vector IS NULL) AND rowid > ? "
                    "ORDER BY rowid LIMIT ?",
                    (embedder, last, batch_size),
                ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            yield [(int(r), int(s), t) for r, s, t in rows]

    def set_vectors(
        self,
        layer: Layer,
        rows: Sequence[tuple[int, int]],
        vectors: npt.NDArray[np.float32],
        embedder: str,
    ) -> None:
        """Store new vectors for (rowid, scope_id) pairs and mark their scopes changed."""
        table = _TABLE[layer]
        with self._write() as conn:
            gens = {s: self._bump(conn, s) for s in {scope for _, scope in rows}}
            for (rowid, scope), vec in zip(rows, vectors, strict=True):
                conn.execute(
                    f"UPDATE {table} SET vector = ?, embedder = ?, generation = ? WHERE rowid = ?",
                    (vec.astype(np.float32).tobytes(), embedder, gens[scope], rowid),
                )


def _utc_now() -> str:
    import datetime as dt  # noqa: PLC0415

    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _replace_created(rec: MemoryRecord, created: str) -> MemoryRecord:
    if rec.created_at == created:
        return rec
    from dataclasses import replace  # noqa: PLC0415

    return replace(rec, created_at=created)


def _memory(row: Sequence[object], user: tuple[str, str | None]) -> MemoryRecord:
    (
        _,
        mid,
        content,
        mtype,
        scene,
        priority,
        start,
        end,
        ts,
        session,
        sources,
        created,
        updated,
    ) = row[:13]
    return MemoryRecord(
        id=str(mid),
        content=str(content),
        type=mtype,  # type: ignore[arg-type]
        scene_name=str(scene),
        priority=int(priority),  # type: ignore[call-overload]
        activity_start_time=start,  # type: ignore[arg-type]
        activity_end_time=end,  # type: ignore[arg-type]
        timestamp=ts,  # type: ignore[arg-type]
        user_id=user[0],
        agent_id=user[1],
        session_key=str(session),
        source_message_ids=tuple(json.loads(str(sources))),
        created_at=str(created),
        updated_at=str(updated),
    )


def _message(row: Sequence[object], user: tuple[str, str | None]) -> MessageRecord:
    _, mid, role, content, session_key, session_id, recorded_at = row[:7]
    return MessageRecord(
        id=str(mid),
        role=str(role),
        content=str(content),
        session_key=str(session_key),
        session_id=str(session_id),
        recorded_at=str(recorded_at),
        user_id=user[0],
        agent_id=user[1],
    )
