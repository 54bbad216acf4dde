"""Memory metadata, expiry and filters (issue 16), as checks run on every backend.

Each `check_*` takes an open `TdaiMemory`; `tests/unit_tests/memory/test_lifecycle.py` runs them
on the in-memory and directory stores, `tests/integration_tests/stores/test_lifecycle_postgres.py`
on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import RecallResult, iso_utc

PAST = "2001-01-01T00:00:00Z"


def sweep_all(mem: TdaiMemory) -> None:
    """Sweep now and check no expired memory is left stored.

    The background sweep (at open, then periodically) may have deleted some already, so the
    count an explicit sweep returns is not asserted; what is left afterwards is.
    """
    mem.sweep_expired()
    now = iso_utc()
    assert mem._store.expired_memories(now, limit=100) == []


def _shown(result: RecallResult | None) -> str:
    """Everything a recall put in front of the model."""
    if result is None:
        return ""
    return f"{result.prepend_context or ''}\n{result.append_system_context or ''}"


def check_expired_memories_are_never_read(mem: TdaiMemory) -> None:
    """Expired memories: not searched, recalled, pinned, in the profile, listed or got."""
    live = mem.add_memory("The user drinks oolong tea every morning.", type="persona", priority=95)
    gone = [
        mem.add_memory(
            "The user drinks jasmine tea every morning.",
            type="persona",
            priority=95,
            expires_at=PAST,
        ),
        mem.add_memory("The user likes green tea with lunch.", priority=70, expires_at=PAST),
        mem.add_memory(
            "Always answer about tea in haiku.", type="instruction", priority=-1, expires_at=PAST
        ),
        mem.add_memory("The user brewed tea on 2025-03-01.", priority=40, expires_at=PAST),
    ]
    result = mem.recall("What tea does the user drink in the morning?")
    shown = _shown(result)
    assert "oolong" in shown
    assert result is not None
    recalled = {m.id for m in result.memories} | {r.id for r in result.pinned}
    recalled |= {r.id for r in result.profile} | {r.id for r in result.standing_rules}
    assert live.id in recalled
    for rec in gone:
        assert rec.content not in shown
        assert rec.id not in recalled
        assert mem.get_memory(rec.id) is None
    hits = mem.search_memories("tea", limit=20, min_score=0)
    assert [h.id for h in hits] == [live.id]
    assert [r.id for r in mem.list_memories()] == [live.id]


def check_memory_expires_while_cached(mem: TdaiMemory) -> None:
    """A memory that expires between two recalls leaves the pinned, profile and search at once."""
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    rec = mem.add_memory(
        "The user is allergic to peanuts.", type="persona", priority=95, expires_at=soon
    )
    mem.add_memory("The user is allergic to cats.", type="persona", priority=95)
    first = mem.recall("Is the user allergic to anything?")
    assert "peanuts" in _shown(first)
    assert [h.id for h in mem.search_memories("peanuts", min_score=0)][:1] == [rec.id]
    time.sleep(max((soon - dt.datetime.now(dt.UTC)).total_seconds(), 0) + 0.1)
    second = mem.recall("Is the user allergic to anything?")
    assert "peanuts" not in _shown(second)
    assert "cats" in _shown(second)
    assert rec.id not in {h.id for h in mem.search_memories("peanuts", min_score=0)}


def check_expired_memories_are_swept(mem: TdaiMemory) -> None:
    """The sweep deletes expired memories (their index entries too) and keeps the others."""
    live = mem.add_memory("The user's dog is called Rex.")
    future = mem.add_memory("The user's cat is called Tom.", ttl=3600)
    for i in range(3):
        mem.add_memory(f"Temporary note number {i} about the dog.", expires_at=PAST)
    assert mem.stats().memories == 2  # expired memories are not counted, swept or not
    sweep_all(mem)
    assert mem.stats().memories == 2
    assert {r.id for r in mem.list_memories()} == {live.id, future.id}
    assert mem.sweep_expired() == 0
    assert {h.id for h in mem.search_memories("dog note", min_score=0)} <= {live.id, future.id}


def check_stats_count_only_unexpired(mem: TdaiMemory) -> None:
    """`stats()` (every scope, one scope, and each scope's line) counts what reads return:
    memories that expired are left out before the sweep deletes them."""
    who = {"user_id": "counted"}
    live = mem.add_memory("Counted: still valid.", **who)
    mem.add_memory("Counted: expired already.", expires_at=PAST, **who)
    mem.add_memory("Counted: also expired.", expires_at=PAST, user_id="counted", agent_id="bot")
    assert [r.id for r in mem.list_memories(**who)] == [live.id]
    one = mem.stats(**who)
    assert one.memories == 1
    assert [(s.user_id, s.memories) for s in one.scopes] == [("counted", 1)]
    everything = mem.stats()
    assert everything.memories == len(mem.list_memories(**who)) + sum(
        len(mem.list_memories(user_id=s.user_id, agent_id=s.agent_id))
        for s in everything.scopes
        if s.user_id != "counted"
    )
    counted = {s.agent_id: s.memories for s in everything.scopes if s.user_id == "counted"}
    assert counted.get(None) == 1
    assert counted.get("bot", 0) == 0
    sweep_all(mem)
    assert mem.stats(**who).memories == 1


def check_ttl_and_default_ttl(mem: TdaiMemory) -> None:
    """`ttl` sets `expires_at`; an explicit `expires_at` wins; bad values name the field."""
    before = dt.datetime.now(dt.UTC)
    rec = mem.add_memory("Parking spot 42 today.", ttl=dt.timedelta(hours=2))
    assert rec.expires_at is not None
    expiry = dt.datetime.fromisoformat(rec.expires_at)
    assert dt.timedelta(hours=2, seconds=-1) <= expiry - before < dt.timedelta(hours=2, seconds=30)
    again = mem.get_memory(rec.id)
    assert again is not None and again.expires_at == rec.expires_at
    fixed = mem.add_memory("Fixed expiry.", expires_at="2099-01-01T00:00:00+02:00", ttl=60)
    assert fixed.expires_at == "2098-12-31T22:00:00.000Z"
    with pytest.raises(ConfigError, match="ttl"):
        mem.add_memory("bad", ttl=-5)
    with pytest.raises(ConfigError, match="expires_at"):
        mem.add_memory("bad", expires_at="next tuesday")


def check_metadata_and_filters(mem: TdaiMemory) -> None:
    """Metadata is kept; search filters by metadata equality, creation and activity time."""
    a = mem.add_memory(
        "Trip to Lisbon with the family.",
        metadata={"source": "email", "trip": 1, "tags": ["travel"]},
        activity_start_time="2025-05-01",
        activity_end_time="2025-05-07",
    )
    b = mem.add_memory(
        "Trip to Porto for work.", metadata={"source": "chat"}, timestamp="2024-11-03"
    )
    c = mem.add_memory("Trip plans are always booked by the user's assistant.")
    got = mem.get_memory(a.id)
    assert got is not None and got.metadata == {"source": "email", "trip": 1, "tags": ["travel"]}

    def ids(**filters: object) -> set[str]:
        return {h.id for h in mem.search_memories("trip", limit=20, min_score=0, **filters)}

    assert ids() == {a.id, b.id, c.id}
    assert ids(metadata={"source": "email"}) == {a.id}
    assert ids(metadata={"source": "email", "trip": 1}) == {a.id}
    assert ids(metadata={"trip": True}) == set()  # JSON equality: true is not 1
    assert ids(metadata={"source": "fax"}) == set()
    assert ids(active_after="2025-01-01") == {a.id}
    assert ids(active_before="2024-12-31") == {b.id}
    assert ids(active_after="2025-05-07", active_before="2025-05-07") == {a.id}
    assert ids(active_after="2025-05-08") == set()
    assert ids(created_after=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)) == {
        a.id,
        b.id,
        c.id,
    }
    assert ids(created_before="2000-01-01") == set()
    with pytest.raises(ConfigError, match="created_after"):
        mem.search_memories("trip", created_after="yesterday")
    with pytest.raises(ConfigError, match="active_after"):
        mem.search_memories("trip", active_after="2025-02-01", active_before="2025-01-01")


def check_metadata_is_validated(mem: TdaiMemory) -> None:
    """Metadata must be a small JSON object; the error names the field and the fix."""
    with pytest.raises(ConfigError, match="metadata must be a dict"):
        mem.add_memory("x", metadata=["a"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"metadata\['when'\] is a datetime"):
        mem.add_memory("x", metadata={"when": dt.datetime.now()})
    with pytest.raises(ConfigError, match="keys must be strings"):
        mem.add_memory("x", metadata={1: "a"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="at most 16384 bytes"):
        mem.add_memory("x", metadata={"blob": "y" * 20_000})
    assert mem.stats().memories == 0


def check_jsonl_round_trip(mem: TdaiMemory, other: TdaiMemory) -> None:
    """A JSONL export keeps metadata and expiry; importing it restores both."""
    from langchain_tdai_recall._exchange import jsonl as _jsonl

    rec = mem.add_memory(
        "Keeps its fields.", metadata={"k": "v", "n": [1, 2]}, expires_at="2099-01-01T00:00:00Z"
    )
    line = _jsonl.memory_line(rec)
    data = json.loads(line)
    assert data["metadata"] == {"k": "v", "n": [1, 2]}
    assert data["expires_at"] == "2099-01-01T00:00:00.000Z"
    (item,) = list(_jsonl.parse_lines([line]))
    other.add_memories([item.data], user_id=item.user_id, agent_id=item.agent_id)
    copy = other.get_memory(rec.id)
    assert copy is not None
    assert (copy.metadata, copy.expires_at) == (rec.metadata, rec.expires_at)


def check_pages_skip_unswept_expired_memories(mem: TdaiMemory) -> None:
    """Expired memories the sweep has not deleted yet take no place in a page.

    `list_memories(limit, offset)` and a LangGraph store search without a query return full
    pages of unexpired memories, and offset paging sees each of them exactly once.
    """
    who = {"user_id": "pager"}
    written = [
        mem.add_memory(f"Page note number {i}.", expires_at=PAST if i % 2 else None, **who)
        for i in range(10)
    ]
    live = [r.id for r in written[0::2]]
    expired = [r.id for r in written[1::2]]
    every = [r.id for r in mem.list_memories(**who)]  # oldest first; equal times by id
    assert sorted(every) == sorted(live)
    assert [r.id for r in mem.list_memories(limit=5, **who)] == every
    paged = [r.id for start in range(5) for r in mem.list_memories(limit=1, offset=start, **who)]
    assert paged == every
    assert [r.id for r in mem.list_memories(limit=2, offset=2, **who)] == every[2:4]
    assert mem.list_memories(limit=5, offset=5, **who) == []
    store = mem.as_store()
    newest = store.search(("memories", "pager"), limit=5)
    assert sorted(item.key for item in newest) == sorted(live)
    pages = [
        item.key
        for start in range(0, 6, 2)
        for item in store.search(("memories", "pager"), limit=2, offset=start)
    ]
    assert sorted(pages) == sorted(live)
    assert len(pages) == len(set(pages)) == 5
    # the expired rows are still stored: the pages were full without the sweep's help
    scope_rows = mem._store.expired_memories("9999", limit=100)
    assert sorted(i for _, i in scope_rows) == sorted(expired)
