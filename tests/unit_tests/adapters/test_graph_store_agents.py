"""`TdaiStore` end to end: `create_agent(..., store=memory.as_store())` with a tool using
`runtime.store`, and LangMem's memory tools writing through it (issue 16 item 1).

Each test then runs a second turn with `memory.middleware()` and checks that automatic recall
put what the tool wrote in front of the model.
"""

from __future__ import annotations

import importlib
import json
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings


@pytest.fixture
def mem() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        yield memory


def _text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def test_create_agent_tool_writes_and_reads_runtime_store(mem: TdaiMemory) -> None:
    @tool
    def remember(fact: str, runtime: ToolRuntime) -> str:
        """Remember a fact about the user."""
        assert runtime.store is not None
        user = runtime.config["configurable"]["user_id"]
        runtime.store.put(("memories", user), uuid.uuid4().hex, {"content": fact})
        return "saved"

    @tool
    def lookup(query: str, runtime: ToolRuntime) -> str:
        """Look up facts about the user."""
        assert runtime.store is not None
        user = runtime.config["configurable"]["user_id"]
        return json.dumps([i.value for i in runtime.store.search(("memories", user), query=query)])

    store = mem.as_store()
    config: Any = {"configurable": {"user_id": "alice"}}
    writer = FakeToolCallingChatModel(
        script=[
            [{"name": "remember", "args": {"fact": "Alice prefers aisle seats on trains."}}],
            [{"name": "lookup", "args": {"query": "aisle seats"}}],
            "Noted.",
        ]
    )
    agent = create_agent(writer, tools=[remember, lookup], store=store)
    out = agent.invoke({"messages": [HumanMessage("I like aisle seats on trains.")]}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert results[0].content == "saved"
    assert "Alice prefers aisle seats on trains." in str(results[1].content)
    (item,) = store.search(("memories", "alice"))
    assert item.value == {"content": "Alice prefers aisle seats on trains."}
    assert store.search(("memories", "bob")) == []

    reader = FakeToolCallingChatModel(script=["You like aisle seats."])
    second = create_agent(
        reader, tools=[remember, lookup], store=store, middleware=[mem.middleware()]
    )
    second.invoke({"messages": [HumanMessage("Which seats do I like on trains?")]}, config)
    assert "aisle seats" in _text(reader.requests[0])


def _langmem() -> Any:
    try:
        with warnings.catch_warnings():  # langmem's dependencies use deprecated langgraph names
            warnings.simplefilter("ignore")
            return importlib.import_module("langmem")
    except ImportError as exc:  # an optional test dependency (dev group)
        pytest.skip(f"langmem is not installed ({exc}); pip install langmem")


def test_langmem_tools_write_through_tdai_store_and_recall_injects(mem: TdaiMemory) -> None:
    langmem = _langmem()
    namespace = ("memories", "{langgraph_user_id}")
    manage = langmem.create_manage_memory_tool(namespace=namespace)
    search = langmem.create_search_memory_tool(namespace=namespace)
    store = mem.as_store()
    config: Any = {"configurable": {"langgraph_user_id": "alice", "user_id": "alice"}}

    writer = FakeToolCallingChatModel(
        script=[
            [
                {
                    "name": "manage_memory",
                    "args": {
                        "content": "Alice is training for the Berlin marathon.",
                        "action": "create",
                    },
                }
            ],
            [{"name": "search_memory", "args": {"query": "Berlin marathon"}}],
            "Good luck with the marathon!",
        ]
    )
    agent = create_agent(writer, tools=[manage, search], store=store)
    out = agent.invoke({"messages": [HumanMessage("I'm training for Berlin.")]}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert results[0].status == "success" and str(results[0].content).startswith("created memory")
    found = json.loads(str(results[1].content))
    assert [f["value"] for f in found] == [
        {"content": "Alice is training for the Berlin marathon."}
    ]
    assert found[0]["namespace"] == ["memories", "alice"]
    (item,) = store.search(("memories", "alice"))
    assert mem.get_memory(item.key, user_id="alice") is not None  # a memory of alice's scope

    # update through the tool, then the next turn's recall injects the new text
    update = FakeToolCallingChatModel(
        script=[
            [
                {
                    "name": "manage_memory",
                    "args": {
                        "content": "Alice is training for the Berlin marathon in September.",
                        "action": "update",
                        "id": item.key,
                    },
                }
            ],
            "Updated.",
        ]
    )
    create_agent(update, tools=[manage, search], store=store).invoke(
        {"messages": [HumanMessage("It's in September.")]}, config
    )
    assert [i.value["content"] for i in store.search(("memories", "alice"))] == [
        "Alice is training for the Berlin marathon in September."
    ]

    reader = FakeToolCallingChatModel(script=["September."])
    follow = create_agent(
        reader, tools=[manage, search], store=store, middleware=[mem.middleware()]
    )
    follow.invoke({"messages": [HumanMessage("When is my Berlin marathon?")]}, config)
    assert "Berlin marathon in September" in _text(reader.requests[0])
    other: Any = {"configurable": {"langgraph_user_id": "bob", "user_id": "bob"}}
    bob = FakeToolCallingChatModel(script=["I don't know."])
    create_agent(bob, tools=[manage, search], store=store, middleware=[mem.middleware()]).invoke(
        {"messages": [HumanMessage("When is my Berlin marathon?")]}, other
    )
    assert "Berlin marathon" not in _text(bob.requests[0]).replace(
        "When is my Berlin marathon?", ""
    )


def test_langmem_search_right_after_create_finds_the_memory(mem: TdaiMemory) -> None:
    # issue 24: search_memory("allergy") returned [] right after it stored the allergy, because
    # the new memory had no vector yet and its words do not contain "allergy"
    langmem = _langmem()
    namespace = ("memories", "{langgraph_user_id}")
    tools = [
        langmem.create_manage_memory_tool(namespace=namespace),
        langmem.create_search_memory_tool(namespace=namespace),
    ]
    model = FakeToolCallingChatModel(
        script=[
            [
                {
                    "name": "manage_memory",
                    "args": {"content": "User is allergic to penicillin", "action": "create"},
                }
            ],
            [{"name": "search_memory", "args": {"query": "allergy"}}],
            "Noted: no penicillin.",
        ]
    )
    config: Any = {"configurable": {"langgraph_user_id": "alice"}}
    agent = create_agent(model, tools=tools, store=mem.as_store())
    out = agent.invoke({"messages": [HumanMessage("I'm allergic to penicillin.")]}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    found = json.loads(str(results[1].content))
    assert [f["value"] for f in found] == [{"content": "User is allergic to penicillin"}]
    assert found[0]["score"] is not None


def test_langmem_store_manager_writes_memories_that_recall_finds(mem: TdaiMemory) -> None:
    langmem = _langmem()
    store = mem.as_store()
    fact = "Alice prefers aisle seats on long flights."
    model = FakeToolCallingChatModel(script=[[{"name": "Memory", "args": {"content": fact}}]])
    manager = langmem.create_memory_store_manager(
        model, namespace=("memories", "{langgraph_user_id}"), store=store
    )
    config: Any = {"configurable": {"langgraph_user_id": "alice"}}
    turn = [HumanMessage("I always pick an aisle seat on long flights."), AIMessage("Noted.")]
    (written,) = manager.invoke({"messages": turn}, config)
    assert written["namespace"] == ("memories", "alice")
    assert written["value"] == {"kind": "Memory", "content": {"content": fact}}
    (item,) = store.search(("memories", "alice"))
    assert item.value == written["value"]  # the value comes back whole
    # the memory's text is the fact itself (not the value's JSON), so search and recall find it
    assert [m.content for m in mem.list_memories(user_id="alice")] == [fact]
    (hit,) = store.search(("memories", "alice"), query="aisle seat")
    assert hit.key == written["key"]
    result = mem.recall("Which seat do I like on flights?", user_id="alice")
    assert result is not None
    assert fact in (result.prepend_context or "")
    assert mem.list_memories(user_id="bob") == []
