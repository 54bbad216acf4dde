"""An index catches up from its backend in bounded chunks (a first build of a large scope never
holds every row and its stored vector at once), and the chunks add up to the whole scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import layer
from langchain_tdai_recall.stores._sql.records import SqlRecords
from langchain_tdai_recall.testing import HashEmbeddings


def test_a_first_build_and_a_catch_up_read_bounded_chunks_and_miss_no_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(layer, "ROW_CHUNK", 4)
    sizes: list[tuple[str, int]] = []
    memory_rows = SqlRecords.memory_rows_since
    message_rows = SqlRecords.message_rows_since

    def spy_memories(self, scope_id, generation, scope, *, after, upto):  # type: ignore[no-untyped-def]
        rows = memory_rows(self, scope_id, generation, scope, after=after, upto=upto)
        sizes.append(("l1", len(rows)))
        return rows

    def spy_messages(self, scope_id, generation, scope, *, after, upto):  # type: ignore[no-untyped-def]
        rows = message_rows(self, scope_id, generation, scope, after=after, upto=upto)
        sizes.append(("l0", len(rows)))
        return rows

    monkeypatch.setattr(SqlRecords, "memory_rows_since", spy_memories)
    monkeypatch.setattr(SqlRecords, "message_rows_since", spy_messages)
    emb = HashEmbeddings(dims=64)
    records = [{"id": f"m{i:02d}", "content": f"harbour note {i} zebra{i}"} for i in range(10)]
    with TdaiMemory.open(tmp_path / "s", embeddings=emb) as memory:
        memory.add_memories(records, user_id="u")
        memory.record_messages(
            [{"role": "user", "content": f"message {i} okapi{i}"} for i in range(9)],
            session_key="s1",
            user_id="u",
        )
        memory.flush()
    # a fresh process's view: the first search builds both indexes from the rows
    config = {"store": {"index_cache": None}}
    with TdaiMemory.open(tmp_path / "s", embeddings=emb, config=config) as memory:
        store, scope = memory._store, memory.scope("u")
        sizes.clear()
        l1 = store.index(scope, "l1")
        assert l1 is not None
        assert sorted(m.id for m in l1.meta.values()) == [f"m{i:02d}" for i in range(10)]
        assert l1.vectors is not None and len(l1.vectors) == 10
        assert [n for layer_, n in sizes if layer_ == "l1"] == [4, 4, 2]
        l0 = store.index(scope, "l0")
        assert l0 is not None and len(l0.meta) == 9
        assert [n for layer_, n in sizes if layer_ == "l0"] == [4, 4, 1]
        # keyword search over the chunked build finds every row
        for i in range(10):
            assert f"m{i:02d}" in [h.id for h in memory.search_memories(f"zebra{i}", user_id="u")]
        # a catch-up after more writes reads only what is new, in chunks too
        memory.add_memories(
            [{"id": f"n{i}", "content": f"late note yak{i}"} for i in range(5)], user_id="u"
        )
        sizes.clear()
        l1 = store.index(scope, "l1")
        assert l1 is not None and len(l1.meta) == 15
        assert [n for layer_, n in sizes if layer_ == "l1"] == [4, 1]
