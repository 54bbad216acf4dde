"""The scripted chat model shipped in `langchain_tdai_recall.testing`."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from langchain_tdai_recall.testing import FakeToolCallingChatModel


@tool
def ping(host: str) -> str:
    """Ping a host."""
    return host


def test_script_steps_and_recording() -> None:
    def echo(messages: list[BaseMessage]) -> str:
        return f"echo {messages[-1].content}"

    model = FakeToolCallingChatModel(
        script=[
            "plain",
            [{"name": "ping", "args": {"host": "a"}}, {"name": "ping", "args": {"host": "b"}}],
            AIMessage(content="as is", id="fixed"),
            echo,
        ],
        default_reply=None,
    )
    bound = model.bind_tools([ping])
    assert bound.invoke("one").content == "plain"
    calls = bound.invoke("two").tool_calls
    assert [(c["name"], c["args"], c["id"]) for c in calls] == [
        ("ping", {"host": "a"}, "call_1"),
        ("ping", {"host": "b"}, "call_2"),
    ]
    assert model.invoke("three").id == "fixed"
    assert model.invoke([HumanMessage("four")]).content == "echo four"
    with pytest.raises(IndexError, match="exhausted"):
        model.invoke("five")
    assert [r[-1].content for r in model.requests] == ["one", "two", "three", "four", "five"]
    assert model.tool_names == [["ping"], ["ping"], [], [], []]

    model.reset()
    assert model.requests == []
    assert model.invoke("again").content == "plain"


def test_default_reply() -> None:
    assert FakeToolCallingChatModel().invoke("x").content == "OK"
    assert FakeToolCallingChatModel(default_reply="done").invoke("x").content == "done"


async def test_async() -> None:
    model = FakeToolCallingChatModel(script=["a"])
    assert (await model.ainvoke("x")).content == "a"
