"""Recall reads only the pinned records it injects, even when thousands are pinned."""

from __future__ import annotations

import logging

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.recall.engine import PROFILE_BATCH
from langchain_tdai_recall.testing import HashEmbeddings


def test_recall_loads_only_the_pinned_records_it_injects(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    records = [
        {"id": f"m{i:03d}", "content": f"fact {i} about sailing", "priority": 90 + i % 3}
        for i in range(300)
    ]
    records += [
        {"id": f"r{i}", "content": f"rule {i}", "type": "instruction", "priority": -1}
        for i in range(4)
    ]
    config = {"recall": {"max_pinned": 5, "profile_max_tokens": None}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16), config=config) as memory:
        memory.add_memories(records, user_id="u")
        memory.flush()
        store = memory._store
        asked: list[int] = []
        original = store.memories_by_ref

        def spy(scope: object, refs: list[int]) -> object:
            asked.append(len(refs))
            return original(scope, refs)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "memories_by_ref", spy)
        with caplog.at_level(logging.WARNING, "langchain_tdai_recall"):
            result = memory.recall("what about sailing?", user_id="u")
    assert result is not None
    # highest priority (92) first, then oldest (one call: the same time), then id
    assert [m.id for m in result.pinned] == ["m002", "m005", "m008", "m011", "m014"]
    assert asked[0] == 4 + 5  # the rules and the five pinned memories, not all 300
    assert "scope has 300 memories pinned by priority; the first 5" in caplog.text


def test_the_profile_reads_a_bounded_number_of_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile is chosen on the index's row fields; only its budget's worth is read."""
    records = [{"id": f"m{i:04d}", "content": f"fact {i} about sailing"} for i in range(3000)]
    config = {"recall": {"profile_max_tokens": 80}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16), config=config) as memory:
        memory.add_memories(records, user_id="u")
        memory.flush()
        store = memory._store
        asked: list[int] = []
        original = store.memories_by_ref

        def spy(scope: object, refs: list[int]) -> object:
            asked.append(len(refs))
            return original(scope, refs)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "memories_by_ref", spy)
        first = memory.recall("hello there", user_id="u")
        reads_first = sum(asked)
        asked.clear()
        second = memory.recall("hello again", user_id="u")
    assert first is not None and second is not None
    # all of equal priority and type, written in one call: oldest first, then id
    assert [m.id for m in first.profile][:3] == ["m0000", "m0001", "m0002"]
    assert sum(len(f"- [episodic] {m.content}") + 1 for m in first.profile) <= 300
    assert first.append_system_context == second.append_system_context
    assert reads_first <= PROFILE_BATCH + len(first.profile)  # one batch measured, not 3000
    # the profile is chosen, read and rendered once: a later recall reads only the records of
    # its memory block (the lead rule may list a weak best match there), never the profile's
    assert sum(asked) == len(second.memories)


def test_the_pinned_choice_is_kept_until_the_memories_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {"recall": {"max_pinned": 2}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16), config=config) as memory:
        memory.add_memories(
            [{"id": f"m{i}", "content": f"fact {i}", "priority": 90} for i in range(5)],
            user_id="u",
        )
        memory.flush()  # vectors stored (that rewrites the rows, too)
        index = memory._store.index(memory.scope("u", None), "l1")
        assert index is not None
        chosen: list[int] = []
        original = index.pinned_rows

        def spy(min_priority: int) -> list[tuple[int, int]]:
            chosen.append(min_priority)
            return original(min_priority)

        monkeypatch.setattr(index, "pinned_rows", spy)
        first = memory.recall("facts", user_id="u")
        memory.record_messages([{"role": "user", "content": "hello"}], session_key="s", user_id="u")
        memory.flush()
        second = memory.recall("facts", user_id="u")
        assert first is not None and second is not None
        assert [m.id for m in first.pinned] == [m.id for m in second.pinned] == ["m0", "m1"]
        assert len(chosen) == 1  # a message (L0) does not change the pinned memories
        memory.add_memory("urgent fact", id="top", priority=99, user_id="u")
        third = memory.recall("facts", user_id="u")
        assert third is not None
        assert [m.id for m in third.pinned] == ["top", "m0"]
        assert len(chosen) == 2
        memory.delete_memory("top", user_id="u")
        fourth = memory.recall("facts", user_id="u")
        assert fourth is not None and [m.id for m in fourth.pinned] == ["m0", "m1"]


def test_the_too_many_pinned_warning_is_logged_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = {"recall": {"max_pinned": 2}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16), config=config) as memory:
        memory.add_memories(
            [{"id": f"m{i}", "content": f"fact {i}", "priority": 95} for i in range(5)],
            user_id="u",
        )
        memory.flush()
        with caplog.at_level(logging.WARNING, "langchain_tdai_recall"):
            for _ in range(5):
                memory.recall("fact", user_id="u")
            assert caplog.text.count("memories pinned by priority") == 1  # not once per recall
            memory.add_memory("fact 9", priority=95, user_id="u")
            memory.recall("fact", user_id="u")
    assert caplog.text.count("memories pinned by priority") == 2
