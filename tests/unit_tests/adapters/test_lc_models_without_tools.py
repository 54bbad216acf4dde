"""The middleware with a chat model that cannot bind tools (`GenericFakeChatModel`)."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from langchain_tdai_recall import ConfigError, TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

from ._helpers import user

QUESTION = "Which seats do I like on long flights?"


class _Recording(GenericFakeChatModel):
    """GenericFakeChatModel (no `bind_tools`) that keeps the messages it was sent."""

    seen: list[list[BaseMessage]] = []  # noqa: RUF012 - replaced per instance

    def _generate(self, messages: list[BaseMessage], *args: object, **kwargs: object) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)  # type: ignore[arg-type]


def _text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def test_tools_false_recalls_without_registering_tools(mem: TdaiMemory) -> None:
    model = _Recording(messages=iter([AIMessage("A window seat.")]), seen=[])
    middleware = mem.middleware(tools=False)
    assert middleware.tools == []
    agent = create_agent(model, system_prompt="Be brief.", middleware=[middleware])

    out = agent.invoke(user(QUESTION), context={"user_id": "alice"})

    assert out["messages"][-1].content == "A window seat."
    (sent,) = model.seen
    text = _text(sent)
    assert "Alice prefers window seats on long flights" in text  # recall still ran
    assert "memory-tools-guide" not in text  # no guide promising tools the model lacks


async def test_tools_false_async(mem: TdaiMemory) -> None:
    model = _Recording(messages=iter([AIMessage("ok")]), seen=[])
    agent = create_agent(model, middleware=[mem.middleware(tools=False)])
    out = await agent.ainvoke(user(QUESTION), context={"user_id": "alice"})
    assert out["messages"][-1].content == "ok"
    assert "Alice prefers window seats" in _text(model.seen[0])


@pytest.mark.parametrize("run", ["sync", "async"])
async def test_model_without_bind_tools_gets_a_package_error_naming_the_fix(
    mem: TdaiMemory, run: str
) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("never")]))
    agent = create_agent(model, middleware=[mem.middleware()])
    with pytest.raises(ConfigError, match=r"GenericFakeChatModel.*tools=False"):
        if run == "sync":
            agent.invoke(user(QUESTION), context={"user_id": "alice"})
        else:
            await agent.ainvoke(user(QUESTION), context={"user_id": "alice"})


def test_tools_true_follows_the_store_config(mem: TdaiMemory) -> None:
    names = ["tdai_memory_search", "tdai_conversation_search", "tdai_read_scene"]
    middleware = mem.middleware(tools=True)
    assert [t.name for t in middleware.tools] == names
    model = FakeToolCallingChatModel(script=["ok"])
    agent = create_agent(model, system_prompt="Be brief.", middleware=[middleware])
    agent.invoke(user(QUESTION), context={"user_id": "alice"})
    assert model.tool_names == [names]
    assert "memory-tools-guide" in _text(model.requests[0])
    off = {"tools": {"enabled": False}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=off) as memory:
        assert memory.middleware(tools=True).tools == []


def test_tools_argument_is_validated(mem: TdaiMemory) -> None:
    with pytest.raises(
        ConfigError, match=r"tools must be True, False or a list of memory .*got str"
    ):
        mem.middleware(tools="no")  # type: ignore[arg-type]
