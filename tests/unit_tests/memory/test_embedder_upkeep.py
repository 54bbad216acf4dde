"""Issue 8 #6: a changed embedder is recognised and re-embedded; unusable vectors are retried.

The identity of an embedder includes the parameters that change its vectors (dimensions,
endpoint, deployment, ...), a changed dimension behind an unchanged identity is found by
probing, and a NaN, infinite or all-zero vector counts as a failed embedding: the row stays
pending (keyword-searchable) and is embedded again later, never stored as a zero vector.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_openai import OpenAIEmbeddings

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.embeddings import embedder_identity
from langchain_tdai_recall.testing import HashEmbeddings

from ._fakes import SwitchableEmbeddings


def test_embedder_identity_includes_dimensions_endpoint_and_deployment() -> None:
    model = "text-embedding-3-small"
    plain = embedder_identity(OpenAIEmbeddings(model=model, api_key="sk-secret-1"))
    ids = {
        plain,
        embedder_identity(OpenAIEmbeddings(model=model, dimensions=256, api_key="sk-secret-1")),
        embedder_identity(OpenAIEmbeddings(model=model, dimensions=512, api_key="sk-secret-1")),
        embedder_identity(
            OpenAIEmbeddings(model=model, base_url="http://127.0.0.1:8080/v1", api_key="sk-x")
        ),
        embedder_identity(OpenAIEmbeddings(model=model, deployment="mine", api_key="sk-x")),
    }
    assert len(ids) == 5
    assert plain == f"langchain_openai.embeddings.base.OpenAIEmbeddings:{model}"
    # the same settings give the same identity; secrets never appear in it
    assert plain == embedder_identity(OpenAIEmbeddings(model=model, api_key="sk-other"))
    assert not any("sk-" in identity for identity in ids)
    with_creds = embedder_identity(
        OpenAIEmbeddings(model=model, base_url="http://user:pw@host:1/v1?key=1", api_key="k")
    )
    assert "pw" not in with_creds and "key=1" not in with_creds and "host:1/v1" in with_creds


class _PlainEmbedder(Embeddings):
    """A user's embedder class without an `identity`, configured through `__init__`."""

    def __init__(self, model: str = "tiny", size: int = 16, timeout: float = 5.0) -> None:
        self.model = model
        self.size = size
        self.timeout = timeout

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] * self.size for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0] * self.size


def test_identity_of_any_embedder_class_covers_its_vector_shaping_parameters() -> None:
    base = embedder_identity(_PlainEmbedder())
    assert base.endswith("_PlainEmbedder:tiny")
    assert embedder_identity(_PlainEmbedder(size=32)) != base
    assert embedder_identity(_PlainEmbedder(timeout=60)) == base  # runtime knobs do not count


class _SameIdentity(Embeddings):
    """Hash vectors of a chosen dimension behind one fixed identity (a reconfigured endpoint)."""

    def __init__(self, dims: int) -> None:
        self.inner = HashEmbeddings(dims)
        self.identity = "endpoint-without-dimensions-in-its-name"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_changed_dimension_behind_an_unchanged_identity_is_reembedded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=_SameIdentity(64)) as mem:
        mem.add_memories(
            [{"content": f"fact {i} about jasmine tea"} for i in range(12)], user_id="u"
        )
        assert mem.flush(timeout=30)
        assert mem.stats().dimensions == 64
    caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
    with TdaiMemory.open(tmp_path, embeddings=_SameIdentity(32)) as mem:
        assert mem.flush(timeout=30)
        assert mem.stats().dimensions == 32
        assert mem.stats().pending_vectors == 0
        hits = mem.search_memories("fact 3 about jasmine tea", user_id="u")
        assert hits and hits[0].embedding_score is not None
        result = mem.recall("fact 3 about jasmine tea", user_id="u")
        assert result is not None and result.strategy == "hybrid"
        assert any(m.embedding_score is not None for m in result.memories)
    warnings = [r.getMessage() for r in caplog.records if "dimensional vectors" in r.getMessage()]
    assert len(warnings) == 1 and "12 stored vectors" in warnings[0]


def test_another_embedder_reembeds_in_the_background_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(64)) as mem:
        mem.add_memories([{"content": f"note {i} on bonsai"} for i in range(30)], user_id="u")
    caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(16)) as mem:
        assert mem.flush(timeout=30)
        assert mem.stats().pending_vectors == 0
        assert mem.stats().dimensions == 16
    warnings = [r.getMessage() for r in caplog.records if "another embedder" in r.getMessage()]
    assert len(warnings) == 1 and "re-embedding 30" in warnings[0]


def test_reindex_embeds_in_the_foreground_with_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(64)) as mem:
        mem.add_memories(
            [{"content": f"item {i} about maple syrup"} for i in range(40)], user_id="u"
        )
    with TdaiMemory.open(tmp_path, embeddings=_SameIdentity(16)) as mem:
        done = mem.reindex(show_progress=True)
        assert 0 <= done <= 40  # the background worker may have taken a share
        assert mem.stats().pending_vectors == 0
        assert mem.reindex() == 0
    if done:
        assert "embedding" in capsys.readouterr().err


def test_non_finite_vectors_are_failed_embeddings_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    emb = SwitchableEmbeddings(dims=32)
    caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
    with TdaiMemory.open(tmp_path, embeddings=emb) as mem:
        mem.add_memory("a bad apple story", id="bad", user_id="u")
        mem.add_memory("a good pear story", id="good", user_id="u")
        assert mem.flush(timeout=30)
        assert mem.stats().pending_vectors == 1  # never stored as a zero vector
        kept = {h.id: h for h in mem.search_memories("bad apple story", user_id="u")}
        assert "bad" in kept and kept["bad"].embedding_score is None  # keyword leg only
        assert any("unusable vectors" in r.getMessage() for r in caplog.records)
        emb.broken = False
        assert mem.flush(timeout=30)  # a flush retries rows waiting for a retry at once
        assert mem.stats().pending_vectors == 0
        hits = {h.id: h for h in mem.search_memories("bad apple story", user_id="u")}
        assert hits["bad"].embedding_score is not None


class _GatedEmbeddings(HashEmbeddings):
    """Embeds only once `gate` is set, so a backlog is certainly there when `flush()` starts."""

    def __init__(self, dims: int) -> None:
        super().__init__(dims)
        self.gate = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.gate.wait(30)
        return super().embed_documents(texts)


@pytest.mark.parametrize("show_progress", [True, False])
def test_flush_after_a_bulk_write_reports_its_progress(
    show_progress: bool, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    embeddings = _GatedEmbeddings(16)
    with TdaiMemory.open(None, embeddings=embeddings) as mem:
        mem.add_memories([{"content": f"note {i} on cider"} for i in range(1200)], user_id="u")
        capsys.readouterr()
        opener = threading.Timer(0.5, embeddings.gate.set)
        opener.start()
        with caplog.at_level(logging.INFO, logger="langchain_tdai_recall"):
            assert mem.flush(timeout=60, show_progress=show_progress)
        opener.join()
        assert mem.stats().pending_vectors == 0
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("flush:")]
    assert said[0] == "flush: waiting for 1200 rows to be embedded"
    assert said[-1] == "flush: 1200 of 1200 rows embedded, 0 pending"
    err = capsys.readouterr().err
    assert ("embedding" in err and "1200" in err) is show_progress


def test_flush_of_a_short_backlog_stays_quiet(caplog: pytest.LogCaptureFixture) -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(16)) as mem:
        mem.add_memories([{"content": f"note {i}"} for i in range(20)], user_id="u")
        with caplog.at_level(logging.INFO, logger="langchain_tdai_recall"):
            assert mem.flush(timeout=60, show_progress=True)
    assert not [r for r in caplog.records if r.getMessage().startswith("flush:")]


def test_upkeep_passes_count_and_list_only_rows_without_a_vector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 23: after opening, a pass never scans every row (`vector IS NULL OR embedder ...`).

    Each pass used to count every row whose vector is missing *or another embedder's* (a full
    table scan on PostgreSQL, seconds on millions of rows, every write and every 300 s); with
    no foreign vectors there is nothing but missing vectors to find, which a partial index serves.
    """
    with TdaiMemory.open(None, embeddings=HashEmbeddings(16)) as mem:
        mem.add_memories([{"content": f"note {i} on plums"} for i in range(20)], user_id="u")
        assert mem.flush(timeout=30)
        store = mem._store
        full_counts: list[object] = []
        listings: list[bool] = []
        count, listing = store.pending_vector_count, store.pending_vectors

        def spy_count(scope: object = None) -> int:
            full_counts.append(scope)
            return count(scope)  # type: ignore[arg-type]

        def spy_list(layer: Any, *, after: Any, limit: int, stale: bool) -> Any:
            listings.append(stale)
            return listing(layer, after=after, limit=limit, stale=stale)

        monkeypatch.setattr(store, "pending_vector_count", spy_count)
        monkeypatch.setattr(store, "pending_vectors", spy_list)
        for i in range(4):
            mem.add_memory(f"later note {i} on pears", user_id="u")
            assert mem.flush(timeout=30)
        assert listings and not any(listings)  # rows without a vector only
        assert full_counts == []
        monkeypatch.undo()
        assert mem.stats().pending_vectors == 0
        hits = mem.search_memories("later note 3 on pears", user_id="u")
        assert hits and hits[0].embedding_score is not None
