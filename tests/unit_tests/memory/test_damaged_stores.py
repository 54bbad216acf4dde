"""Issue 8 #7: damaged or unusable stores fail with the package's errors, and lose nothing.

Each error names the path and what to do; a read-only mode serves searches and recall from a
store that cannot (or may not) be written.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from langchain_tdai_recall import (
    StoreCorruptedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
    TdaiMemory,
)
from langchain_tdai_recall.stores.local import _documents
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope

from ._fakes import read_only_directory


def _filled(path: Path) -> None:
    with TdaiMemory.open(path, embeddings=HashEmbeddings(32)) as mem:
        mem.add_memories(
            [{"content": f"memory {i} about the orchid greenhouse"} for i in range(300)],
            user_id="u",
        )
        mem.set_persona("# Orchid grower", user_id="u")
        mem.upsert_scene("greenhouse", summary="orchids", body="watering plan", user_id="u")
        assert mem.flush(timeout=30)


def test_empty_database_file_is_refused_not_opened_as_an_empty_store(tmp_path: Path) -> None:
    _filled(tmp_path)
    db = tmp_path / "memory.sqlite3"
    db.write_bytes(b"")
    with pytest.raises(StoreCorruptedError, match="0 bytes") as info:
        TdaiMemory.open(tmp_path, embeddings=None)
    assert str(db) in str(info.value) and "backup" in str(info.value)
    assert db.stat().st_size == 0  # nothing was written over it


def test_a_new_store_never_leaves_an_empty_database_behind(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path / "new", embeddings=None):
        pass
    assert (tmp_path / "new" / "memory.sqlite3").stat().st_size > 0
    assert not list((tmp_path / "new").glob(".memory.sqlite3.*"))


def test_garbage_database_file_raises_store_corrupted_error(tmp_path: Path) -> None:
    tmp_path.joinpath("memory.sqlite3").write_bytes(b"this is not a database\n" * 400)
    with pytest.raises(StoreCorruptedError, match="damaged") as info:
        TdaiMemory.open(tmp_path, embeddings=None)
    assert "memory.sqlite3" in str(info.value)


def test_damaged_pages_raise_store_corrupted_error(tmp_path: Path) -> None:
    _filled(tmp_path)
    db = tmp_path / "memory.sqlite3"
    data = bytearray(db.read_bytes())
    assert len(data) > 16 * 4096
    data[4096 : len(data) - 4096] = os.urandom(len(data) - 8192)
    db.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError, match="damaged"):
        mem = TdaiMemory.open(tmp_path, embeddings=None)
        try:
            mem.list_memories(user_id="u")
            mem.search_memories("orchid", user_id="u")
        finally:
            mem.close()


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "memory.sqlite3")
    conn.execute("CREATE TABLE invoices (id INTEGER, total REAL)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreCorruptedError, match="not a memory store"):
        TdaiMemory.open(tmp_path, embeddings=None)
    conn = sqlite3.connect(tmp_path / "memory.sqlite3")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert tables == {"invoices"}  # left untouched


def test_a_file_where_the_directory_should_be_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "memory"
    target.write_text("notes", encoding="utf-8")
    with pytest.raises(StoreError, match="not a memory store directory"):
        TdaiMemory.open(target, embeddings=None)


def test_read_only_directory_can_be_searched_with_read_only_mode(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _filled(store)
    before = sorted(p.name for p in store.rglob("*"))
    with read_only_directory(store):
        with pytest.raises(StoreReadOnlyError, match="read_only=True") as info:
            TdaiMemory.open(store, embeddings=HashEmbeddings(32))
        assert str(store) in str(info.value)
        with TdaiMemory.open(store, embeddings=HashEmbeddings(32), read_only=True) as mem:
            assert mem.read_only
            hits = mem.search_memories("memory 7 about the orchid greenhouse", user_id="u")
            assert hits and hits[0].embedding_score is not None
            result = mem.recall("orchid greenhouse", user_id="u")
            assert result is not None and result.memories
            assert "Orchid grower" in (result.append_system_context or "")
            assert [s.name for s in mem.list_scenes(user_id="u")] == ["greenhouse"]
            assert mem.stats().memories == 300
            for write in (
                lambda: mem.add_memory("new", user_id="u"),
                lambda: mem.record_messages(
                    [{"role": "user", "content": "hi"}], session_key="s", user_id="u"
                ),
                lambda: mem.set_persona("other", user_id="u"),
                lambda: mem.upsert_scene("x", summary="s", body="b", user_id="u"),
                lambda: mem.delete_memory("m", user_id="u"),
                lambda: mem.delete_scene("greenhouse", user_id="u"),
            ):
                with pytest.raises(StoreReadOnlyError, match="read-only"):
                    write()
            mem._capture_turn(
                [{"role": "user", "content": "hi"}], scope=Scope("u"), session_key="s"
            )
    assert sorted(p.name for p in store.rglob("*")) == before


def test_read_only_mode_refuses_writes_on_a_writable_store_and_sees_new_writes(
    tmp_path: Path,
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as writer:
        writer.add_memory("first note about kites", id="a", user_id="u")
        with TdaiMemory.open(tmp_path, embeddings=None, read_only=True) as reader:
            with pytest.raises(StoreReadOnlyError):
                reader.add_memory("x", user_id="u")
            assert [h.id for h in reader.search_memories("kites", user_id="u")] == ["a"]
            writer.add_memory("second note about kites", id="b", user_id="u")
            assert {h.id for h in reader.search_memories("kites", user_id="u")} == {"a", "b"}


def test_read_only_open_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no memory store"):
        TdaiMemory.open(tmp_path / "missing", embeddings=None, read_only=True)
    assert not (tmp_path / "missing").exists()


def test_full_disk_raises_store_write_error_and_loses_nothing(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.add_memories([{"content": f"kept {i}", "id": f"k{i}"} for i in range(10)], user_id="u")
        writer = mem._store._db._writer
        assert writer is not None
        (pages,) = writer.execute("PRAGMA page_count").fetchone()
        writer.execute(f"PRAGMA max_page_count={pages}")  # the disk is now "full"
        big = [{"content": "x" * 5000 + str(i)} for i in range(50)]
        with pytest.raises(StoreWriteError, match="full") as info:
            mem.add_memories(big, user_id="u")
        assert "memory.sqlite3" in str(info.value) and "retry" in str(info.value)
        assert [m.id for m in mem.list_memories(user_id="u")] == [f"k{i}" for i in range(10)]
        writer.execute("PRAGMA max_page_count=1073741823")
        assert len(mem.add_memories(big, user_id="u")) == 50  # works once there is room again


def test_full_disk_while_writing_a_document_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.set_persona("old persona", user_id="u")

        def no_space(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(_documents.os, "fsync", no_space)
        with pytest.raises(StoreWriteError, match="no space left") as info:
            mem.set_persona("new persona", user_id="u")
        assert "persona.md" in str(info.value)
        monkeypatch.undo()
        assert mem.get_persona(user_id="u") == "old persona"
        assert not list(tmp_path.rglob(".tmp-*"))
