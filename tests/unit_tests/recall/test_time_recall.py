"""Time-aware recall (issue 22): the time a message names favours the memories of that time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np
import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.gate import injected
from langchain_tdai_recall.recall.search import TIME_RANK_BOOST, RankedHit, SearchOutcome
from langchain_tdai_recall.recall.when import IN_RANGE_BEST_SHARE, IN_RANGE_FLOOR, asked_time
from langchain_tdai_recall.stores._index.times import (
    LONG_SPAN,
    REBUILD_MIN,
    RowTime,
    TimeArrays,
    TimeIndex,
    TimeTable,
    TimeWindow,
    epochs,
)
from langchain_tdai_recall.testing import HashEmbeddings

USER = "time-user"
SHANGHAI = dt.timezone(dt.timedelta(hours=8))
NOW = dt.datetime(2026, 12, 3, 20, 0, tzinfo=SHANGHAI)
"""Thursday 3 December 2026, 20:00 in UTC+8."""


# -- the index's time table --------------------------------------------------------------------


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def _date_row(rowid: int, first: str, last: str) -> tuple[int, RowTime]:
    """A row whose activity runs over dates, stored as `stores._index.extras.epoch` does."""
    start = dt.datetime.fromisoformat(first).replace(tzinfo=dt.UTC).timestamp()
    end = dt.datetime.combine(dt.date.fromisoformat(last), dt.time.max, dt.UTC).timestamp()
    return rowid, (start, end, False)


def _moment_row(rowid: int, at: str) -> tuple[int, RowTime]:
    return rowid, (_epoch(at), _epoch(at), False)


def test_dates_match_as_dates_and_moments_as_local_days() -> None:
    table = TimeTable.of(
        [
            _date_row(1, "2026-11-30", "2026-11-30"),  # a date: 30 November wherever you are
            _moment_row(2, "2026-11-30T20:00:00+00:00"),
            _moment_row(3, "2026-12-01T07:00:00+08:00"),
            _date_row(4, "2026-12-01", "2026-12-01"),
        ]
    )
    # 1 December in UTC+8: the date 1 December, and moments from 30 Nov 16:00 UTC on
    window = TimeWindow.from_dates([(dt.date(2026, 12, 1), dt.date(2026, 12, 1))], SHANGHAI)
    assert table.rows(window).tolist() == [2, 3, 4]
    november = TimeWindow.from_dates([(dt.date(2026, 11, 1), dt.date(2026, 11, 30))], SHANGHAI)
    assert table.rows(november).tolist() == [1]


def test_long_spans_and_overlaps_are_found() -> None:
    rows = [
        _date_row(1, "2020-01-01", "2030-12-31"),  # longer than LONG_SPAN: kept apart
        _date_row(2, "2026-10-25", "2026-11-02"),  # overlaps the start of November
        _date_row(3, "2026-11-29", "2026-12-05"),  # overlaps its end
        _date_row(4, "2026-10-01", "2026-10-31"),
        _date_row(5, "2026-12-01", "2026-12-01"),
    ]
    table = TimeTable.of(rows)
    november = TimeWindow.from_dates([(dt.date(2026, 11, 1), dt.date(2026, 11, 30))], dt.UTC)
    assert table.rows(november).tolist() == [1, 2, 3]
    assert rows[0][1][1] - rows[0][1][0] > LONG_SPAN
    # two ranges at once, no repeats
    both = TimeWindow.from_dates(
        [
            (dt.date(2026, 10, 1), dt.date(2026, 10, 2)),
            (dt.date(2026, 12, 1), dt.date(2026, 12, 1)),
        ],
        dt.UTC,
    )
    assert table.rows(both).tolist() == [1, 3, 4, 5]


def _random_rows(rng: np.random.Generator, count: int, base: float) -> list[tuple[int, RowTime]]:
    rows = []
    for rowid in range(count):
        start = base + float(rng.integers(0, 365 * 86_400))
        kind = int(rng.integers(0, 3))
        if kind == 0:  # a date span
            first = dt.datetime.fromtimestamp(start, dt.UTC).date()
            last = first + dt.timedelta(days=int(rng.choice([0, 2, 90])))
            rows.append(_date_row(rowid, first.isoformat(), last.isoformat()))
        else:  # an instant or interval, or a write time
            span = float(rng.choice([0, 3600, 86_400 * 3, 86_400 * 90])) if kind == 1 else 0.0
            rows.append((rowid, (start, start + span, kind == 2)))
    return rows


def _brute_force(rows: list[tuple[int, RowTime]], window: TimeWindow) -> list[int]:
    return sorted(r for r, t in rows if window.matches(t))


def test_lookup_matches_a_brute_force_scan() -> None:
    rng = np.random.default_rng(7)
    rows = _random_rows(rng, 3000, _epoch("2026-01-01T00:00:00+00:00"))
    table = TimeTable.of(rows)
    for first_day in (10, 100, 200, 300):
        first = dt.date(2026, 1, 1) + dt.timedelta(days=first_day)
        for written in (True, False):
            window = TimeWindow.from_dates(
                [(first, first + dt.timedelta(days=20))], SHANGHAI, written=written
            )
            assert table.rows(window).tolist() == _brute_force(rows, window)


def _arrays(rows: dict[int, RowTime]) -> TimeArrays:
    ids = list(rows)
    return (
        np.asarray(ids, dtype=np.int64),
        np.asarray([rows[r][0] for r in ids], dtype=np.float64),
        np.asarray([rows[r][1] for r in ids], dtype=np.float64),
        np.asarray([rows[r][2] for r in ids], dtype=bool),
    )


def test_the_time_index_follows_writes_and_deletions() -> None:
    rng = np.random.default_rng(11)
    rows = dict(_random_rows(rng, 2000, _epoch("2026-01-01T00:00:00+00:00")))
    index = TimeIndex()
    window = TimeWindow.from_dates([(dt.date(2026, 3, 1), dt.date(2026, 4, 30))], dt.UTC)

    def lookup() -> list[int]:
        return index.rows(window, rows.get, lambda: _arrays(rows)).tolist()

    assert lookup() == _brute_force(list(rows.items()), window)
    # a few changes are looked up one by one; many make the table be rebuilt
    for changes in (5, REBUILD_MIN + 10):
        for _ in range(changes):
            rowid = int(rng.integers(0, 2500))
            if rowid in rows and rng.random() < 0.3:
                del rows[rowid]
            else:
                rows[rowid] = _random_rows(rng, 1, _epoch("2026-02-15T00:00:00+00:00"))[0][1]
            index.changed([rowid])
        assert lookup() == _brute_force(list(rows.items()), window)


# -- the gate's in-range path --------------------------------------------------------------------


def _hit(rowid: int, score: float, *, in_range: bool = False) -> RankedHit:
    rank = score + (TIME_RANK_BOOST if in_range else 0.0)
    return RankedHit(rowid, score, rank, score, None, 50, in_range)


def _sorted(*hits: RankedHit) -> list[RankedHit]:
    return sorted(hits, key=lambda h: -h.rank)


def test_in_range_memories_that_match_the_rest_of_the_words_pass() -> None:
    best = 0.2
    assert IN_RANGE_BEST_SHARE * best > IN_RANGE_FLOOR * 0.3
    hits = _sorted(
        _hit(1, best, in_range=True),
        _hit(2, IN_RANGE_BEST_SHARE * best + 0.001, in_range=True),
        _hit(3, IN_RANGE_BEST_SHARE * best - 0.001, in_range=True),  # the rest of the month
        _hit(4, 0.25),  # out of range and below the threshold
    )
    outcome = SearchOutcome(hits, "hybrid", scope_coverage=0.0, time_narrow=True)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1, 2]
    # a wide time ("this year") names the present: its memories need their relevance
    outcome.time_narrow = False
    assert injected(outcome, threshold=0.3, limit=5) == []


def test_in_range_memories_need_the_floor() -> None:
    weak = IN_RANGE_FLOOR * 0.3 - 0.001
    outcome = SearchOutcome(
        _sorted(_hit(1, weak, in_range=True)), "hybrid", scope_coverage=0.0, time_narrow=True
    )
    assert injected(outcome, threshold=0.3, limit=5) == []
    outcome.time_only = True  # "what did I do last weekend?": the time is the whole question
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1]


def test_the_time_never_pushes_out_a_relevant_memory() -> None:
    # three in-range memories rank above a relevant one (the boost), the limit is 3
    hits = _sorted(
        _hit(1, 0.25, in_range=True),
        _hit(2, 0.24, in_range=True),
        _hit(3, 0.23, in_range=True),
        _hit(4, 0.35),
        _hit(5, 0.31),
    )
    outcome = SearchOutcome(hits, "hybrid", scope_coverage=0.0, time_narrow=True)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=3)] == [1, 4, 5]
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1, 2, 3, 4, 5]
    # on topic (half the threshold) the in-range ones pass on relevance too; those reaching
    # the full threshold still keep their places
    outcome.scope_coverage = 1.0
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=3)] == [1, 4, 5]
    on_topic_only = _sorted(
        _hit(1, 0.25, in_range=True), _hit(2, 0.24, in_range=True), _hit(6, 0.2)
    )
    outcome = SearchOutcome(on_topic_only, "hybrid", scope_coverage=1.0, time_narrow=True)
    # 6 passes on topic only (0.2 < 0.3): it ranks below the boosted in-range ones
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=2)] == [1, 2]


def test_without_a_time_the_gate_is_unchanged() -> None:
    outcome = SearchOutcome([_hit(1, 0.12), _hit(2, 0.31)], "hybrid", scope_coverage=0.0)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [2]


# -- recall and search over a store ---------------------------------------------------------------


MEMORIES = [
    ("coat", "Bought a wool winter coat for 129 dollars", "2026-11-12"),
    ("tires", "Paid 340 dollars for new snow tires", "2026-11-21"),
    ("dentist", "Dental cleaning with Dr Patel", "2026-11-05"),
    ("hike", "Hiking at Mount Tam with Jess", "2026-11-28"),
    ("desk", "Bought a standing desk for 600 dollars", "2026-10-08"),
    ("insurance", "Paid 820 dollars for car insurance", "2026-09-01"),
    ("flight", "Flight to Lisbon for Christmas with the family", ("2026-12-20", "2026-12-28")),
]


def _open(embeddings: HashEmbeddings | None) -> TdaiMemory:
    mem = TdaiMemory.open(None, embeddings=embeddings, config={"timezone": "Asia/Shanghai"})
    for key, text, when in MEMORIES:
        first, last = when if isinstance(when, tuple) else (when, None)
        mem.add_memory(
            text, id=key, activity_start_time=first, activity_end_time=last, user_id=USER
        )
    # a persona fact written "now" has no activity time: its write time is not an event
    mem.add_memory("User likes oolong tea", type="persona", id="tea", user_id=USER)
    assert mem.flush(timeout=60)
    return mem


@pytest.fixture(scope="module", params=["hash", "keywords"])
def memory(request: pytest.FixtureRequest) -> Iterator[TdaiMemory]:
    """The store with an embedder, and without one (recall on keywords alone)."""
    with _open(HashEmbeddings() if request.param == "hash" else None) as mem:
        yield mem


@pytest.fixture(scope="module")
def keyword_memory() -> Iterator[TdaiMemory]:
    with _open(None) as mem:
        yield mem


def _ids(result: object) -> list[str]:
    assert result is not None
    return [m.id for m in result.memories]  # type: ignore[attr-defined]


def test_a_month_question_brings_that_months_purchases(memory: TdaiMemory) -> None:
    result = memory.recall("Which dollars did I pay in November?", user_id=USER, now=NOW)
    assert result is not None
    assert result.time_ranges == (("2026-11-01", "2026-11-30"),)
    ids = _ids(result)
    assert {"coat", "tires"} <= set(ids)
    # November's dentist matches the time but none of the words
    assert "dentist" not in ids


def test_a_time_only_question_brings_that_times_memories(memory: TdaiMemory) -> None:
    result = memory.recall("What did I do last weekend?", user_id=USER, now=NOW)
    assert _ids(result) == ["hike"]
    result = memory.recall("上周末做了什么？", user_id=USER, now=NOW)
    assert _ids(result) == ["hike"]


def test_an_activity_range_overlapping_the_asked_time_counts(memory: TdaiMemory) -> None:
    result = memory.recall("What am I doing over Christmas?", user_id=USER, now=NOW)
    assert _ids(result) == ["flight"]


def test_write_time_of_a_persona_fact_is_no_event(memory: TdaiMemory) -> None:
    result = memory.recall("What did I do today?", user_id=USER, now=dt.datetime.now(SHANGHAI))
    assert "tea" not in _ids(result)


def test_now_decides_what_last_month_means(memory: TdaiMemory) -> None:
    october = memory.recall(
        "What did I do last month?", user_id=USER, now=dt.datetime(2026, 11, 15, 12)
    )
    assert october is not None
    assert october.time_ranges == (("2026-10-01", "2026-10-31"),)
    assert _ids(october) == ["desk"]


def test_messages_without_a_time_are_unaffected(memory: TdaiMemory) -> None:
    result = memory.recall("What coat did I buy?", user_id=USER, now=NOW)
    assert result is not None
    assert result.time_ranges == ()


def test_time_awareness_can_be_switched_off() -> None:
    # without the lead rule: the hash embedder ranks the hike first for any question at 0.29,
    # which would lead (`recall.lead_share`) whatever the time
    config = {"timezone": "Asia/Shanghai", "recall": {"time_aware": False, "lead_share": 1.0}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(), config=config) as mem:
        mem.add_memory("Hiking at Mount Tam", activity_start_time="2026-11-28", user_id=USER)
        assert mem.flush(timeout=60)
        result = mem.recall("What did I do last weekend?", user_id=USER, now=NOW)
        assert result is not None
        assert result.time_ranges == ()
        assert result.memories == ()


def test_search_memories_ranks_the_asked_time_first(keyword_memory: TdaiMemory) -> None:
    # on keywords alone: the hash embedder's noise is larger than the time's boost
    memory = keyword_memory
    query = "what did I pay dollars for last month"
    ids = [h.id for h in memory.search_memories(query, user_id=USER, now=NOW, limit=10)]
    # the November payments before September's and October's, which match the words as well
    assert max(ids.index("coat"), ids.index("tires")) < min(
        ids.index("desk"), ids.index("insurance")
    )
    # an explicit time filter wins over the words
    hits = memory.search_memories(query, user_id=USER, now=NOW, active_before="2026-09-30")
    assert [h.id for h in hits] == ["insurance"]


def test_the_tool_reads_the_time_in_its_query() -> None:
    today = dt.datetime.now(SHANGHAI).date()  # the tool resolves against the clock
    with TdaiMemory.open(None, embeddings=None, config={"timezone": "+08:00"}) as mem:
        for days, key in ((2, "recent"), (60, "older")):
            when = (today - dt.timedelta(days=days)).isoformat()
            mem.add_memory(f"Hiking trip {key}", id=key, activity_start_time=when, user_id=USER)
        assert mem.flush(timeout=60)
        tool = next(t for t in mem.tools() if t.name == "tdai_memory_search")
        call = {"query": "hiking two days ago", "limit": 2}
        text = tool.invoke(call, config={"configurable": {"user_id": USER}})
        assert text.index("Hiking trip recent") < text.index("Hiking trip older")
        call = {"query": "hiking two months ago", "limit": 2}
        text = tool.invoke(call, config={"configurable": {"user_id": USER}})
        assert text.index("Hiking trip older") < text.index("Hiking trip recent")


def test_now_must_be_a_datetime(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match="now must be a datetime"):
        memory.recall("hello", user_id=USER, now=dt.date(2026, 12, 3))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="now must be a datetime"):
        memory.search_memories("hello", user_id=USER, now="2026-12-03")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("What did I do today?", True),  # looks back
        ("What happened last month?", True),  # the dates have passed
        ("上周做了什么", True),
        ("What should I order at the steakhouse tonight?", False),
        ("Can you suggest a workout for this week?", False),
        ("What am I doing tomorrow?", False),
    ],
)
def test_write_times_count_only_for_the_past(text: str, written: bool) -> None:
    asked = asked_time(text, now=NOW, tz=SHANGHAI)
    assert asked is not None
    assert asked.window.written is written


def test_a_write_time_is_matched_only_when_the_window_asks_for_it() -> None:
    told = _epoch("2026-12-03T09:00:00+08:00")
    table = TimeTable.of([(7, (told, told, True))])
    today = [(dt.date(2026, 12, 3), dt.date(2026, 12, 3))]
    assert table.rows(TimeWindow.from_dates(today, SHANGHAI)).tolist() == [7]
    assert table.rows(TimeWindow.from_dates(today, SHANGHAI, written=False)).tolist() == []


@pytest.mark.parametrize(
    ("text", "narrow"),
    [
        ("What did I buy last month?", True),
        ("What did I do last summer?", True),  # 92 days
        ("What am I doing over Christmas?", True),
        ("How old is my mother this year?", False),
        ("我妹妹今年是不是参加高考了？", False),
        ("Where did we travel last year?", False),
        # a time in a request about the world picks no memory out
        ("Explain how daylight saving time works in March", False),
        ("Write a short poem about last summer", False),
        ("下个月有什么好看的电影？", False),
        ("上个月买了什么？", True),  # no pronoun, a past tense
    ],
)
def test_a_time_of_a_few_months_at_most_picks_memories_out(text: str, narrow: bool) -> None:
    asked = asked_time(text, now=NOW, tz=SHANGHAI)
    assert asked is not None
    assert asked.narrow is narrow


def test_write_times_are_parsed_in_bulk_and_one_by_one_alike() -> None:
    texts = ["2026-11-03T10:00:00.123Z", "2024-02-29T23:59:59.999Z"]
    expected = [dt.datetime.fromisoformat(t).timestamp() for t in texts]
    assert epochs(texts).tolist() == pytest.approx(expected, abs=1e-6)
    # another form anywhere: each is read on its own (naive = UTC, unreadable = 0)
    mixed = [*texts, "2026-11-03T10:00:00+08:00", "garbage"]
    assert epochs(mixed).tolist() == pytest.approx(
        [*expected, _epoch("2026-11-03T10:00:00+08:00"), 0.0], abs=1e-6
    )
