"""Random short texts over a small mixed English/Chinese vocabulary, for store tests.

A few words repeat often enough that keyword postings grow long and queries hit many rows,
which is what the snapshot, sparse-scoring and parallel-leg tests need.
"""

from __future__ import annotations

import random

from langchain_tdai_recall.stores._index.keyword import KeywordHits

WORDS = [
    "coffee",
    "tea",
    "morning",
    "trip",
    "Lyon",
    "Paris",
    "meeting",
    "notes",
    "guitar",
    "piano",
    "dog",
    "cat",
    "花生",
    "过敏",
    "蛋糕",
    "海边",
]


def phrase(rng: random.Random, shortest: int, longest: int) -> str:
    """Between `shortest` and `longest` words of `WORDS`, drawn with `rng`."""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(shortest, longest)))


def hit_fields(hits: KeywordHits) -> tuple[object, ...]:
    """Every field of keyword hits as plain values, to compare two searches exactly."""
    return (
        hits.ids.tolist(),
        hits.coverage.tolist(),
        hits.ranked.tolist(),
        hits.bm25.tolist(),
        hits.found,
        hits.scope_coverage,
    )
