"""`forget` on PostgreSQL beyond the conformance part (a real server: see `postgres_server`).

The conformance part `testing/conformance/erasure.py` runs on this backend through
`test_conformance_postgres.py` (every surface read back after `forget`, in this process and in a
new one, other handles, formation runs in another handle). Here: the snapshot files of a
PostgreSQL store's local index cache, which only exist with an explicit `index_cache`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import snapshot
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope


def test_forget_deletes_the_scope_snapshots_of_the_index_cache(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "SNAPSHOT_MIN_ROWS", 2)
    cache = tmp_path / "cache"
    config = {"store": {"index_cache": str(cache)}}
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(), config=config) as memory:
        for user in ("u", "v"):
            memory.add_memories([{"content": f"secret {user} {i}"} for i in range(3)], user_id=user)
            memory.record_messages(
                [{"role": "user", "content": f"secret {user} {i}"} for i in range(3)],
                session_key="s",
                user_id=user,
            )
        assert memory.flush(timeout=60)
        memory.preload(user_id="u")
        memory.preload(user_id="v")
        u_id = memory._store.scope_id(Scope("u"))
        assert len(list(cache.glob(f"*-{u_id}.tdxs"))) == 2

        report = memory.forget(user_id="u")

        assert report.index_snapshots == 2 and report.memories == 3 and report.messages == 3
        assert list(cache.glob(f"*-{u_id}.tdxs")) == []
        assert len(list(cache.glob("*.tdxs"))) == 2  # the other user's
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(), config=config) as memory:
        assert memory.search_memories("secret", user_id="u") == []
        assert len(memory.search_memories("secret", user_id="v")) == 3
