"""L0 capture on the LCEL path: `wrap_model` records answered turns, `as_runnable` cannot."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import (
    FakeToolCallingChatModel,
    HashEmbeddings,
    ScriptedFormationModel,
)

PROMPT = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])
ALICE: dict[str, Any] = {"configurable": {"user_id": "alice", "thread_id": "chat-7"}}


@tool
def lookup(city: str) -> str:
    """Look up a city."""
    return city


def recorded(memory: TdaiMemory, user_id: str = "alice") -> list[tuple[str, str, str]]:
    """(session, role, text) of every L0 message of the scope, once the writer drained."""
    assert memory.flush(timeout=30)
    hits = memory.search_conversations(
        "seats window aisle tea lyon paris", limit=100, user_id=user_id, min_score=0.0
    )
    order = {"user": 0, "assistant": 1}
    return sorted((h.session_key, h.role, h.content) for h in hits if h.role in order)


def count(memory: TdaiMemory, user_id: str = "alice") -> int:
    assert memory.flush(timeout=30)
    return memory.stats(user_id=user_id).messages


def test_a_wrapped_model_records_the_turn_it_answers(empty_mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["Window seats, noted."])
    chain = PROMPT | empty_mem.wrap_model(model)
    chain.invoke({"q": "I prefer window seats"}, ALICE)
    assert recorded(empty_mem) == [
        ("chat-7", "assistant", "Window seats, noted."),
        ("chat-7", "user", "I prefer window seats"),  # as typed, without the injection
    ]
    assert count(empty_mem) == 2


def test_only_the_final_answer_of_a_tool_loop_is_recorded(empty_mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[[{"name": "lookup", "args": {"city": "Lyon"}}], "Lyon has great tea."]
    )
    bound = empty_mem.wrap_model(model).bind_tools([lookup])
    first = bound.invoke([HumanMessage("Tea in Lyon?")], ALICE)
    assert first.tool_calls and count(empty_mem) == 0  # asking for a tool ends no turn
    bound.invoke([HumanMessage("Tea in Lyon?"), first], ALICE)
    assert recorded(empty_mem) == [
        ("chat-7", "assistant", "Lyon has great tea."),
        ("chat-7", "user", "Tea in Lyon?"),
    ]
    assert count(empty_mem) == 2  # one turn, recorded once


async def test_streams_and_async_calls_record_once(empty_mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["Aisle seats.", "Paris tea.", "Window tea."])
    wrapped = empty_mem.wrap_model(model, user_id="alice", session_key="s")
    chunks = list(wrapped.stream("seats?"))
    assert "".join(str(c.content) for c in chunks) == "Aisle seats."
    await wrapped.ainvoke("tea in paris?")
    [c async for c in wrapped.astream("window tea?")]
    assert count(empty_mem) == 6
    assert ("s", "assistant", "Aisle seats.") in recorded(empty_mem)


def test_capture_can_be_switched_off(empty_mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["one", "two"])
    empty_mem.wrap_model(model, user_id="alice", capture=False).invoke("window seats?")
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"capture": {"enabled": False}}
    ) as off:
        off.wrap_model(model, user_id="alice").invoke("window seats?")
        assert count(off) == 0
    assert count(empty_mem) == 0
    with pytest.raises(ValueError, match="capture"):
        empty_mem.wrap_model(model, capture="yes")  # type: ignore[arg-type]


def test_the_recall_step_alone_records_nothing(empty_mem: TdaiMemory) -> None:
    chain = PROMPT | empty_mem.as_runnable() | FakeToolCallingChatModel(script=["ok"])
    chain.invoke({"q": "window seats"}, ALICE)
    assert count(empty_mem) == 0  # it never sees the answer


def test_the_generate_api_records_too(empty_mem: TdaiMemory) -> None:
    wrapped = empty_mem.wrap_model(
        FakeToolCallingChatModel(script=["Tea."]), user_id="alice", session_key="g"
    )
    wrapped.generate([[HumanMessage("tea?")]])
    assert recorded(empty_mem) == [("g", "assistant", "Tea."), ("g", "user", "tea?")]
    assert count(empty_mem) == 2


def test_chains_feed_memory_formation() -> None:
    config = {
        "pipeline": {"enabled": True, "everyNConversations": 1, "l2MinIntervalSeconds": 0},
        "persona": {"enabled": False},
    }
    with TdaiMemory.open(
        None,
        embeddings=HashEmbeddings(dims=64),
        config=config,
        extraction_model=ScriptedFormationModel(),
    ) as memory:
        chain = PROMPT | memory.wrap_model(FakeToolCallingChatModel(script=["Noted."]))
        chain.invoke({"q": "I am vegetarian."}, ALICE)
        assert memory.flush(timeout=30)  # the writer, then formation, then vectors
        assert [m.content for m in memory.list_memories(user_id="alice")] == ["I am vegetarian."]
