"""Choosing which memory tools an agent gets, beside LangMem's (issue 24 item 5).

`middleware(tools=[names])`, `memory.tools(names=...)` and `create_memory_tools(names=...)` add
only the chosen tools, and the memory-tools guide in the system context names only the tools
the model has, byte-stable from turn to turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

from langchain_tdai_recall import TdaiConfig, TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings
from langchain_tdai_recall.tools import create_memory_tools

ALL = ["tdai_memory_search", "tdai_conversation_search", "tdai_read_scene"]


@pytest.fixture
def mem() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(embeddings=HashEmbeddings(dims=32)) as memory:
        memory.add_memory("Alice prefers window seats", type="persona", user_id="alice")
        yield memory


@tool
def manage_memory(content: str) -> str:
    """Stand-in for LangMem's manage_memory tool."""
    return "stored"


@tool
def search_memory(query: str) -> str:
    """Stand-in for LangMem's search_memory tool."""
    return "[]"


def _system_text(request: list[BaseMessage]) -> str:
    first = request[0]
    assert first.type == "system"
    return first.text


def _guide(text: str) -> str:
    start = text.index("<memory-tools-guide>")
    return text[start : text.index("</memory-tools-guide>", start)]


def _run(mem: TdaiMemory, tools: Any, turns: int = 2) -> FakeToolCallingChatModel:
    model = FakeToolCallingChatModel(script=["ok"] * turns)
    agent = create_agent(
        model, tools=[manage_memory, search_memory], middleware=[mem.middleware(tools=tools)]
    )
    for n in range(turns):
        agent.invoke(
            {"messages": [{"role": "user", "content": f"where do I sit? {n}"}]},
            {"configurable": {"thread_id": "t"}},
            context={"user_id": "alice"},
        )
    return model


def test_tools_chooses_which_memory_tools_the_model_gets(mem: TdaiMemory) -> None:
    chosen = ["tdai_read_scene", "tdai_conversation_search"]  # any order: ours is fixed
    model = _run(mem, chosen)
    for names in model.tool_names:
        assert sorted(names) == sorted(
            ["manage_memory", "search_memory", "tdai_conversation_search", "tdai_read_scene"]
        )
    guides = [_guide(_system_text(r)) for r in model.requests]
    assert guides[0] == guides[1]  # byte-stable across turns
    assert "tdai_memory_search" not in guides[0]
    assert "- tdai_conversation_search:" in guides[0]
    assert "- tdai_read_scene:" in guides[0]
    assert "Note: tdai_conversation_search has a limit of 3 calls per turn" in guides[0]


def test_all_tools_keep_the_guide_they_had(mem: TdaiMemory) -> None:
    everything = _guide(_system_text(_run(mem, True, turns=1).requests[0]))
    listed = _guide(_system_text(_run(mem, list(reversed(ALL)), turns=1).requests[0]))
    assert everything == listed
    assert all(f"- {name}:" in everything for name in ALL)
    assert "share a limit of 3 calls per turn" in everything


def test_no_memory_tools_no_guide(mem: TdaiMemory) -> None:
    for choice in (False, []):
        model = _run(mem, choice, turns=1)
        assert sorted(model.tool_names[0]) == ["manage_memory", "search_memory"]
        assert "<memory-tools-guide>" not in model.requests[0][0].text


def test_memory_tools_and_create_memory_tools_take_names(mem: TdaiMemory) -> None:
    assert [t.name for t in mem.tools()] == ALL
    assert [t.name for t in mem.tools(names=["tdai_read_scene", "tdai_memory_search"])] == [
        "tdai_memory_search",
        "tdai_read_scene",
    ]
    (alone,) = create_memory_tools(mem, names=("tdai_memory_search",))
    assert "It has a budget of 3 calls per turn" in alone.description
    assert "tdai_conversation_search" not in alone.description
    assert mem.tools(names=[]) == []


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["search_memory"], r"names \['search_memory'\], which are not memory tools"),
        ("tdai_read_scene", "must be a list of memory tool names"),
        (["tdai_manage_memory"], "needs tools.manage_memory"),
    ],
)
def test_bad_names_are_refused(mem: TdaiMemory, names: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        mem.tools(names=names)


def test_bad_middleware_tools_are_refused(mem: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match=r"^tools must be True, False or a list of memory"):
        mem.middleware(tools="tdai_read_scene")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^tools_guide must be True, False or a list"):
        mem.recall("hi", tools_guide=1)  # type: ignore[arg-type]


def test_manage_memory_is_chosen_like_the_others() -> None:
    config = TdaiConfig(tools={"manage_memory": True})
    with TdaiMemory.open(embeddings=HashEmbeddings(dims=32), config=config) as memory:
        names = ["tdai_manage_memory", "tdai_read_scene"]
        assert [t.name for t in memory.tools(names=names)] == names[::-1]
        assert [t.name for t in memory.tools()][-1] == "tdai_manage_memory"


def test_recall_names_only_the_tools_it_is_told(mem: TdaiMemory) -> None:
    result = mem.recall("seat", user_id="alice", tools_guide=["tdai_read_scene"])
    assert result is not None and result.append_system_context is not None
    guide = _guide(result.append_system_context)
    assert "- tdai_read_scene:" in guide
    assert "tdai_memory_search" not in guide and "limit" not in guide


def test_wrap_model_guides_the_tools_bound(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["ok"])
    scene_only = [t for t in mem.tools(user_id="alice") if t.name == "tdai_read_scene"]
    bound = mem.wrap_model(model, user_id="alice").bind_tools([*scene_only, search_memory])
    bound.invoke("where do I sit?")
    guide = _guide(_system_text(model.requests[0]))
    assert "- tdai_read_scene:" in guide and "tdai_memory_search" not in guide


def test_a_search_tool_chosen_alone_is_refused_naming_only_itself(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "seat"}}] * 4, "Window."]
    )
    agent = create_agent(model, middleware=[mem.middleware(tools=["tdai_memory_search"])])
    out = agent.invoke(
        {"messages": [{"role": "user", "content": "where do I sit?"}]},
        context={"user_id": "alice"},
    )
    refused = [m for m in out["messages"] if m.type == "tool" and m.status == "error"]
    assert len(refused) == 1
    assert "tdai_memory_search has a budget of 3 calls per turn" in refused[0].text
    assert "tdai_conversation_search" not in refused[0].text
