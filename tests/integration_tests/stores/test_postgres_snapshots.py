"""Persisted index snapshots on the PostgreSQL backend (a real server: see `postgres_server`).

The local backend's snapshot tests, and the helpers shared with them, are in
`tests/unit_tests/stores/test_snapshots.py`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.unit_tests.stores.test_snapshots import (
    _fill,
    _hits,
    _open,
    small_thresholds,  # noqa: F401 (autouse)
)


def test_postgres_uses_an_index_cache_directory(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    with _open(postgres_url) as memory:  # default for a URL: no cache
        _fill(memory, 200)
        expected = _hits(memory)
    with _open(postgres_url, index_cache=str(cache)) as memory:
        assert _hits(memory) == expected
    assert len(list(cache.glob("*.tdxs"))) == 1
    with caplog.at_level(logging.INFO, "langchain_tdai_recall"):
        with _open(postgres_url, index_cache=str(cache)) as memory:
            assert _hits(memory) == expected
        assert "restored" in caplog.text
