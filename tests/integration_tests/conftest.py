"""Fixtures of the integration tests: a real PostgreSQL server, and the sockets it needs.

These tests start real servers (PostgreSQL, a local HTTP server for the real `ChatOpenAI` and
`ChatAnthropic` clients) or run real clients. They run with the same socket rules as the unit
tests (`--disable-socket --allow-unix-socket`): the throw-away PostgreSQL listens on a unix
socket, the local HTTP server's tests say `@pytest.mark.allow_hosts(["127.0.0.1"])`, and the
tests that use `$TDAI_TEST_POSTGRES_URL` get exactly its TCP host (below); nothing else is opened.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

POSTGRES_URL_ENV = "TDAI_TEST_POSTGRES_URL"
"""A server for the PostgreSQL tests (a superuser URL: each test creates its own database);
without it the session starts a throw-away PostgreSQL 16 + pgvector from the pgserver wheel."""


def postgres_tcp_hosts(url: str | None) -> list[str]:
    """The TCP hosts a PostgreSQL URL (or key=value string) connects to; none for unix sockets.

    Sockets are disabled in the unit tests (pytest-socket). psycopg resolves a host name in
    Python before libpq connects, so a test server reached over TCP needs its host allowed.
    """
    if not url:
        return []
    from psycopg.conninfo import conninfo_to_dict

    hosts = str(conninfo_to_dict(url).get("host") or "")
    # an empty host, a directory or an abstract socket name (`@...`) is a unix socket
    return [h for h in hosts.split(",") if h and not h.startswith(("/", "@"))]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Allow exactly the host of `$TDAI_TEST_POSTGRES_URL` to the tests that use that server."""
    hosts = postgres_tcp_hosts(os.environ.get(POSTGRES_URL_ENV))
    if not hosts:
        return
    for item in items:
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.allow_hosts(hosts))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """URL of a PostgreSQL server with pgvector for this test session.

    Never skipped: when no server can be started the tests fail with the reason.
    """
    external = os.environ.get(POSTGRES_URL_ENV)
    if external:
        yield external
        return
    from langchain_tdai_recall.testing.postgres import TemporaryPostgres

    with TemporaryPostgres() as server:
        yield server.url()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """URL of a fresh, empty database on the session's server (dropped afterwards)."""
    import psycopg

    name = f"tdai_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_database(postgres_server, name)
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _with_database(url: str, name: str) -> str:
    """`url` naming database `name` instead of its own (URL or key=value form)."""
    if "://" not in url:
        return f"{url} dbname={name}"
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))
