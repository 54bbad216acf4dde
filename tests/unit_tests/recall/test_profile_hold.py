"""A session keeps the profile it started with, so the system message stays cached.

Memories added during the conversation (by memory formation, typically) reach the model through
the memory block when a message is about them; the profile is chosen afresh when the session
ends, when the pinned memories change, or when a memory it shows is deleted or edited.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.recall.holds import ProfileHolds
from langchain_tdai_recall.testing import HashEmbeddings

FACTS = [
    {"id": "veg", "content": "Is vegetarian", "type": "persona", "priority": 60},
    {"id": "dog", "content": "Has a golden retriever named Biscuit", "type": "persona"},
    {"id": "trip", "content": "Plans a trip to Kyoto in May", "type": "episodic"},
]
NEW = "Started learning the cello with a teacher called Ines"


@pytest.fixture
def mem(memory: TdaiMemory) -> Iterator[TdaiMemory]:
    memory.add_memories(FACTS, user_id="nina")
    memory.flush()
    yield memory


def _system(memory: TdaiMemory, text: str, session: str | None = "s1") -> str:
    result = memory.recall(text, user_id="nina", session_key=session)
    assert result is not None and result.append_system_context is not None
    return result.append_system_context


def test_a_memory_added_during_the_session_does_not_rewrite_the_system_message(
    mem: TdaiMemory,
) -> None:
    first = _system(mem, "Plan dinner for Friday")
    mem.add_memory(NEW, type="persona", priority=60, user_id="nina")
    mem.flush()
    assert _system(mem, "What should I pack?") == first
    # ... and reaches the model through the block when the message is about it
    result = mem.recall("When is my cello lesson with Ines?", user_id="nina", session_key="s1")
    assert result is not None and result.append_system_context == first
    assert NEW in (result.prepend_context or "")
    # another session, and a recall without one, see the profile as it is now
    assert NEW in _system(mem, "hello", session="s2")
    assert NEW in _system(mem, "hello", session=None)


def test_a_held_out_memory_stays_out_of_unrelated_turns(mem: TdaiMemory) -> None:
    _system(mem, "Plan dinner for Friday")
    mem.add_memory(NEW, type="persona", priority=60, user_id="nina")
    mem.flush()
    result = mem.recall("What is the capital of Peru?", user_id="nina", session_key="s1")
    assert result is not None
    assert NEW not in (result.prepend_context or "")
    assert NEW not in (result.append_system_context or "")


def test_a_pinned_change_takes_the_profile_afresh(mem: TdaiMemory) -> None:
    first = _system(mem, "Plan dinner for Friday")
    mem.add_memory(NEW, type="persona", priority=60, user_id="nina")
    assert _system(mem, "hello") == first
    mem.add_memory("Severely allergic to penicillin", type="persona", priority=95, user_id="nina")
    after = _system(mem, "hello")
    assert "Severely allergic to penicillin" in after
    assert NEW in after  # one change of the system message carries both


def test_a_deleted_or_edited_memory_is_never_shown_by_a_held_profile(mem: TdaiMemory) -> None:
    assert "Has a golden retriever" in _system(mem, "hello")
    mem.delete_memory("dog", user_id="nina")
    assert "Has a golden retriever" not in _system(mem, "hello")
    mem.add_memory("Is vegan", id="veg", type="persona", priority=60, user_id="nina")
    text = _system(mem, "hello")
    assert "Is vegan" in text and "Is vegetarian" not in text


def test_forgetting_the_user_ends_the_hold(mem: TdaiMemory) -> None:
    assert "Is vegetarian" in _system(mem, "hello")
    assert len(mem._engine.holds) == 1
    mem.forget(user_id="nina")
    assert len(mem._engine.holds) == 0  # no memory text of the user is kept
    result = mem.recall("hello", user_id="nina", session_key="s1")
    assert result is None or "Is vegetarian" not in (result.append_system_context or "")


def test_the_session_end_releases_the_hold(mem: TdaiMemory) -> None:
    first = _system(mem, "hello")
    mem.add_memory(NEW, type="persona", priority=60, user_id="nina")
    assert _system(mem, "hello") == first
    mem.end_session("s1", user_id="nina")
    assert NEW in _system(mem, "hello")


def test_a_quiet_session_releases_the_hold() -> None:
    now = [1000.0]
    config = {"recall": {"profile_hold_seconds": 60}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        memory._engine.holds = ProfileHolds(clock=lambda: now[0])
        memory.add_memories(FACTS, user_id="nina")
        first = _system(memory, "hello")
        memory.add_memory(NEW, type="persona", priority=60, user_id="nina")
        now[0] += 59  # each recall of the session restarts the quiet time
        assert _system(memory, "hello") == first
        now[0] += 59
        assert _system(memory, "hello") == first
        now[0] += 61
        assert NEW in _system(memory, "hello")


def test_holding_can_be_switched_off() -> None:
    config = {"recall": {"profile_hold_seconds": None}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        memory.add_memories(FACTS, user_id="nina")
        _system(memory, "hello")
        memory.add_memory(NEW, type="persona", priority=60, user_id="nina")
        assert NEW in _system(memory, "hello")
