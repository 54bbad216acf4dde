"""Memory metadata, expiry, sweep and search filters on the local stores (issue 16).

The same checks run on PostgreSQL in `tests/integration_tests/stores/test_lifecycle_postgres.py`.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index import snapshot as _snapshot
from langchain_tdai_recall.stores.local.store import INDEX_CACHE_DIRNAME
from langchain_tdai_recall.testing import HashEmbeddings
from tests import lifecycle_cases as cases


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


def test_default_ttl_applies_to_writes_without_an_expiry() -> None:
    config = {"store": {"default_ttl_seconds": 60}}
    with TdaiMemory.open(None, embeddings=None, config=config) as mem:
        rec = mem.add_memory("Short-lived.")
        kept = mem.add_memory("Fixed.", expires_at="2099-01-01T00:00:00Z")
        assert rec.expires_at is not None and rec.expires_at > rec.updated_at
        assert kept.expires_at == "2099-01-01T00:00:00.000Z"


def test_default_ttl_spares_records_that_say_they_never_expire() -> None:
    """The default TTL (and a call's `ttl`) only fill an expiry nobody stated: a mapping with
    `"expires_at": None` and a `MemoryRecord` copied from another store stay permanent."""
    with TdaiMemory.open(None, embeddings=None) as source:
        permanent = source.add_memory("Copied from a store without TTL.")
    config = {"store": {"default_ttl_seconds": 60}}
    with TdaiMemory.open(None, embeddings=None, config=config) as mem:
        defaulted = mem.add_memory("Said nothing about expiry.")
        assert defaulted.expires_at is not None
        written = mem.add_memories(
            [
                {"id": "never", "content": "Restored without expiry.", "expires_at": None},
                {"id": "unsaid", "content": "Restored, expiry unsaid."},
                permanent,
            ]
        )
        assert [r.expires_at is None for r in written] == [True, False, True]
        (given,) = mem.add_memories([{"content": "Never, despite ttl.", "expires_at": None}], ttl=5)
        assert given.expires_at is None
        assert mem.get_memory("never") is not None
        assert mem.get_memory(permanent.id) is not None


def test_the_background_sweep_runs_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with TdaiMemory.open(path, embeddings=None) as mem:
        mem.add_memory("Expired already.", expires_at=cases.PAST)
        mem.add_memory("Still here.")
    with TdaiMemory.open(path, embeddings=None) as mem:
        deadline = time.monotonic() + 5
        while mem._store.expired_memories("9999", limit=10) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mem.stats().memories == 1
        assert mem._sweeper is not None and mem._sweeper.swept == 1


def _downgrade_to_schema_4(db: Path) -> None:
    """Make a current store look like one written before issue 16 (schema 4)."""
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP INDEX memories_expiry; ALTER TABLE memories DROP COLUMN expires_at; "
        "ALTER TABLE memories DROP COLUMN metadata; PRAGMA user_version=4;"
    )
    conn.close()


def test_an_old_store_opens_read_only_and_migrates(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with TdaiMemory.open(path, embeddings=None) as mem:
        old = mem.add_memory("Written before metadata existed.", priority=80)
    db = path / "memory.sqlite3"
    _downgrade_to_schema_4(db)
    with TdaiMemory.open(path, embeddings=None, read_only=True) as mem:
        got = mem.get_memory(old.id)
        assert got is not None and (got.metadata, got.expires_at) == ({}, None)
        assert [h.id for h in mem.search_memories("metadata existed")] == [old.id]
    with TdaiMemory.open(path, embeddings=None) as mem:
        assert mem._store.schema_version() == 5
        got = mem.get_memory(old.id)
        assert got is not None and (got.metadata, got.expires_at) == ({}, None)
        new = mem.add_memory("New.", metadata={"a": 1}, expires_at=cases.PAST)
        assert mem.get_memory(new.id) is None
        cases.sweep_all(mem)


def test_the_index_snapshot_keeps_expiry_and_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_snapshot, "SNAPSHOT_MIN_ROWS", 5)
    path = tmp_path / "store"
    soon = time.time() + 1.5
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=16)) as mem:
        for i in range(10):
            mem.add_memory(f"Plain memory number {i} about gardening.")
        mem.add_memory("Gardening gloves are in the shed.", id="meta", metadata={"room": "shed"})
        mem.add_memory(
            "Gardening shears are borrowed.",
            id="soon",
            expires_at=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(soon + 1)),
        )
        assert {"meta", "soon"} <= {h.id for h in mem.search_memories("gardening", limit=20)}
    assert list((path / INDEX_CACHE_DIRNAME).glob("*.tdxs"))
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=16)) as mem:
        index = mem._store.index(mem.scope(), "l1")
        assert index is not None and len(index.extras) == 2
        hits = mem.search_memories("gardening", metadata={"room": "shed"})
        assert [h.id for h in hits] == ["meta"]
        time.sleep(max(soon + 1 - time.time(), 0) + 0.1)
        assert "soon" not in {h.id for h in mem.search_memories("gardening", limit=20)}


@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:59:59-12:00",
        "0001-01-01T00:00:00+14:00",
        dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    ],
)
def test_an_expiry_outside_the_calendar_in_utc_is_a_config_error(value: object) -> None:
    """An expiry that has no UTC time (it falls past year 9999 or before year 1) is refused
    with the field and the value named, on `add_memory` and in `add_memories` records."""
    with TdaiMemory.open(None, embeddings=None) as mem:
        with pytest.raises(ConfigError, match="expires_at") as caught:
            mem.add_memory("Far away.", expires_at=value)  # type: ignore[arg-type]
        assert str(value)[:4] in str(caught.value)
        with pytest.raises(ConfigError, match="expires_at"):
            mem.add_memories([{"content": "Far away.", "expires_at": value}])
        assert mem.stats().memories == 0
