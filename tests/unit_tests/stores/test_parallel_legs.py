"""A large scope's hybrid search runs its two legs at once, with the very same results."""

from __future__ import annotations

import random

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.recall import search
from langchain_tdai_recall.testing import HashEmbeddings

from ._words import phrase

QUERIES = ["piano lessons", "花生 过敏", "trip to Lyon in the morning", "海边", "dog", "zzz"]


def _hits(memory: TdaiMemory) -> list[object]:
    out: list[object] = []
    for q in QUERIES:
        for kwargs in ({"limit": 8}, {"limit": 3, "type": "persona"}, {"limit": 5, "scene": "tr"}):
            out.append(
                [
                    (h.id, h.score, h.embedding_score, h.keyword_score)
                    for h in memory.search_memories(q, user_id="u", min_score=0.0, **kwargs)
                ]
            )
        result = memory.recall(q, user_id="u")
        out.append(None if result is None else (result.prepend_context, result.strategy))
    return out


def test_parallel_legs_rank_exactly_like_sequential_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    records = [
        {
            "content": f"{phrase(rng, 2, 6)} #{i}",
            "type": rng.choice(["persona", "episodic"]),
            "scene_name": rng.choice(["", "travel", "food"]),
        }
        for i in range(600)
    ]
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=24)) as memory:
        memory.add_memories(records, user_id="u")
        memory.flush()
        monkeypatch.setattr(search, "PARALLEL_LEGS_MIN_ROWS", 10**9)
        sequential = _hits(memory)
        calls: list[object] = []
        original = search._both_legs

        def counted(*args: object, **kwargs: object) -> object:
            calls.append(args)
            return original(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(search, "PARALLEL_LEGS_MIN_ROWS", 1)
        monkeypatch.setattr(search, "_both_legs", counted)
        parallel = _hits(memory)
    assert calls  # the parallel path ran
    assert parallel == sequential
    assert any(sequential)
