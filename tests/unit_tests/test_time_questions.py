"""Time questions reach the memories of that time, with the default embedder (issue 22).

"What did I spend money on in November?" needs the purchases dated in November, which rank low
on the words alone (relevance 0.1 at best). The dates here are relative to the clock, as a user's
would be: the test asks about last month, whichever month that is.
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Iterator

import pytest

from langchain_tdai_recall import TdaiMemory

pytestmark = pytest.mark.slow  # loads the bundled embedder

USER = "mira"
TODAY = dt.datetime.now(dt.UTC).date()
LAST = (TODAY.replace(day=1) - dt.timedelta(days=1)).replace(day=1)
"""The first day of last month."""
OLDER = (LAST - dt.timedelta(days=70)).replace(day=1)


def _day(month_start: dt.date, day: int) -> str:
    return month_start.replace(day=day).isoformat()


EVENTS = {
    "coat": ("Bought a grey wool winter coat at Uniqlo for $129", _day(LAST, 9)),
    "tires": ("Paid $340 for a set of snow tires for the Subaru", _day(LAST, 21)),
    "dentist": ("Had a dental cleaning with Dr. Patel; no cavities", _day(LAST, 5)),
    "hike": ("Went hiking at Mount Tam with Jess and saw a coyote", _day(LAST, 14)),
    "book": ("Finished reading 'Project Hail Mary' for the book club", _day(LAST, 25)),
    "desk": ("Bought a standing desk from Fully for $600", _day(OLDER, 8)),
    "insurance": ("Renewed the car insurance with Geico, $820 for six months", _day(OLDER, 2)),
    "cake": ("Ordered a birthday cake for Mom from Tartine", _day(OLDER, 19)),
    "conference": ("Flew to Chicago for a design conference", _day(OLDER, 14)),
    "flu": ("Got a flu shot at the CVS on Market Street", _day(OLDER, 27)),
}
FACTS = [
    "User is vegetarian and avoids gelatin",
    "User lives in San Francisco's Mission district",
    "User works as a product designer",
    "User prefers window seats on long flights",
    "User's partner is named Jess",
    "User drinks oolong tea every morning",
    "User plays tennis on Saturday mornings",
    "User's mother lives in Portland",
    "User is learning Japanese on Duolingo",
    "User's cat Miso is afraid of the vacuum cleaner",
]


@pytest.fixture(scope="module")
def memory() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None, config={"timezone": "UTC"}) as mem:
        for key, (text, day) in EVENTS.items():
            mem.add_memory(text, id=key, activity_start_time=day, user_id=USER)
        for i, fact in enumerate(FACTS):
            mem.add_memory(fact, id=f"fact{i}", type="persona", user_id=USER)
        assert mem.flush(timeout=600)
        yield mem


def _block(memory: TdaiMemory, text: str) -> list[str]:
    result = memory.recall(text, user_id=USER)
    assert result is not None
    return [m.id for m in result.memories]


@pytest.mark.parametrize(
    "question",
    [
        "What did I spend money on last month?",
        f"What did I spend money on in {calendar.month_name[LAST.month]}?",
        "上个月买了什么？",
        "上个月花钱买了哪些东西？",
    ],
)
def test_last_months_purchases_reach_the_block(memory: TdaiMemory, question: str) -> None:
    block = _block(memory, question)
    assert {"coat", "tires"} <= set(block), (question, block)
    # the month's other memories do not match the rest of the words
    assert not {"dentist", "hike"} & set(block), (question, block)


def test_a_question_about_the_time_alone_brings_that_times_events(memory: TdaiMemory) -> None:
    block = _block(memory, "What did I do last month?")
    assert set(block) <= {"coat", "tires", "dentist", "hike", "book"}
    assert len(block) >= 3


def test_requests_without_a_time_stay_quiet(memory: TdaiMemory) -> None:
    assert _block(memory, "What's the capital of France?") == []
    assert _block(memory, "Write a haiku about autumn leaves") == []
