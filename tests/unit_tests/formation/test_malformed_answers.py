"""No fact is lost to a malformed extraction answer (issue 18, formation item 1).

A scripted model answers each session's window first with one malformed variant (wrong types
in every field, missing fields, extra fields, nulls, truncated JSON, prose around JSON, broken
tool calls, a failing call) and, when asked again, with a correct answer. Every fact must end
up formed exactly once: at the first attempt when the type error is repaired, after a retry
when it cannot be; a window that keeps failing is held and reported pending, never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, InvalidToolCall, ToolCall

from langchain_tdai_recall.testing import (
    ConsolidationRequest,
    FormationWindow,
    ScriptedFormationModel,
)
from tests.unit_tests.formation.conftest import OpenMemory, say

Variant = Callable[[str, str], Any]
"""(fact, message id) -> the first answer."""


def good(fact: str, mid: str) -> dict[str, Any]:
    return {"content": fact, "type": "persona", "priority": 60, "source_ids": [mid]}


def with_fields(**fields: Any) -> Variant:
    return lambda fact, mid: [{**good(fact, mid), **fields}]


def tool_message(args: Any, **meta: Any) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[ToolCall(name="ExtractionAnswer", args=args, id="call_1")],
        response_metadata=meta,
    )


def fail(fact: str, mid: str) -> Any:
    del fact, mid
    msg = "provider unavailable"
    raise RuntimeError(msg)


def beside(extra: Any) -> Variant:
    """The good memory, and `extra` (junk or an unrepairable item) beside it."""
    return lambda fact, mid: [good(fact, mid), extra]


REPAIRED: dict[str, Variant] = {
    "epoch end": with_fields(activity_end=12345),
    "epoch string start": with_fields(activity_start="1748736000"),
    "epoch ms start": with_fields(activity_start=1748736000000),
    "year start": with_fields(activity_start=2025),
    "unparseable time": with_fields(activity_start="sometime last spring"),
    "object time": with_fields(activity_end={"date": "2025-06-01"}),
    "end before start": with_fields(activity_start="2025-06-02", activity_end="2025-06-01"),
    "numeric string priority": with_fields(priority="80"),
    "float priority": with_fields(priority=80.0),
    "null priority": with_fields(priority=None),
    "capitalised type": with_fields(type="Persona"),
    "plural type": with_fields(type="Preferences"),
    "string source": lambda fact, mid: [{**good(fact, mid), "source_ids": mid}],
    "numeric source": lambda fact, mid: [{**good(fact, mid), "source_ids": [int(mid[1:])]}],
    "unknown source": with_fields(source_ids=["m99"]),
    "background source": with_fields(source_ids=["b1"]),
    "object source": with_fields(source_ids={"m1": True}),
    "null source": with_fields(source_ids=None),
    "number situation": with_fields(situation=5),
    "all optional null": with_fields(
        situation=None, activity_start=None, activity_end=None, source_ids=None
    ),
    "extra fields": with_fields(confidence=0.9, reasoning={"why": ["because"]}, id=None),
    "renamed fields": lambda fact, mid: [
        {
            "text": fact,
            "type": "persona",
            "scene": "life",
            "message_ids": [mid],
            "start_time": "2025-01-01",
        }
    ],
    "metadata times": lambda fact, mid: [
        {**good(fact, mid), "metadata": {"activity_start_time": 1748736000}}
    ],
    "single object": lambda fact, mid: {"memories": good(fact, mid)},
    "double encoded list": lambda fact, mid: {"memories": json.dumps([good(fact, mid)])},
    "double encoded answer": lambda fact, mid: json.dumps(
        json.dumps({"memories": [good(fact, mid)]})
    ),
    "prose around fenced JSON": lambda fact, mid: (
        "Sure! Here you go:\n```json\n"
        + json.dumps({"memories": [good(fact, mid)]})
        + "\n```\nHope this helps."
    ),
    "prose around bare JSON": lambda fact, mid: (
        "I found this: " + json.dumps({"memories": [good(fact, mid)]}) + " That is all."
    ),
}
"""First answers that are used as they come: the fact is formed at the first attempt."""

RETRIED: dict[str, Variant] = {
    # junk: never stored, and the window is asked again (what the model meant is unknown)
    "null content": with_fields(content=None),
    "number content": with_fields(content=42),
    "missing content": lambda fact, mid: [{"type": "persona", "priority": 60}],
    "object content": with_fields(content={"text": "?"}),
    "content as parts": lambda fact, mid: [{**good(fact, mid), "content": fact.split(" ")}],
    "null type": with_fields(type=None),
    "number type": with_fields(type=7),
    "unknown type": with_fields(type="opinion"),
    "content only": lambda fact, mid: [{"content": fact}],
    "bare string item": lambda fact, mid: [fact],
    "number item": lambda fact, mid: [7],
    "null item": lambda fact, mid: [None],
    "junk beside": beside({"content": 42, "type": "banana", "priority": "high"}),
    "empty content beside": beside({"content": "", "type": "persona", "priority": 50}),
    "blank content beside": beside({"content": "  "}),
    "bare string beside": beside("The user likes the colour green."),
    "partly malformed": beside({"content": None, "priority": 90}),
    "everything wrong": lambda fact, mid: [
        {
            "text": fact,
            "type": 1,
            "priority": "abc",
            "situation": [],
            "start": 1748736000000,
            "end": {"a": 1},
            "message_ids": int(mid[1:]),
            "extra": None,
        }
    ],
    # a priority that cannot be repaired: not clamped, not guessed
    "priority 500": with_fields(priority=500),
    "priority -7": with_fields(priority=-7),
    "huge priority": with_fields(priority=1e9),
    "word priority": with_fields(priority="high"),
    "fraction priority": with_fields(priority=72.5),
    "list priority": with_fields(priority=[70]),
    "bool priority": with_fields(priority=True),
    # the answer itself is unusable
    "truncated JSON": lambda fact, mid: '{"memories": [{"content": "' + fact[:10],
    "prose only": lambda fact, mid: "I could not find anything worth remembering.",
    "empty reply": lambda fact, mid: "",
    "null answer": lambda fact, mid: "null",
    "wrong top key": lambda fact, mid: {"items": [good(fact, mid)]},
    "cut off by the output limit": lambda fact, mid: tool_message(
        {"memories": [good(fact, mid)]}, finish_reason="length"
    ),
    "invalid tool call": lambda fact, mid: AIMessage(
        content="",
        invalid_tool_calls=[
            InvalidToolCall(
                name="ExtractionAnswer", args='{"memories": [', id="call_1", error="bad JSON"
            )
        ],
    ),
    "failing call": fail,
}
"""First answers that are not used: the window is held and the fact formed at the retry."""

JUNK_ITEMS = 18
"""Junk items among the first answers of `RETRIED` (one per variant up to `everything wrong`)."""
UNREPAIRED_ITEMS = 7
"""Items with a priority that cannot be repaired among the first answers of `RETRIED`."""


def test_no_fact_is_lost_to_any_malformed_answer(open_memory: OpenMemory) -> None:
    variants = {**REPAIRED, **RETRIED}
    facts = {name: f"The user's locker {i} code is {1000 + i}." for i, name in enumerate(variants)}
    by_fact = {fact: name for name, fact in facts.items()}
    attempts: dict[str, int] = dict.fromkeys(variants, 0)
    broken = {"on": True}
    stuck_fact = "The user's bike is called Rocinante."

    def extract(window: FormationWindow) -> Any:
        user = next((m for m in window.messages if m["role"] == "user"), None)
        if user is None:  # a window split after failures may hold the answer alone
            return []
        if user["text"] == stuck_fact:  # a model that never gets this window right
            if broken["on"]:
                return '{"memories": [{"content": "The user'
            return [good(stuck_fact, user["id"])]
        name = by_fact[user["text"]]
        attempts[name] += 1
        if attempts[name] == 1:
            return variants[name](user["text"], user["id"])
        return [good(user["text"], user["id"])]

    memory = open_memory(ScriptedFormationModel(extract=extract))
    for name, fact in facts.items():
        say(memory, [fact], session=f"s-{list(variants).index(name)}")
    say(memory, [stuck_fact], session="stuck")

    first = memory.extract()
    assert first.failed_windows == len(RETRIED) + 1
    assert first.pending_messages == 2 * (len(RETRIED) + 1)  # held, not skipped
    assert (first.junk, first.unrepaired) == (JUNK_ITEMS, UNREPAIRED_ITEMS)  # reported
    # nothing but the facts of the used answers is stored (no "42", no "", no bare string)
    assert sorted(m.content for m in memory.list_memories()) == sorted(facts[n] for n in REPAIRED)
    for _ in range(3):
        memory.extract()

    stored = memory.list_memories()
    texts = [m.content for m in stored]
    for name, fact in facts.items():
        assert texts.count(fact) == 1, f"{name}: formed {texts.count(fact)} times"
        assert attempts[name] == (1 if name in REPAIRED else 2), name
    assert stuck_fact not in texts
    assert sorted(texts) == sorted(facts.values())  # no junk was ever stored
    left = memory.extract()
    assert left.failed_windows == 1 and left.pending_messages == 2  # still reported pending
    assert memory.flush(timeout=30) is False

    by_text = {m.content: m for m in stored}
    assert by_text[facts["epoch end"]].activity_end_time is not None
    assert by_text[facts["epoch ms start"]].activity_start_time is not None
    assert by_text[facts["numeric string priority"]].priority == 80
    assert by_text[facts["float priority"]].priority == 80
    assert by_text[facts["null priority"]].priority == 50
    assert by_text[facts["capitalised type"]].type == "persona"
    for name in ("priority 500", "priority -7", "huge priority"):  # never clamped: asked again
        assert by_text[facts[name]].priority == 60, name
    assert by_text[facts["numeric source"]].source_message_ids  # `1` read as `m1`
    assert by_text[facts["string source"]].source_message_ids
    assert by_text[facts["unknown source"]].source_message_ids == ()  # the id dropped, fact kept
    assert by_text[facts["unparseable time"]].activity_start_time is None  # time dropped, fact kept

    broken["on"] = False
    assert memory.flush(timeout=30) is True
    assert [m.content for m in memory.list_memories()].count(stuck_fact) == 1


CONSOLIDATION_USED: dict[str, Callable[[str], Any]] = {
    "single object": lambda nid: {"decisions": {"new_id": nid, "action": "add"}},
    "bare list": lambda nid: [{"new_id": nid, "action": "add"}],
    "number id": lambda nid: [{"new_id": int(nid[1:]), "action": "add"}],
    "capitalised action": lambda nid: [{"new_id": nid, "action": "Add"}],
    "unknown target": lambda nid: [{"new_id": nid, "action": "update", "target_ids": ["c99"]}],
    "no decision": lambda nid: [],
}
"""First consolidation answers that are used (an unknown target or no decision means add)."""

CONSOLIDATION_RETRIED: dict[str, Callable[[str], Any]] = {
    "truncated JSON": lambda nid: '{"decisions": [{"new_id": "' + nid,
    "prose only": lambda nid: "These look different to me.",
    "empty reply": lambda nid: "",
    "failing call": lambda nid: fail("", ""),
    "wrong top key": lambda nid: {"choices": [{"new_id": nid, "action": "add"}]},
    "unknown action": lambda nid: [{"new_id": nid, "action": "keep both"}],
    "null everything": lambda nid: [
        {"new_id": nid, "action": None, "target_ids": None, "content": None, "priority": None}
    ],
    "wrong types": lambda nid: [
        {"new_id": nid, "action": 3, "target_ids": {"c1": 1}, "priority": "x", "type": 9}
    ],
    "not an item": lambda nid: ["add"],
    "no new id": lambda nid: [{"action": "skip", "target_ids": ["c1"]}],
    "number content": lambda nid: [
        {"new_id": nid, "action": "update", "target_ids": ["c1"], "content": 42}
    ],
    "priority 500": lambda nid: [
        {"new_id": nid, "action": "merge", "target_ids": ["c1"], "content": "x", "priority": 500}
    ],
    "unknown type": lambda nid: [
        {"new_id": nid, "action": "update", "target_ids": ["c1"], "type": "banana"}
    ],
}
"""First consolidation answers that are not used: the window is retried (the retry adds)."""

CONSOLIDATION = {**CONSOLIDATION_USED, **CONSOLIDATION_RETRIED}


def test_no_fact_is_lost_to_a_malformed_consolidation_answer(open_memory: OpenMemory) -> None:
    facts = {
        name: f"The user's locker {i} code is {1000 + i}." for i, name in enumerate(CONSOLIDATION)
    }
    by_fact = {fact: name for name, fact in facts.items()}
    attempts = dict.fromkeys(CONSOLIDATION, 0)

    def consolidate(request: ConsolidationRequest) -> Any:
        (new,) = request.new
        name = by_fact[new["text"]]
        attempts[name] += 1
        if attempts[name] == 1:
            return CONSOLIDATION[name](new["id"])
        return [{"new_id": new["id"], "action": "add"}]

    memory = open_memory(
        ScriptedFormationModel(consolidate=consolidate),
        {"extraction": {"candidateFloor": 0.0}},  # every stored memory is a candidate
    )
    stored = memory.add_memory("The user's locker code is 999.", type="persona")
    junk = 0
    for i, fact in enumerate(facts.values()):
        say(memory, [fact], session=f"s-{i}")
        junk += memory.extract().junk  # one at a time: each window's batch holds one new memory
    for _ in range(3):
        memory.extract()
    texts = [m.content for m in memory.list_memories()]
    for name, fact in facts.items():
        assert texts.count(fact) == 1, f"{name}: formed {texts.count(fact)} times"
        expected = 1 if name in CONSOLIDATION_USED else 2
        assert attempts[name] == expected, f"{name}: asked {attempts[name]} times"
    assert sorted(texts) == sorted([stored.content, *facts.values()])  # no "42", nothing lost
    assert memory.get_memory(stored.id) == stored  # no junk decision touched it
    assert junk == 5
    assert memory.flush(timeout=30) is True


def test_an_answer_over_the_window_cap_is_split_not_cut(open_memory: OpenMemory) -> None:
    # issue 26 item 1: the least important memories over `max_memories_per_session` were
    # dropped and the window committed past them
    def extract(window: FormationWindow) -> Any:
        return [
            {"content": f"{m['text']} (fact {k})", "type": "persona", "priority": 40 + k}
            for m in window.messages
            if m["role"] == "user"
            for k in (1, 2)
        ]

    memory = open_memory(
        ScriptedFormationModel(extract=extract), {"extraction": {"maxMemoriesPerSession": 3}}
    )
    texts = [f"Fact number {i}." for i in range(4)]
    say(memory, texts)
    report = memory.extract()
    assert report.ok and report.split_windows >= 1 and report.rejected == 0
    expected = {f"{t} (fact {k})" for t in texts for k in (1, 2)}
    assert {m.content for m in memory.list_memories()} == expected


def test_a_one_message_window_over_the_cap_keeps_the_most_important(
    open_memory: OpenMemory,
) -> None:
    def extract(window: FormationWindow) -> Any:
        return [
            {"content": f"Detail {k}.", "type": "persona", "priority": 10 * k}
            for m in window.messages
            if m["role"] == "user"
            for k in range(1, 6)
        ]

    memory = open_memory(
        ScriptedFormationModel(extract=extract),
        {"extraction": {"maxMemoriesPerSession": 3, "windowMessages": 1}},
    )
    memory.record_messages([{"role": "user", "content": "Five details."}], session_key="s1")
    report = memory.extract()
    assert report.ok and report.rejected == 2 and report.split_windows == 0  # reported as cut
    assert {m.content for m in memory.list_memories()} == {"Detail 3.", "Detail 4.", "Detail 5."}


def test_lone_surrogates_in_model_answers_are_repaired_not_a_stuck_window(
    open_memory: OpenMemory,
) -> None:
    def extract(window: FormationWindow) -> str:
        user = next(m for m in window.messages if m["role"] == "user")
        return (
            r'{"memories": [{"content": "likes tea\ud800", "type": "persona", "priority": 60, '
            r'"situation": "at home\udc00", "source_ids": ["' + user["id"] + '"]}]}'
        )

    model = ScriptedFormationModel(
        extract=extract,
        scenes=lambda r: (
            r'[{"op": "create", "name": "Tea\ud800 time", "summary": "s\ud800", "body": "b"}]'
        ),
        persona=lambda r: r'{"action": "rewrite", "persona": "p\ud800"}',
    )
    memory = open_memory(model)
    say(memory, ["I like tea"])
    report = memory.extract()
    assert report.errors == () and report.pending_messages == 0
    assert [(m.content, m.scene_name) for m in memory.list_memories()] == [
        ("likes tea\ufffd", "at home\ufffd")
    ]
    assert [(s.name, s.summary) for s in memory.list_scenes()] == [("Tea\ufffd-time", "s\ufffd")]
    assert memory.get_persona() == "p\ufffd"
