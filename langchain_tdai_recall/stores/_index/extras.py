"""The sparse row fields of an L1 index: expiry, metadata, activity times, searchability.

Most memories have none of these, so a `LayerIndex` keeps them in a dict holding only the rows
that have one (`RowExtras`), next to the dense ranking fields (`layer.RowMeta`). Three readers
use them, all without a query to the database:

- **expiry**: a memory whose `expires_at` has passed is never searched, recalled, pinned or put
  in the profile, whether or not the background sweep has deleted it yet. `ExpiryTable` keeps
  the expiry times sorted, so the rows expired at a moment are a prefix found by bisection
  (O(log n) per recall; nothing at all when no row of the scope expires).
- **hidden rows**: items written through `TdaiStore` with `index=False` are stored and
  readable, but not searchable by a query nor recalled (`HIDDEN_KEY` in their metadata).
- **filters**: `MemoryFilter` (metadata equality, created-at and activity-time ranges) is
  checked against `RowMeta` + `RowExtras` of every row when an explicit search asks for it.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from langchain_tdai_recall.types import MemoryRecord

__all__ = [
    "HIDDEN_KEY",
    "ExpiryTable",
    "MemoryFilter",
    "RowExtras",
    "epoch",
    "extras_from_json",
    "extras_to_json",
    "row_extras",
]

HIDDEN_KEY: Final = "tdai_store"
"""Metadata key of an item written through `TdaiStore` (`graph_store`); its `"index": false`
makes the memory unsearchable by query and invisible to recall."""


def epoch(text: str | None, *, end: bool = False) -> float | None:
    """Seconds since the epoch of an ISO date or date-time (naive = UTC); `None` if unreadable.

    A date alone is its first instant, or with `end` its last.
    """
    if not text:
        return None
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            moment = dt.datetime.combine(day, dt.time.max if end else dt.time.min)
        else:
            moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


class RowExtras(NamedTuple):
    """The sparse fields of one L1 row (only rows with at least one are kept)."""

    expires: float | None
    """Expiry (epoch seconds), or `None` for never."""
    metadata: Mapping[str, Any] | None
    """The memory's metadata, or `None` when empty."""
    active_from: float | None
    """Start of the remembered activity (or its timestamp), epoch seconds."""
    active_to: float | None
    """End of the remembered activity (or its timestamp), epoch seconds."""
    hidden: bool
    """Stored but not searchable by query nor recalled (a `TdaiStore` put with index=False)."""


def row_extras(record: MemoryRecord) -> RowExtras | None:
    """The sparse fields of a memory, or `None` when it has none."""
    metadata = record.metadata or None
    start = record.activity_start_time or record.timestamp
    end = record.activity_end_time or record.timestamp or record.activity_start_time
    if record.expires_at is None and metadata is None and start is None and end is None:
        return None
    store = metadata.get(HIDDEN_KEY) if metadata is not None else None
    hidden = isinstance(store, Mapping) and store.get("index") is False
    return RowExtras(
        epoch(record.expires_at),
        metadata,
        epoch(start),
        epoch(end or start, end=True),
        hidden,
    )


def extras_to_json(extras: Mapping[int, RowExtras]) -> bytes:
    """The extras of an index as JSON (for its snapshot)."""
    return json.dumps(
        [[rowid, *e] for rowid, e in extras.items()], ensure_ascii=False, separators=(",", ":")
    ).encode("utf-8")


def extras_from_json(raw: bytes) -> dict[int, RowExtras]:
    """Extras written by `extras_to_json`.

    Raises:
        ValueError: If the data is not what `extras_to_json` writes.
    """
    if not raw:
        return {}
    out: dict[int, RowExtras] = {}
    for item in json.loads(raw.decode("utf-8")):
        rowid, expires, metadata, start, end, hidden = item
        if not isinstance(rowid, int) or (metadata is not None and not isinstance(metadata, dict)):
            msg = "malformed row extras"
            raise ValueError(msg)
        out[rowid] = RowExtras(expires, metadata, start, end, bool(hidden))
    return out


class ExpiryTable:
    """The expiring rows of an index, sorted by expiry. Rebuilt when the rows change."""

    __slots__ = ("_rowids", "_times")

    def __init__(self, expiring: Mapping[int, float]) -> None:
        pairs = sorted((expires, rowid) for rowid, expires in expiring.items())
        self._times = [t for t, _ in pairs]
        self._rowids = [r for _, r in pairs]

    def __len__(self) -> int:
        return len(self._times)

    def count(self, now: float) -> int:
        """How many rows have expired at `now` (the expired rows are the first ones)."""
        return bisect.bisect_right(self._times, now) if self._times else 0

    def first(self, n: int) -> list[int]:
        """The rows of the first `n` expiries."""
        return self._rowids[:n]


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which memories an explicit search may return, besides its query.

    Times are epoch seconds; every bound is inclusive. A memory without activity times never
    matches an activity range.
    """

    metadata: Mapping[str, Any] | None = None
    """Each key must be in the memory's metadata with an equal value."""
    created_after: float | None = None
    created_before: float | None = None
    active_after: float | None = None
    """The activity must end (or happen) at or after this."""
    active_before: float | None = None
    """The activity must start (or happen) at or before this."""
    where: Callable[[Mapping[str, Any] | None, str], bool] | None = None
    """A further test of (metadata, memory type): the LangGraph store's value filters."""

    @property
    def empty(self) -> bool:
        """Whether the filter lets every memory through."""
        return (
            not self.metadata
            and self.created_after is None
            and self.created_before is None
            and self.active_after is None
            and self.active_before is None
            and self.where is None
        )

    def matches(self, created: str, extras: RowExtras | None, kind: str = "") -> bool:
        """Whether a row (its `created_at`, extras and type) passes the filter."""
        metadata = extras.metadata if extras is not None else None
        return (
            self._metadata_ok(metadata)
            and self._created_ok(created)
            and self._active_ok(extras)
            and (self.where is None or self.where(metadata, kind))
        )

    def _metadata_ok(self, metadata: Mapping[str, Any] | None) -> bool:
        if not self.metadata:
            return True
        if metadata is None:
            return False
        return all(k in metadata and _equal(metadata[k], v) for k, v in self.metadata.items())

    def _created_ok(self, created: str) -> bool:
        if self.created_after is None and self.created_before is None:
            return True
        moment = epoch(created)
        return (
            moment is not None
            and (self.created_after is None or moment >= self.created_after)
            and (self.created_before is None or moment <= self.created_before)
        )

    def _active_ok(self, extras: RowExtras | None) -> bool:
        if self.active_after is None and self.active_before is None:
            return True
        if extras is None or extras.active_from is None:
            return False
        end = extras.active_to if extras.active_to is not None else extras.active_from
        return (self.active_after is None or end >= self.active_after) and (
            self.active_before is None or extras.active_from <= self.active_before
        )


def _equal(have: object, want: object) -> bool:
    """JSON equality: `True` is not `1`, and numbers compare by value."""
    if isinstance(have, bool) or isinstance(want, bool):
        return type(have) is type(want) and have == want
    return have == want
