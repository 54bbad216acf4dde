"""The per-turn cap of the two search tools, including parallel tool calls."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings
from langchain_tdai_recall.tools import BUDGET_EXHAUSTED_MESSAGE, ToolBudget, search_budget

from ._helpers import user

SEARCH = {"name": "tdai_memory_search", "args": {"query": "seats"}}
CONVO = {"name": "tdai_conversation_search", "args": {"query": "seats"}}
SCENE = {"name": "tdai_read_scene", "args": {"name": "travel"}}
REFUSED = BUDGET_EXHAUSTED_MESSAGE.format(limit=3)
Mode = Literal["invoke", "ainvoke", "astream"]


async def _run(agent: Any, inputs: Any, config: dict[str, Any], mode: Mode) -> list[Any]:
    if mode == "invoke":
        return list(agent.invoke(inputs, config, context={"user_id": "alice"})["messages"])
    if mode == "ainvoke":
        out = await agent.ainvoke(inputs, config, context={"user_id": "alice"})
        return list(out["messages"])
    last: dict[str, Any] = {}
    async for chunk in agent.astream(
        inputs, config, context={"user_id": "alice"}, stream_mode="values"
    ):
        last = chunk
    return list(last["messages"])


def _tool_results(messages: list[Any], since_human: int) -> dict[str, ToolMessage]:
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    start = humans[since_human]
    return {m.tool_call_id: m for m in messages[start:] if isinstance(m, ToolMessage)}


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "astream"])
async def test_parallel_calls_three_run_two_refused_then_reset(mem: TdaiMemory, mode: Mode) -> None:
    model = FakeToolCallingChatModel(
        script=[
            [SEARCH, SEARCH, SEARCH, SEARCH, CONVO],
            "Answer one.",
            [SEARCH],
            "Answer two.",
        ]
    )
    events: list[Any] = []
    agent = create_agent(
        model,
        middleware=[mem.middleware(on_turn=events.append)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": f"cap-{mode}"}}

    messages = await _run(agent, user("Which seats do I prefer?"), config, mode)
    results = _tool_results(messages, 0)
    assert len(results) == 5
    ai = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
    ids = [c["id"] for c in ai.tool_calls]
    statuses = [results[i].status for i in ids]
    assert statuses == ["success", "success", "success", "error", "error"]
    assert [results[i].content for i in ids[3:]] == [REFUSED, REFUSED]
    assert all(
        "Found" in str(results[i].content) or "No matching" in str(results[i].content)
        for i in ids[:3]
    )
    assert "answer now with the information you already have" in REFUSED
    assert events[0]["tool_calls_used"] == 3
    assert events[0]["tool_calls_blocked"] == 2

    # The next turn starts with a fresh budget.
    messages = await _run(agent, user("And on short flights?"), config, mode)
    results = _tool_results(messages, 1)
    assert [m.status for m in results.values()] == ["success"]
    assert events[1]["tool_calls_used"] == 1
    assert events[1]["tool_calls_blocked"] == 0


def test_budget_spans_model_calls_of_one_turn(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[[SEARCH, CONVO], [SEARCH, SCENE, CONVO], [SEARCH], "done"]
    )
    agent = create_agent(model, middleware=[mem.middleware(user_id="alice")])
    messages = agent.invoke(user("seats?"))["messages"]
    by_id = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    verdicts = [(c["name"], by_id[c["id"]].status) for c in calls]
    assert verdicts == [
        ("tdai_memory_search", "success"),
        ("tdai_conversation_search", "success"),
        ("tdai_memory_search", "success"),
        ("tdai_read_scene", "success"),  # never counted
        ("tdai_conversation_search", "error"),
        ("tdai_memory_search", "error"),
    ]
    # The model saw a ToolMessage for every call before its next request.
    for request in model.requests[1:]:
        answered = {m.tool_call_id for m in request if isinstance(m, ToolMessage)}
        asked = {c["id"] for m in request if isinstance(m, AIMessage) for c in m.tool_calls}
        assert asked <= answered


def test_tool_list_never_changes_when_the_budget_is_used(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=[[SEARCH] * 4, [SEARCH], "done"])
    agent = create_agent(model, middleware=[mem.middleware(user_id="alice")])
    agent.invoke(user("seats?"))
    assert len({tuple(n) for n in model.tool_names}) == 1


def test_cap_from_config() -> None:
    config = {"tools": {"max_calls_per_turn": 1}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        model = FakeToolCallingChatModel(script=[[SEARCH, SEARCH], "done"])
        agent = create_agent(model, middleware=[memory.middleware(user_id="alice")])
        messages = agent.invoke(user("seats?"))["messages"]
        statuses = [m.status for m in messages if isinstance(m, ToolMessage)]
        assert statuses == ["success", "error"]  # in call order
        assert messages[3].content == BUDGET_EXHAUSTED_MESSAGE.format(limit=1)
        assert "budget of 1 calls per turn" in memory.tools()[0].description


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_tools_enforce_the_cap_without_the_middleware(mem: TdaiMemory, mode: Mode) -> None:
    """`memory.tools()` given straight to `create_agent` derives the cap from graph state."""
    model = FakeToolCallingChatModel(script=[[SEARCH, SEARCH, SEARCH, SEARCH, CONVO], "done"])
    agent = create_agent(model, tools=mem.tools(user_id="alice"))
    messages = await _run(agent, user("seats?"), {}, mode)
    ai = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
    results = _tool_results(messages, 0)
    statuses = [results[c["id"]].status for c in ai.tool_calls]
    assert statuses == ["success", "success", "success", "error", "error"]
    assert results[ai.tool_calls[4]["id"]].content == REFUSED


def _call(name: str, i: int) -> ToolCall:
    args = {"name": "travel"} if name == "tdai_read_scene" else {"query": f"q{i}"}
    return ToolCall(name=name, args=args, id=f"c{i}", type="tool_call")


def test_decision_helpers_are_order_based() -> None:
    turn = [
        HumanMessage("old turn", id="h0"),
        AIMessage("", tool_calls=[_call("tdai_memory_search", 0)] * 1),
        HumanMessage("new turn", id="h1"),
        AIMessage(
            "",
            tool_calls=[
                _call("tdai_memory_search", 1),
                _call("tdai_read_scene", 2),
                _call("tdai_conversation_search", 3),
            ],
        ),
        ToolMessage("x", tool_call_id="c1"),
        AIMessage(
            "",
            tool_calls=[_call("tdai_memory_search", 4), _call("tdai_memory_search", 5)],
        ),
    ]
    budget = search_budget(3)

    def position(call_id: str, name: str = "tdai_memory_search") -> list[int]:
        return budget.positions(turn, name=name, call_id=call_id)

    assert position("c0") == []  # earlier turn
    assert [position("c1"), position("c3", "tdai_conversation_search")] == [[0], [1]]
    assert [position("c4"), position("c5")] == [[2], [3]]
    assert position("c2", "tdai_read_scene") == []  # not a capped tool
    normalised = {"limit": 5, "type": None, "scene": None}
    verdicts = [
        budget.grant(
            turn, name="tdai_memory_search", call_id=f"c{i}", args={"query": f"q{i}", **normalised}
        )
        for i in (1, 4, 5)
    ]
    assert verdicts == [True, True, False]
    assert budget.usage(turn) == (3, 1)
    summary = HumanMessage("summary", additional_kwargs={"lc_source": "summarization"})
    assert budget.positions(
        [turn[2], summary, *turn[3:]], name="tdai_memory_search", call_id="c5"
    ) == [3]


def test_tool_budget() -> None:
    budget = ToolBudget(2)
    assert [budget.try_acquire() for _ in range(3)] == [True, True, False]
    assert (budget.used, budget.blocked) == (2, 1)
    budget.reset()
    assert (budget.used, budget.blocked) == (0, 0)
    with pytest.raises(ValueError, match="limit"):
        ToolBudget(0)


def test_explicit_budget_and_run_budget_outside_a_graph(mem: TdaiMemory) -> None:
    from langchain_core.runnables import RunnableLambda

    budget = ToolBudget(2)
    search = mem.tools(user_id="alice", budget=budget)[0]
    outs = [search.invoke({"query": "seats"}) for _ in range(3)]
    assert outs[2] == BUDGET_EXHAUSTED_MESSAGE.format(limit=2)
    assert not any(o == outs[2] for o in outs[:2])
    budget.reset()
    assert search.invoke({"query": "seats"}) != outs[2]

    # Without a budget or graph state, one parent run is one turn.
    free = mem.tools(user_id="alice")[0]
    assert all(free.invoke({"query": "seats"}) != REFUSED for _ in range(5))  # standalone calls

    def four_calls(_: Any, config: Any) -> list[Any]:
        return [free.invoke({"query": "seats"}, config) for _ in range(4)]

    results = RunnableLambda(four_calls).invoke(None)
    assert [r == REFUSED for r in results] == [False, False, False, True]
    assert RunnableLambda(four_calls).invoke(None)[0] != REFUSED  # a new run, a new budget


# -- defects of issue 8 ----------------------------------------------------------------------------

QUERIES = ("window seats", "peanuts allergy", "Tokyo conference", "bullet points", "aisle seats")
EXPECTED_HITS = ("window seats", "peanuts", "Tokyo")


def _agent_for(memory: TdaiMemory, model: FakeToolCallingChatModel, wiring: str, **kw: Any) -> Any:
    if wiring == "middleware":
        return create_agent(model, middleware=[memory.middleware(**kw)])
    return create_agent(model, tools=memory.tools())


def _tool_messages(messages: list[Any]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("call_id", ["dup", "", None])
@pytest.mark.parametrize("wiring", ["middleware", "tools"])
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_cap_holds_with_duplicate_empty_or_missing_call_ids(
    mem: TdaiMemory, call_id: str | None, wiring: str, mode: Mode
) -> None:
    """Five search calls sharing one id (or none) in one message: the first three run."""
    calls = [
        {"name": "tdai_memory_search", "args": {"query": q}, "id": call_id, "type": "tool_call"}
        for q in QUERIES
    ]
    events: list[Any] = []
    model = FakeToolCallingChatModel(script=[AIMessage("", tool_calls=calls), "done"])
    kw = {"on_turn": events.append} if wiring == "middleware" else {}
    agent = _agent_for(mem, model, wiring, **kw)

    results = _tool_messages(await _run(agent, user("seats?"), {}, mode))

    assert [m.status for m in results] == ["success"] * 3 + ["error"] * 2
    for message, expected in zip(results[:3], EXPECTED_HITS, strict=True):
        assert expected in str(message.content)  # each ran its own query, in call order
    assert [m.content for m in results[3:]] == [REFUSED, REFUSED]
    if events:
        assert (events[0]["tool_calls_used"], events[0]["tool_calls_blocked"]) == (3, 2)


@pytest.mark.parametrize("wiring", ["middleware", "tools"])
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_cap_holds_for_identical_calls_with_one_id(
    mem: TdaiMemory, wiring: str, mode: Mode
) -> None:
    """Identical calls (same id, same arguments) cannot be told apart: exactly three run."""
    call = {
        "name": "tdai_memory_search",
        "args": {"query": "seats"},
        "id": "same",
        "type": "tool_call",
    }
    model = FakeToolCallingChatModel(script=[AIMessage("", tool_calls=[call] * 5), "done"])
    agent = _agent_for(mem, model, wiring)
    results = _tool_messages(await _run(agent, user("seats?"), {}, mode))
    assert sorted(m.status for m in results) == ["error"] * 2 + ["success"] * 3
    assert sum(m.content == REFUSED for m in results) == 2


@pytest.mark.parametrize("wiring", ["middleware", "tools"])
def test_calls_with_invalid_arguments_do_not_use_the_budget(mem: TdaiMemory, wiring: str) -> None:
    invalid = [
        {"name": "tdai_memory_search", "args": {"query": "   "}},
        {"name": "tdai_memory_search", "args": {"query": "seats", "limit": 99}},
        {"name": "tdai_conversation_search", "args": {}},
    ]
    valid = [SEARCH, CONVO, SEARCH]
    events: list[Any] = []
    model = FakeToolCallingChatModel(script=[invalid + valid, "done"])
    kw = {"user_id": "alice", "on_turn": events.append} if wiring == "middleware" else {}
    agent = _agent_for(mem, model, wiring, **kw)
    results = _tool_messages(agent.invoke(user("seats?"), context={"user_id": "alice"})["messages"])
    assert [m.status for m in results] == ["error"] * 3 + ["success"] * 3
    assert all(str(m.content).startswith("Invalid arguments") for m in results[:3])
    if events:
        assert (events[0]["tool_calls_used"], events[0]["tool_calls_blocked"]) == (3, 0)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "astream"])
async def test_refused_tool_messages_come_back_in_call_order(mode: Mode) -> None:
    config = {"tools": {"max_calls_per_turn": 1}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        model = FakeToolCallingChatModel(script=[[SEARCH, SCENE, CONVO, SEARCH], "done"])
        agent = create_agent(model, middleware=[memory.middleware()], checkpointer=InMemorySaver())
        messages = await _run(agent, user("seats?"), {"configurable": {"thread_id": mode}}, mode)
        ai = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        results = _tool_messages(messages)
        assert [m.tool_call_id for m in results] == [c["id"] for c in ai.tool_calls]
        assert [m.status for m in results] == ["success", "error", "error", "error"]
        assert [m.content for m in results[2:]] == [REFUSED.replace("3", "1")] * 2
