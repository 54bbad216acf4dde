"""The conformance suite on the PostgreSQL backend (a real server: see `postgres_server`)."""

from __future__ import annotations

import psycopg
import pytest

from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.postgres import _schema
from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
from langchain_tdai_recall.testing.conformance import BackendFactory, DurableBackendConformance


class PostgresFactory(BackendFactory):
    def __init__(self, url: str) -> None:
        self.url = url

    def open(self, *, read_only: bool = False) -> BaseMemoryStore:
        return PostgresMemoryStore(self.url, read_only=read_only, pool_size=4)

    def location(self) -> str:
        return self.url

    def latest_schema(self) -> int:
        return len(_schema.MIGRATIONS)

    def open_at_schema(self, version: int) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            _schema.setup(conn, "test", upto=version)

    def mark_newer_schema(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO tdai_migrations (version) VALUES (%s)", (len(_schema.MIGRATIONS) + 1,)
            )


class TestPostgresStore(DurableBackendConformance):
    @pytest.fixture
    def factory(self, postgres_url: str) -> BackendFactory:
        return PostgresFactory(postgres_url)
