"""The time-expression resolver (`text.timeexpr`): English and Chinese, table-driven."""

from __future__ import annotations

import datetime as dt

import pytest

from langchain_tdai_recall.text.timeexpr import (
    DateRange,
    detect_tense,
    is_personal,
    resolve_time,
)

THU = dt.date(2026, 12, 3)
"""A Thursday; its week runs Monday 30 November to Sunday 6 December."""


def _ranges(text: str, today: dt.date = THU) -> list[tuple[str, str]] | None:
    found = resolve_time(text, today)
    if found is None:
        return None
    return [(r.first.isoformat(), r.last.isoformat()) for r in found.ranges]


NOV = [("2026-11-01", "2026-11-30")]

CASES: list[tuple[str, dt.date, list[tuple[str, str]] | None]] = [
    # the examples
    ("What did I spend money on in November?", THU, NOV),
    ("What did I buy last month?", THU, NOV),
    ("上个月买了什么？", THU, NOV),
    ("What dates am I away for Christmas?", THU, [("2026-12-24", "2026-12-26")]),
    # buying is past, Christmas may not be: both
    (
        "What did I buy for Christmas?",
        THU,
        [("2025-12-24", "2025-12-26"), ("2026-12-24", "2026-12-26")],
    ),
    ("What are we doing next weekend?", THU, [("2026-12-12", "2026-12-13")]),
    ("What did I do two weeks ago?", THU, [("2026-11-16", "2026-11-22")]),
    ("What did the doctor tell me three weeks ago?", THU, [("2026-11-09", "2026-11-15")]),
    ("what did I eat yesterday", THU, [("2026-12-02", "2026-12-02")]),
    ("what's on this week", THU, [("2026-11-30", "2026-12-06")]),
    ("Where did we travel last year?", THU, [("2025-01-01", "2025-12-31")]),
    ("What did I buy in March 2025?", THU, [("2025-03-01", "2025-03-31")]),
    ("What happened on 2026-11-03?", THU, [("2026-11-03", "2026-11-03")]),
    ("What happened on 2026/11/3?", THU, [("2026-11-03", "2026-11-03")]),
    ("What did I do on 11/3?", THU, [("2026-11-03", "2026-11-03")]),
    ("What happened on 3 November?", THU, [("2026-11-03", "2026-11-03")]),
    ("What did I do on Nov 3rd?", THU, [("2026-11-03", "2026-11-03")]),
    ("what did I do on the 3rd of November", THU, [("2026-11-03", "2026-11-03")]),
    ("What did I do on November 3rd, 2025?", THU, [("2025-11-03", "2025-11-03")]),
    ("Flight on 12/20/2026", THU, [("2026-12-20", "2026-12-20")]),
    ("Flight on 20/12/2026", THU, [("2026-12-20", "2026-12-20")]),
    ("去年五月去了哪里", THU, [("2025-05-01", "2025-05-31")]),
    ("这周末有什么安排", THU, [("2026-12-05", "2026-12-06")]),
    ("上周做了什么", THU, [("2026-11-23", "2026-11-29")]),
    ("前天吃了什么", THU, [("2026-12-01", "2026-12-01")]),
    ("三天前见了谁", THU, [("2026-11-30", "2026-11-30")]),
    ("11月花了多少钱", THU, NOV),
    ("十一月去了哪", THU, NOV),
    ("2025年3月", THU, [("2025-03-01", "2025-03-31")]),
    ("2025年3月5日", THU, [("2025-03-05", "2025-03-05")]),
    ("11月3号吃了什么", THU, [("2026-11-03", "2026-11-03")]),
    ("去年12月", THU, [("2025-12-01", "2025-12-31")]),
    ("上个月底买了什么", THU, [("2026-11-21", "2026-11-30")]),
    ("这个月月底我有什么安排？", THU, [("2026-12-21", "2026-12-31")]),
    # 春节 2026 is 17 February (eve 16th), 2027 is 6 February
    ("春节去哪了", THU, [("2026-02-16", "2026-02-23")]),
    ("春节要去哪", THU, [("2027-02-05", "2027-02-12")]),
    ("去年春节", THU, [("2025-01-28", "2025-02-04")]),
    ("中秋节去哪了", THU, [("2026-09-25", "2026-09-25")]),
    ("国庆去了哪里", THU, [("2026-10-01", "2026-10-07")]),
    # future tense: the next occurrence
    ("Where am I going in March?", THU, [("2027-03-01", "2027-03-31")]),
    ("What did I buy in March?", THU, [("2026-03-01", "2026-03-31")]),
    # the current month counts as the most recent
    ("What did I buy in December?", THU, [("2026-12-01", "2026-12-31")]),
    ("In May I went to Paris", THU, [("2026-05-01", "2026-05-31")]),
    ("What happened last May?", THU, [("2026-05-01", "2026-05-31")]),
    ("What did I do last March?", THU, [("2026-03-01", "2026-03-31")]),
    ("What will I do next March?", THU, [("2027-03-01", "2027-03-31")]),
    ("What happened this May?", THU, [("2026-05-01", "2026-05-31")]),
    ("What did I do in mid-November?", THU, [("2026-11-11", "2026-11-20")]),
    ("What did I do from March to May?", THU, [("2026-03-01", "2026-05-31")]),
    ("What did I do between March and May?", THU, [("2026-03-01", "2026-05-31")]),
    ("What have I bought since March?", THU, [("2026-03-01", "2026-12-03")]),
    ("What did I read in the 1990s?", THU, [("1990-01-01", "1999-12-31")]),
    # no tense cue: both readings
    ("November", THU, [*NOV, ("2027-11-01", "2027-11-30")]),
    ("my March trip", THU, [("2026-03-01", "2026-03-31"), ("2027-03-01", "2027-03-31")]),
    # weekdays
    ("What did I do last Friday?", THU, [("2026-11-27", "2026-11-27")]),
    ("What did I do last Saturday?", THU, [("2026-11-28", "2026-11-28")]),
    ("What's on this Friday?", THU, [("2026-12-04", "2026-12-04")]),
    # on a Thursday "next Friday" may be tomorrow or the week after
    ("What's on next Friday?", THU, [("2026-12-04", "2026-12-04"), ("2026-12-11", "2026-12-11")]),
    ("上周五", THU, [("2026-11-27", "2026-11-27")]),
    ("下周三", THU, [("2026-12-09", "2026-12-09")]),
    ("周五做了什么", THU, [("2026-11-27", "2026-11-27")]),
    ("What did I do on Friday of last week?", THU, [("2026-11-27", "2026-11-27")]),
    ("the day before yesterday", THU, [("2026-12-01", "2026-12-01")]),
    ("What do I have tomorrow?", THU, [("2026-12-04", "2026-12-04")]),
    ("What did I buy a month ago?", THU, [("2026-10-19", "2026-11-18")]),
    ("半年前", THU, [("2026-05-19", "2026-06-18")]),
    ("两个月前", THU, [("2026-09-18", "2026-10-18")]),
    ("What did I do last summer?", THU, [("2026-06-01", "2026-08-31")]),
    ("去年夏天", THU, [("2025-06-01", "2025-08-31")]),
    ("this winter", THU, [("2026-12-01", "2027-02-28")]),
    ("What did we eat at Thanksgiving?", THU, [("2026-11-26", "2026-11-29")]),
    ("Easter 2025", THU, [("2025-04-18", "2025-04-21")]),
    ("Where am I on Christmas Eve?", THU, [("2026-12-24", "2026-12-24")]),
    ("What did I do earlier this month?", THU, [("2026-12-01", "2026-12-03")]),
    ("What did I eat the past week?", THU, [("2026-11-27", "2026-12-03")]),
    ("What did I buy in the last 30 days?", THU, [("2026-11-04", "2026-12-03")]),
    ("最近三天", THU, [("2026-12-01", "2026-12-03")]),
    ("What am I doing in two weeks?", THU, [("2026-12-14", "2026-12-20")]),
    ("三天后有什么安排", THU, [("2026-12-06", "2026-12-06")]),
    ("What did I do in 2025?", THU, [("2025-01-01", "2025-12-31")]),
    ("2025年去了哪些地方", THU, [("2025-01-01", "2025-12-31")]),
    # year boundary: Saturday 2 January 2027, in the week of Monday 28 December
    ("What did I buy last month?", dt.date(2027, 1, 2), [("2026-12-01", "2026-12-31")]),
    ("What did I buy in December?", dt.date(2027, 1, 2), [("2026-12-01", "2026-12-31")]),
    ("last week", dt.date(2027, 1, 2), [("2026-12-21", "2026-12-27")]),
    ("this weekend", dt.date(2027, 1, 2), [("2027-01-02", "2027-01-03")]),
    ("What did I do last weekend?", dt.date(2027, 1, 2), [("2026-12-26", "2026-12-27")]),
    ("去年", dt.date(2027, 1, 2), [("2026-01-01", "2026-12-31")]),
    ("last week", dt.date(2026, 1, 1), [("2025-12-22", "2025-12-28")]),
    ("上上周", THU, [("2026-11-16", "2026-11-22")]),
    ("What did I do the week before last?", THU, [("2026-11-16", "2026-11-22")]),
    # leap years
    ("What did I do on Feb 29?", dt.date(2027, 3, 1), [("2024-02-29", "2024-02-29")]),
    ("the past year", dt.date(2028, 2, 29), [("2027-03-01", "2028-02-29")]),
    ("last month", dt.date(2028, 3, 31), [("2028-02-01", "2028-02-29")]),
    ("What happened on 2026-02-29?", THU, None),
    ("What happened on Feb 30?", THU, None),
    # words that are not dates
    ("May I ask you something?", THU, None),
    ("I may visit Kyoto", THU, None),
    ("We march at noon", THU, None),
    ("This may be a problem", THU, None),
    ("They want to march", THU, None),
    ("I go running every Friday", THU, None),
    ("I swim on weekends", THU, None),
    ("每周五去游泳", THU, None),
    ("每个周末都去爬山", THU, None),
    ("Add 1/2 cup of sugar", THU, None),
    ("Write a haiku about autumn leaves", THU, None),
    ("Which winter coat did I buy?", THU, None),
    ("冬天的衣服放在哪里", THU, None),
    ("What did I do in the summer?", THU, [("2026-06-01", "2026-08-31")]),
    ("The ratio is 3/4.", THU, None),
    ("Score was 10/10", THU, None),
    ("11/3吃了什么", THU, [("2026-11-03", "2026-11-03")]),
    ("What did I do over the weekend?", THU, [("2026-11-28", "2026-11-29")]),
    ("周末去哪了", THU, [("2026-11-28", "2026-11-29")]),
    ("2000年春节", THU, [("2000-02-04", "2000-02-11")]),
    ("I paid 2025 dollars for it", THU, None),
    ("I finished the course in two weeks", THU, None),
    ("一周一次", THU, None),
    ("这周围有什么好吃的", THU, None),
    ("我对花生过敏", THU, None),
    ("Can I eat peanuts at the Kyoto trip dinner?", THU, None),
    ("Which tea do I like?", THU, None),
    ("", THU, None),
]


@pytest.mark.parametrize(("text", "today", "expected"), CASES)
def test_resolves(text: str, today: dt.date, expected: list[tuple[str, str]] | None) -> None:
    assert _ranges(text, today) == expected


def test_rest_drops_the_expressions_and_their_prepositions() -> None:
    found = resolve_time("What did I buy last month?", THU)
    assert found is not None
    assert "month" not in found.rest
    assert "buy" in found.rest
    found = resolve_time("What did I spend money on in November?", THU)
    assert found is not None
    assert "november" not in found.rest
    assert " in " not in f" {found.rest} "


def test_expressions_report_their_text() -> None:
    found = resolve_time("上个月买了什么？", THU)
    assert found is not None
    assert [e.text for e in found.expressions] == ["上个月"]


@pytest.mark.parametrize(
    ("text", "tense"),
    [
        ("What did I buy?", "past"),
        ("Where am I going?", "future"),
        ("I will go", "future"),
        ("I bought it and will return it", "neutral"),
        ("Nothing here", "neutral"),
        ("买了什么", "past"),
        ("打算去哪", "future"),
        ("过年回家吗", "neutral"),
        ("为什么", "neutral"),
    ],
)
def test_tense(text: str, tense: str) -> None:
    assert detect_tense(text) == tense


def test_deterministic_and_pure() -> None:
    text = "What did I do last weekend and two weeks ago?"
    first = resolve_time(text, THU)
    assert first is not None
    assert all(resolve_time(text, THU) == first for _ in range(5))
    assert len(first.ranges) == 2


def test_long_text_is_bounded() -> None:
    filler = "word " * 50_000
    found = resolve_time(f"What did I buy last month? {filler}", THU)
    assert found is not None
    assert found.ranges == (DateRange(dt.date(2026, 11, 1), dt.date(2026, 11, 30)),)


def test_lunar_tables_cover_their_years() -> None:
    # one row per year 2000-2050 in each table, each a valid date in January-October
    for year in range(2000, 2051):
        found = resolve_time(f"{year}年春节", THU)
        assert found is not None, year
        assert found.ranges[0].first.year == year
        assert found.ranges[0].days == 8
    assert resolve_time("2051年春节", THU) is None


def test_date_range_rejects_reversed_bounds() -> None:
    with pytest.raises(ValueError, match="before first"):
        DateRange(dt.date(2026, 2, 1), dt.date(2026, 1, 1))


@pytest.mark.parametrize(
    ("text", "personal"),
    [
        ("What did I buy last month?", True),
        ("How long are we staying in Shenzhen this winter?", True),
        ("What did the doctor tell me three weeks ago?", True),
        ("上个月买了什么？", True),
        ("去年五月我去哪儿玩了？", True),
        ("Write a short poem about last summer", False),
        ("Give me a workout plan for this week", False),
        ("How many days until Christmas?", False),
        ("帮我写一首关于去年秋天的诗", False),
        ("下周一是几号？", False),
    ],
)
def test_personal(text: str, personal: bool) -> None:
    assert is_personal(text) is personal
