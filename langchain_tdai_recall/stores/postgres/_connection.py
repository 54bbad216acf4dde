"""Connections to PostgreSQL: the pool, time bounds on every call, and error translation.

Every call the backend makes runs on a pooled connection inside `Database.connection()` (or
`transaction()`), which bounds it in time three ways:

- waiting for a connection: the pool's `timeout` (an unreachable server or an exhausted pool);
- on the server: `statement_timeout` and `lock_timeout` set for each connection, so a slow
  query or a wait for another writer's lock is cancelled by the server itself;
- a watchdog thread for a server that does not answer at all (stopped, frozen, a network
  partition): `statement_timeout` cannot fire there and the client would wait forever on its
  socket, so when a call passes its deadline the watchdog shuts the connection's socket down. The
  call fails at once with `StoreError` and the pool replaces the connection.

A pooled connection is checked before each use without a round trip: an idle connection has
nothing to read unless the server closed it (a restart sends a termination
message or closes the socket), so a readable socket means a dead connection, which is discarded.

Errors from psycopg are translated here, and only here, into the package's `StoreError` family.
Messages name the server by `redact(url)`: user, host, port and database, never a password.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import os
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn
from urllib.parse import unquote, urlsplit

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import (
    MissingDependencyError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo
    from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    _PACKAGE = "psycopg"
    raise MissingDependencyError(_PACKAGE, extra="postgres") from exc

__all__ = ["Database", "redact"]

_TRANSIENT: Final = (pg_errors.DiskFull, pg_errors.OutOfMemory, pg_errors.TooManyConnections)
"""Server conditions that may pass: the call wrote nothing and can be retried."""

logger = logging.getLogger(__name__)

_MIN_WAIT_S: Final = 0.05


def redact(url: str) -> str:
    """A printable form of a PostgreSQL URL or conninfo string without any secret.

    Only the user, host, port and database are kept: passwords (in the authority part or as a
    `password=` parameter) and every other parameter are dropped.
    """
    text = url.strip()
    if "://" in text:
        try:
            parts = urlsplit(text)
            host = parts.hostname or ""
            port = parts.port
            user = unquote(parts.username) if parts.username else ""
        except ValueError:
            return "postgresql://<unparsable URL>"
        query = dict(item.split("=", 1) for item in parts.query.split("&") if "=" in item)
        if not host and "host" in query:
            host = unquote(query["host"])
        if port is None and "port" in query:
            port = int(query["port"]) if query["port"].isdigit() else None
        database = unquote(parts.path.lstrip("/"))
        scheme = parts.scheme
    else:
        try:
            pairs = psycopg.conninfo.conninfo_to_dict(text)
        except psycopg.ProgrammingError:
            return "<unparsable connection string>"
        host = str(pairs.get("host", ""))
        port = int(str(pairs["port"])) if str(pairs.get("port", "")).isdigit() else None
        user = str(pairs.get("user", ""))
        database = str(pairs.get("dbname", ""))
        scheme = "postgresql"
    who = f"{user}@" if user else ""
    if host.startswith("/"):  # a unix socket directory
        return f"{scheme}://{who}/{database}?host={host}"
    where = f"[{host}]" if ":" in host else host
    return f"{scheme}://{who}{where}{':' + str(port) if port else ''}/{database}"


# -- vectors --------------------------------------------------------------------------------------


class _VectorLoader(Loader):
    """pgvector's binary `vector` as little-endian float32 bytes (the form `LayerIndex` reads)."""

    format = Format.BINARY

    def load(self, data: Any) -> bytes:
        (dim,) = struct.unpack_from(">H", data)
        raw = np.frombuffer(data, dtype=">f4", count=dim, offset=4)
        return raw.astype("<f4").tobytes()


class _VectorDumper(Dumper):
    """A float32 numpy vector as pgvector's binary `vector` (oid set per database)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        vector = np.asarray(obj, dtype=">f4").reshape(-1)
        return struct.pack(">HH", vector.shape[0], 0) + vector.tobytes()


def vector_param(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """A vector as a query parameter (dumped as pgvector's `vector`)."""
    return np.ascontiguousarray(vector, dtype=np.float32)


# -- the watchdog ---------------------------------------------------------------------------------


@dataclass(order=True)
class _Alarm:
    deadline: float
    token: int
    conn: psycopg.Connection[Any] = field(compare=False)
    fired: bool = field(default=False, compare=False)
    done: bool = field(default=False, compare=False)


class _Watchdog:
    """Shuts down the socket of a connection whose call passed its deadline."""

    def __init__(self, name: str) -> None:
        self._heap: list[_Alarm] = []
        self._cond = threading.Condition()
        self._tokens = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def arm(self, conn: psycopg.Connection[Any], deadline: float) -> _Alarm:
        alarm = _Alarm(deadline, next(self._tokens), conn)
        with self._cond:
            heapq.heappush(self._heap, alarm)
            if self._heap[0] is alarm:
                self._cond.notify()
        return alarm

    def disarm(self, alarm: _Alarm) -> bool:
        """Stop watching; returns whether the alarm had fired."""
        with self._cond:
            alarm.done = True
            return alarm.fired

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    while self._heap and self._heap[0].done:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0].deadline - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._stopped:
                    return
                alarm = heapq.heappop(self._heap)
                alarm.fired = True
            _sever(alarm.conn)


def _sever(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket down so that a call blocked on it fails at once."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return
    # `socket.SocketType` is the bare socket object without the Python-level wrapper class: it
    # only gives shutdown(2) a handle on a duplicate of libpq's descriptor and opens no
    # connection, so tools that guard `socket.socket` (pytest-socket) have nothing to block.
    try:
        sock = socket.SocketType(fileno=os.dup(fd))
    except OSError:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    logger.warning("a PostgreSQL call passed its deadline; its connection was cut")


def _looks_dead(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection was closed by the server (no round trip needed)."""
    if conn.closed or conn.broken:
        return True
    try:
        fd = conn.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)


# -- the database ---------------------------------------------------------------------------------


class Database:
    """A connection pool to one PostgreSQL database, with bounded calls.

    Args:
        url: A `postgresql://` URL or a libpq connection string.
        timeout_s: Default bound of one call (pool wait, statement, lock wait and watchdog).
        min_size: Connections kept open.
        max_size: Most connections open at once.
        application_name: Reported to the server (`pg_stat_activity`).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        min_size: int = 1,
        max_size: int = 8,
        application_name: str = "langchain-tdai-recall",
    ) -> None:
        self.display = redact(url)
        self._url = url
        self._secrets = _secrets(url)
        problem = ""
        try:  # libpq's own parser, before anything connects (its errors quote the whole URL)
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            problem = self._scrub(_first_line(exc))
        if problem:  # raised outside the handler: no exception with the URL in its context
            msg = (
                f"the PostgreSQL URL {self.display} cannot be parsed ({problem}). Fix the URL: "
                "postgresql://user:password@host:port/database (an IPv6 host in [brackets])"
            )
            raise StoreError(msg)
        self.timeout_s = timeout_s
        self._closed = False
        self._vector_type: TypeInfo | None = None
        self._watchdog = _Watchdog(f"tdai-pg-watchdog-{id(self):x}")
        timeout_ms = max(int(timeout_s * 1000), 1)
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(math.ceil(timeout_s), 2),
            "application_name": application_name,
            "options": _merge_options(
                url,
                {
                    "statement_timeout": str(timeout_ms),
                    # shorter than the statement's, so that a wait for another writer is
                    # reported as such (StoreWriteError: nothing written, retry)
                    "lock_timeout": str(max(timeout_ms * 4 // 5, 1)),
                    "idle_in_transaction_session_timeout": str(max(timeout_ms * 4, 60_000)),
                },
            ),
        }
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max(max_size, min_size),
            kwargs=self._kwargs,
            configure=self._configure,
            open=False,
            timeout=timeout_s,
            max_idle=300,
            reconnect_timeout=max(timeout_s * 2, 30),
            name=f"tdai-{id(self):x}",
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the pool and wait (a bounded time) for its first connection."""
        try:
            self._pool.open(wait=True, timeout=self.timeout_s)
        except PoolTimeout as exc:
            self.close()
            self._unreachable(exc)
        except BaseException:
            self.close()
            raise

    def _unreachable(self, exc: BaseException) -> NoReturn:
        reason = ""
        try:  # one direct attempt, for the server's own words (bad password, no database, ...)
            psycopg.connect(self._url, **{**self._kwargs, "connect_timeout": 2}).close()
        except psycopg.Error as direct:
            reason = f": {self._scrub(_first_line(direct))}"
        except Exception as direct:  # only used for the message
            reason = f": {type(direct).__name__}"
        msg = (
            f"cannot connect to PostgreSQL at {self.display} within {self.timeout_s:g} s"
            f"{reason}. Check that the server runs and the URL, user and password are right"
        )
        raise StoreError(msg) from exc

    def direct(self) -> psycopg.Connection[Any]:
        """A connection outside the pool (schema setup), with the same settings."""
        try:
            return psycopg.connect(self._url, **self._kwargs)
        except psycopg.Error as exc:
            reason = self._scrub(_first_line(exc))
        # raised outside the handler: the driver's exception may quote the whole URL
        msg = (
            f"cannot connect to PostgreSQL at {self.display}: {reason}. Check that the server "
            "runs and the URL, user and password are right"
        )
        raise StoreError(msg)

    def _scrub(self, text: str) -> str:
        """`text` (a driver's message) with the URL and its password replaced."""
        text = text.replace(self._url.strip(), self.display)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def set_vector_type(self, info: TypeInfo | None) -> None:
        """Register pgvector's `vector` type (found by setup) on every pooled connection."""
        self._vector_type = info

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        info = self._vector_type
        if info is not None:
            info.register(conn)
            conn.adapters.register_loader(info.oid, _VectorLoader)
            dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
            conn.adapters.register_dumper(np.ndarray, dumper)

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    def close(self) -> None:
        """Close the pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._watchdog.stop()
        with contextlib.suppress(Exception):
            self._pool.close(timeout=1.0)

    # -- bounded calls --------------------------------------------------------------------------

    def _checkout(self, deadline: float, action: str) -> psycopg.Connection[Any]:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._timed_out(action, None)
            try:
                conn = self._pool.getconn(timeout=max(left, _MIN_WAIT_S))
            except PoolTimeout as exc:
                msg = (
                    f"no connection to PostgreSQL at {self.display} within "
                    f"{max(left, 0):.1f} s while trying to {action} (server unreachable, or "
                    "every pooled connection busy); nothing was changed. Retry, or raise the "
                    "pool size"
                )
                raise StoreError(msg) from exc
            except PoolClosed as exc:
                msg = "the memory store is closed; open a new one with TdaiMemory.open(...)"
                raise StoreClosedError(msg) from exc
            if _looks_dead(conn):
                logger.info("discarding a pooled PostgreSQL connection the server closed")
                conn.close()
                self._pool.putconn(conn)
                continue
            return conn

    @contextlib.contextmanager
    def connection(
        self, action: str, *, timeout_s: float | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for one call, bounded by `timeout_s` (default: the store's)."""
        if self._closed:
            msg = "the memory store is closed; open a new one with TdaiMemory.open(...)"
            raise StoreClosedError(msg)
        budget = self.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        conn = self._checkout(started + budget, action)
        # the server's own statement and lock timeouts fire first (they keep the connection);
        # the watchdog is for a server that cannot answer at all
        alarm = self._watchdog.arm(conn, started + budget + min(max(budget / 4, 0.25), 2.0))
        fired = False
        try:
            try:
                if timeout_s is not None and timeout_s > self.timeout_s:
                    conn.execute(f"SET statement_timeout = {int(budget * 1000)}")
                yield conn
            except psycopg.Error as exc:
                fired = self._watchdog.disarm(alarm)
                if fired:
                    self._timed_out(action, exc, budget)
                self._translate(exc, action)
            finally:
                fired = self._watchdog.disarm(alarm) or fired
                if timeout_s is not None and timeout_s > self.timeout_s and not conn.broken:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("RESET statement_timeout")
        finally:
            self._pool.putconn(conn)

    @contextlib.contextmanager
    def transaction(
        self, action: str, *, timeout_s: float | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction (committed on success)."""
        with self.connection(action, timeout_s=timeout_s) as conn, conn.transaction():
            yield conn

    def read(self, action: str, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run `work(conn)` on a pooled connection (no transaction)."""
        with self.connection(action) as conn:
            return work(conn)

    # -- errors ---------------------------------------------------------------------------------

    def _timed_out(
        self, action: str, exc: BaseException | None, budget: float | None = None
    ) -> NoReturn:
        seconds = self.timeout_s if budget is None else budget
        msg = (
            f"PostgreSQL at {self.display} did not answer within {seconds:g} s while trying to "
            f"{action}; the connection was abandoned (is the server overloaded, stopped or "
            "unreachable?). A write may or may not have been applied; retry"
        )
        raise StoreError(msg) from exc

    def _translate(self, exc: psycopg.Error, action: str) -> NoReturn:
        where = self.display
        detail = self._scrub(_first_line(exc))
        if isinstance(exc, pg_errors.QueryCanceled):
            msg = (
                f"PostgreSQL at {where} took longer than {self.timeout_s:g} s to {action} and "
                "cancelled the statement; nothing was changed by it. Retry, or raise "
                "store.timeout_ms"
            )
            raise StoreError(msg) from exc
        if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.DeadlockDetected):
            msg = (
                f"another writer held a lock in PostgreSQL at {where} for too long while trying "
                f"to {action}; nothing was written by this call. Retry"
            )
            raise StoreWriteError(msg) from exc
        if isinstance(exc, pg_errors.ReadOnlySqlTransaction | pg_errors.InsufficientPrivilege):
            msg = (
                f"PostgreSQL at {where} refused to {action} ({detail}); open the store with "
                "read_only=True to search it, or grant the user write access"
            )
            raise StoreReadOnlyError(msg) from exc
        if isinstance(exc, _TRANSIENT):
            msg = f"PostgreSQL at {where} could not {action} ({detail}); nothing was written"
            raise StoreWriteError(msg) from exc
        if isinstance(exc, pg_errors.UndefinedTable):
            msg = (
                f"PostgreSQL at {where} holds no memory store tables ({detail}); open it once "
                "without read_only=True to create them"
            )
            raise StoreError(msg) from exc
        if isinstance(exc, psycopg.OperationalError):
            msg = (
                f"lost the connection to PostgreSQL at {where} while trying to {action} "
                f"({detail}). A write may or may not have been applied; retry"
            )
            raise StoreError(msg) from exc
        msg = f"PostgreSQL at {where} failed to {action}: {detail}"
        raise StoreError(msg) from exc


def _secrets(url: str) -> list[str]:
    """The passwords in `url`, longest first, as written and decoded.

    Found without a full parse (the URL may be one libpq rejects): the password of the authority
    part (`scheme://user:password@...`) and any `password=` parameter.
    """
    found: list[str] = []
    authority = re.match(r"[A-Za-z][\w+.-]*://([^/?#]*)@", url.strip())
    if authority and ":" in authority.group(1):
        password = authority.group(1).split(":", 1)[1]
        found += [password, unquote(password)]
    for m in re.finditer(r"(?:^|[\s&?])password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)", url):
        value = m.group(1)
        found += [value, value.strip("'"), unquote(value)]
    return sorted({f for f in found if f}, key=len, reverse=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _merge_options(url: str, settings: dict[str, str]) -> str:
    """The libpq `options` of `url` (if any) followed by `-c name=value` for each setting."""
    existing = ""
    with contextlib.suppress(psycopg.ProgrammingError):
        existing = str(psycopg.conninfo.conninfo_to_dict(url).get("options", "") or "")
    ours = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return f"{existing} {ours}".strip()
