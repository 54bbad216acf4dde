"""The unit tests run with sockets disabled; the few that need one get a narrow allowance.

`pytest --disable-socket --allow-unix-socket` (pyproject `addopts`, through pytest-socket): a test
can open unix sockets (the throw-away PostgreSQL server, the notebook kernels) but no TCP or UDP
socket and no DNS lookup. A test that talks to a local server says so with
`@pytest.mark.allow_hosts(["127.0.0.1"])` (the real-client formation tests), and the tests that
use `$TDAI_TEST_POSTGRES_URL` get exactly its host (`tests/integration_tests/conftest.py`).
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from pytest_socket import SocketBlockedError, SocketConnectBlockedError

from tests.integration_tests.conftest import (
    POSTGRES_URL_ENV,
    postgres_tcp_hosts,
    pytest_collection_modifyitems,
)


@contextmanager
def _refused(error: type[Exception]) -> Iterator[None]:
    # pytest-socket warns before it raises; the suite turns warnings into errors
    with pytest.raises(error), pytest.warns(UserWarning, match="A test tried to use socket"):
        yield


def test_a_tcp_socket_cannot_be_created() -> None:
    with _refused(SocketBlockedError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with _refused(SocketBlockedError):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_no_host_name_is_resolved_and_no_url_is_fetched() -> None:
    with _refused(SocketBlockedError):
        socket.getaddrinfo("example.com", 443)
    with _refused(SocketBlockedError):
        urllib.request.urlopen("http://example.com/", timeout=1)


def test_unix_sockets_are_allowed() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        left.sendall(b"ping")
        assert right.recv(4) == b"ping"


@contextmanager
def _loopback_server() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        thread.join(timeout=5)
        server.close()


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_an_allowance_admits_exactly_its_host() -> None:
    with _loopback_server() as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            assert conn.recv(5) == b"hello"
        with _refused(SocketConnectBlockedError):
            socket.create_connection(("127.0.0.2", port), timeout=1)


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        (None, []),
        ("postgresql://app:secret@db.internal:5433/memory", ["db.internal"]),
        ("postgresql://app@127.0.0.1/memory", ["127.0.0.1"]),
        ("host=pg1,pg2 port=5432 user=app", ["pg1", "pg2"]),
        ("postgresql://postgres@/postgres?host=/tmp/pgserver", []),
        ("host=/var/run/postgresql dbname=x", []),
        ("postgresql:///memory", []),
    ],
)
def test_only_a_tcp_postgres_url_gets_an_allowance(url: str | None, hosts: list[str]) -> None:
    assert postgres_tcp_hosts(url) == hosts


def test_the_allowance_goes_to_the_postgres_tests_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def item(*fixtures: str) -> Any:
        marks: list[pytest.MarkDecorator] = []
        return SimpleNamespace(fixturenames=list(fixtures), marks=marks, add_marker=marks.append)

    uses_server, uses_database, other = (
        item("postgres_server"),
        item("x", "postgres_server"),
        item(),
    )
    monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql://app:secret@db.internal/memory")
    pytest_collection_modifyitems([uses_server, uses_database, other])
    for allowed in (uses_server, uses_database):
        assert [(m.name, m.args) for m in allowed.marks] == [("allow_hosts", (["db.internal"],))]
    assert other.marks == []

    monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql://postgres@/postgres?host=/tmp/pg")
    pytest_collection_modifyitems([fresh := item("postgres_server")])
    assert fresh.marks == []
