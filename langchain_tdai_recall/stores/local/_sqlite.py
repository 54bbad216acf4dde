"""SQLite: the durable record of L1 memories and L0 messages.

One database per store (`memory.sqlite3` in the store directory, or `:memory:`). WAL journal,
explicit `BEGIN IMMEDIATE` transactions, and a per-scope `generation` counter: every write bumps
its scope's generation and stamps the rows it touched (deletions leave a tombstone), so an
in-memory index that remembers the generation it has seen can catch up with exactly the rows that
changed since, including rows written by another process sharing the directory.

Vectors are stored next to their rows as float32 blobs tagged with the embedder identity. Rows
are written without a vector and embedded later (`pending_vectors` / `set_vectors`): a row whose
vector is NULL or was made by another embedder is the to-do list of the vector upkeep, so the
upkeep resumes after a restart without any extra bookkeeping.

A file database has two connections: one for reads, one for write transactions, so a write that
waits for another process's lock never holds up searches in this process. Every `sqlite3` error
is translated at this boundary into the package's `StoreError` family, naming the file and what
to do about it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Final, NoReturn

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import (
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.stores._sql.dialect import Dialect, utc_now
from langchain_tdai_recall.stores._sql.history import read_versions, record_version, snapshot_of
from langchain_tdai_recall.stores.history import versions_of_current
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

__all__ = [
    "DB_FILENAME",
    "SQLITE",
    "Layer",
    "MemoryRow",
    "MessageRow",
    "PendingVector",
    "SqliteRecords",
]

DB_FILENAME: Final = "memory.sqlite3"

SQLITE: Final = Dialect(prefix="", mark="?")
"""The statements shared with PostgreSQL, as SQLite reads them."""


BUSY_TIMEOUT_MS: Final = 10_000
"""How long a write waits for another process's write lock before `StoreWriteError`."""

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
    # 2: rows still waiting for a vector, found without scanning the table
    """
    CREATE INDEX memories_unembedded ON memories (rowid) WHERE vector IS NULL;
    CREATE INDEX messages_unembedded ON messages (rowid) WHERE vector IS NULL;
    """,
    # 3: each message keeps the end of the message before it in its session (see
    # `L0_CONTEXT_CHARS`), so a turn is searched with the turn it answers; existing messages get
    # theirs and wait for a new vector made from both
    """
    ALTER TABLE messages ADD COLUMN context TEXT NOT NULL DEFAULT '';
    CREATE INDEX messages_session ON messages (scope_id, session_key, rowid);
    UPDATE messages SET context = COALESCE((
        SELECT substr(prev.content, -300) FROM messages AS prev
        WHERE prev.scope_id = messages.scope_id AND prev.session_key = messages.session_key
            AND prev.rowid < messages.rowid
        ORDER BY prev.rowid DESC LIMIT 1), '');
    UPDATE messages SET vector = NULL, embedder = NULL WHERE context != '';
    """,
    # 4: memory formation (store/_formation.py, store/_history.py). `content_key` is the
    # exact-duplicate fingerprint (text/fingerprint.py), filled for existing rows here; the
    # formation cursor reads a session's messages through `messages_session` (migration 3).
    """
    ALTER TABLE memories ADD COLUMN content_key TEXT;
    UPDATE memories SET content_key = tdai_fingerprint(content);
    CREATE INDEX memories_scope_content_key ON memories (scope_id, content_key);
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

_CONTEXT_SCHEMA: Final = 3
"""Schema from which messages have a context column; a read-only open of an older store (it
cannot migrate) reads them without context."""
_FORMATION_SCHEMA: Final = 4
"""Schema from which memories have a fingerprint and the history and formation tables exist;
a read-only open of an older store reads memories without them."""


_OUR_TABLES: Final = frozenset({"scopes", "memories", "messages", "tombstones"})
_TABLE: Final[dict[Layer, str]] = {"l1": "memories", "l0": "messages"}
_MEMORY_COLS: Final = ", ".join(MEMORY_COLUMNS)
_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_EMBEDDED_TEXT: Final[dict[Layer, str]] = {
    "l1": "content",
    "l0": "(CASE WHEN context = '' THEN content ELSE context || char(10) || content END)",
}
"""SQL for the text a row is embedded (and keyword-indexed) from: a message with its context."""
_MAX_VARIABLES: Final = 500
"""Bound parameters per `IN (...)` query (SQLite's limit is 32766 on recent builds)."""

# SQLite primary result codes (`sqlite3.Error.sqlite_errorcode & 0xFF`)
_BUSY: Final = 5
_LOCKED: Final = 6
_READONLY: Final = 8
_IOERR: Final = 10
_CORRUPT: Final = 11
_FULL: Final = 13
_CANTOPEN: Final = 14
_NOTADB: Final = 26


_COPY_MEMORY: Final = """
    INSERT INTO memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, timestamp, session_key, source_message_ids,
        created_at, updated_at, generation, embedder, vector, content_key)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope_id, id) DO UPDATE SET
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, timestamp = excluded.timestamp,
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        generation = excluded.generation, embedder = excluded.embedder, vector = excluded.vector,
        content_key = excluded.content_key
"""
"""A memory copied from another store: every field as it was, replacing a row of its id."""


def _agent_key(agent_id: str | None) -> str:
    return agent_id or ""


def _chunks(items: Sequence[int], size: int = _MAX_VARIABLES) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqliteRecords:
    """All SQL of the store. Thread-safe: each connection is serialised by its own lock.

    Args:
        directory: The store directory, or `None` for an in-memory database.
        synchronous: `"normal"` or `"full"` (SQLite `PRAGMA synchronous`).
        read_only: Open the file for reading only; every write raises `StoreReadOnlyError`.

    Raises:
        StoreCorruptedError: If the file is empty, damaged or not a memory store.
        StoreReadOnlyError: If the file or its directory cannot be written (and not
            `read_only`).
        StoreError: If the file cannot be opened for another reason, or was written by a newer
            version.
    """

    def __init__(
        self, directory: Path | None, *, synchronous: str = "normal", read_only: bool = False
    ) -> None:
        self.path = directory / DB_FILENAME if directory is not None else None
        self.read_only = read_only
        self._where = str(self.path) if self.path is not None else "the in-memory database"
        self._write_lock = threading.RLock()
        self._read_lock = threading.RLock()
        self._scope_cache: dict[tuple[str, str], int] = {}
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._closed = False
        self._schema = len(_MIGRATIONS)
        self._synchronous = "FULL" if synchronous == "full" else "NORMAL"
        try:
            if self.path is None:
                conn = self._connect(":memory:", uri=False)
                self._writer = self._reader = conn
                self._read_lock = self._write_lock  # one connection: one lock
                self._migrate()
            elif read_only:
                self._reader = self._open_read_only(self.path)
            else:
                self._open_read_write(self.path)
        except BaseException:
            self.close()
            raise

    # -- opening ------------------------------------------------------------------------------

    @property
    def _context_column(self) -> str:
        return "context" if self._schema >= _CONTEXT_SCHEMA else "''"

    def _embedded_text(self, layer: Layer) -> str:
        return _EMBEDDED_TEXT[layer] if self._schema >= _CONTEXT_SCHEMA else "content"

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        with self._guard("open"):
            conn = sqlite3.connect(
                target,
                uri=uri,
                check_same_thread=False,
                isolation_level=None,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            # used by migration 4 to fingerprint the memories a store already holds
            conn.create_function("tdai_fingerprint", 1, content_fingerprint, deterministic=True)
        return conn

    def _check_file(self, path: Path) -> None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        except OSError as exc:
            msg = f"cannot read the memory database {path} ({exc.strerror or exc})"
            raise StoreError(msg) from exc
        if size == 0:
            msg = (
                f"the memory database {path} is empty (0 bytes): it was truncated or its "
                "creation never finished. Restore it from a backup; if this store never held "
                "memories, delete the file to start an empty store"
            )
            raise StoreCorruptedError(msg)

    def _open_read_write(self, path: Path) -> None:
        self._check_file(path)
        if path.exists() and not os.access(path, os.W_OK):
            msg = (
                f"the memory database {path} is read-only; open it with "
                "TdaiMemory.open(path, read_only=True) to search it, or make it writable"
            )
            raise StoreReadOnlyError(msg)
        if not path.exists():
            self._create(path)
        self._writer = self._configure(self._connect(str(path), uri=False))
        self._reader = self._configure(self._connect(str(path), uri=False))
        self._migrate()

    def _create(self, path: Path) -> None:
        """Create a new database with the full schema, then move it into place atomically.

        A process killed half-way leaves either no database or a complete one, so an empty
        `memory.sqlite3` always means damage and is never mistaken for a new store.
        """
        tmp = path.with_name(f".{DB_FILENAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            conn = self._connect(str(tmp), uri=False)
            try:
                with self._guard("create"):
                    for number, script in enumerate(_MIGRATIONS, start=1):
                        conn.executescript(
                            f"BEGIN; {script}; PRAGMA user_version={number}; COMMIT;"
                        )
            finally:
                conn.close()
            try:
                os.link(tmp, path)  # never replaces a database another process just created
            except FileExistsError:
                pass
            except OSError:
                if not path.exists():
                    os.replace(tmp, path)
        except OSError as exc:
            self._os_error(exc, "create")
        finally:
            tmp.unlink(missing_ok=True)

    def _configure(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        with self._guard("open"):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open_read_only(self, path: Path) -> sqlite3.Connection:
        if not path.is_file():
            msg = (
                f"there is no memory database at {path}; a read-only open needs an existing "
                "store (open it without read_only=True to create one)"
            )
            raise StoreError(msg)
        self._check_file(path)
        uri = f"{path.resolve().as_uri()}?mode=ro"
        conn = self._connect(uri, uri=True)
        try:
            self._check_schema(conn, migrate=False)
        except StoreError as exc:
            cause = exc.__cause__
            code = (getattr(cause, "sqlite_errorcode", None) or 0) & 0xFF
            if code not in (_CANTOPEN, _READONLY):
                conn.close()
                raise
            # A WAL database in a directory we cannot write: SQLite cannot create its shared
            # memory file, so read the file as immutable (nobody can be writing it either).
            conn.close()
            conn = self._connect(f"{uri}&immutable=1", uri=True)
            self._check_schema(conn, migrate=False)
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, migrate: bool) -> int:
        with self._guard("open"):
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            tables = {
                str(r[0])
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        if version > len(_MIGRATIONS):
            msg = (
                f"the memory database {self._where} was written by a newer version "
                f"(schema {version}, this version knows {len(_MIGRATIONS)}); upgrade "
                "langchain-tdai-recall"
            )
            raise StoreError(msg)
        if (version == 0 and tables - {"sqlite_sequence"}) or (
            version > 0 and not tables >= _OUR_TABLES
        ):
            msg = (
                f"{self._where} is an SQLite database but not a memory store (tables: "
                f"{', '.join(sorted(tables)) or 'none'}); point TdaiMemory.open at the store "
                "directory, or move the file aside"
            )
            raise StoreCorruptedError(msg)
        if version == 0 and not migrate:
            msg = f"{self._where} holds no memory store yet; open it writable once to create it"
            raise StoreError(msg)
        self._schema = int(version)
        return int(version)

    def _migrate(self) -> None:
        with self._write_lock:
            conn = self._conn(write=True)
            version = self._check_schema(conn, migrate=True)
            for number in range(version, len(_MIGRATIONS)):
                with self._write() as tx:
                    (current,) = tx.execute("PRAGMA user_version").fetchone()
                    if current > number:
                        continue  # another process migrated meanwhile
                    for statement in _MIGRATIONS[number].split(";"):
                        if statement.strip():
                            tx.execute(statement)
                    tx.execute(f"PRAGMA user_version={number + 1}")
            self._schema = len(_MIGRATIONS)

    # -- plumbing -----------------------------------------------------------------------------

    def _conn(self, *, write: bool) -> sqlite3.Connection:
        conn = self._writer if write else self._reader
        if self._closed or conn is None:
            if not self._closed and write:
                msg = (
                    f"this memory store was opened read-only; {self._where} cannot be "
                    "written (open it without read_only=True to write)"
                )
                raise StoreReadOnlyError(msg)
            msg = "the memory store is closed; open a new one with TdaiMemory.open(path)"
            raise StoreClosedError(msg)
        return conn

    def _os_error(self, exc: OSError, action: str) -> NoReturn:
        import errno  # noqa: PLC0415

        if exc.errno == errno.ENOSPC:
            msg = (
                f"no space left on the device while trying to {action} {self._where}; nothing "
                "was written by this call. Free disk space and retry"
            )
            raise StoreWriteError(msg) from exc
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            msg = (
                f"cannot {action} {self._where}: {exc.strerror or exc}. Open the store with "
                "TdaiMemory.open(path, read_only=True) to search it, or fix the permissions"
            )
            raise StoreReadOnlyError(msg) from exc
        msg = f"cannot {action} {self._where}: {exc.strerror or exc}"
        raise StoreError(msg) from exc

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """Translate `sqlite3` and OS errors raised inside into the package's errors."""
        try:
            yield
        except sqlite3.Error as exc:
            self._translate(exc, action)
        except OSError as exc:
            self._os_error(exc, action)

    def _translate(self, exc: sqlite3.Error, action: str) -> NoReturn:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        where = self._where
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
            msg = "the memory store is closed; open a new one with TdaiMemory.open(path)"
            raise StoreClosedError(msg) from exc
        if code in (_CORRUPT, _NOTADB):
            msg = (
                f"the memory database {where} is damaged ({exc}); nothing was changed. Restore "
                "it from a backup, or move it aside to start an empty store (the persona and "
                "scene files under scopes/ are kept separately)"
            )
            raise StoreCorruptedError(msg) from exc
        if code == _FULL:
            msg = (
                f"the disk holding {where} is full; nothing was written by this call. Free "
                "disk space and retry"
            )
            raise StoreWriteError(msg) from exc
        if code in (_BUSY, _LOCKED):
            msg = (
                f"{where} stayed locked by another process for {BUSY_TIMEOUT_MS // 1000} s; "
                "nothing was written by this call. Retry when the other writer is done"
            )
            raise StoreWriteError(msg) from exc
        if code == _READONLY:
            msg = (
                f"{where} cannot be written ({exc}); open the store with "
                "TdaiMemory.open(path, read_only=True) to search it, or fix the permissions"
            )
            raise StoreReadOnlyError(msg) from exc
        if code == _CANTOPEN:
            msg = (
                f"cannot open {where} ({exc}): check that the directory exists and can be "
                "read and written; open it with TdaiMemory.open(path, read_only=True) if it "
                "is read-only"
            )
            raise StoreError(msg) from exc
        if code == _IOERR:
            msg = f"an I/O error occurred while trying to {action} {where} ({exc}); retry"
            raise StoreWriteError(msg) from exc
        msg = f"the memory database {where} failed to {action}: {exc}"
        raise StoreError(msg) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock, self._guard("read"):
            yield self._conn(write=False)

    @contextmanager
    def _write(self, *, busy_timeout_ms: int | None = None) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction; `busy_timeout_ms` bounds the wait for the lock."""
        with self._write_lock:
            conn = self._conn(write=True)
            with self._guard("write to"):
                if busy_timeout_ms is not None:
                    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                finally:
                    if busy_timeout_ms is not None:
                        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with suppress(sqlite3.Error):  # the original error is the one to report
                            conn.execute("ROLLBACK")
                    raise

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction for `stores.local._formation`, which keeps its own tables.

        `BEGIN IMMEDIATE` ... `COMMIT`, rolled back on error, with errors translated like every
        other write.
        """
        return self._write()

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        """The read connection, held for a few reads (no transaction); errors translated."""
        return self._read()

    @property
    def has_formation_tables(self) -> bool:
        """Whether the schema has the history and formation tables.

        A read-only open of an older store (which cannot migrate) does not.
        """
        return self._schema >= _FORMATION_SCHEMA

    def close(self) -> None:
        """Close the connections (idempotent); later calls raise `StoreClosedError`."""
        self._closed = True
        with self._write_lock, self._read_lock:
            for conn in {id(c): c for c in (self._writer, self._reader) if c is not None}.values():
                with suppress(sqlite3.Error):
                    conn.close()
            self._writer = self._reader = None

    # -- scopes -------------------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool) -> int | None:
        """The id of a scope; created on first write when `create`, else `None` if unknown."""
        key = (scope.user_id, _agent_key(scope.agent_id))
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
        """Every scope: (scope_id, scope)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT scope_id, user_id, agent_id FROM scopes ORDER BY user_id, agent_id"
            ).fetchall()
        return [(int(s), Scope(u, a or None)) for s, u, a in rows]

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (bumped by every write to it)."""
        with self._read() as conn:
            row = conn.execute(
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
        dedupe: Sequence[bool] | None = None,
        actor: str = "api",
    ) -> list[MemoryRecord]:
        """Insert or update records (by id within the scope) in one transaction.

        An update keeps the original `created_at`, records the replaced version in the history
        (`stores.local._history`), and keeps the row's vector when the content did not change;
        otherwise the row waits for a new vector. With `dedupe[i]`, a record whose text is an
        exact duplicate (see `text.fingerprint`) of a memory already in the scope, or of an
        earlier record of the call, is not written: that memory is returned in its place.
        Returns the records as stored.
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
                stored.append(self.write_memory_row(conn, scope_id, gen, rec, actor=actor))
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
        return memory_from_row(row, Scope(rec.user_id, rec.agent_id)) if row else None

    @staticmethod
    def write_memory_row(
        conn: sqlite3.Connection,
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

        An existing row keeps its `created_at`; its replaced version goes to the history as
        `change` (by `actor`, naming `related` ids). `vector` (made by `embedder` from the new
        content) is stored with the row; without one, an unchanged text keeps its vector and a
        changed one waits for the vector upkeep.
        """
        old = snapshot_of(conn, SQLITE, scope_id, rec.id)
        created = str(old["created_at"]) if old is not None else rec.created_at
        if old is not None:
            record_version(
                conn,
                SQLITE,
                scope_id,
                rec.id,
                change=change,
                actor=actor,
                at=rec.updated_at,
                related=related,
                replacement=rec,
                old=old,
            )
        given = vector is not None and embedder is not None
        conn.execute(
            """
            INSERT INTO memories (scope_id, id, content, type, scene_name, priority,
                activity_start_time, activity_end_time, timestamp, session_key,
                source_message_ids, created_at, updated_at, generation, embedder, vector,
                content_key)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (scope_id, id) DO UPDATE SET
                embedder = CASE WHEN excluded.vector IS NOT NULL THEN excluded.embedder
                           WHEN memories.content = excluded.content THEN memories.embedder END,
                vector = CASE WHEN excluded.vector IS NOT NULL THEN excluded.vector
                         WHEN memories.content = excluded.content THEN memories.vector END,
                content = excluded.content, type = excluded.type,
                scene_name = excluded.scene_name, priority = excluded.priority,
                activity_start_time = excluded.activity_start_time,
                activity_end_time = excluded.activity_end_time,
                timestamp = excluded.timestamp, session_key = excluded.session_key,
                source_message_ids = excluded.source_message_ids,
                updated_at = excluded.updated_at, generation = excluded.generation,
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
                embedder if given else None,
                np.asarray(vector, dtype=np.float32).tobytes() if given else None,
                content_fingerprint(rec.content),
            ),
        )
        return rec if created == rec.created_at else replace(rec, created_at=created)

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""
        keys = sorted({content_fingerprint(t) for t in texts})
        out: dict[str, str] = {}
        for start in range(0, len(keys), _MAX_VARIABLES):
            part = keys[start : start + _MAX_VARIABLES]
            marks = ",".join("?" * len(part))
            with self._read() as conn:
                rows = conn.execute(
                    f"SELECT content_key, id FROM memories WHERE scope_id = ? "
                    f"AND content_key IN ({marks}) ORDER BY rowid DESC",
                    [scope_id, *part],
                ).fetchall()
            out.update((str(k), str(i)) for k, i in rows)
        return out

    def get_memory(self, scope_id: int, memory_id: str, scope: Scope) -> MemoryRecord | None:
        """One memory by id, or `None`."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ? AND id = ?",
                (scope_id, memory_id),
            ).fetchone()
        return memory_from_row(row, scope) if row else None

    def delete_memories(
        self, scope_id: int, memory_ids: Sequence[str], *, actor: str = "api"
    ) -> int:
        """Delete by id (each deleted version is kept in the history); returns how many existed."""
        deleted = 0
        at = utc_now()
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for memory_id in memory_ids:
                deleted += self.delete_memory_row(
                    conn, scope_id, gen, memory_id, actor=actor, at=at
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
            conn, SQLITE, scope_id, memory_id, change=change, actor=actor, at=at, related=related
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

    def memory_history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        current = self.get_memory(scope_id, memory_id, scope)
        if not self.has_formation_tables:  # a read-only open of an older store
            return [] if current is None else versions_of_current(current)
        with self._read() as conn:
            return read_versions(conn, SQLITE, scope_id, memory_id, scope=scope, current=current)

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
        sql = f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ?"
        params: list[object] = [scope_id]
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        sql += " ORDER BY created_at, id LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def memory_rows_since(self, scope_id: int, generation: int, scope: Scope) -> list[MemoryRow]:
        """Rows of a scope written after `generation`, with their vectors."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLS}, embedder, vector FROM memories "
                "WHERE scope_id = ? AND generation > ? ORDER BY rowid",
                (scope_id, generation),
            ).fetchall()
        return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]

    def memories_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MemoryRecord]:
        """Records of the scope for the given row ids (missing or foreign ones are left out)."""
        out: dict[int, MemoryRecord] = {}
        # `+scope_id` keeps SQLite on the rowid lookup: without it the planner walks the
        # (scope_id, id) index over the whole scope, 10 ms per search at 100k memories
        for part in _chunks(list(rowids)):
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

    def insert_messages(
        self,
        scope_id: int,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert messages; ids already in the scope are skipped. Returns how many were new.

        Each new message records the end of the message before it in its session (from this
        batch, else the last one stored) as its context.
        """
        inserted = 0
        with self._write(busy_timeout_ms=busy_timeout_ms) as conn:
            gen = self._bump(conn, scope_id)
            previous: dict[str, str] = {}
            for rec in records:
                if rec.session_key not in previous:
                    row = conn.execute(
                        "SELECT content FROM messages WHERE scope_id = ? AND session_key = ? "
                        "ORDER BY rowid DESC LIMIT 1",
                        (scope_id, rec.session_key),
                    ).fetchone()
                    previous[rec.session_key] = str(row[0]) if row else ""
                cur = conn.execute(
                    """
                    INSERT OR IGNORE INTO messages (scope_id, id, role, content, session_key,
                        session_id, recorded_at, generation, embedder, vector, context)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)
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
                        previous[rec.session_key][-L0_CONTEXT_CHARS:],
                    ),
                )
                inserted += cur.rowcount
                if cur.rowcount:
                    previous[rec.session_key] = rec.content
        return inserted

    def message_rows_since(self, scope_id: int, generation: int, scope: Scope) -> list[MessageRow]:
        """Messages of a scope written after `generation`, with their vectors."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLS}, {self._context_column}, embedder, vector FROM messages "
                "WHERE scope_id = ? AND generation > ? ORDER BY rowid",
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
        out: dict[int, MessageRecord] = {}
        for part in _chunks(list(rowids)):
            marks = ",".join("?" * len(part))
            with self._read() as conn:
                rows = conn.execute(
                    f"SELECT {_MESSAGE_COLS} FROM messages "
                    f"WHERE +scope_id = ? AND rowid IN ({marks})",
                    [scope_id, *part],
                ).fetchall()
            out.update((int(r[0]), message_from_row(r, scope)) for r in rows)
        return out

    # -- copying a store ----------------------------------------------------------------------

    def export_memories(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MemoryRow]:
        """A page of a scope's memory rows in reference order, with vectors."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLS}, embedder, vector FROM memories "
                "WHERE scope_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                (scope_id, after, limit),
            ).fetchall()
        return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]

    def export_messages(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MessageRow]:
        """A page of a scope's message rows in reference order, with context and vectors."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLS}, {self._context_column}, embedder, vector FROM messages "
                "WHERE scope_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                (scope_id, after, limit),
            ).fetchall()
        return [
            MessageRow(int(r[0]), message_from_row(r, scope), r[-2], r[-1], context=str(r[-3]))
            for r in rows
        ]

    def import_memories(self, scope_id: int, rows: Sequence[MemoryRow]) -> int:
        """Write copied memory rows as they are; returns how many were written.

        A memory already copied (same id, `updated_at` and vector embedder) is skipped, so an
        interrupted copy resumes cheaply.
        """
        written = 0
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for row in rows:
                rec = row.record
                has_vector = bool(row.vector) and row.embedder is not None
                embedder = row.embedder if has_vector else None
                found = conn.execute(
                    "SELECT updated_at, embedder FROM memories WHERE scope_id = ? AND id = ?",
                    (scope_id, rec.id),
                ).fetchone()
                if found is not None and (found[0], found[1]) == (rec.updated_at, embedder):
                    continue
                conn.execute(
                    _COPY_MEMORY,
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
                        rec.created_at,
                        rec.updated_at,
                        gen,
                        embedder,
                        row.vector if has_vector else None,
                        content_fingerprint(rec.content),
                    ),
                )
                written += 1
        return written

    def import_messages(self, scope_id: int, rows: Sequence[MessageRow]) -> int:
        """Write copied message rows as they are (ids already stored are skipped)."""
        written = 0
        with self._write() as conn:
            gen = self._bump(conn, scope_id)
            for row in rows:
                rec = row.record
                has_vector = bool(row.vector) and row.embedder is not None
                cur = conn.execute(
                    "INSERT OR IGNORE INTO messages (scope_id, id, role, content, session_key, "
                    "session_id, recorded_at, context, generation, embedder, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        scope_id,
                        rec.id,
                        rec.role,
                        rec.content,
                        rec.session_key,
                        rec.session_id,
                        rec.recorded_at,
                        row.context,
                        gen,
                        row.embedder if has_vector else None,
                        row.vector if has_vector else None,
                    ),
                )
                written += cur.rowcount
        return written

    # -- shared -------------------------------------------------------------------------------

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids deleted from a scope's layer after `generation`."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT row_ref FROM tombstones WHERE scope_id = ? AND layer = ? "
                "AND generation > ?",
                (scope_id, layer, generation),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows in a layer, for one scope or all."""
        table = _TABLE[layer]
        with self._read() as conn:
            if scope_id is None:
                (n,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            else:
                (n,) = conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE scope_id = ?", (scope_id,)
                ).fetchone()
        return int(n)

    # -- vector upkeep ------------------------------------------------------------------------

    def count_pending_vectors(
        self, layer: Layer, embedder: str, *, scope_id: int | None = None, stale: bool = True
    ) -> int:
        """Rows without a vector (and, with `stale`, rows whose vector is another embedder's)."""
        where = "(vector IS NULL OR embedder IS NOT ?)" if stale else "vector IS NULL"
        params: list[object] = [embedder] if stale else []
        if scope_id is not None:
            where += " AND scope_id = ?"
            params.append(scope_id)
        with self._read() as conn:
            (n,) = conn.execute(
                f"SELECT COUNT(*) FROM {_TABLE[layer]} WHERE {where}", params
            ).fetchone()
        return int(n)

    def vector_embedders(self, layer: Layer) -> list[tuple[str, int, int]]:
        """(embedder, dimension, rows) of every embedder that made stored vectors in a layer."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT embedder, length(vector) / 4, COUNT(*) FROM {_TABLE[layer]} "
                "WHERE vector IS NOT NULL AND embedder IS NOT NULL "
                "GROUP BY embedder, length(vector)"
            ).fetchall()
        return [(str(e), int(d), int(n)) for e, d, n in rows]

    def count_foreign_vectors(self, layer: Layer, embedder: str) -> int:
        """Rows holding a vector made by another embedder."""
        with self._read() as conn:
            (n,) = conn.execute(
                f"SELECT COUNT(*) FROM {_TABLE[layer]} "
                "WHERE vector IS NOT NULL AND embedder IS NOT ?",
                (embedder,),
            ).fetchone()
        return int(n)

    def pending_vectors(
        self, layer: Layer, embedder: str, *, after: int, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows after ref `after` that need a vector, in ref order.

        Without `stale` only rows with no vector are listed (served by a partial index); with
        it, rows whose vector another embedder made are listed too (a table scan).
        """
        text = self._embedded_text(layer)
        if stale:
            sql = (
                f"SELECT rowid, {text} FROM {_TABLE[layer]} "
                "WHERE (vector IS NULL OR embedder IS NOT ?) AND rowid > ? ORDER BY rowid LIMIT ?"
            )
            params: tuple[object, ...] = (embedder, after, limit)
        else:
            sql = (
                f"SELECT rowid, {text} FROM {_TABLE[layer]} "
                "WHERE vector IS NULL AND rowid > ? ORDER BY rowid LIMIT ?"
            )
            params = (after, limit)
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [PendingVector(int(r), str(t)) for r, t in rows]

    def set_vectors(
        self,
        layer: Layer,
        items: Sequence[PendingVector],
        vectors: npt.NDArray[np.float32],
        embedder: str,
    ) -> int:
        """Store vectors for pending rows whose text is still the embedded text.

        A row updated or deleted since it was read is left alone (it is embedded again with
        its new text). Returns how many rows were updated.
        """
        table = _TABLE[layer]
        if not items:
            return 0
        refs = [item.ref for item in items]
        updated = 0
        with self._write() as conn:
            scope_of: dict[int, int] = {}
            for part in _chunks(refs):
                marks = ",".join("?" * len(part))
                scope_of.update(
                    (int(r), int(s))
                    for r, s in conn.execute(
                        f"SELECT rowid, scope_id FROM {table} WHERE rowid IN ({marks})", part
                    )
                )
            gens = {s: self._bump(conn, s) for s in sorted(set(scope_of.values()))}
            for item, vec in zip(items, vectors, strict=True):
                scope_id = scope_of.get(item.ref)
                if scope_id is None:
                    continue
                cur = conn.execute(
                    f"UPDATE {table} SET vector = ?, embedder = ?, generation = ? "
                    f"WHERE rowid = ? AND {self._embedded_text(layer)} = ?",
                    (
                        np.asarray(vec, dtype=np.float32).tobytes(),
                        embedder,
                        gens[scope_id],
                        item.ref,
                        item.text,
                    ),
                )
                updated += cur.rowcount
        return updated

    def stored_dimension(self, embedder: str, scope_id: int | None = None) -> int | None:
        """Dimension of the vectors `embedder` made (optionally in one scope), if any."""
        for table in _TABLE.values():
            sql = f"SELECT length(vector) FROM {table} WHERE embedder = ? AND vector IS NOT NULL"
            params: list[object] = [embedder]
            if scope_id is not None:
                sql += " AND scope_id = ?"
                params.append(scope_id)
            with self._read() as conn:
                row = conn.execute(sql + " LIMIT 1", params).fetchone()
            if row is not None:
                return int(row[0]) // 4
        return None

    def drop_vectors(self, embedder: str, *, keep_dimension: int) -> int:
        """Forget `embedder`'s vectors of another dimension; those rows wait for new ones.

        Used when an embedder with an unchanged identity starts returning vectors of another
        dimension (its endpoint or settings changed). Returns how many rows were reset.
        """
        reset = 0
        with self._write() as conn:
            for table in _TABLE.values():
                scope_ids = [
                    int(r[0])
                    for r in conn.execute(
                        f"SELECT DISTINCT scope_id FROM {table} "
                        "WHERE embedder = ? AND length(vector) != ?",
                        (embedder, keep_dimension * 4),
                    )
                ]
                for scope_id in scope_ids:
                    gen = self._bump(conn, scope_id)
                    cur = conn.execute(
                        f"UPDATE {table} SET vector = NULL, embedder = NULL, generation = ? "
                        "WHERE scope_id = ? AND embedder = ? AND length(vector) != ?",
                        (gen, scope_id, embedder, keep_dimension * 4),
                    )
                    reset += cur.rowcount
        return reset
