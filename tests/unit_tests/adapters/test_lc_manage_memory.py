"""`tdai_manage_memory` registered by `tools.manage_memory`: agents, executors, its own cap."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall._turn import MANAGE_BUDGET_EXHAUSTED_MESSAGE, MANAGE_MEMORY_TOOL
from langchain_tdai_recall.formation.tool import manage_budget
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings
from langchain_tdai_recall.tools import BUDGET_EXHAUSTED_MESSAGE, search_budget

from ._helpers import user

CONFIG: dict[str, Any] = {"tools": {"manageMemory": True, "maxManageCallsPerTurn": 2}}
SEARCH = {"name": "tdai_memory_search", "args": {"query": "tea"}}


def remember(text: str) -> dict[str, Any]:
    return {"name": MANAGE_MEMORY_TOOL, "args": {"action": "remember", "content": text}}


@pytest.fixture
def writable() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=CONFIG) as memory:
        yield memory


def contents(memory: TdaiMemory, user_id: str = "alice") -> list[str]:
    return sorted(m.content for m in memory.list_memories(user_id=user_id))


def test_the_config_switch_registers_the_tool_after_the_three_others(
    writable: TdaiMemory,
) -> None:
    names = [t.name for t in writable.tools()]
    assert names == [
        "tdai_memory_search",
        "tdai_conversation_search",
        "tdai_read_scene",
        MANAGE_MEMORY_TOOL,
    ]
    assert "At most 2 calls per turn" in writable.tools()[3].description
    assert MANAGE_MEMORY_TOOL in {t.name for t in writable.middleware().tools}
    with TdaiMemory.open(None, embeddings=None) as default:
        assert MANAGE_MEMORY_TOOL not in {t.name for t in default.tools()}
        assert MANAGE_MEMORY_TOOL not in {t.name for t in default.middleware().tools}


def _results(messages: list[Any], turn: int) -> list[ToolMessage]:
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    start = humans[turn]
    end = humans[turn + 1] if turn + 1 < len(humans) else len(messages)
    return [m for m in messages[start:end] if isinstance(m, ToolMessage)]


def test_the_per_turn_budget_counts_memory_writes_apart_from_searches(
    writable: TdaiMemory,
) -> None:
    model = FakeToolCallingChatModel(
        script=[
            [
                remember("Alice drinks green tea."),
                SEARCH,
                remember("Alice lives in Lyon."),
                SEARCH,
                remember("Alice plays chess."),
                SEARCH,
            ],
            "Noted.",
            [remember("Alice has a cat.")],
            "Noted too.",
        ]
    )
    events: list[Any] = []
    agent = create_agent(
        model, middleware=[writable.middleware(on_turn=events.append)], checkpointer=InMemorySaver()
    )
    config: dict[str, Any] = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke(user("Remember a few things"), config, context={"user_id": "alice"})
    results = _results(list(out["messages"]), 0)
    by_name = {
        name: [r for r in results if r.name == name]
        for name in (MANAGE_MEMORY_TOOL, "tdai_memory_search")
    }
    refused_write = MANAGE_BUDGET_EXHAUSTED_MESSAGE.format(limit=2)
    assert [r.status for r in by_name[MANAGE_MEMORY_TOOL]] == ["success", "success", "error"]
    assert by_name[MANAGE_MEMORY_TOOL][2].content == refused_write
    # the three searches keep their own budget of 3: none of them is refused
    assert [r.status for r in by_name["tdai_memory_search"]] == ["success"] * 3
    assert BUDGET_EXHAUSTED_MESSAGE.format(limit=3) not in [r.content for r in results]
    assert events[0]["tool_calls_used"] == 3 and events[0]["tool_calls_blocked"] == 0
    assert contents(writable) == ["Alice drinks green tea.", "Alice lives in Lyon."]

    # the next turn starts with a fresh budget
    out = agent.invoke(user("One more"), config, context={"user_id": "alice"})
    (result,) = _results(list(out["messages"]), 1)
    assert result.status == "success" and result.content.startswith("Remembered (id ")
    assert "Alice has a cat." in contents(writable)


async def test_async_agents_count_writes_the_same_way(writable: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[[remember("one"), remember("two"), remember("three")], "ok"]
    )
    agent = create_agent(model, middleware=[writable.middleware()])
    out = await agent.ainvoke(user("remember"), context={"user_id": "alice"})
    statuses = [m.status for m in out["messages"] if isinstance(m, ToolMessage)]
    assert statuses == ["success", "success", "error"]
    assert contents(writable) == ["one", "two"]


def test_state_budgets_count_only_their_own_tools() -> None:
    calls = [
        {"name": MANAGE_MEMORY_TOOL, "args": {"action": "forget", "memory_id": "m1"}, "id": "a"},
        {"name": "tdai_memory_search", "args": {"query": "q"}, "id": "b"},
        {"name": MANAGE_MEMORY_TOOL, "args": {"action": "nonsense"}, "id": "c"},  # invalid
        {"name": MANAGE_MEMORY_TOOL, "args": {"action": "remember", "content": "x"}, "id": "d"},
    ]
    messages = [HumanMessage("hi"), AIMessage("", tool_calls=calls)]
    writes = manage_budget(1)
    assert writes.usage(messages) == (1, 1)  # the invalid call costs nothing
    first = {"action": "forget", "content": None, "memory_id": "m1", "type": "persona"}
    assert writes.grant(messages, name=MANAGE_MEMORY_TOOL, call_id="a", args=first) is True
    assert search_budget(3).usage(messages) == (1, 0)


def test_executor_memory_resets_the_write_budget_every_turn(writable: TdaiMemory) -> None:
    pytest.importorskip("langchain_classic")
    from langchain_tdai_recall.legacy import ExecutorMemory

    session = ExecutorMemory(writable, user_id="alice")
    tool = next(t for t in session.tools if t.name == MANAGE_MEMORY_TOOL)
    with session.turn():
        outs = [tool.invoke({"action": "remember", "content": f"fact {i}"}) for i in range(3)]
    assert outs[2] == MANAGE_BUDGET_EXHAUSTED_MESSAGE.format(limit=2)
    assert (session.manage_budget.used, session.manage_budget.blocked) == (2, 1)
    with session.turn():
        assert tool.invoke({"action": "remember", "content": "fact 3"}).startswith("Remembered")
    assert contents(writable) == ["fact 0", "fact 1", "fact 3"]
