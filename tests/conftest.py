"""Shared fixtures: stores over both backends with the deterministic test embedder."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings


@pytest.fixture(params=["memory", "directory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every store test runs against the in-memory and the directory store."""
    return str(request.param)


@pytest.fixture
def memory(store_kind: str, tmp_path: Path) -> Iterator[TdaiMemory]:
    """A store with the hash embedder, in memory or in a temporary directory."""
    path = None if store_kind == "memory" else tmp_path / "store"
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as mem:
        yield mem


@pytest.fixture
def keyword_memory() -> Iterator[TdaiMemory]:
    """An in-memory keyword-only store."""
    with TdaiMemory.open(None, embeddings=None) as mem:
        yield mem


# -- PostgreSQL ------------------------------------------------------------------------------------

POSTGRES_URL_ENV = "TDAI_TEST_POSTGRES_URL"
"""A server for the PostgreSQL tests (a superuser URL: each test creates its own database);
without it the session starts a throw-away PostgreSQL 16 + pgvector from the pgserver wheel."""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """URL of a PostgreSQL server with pgvector for this test session.

    Never skipped: when no server can be started the tests fail with the reason.
    """
    external = os.environ.get(POSTGRES_URL_ENV)
    if external:
        yield external
        return
    from langchain_tdai_recall.stores.postgres.testserver import TemporaryPostgres

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
