"""The time a message asks about, as a search's time window (`recall.time_aware`).

`text.timeexpr` resolves the message's time expressions into local date ranges against the
turn's date in the configured timezone; this module turns them into the `TimeWindow` the index
looks rows up with. Recall and `search_memories` / `tdai_memory_search` share it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index.times import TimeWindow
from langchain_tdai_recall.text.timeexpr import DateRange, resolve_time

__all__ = ["NARROW_DAYS", "AskedTime", "asked_time", "check_now", "local_today"]

NARROW_DAYS: Final = 92
"""Most days a message's dates may span for its memories of that time to pass the injection gate
on their own rule (a season; "this year", "今年" mostly name the present, not what to recall)."""


@dataclass(frozen=True, slots=True)
class AskedTime:
    """The dates a message asks about, and the window to search them with."""

    ranges: tuple[DateRange, ...]
    """Inclusive local date ranges, merged and sorted."""
    window: TimeWindow
    """The same ranges as epoch intervals (`stores._index.times`)."""
    only_time: bool
    """Whether the message asks only about the time (`ResolvedTime.only_time`)."""

    @property
    def narrow(self) -> bool:
        """Whether the dates span at most `NARROW_DAYS` in all.

        Such a time picks memories out ("last month", "over Christmas"); a longer one mostly
        names the present ("this year").
        """
        return sum(r.days for r in self.ranges) <= NARROW_DAYS


def check_now(value: object, *, field: str = "now") -> dt.datetime | None:
    """A caller's `now`: a `datetime` or `None`.

    Raises:
        ConfigError: For anything else (a date has no time of day: pass a datetime).
    """
    if value is None or isinstance(value, dt.datetime):
        return value
    msg = (
        f"{field} must be a datetime (naive = in the configured timezone) or None for the "
        f"clock, got {type(value).__name__} {value!r:.60}"
    )
    raise ConfigError(msg)


def local_today(now: dt.datetime | None, tz: dt.tzinfo) -> dt.date:
    """The date in `tz` at `now` (default: the clock); a naive `now` is taken to be in `tz`."""
    if now is None:
        return dt.datetime.now(tz).date()
    if now.tzinfo is None:
        return now.date()
    return now.astimezone(tz).date()


def asked_time(text: str, *, now: dt.datetime | None, tz: dt.tzinfo) -> AskedTime | None:
    """The time `text` asks about at `now` in zone `tz`, or `None` when it names no time.

    Events without an activity time count by their write time only when the message looks
    back (a past tense, or dates that have all passed): "what should I order tonight?" is not
    about what was told today.
    """
    today = local_today(now, tz)
    resolved = resolve_time(text, today)
    if resolved is None:
        return None
    # an event's write time stands for when it happened only in a question about the past
    past = resolved.tense == "past" or all(r.last < today for r in resolved.ranges)
    return AskedTime(
        resolved.ranges,
        TimeWindow.from_dates(((r.first, r.last) for r in resolved.ranges), tz, written=past),
        resolved.only_time,
    )
