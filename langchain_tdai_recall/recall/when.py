"""Time-aware recall (`recall.time_aware`): the time a message asks about, and its gate rule.

`asked_time` resolves the message's time expressions (`text.timeexpr`) into local date ranges
against the turn's date in the configured timezone, as the `TimeWindow` the index looks rows up
with; recall and `search_memories` / `tdai_memory_search` share it. The search flags the
candidates whose activity time (else write time) falls in it (`RankedHit.in_range`, ranked
`TIME_RANK_BOOST` higher; see `recall.search`).

`with_time` is the injection gate's rule for them ("what did I buy last month?"). When the time
picks the writer's memories out (`AskedTime.narrow`, `SearchOutcome.time_narrow`: a question
about the writer, at most `NARROW_DAYS` in all; "this year" rather names the present, and "write
a poem about last summer" is about no memory), an in-range memory is injected when its relevance
reaches `IN_RANGE_BEST_SHARE` of the best in-range candidate's and `IN_RANGE_FLOOR × threshold`:
the memories of that time that match the rest of the words ("buy"), not every memory of the
month.
When the rest of the message is only question words ("what did I do last weekend?",
`SearchOutcome.time_only`) the in-range candidates pass as ranked, up to `recall.max_results`.
The time only adds: a memory that reaches the full threshold on its own keeps its place (only
`recall.max_results` such memories drop it), and the rest of the limit goes, by the boosted rank,
to what the other gate rules let through and to the in-range memories. A new in-range memory can
raise the in-range bar, but only by ranking above the memories it then leaves out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.search import TIME_RANK_BOOST, RankedHit, SearchOutcome
from langchain_tdai_recall.stores._index.times import TimeWindow
from langchain_tdai_recall.text.timeexpr import DateRange, resolve_time

__all__ = [
    "IN_RANGE_BEST_SHARE",
    "IN_RANGE_FLOOR",
    "NARROW_DAYS",
    "AskedTime",
    "asked_time",
    "check_now",
    "local_today",
    "with_time",
]

NARROW_DAYS: Final = 92
"""Most days a message's dates may span for its memories of that time to pass the injection gate
on their own rule (a season; "this year", "今年" mostly name the present, not what to recall)."""

IN_RANGE_BEST_SHARE: Final = 0.4
"""Share of the best in-range candidate's relevance another in-range memory needs."""

IN_RANGE_FLOOR: Final = 1 / 6
"""Share of the threshold every in-range memory needs (0.05 at the default 0.3), unless the
message asks only about the time."""


@dataclass(frozen=True, slots=True)
class AskedTime:
    """The dates a message asks about, and the window to search them with."""

    ranges: tuple[DateRange, ...]
    """Inclusive local date ranges, merged and sorted."""
    window: TimeWindow
    """The same ranges as epoch intervals (`stores._index.times`)."""
    only_time: bool
    """Whether the message asks only about the time (`ResolvedTime.only_time`)."""
    personal: bool = True
    """Whether the message asks about its writer (`text.timeexpr.is_personal`)."""

    @property
    def narrow(self) -> bool:
        """Whether the time picks the writer's memories out.

        The message asks about its writer (`personal`) and its dates span at most
        `NARROW_DAYS` in all: "what did I buy last month?", "over Christmas". A longer time
        mostly names the present ("this year"), and a time in a request about the world
        ("explain daylight saving in March", "write a poem about last summer") picks nothing.
        """
        return self.personal and sum(r.days for r in self.ranges) <= NARROW_DAYS


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
        resolved.personal,
    )


def with_time(
    outcome: SearchOutcome,
    candidates: list[RankedHit],
    relevant: list[RankedHit],
    *,
    threshold: float,
    limit: int,
    priority_factor: Callable[[int], float],
) -> list[RankedHit]:
    """The gate's choice once the time a message asks about is taken into account.

    Args:
        outcome: The search's outcome (its time flags).
        candidates: The candidates the gate considers, best ranked first.
        relevant: Those the gate's other rules let through, in the same order.
        threshold: `recall.score_threshold` (or the keyword threshold).
        limit: `recall.max_results`.
        priority_factor: The gate's multiplier of the threshold for a priority.

    Returns:
        At most `limit` candidates, best ranked first.
    """
    bar = _in_range_bar(candidates, threshold, outcome)
    if bar == float("inf"):
        return relevant[:limit]
    # the full threshold on its own (as the gate computes it: the priority lowers it)
    full = [h for h in relevant if h.score >= threshold * priority_factor(h.priority) - 1e-6]
    full.sort(key=lambda h: -(h.rank - TIME_RANK_BOOST if h.in_range else h.rank))
    chosen = {h.rowid for h in full[:limit]}
    passing = {h.rowid for h in relevant}
    rest = [
        h
        for h in candidates
        if h.rowid not in chosen and (h.rowid in passing or (h.in_range and h.score >= bar - 1e-6))
    ]
    chosen.update(h.rowid for h in rest[: max(limit - len(chosen), 0)])
    return [h for h in candidates if h.rowid in chosen]


def _in_range_bar(candidates: list[RankedHit], threshold: float, outcome: SearchOutcome) -> float:
    """The relevance an in-range candidate needs (infinite when the rule does not apply)."""
    scores = [h.score for h in candidates if h.in_range]
    if not scores:
        return float("inf")
    if outcome.time_only:
        return 0.0
    if not outcome.time_narrow:
        return float("inf")
    return max(IN_RANGE_FLOOR * threshold, IN_RANGE_BEST_SHARE * max(scores))
