"""Every adapter's automatic recall is one `tdai_recall` retriever run, seen by callbacks.

These tests opt in to the memory texts in tracing (`recall.trace_memory_text`), to check the
documents against what recall injected; `test_trace_privacy.py` checks the default, without them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate

from langchain_tdai_recall import RecallTimeoutError, TdaiConfig, TdaiMemory, TdaiRecallError
from langchain_tdai_recall._turn import TurnEvent
from langchain_tdai_recall._turn import run as recall_run_module
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

from ._helpers import user
from .conftest import seed

QUESTION = "Which seats do I like on long flights?"
PROMPT = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])


@pytest.fixture
def mem() -> Iterator[TdaiMemory]:
    """Alice's and Bob's memories, with their texts in tracing (`recall.trace_memory_text`)."""
    config = TdaiConfig(recall={"trace_memory_text": True})
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        yield seed(memory)


class RunCollector(BaseCallbackHandler):
    """Records every run start (with its type and parent) and the retriever runs' ends."""

    def __init__(self) -> None:
        self.parents: dict[UUID, UUID | None] = {}
        self.names: dict[UUID, str] = {}
        self.retrievers: dict[UUID, dict[str, Any]] = {}

    def _start(self, run_id: UUID, parent_run_id: UUID | None, name: str) -> None:
        self.parents[run_id] = parent_run_id
        self.names[run_id] = name

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, str(kwargs.get("name")))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, "chat_model")

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, str(kwargs.get("name")))
        self.retrievers[run_id] = {
            "name": kwargs.get("name"),
            "query": query,
            "parent": parent_run_id,
            "metadata": kwargs.get("metadata") or {},
            "started": time.perf_counter(),
        }

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self.retrievers[run_id]
        run["documents"] = list(documents)
        run["ended"] = time.perf_counter()

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self.retrievers[run_id]
        run["error"] = error
        run["ended"] = time.perf_counter()

    def recall_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.retrievers.values() if r["name"] == "tdai_recall"]

    def roots(self) -> list[UUID]:
        return [run for run, parent in self.parents.items() if parent is None]

    def ancestors(self, run_id: UUID | None) -> list[str]:
        """Names of the runs above `run_id`, nearest first."""
        names = []
        while run_id is not None:
            names.append(self.names[run_id])
            run_id = self.parents[run_id]
        return names


def _block(run: dict[str, Any]) -> list[Document]:
    return [d for d in run["documents"] if d.metadata["injected_as"] == "memories"]


def _check_block_matches_event(run: dict[str, Any], event: TurnEvent) -> None:
    """The run's documents are the event's memories, with the same channels and scores."""
    block = _block(run)
    assert [(d.page_content, d.metadata["score"], d.metadata["type"]) for d in block] == [
        (m["content"], m["score"], m["type"]) for m in event["memories"] if m["channel"] == "block"
    ]
    system = [d for d in run["documents"] if d.metadata["injected_as"] != "memories"]
    assert [(d.metadata["injected_as"], d.page_content, d.metadata["score"]) for d in system] == [
        (m["channel"], m["content"], m["score"])
        for m in event["memories"]
        if m["channel"] != "block"
    ]
    assert block, "the turn recalled memories"
    for doc in block:
        assert doc.id == doc.metadata["id"]
        assert doc.metadata["user_id"] == "alice"
        assert isinstance(doc.metadata["keyword_score"], float)


# -- middleware ---------------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
async def test_middleware_turn_is_one_recall_run_under_the_model_node(
    mem: TdaiMemory, use_async: bool
) -> None:
    events: list[TurnEvent] = []
    model = FakeToolCallingChatModel(
        script=[
            [{"name": "tdai_memory_search", "args": {"query": "seats"}}],
            "You like window seats.",
            "Noted.",
        ]
    )
    agent = create_agent(model, middleware=[mem.middleware(on_turn=events.append)])
    handler = RunCollector()
    config: Any = {"callbacks": [handler]}
    for text in (QUESTION, "Thanks"):
        if use_async:
            await agent.ainvoke(user(text), config, context={"user_id": "alice"})
        else:
            agent.invoke(user(text), config, context={"user_id": "alice"})

    # two turns (the first with two model calls): exactly one recall run per turn
    runs = handler.recall_runs()
    assert [r["query"] for r in runs] == [QUESTION, "Thanks"]
    assert len(handler.roots()) == 2
    for run in runs:
        assert handler.ancestors(run["parent"]) == ["model", "LangGraph"]
        assert run["metadata"]["user_id"] == "alice"
        assert run["metadata"]["session_key"] == "default"
        assert run["ended"] >= run["started"]
        assert "error" not in run
    _check_block_matches_event(runs[0], events[0])
    # the custom event carries what it carried before, no documents
    assert set(events[0]) == set(TurnEvent.__annotations__)


def test_system_context_memories_are_documents_too(mem: TdaiMemory) -> None:
    mem.add_memory("Alice has a severe nut allergy", priority=95, user_id="alice")
    mem.flush()
    handler = RunCollector()
    result = mem.recall(QUESTION, user_id="alice")
    assert result is not None
    assert result.pinned
    agent = create_agent(FakeToolCallingChatModel(script=["ok"]), middleware=[mem.middleware()])
    agent.invoke(user(QUESTION), {"callbacks": [handler]}, context={"user_id": "alice"})
    (run,) = handler.recall_runs()
    by_kind: dict[str, list[str]] = {}
    for doc in run["documents"]:
        by_kind.setdefault(doc.metadata["injected_as"], []).append(doc.page_content)
    assert by_kind["pinned"] == [r.content for r in result.pinned]
    assert by_kind["profile"] == [r.content for r in result.profile]
    assert by_kind["memories"] == [m.content for m in result.memories]
    pinned = next(d for d in run["documents"] if d.metadata["injected_as"] == "pinned")
    assert pinned.metadata["priority"] == 95
    # issue 26 #4: the score this turn's search gave it (it is injected whatever the message)
    (scored,) = [m for m in result.injected if m.channel == "pinned"]
    assert pinned.metadata["score"] == scored.score


# -- LCEL, wrap_model, legacy executor ----------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
async def test_as_runnable_recall_run_is_a_child_of_the_step(
    mem: TdaiMemory, use_async: bool
) -> None:
    chain = PROMPT | mem.as_runnable() | FakeToolCallingChatModel(script=["Window."])
    handler = RunCollector()
    config: Any = {"callbacks": [handler], "configurable": {"user_id": "alice"}}
    if use_async:
        await chain.ainvoke({"q": QUESTION}, config)
    else:
        chain.invoke({"q": QUESTION}, config)
    (run,) = handler.recall_runs()
    assert run["query"] == QUESTION
    assert handler.ancestors(run["parent"]) == ["RecallRunnable", "RunnableSequence"]
    assert [d.page_content for d in _block(run)] == [
        m.content for m in (mem.recall(QUESTION, user_id="alice") or pytest.fail()).memories
    ]


@pytest.mark.parametrize("use_async", [False, True])
async def test_wrap_model_recall_run_per_model_call(mem: TdaiMemory, use_async: bool) -> None:
    model = mem.wrap_model(FakeToolCallingChatModel(script=["Window."]))
    bound = model.bind_tools(mem.tools())
    handler = RunCollector()
    config: Any = {"callbacks": [handler], "configurable": {"user_id": "alice"}}
    if use_async:
        await bound.ainvoke(QUESTION, config)
    else:
        bound.invoke(QUESTION, config)
    (run,) = handler.recall_runs()
    assert handler.ancestors(run["parent"])[0] == "RecallRunnable"
    assert len(handler.roots()) == 1
    assert _block(run)


@pytest.mark.parametrize("use_async", [False, True])
async def test_legacy_executor_one_recall_run_per_model_call(
    mem: TdaiMemory, use_async: bool
) -> None:
    pytest.importorskip("langchain_classic")
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

    from langchain_tdai_recall.legacy import ExecutorMemory

    prompt = ChatPromptTemplate.from_messages(
        [("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
    )
    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "seats"}}], "Window."]
    )
    session = ExecutorMemory(mem, user_id="alice", session_key="chat-1")
    agent = create_tool_calling_agent(session.wrap_model(model), session.tools, prompt)
    executor = session.wrap_executor(AgentExecutor(agent=agent, tools=session.tools))
    handler = RunCollector()
    config: Any = {"callbacks": [handler]}
    if use_async:
        out = await executor.ainvoke({"input": QUESTION}, config)
    else:
        out = executor.invoke({"input": QUESTION}, config)
    assert out["output"] == "Window."
    runs = handler.recall_runs()
    assert len(runs) == len(model.requests) == 2  # the executor recalls before each model call
    (root,) = handler.roots()
    for run in runs:
        assert handler.ancestors(run["parent"])[0] == "RecallRunnable"
        assert handler.ancestors(run["parent"])[-1] == handler.names[root] == "AgentExecutor"
        assert run["metadata"]["session_key"] == "chat-1"
        assert _block(run)


# -- nothing recalled, failures, no listener ------------------------------------------------------


def test_an_empty_recall_is_a_run_with_no_documents(empty_mem: TdaiMemory) -> None:
    handler = RunCollector()
    chain = PROMPT | empty_mem.as_runnable()
    chain.invoke({"q": QUESTION}, {"callbacks": [handler]})
    (run,) = handler.recall_runs()
    assert run["documents"] == []
    assert "error" not in run


def test_a_failed_recall_is_a_run_error_and_the_turn_goes_on(mem: TdaiMemory) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        msg = "disk on fire"
        raise RuntimeError(msg)

    mem._engine._recall = broken  # type: ignore[method-assign]
    handler = RunCollector()
    model = FakeToolCallingChatModel(script=["still here"])
    agent = create_agent(model, middleware=[mem.middleware()])
    out = agent.invoke(user(QUESTION), {"callbacks": [handler]}, context={"user_id": "alice"})
    assert out["messages"][-1].content == "still here"
    (run,) = handler.recall_runs()
    assert "documents" not in run
    assert type(run["error"]) is TdaiRecallError
    assert "disk on fire" not in str(run["error"])  # the message may quote memory text


def test_a_timed_out_recall_is_a_run_error() -> None:
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"recall": {"timeout_ms": 20}}
    ) as memory:
        slow = memory._engine._recall

        def sleepy(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.2)
            return slow(*args, **kwargs)

        memory._engine._recall = sleepy  # type: ignore[method-assign]
        handler = RunCollector()
        (PROMPT | memory.as_runnable()).invoke({"q": QUESTION}, {"callbacks": [handler]})
        (run,) = handler.recall_runs()
        assert isinstance(run["error"], RecallTimeoutError)


def test_recall_disabled_is_an_empty_run_not_an_error() -> None:
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"recall": {"enabled": False}}
    ) as memory:
        handler = RunCollector()
        (PROMPT | memory.as_runnable()).invoke({"q": QUESTION}, {"callbacks": [handler]})
        (run,) = handler.recall_runs()
        assert run["documents"] == []
        assert "error" not in run


def test_a_raised_recall_error_ends_the_run_before_it_propagates() -> None:
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"recall": {"on_error": "raise"}}
    ) as memory:

        def broken(*args: Any, **kwargs: Any) -> Any:
            msg = "disk on fire"
            raise RuntimeError(msg)

        memory.recall = broken  # type: ignore[method-assign]
        handler = RunCollector()
        with pytest.raises(RuntimeError, match="disk on fire"):
            (PROMPT | memory.as_runnable()).invoke({"q": QUESTION}, {"callbacks": [handler]})
        (run,) = handler.recall_runs()
        assert isinstance(run["error"], RuntimeError)


def test_a_raising_handler_never_ends_the_turn(mem: TdaiMemory) -> None:
    class Raising(BaseCallbackHandler):
        raise_error = True

        def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
            msg = "handler bug"
            raise RuntimeError(msg)

        def on_retriever_end(self, *args: Any, **kwargs: Any) -> None:
            msg = "handler bug"
            raise RuntimeError(msg)

    chain = PROMPT | mem.as_runnable()
    messages = chain.invoke(
        {"q": QUESTION}, {"callbacks": [Raising()], "configurable": {"user_id": "alice"}}
    )
    assert "window seats" in str(messages[-1].content)


def test_no_listener_builds_no_documents(mem: TdaiMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> list[Document]:
        built.append(args)
        return []

    monkeypatch.setattr(recall_run_module, "recall_documents", counting)
    agent = create_agent(FakeToolCallingChatModel(script=["ok"]), middleware=[mem.middleware()])
    agent.invoke(user(QUESTION), context={"user_id": "alice"})
    (PROMPT | mem.as_runnable()).invoke({"q": QUESTION}, {"configurable": {"user_id": "alice"}})
    assert built == []
    agent.invoke(user(QUESTION), {"callbacks": [RunCollector()]}, context={"user_id": "alice"})
    assert len(built) == 1
