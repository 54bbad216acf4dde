"""What a frontend forwarding `astream_events` sees of the user's memories (issue 24 item 6).

By default (`recall.trace_memory_text` off) the `tdai_recall` retriever run's documents carry
ids, scores and channels with an empty `page_content`, and the `tdai_agent_turn` custom event
carries no memory `content`; `on_turn` still receives the texts. The chat model's own run still
carries the prompt with the injection: these tests state that too, so the docs cannot claim
otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent

from langchain_tdai_recall import TdaiConfig, TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

SEAT = "Prefers window seats on long flights"
ALLERGY = "Allergic to penicillin"
QUESTION = "Which seat on long flights?"


def _open(trace: bool | None) -> TdaiMemory:
    config = TdaiConfig() if trace is None else TdaiConfig(recall={"trace_memory_text": trace})
    memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64), config=config)
    memory.add_memory(SEAT, type="persona", user_id="alice")
    memory.add_memory(ALLERGY, type="persona", priority=95, user_id="alice")
    memory.flush()
    return memory


@pytest.fixture(params=[None, False], ids=["default", "off"])
def private(request: pytest.FixtureRequest) -> Iterator[TdaiMemory]:
    with _open(request.param) as memory:
        yield memory


async def _events(memory: TdaiMemory, turns: list[Any]) -> list[dict[str, Any]]:
    agent = create_agent(
        FakeToolCallingChatModel(script=["A window seat."]),
        middleware=[memory.middleware(on_turn=turns.append)],
    )
    stream = agent.astream_events(
        {"messages": [{"role": "user", "content": QUESTION}]},
        context={"user_id": "alice"},
        version="v2",
    )
    return [event async for event in stream]


def _text(value: object) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


async def test_a_forwarded_stream_carries_memory_texts_only_in_the_model_run(
    private: TdaiMemory,
) -> None:
    turns: list[Any] = []
    events = await _events(private, turns)

    (end,) = [e for e in events if e["event"] == "on_retriever_end" and e["name"] == "tdai_recall"]
    documents = end["data"]["output"]
    assert documents, "recall injected memories"
    assert all(d.page_content == "" for d in documents)
    assert {d.metadata["injected_as"] for d in documents} >= {"memories", "pinned"}
    assert all(d.id and d.metadata["id"] == d.id for d in documents)
    assert any(d.metadata["score"] is not None for d in documents)

    (turn,) = [e for e in events if e["event"] == "on_custom_event"]
    assert turn["name"] == "tdai_agent_turn"
    memories = turn["data"]["memories"]
    assert memories and all("content" not in m for m in memories)
    assert {m["channel"] for m in memories} >= {"block", "pinned"}

    # nothing but the chat model's own run carries the texts ...
    model_events = {"on_chat_model_start", "on_chat_model_stream", "on_chat_model_end"}
    for event in events:
        if event["event"] not in model_events:
            assert SEAT not in _text(event["data"]), event["event"]
            assert ALLERGY not in _text(event["data"]), event["event"]
    # ... which does: its input is the prompt, injection included
    (start,) = [e for e in events if e["event"] == "on_chat_model_start"]
    assert SEAT in _text(start["data"]["input"])
    assert ALLERGY in _text(start["data"]["input"])

    # on_turn, which the app registered itself, gets the texts
    (payload,) = turns
    assert {m["content"] for m in payload["memories"]} == {SEAT, ALLERGY}


async def test_the_app_can_opt_in_to_the_texts() -> None:
    with _open(True) as memory:
        turns: list[Any] = []
        events = await _events(memory, turns)
    (end,) = [e for e in events if e["event"] == "on_retriever_end" and e["name"] == "tdai_recall"]
    block = [d for d in end["data"]["output"] if d.metadata["injected_as"] == "memories"]
    assert [d.page_content for d in block] == [SEAT]
    (turn,) = [e for e in events if e["event"] == "on_custom_event"]
    assert turn["data"] == turns[0]
    assert {m["content"] for m in turn["data"]["memories"]} == {SEAT, ALLERGY}


def test_the_retriever_a_caller_asked_for_keeps_its_texts(private: TdaiMemory) -> None:
    (doc,) = private.as_retriever(user_id="alice", k=1).invoke("window seats long flights")
    assert doc.page_content == SEAT
