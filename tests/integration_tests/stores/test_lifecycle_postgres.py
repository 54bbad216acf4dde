"""Memory metadata, expiry, sweep and filters on PostgreSQL (issue 16): `tests.lifecycle_cases`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores.local.store import MemoryStore
from langchain_tdai_recall.stores.migrate import copy_store
from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
from langchain_tdai_recall.testing import HashEmbeddings
from tests import lifecycle_cases as cases


@pytest.fixture
def memory(postgres_url: str) -> Iterator[TdaiMemory]:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=32)) as mem:
        yield mem


def test_expired_memories_are_never_read(memory: TdaiMemory) -> None:
    cases.check_expired_memories_are_never_read(memory)


def test_a_memory_expiring_between_recalls_leaves_every_surface(memory: TdaiMemory) -> None:
    cases.check_memory_expires_while_cached(memory)


def test_pages_skip_unswept_expired_memories(memory: TdaiMemory) -> None:
    cases.check_pages_skip_unswept_expired_memories(memory)


def test_expired_memories_are_swept(memory: TdaiMemory) -> None:
    cases.check_expired_memories_are_swept(memory)


def test_stats_count_only_unexpired_memories(memory: TdaiMemory) -> None:
    cases.check_stats_count_only_unexpired(memory)


def test_ttl_sets_the_expiry(memory: TdaiMemory) -> None:
    cases.check_ttl_and_default_ttl(memory)


def test_metadata_and_time_filters(memory: TdaiMemory) -> None:
    cases.check_metadata_and_filters(memory)


def test_metadata_is_validated(memory: TdaiMemory) -> None:
    cases.check_metadata_is_validated(memory)


def test_jsonl_round_trip_keeps_metadata_and_expiry(memory: TdaiMemory) -> None:
    with TdaiMemory.open(None, embeddings=None) as other:
        cases.check_jsonl_round_trip(memory, other)


def test_an_old_store_gains_the_columns(postgres_url: str) -> None:
    with TdaiMemory.open(postgres_url, embeddings=None) as mem:
        old = mem.add_memory("Written before metadata existed.")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP INDEX tdai_memories_expiry")
        conn.execute("ALTER TABLE tdai_memories DROP COLUMN metadata, DROP COLUMN expires_at")
        conn.execute("DELETE FROM tdai_migrations WHERE version = 3")
    with TdaiMemory.open(postgres_url, embeddings=None) as mem:
        assert mem._store.schema_version() == 3
        got = mem.get_memory(old.id)
        assert got is not None and (got.metadata, got.expires_at) == ({}, None)
        mem.add_memory("Gone.", metadata={"a": 1}, expires_at=cases.PAST)
        cases.sweep_all(mem)
        assert [r.id for r in mem.list_memories()] == [old.id]


def test_copy_store_keeps_metadata_and_expiry(tmp_path: Path, postgres_url: str) -> None:
    with TdaiMemory.open(tmp_path / "a", embeddings=None) as mem:
        rec = mem.add_memory("Copied with its fields.", metadata={"k": [1, "x"]}, ttl=3600)
    source = MemoryStore(tmp_path / "a", read_only=True)
    target = PostgresMemoryStore(postgres_url)
    copy_store(source, target, page=2)
    back = MemoryStore(tmp_path / "b")
    copy_store(target, back, page=2)
    source.close()
    for store in (target, back):
        with TdaiMemory.open(store, embeddings=None) as mem:
            got = mem.get_memory(rec.id)
            assert got is not None
            assert (got.metadata, got.expires_at) == ({"k": [1, "x"]}, rec.expires_at)
