"""What other writers store gets an importance: LangGraph-store items take `type` and
`priority` from their value, and with a formation model the rest are rated in the background
by extraction's scale (issue 22 item 4)."""

from __future__ import annotations

import importlib
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.testing import (
    FakeToolCallingChatModel,
    HashEmbeddings,
    RatingRequest,
    ScriptedFormationModel,
)

FAST = {
    "pipeline": {"enabled": False},
    "extraction": {"retryBaseSeconds": 0.05, "retryMaxSeconds": 0.2, "timeoutSeconds": 5},
}

OTHERS = [
    "Alice works as an architect in Lyon",
    "Alice has a cat called Pixel",
    "Alice plays tennis on Sundays",
    "Alice's brother Marc lives in Montreal",
    "Alice prefers green tea to coffee",
    "Alice is learning Japanese",
    "Alice drives a small electric car",
    "Alice reads science fiction",
    "Alice went to Lisbon in April",
    "Alice's favourite colour is teal",
    "Alice bakes bread at the weekend",
    "Alice runs a book club on Thursdays",
    "Alice grows tomatoes on her balcony",
    "Alice's daughter Zoe is five",
    "Alice listens to jazz while working",
    "Alice bought a new laptop in March",
    "Alice is saving for a sailing trip",
    "Alice's partner Sam is a teacher",
    "Alice likes hiking in the Alps",
    "Alice volunteers at an animal shelter",
    "Alice collects vintage postcards",
    "Alice prefers morning meetings",
    "Alice had a birthday party in June",
    "Alice watches football on Saturdays",
    "Alice uses a standing desk",
    "Alice's mother lives in Nice",
    "Alice plans to repaint the kitchen",
    "Alice takes the train to work",
    "Alice is renovating her bathroom",
    "Alice enjoys board games",
    "Alice swims twice a week",
    "Alice learned to knit last winter",
    "Alice visited her aunt in Geneva",
    "Alice's favourite film is Amelie",
    "Alice keeps a journal",
    "Alice is vegetarian on weekdays",
    "Alice's best friend is called Ines",
    "Alice wants to learn the piano",
    "Alice's office is on the fifth floor",
    "Alice prefers aisle seats on trains",
]
ALLERGY = "Alice is severely allergic to penicillin"


def _rate(request: RatingRequest) -> list[dict[str, Any]]:
    return [
        {
            "id": m["id"],
            "priority": 95 if "allergic" in str(m["text"]) else 55,
            "type": "persona" if "allergic" in str(m["text"]) else "episodic",
        }
        for m in request.memories
    ]


@pytest.fixture
def rated() -> Iterator[tuple[TdaiMemory, ScriptedFormationModel]]:
    model = ScriptedFormationModel(rate=_rate)
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config=FAST, extraction_model=model
    ) as memory:
        yield memory, model


def _langmem() -> Any:
    with warnings.catch_warnings():  # langmem's dependencies use deprecated langgraph names
        warnings.simplefilter("ignore")
        return importlib.import_module("langmem")


def test_langmem_allergy_beside_40_memories_reaches_the_model_once_rated(
    rated: tuple[TdaiMemory, ScriptedFormationModel],
) -> None:
    """Regression: it landed as `episodic` at 50 and reached the model through no channel."""
    memory, model = rated
    store = memory.as_store()
    for i, text in enumerate(OTHERS):
        store.put(("memories", "alice"), f"o{i:02d}", {"content": text})
    manage = _langmem().create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    writer = FakeToolCallingChatModel(
        script=[[{"name": "manage_memory", "args": {"content": ALLERGY, "action": "create"}}], "ok"]
    )
    config: Any = {"configurable": {"langgraph_user_id": "alice"}}
    create_agent(writer, tools=[manage], store=store).invoke(
        {"messages": [HumanMessage("I'm allergic to penicillin.")]}, config
    )
    assert memory.flush(timeout=30)
    (allergy,) = [m for m in memory.list_memories(user_id="alice") if m.content == ALLERGY]
    assert (allergy.priority, allergy.type) == (95, "persona")
    assert 3 <= len(model.calls_of("rate")) < 41 // 2  # batched: at most 20 memories a call
    report = memory.rating_report()
    assert report is not None and (report.rated, report.waiting, report.failed_calls) == (41, 0, 0)

    result = memory.recall("The doctor wants to give me amoxicillin", user_id="alice")
    assert result is not None
    assert ALLERGY in (result.append_system_context or "") + (result.prepend_context or "")
    # the value the app stored is unchanged by the rating
    item = store.get(("memories", "alice"), allergy.id)
    assert item is not None and item.value == {"content": ALLERGY}


class TypedMemory(BaseModel):
    """A LangMem custom schema that rates its own memories."""

    content: str
    type: Literal["persona", "episodic", "instruction"] = "episodic"
    priority: int = 50


def test_a_value_gives_type_and_priority(rated: tuple[TdaiMemory, ScriptedFormationModel]) -> None:
    memory, model = rated
    store = memory.as_store()
    store.put(("memories", "alice"), "a", {"content": ALLERGY, "type": "persona", "priority": 92})
    store.put(
        ("memories", "alice"),
        "b",
        {"content": TypedMemory(content="Has a dog", type="persona", priority=75).model_dump()},
    )
    store.put(("memories", "alice"), "c", {"content": "Likes jazz", "type": "persona"})
    assert memory.flush(timeout=30)
    a, b, c = (memory.get_memory(k, user_id="alice") for k in "abc")
    assert a is not None and (a.type, a.priority) == ("persona", 92)
    assert b is not None and (b.type, b.priority) == ("persona", 75)
    # only c (no priority in its value) was rated, and its given type was kept
    assert c is not None and (c.type, c.priority) == ("persona", 55)
    (call,) = model.calls_of("rate")
    assert "Likes jazz" in call.user and ALLERGY not in call.user


def test_langmem_custom_schema_sets_type_and_priority() -> None:
    manage = _langmem().create_manage_memory_tool(
        namespace=("memories", "{langgraph_user_id}"), schema=TypedMemory
    )
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        args = {"content": {"content": ALLERGY, "type": "persona", "priority": 95}}
        writer = FakeToolCallingChatModel(
            script=[[{"name": "manage_memory", "args": {**args, "action": "create"}}], "ok"]
        )
        create_agent(writer, tools=[manage], store=memory.as_store()).invoke(
            {"messages": [HumanMessage("I'm allergic to penicillin.")]},
            {"configurable": {"langgraph_user_id": "alice"}},
        )
        (stored,) = memory.list_memories(user_id="alice")
        assert (stored.content, stored.type, stored.priority) == (ALLERGY, "persona", 95)
        result = memory.recall("The doctor wants to give me amoxicillin", user_id="alice")
        assert result is not None and ALLERGY in (result.append_system_context or "")


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"content": "x", "type": "fact"}, "type must be one of"),
        ({"content": "x", "priority": 101}, "priority must be an integer 0-100"),
        ({"content": "x", "priority": -1}, "standing rules"),
        ({"content": "x", "priority": "high"}, "priority must be an integer 0-100"),
        ({"content": {"content": "x", "priority": True}}, "priority must be an integer 0-100"),
    ],
)
def test_an_invalid_rating_in_a_value_is_refused(value: dict[str, Any], needle: str) -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        with pytest.raises(ConfigError, match=needle):
            memory.as_store().put(("memories", "alice"), "k", value)
        assert memory.list_memories(user_id="alice") == []


def test_without_a_formation_model_nothing_is_rated() -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        memory.as_store().put(("memories", "alice"), "k", {"content": ALLERGY})
        memory.add_memory("Has a dog", user_id="alice")
        assert memory.flush(timeout=30)
        assert {(m.type, m.priority) for m in memory.list_memories(user_id="alice")} == {
            ("episodic", 50)
        }
        assert memory.rating_report() is None


def test_a_direct_write_keeps_its_defaults(
    rated: tuple[TdaiMemory, ScriptedFormationModel],
) -> None:
    memory, model = rated
    memory.add_memory(ALLERGY, user_id="alice")
    assert memory.flush(timeout=30)
    (stored,) = memory.list_memories(user_id="alice")
    assert (stored.type, stored.priority) == ("episodic", 50)
    assert model.calls_of("rate") == []


def test_a_slow_model_never_holds_the_write() -> None:
    model = ScriptedFormationModel(rate=_rate, delay_s=1.0)
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config=FAST, extraction_model=model
    ) as memory:
        store = memory.as_store()
        started = time.perf_counter()
        store.put(("memories", "alice"), "k", {"content": ALLERGY})
        assert time.perf_counter() - started < 0.5
        stored = memory.get_memory("k", user_id="alice")
        assert stored is not None and stored.priority == 50  # as written, until rated
        assert memory.flush(timeout=30)
        stored = memory.get_memory("k", user_id="alice")
        assert stored is not None and stored.priority == 95


def test_a_failed_rating_is_retried_and_reported() -> None:
    fail = threading.Event()
    fail.set()

    def flaky(request: RatingRequest) -> Any:
        if fail.is_set():
            fail.clear()
            msg = "provider down"
            raise RuntimeError(msg)
        return _rate(request)

    model = ScriptedFormationModel(rate=flaky)
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config=FAST, extraction_model=model
    ) as memory:
        memory.as_store().put(("memories", "alice"), "k", {"content": ALLERGY})
        deadline = time.monotonic() + 10
        while memory.rating_report().rated == 0 and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.02)
        report = memory.rating_report()
        assert report is not None
        assert (report.rated, report.failed_calls, report.waiting) == (1, 1, 0)
        assert "provider down" in (report.last_error or "")
        stored = memory.get_memory("k", user_id="alice")
        assert stored is not None and stored.priority == 95


def test_an_unusable_answer_leaves_the_memory_waiting() -> None:
    model = ScriptedFormationModel(rate=lambda r: [{"id": "zz", "priority": 90, "type": "persona"}])
    config = {**FAST, "extraction": {**FAST["extraction"], "retryBaseSeconds": 60}}
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config=config, extraction_model=model
    ) as memory:
        memory.as_store().put(("memories", "alice"), "k", {"content": ALLERGY})
        assert memory.flush(timeout=30) is False  # honest: one memory waits for a retry
        report = memory.rating_report()
        assert report is not None and (report.rated, report.waiting) == (0, 1)
        assert "unrated" in (report.last_error or "")
        stored = memory.get_memory("k", user_id="alice")
        assert stored is not None and stored.priority == 50


def test_items_in_sub_namespaces_are_rated_by_their_memory_id(
    rated: tuple[TdaiMemory, ScriptedFormationModel],
) -> None:
    # the same key in two namespaces: the second item lives at a derived memory id (issue 24)
    memory, _ = rated
    store = memory.as_store()
    store.put(("memories", "alice", "health"), "k", {"content": ALLERGY})
    store.put(("memories", "alice", "hobbies"), "k", {"content": "Alice enjoys board games"})
    assert memory.flush(timeout=30)
    ratings = {m.content: (m.type, m.priority) for m in memory.list_memories(user_id="alice")}
    assert ratings == {ALLERGY: ("persona", 95), "Alice enjoys board games": ("episodic", 55)}
    item = store.get(("memories", "alice", "hobbies"), "k")
    assert item is not None and item.value == {"content": "Alice enjoys board games"}
