"""TdaiRecallMiddleware inside `create_agent`: injection, identity, capture, events, failures."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_tdai_recall import ScopeError, TdaiMemory, TdaiRecallMiddleware
from langchain_tdai_recall.middleware import (
    TURN_EVENT,
    append_system_context,
    prepend_human_context,
)
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

from ._helpers import last_human, system_of, text_of, user
from .conftest import ALICE_FACTS, ALICE_PERSONA, BOB_FACTS, EventCollector, seed

QUESTION = "Which seats do I like on long flights?"
THREAD = {"configurable": {"thread_id": "t1"}}


def _agent(memory: TdaiMemory, model: FakeToolCallingChatModel, **kwargs: Any) -> Any:
    options = {k: kwargs.pop(k) for k in list(kwargs) if k not in {"checkpointer", "system"}}
    return create_agent(
        model,
        system_prompt=kwargs.get("system", "You are a helpful assistant."),
        middleware=[memory.middleware(**options)],
        checkpointer=kwargs.get("checkpointer"),
    )


# -- injection ------------------------------------------------------------------------------------


def test_model_sees_injection_and_checkpoint_does_not(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["Window seat, as usual."])
    saver = InMemorySaver()
    agent = _agent(mem, model, checkpointer=saver)

    out = agent.invoke(user(QUESTION), THREAD, context={"user_id": "alice"})

    expected = mem.recall(QUESTION, user_id="alice")
    assert expected is not None
    assert expected.prepend_context and expected.append_system_context
    (request,) = model.requests
    system = system_of(request)
    assert system.content == [
        {"type": "text", "text": "You are a helpful assistant."},
        {"type": "text", "text": expected.append_system_context},
    ]
    assert last_human(request).content == expected.prepend_context + "\n\n" + QUESTION

    # Neither the returned state nor the checkpoint holds the injection or the private fields.
    assert out["messages"][0].content == QUESTION
    assert set(out) == {"messages"}
    state = agent.get_state(THREAD).values
    assert "tdai_turn" not in state
    dumped = json.dumps([m.model_dump() for m in state["messages"]], default=str)
    assert "relevant-memories" not in dumped
    assert "user-persona" not in dumped
    checkpoint = saver.get(THREAD)
    assert checkpoint is not None
    assert "tdai_turn" not in checkpoint["channel_values"]
    assert "relevant-memories" not in repr(checkpoint)


def test_same_bytes_for_every_model_call_of_a_turn(mem: TdaiMemory) -> None:
    calls: list[str] = []
    original = mem.recall

    def spy(text: Any, **kwargs: Any) -> Any:
        calls.append(text)
        return original(text, **kwargs)

    mem.recall = spy  # type: ignore[method-assign]
    model = FakeToolCallingChatModel(
        script=[
            [{"name": "tdai_memory_search", "args": {"query": "seat"}}],
            [{"name": "tdai_read_scene", "args": {"name": "travel"}}],
            "Window seat.",
        ]
    )
    agent = _agent(mem, model)
    agent.invoke(user(QUESTION), context={"user_id": "alice"})

    assert calls == [QUESTION]  # one recall for the whole turn
    assert len(model.requests) == 3
    systems = {json.dumps(system_of(r).content) for r in model.requests}
    humans = {json.dumps(last_human(r).content) for r in model.requests}
    assert len(systems) == 1
    assert len(humans) == 1


def test_system_message_is_created_when_missing(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["ok"])
    agent = create_agent(model, middleware=[mem.middleware(user_id="alice")])
    agent.invoke(user(QUESTION))
    expected = mem.recall(QUESTION, user_id="alice")
    assert expected is not None
    assert system_of(model.requests[0]).content == [
        {"type": "text", "text": expected.append_system_context}
    ]


def test_existing_blocks_and_cache_control_are_kept(mem: TdaiMemory) -> None:
    blocks: list[str | dict[str, Any]] = [
        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
        "plain string block",
    ]
    model = FakeToolCallingChatModel(script=["ok"])
    agent = create_agent(
        model,
        system_prompt=SystemMessage(content=blocks),
        middleware=[mem.middleware(user_id="alice")],
    )
    agent.invoke(user(QUESTION))
    content = system_of(model.requests[0]).content
    assert content[:2] == blocks
    assert len(content) == 3
    assert isinstance(content[2], dict)
    assert content[2]["type"] == "text"
    assert content[2]["text"].startswith("<user-persona>")


def test_multimodal_human_message(mem: TdaiMemory) -> None:
    image = {"type": "image", "url": "https://example.com/seat-map.png"}
    model = FakeToolCallingChatModel(script=["ok", "ok"])
    agent = _agent(mem, model, user_id="alice")

    agent.invoke({"messages": [HumanMessage(content=[image, {"type": "text", "text": QUESTION}])]})
    content = last_human(model.requests[0]).content
    assert isinstance(content, list)
    assert content[1:] == [image, {"type": "text", "text": QUESTION}]
    assert content[0]["text"].startswith("<relevant-memories>")
    assert content[0]["text"].endswith("\n\n")

    text_first = {"type": "text", "text": QUESTION, "cache_control": {"type": "ephemeral"}}
    agent.invoke({"messages": [HumanMessage(content=[text_first, image])]})
    content = last_human(model.requests[1]).content
    assert isinstance(content, list)
    assert content[1] == image
    assert content[0]["cache_control"] == {"type": "ephemeral"}
    assert content[0]["text"].startswith("<relevant-memories>")
    assert content[0]["text"].endswith("\n\n" + QUESTION)


def test_pure_injection_helpers_do_not_mutate() -> None:
    system = SystemMessage(content="base", id="s1")
    new = append_system_context(system, "ctx")
    assert system.content == "base"
    assert new.id == "s1"
    assert new.content == [{"type": "text", "text": "base"}, {"type": "text", "text": "ctx"}]
    assert append_system_context(None, "ctx").content == [{"type": "text", "text": "ctx"}]

    human = HumanMessage(content="hello", id="h1")
    prefixed = prepend_human_context(human, "<relevant-memories>x</relevant-memories>")
    assert human.content == "hello"
    assert prefixed.id == "h1"
    assert prefixed.content == "<relevant-memories>x</relevant-memories>\n\nhello"


async def test_async_paths_inject_the_same(mem: TdaiMemory) -> None:
    sync_model = FakeToolCallingChatModel(script=["ok"])
    _agent(mem, sync_model, user_id="alice").invoke(user(QUESTION))

    async_model = FakeToolCallingChatModel(script=["ok"])
    await _agent(mem, async_model, user_id="alice").ainvoke(user(QUESTION))

    stream_model = FakeToolCallingChatModel(script=["ok"])
    chunks = [
        c
        async for c in _agent(mem, stream_model, user_id="alice").astream(
            user(QUESTION), stream_mode="updates"
        )
    ]
    assert chunks

    reference = [m.content for m in sync_model.requests[0]]
    assert [m.content for m in async_model.requests[0]] == reference
    assert [m.content for m in stream_model.requests[0]] == reference


def test_sync_stream_injects(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=["ok"])
    list(_agent(mem, model, user_id="alice").stream(user(QUESTION), stream_mode="values"))
    assert last_human(model.requests[0]).content != QUESTION
    assert "<relevant-memories>" in text_of(last_human(model.requests[0]))


# -- identity -------------------------------------------------------------------------------------


class _RecallSpy:
    def __init__(self, memory: TdaiMemory) -> None:
        self.scopes: list[tuple[Any, Any, Any]] = []
        self._original = memory.recall
        self._aoriginal = memory.arecall
        memory.recall = self._recall  # type: ignore[method-assign]
        memory.arecall = self._arecall  # type: ignore[method-assign]

    def _recall(self, text: Any, **kwargs: Any) -> Any:
        self.scopes.append((kwargs["user_id"], kwargs["agent_id"], kwargs["session_key"]))
        return self._original(text, **kwargs)

    async def _arecall(self, text: Any, **kwargs: Any) -> Any:
        self.scopes.append((kwargs["user_id"], kwargs["agent_id"], kwargs["session_key"]))
        return await self._aoriginal(text, **kwargs)


def test_identity_resolution_order(mem: TdaiMemory) -> None:
    spy = _RecallSpy(mem)
    model = FakeToolCallingChatModel()
    agent = _agent(mem, model, user_id="ctor", agent_id="ctor-agent", session_key="ctor-s")

    agent.invoke(
        user("hi"),
        {"configurable": {"user_id": "conf", "agent_id": "conf-agent", "thread_id": "th"}},
        context={"user_id": "ctx", "agent_id": "ctx-agent", "session_key": "ctx-s"},
    )
    agent.invoke(
        user("hi"),
        {"configurable": {"user_id": "conf", "agent_id": "conf-agent", "thread_id": "th"}},
    )
    agent.invoke(user("hi"))
    default_agent = _agent(mem, model)
    default_agent.invoke(user("hi"))
    assert spy.scopes == [
        ("ctx", "ctx-agent", "ctx-s"),
        ("conf", "conf-agent", "th"),
        ("ctor", "ctor-agent", "ctor-s"),
        (mem.config.store.default_user_id, None, "default"),  # the default user, resolved
    ]


def test_dataclass_context_is_read(mem: TdaiMemory) -> None:
    from dataclasses import dataclass

    @dataclass
    class Ctx:
        user_id: str

    spy = _RecallSpy(mem)
    agent = create_agent(
        FakeToolCallingChatModel(), middleware=[mem.middleware()], context_schema=Ctx
    )
    agent.invoke(user("hi"), context=Ctx(user_id="alice"))
    assert spy.scopes[0][0] == "alice"


def test_fallback_to_default_user_warns_once(
    mem: TdaiMemory, caplog: pytest.LogCaptureFixture
) -> None:
    agent = _agent(mem, FakeToolCallingChatModel())
    agent.invoke(user("hi"), context={"user_id": "alice"})
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall"):
        agent.invoke(user("hi"))
        agent.invoke(user("hi again"))
    warnings = [r for r in caplog.records if "default user" in r.getMessage()]
    assert len(warnings) == 1


def test_first_turn_without_a_user_warns_once_too(
    mem: TdaiMemory, caplog: pytest.LogCaptureFixture
) -> None:
    # a multi-user app that never passes a user id learns it on its first turn, not never
    agent = _agent(mem, FakeToolCallingChatModel())
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall"):
        agent.invoke(user("hi"))
        agent.invoke(user("hi again"))
        agent.invoke(user("and again"), context={"user_id": "alice"})
        agent.invoke(user("and again"))
    warnings = [r.getMessage() for r in caplog.records if "default user" in r.getMessage()]
    assert len(warnings) == 1
    assert "require_user_id=True" in warnings[0]
    assert "memory.middleware(user_id=...)" in warnings[0]  # how a single-user app silences it
    shown = warnings[0].replace("store.default_user_id", "")  # the config key may be named
    assert mem.config.store.default_user_id not in shown  # no user id above DEBUG
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall"):
        _agent(mem, FakeToolCallingChatModel(), user_id="me").invoke(user("hi"))
    assert not [r for r in caplog.records if "default user" in r.getMessage()]


def test_require_user_id(mem: TdaiMemory) -> None:
    agent = _agent(mem, FakeToolCallingChatModel(), require_user_id=True)
    with pytest.raises(ScopeError, match="user_id"):
        agent.invoke(user("hi"))
    agent.invoke(user("hi"), context={"user_id": "alice"})  # fine with one


def test_invalid_user_id_raises(mem: TdaiMemory) -> None:
    agent = _agent(mem, FakeToolCallingChatModel())
    with pytest.raises(ScopeError):
        agent.invoke(user("hi"), context={"user_id": ""})
    with pytest.raises(ScopeError):
        TdaiRecallMiddleware(mem, user_id="")


def test_two_users_never_see_each_other(mem: TdaiMemory) -> None:
    """One thread-less agent serving Alice and Bob concurrently."""
    model = FakeToolCallingChatModel(default_reply="ok")
    agent = _agent(mem, model)
    questions = {
        "alice": "Which seats do I prefer on long flights?",
        "bob": "Which aisle seats do I prefer?",
    }

    def run(who: str) -> None:
        agent.invoke(user(questions[who]), context={"user_id": who})

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(run, ["alice", "bob"] * 6))

    alice_texts = [c for c, _ in ALICE_FACTS]
    bob_texts = [c for c, _ in BOB_FACTS]
    seen = {"alice": 0, "bob": 0}
    for request in model.requests:
        prompt = json.dumps([m.content for m in request], ensure_ascii=False)
        who = "bob" if "aisle" in text_of(request[-1]).split("\n\n")[-1] else "alice"
        seen[who] += 1
        mine, theirs = (alice_texts, bob_texts) if who == "alice" else (bob_texts, alice_texts)
        assert any(m in prompt for m in mine)
        assert not any(t in prompt for t in theirs), (who, prompt)
    assert seen == {"alice": 6, "bob": 6}


# -- tools registration ---------------------------------------------------------------------------


def test_tools_registered_and_stable(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(default_reply="ok")
    agent = _agent(mem, model, user_id="alice", checkpointer=InMemorySaver())
    for i in range(3):
        agent.invoke(user(f"turn {i}"), THREAD)
    names = {tuple(n) for n in model.tool_names}
    assert names == {("tdai_memory_search", "tdai_conversation_search", "tdai_read_scene")}

    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"tools": {"enabled": False}}
    ) as memory:
        off = FakeToolCallingChatModel()
        _agent(memory, off, user_id="alice").invoke(user("hi"))
        assert off.tool_names == [[]]


# -- failure policy -------------------------------------------------------------------------------


def test_recall_failure_does_not_break_the_agent(
    mem: TdaiMemory, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        msg = "disk on fire"
        raise RuntimeError(msg)

    mem.recall = broken  # type: ignore[method-assign]
    model = FakeToolCallingChatModel(script=["still here"])
    with caplog.at_level(logging.WARNING):
        out = _agent(mem, model, user_id="alice").invoke(user(QUESTION))
    assert out["messages"][-1].content == "still here"
    assert last_human(model.requests[0]).content == QUESTION
    assert system_of(model.requests[0]).content == "You are a helpful assistant."
    assert any("recall failed" in r.getMessage() for r in caplog.records)
    assert not any("disk on fire" in r.getMessage() for r in caplog.records)


def test_recall_failure_raises_when_configured() -> None:
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"recall": {"on_error": "raise"}}
    ) as memory:

        def broken(*args: Any, **kwargs: Any) -> Any:
            msg = "disk on fire"
            raise RuntimeError(msg)

        memory.recall = broken  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="disk on fire"):
            _agent(memory, FakeToolCallingChatModel()).invoke(user("hi"))


def test_recall_disabled_injects_nothing_but_still_captures() -> None:
    with TdaiMemory.open(
        None, embeddings=HashEmbeddings(dims=64), config={"recall": {"enabled": False}}
    ) as memory:
        seed(memory)
        model = FakeToolCallingChatModel(script=["fine"])
        _agent(memory, model, user_id="alice").invoke(user(QUESTION))
        assert last_human(model.requests[0]).content == QUESTION
        memory.flush()  # L0 capture runs on the store's background writer
        hits = memory.search_conversations("seat flights", user_id="alice")
        assert [h.content for h in hits if h.role == "user"] == [QUESTION]


# -- capture, events ----------------------------------------------------------------------------


def test_l0_capture_records_typed_text_and_answer(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[
            "Noted: you like window seats.",
            [{"name": "tdai_conversation_search", "args": {"query": "window seats noted"}}],
            "You told me earlier.",
        ]
    )
    saver = InMemorySaver()
    agent = _agent(mem, model, checkpointer=saver)
    ctx = {"user_id": "alice"}
    agent.invoke(user("Remember that I like window seats"), THREAD, context=ctx)
    mem.flush()  # L0 capture runs on the store's background writer

    hits = mem.search_conversations("window seats", user_id="alice")
    contents = {h.role: h.content for h in hits}
    assert contents["user"] == "Remember that I like window seats"
    assert contents["assistant"] == "Noted: you like window seats."
    assert all("relevant-memories" not in h.content for h in hits)
    assert all(h.session_key == "t1" for h in hits)
    assert mem.search_conversations("window seats", user_id="bob") == []

    # Next turn: the conversation search tool finds what was captured.
    out = agent.invoke(user("What did I say about seats?"), THREAD, context=ctx)
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert tool_messages[-1].status == "success"
    assert "Remember that I like window seats" in str(tool_messages[-1].content)

    # A run without a new human message does not record the turn again.
    mem.flush()
    before = mem.stats(user_id="alice").messages
    agent.invoke({"messages": []}, THREAD, context=ctx)
    mem.flush()
    assert mem.stats(user_id="alice").messages == before


def test_capture_disabled(mem: TdaiMemory) -> None:
    _agent(mem, FakeToolCallingChatModel(), user_id="alice", capture=False).invoke(user(QUESTION))
    mem.flush()
    assert mem.search_conversations("seat flights", user_id="alice") == []


def test_capture_failure_is_logged_not_raised(
    mem: TdaiMemory, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        msg = "read-only"
        raise OSError(msg)

    mem._capture_turn = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        out = _agent(mem, FakeToolCallingChatModel(script=["ok"]), user_id="alice").invoke(
            user(QUESTION)
        )
    assert out["messages"][-1].content == "ok"
    assert any("L0 capture failed" in r.getMessage() for r in caplog.records)


def _textless(memory: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in memory.items() if k != "content"}


def test_turn_event_and_on_turn_payload(mem: TdaiMemory, collector: EventCollector) -> None:
    received: list[Any] = []
    model = FakeToolCallingChatModel(
        script=[
            [{"name": "tdai_memory_search", "args": {"query": "seat"}}] * 4,
            "Window.",
        ]
    )
    agent = _agent(mem, model, on_turn=received.append)
    agent.invoke(
        user(QUESTION),
        {"callbacks": [collector], "configurable": {"thread_id": "s-9"}},
        context={"user_id": "alice"},
    )
    (payload,) = received
    # the custom event is the payload without the memory texts (recall.trace_memory_text off)
    traced = {**payload, "memories": [_textless(m) for m in payload["memories"]]}
    assert collector.events == [(TURN_EVENT, traced)]
    expected = mem.recall(QUESTION, user_id="alice")
    assert expected is not None
    assert payload["user_id"] == "alice"
    assert payload["agent_id"] is None
    assert payload["session_key"] == "s-9"
    # every memory that reached the model, with its channel (issue 26 #4)
    assert payload["memories"] == [
        {"id": m.id, "content": m.content, "score": m.score, "type": m.type, "channel": m.channel}
        for m in expected.injected
    ]
    block = [m for m in payload["memories"] if m["channel"] == "block"]
    assert block and all(m["score"] is not None and m["score"] > 0 for m in block)
    assert payload["persona_injected"] is True
    assert payload["strategy"] == expected.strategy
    assert payload["recall_ms"] > 0
    assert payload["injected_chars"] == expected.injected_chars
    assert payload["tool_calls_used"] == 3
    assert payload["tool_calls_blocked"] == 1
    assert payload["l0_recorded"] == 2
    assert payload["error"] is None


async def test_async_turn_event_and_async_on_turn(
    mem: TdaiMemory, collector: EventCollector
) -> None:
    received: list[Any] = []

    async def on_turn(event: Any) -> None:
        await asyncio.sleep(0)
        received.append(event)

    agent = _agent(mem, FakeToolCallingChatModel(script=["ok"]), on_turn=on_turn)
    await agent.ainvoke(user(QUESTION), {"callbacks": [collector]}, context={"user_id": "alice"})
    assert len(received) == 1
    traced = {**received[0], "memories": [_textless(m) for m in received[0]["memories"]]}
    assert received[0]["memories"] and all("content" in m for m in received[0]["memories"])
    assert collector.events == [(TURN_EVENT, traced)]
    assert received[0]["l0_recorded"] == 2


def test_failing_on_turn_is_logged(mem: TdaiMemory, caplog: pytest.LogCaptureFixture) -> None:
    def on_turn(event: Any) -> None:
        msg = "boom"
        raise ValueError(msg)

    with caplog.at_level(logging.WARNING):
        out = _agent(mem, FakeToolCallingChatModel(script=["ok"]), on_turn=on_turn).invoke(
            user("hi")
        )
    assert out["messages"][-1].content == "ok"
    assert any("on_turn" in r.getMessage() for r in caplog.records)


def test_memory_text_only_at_debug(mem: TdaiMemory, caplog: pytest.LogCaptureFixture) -> None:
    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "peanuts"}}] * 5, "ok"]
    )
    with caplog.at_level(logging.DEBUG, logger="langchain_tdai_recall"):
        _agent(mem, model, user_id="alice").invoke(user("Any allergies? peanuts?"))
    texts = [c for c, _ in ALICE_FACTS] + ["peanuts"]
    for record in caplog.records:
        if record.levelno > logging.DEBUG:
            assert not any(t in record.getMessage() for t in texts), record.getMessage()


def test_middleware_name_and_validation(mem: TdaiMemory) -> None:
    assert mem.middleware().name == "TdaiRecallMiddleware"
    with pytest.raises(ValueError, match="on_turn"):
        TdaiRecallMiddleware(mem, on_turn=42)  # type: ignore[arg-type]


def test_concurrent_threads_with_checkpointer(mem: TdaiMemory) -> None:
    """Per-turn values live in run state: concurrent threads never swap injections."""
    model = FakeToolCallingChatModel(default_reply="ok")
    agent = _agent(mem, model, checkpointer=InMemorySaver())
    barrier = threading.Barrier(4)

    def run(i: int) -> None:
        who = "alice" if i % 2 else "bob"
        barrier.wait()
        agent.invoke(
            user(f"{who} asks about seats #{i}"),
            {"configurable": {"thread_id": f"t{i}"}},
            context={"user_id": who},
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(run, range(4)))
    for request in model.requests:
        prompt = json.dumps([m.content for m in request])
        if "alice asks" in prompt:
            assert "Bob" not in prompt
        else:
            assert "Alice" not in prompt


def test_final_answer_is_last_ai_message(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(script=[AIMessage(content=[{"type": "text", "text": "A"}])])
    _agent(mem, model, user_id="alice").invoke(user("unique question zeta"))
    mem.flush()
    hits = mem.search_conversations("zeta", user_id="alice")
    assert [h.role for h in hits][:1] == ["user"]  # the answer follows as its neighbour
    assert mem.stats(user_id="alice").messages == 2


# -- defects of issue 8 ----------------------------------------------------------------------------

_PRIVATE = (ALICE_PERSONA, "relevant-memories", "user-persona")


def _leaks(value: Any) -> list[str]:
    text = repr(value)
    return [marker for marker in _PRIVATE if marker in text]


@pytest.mark.parametrize("stream_mode", ["updates", "values"])
def test_recall_stays_out_of_streamed_chunks(mem: TdaiMemory, stream_mode: str) -> None:
    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "seat"}}], "Window."]
    )
    agent = _agent(mem, model, user_id="alice", checkpointer=InMemorySaver())
    chunks = list(agent.stream(user(QUESTION), THREAD, stream_mode=stream_mode))
    assert chunks
    assert ALICE_PERSONA in text_of(system_of(model.requests[0]))  # the model saw it
    for chunk in chunks:
        assert _leaks(chunk) == [], chunk
        if stream_mode == "values":
            assert "tdai_turn" not in chunk


async def test_recall_stays_out_of_chain_events(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "seat"}}], "Window."]
    )
    agent = _agent(mem, model, user_id="alice", checkpointer=InMemorySaver())
    seen = 0
    async for event in agent.astream_events(user(QUESTION), THREAD, version="v2"):
        if event["event"].startswith("on_chain"):
            seen += 1
            assert _leaks(event.get("data")) == [], (event["event"], event["name"])
    assert seen > 0
    assert ALICE_PERSONA in text_of(system_of(model.requests[0]))


def test_recall_cache_is_emptied_when_the_turn_ends(mem: TdaiMemory) -> None:
    middleware = mem.middleware(user_id="alice")
    agent = create_agent(FakeToolCallingChatModel(default_reply="ok"), middleware=[middleware])
    for i in range(3):
        agent.invoke(user(f"question {i}"))
    assert len(middleware._recalls) == 0


@pytest.mark.parametrize("use_async", [False, True])
async def test_every_turn_is_captured_through_one_path(
    mem: TdaiMemory, use_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_tdai_recall.types import Scope

    handed: list[tuple[list[dict[str, str]], Scope, str]] = []

    def capture(messages: Any, *, scope: Scope, session_key: str) -> None:
        handed.append((list(messages), scope, session_key))

    monkeypatch.setattr(mem, "_capture_turn", capture)
    received: list[Any] = []
    agent = _agent(mem, FakeToolCallingChatModel(script=["Window."]), on_turn=received.append)
    args = (user(QUESTION), {"configurable": {"thread_id": "t-7"}})
    kwargs = {"context": {"user_id": "alice", "agent_id": "trip-bot"}}
    await agent.ainvoke(*args, **kwargs) if use_async else agent.invoke(*args, **kwargs)
    assert handed == [
        (
            [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Window."}],
            Scope(user_id="alice", agent_id="trip-bot"),
            "t-7",
        )
    ]
    assert received[0]["l0_recorded"] == 2  # messages handed to capture


def test_integration_entry_points_take_typed_keywords(mem: TdaiMemory) -> None:
    import inspect

    for name in ("middleware", "tools", "as_runnable", "wrap_model"):
        parameters = inspect.signature(getattr(TdaiMemory, name)).parameters.values()
        assert all(p.kind is not p.VAR_KEYWORD for p in parameters), name
        assert {p.name for p in parameters} >= {"user_id", "agent_id", "require_user_id"}, name
    with pytest.raises(TypeError, match="capture"):
        mem.tools(capture=True)  # type: ignore[call-arg]


# -- language ------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
async def test_app_language_follows_system_prompt_and_message(
    mem: TdaiMemory, use_async: bool
) -> None:
    """A Chinese app: Chinese system context every turn; the memory block follows the user."""
    mem.add_memory("长途飞行喜欢靠窗的座位", user_id="alice")
    mem.flush()
    model = FakeToolCallingChatModel(default_reply="ok")
    agent = _agent(mem, model, user_id="alice", system="你是一个贴心的旅行助手。")
    config = {"configurable": {"thread_id": f"lang-{use_async}"}}
    for text in ("Which seats do I prefer on long flights?", "我喜欢什么座位？长途飞行的时候"):
        if use_async:
            await agent.ainvoke(user(text), config)
        else:
            agent.invoke(user(text), config)
    english, chinese = model.requests
    assert json.dumps(system_of(english).content) == json.dumps(system_of(chinese).content)
    system = str(system_of(english).content)
    assert "记忆工具使用说明" in system and "Using the memory tools" not in system
    assert "recalled from long-term memory" in text_of(last_human(english))
    assert "长期记忆" in text_of(last_human(chinese))


def test_english_app_gets_english_text_by_default(mem: TdaiMemory) -> None:
    model = FakeToolCallingChatModel(default_reply="ok")
    _agent(mem, model, user_id="alice").invoke(user("Which seats do I prefer on long flights?"))
    prompt = json.dumps([m.content for m in model.requests[0]], ensure_ascii=False)
    assert "Using the memory tools" in prompt
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in prompt.replace("旅行计划", ""))
