"""`TdaiStore` conformance-style checks on the in-memory and directory stores (issues 16, 24).

The same checks run on PostgreSQL in `tests/integration_tests/stores/test_graph_store_postgres.py`.
"""

from __future__ import annotations

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
