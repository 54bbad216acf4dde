"""The injection gate (issue 7): threshold, on-topic relaxation, priority, monotonicity."""

from __future__ import annotations

import random

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.recall.gate import (
    ANCHOR_SHARE,
    ON_TOPIC_COVERAGE,
    ON_TOPIC_SHARE,
    injected,
    priority_factor,
)
from langchain_tdai_recall.recall.search import RankedHit, SearchOutcome

USER = "u1"


def _hit(rowid: int, score: float, priority: int = 50) -> RankedHit:
    return RankedHit(rowid, score, score, score, None, priority)


def _outcome(*hits: RankedHit, coverage: float) -> SearchOutcome:
    return SearchOutcome(list(hits), "keyword", scope_coverage=coverage)


def test_off_topic_messages_keep_the_full_threshold() -> None:
    outcome = _outcome(_hit(1, 0.35), _hit(2, 0.2), coverage=ON_TOPIC_COVERAGE - 0.01)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1]


def test_on_topic_messages_bring_the_related_memories() -> None:
    # most of the message's words occur in the scope and its best match is strong enough
    outcome = _outcome(_hit(1, 0.35), _hit(2, 0.2), _hit(3, 0.1), coverage=ON_TOPIC_COVERAGE)
    assert ANCHOR_SHARE * 0.3 <= 0.35 and ON_TOPIC_SHARE * 0.3 <= 0.2
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1, 2]


def test_on_topic_needs_an_anchor() -> None:
    weak = _outcome(_hit(1, ANCHOR_SHARE * 0.3 - 0.01), _hit(2, 0.2), coverage=1.0)
    assert injected(weak, threshold=0.3, limit=5) == []


def test_priority_lowers_the_threshold_gradually() -> None:
    assert priority_factor(50) == priority_factor(70) == 1.0
    assert priority_factor(85) == pytest.approx(0.5)
    assert priority_factor(100) == 0.0
    assert priority_factor(-1) == 1.0
    factors = [priority_factor(p) for p in range(101)]
    assert factors == sorted(factors, reverse=True)
    outcome = _outcome(_hit(1, 0.2, priority=85), _hit(2, 0.2), coverage=0.0)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=5)] == [1]


def test_pinned_rows_are_left_out_and_the_limit_holds() -> None:
    outcome = _outcome(*(_hit(i, 0.9) for i in range(10)), coverage=1.0)
    assert [h.rowid for h in injected(outcome, threshold=0.3, limit=3, exclude={0, 2})] == [
        1,
        3,
        4,
    ]


def test_more_memories_never_inject_fewer() -> None:
    """Adding memories (matching or not) never shrinks what a message injects (below the cap)."""
    rng = random.Random(11)
    words = [
        "tea",
        "coffee",
        "kyoto",
        "trip",
        "peanut",
        "allergy",
        "running",
        "shoes",
        "sister",
        "birthday",
        "cat",
        "hotel",
    ]
    with TdaiMemory.open(None, embeddings=None) as memory:
        queries = [" ".join(rng.sample(words, 3)) for _ in range(20)]
        before = {q: len(memory.recall(q, user_id=USER).memories) for q in queries}  # type: ignore[union-attr]
        for step in range(40):
            memory.add_memory(" ".join(rng.sample(words, rng.randint(1, 4))), user_id=USER)
            for q in queries:
                result = memory.recall(q, user_id=USER)
                assert result is not None
                count = len(result.memories)
                assert count >= min(before[q], 5), (step, q)
                before[q] = count


def test_held_out_memories_need_only_the_on_topic_share() -> None:
    """A memory the session's held profile leaves out (added during the conversation) reaches
    the block when the message is about it, even when the message as a whole is not on topic."""
    hits = (_hit(1, 0.2), _hit(2, 0.2), _hit(3, ON_TOPIC_SHARE * 0.3 - 0.01))
    off_topic = _outcome(*hits, coverage=0.0)
    assert injected(off_topic, threshold=0.3, limit=5) == []
    chosen = injected(off_topic, threshold=0.3, limit=5, held_out={2, 3})
    assert [h.rowid for h in chosen] == [2]  # 3 is below even the relaxed bar
