"""`RecallResult.strategy` says what actually ran while vectors are still being computed.

Writes are acknowledged before their vectors exist (they are embedded in the background), and a
store re-embeds in the background after an embedder change. Until the vectors are there the
vector leg cannot see those memories: a recall over a scope with no vector at all ran on
keywords and must say so, and every recall says how many memories it could not compare.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall._embedding.upkeep import PROBE_TEXT
from langchain_tdai_recall.testing import (
    FailingEmbeddings,
    FakeToolCallingChatModel,
    HashEmbeddings,
    SlowEmbeddings,
)


class HeldDocuments(Embeddings):
    """Hash vectors; document batches wait until `release` is set, queries never wait."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.inner = HashEmbeddings(32)
        self.identity = "held-documents-32"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.release.wait(30)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_a_recall_before_any_vector_exists_reports_keyword_and_the_backlog() -> None:
    release = threading.Event()
    with TdaiMemory.open(None, embeddings=HeldDocuments(release)) as memory:
        memory.add_memory("Allergic to peanuts", user_id="u")
        memory.add_memory("Plans a trip to Kyoto", user_id="u")
        early = memory.recall("peanuts at dinner", user_id="u")
        assert early is not None
        assert early.strategy == "keyword"  # the old code said "hybrid"
        assert early.pending_vectors == 2
        assert early.error is not None and "2 memories" in early.error
        release.set()
        assert memory.flush(timeout=30)
        late = memory.recall("peanuts at dinner", user_id="u")
    assert late is not None
    assert late.strategy == "hybrid" and late.pending_vectors == 0 and late.error is None


def test_a_partly_embedded_scope_stays_hybrid_and_counts_what_is_pending() -> None:
    release = threading.Event()
    release.set()
    with TdaiMemory.open(None, embeddings=HeldDocuments(release)) as memory:
        memory.add_memory("Allergic to peanuts", user_id="u")
        assert memory.flush(timeout=30)
        release.clear()
        memory.add_memory("Plans a trip to Kyoto", user_id="u")
        result = memory.recall("peanuts in Kyoto", user_id="u")
        release.set()
    assert result is not None
    assert result.strategy == "hybrid" and result.pending_vectors == 1


def test_the_turn_event_carries_the_backlog() -> None:
    release = threading.Event()
    events: list[Any] = []
    with TdaiMemory.open(None, embeddings=HeldDocuments(release)) as memory:
        memory.add_memory("Allergic to peanuts", user_id="u")
        agent = create_agent(
            FakeToolCallingChatModel(script=["Noted."]),
            middleware=[memory.middleware(user_id="u", on_turn=events.append)],
        )
        agent.invoke({"messages": [{"role": "user", "content": "peanuts at dinner?"}]})
        release.set()
    (event,) = events
    assert event["strategy"] == "keyword" and event["pending_vectors"] == 1


# -- issue 26 #2: the strategy names the legs that produced scores, on every path ---------------


class Shrunk(HashEmbeddings):
    """Stored vectors of 32 dimensions; the query comes back with 16 (an embedder changed)."""

    def embed_query(self, text: str) -> list[float]:
        return HashEmbeddings(16).embed_query(text)


class WithStrategy:
    """A memory, what recall returned for one message, and the turn event of the same message."""

    def __init__(self, memory: TdaiMemory, text: str) -> None:
        self.result = memory.recall(text, user_id="u")
        events: list[Any] = []
        agent = create_agent(
            FakeToolCallingChatModel(script=["Noted."]),
            middleware=[memory.middleware(user_id="u", on_turn=events.append, capture=False)],
        )
        agent.invoke({"messages": [{"role": "user", "content": text}]})
        (self.event,) = events


def _seed(memory: TdaiMemory) -> None:
    memory.add_memory("Allergic to peanuts", type="persona", user_id="u")
    memory.add_memory("Plans a trip to Kyoto in spring", user_id="u")


def _open(embeddings: Embeddings | None, **config: Any) -> TdaiMemory:
    return TdaiMemory.open(None, embeddings=embeddings, config=config or None)


def test_a_new_store_reports_keyword_not_hybrid() -> None:
    # nothing stored: no leg scored anything, and no vector leg ran (the old code said "hybrid")
    with _open(HashEmbeddings(32)) as memory:
        seen = WithStrategy(memory, "peanuts at dinner?")
    assert seen.result is not None
    assert seen.result.strategy == "keyword" and seen.result.memories == ()
    assert seen.result.error is None and seen.result.pending_vectors == 0
    assert seen.event["strategy"] == "keyword"


def test_the_strategy_of_every_degraded_path_is_keyword() -> None:
    release = threading.Event()
    cases: dict[str, tuple[Embeddings | None, dict[str, Any], str | None]] = {
        "vectors pending": (HeldDocuments(release), {}, "still being computed"),
        "embedder fails": (FailingEmbeddings(HashEmbeddings(32)), {}, "query embedding failed"),
        "embedder times out": (
            SlowEmbeddings(HashEmbeddings(32), delay_s=1.0),
            {"embedding": {"query_timeout_ms": 50}},
            "exceeded",
        ),
        "no embedder": (None, {}, None),
    }
    try:
        for name, (embeddings, config, error) in cases.items():
            with _open(embeddings, **config) as memory:
                _seed(memory)
                if name != "vectors pending":
                    assert memory.flush(timeout=30)
                seen = WithStrategy(memory, "peanuts at dinner?")
            result = seen.result
            assert result is not None, name
            assert result.strategy == "keyword", name
            assert seen.event["strategy"] == "keyword", name
            assert [m.content for m in result.memories] == ["Allergic to peanuts"], name
            assert all(m.embedding_score is None for m in result.memories), name
            if error is None:
                assert result.error is None, name
            else:
                assert result.error is not None and error in result.error, (name, result.error)
    finally:
        release.set()


def test_a_healthy_hybrid_recall_has_embedding_scores() -> None:
    with _open(HashEmbeddings(32)) as memory:
        _seed(memory)
        assert memory.flush(timeout=30)
        seen = WithStrategy(memory, "peanuts at dinner?")
    assert seen.result is not None and seen.result.strategy == "hybrid"
    assert seen.event["strategy"] == "hybrid"
    assert all(m.embedding_score is not None for m in seen.result.memories)


def test_a_query_vector_of_another_dimension_leaves_every_memory_pending() -> None:
    # the stored vectors cannot be compared with the query: the vector leg saw none of them
    # (the old code said keyword but counted 0 pending)
    with _open(Shrunk(32)) as memory:
        _seed(memory)
        assert memory.flush(timeout=30)
        seen = WithStrategy(memory, "peanuts at dinner?")
    assert seen.result is not None
    assert seen.result.strategy == "keyword" and seen.result.pending_vectors == 2
    assert seen.result.error is not None and "dimension" in seen.result.error
    assert (seen.event["strategy"], seen.event["pending_vectors"]) == ("keyword", 2)


class ChangedDimension(Embeddings):
    """One embedder identity whose vectors are now 16-dimensional (its endpoint changed).

    The store's dimension probe waits until the first query embedding starts; that query then
    waits until the old vectors are dropped for re-embedding (the first re-embedding call), and
    another request refreshes the scope's shared index before the query's answer comes back.
    """

    def __init__(self, dims: int, *, memory_slot: list[TdaiMemory] | None = None) -> None:
        self.inner = HashEmbeddings(dims)
        self.identity = "endpoint-without-dimensions-in-its-name"
        self.memory_slot = memory_slot
        self.query_started = threading.Event()
        self.reembedding = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.memory_slot is not None:
            if texts == [PROBE_TEXT]:
                self.query_started.wait(30)
            else:
                self.reembedding.set()  # the old vectors were dropped before this call
                self.release.wait(30)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        if self.memory_slot is not None:
            self.query_started.set()
            assert self.reembedding.wait(30)
            memory = self.memory_slot[0]
            memory._store.index(memory.scope("u"), "l1")  # another request refreshes it
        return self.inner.embed_query(text)


def test_a_store_re_embedding_after_a_dimension_change_never_reports_hybrid(
    tmp_path: Path,
) -> None:
    """Issue 26 #2: reopened with the same embedder at another dimension, a recall whose query
    was embedded while the old vectors were dropped said `hybrid` with no embedding score."""
    with TdaiMemory.open(tmp_path, embeddings=ChangedDimension(32)) as memory:
        memory.add_memories(
            [{"content": f"fact {i} about jasmine tea"} for i in range(12)], user_id="u"
        )
        assert memory.flush(timeout=30)
    slot: list[TdaiMemory] = []
    changed = ChangedDimension(16, memory_slot=slot)
    with TdaiMemory.open(tmp_path, embeddings=changed) as memory:
        slot.append(memory)
        try:
            result = memory.recall("fact 3 about jasmine tea", user_id="u")
        finally:
            changed.release.set()
        assert result is not None and result.memories
        assert result.strategy == "keyword"  # the old code said "hybrid"
        assert all(m.embedding_score is None for m in result.memories)
        assert result.pending_vectors == 12
        assert result.error is not None and "12 memories" in result.error
        assert memory.flush(timeout=30)
        after = memory.recall("fact 3 about jasmine tea", user_id="u")
    assert after is not None and after.strategy == "hybrid"
    assert any(m.embedding_score is not None for m in after.memories)
