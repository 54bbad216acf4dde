"""The optional reranking stage (issue 7 #6): any `BaseDocumentCompressor`, bounded, degrading."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from langchain_tdai_recall import ConfigError, TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings

USER = "u1"


class KeywordJudge(BaseDocumentCompressor):
    """A stand-in for a cross-encoder: keeps documents containing a word it was told matters."""

    decisive: str
    delay_s: float = 0.0
    fail: bool = False
    calls: int = 0

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail:
            msg = "reranker service unavailable"
            raise RuntimeError(msg)
        kept = [d for d in documents if self.decisive in d.page_content.lower()]
        return [
            Document(page_content=d.page_content, metadata={**d.metadata, "relevance_score": 0.9})
            for d in kept
        ]


def _store(reranker: Any, config: dict[str, Any] | None = None) -> TdaiMemory:
    memory = TdaiMemory.open(None, embeddings=HashEmbeddings(64), reranker=reranker, config=config)
    memory.add_memory("Allergic to peanuts", type="persona", user_id=USER)
    memory.add_memory("Planning a trip to Kyoto in May", user_id=USER)
    memory.add_memory("Likes chocolate bars after running", user_id=USER)
    memory.flush()
    return memory


def test_reranker_selection_replaces_the_threshold() -> None:
    # "Snickers" shares no word with the allergy; a reranker that knows better brings it in
    judge = KeywordJudge(decisive="peanut")
    with _store(judge) as memory:
        plain = memory.recall("Can I have a Snickers bar?", user_id=USER)
        assert plain is not None and plain.reranked
        assert [m.content for m in plain.memories] == ["Allergic to peanuts"]
        assert plain.memories[0].rerank_score == pytest.approx(0.9)
        assert judge.calls == 1
    with _store(None) as memory:
        without = memory.recall("Can I have a Snickers bar?", user_id=USER)
        assert without is not None and not without.reranked
        assert "Allergic to peanuts" not in [m.content for m in without.memories]


def test_a_failing_reranker_falls_back_to_the_fused_order(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
    with _store(KeywordJudge(decisive="peanut", fail=True)) as memory:
        result = memory.recall("trip to Kyoto in May", user_id=USER)
    assert result is not None and not result.reranked
    assert [m.content for m in result.memories][:1] == ["Planning a trip to Kyoto in May"]
    assert result.error and "reranker failed" in result.error
    assert any("reranker failed" in r.getMessage() for r in caplog.records)
    # the exception's own words (a service's message may quote the query) only at DEBUG
    assert not any("unavailable" in r.getMessage() for r in caplog.records)


def test_a_slow_reranker_is_bounded_by_the_recall_budget() -> None:
    judge = KeywordJudge(decisive="kyoto", delay_s=5.0)
    cfg = {"recall": {"timeoutMs": 800}}
    with _store(judge, cfg) as memory:
        started = time.monotonic()
        result = memory.recall("trip to Kyoto in May", user_id=USER)
        elapsed = time.monotonic() - started
        memory.close(timeout=0.5)
    assert elapsed < 1.5
    # either the fused order (reranker timed out inside the budget) or nothing (recall timeout)
    if result is not None:
        assert not result.reranked
        assert result.error and "reranker" in result.error


def test_reranker_must_be_a_document_compressor() -> None:
    with pytest.raises(ConfigError, match="BaseDocumentCompressor"):
        TdaiMemory.open(None, embeddings=None, reranker=object())  # type: ignore[arg-type]


def test_reranker_sees_only_the_scope_and_never_pinned_memories() -> None:
    seen: list[str] = []

    class Spy(BaseDocumentCompressor):
        def compress_documents(
            self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
        ) -> Sequence[Document]:
            seen.extend(d.page_content for d in documents)
            return list(documents)

    with _store(Spy()) as memory:
        memory.add_memory("Other user's peanut farm", user_id="someone-else")
        memory.add_memory("Takes insulin daily", type="persona", priority=95, user_id=USER)
        memory.flush()
        result = memory.recall("peanut insulin chocolate", user_id=USER)
    assert result is not None
    assert "Other user's peanut farm" not in seen
    assert "Takes insulin daily" not in seen  # pinned into the system context instead
    assert [m.content for m in result.pinned] == ["Takes insulin daily"]
