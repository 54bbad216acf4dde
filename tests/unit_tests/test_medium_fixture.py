"""The medium-store recall set (`tests/fixtures/medium/`) is well formed.

`benchmarks/quality/medium.py` trusts it: ids unique, every need names a memory of the same user,
types and kinds valid, times parse and tell a consistent story (written before the user's `now`, a
trip ends after it starts), and the package itself accepts every memory.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.types import MEMORY_TYPES

FIXTURES = Path(__file__).parents[1] / "fixtures" / "medium"
SET_NAMES = ("dev", "after")
KINDS = {"explicit", "implicit", "multipart", "temporal", "cross_language"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def _load(name: str) -> list[dict[str, Any]]:
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    assert set(data) == {"about", "users"}
    users: list[dict[str, Any]] = data["users"]
    return users


SETS = {name: _load(name) for name in SET_NAMES}
USERS = [u for name in SET_NAMES for u in SETS[name]]


def _aware(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text)
    assert moment.tzinfo is not None, f"{text!r} has no UTC offset"
    return moment


def _activity(text: str, end: bool) -> dt.datetime:
    """An activity time as an aware moment: a date covers its whole day (in UTC, for ordering)."""
    if _DATE.match(text):
        day = dt.date.fromisoformat(text) + dt.timedelta(days=1 if end else 0)
        return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return _aware(text)


def test_ids_are_unique_across_both_files() -> None:
    users = [u["user_id"] for u in USERS]
    assert len(users) == len(set(users)), Counter(users).most_common(3)
    for section in ("memories", "requests", "irrelevant"):
        ids = [item["id"] for u in USERS for item in u[section]]
        assert len(ids) == len(set(ids)), (section, Counter(ids).most_common(3))


@pytest.mark.parametrize("user", USERS, ids=lambda u: u["user_id"])
def test_memories_are_valid(user: dict[str, Any]) -> None:
    now = _aware(user["now"])
    assert 150 <= len(user["memories"]) <= 400
    for m in user["memories"]:
        assert m["id"].startswith(f"{user['user_id']}-"), m["id"]
        assert m["type"] in MEMORY_TYPES, m
        assert isinstance(m["priority"], int) and 0 <= m["priority"] <= 100, m
        assert m["content"].strip() and not {"<", "[", "\n"} & set(m["content"]), m
        assert _UTC.match(m["created_at"]), m
        assert _aware(m["created_at"].replace("Z", "+00:00")) < now, m
        start, end = m.get("activity_start_time"), m.get("activity_end_time")
        if m["type"] != "episodic":
            assert start is None and end is None, m
        if end is not None:
            assert start is not None and _activity(start, False) < _activity(end, True), m
        if start is not None:
            assert _DATE.match(start) or _aware(start), m


@pytest.mark.parametrize("user", USERS, ids=lambda u: u["user_id"])
def test_requests_name_existing_memories(user: dict[str, Any]) -> None:
    memories = {m["id"] for m in user["memories"]}
    assert len(user["requests"]) >= 15 and len(user["irrelevant"]) >= 15
    kinds = Counter(r["kind"] for r in user["requests"])
    assert set(kinds) == KINDS, kinds
    for request in user["requests"]:
        assert request["text"].strip() and request["needs"], request
        assert len(request["needs"]) == len(set(request["needs"])), request
        assert set(request["needs"]) <= memories, request
        if request["kind"] == "multipart":
            assert len(request["needs"]) >= 2, request
        _aware(request.get("now", user["now"]))
    for request in user["irrelevant"]:
        assert set(request) == {"id", "text"} and request["text"].strip(), request


def test_the_dev_set_covers_both_languages_and_enough_cases() -> None:
    dev = SETS["dev"]
    langs = Counter(u["lang"] for u in dev)
    assert langs["en"] >= 2 and langs["zh"] >= 2 and langs["mixed"] >= 1, langs
    cases = sum(len(u["requests"]) for u in USERS)
    assert cases >= 100 and sum(len(u["irrelevant"]) for u in USERS) >= 80
    assert {u["user_id"] for u in SETS["after"]}.isdisjoint(u["user_id"] for u in dev)


def test_the_package_accepts_every_memory() -> None:
    with TdaiMemory.open(None, embeddings=None) as memory:
        for user in USERS:
            memory.add_memories(user["memories"], user_id=user["user_id"], show_progress=False)
            stored = memory.list_memories(user_id=user["user_id"])
            assert {m.id for m in stored} == {m["id"] for m in user["memories"]}
            by_id = {m.id: m for m in stored}
            for m in user["memories"]:
                assert by_id[m["id"]].priority == m["priority"]
                assert by_id[m["id"]].activity_start_time is not None or (
                    "activity_start_time" not in m
                )
