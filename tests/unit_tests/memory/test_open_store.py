"""`TdaiMemory.open_store`: the store object `open` would use, without an embedder."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError, StoreError
from langchain_tdai_recall.testing import HashEmbeddings


def test_it_reads_what_the_store_holds_without_an_embedder(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=16)) as memory:
        memory.add_memory("The user likes green tea.", type="persona", user_id="u")
        memory.flush(show_progress=False)
    store = TdaiMemory.open_store(path, read_only=True)
    try:
        assert store.read_only
        assert store.embedder_id is None
        recorded = store.recorded_embedder()
        assert recorded is not None
        assert (recorded.dimension, recorded.vectors) == (16, 1)
    finally:
        store.close()
    assert store.closed


def test_it_creates_a_writable_store(tmp_path: Path) -> None:
    store = TdaiMemory.open_store(tmp_path / "new", config={"store": {"synchronous": "full"}})
    try:
        assert not store.read_only
        assert store.recorded_embedder() is None
    finally:
        store.close()
    with TdaiMemory.open(tmp_path / "new", embeddings=None, read_only=True) as memory:
        assert memory.stats().memories == 0


def test_it_refuses_what_open_refuses(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="read_only"):
        TdaiMemory.open_store(None, read_only=True)
    with pytest.raises(ConfigError, match="read_only must be True or False"):
        TdaiMemory.open_store(tmp_path, read_only="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="path must be"):
        TdaiMemory.open_store(123)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="pool_size"):
        TdaiMemory.open_store(tmp_path, config={"store": {"pool_size": 0}})
    with pytest.raises(StoreError, match="no memory store"):
        TdaiMemory.open_store(tmp_path / "missing", read_only=True)
