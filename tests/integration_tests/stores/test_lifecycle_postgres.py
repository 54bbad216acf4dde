"""Memory metadata, expiry, sweep and filters on PostgreSQL (issue 16): `tests.lifecycle_cases`."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from langchain_tdai_recall import TdaiMemory
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


def test_expired_memories_are_swept(memory: TdaiMemory) -> None:
    cases.check_expired_memories_are_swept(memory)


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
        assert mem.sweep_expired() == 1
        assert [r.id for r in mem.list_memories()] == [old.id]
