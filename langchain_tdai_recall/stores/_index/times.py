"""Which L1 rows fall in a time range: the index's times, looked up without reading records.

Time-aware recall (`text.timeexpr` resolves "last month" into dates) needs the memories whose
time overlaps a range. A row's time is its activity (`activity_start_time` .. `activity_end_time`,
else the event `timestamp`, as `RowExtras` holds them), else its write time (`created_at`). The
write time says when an event was told, which is close to when it happened only for what lies
in the past: rows timed by it are kept apart and matched only when the window asks for them
(`TimeWindow.written`, set for questions about the past).

Stored times come in two forms, and a range of local dates matches each in its own way:

- **dates** (`2026-11-03`): calendar days with no zone. `stores._index.extras.epoch` stores
  them as that day in UTC, first instant to last (the end at `.999999`, which is how a row's
  times are recognised as dates here). They match a range of dates as dates do, whatever the
  configured zone: `TimeWindow.floating`.
- **moments** (`2026-11-03T14:00:00+08:00`, and every write time): instants, which match the
  range's dates as local days in the configured zone: `TimeWindow.absolute`.

`TimeTable` keeps both kinds sorted by start. A lookup is a binary search plus a vectorised pass
over the rows that start within `LONG_SPAN` before the range (rows spanning longer are kept
apart and checked all at once), so its cost follows the rows near the range, not the scope.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.stores._index.extras import epoch

__all__ = [
    "LONG_SPAN",
    "REBUILD_MIN",
    "RowTime",
    "TimeArrays",
    "TimeIndex",
    "TimeTable",
    "TimeWindow",
    "is_date_span",
]

_DAY: Final = 86_400.0
_ISO_UTC_LENGTH: Final = len("2026-11-03T10:00:00.000Z")

LONG_SPAN: Final = 62 * _DAY
"""Rows whose time spans longer than this (seconds) are checked apart from the sorted ones."""


def is_date_span(start: float, end: float) -> bool:
    """Whether stored (start, end) epochs are the first and last instants of dates (in UTC)."""
    return start % _DAY == 0 and end != round(end) and round(end) % _DAY == 0


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Ranges of local dates, as the half-open epoch intervals the two kinds of times match."""

    floating: tuple[tuple[float, float], ...]
    """[start, end) per range for stored dates: the range's days in UTC."""
    absolute: tuple[tuple[float, float], ...]
    """[start, end) per range for stored moments: the range's days in the configured zone."""
    written: bool = True
    """Whether rows timed only by their write time count."""

    @classmethod
    def from_dates(
        cls,
        ranges: Iterable[tuple[dt.date, dt.date]],
        tz: dt.tzinfo,
        *,
        written: bool = True,
    ) -> TimeWindow:
        """The window of inclusive (first, last) date ranges in zone `tz`."""
        floating: list[tuple[float, float]] = []
        absolute: list[tuple[float, float]] = []
        for first, last in ranges:
            after = last + dt.timedelta(days=1)
            floating.append((_midnight(first, dt.UTC), _midnight(after, dt.UTC)))
            absolute.append((_midnight(first, tz), _midnight(after, tz)))
        return cls(tuple(floating), tuple(absolute), written)

    def matches(self, time: RowTime) -> bool:
        """Whether a row's time overlaps the window (as `TimeTable.rows` decides)."""
        start, end, by_write = time
        if by_write:
            return self.written and any(low <= start < high for low, high in self.absolute)
        ranges = self.floating if is_date_span(start, end) else self.absolute
        return any(start < high and end >= low for low, high in ranges)


def _midnight(day: dt.date, tz: dt.tzinfo) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()


class _Sorted:
    """Rows of one kind: the short ones sorted by start, the long ones apart."""

    __slots__ = ("_ends", "_long_ends", "_long_ids", "_long_starts", "_rowids", "_starts")

    def __init__(
        self,
        rowids: npt.NDArray[np.int64],
        starts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.float64],
    ) -> None:
        long = (ends - starts) > LONG_SPAN
        order = np.argsort(starts[~long], kind="stable")
        self._rowids = rowids[~long][order]
        self._starts = starts[~long][order]
        self._ends = ends[~long][order]
        self._long_ids = rowids[long]
        self._long_starts = starts[long]
        self._long_ends = ends[long]

    def overlapping(self, low: float, high: float) -> list[npt.NDArray[np.int64]]:
        """Rows whose [start, end] overlaps [low, high)."""
        lo = int(np.searchsorted(self._starts, low - LONG_SPAN, side="left"))
        hi = int(np.searchsorted(self._starts, high, side="left"))
        near = slice(lo, hi)
        parts = [self._rowids[near][self._ends[near] >= low]]
        if self._long_ids.size:
            hit = (self._long_starts < high) & (self._long_ends >= low)
            parts.append(self._long_ids[hit])
        return parts


RowTime = tuple[float, float, bool]
"""A row's (start, end) epochs and whether they are its write time (a moment, start = end)."""

TimeArrays = tuple[
    npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]
]
"""Many rows' times as parallel arrays: row ids, starts, ends, whether each is a write time."""

REBUILD_MIN: Final = 1024
"""Rows changed since a table was built that are looked up one by one before it is rebuilt (at
least; a sixteenth of the table's rows when that is more)."""


class TimeTable:
    """Every L1 row's time, by kind, for range lookups. Immutable once built."""

    __slots__ = ("_absolute", "_floating", "_written", "size")

    def __init__(self, times: TimeArrays) -> None:
        """Build from the rows' times; activity dates are recognised by `is_date_span`."""
        rowids, first, last, moment = times
        dates = (
            ~moment & (first % _DAY == 0) & (last != np.round(last)) & (np.round(last) % _DAY == 0)
        )
        instants = ~moment & ~dates
        self._floating = _Sorted(rowids[dates], first[dates], last[dates])
        self._absolute = _Sorted(rowids[instants], first[instants], last[instants])
        self._written = _Sorted(rowids[moment], first[moment], last[moment])
        self.size = int(rowids.size)

    @classmethod
    def of(cls, rows: Iterable[tuple[int, RowTime]]) -> TimeTable:
        """Build from (row id, time) pairs."""
        listed = list(rows)
        return cls(
            (
                np.asarray([r for r, _ in listed], dtype=np.int64),
                np.asarray([t[0] for _, t in listed], dtype=np.float64),
                np.asarray([t[1] for _, t in listed], dtype=np.float64),
                np.asarray([t[2] for _, t in listed], dtype=bool),
            )
        )

    def rows(self, window: TimeWindow) -> npt.NDArray[np.int64]:
        """The rows whose time overlaps any range of `window`, sorted, without repeats."""
        parts: list[npt.NDArray[np.int64]] = []
        for low, high in window.floating:
            parts += self._floating.overlapping(low, high)
        for low, high in window.absolute:
            parts += self._absolute.overlapping(low, high)
            if window.written:
                parts += self._written.overlapping(low, high)
        if not parts:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))


class TimeIndex:
    """A `TimeTable` kept current.

    Rows written or deleted since the table was built are looked up one by one until there are
    `REBUILD_MIN` of them, so a write costs nothing here and the table is rebuilt only now and
    then. The caller locks.
    """

    __slots__ = ("_changed", "_table")

    def __init__(self) -> None:
        self._table: TimeTable | None = None
        self._changed: set[int] = set()

    def changed(self, rowids: Iterable[int]) -> None:
        """Rows written or deleted (nothing to do before the first lookup)."""
        if self._table is not None:
            self._changed.update(rowids)

    def reset(self) -> None:
        """Forget the table (the rows were replaced)."""
        self._table = None
        self._changed = set()

    def rows(
        self,
        window: TimeWindow,
        time_of: Callable[[int], RowTime | None],
        every_row: Callable[[], TimeArrays],
    ) -> npt.NDArray[np.int64]:
        """The rows whose time overlaps `window`, sorted.

        `time_of` gives one row's time (`None`: deleted, or no time), `every_row` every row's
        (to build the table from).
        """
        table = self._table
        if table is None or len(self._changed) > max(REBUILD_MIN, table.size // 16):
            table = TimeTable(every_row())
            self._table, self._changed = table, set()
        found = table.rows(window)
        if not self._changed:
            return found
        changed = np.fromiter(self._changed, np.int64, len(self._changed))
        found = found[~np.isin(found, changed)]
        again = [r for r in self._changed if (t := time_of(r)) is not None and window.matches(t)]
        return np.union1d(found, np.asarray(again, dtype=np.int64)) if again else found


def epochs(texts: list[str]) -> npt.NDArray[np.float64]:
    """Epoch seconds of stored write times (`types.iso_utc`: `2026-11-03T10:00:00.000Z`).

    Parsed by numpy in one pass when every text has that form; otherwise one by one
    (`stores._index.extras.epoch`, naive = UTC; unreadable = 0).
    """
    if all(len(t) == _ISO_UTC_LENGTH and t.endswith("Z") for t in texts):
        try:
            moments = np.asarray([t[:-1] for t in texts], dtype="datetime64[ms]")
        except ValueError:
            pass
        else:
            return moments.astype(np.int64).astype(np.float64) / 1000.0
    return np.asarray([epoch(t) or 0.0 for t in texts], dtype=np.float64)
