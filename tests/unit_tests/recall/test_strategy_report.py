"""`RecallResult.strategy` says what actually ran while vectors are still being computed.

Writes are acknowledged before their vectors exist (they are embedded in the background), and a
store re-embeds in the background after an embedder change. Until the vectors are there the
vector leg cannot see those memories: a recall over a scope with no vector at all ran on
keywords and must say so, and every recall says how many memories it could not compare.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings


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
