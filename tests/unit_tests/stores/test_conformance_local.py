"""The conformance suite on the local backend: in memory, and in a directory."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.local._schema import DB_FILENAME
from langchain_tdai_recall.stores.local._schema import MIGRATIONS as _MIGRATIONS
from langchain_tdai_recall.stores.local.store import MemoryStore
from langchain_tdai_recall.testing.conformance import (
    BackendConformance,
    BackendFactory,
    DurableBackendConformance,
)


class InMemoryFactory(BackendFactory):
    def open(self, *, read_only: bool = False) -> BaseMemoryStore:
        return MemoryStore(None, read_only=read_only)


class DirectoryFactory(BackendFactory):
    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, *, read_only: bool = False) -> BaseMemoryStore:
        return MemoryStore(self.path, read_only=read_only)

    def location(self) -> str:
        return str(self.path)

    def latest_schema(self) -> int:
        return len(_MIGRATIONS)

    def open_at_schema(self, version: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path / DB_FILENAME, isolation_level=None)
        try:
            for number, script in enumerate(_MIGRATIONS[:version], start=1):
                conn.executescript(f"BEGIN; {script}; PRAGMA user_version={number}; COMMIT;")
        finally:
            conn.close()

    def mark_newer_schema(self) -> None:
        conn = sqlite3.connect(self.path / DB_FILENAME, isolation_level=None)
        try:
            conn.execute(f"PRAGMA user_version={len(_MIGRATIONS) + 1}")
        finally:
            conn.close()


class TestInMemoryStore(BackendConformance):
    @pytest.fixture
    def factory(self) -> BackendFactory:
        return InMemoryFactory()


class TestDirectoryStore(DurableBackendConformance):
    @pytest.fixture
    def factory(self, tmp_path: Path) -> BackendFactory:
        return DirectoryFactory(tmp_path / "store")
