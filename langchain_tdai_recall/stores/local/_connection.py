"""The local store's SQLite connections: opening, migrating, locking and error translation.

A file database has two connections: one for reads, one for write transactions, so a write that
waits for another process's lock never holds up searches in this process. The write connection's
lock lets a caller's thread go before the package's background workers (`_runtime.foreground`),
so a caller waits at most for the transaction in progress. Writes are explicit `BEGIN IMMEDIATE`
transactions in WAL mode. Opening checks the file (empty, damaged, foreign or newer), creates a
new database atomically, and applies the schema's migrations (`stores.local._schema`). Every
`sqlite3` error is translated at this boundary into the package's `StoreError` family, naming the
file and what to do about it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Final, NoReturn

from langchain_tdai_recall._runtime.foreground import ForegroundFirstLock
from langchain_tdai_recall.errors import (
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.stores.local._schema import (
    DB_FILENAME,
    FORMATION_SCHEMA,
    LIFECYCLE_SCHEMA,
    MIGRATIONS,
    OLD_MEMORIES_VIEW,
    OUR_TABLES,
)
from langchain_tdai_recall.text.fingerprint import content_fingerprint

__all__ = ["BUSY_TIMEOUT_MS", "SqliteConnection"]

BUSY_TIMEOUT_MS: Final = 10_000
"""How long a write waits for another process's write lock before `StoreWriteError`."""

# SQLite primary result codes (`sqlite3.Error.sqlite_errorcode & 0xFF`)
_BUSY: Final = 5
_LOCKED: Final = 6
_READONLY: Final = 8
_IOERR: Final = 10
_CORRUPT: Final = 11
_FULL: Final = 13
_CANTOPEN: Final = 14
_NOTADB: Final = 26


class SqliteConnection:
    """The store's SQLite connections. Thread-safe: each connection is serialised by its lock.

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
        # callers first on a file's writes; the in-memory database (tests, notebooks) has one
        # connection for reads and writes, which background work must not wait behind callers
        self._write_lock: ForegroundFirstLock | threading.RLock = (
            ForegroundFirstLock() if directory is not None else threading.RLock()
        )
        self._read_lock: ForegroundFirstLock | threading.RLock = threading.RLock()
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._closed = False
        self._schema = len(MIGRATIONS)
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
                    for number, script in enumerate(MIGRATIONS, start=1):
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
        if self._schema < LIFECYCLE_SCHEMA:
            with self._guard("open"):
                conn.execute(OLD_MEMORIES_VIEW)
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, migrate: bool) -> int:
        with self._guard("open"):
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            tables = {
                str(r[0])
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        if version > len(MIGRATIONS):
            msg = (
                f"the memory database {self._where} was written by a newer version "
                f"(schema {version}, this version knows {len(MIGRATIONS)}); upgrade "
                "langchain-tdai-recall"
            )
            raise StoreError(msg)
        if (version == 0 and tables - {"sqlite_sequence"}) or (
            version > 0 and not tables >= OUR_TABLES
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
            for number in range(version, len(MIGRATIONS)):
                with self._write() as tx:
                    (current,) = tx.execute("PRAGMA user_version").fetchone()
                    if current > number:
                        continue  # another process migrated meanwhile
                    for statement in MIGRATIONS[number].split(";"):
                        if statement.strip():
                            tx.execute(statement)
                    tx.execute(f"PRAGMA user_version={number + 1}")
            self._schema = len(MIGRATIONS)

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
        """A write transaction for formation's state (`stores.local._formation`).

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
        return self._schema >= FORMATION_SCHEMA

    def close(self) -> None:
        """Close the connections (idempotent); later calls raise `StoreClosedError`."""
        self._closed = True
        with self._write_lock, self._read_lock:
            for conn in {id(c): c for c in (self._writer, self._reader) if c is not None}.values():
                with suppress(sqlite3.Error):
                    conn.close()
            self._writer = self._reader = None
