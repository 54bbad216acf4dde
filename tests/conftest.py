"""Shared fixtures: stores over both backends with the deterministic test embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings


@pytest.fixture(params=["memory", "directory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every store test runs against the in-memory and the directory store."""
    return str(request.param)


@pytest.fixture
def memory(store_kind: str, tmp_path: Path) -> Iterator[TdaiMemory]:
    """A store with the hash embedder, in memory or in a temporary directory."""
    path = None if store_kind == "memory" else tmp_path / "store"
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as mem:
        yield mem


@pytest.fixture
def keyword_memory() -> Iterator[TdaiMemory]:
    """An in-memory keyword-only store."""
    with TdaiMemory.open(None, embeddings=None) as mem:
        yield mem
