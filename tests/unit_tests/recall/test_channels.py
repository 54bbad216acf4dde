"""Every memory that reached the model, with its channel and score (issue 26 #4).

A memory reaches the model through the memory block in front of the user's message (chosen by
search for this message) or through the system context: the standing rules, the memories pinned
by priority and the user profile (injected every turn). `RecallResult.injected` and the
`tdai_agent_turn` event list them all, in the order the model reads them; `RecallResult.memories`
stays the memory block.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent

from langchain_tdai_recall import RecallResult, TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

USER = "alice"
RULE = "Always answer in French"
PINNED = "Severely allergic to penicillin"
PROFILE = "Has a cat named Miso"
SEATS = "Prefers window seats on long flights"
QUESTION = "Which seat should I book on my long flight?"


def _memory(**config: Any) -> TdaiMemory:
    memory = TdaiMemory.open(None, embeddings=HashEmbeddings(64), config=config or None)
    memory.add_memory(RULE, type="instruction", priority=-1, user_id=USER)
    memory.add_memory(PINNED, type="persona", priority=95, user_id=USER)
    memory.add_memory(PROFILE, type="persona", priority=60, user_id=USER)
    memory.add_memory(SEATS, type="persona", priority=50, user_id=USER)
    assert memory.flush(timeout=30)
    return memory


def _channels(result: RecallResult) -> list[tuple[str, str]]:
    return [(m.channel, m.content) for m in result.injected]


def test_every_memory_that_reached_the_model_is_listed_with_its_channel() -> None:
    with _memory() as memory:
        result = memory.recall(QUESTION, user_id=USER)
        found = memory.search_memories(QUESTION, user_id=USER, limit=20, min_score=0)
    hits = {h.content: h.score for h in found}
    assert result is not None and result.strategy == "hybrid"
    # the order the model reads them: the system context, then the block before the message
    assert _channels(result) == [
        ("standing_rule", RULE),
        ("pinned", PINNED),
        ("profile", PROFILE),
        ("profile", SEATS),  # the message is about it: in the profile and in the block
        ("block", SEATS),
    ]
    assert result.memories == tuple(m for m in result.injected if m.channel == "block")
    assert [m.content for m in result.standing_rules] == [RULE]
    assert [r.content for r in result.pinned] == [PINNED]
    assert [r.content for r in result.profile] == [PROFILE, SEATS]
    system, block = result.append_system_context or "", result.prepend_context or ""
    for m in result.injected:
        assert m.content in (block if m.channel == "block" else system)
    # every one was a candidate of this message's search: its real relevance, as a search gives
    for m in result.injected:
        assert m.score is not None and m.score == pytest.approx(hits[m.content]), m.content
        assert m.embedding_score is not None and m.keyword_score is not None
    seats = [m for m in result.injected if m.content == SEATS]
    assert seats[0].score == seats[1].score


def test_a_memory_the_search_did_not_score_says_so_with_none() -> None:
    # keyword search: only memories sharing a word with the message are candidates
    with _memory(recall={"strategy": "keyword"}) as memory:
        result = memory.recall(QUESTION, user_id=USER)
        short = memory.recall("k", user_id=USER)  # too short to search: no score at all
    assert result is not None and result.strategy == "keyword"
    scores = {(m.channel, m.content): m.score for m in result.injected}
    assert scores[("pinned", PINNED)] is None
    assert scores[("profile", PROFILE)] is None
    assert scores[("standing_rule", RULE)] is None
    assert scores[("block", SEATS)] is not None and scores[("block", SEATS)] > 0
    assert scores[("profile", SEATS)] == scores[("block", SEATS)]
    assert short is not None and short.strategy == "skipped" and short.memories == ()
    assert _channels(short) == [
        ("standing_rule", RULE),
        ("pinned", PINNED),
        ("profile", PROFILE),
        ("profile", SEATS),
    ]
    assert all(m.score is None for m in short.injected)


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_turn_event_lists_every_memory_with_its_channel_and_score(
    use_async: bool,
) -> None:
    events: list[Any] = []
    with _memory() as memory:
        agent = create_agent(
            FakeToolCallingChatModel(script=["Window seat."]),
            middleware=[memory.middleware(user_id=USER, on_turn=events.append, capture=False)],
        )
        turn = {"messages": [{"role": "user", "content": QUESTION}]}
        if use_async:
            await agent.ainvoke(turn)
        else:
            agent.invoke(turn)
        expected = memory.recall(QUESTION, user_id=USER)
    (event,) = events
    assert expected is not None
    assert event["memories"] == [
        {"id": m.id, "content": m.content, "score": m.score, "type": m.type, "channel": m.channel}
        for m in expected.injected
    ]
    # the old event listed only the block: one of the five
    assert [(m["channel"], m["content"]) for m in event["memories"]] == _channels(expected)
    channels = [m["channel"] for m in event["memories"]]
    assert (channels.count("pinned"), channels.count("profile")) == (
        event["pinned"],
        event["profile"],
    )
