"""The legacy `AgentExecutor` example (langchain-classic): scoped tools, turn budget, capture."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("langchain_classic")

from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.prompts import ChatPromptTemplate

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.legacy import ExecutorMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel
from langchain_tdai_recall.tools import BUDGET_EXHAUSTED_MESSAGE

from ._helpers import last_human

SEARCH = {"name": "tdai_memory_search", "args": {"query": "window seats"}}
CONVO = {"name": "tdai_conversation_search", "args": {"query": "seats"}}
PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You are a helpful assistant."),
        ("human", "{input}"),
        ("placeholder", "{agent_scratchpad}"),
    ]
)


def _executor(memory: TdaiMemory, model: FakeToolCallingChatModel) -> tuple[ExecutorMemory, Any]:
    session = ExecutorMemory(memory, user_id="alice", session_key="chat-1")
    agent = create_tool_calling_agent(session.wrap_model(model), session.tools, PROMPT)
    executor = AgentExecutor(agent=agent, tools=session.tools, return_intermediate_steps=True)
    return session, session.wrap_executor(executor)


@pytest.mark.parametrize("use_async", [False, True])
async def test_executor_example(mem: TdaiMemory, use_async: bool) -> None:
    model = FakeToolCallingChatModel(
        script=[
            [SEARCH, SEARCH, SEARCH, SEARCH, CONVO],
            "You like window seats.",
            [SEARCH],
            "Still window seats.",
        ]
    )
    session, turn = _executor(mem, model)

    async def run(text: str) -> dict[str, Any]:
        if use_async:
            return await turn.ainvoke({"input": text})
        return turn.invoke({"input": text})

    out = await run("Which seats do I like on long flights?")
    assert out["output"] == "You like window seats."
    observations = [obs for _, obs in out["intermediate_steps"]]
    refused = BUDGET_EXHAUSTED_MESSAGE.format(limit=3)
    assert sum(o == refused for o in observations) == 2
    assert sum(o != refused for o in observations) == 3
    assert (session.budget.used, session.budget.blocked) == (3, 2)
    if not use_async:  # sequential execution grants in call order
        assert [o == refused for o in observations] == [False, False, False, True, True]

    # The model saw the recall, with the explicit scope (the executor passes no config).
    human = last_human(model.requests[0])
    assert str(human.content).startswith("<relevant-memories>")
    assert "window seats" in str(human.content)
    assert "aisle" not in str(human.content)

    # The next turn resets the budget, and the first turn was captured to L0.
    out = await run("And on short flights?")
    assert [o == refused for _, o in out["intermediate_steps"]] == [False]
    mem.flush()
    hits = mem.search_conversations("window seats", user_id="alice")
    assert {h.content for h in hits} >= {
        "Which seats do I like on long flights?",
        "You like window seats.",
    }
    assert all(h.session_key == "chat-1" for h in hits)


def test_turn_context_manager(mem: TdaiMemory) -> None:
    session = ExecutorMemory(mem, user_id="alice")
    search = session.tools[0]
    with session.turn():
        results = [search.invoke({"query": "seats"}) for _ in range(4)]
    assert results[-1] == BUDGET_EXHAUSTED_MESSAGE.format(limit=3)
    with session.turn() as budget:
        assert search.invoke({"query": "seats"}) != results[-1]
        assert budget.used == 1


def test_bad_arguments(mem: TdaiMemory) -> None:
    with pytest.raises(ValueError, match="session_key"):
        ExecutorMemory(mem, user_id="alice", session_key="")
    with pytest.raises(ValueError, match="runnable"):
        ExecutorMemory(mem, user_id="alice").wrap_executor(object())  # type: ignore[arg-type]


def test_tools_outside_a_turn_warn_once(
    mem: TdaiMemory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the turn wrapper the budget never resets and nothing is recorded: say so, once."""
    turn_module = sys.modules.get("langchain_tdai_recall._turn.budget")  # loaded by legacy.py
    if turn_module is not None:  # forget a warning an earlier test may have triggered
        monkeypatch.setattr(turn_module, "_OUTSIDE_TURN_WARNED", threading.Event())
    model = FakeToolCallingChatModel(script=[[SEARCH, SEARCH], "one", [SEARCH, SEARCH], "two"])
    session = ExecutorMemory(mem, user_id="alice", session_key="chat-1")
    agent = create_tool_calling_agent(session.wrap_model(model), session.tools, PROMPT)
    executor = AgentExecutor(agent=agent, tools=session.tools, return_intermediate_steps=True)
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall"):
        executor.invoke({"input": "Which seats?"})
        second = executor.invoke({"input": "Which seats again?"})
    warnings = [r.getMessage() for r in caplog.records if "outside a turn" in r.getMessage()]
    assert len(warnings) == 1
    assert "wrap_executor" in warnings[0]
    refused = BUDGET_EXHAUSTED_MESSAGE.format(limit=3)
    assert [o == refused for _, o in second["intermediate_steps"]] == [False, True]
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall"), session.turn():
        session.tools[0].invoke({"query": "seats"})
    assert len([r for r in caplog.records if "outside a turn" in r.getMessage()]) == 1


def test_executor_turn_is_captured_through_the_one_path(
    mem: TdaiMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_tdai_recall.types import Scope

    handed: list[tuple[Any, Scope, str]] = []
    monkeypatch.setattr(
        mem,
        "_capture_turn",
        lambda messages, *, scope, session_key: handed.append((messages, scope, session_key)),
    )
    model = FakeToolCallingChatModel(script=["A window seat."])
    _session, turn = _executor(mem, model)
    turn.invoke({"input": "Which seat?"})
    assert handed == [
        (
            [
                {"role": "user", "content": "Which seat?"},
                {"role": "assistant", "content": "A window seat."},
            ],
            Scope(user_id="alice"),
            "chat-1",
        )
    ]


def test_the_executor_turn_is_recorded_once(empty_mem: TdaiMemory) -> None:
    """The turn wrapper records the turn; the wrapped model inside it must not record it again."""
    model = FakeToolCallingChatModel(script=[[SEARCH], "Window seats."])
    _, turn = _executor(empty_mem, model)
    turn.invoke({"input": "Which seats do I like?"})
    assert empty_mem.flush(timeout=30)
    assert empty_mem.stats(user_id="alice").messages == 2
