"""`memory.as_runnable()` and `memory.wrap_model(model)`."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.lcel import RecallChatModel
from langchain_tdai_recall.testing import FakeToolCallingChatModel

from ._helpers import last_human, system_of, text_of

QUESTION = "Which seats do I prefer?"
ALICE = {"configurable": {"user_id": "alice"}}
BOB = {"configurable": {"user_id": "bob"}}
PROMPT = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])


def _expected(mem: TdaiMemory, who: str, *, tools_guide: bool = False) -> Any:
    """What the chain should inject: the runnable adds the tools guide only when asked."""
    result = mem.recall(QUESTION, user_id=who, tools_guide=tools_guide)
    assert result is not None
    return result


def test_prompt_pipe_runnable_pipe_model(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["A", "B"])
    chain = PROMPT | mem.as_runnable() | model
    assert chain.invoke({"q": QUESTION}, ALICE).content == "A"
    chain.invoke({"q": QUESTION}, BOB)

    for request, who in zip(model.requests, ("alice", "bob"), strict=True):
        expected = _expected(mem, who)
        assert system_of(request).content == [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": expected.append_system_context},
        ]
        assert last_human(request).content == expected.prepend_context + "\n\n" + QUESTION
    assert "window" in text_of(model.requests[0][-1])
    assert "aisle" not in text_of(model.requests[0][-1])
    assert "aisle" in text_of(model.requests[1][-1])


@pytest.mark.parametrize(
    "value",
    [QUESTION, [HumanMessage(QUESTION)], [("human", QUESTION)], PROMPT.invoke({"q": QUESTION})],
)
def test_input_forms(mem: TdaiMemory, value: Any) -> None:
    out = mem.as_runnable().invoke(value, ALICE)
    expected = _expected(mem, "alice")
    assert isinstance(out[0], SystemMessage)
    assert out[0].content[-1] == {"type": "text", "text": expected.append_system_context}
    assert out[-1].content == expected.prepend_context + "\n\n" + QUESTION


def test_input_is_not_mutated_and_history_untouched(mem: TdaiMemory) -> None:
    history = [
        SystemMessage("Sys"),
        HumanMessage("earlier question about seats"),
        AIMessage("earlier answer"),
        HumanMessage(QUESTION),
    ]
    out = mem.as_runnable().invoke(history, ALICE)
    assert [m.content for m in history] == [
        "Sys",
        "earlier question about seats",
        "earlier answer",
        QUESTION,
    ]
    assert out[1].content == "earlier question about seats"
    assert out[2].content == "earlier answer"
    assert str(out[3].content).startswith("<relevant-memories>")


async def test_async_runnable_matches_sync(mem: TdaiMemory) -> None:
    runnable = mem.as_runnable()
    sync = runnable.invoke(QUESTION, ALICE)
    async_ = await runnable.ainvoke(QUESTION, ALICE)
    assert [m.content for m in sync] == [m.content for m in async_]


def test_constructor_identity_and_bad_input(mem: TdaiMemory) -> None:
    out = mem.as_runnable(user_id="bob").invoke(QUESTION)
    assert "aisle" in text_of(out[-1])
    with pytest.raises(ValueError, match="PromptValue"):
        mem.as_runnable().invoke(42)  # type: ignore[arg-type]


@tool
def lookup(city: str) -> str:
    """Look up a city."""
    return city


def test_wrap_model_bind_tools_injects_every_call(mem: TdaiMemory) -> None:
    inner = FakeToolCallingChatModel(script=["one", "two", "three"])
    wrapped = mem.wrap_model(inner)
    assert isinstance(wrapped, RecallChatModel)
    bound = wrapped.bind_tools([lookup])
    assert bound.invoke([("system", "S"), ("human", QUESTION)], ALICE).content == "one"
    assert bound.invoke(QUESTION, BOB).content == "two"
    assert wrapped.invoke(QUESTION, ALICE).content == "three"

    assert inner.tool_names[:2] == [["lookup"], ["lookup"]]
    for request, who in zip(inner.requests, ("alice", "bob", "alice"), strict=True):
        expected = _expected(mem, who)
        assert last_human(request).content == expected.prepend_context + "\n\n" + QUESTION
        assert system_of(request).content[-1] == {
            "type": "text",
            "text": expected.append_system_context,
        }


async def test_wrap_model_async_and_stream(mem: TdaiMemory) -> None:
    inner = FakeToolCallingChatModel(script=["a", "b", "c"])
    wrapped = mem.wrap_model(inner, user_id="alice")
    await wrapped.ainvoke(QUESTION)
    list(wrapped.stream(QUESTION))
    [c async for c in wrapped.astream(QUESTION)]
    expected = _expected(mem, "alice")
    for request in inner.requests:
        assert last_human(request).content == expected.prepend_context + "\n\n" + QUESTION


def test_wrap_model_rejects_non_models(mem: TdaiMemory) -> None:
    with pytest.raises(ValueError, match="chat model"):
        mem.wrap_model("gpt")  # type: ignore[arg-type]


async def test_wrap_model_generate_api(mem: TdaiMemory) -> None:
    inner = FakeToolCallingChatModel(script=["g", "ag"])
    wrapped = mem.wrap_model(inner, user_id="alice")
    result = wrapped.generate([[HumanMessage(QUESTION)]])
    assert result.generations[0][0].text == "g"
    aresult = await wrapped.agenerate([[HumanMessage(QUESTION)]])
    assert aresult.generations[0][0].text == "ag"
    expected = _expected(mem, "alice")
    for request in inner.requests:
        assert last_human(request).content == expected.prepend_context + "\n\n" + QUESTION


def test_lcel_and_legacy_adapters_do_not_load_langchain_agents_or_langgraph() -> None:
    import subprocess
    import sys

    code = (
        "import sys, langchain_tdai_recall.lcel, langchain_tdai_recall.legacy;"
        "heavy = sorted({m.split('.')[0] if m.startswith('langgraph') else m for m in sys.modules"
        " if m.startswith(('langgraph', 'langchain.agents'))});"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_plain_chain_gets_no_tools_guide_and_no_system_message_just_for_it(
    empty_mem: TdaiMemory,
) -> None:
    empty_mem.add_memory("Prefers aisle seats", user_id="carol")
    out = empty_mem.as_runnable().invoke(
        "Which seats do you know about?", {"configurable": {"user_id": "dave"}}
    )
    assert not any(isinstance(m, SystemMessage) for m in out)  # nothing stable to add
    assert "memory-tools-guide" not in text_of(out[-1])
    with_guide = empty_mem.as_runnable(tools_guide=True).invoke(
        "Which seats do I prefer?", {"configurable": {"user_id": "carol"}}
    )
    assert isinstance(with_guide[0], SystemMessage)
    assert "<memory-tools-guide>" in str(with_guide[0].content)


def test_wrap_model_writes_the_guide_only_when_the_memory_tools_are_bound(mem: TdaiMemory) -> None:
    inner = FakeToolCallingChatModel(script=["a", "b"])
    wrapped = mem.wrap_model(inner)
    wrapped.bind_tools([lookup]).invoke([("system", "S"), ("human", QUESTION)], ALICE)
    wrapped.bind_tools([lookup, *mem.tools()]).invoke([("system", "S"), ("human", QUESTION)], ALICE)
    without, with_tools = (str(system_of(r).content) for r in inner.requests)
    assert "memory-tools-guide" not in without
    assert "<memory-tools-guide>" in with_tools


def test_chinese_system_prompt_sets_the_context_language(mem: TdaiMemory) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "你是一个简洁的助手。"), ("human", "{q}")]
    )
    out = (prompt | mem.as_runnable(tools_guide=True)).invoke({"q": QUESTION}, ALICE)
    system = str(out[0].content)
    assert "记忆工具使用说明" in system and "Using the memory tools" not in system
    # the memory block follows the user's (English) message
    assert "recalled from long-term memory" in text_of(out[-1])
