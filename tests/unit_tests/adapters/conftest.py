"""Fixtures of the LangChain adapter tests: a seeded two-user store and capture helpers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings

ALICE_FACTS = (
    ("Alice prefers window seats on long flights", "persona"),
    ("Alice is allergic to peanuts", "persona"),
    ("Alice flew to Tokyo for a conference in May", "episodic"),
    ("Alice wants answers in short bullet points", "instruction"),
)
BOB_FACTS = (
    ("Bob prefers aisle seats because he is tall", "persona"),
    ("Bob drinks oat milk flat whites", "persona"),
)
ALICE_PERSONA = "Alice is a product manager who travels a lot."
BOB_PERSONA = "Bob is a backend engineer in Berlin."


def seed(memory: TdaiMemory) -> TdaiMemory:
    """Two users with memories, personas and (for Alice) one scene."""
    for content, kind in ALICE_FACTS:
        memory.add_memory(content, type=kind, user_id="alice")  # type: ignore[arg-type]
    for content, kind in BOB_FACTS:
        memory.add_memory(content, type=kind, user_id="bob")  # type: ignore[arg-type]
    memory.set_persona(ALICE_PERSONA, user_id="alice")
    memory.set_persona(BOB_PERSONA, user_id="bob")
    memory.upsert_scene(
        "travel",
        summary="How Alice likes to travel",
        body="Window seats, early flights, no peanuts on board.",
        user_id="alice",
    )
    memory.flush()  # vectors are computed in the background; start every test with all of them
    return memory


@pytest.fixture
def mem() -> Iterator[TdaiMemory]:
    """An in-memory store with Alice's and Bob's memories."""
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        yield seed(memory)


@pytest.fixture
def empty_mem() -> Iterator[TdaiMemory]:
    """An empty in-memory store."""
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        yield memory


class EventCollector(BaseCallbackHandler):
    """Collects custom events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))


@pytest.fixture
def collector() -> EventCollector:
    return EventCollector()
