"""A large index build gives its freed garbage back to the OS (glibc `malloc_trim`)."""

from __future__ import annotations

import platform
import sys

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores import base
from langchain_tdai_recall.stores._index import trim as _trim
from langchain_tdai_recall.testing import HashEmbeddings


def test_release_works_where_glibc_is() -> None:
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert _trim.release_freed_memory() is glibc


def test_only_a_new_large_index_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(base, "release_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(base, "TRIM_AFTER_ROWS", 100)
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16)) as memory:
        memory.add_memories([{"content": f"small note {i}"} for i in range(50)], user_id="a")
        memory.add_memories([{"content": f"large note {i}"} for i in range(150)], user_id="b")
        memory.search_memories("note", user_id="a")
        assert calls == []  # 50 rows: below the threshold
        memory.search_memories("note", user_id="b")
        assert calls == [1]
        memory.add_memory("one more note", user_id="b")
        memory.search_memories("note", user_id="b")
        assert calls == [1]  # catching up is not a build
