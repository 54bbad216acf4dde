"""`TdaiStore` conformance-style checks on the in-memory and directory stores (issues 16, 24).

The same checks run on PostgreSQL in `tests/integration_tests/stores/test_graph_store_postgres.py`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.testing import HashEmbeddings
from tests import graph_store_cases as cases


@pytest.mark.parametrize("check", cases.ALL_CHECKS, ids=lambda c: c.__name__[6:])
def test_store_behaviour(memory: TdaiMemory, check: Callable[[TdaiMemory], None]) -> None:
    check(memory)


@pytest.mark.parametrize("check", cases.OPEN_CHECKS, ids=lambda c: c.__name__[6:])
def test_read_your_writes(
    store_kind: str, tmp_path: Path, check: Callable[[cases.OpenMemory], None]
) -> None:
    path = None if store_kind == "memory" else tmp_path / "store"
    check(lambda embeddings: TdaiMemory.open(path, embeddings=embeddings))


def test_sweep_interval_minutes_shortens_the_background_sweep() -> None:
    config = {"store": {"expiry_sweep_seconds": 3600}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16), config=config) as mem:
        sweeper = mem._sweeper
        assert sweeper is not None
        mem.as_store(ttl={"default_ttl": 5})  # no sweep interval: the memory's own stays
        assert sweeper.interval == 3600
        mem.add_memory("Parked on level 3.", user_id="alice", expires_at="2001-01-01T00:00:00Z")
        assert mem._store.expired_memories("9999", limit=10)
        mem.as_store(ttl={"sweep_interval_minutes": 2})
        assert sweeper.interval == 120
        deadline = time.monotonic() + 10
        while mem._store.expired_memories("9999", limit=10) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mem._store.expired_memories("9999", limit=10) == []  # a pass ran at once
        mem.as_store(ttl={"sweep_interval_minutes": 30})  # a longer one never lengthens it
        assert sweeper.interval == 120
        for bad in (0, -1, True, "5"):
            with pytest.raises(ConfigError, match="sweep_interval_minutes"):
                mem.as_store(ttl={"sweep_interval_minutes": bad})  # type: ignore[typeddict-item]
        assert sweeper.interval == 120


class _StuckDocuments(HashEmbeddings):
    """Answers queries at once; every document embedding hangs until released."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__(dims=64)
        self.released = threading.Event()
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.released.wait(30)
        return super().embed_documents(texts)


def test_read_your_writes_is_bounded_by_the_embedding_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    emb = _StuckDocuments()
    config = {"embedding": {"query_timeout_ms": 300}}
    mem = TdaiMemory.open(None, embeddings=emb, config=config)
    try:
        store = mem.as_store()
        store.put(cases.ALICE, "a", {"content": "Alice keeps bees."})
        start = time.monotonic()
        (hit,) = store.search(cases.ALICE, query="bees")
        first = time.monotonic() - start
        assert (hit.key, hit.score) == ("a", None)  # found, not ranked: no vector in time
        assert first < 2.0
        start = time.monotonic()
        assert store.search(cases.ALICE, query="bees")[0].score is None
        assert time.monotonic() - start < first  # a hung embedder is not waited for twice
        texts = mem.as_store(index={"fields": ["title", "body"]})
        with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall.graph_store"):
            texts.put(cases.ALICE, "b", {"title": "Bees", "body": "On the roof."})
        assert "could not be embedded in time" in caplog.text
        assert store.get(cases.ALICE, "b") is not None  # stored all the same
        emb.released.set()
        assert mem.flush(timeout=30)
        ranked = store.search(cases.ALICE, query="bees")
        assert all(h.score is not None for h in ranked)
    finally:
        emb.released.set()
        mem.close()


def test_field_vectors_of_another_embedder_are_not_used(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as mem:
        store = mem.as_store(index={"fields": ["title", "body"]})
        store.put(cases.ALICE, "doc", {"title": "Tokyo trip", "body": "ramen tour"})
        rec = mem.get_memory("doc", user_id="alice")
        assert rec is not None
        kept = rec.metadata["tdai_store"]["vectors"]
        assert (kept["embedder"], kept["dims"]) == ("hash-embeddings-v1-64", 64)
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=32)) as mem:  # another embedder
        mem.flush()
        (hit,) = mem.as_store().search(cases.ALICE, query="ramen tour")
        expected = cases.cosine(HashEmbeddings(dims=32), "ramen tour", "Tokyo trip\nramen tour")
        assert hit.score == pytest.approx(expected, abs=1e-5)  # the memory's own vector
