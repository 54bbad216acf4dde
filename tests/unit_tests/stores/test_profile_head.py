"""`ProfileHead` lists the same rows as sorting the whole layer, after any series of writes."""

from __future__ import annotations

import random
from typing import NamedTuple

import pytest

from langchain_tdai_recall.stores._index.profile import ProfileHead, profile_key


class Fields(NamedTuple):
    id: str
    kind: str
    priority: int
    created: str


def _brute(
    rows: dict[int, Fields],
    limit: int,
    skip: set[int],
    active: dict[int, float | None] | None = None,
) -> list[int]:
    keys = sorted(
        k for r, f in rows.items() if (k := profile_key(r, f, (active or {}).get(r))) is not None
    )
    return [k[-1] for k in keys if k[-1] not in skip][:limit]


@pytest.mark.parametrize("seed", range(8))
def test_random_writes_and_deletes_match_a_full_sort(seed: int) -> None:
    rng = random.Random(seed)
    head = ProfileHead(capacity=16)
    rows: dict[int, Fields] = {}
    active: dict[int, float | None] = {}
    for step in range(600):
        action = rng.random()
        if action < 0.6 or not rows:
            rowid = rng.randrange(80)
            fields = Fields(
                id=f"m{rowid}",
                kind=rng.choice(["persona", "instruction", "episodic"]),
                priority=rng.choice([-1, 40, 50, 50, 60, 90]),
                created=f"2026-01-{rng.randrange(1, 29):02d}",
            )
            rows[rowid] = fields
            active[rowid] = rng.choice([None, None, 1.7e9 + rng.randrange(10) * 86_400])
            head.add(rowid, fields, active[rowid])
        else:
            rowid = rng.choice(list(rows))
            del rows[rowid]
            head.remove(rowid)
        if step % 25 == 0:
            skip = set(rng.sample(sorted(rows), min(len(rows), rng.randrange(4))))
            limit = rng.randrange(1, 24)
            assert head.first(limit, skip) == _brute(rows, limit, skip, active)
    assert head.first(10_000, set()) == _brute(rows, 10_000, set(), active)


def test_standing_rules_are_never_listed() -> None:
    head = ProfileHead(capacity=4)
    head.add(1, Fields("rule", "instruction", -1, "2026-01-01"))
    head.add(2, Fields("fact", "persona", 50, "2026-01-01"))
    assert head.first(10, set()) == [2]


def test_reset_starts_from_a_whole_layer() -> None:
    head = ProfileHead(capacity=2)
    rows = {i: Fields(f"m{i}", "episodic", 50 + i % 3, f"2026-01-{i + 1:02d}") for i in range(9)}
    head.reset((i, f, None) for i, f in rows.items())
    assert head.first(5, {8}) == _brute(rows, 5, {8})


def test_facts_come_oldest_first_and_events_latest_activity_first() -> None:
    head = ProfileHead(capacity=8)
    head.add(1, Fields("old-fact", "persona", 60, "2025-01-01T00:00:00.000Z"))
    head.add(2, Fields("new-fact", "persona", 60, "2026-01-01T00:00:00.000Z"))
    # events: last year's trip written later than this year's booking; an undated one
    head.add(3, Fields("trip-2025", "episodic", 60, "2026-01-05T00:00:00.000Z"), 1.735e9)
    head.add(4, Fields("trip-2026", "episodic", 60, "2025-12-01T00:00:00.000Z"), 1.77e9)
    head.add(5, Fields("undated", "episodic", 60, "2026-02-01T00:00:00.000Z"))
    head.add(6, Fields("higher", "episodic", 70, "2020-01-01T00:00:00.000Z"), 1.0e9)
    assert head.first(10, set()) == [6, 1, 2, 4, 5, 3]
