"""The head of a scope's memories in profile order, kept up to date write by write.

Recall's user profile (`recall.engine`) shows a scope's memories of priority `PROFILE_MIN_PRIORITY`
or more in *profile order*, as far as a token budget reaches, so it only ever needs the first few
hundred of them. Profile order:

1. priority, highest first;
2. `persona`, then `instruction`, then `episodic` (stable facts before events);
3. facts and rules oldest first (a fact that has held for months is a settled part of who the
   user is), events by their activity, latest first (the end of the activity, else its start or
   timestamp, else the write time: this year's trip before last year's);
4. the order written (the row reference: memories written in one millisecond keep the order
   they were given in, whatever their generated ids).

Measured on the medium-store development set (`benchmarks/quality/medium.py`, 5 users with
150-170 memories) against oldest first throughout, at budgets of 400, 500 and 600 tokens: as
many needs reach the model with every memory at priority 50, and 0, 3 and 4 more of 141 with
priorities as formation rates them; ordering everything by recency instead loses 4-7 needs at
priority 50. How often a memory was recalled is not tracked (a recall never writes), so it plays
no part.

Sorting a large scope for that after every write would cost about 100 ms at 100k memories;
`ProfileHead` keeps the first `capacity` rows in order instead and updates them in O(log
capacity) per written row.

Invariant: every eligible row that is not in the head sorts after the head's last row. Adding a
row keeps it (inserting, and evicting the last row when the head is full); removing a row from
the head keeps it too, but the head shrinks, and once it is below half its capacity while rows
are left outside it is rebuilt by one sort on the next read.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from typing import Final, Protocol

from langchain_tdai_recall.stores._index.extras import epoch

__all__ = ["PROFILE_MIN_PRIORITY", "PROFILE_TYPE_RANK", "ProfileHead", "profile_key"]

PROFILE_MIN_PRIORITY: Final = 30
"""Memories below this priority are never in a profile: minor facts (and text memory formation
found steering the memory system, which it stores below this) are left to search."""

PROFILE_TYPE_RANK: Final[dict[str, int]] = {"persona": 0, "instruction": 1, "episodic": 2}
"""Among memories of equal priority: stable facts first, then rules, then events."""

ProfileKey = tuple[int, int, str | float, int]


class ProfileFields(Protocol):
    """The row fields profile order reads (`stores._index.layer.RowMeta` has them)."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def created(self) -> str: ...


def profile_key(rowid: int, meta: ProfileFields, active: float | None = None) -> ProfileKey | None:
    """The sort key of a row in profile order; `None` for rows that are never in a profile.

    `active` is the row's activity time (epoch seconds: its end, else its start or timestamp).
    """
    if meta.priority < PROFILE_MIN_PRIORITY:  # standing rules (-1) have a block of their own
        return None
    when: str | float = meta.created  # facts and rules: oldest first (ISO strings sort so)
    if meta.kind == "episodic":  # events: latest activity first, else latest written
        when = -(active if active is not None else (epoch(meta.created) or 0.0))
    # the same (priority, type) always has the same kind of `when`: never str against float
    return (-meta.priority, PROFILE_TYPE_RANK.get(meta.kind, 3), when, rowid)


class ProfileHead:
    """The first rows of a layer in profile order. Not thread-safe: the index's lock guards it."""

    def __init__(self, capacity: int) -> None:
        self.capacity: Final = capacity
        self._keys: list[ProfileKey] = []
        """The head, sorted."""
        self._key_of: dict[int, ProfileKey] = {}
        """Row -> key, for every eligible row (inside the head or not)."""
        self._stale = False

    def add(self, rowid: int, meta: ProfileFields, active: float | None = None) -> None:
        """Insert or update one row (`active`: its activity time, see `profile_key`)."""
        self.remove(rowid)
        key = profile_key(rowid, meta, active)
        if key is None:
            return
        self._key_of[rowid] = key
        if self._stale:
            return
        outside = len(self._key_of) - 1 - len(self._keys)
        if outside == 0 and len(self._keys) < self.capacity:
            bisect.insort(self._keys, key)
        elif self._keys and key < self._keys[-1]:
            bisect.insort(self._keys, key)
            if len(self._keys) > self.capacity:
                self._keys.pop()
        # otherwise the row sorts after the whole head and stays outside it

    def remove(self, rowid: int) -> None:
        """Forget one row (a no-op for rows it does not hold)."""
        key = self._key_of.pop(rowid, None)
        if key is None or self._stale:
            return
        at = bisect.bisect_left(self._keys, key)
        if at < len(self._keys) and self._keys[at] == key:
            del self._keys[at]
            if len(self._keys) < self.capacity // 2 and len(self._key_of) > len(self._keys):
                self._stale = True

    def reset(self, rows: Iterable[tuple[int, ProfileFields, float | None]]) -> None:
        """Start over from a whole layer (after a snapshot was restored)."""
        self._key_of = {}
        for rowid, meta, active in rows:
            key = profile_key(rowid, meta, active)
            if key is not None:
                self._key_of[rowid] = key
        self._stale = True

    def first(self, limit: int, skip: set[int]) -> list[int]:
        """The first `limit` row references in profile order, leaving out `skip`."""
        if self._stale:
            self._keys = heapq.nsmallest(self.capacity, self._key_of.values())
            self._stale = False
        out: list[int] = []
        for key in self._keys:
            if key[-1] not in skip:
                out.append(key[-1])
                if len(out) == limit:
                    return out
        if len(out) < limit and len(self._keys) < len(self._key_of):
            # more skipped rows than the head's slack: read further, by one sort
            extra = heapq.nsmallest(limit + len(skip), self._key_of.values())
            return [k[-1] for k in extra if k[-1] not in skip][:limit]
        return out
