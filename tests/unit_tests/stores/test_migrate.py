"""`tdai-recall migrate` / `copy_store`: local <-> PostgreSQL, exact, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall.cli import main
from langchain_tdai_recall.errors import StoreError
from langchain_tdai_recall.store.store import MemoryStore
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.conformance import fill, open_memory, snapshot
from langchain_tdai_recall.stores.migrate import copy_store
from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
from langchain_tdai_recall.types import Scope


def _filled_directory(path: Path) -> dict[str, Any]:
    with open_memory(MemoryStore(path)) as memory:
        fill(memory)
        return snapshot(memory)


def _scene_files(store: BaseMemoryStore, scope: Scope) -> list[Any]:
    docs = store.documents
    return [docs._read(scope, name) for name in docs._names(scope)]


def test_a_local_store_copied_to_postgres_and_back_is_the_same(
    tmp_path: Path, postgres_url: str
) -> None:
    expected = _filled_directory(tmp_path / "a")
    source = MemoryStore(tmp_path / "a", read_only=True)
    target = PostgresMemoryStore(postgres_url)
    report = copy_store(source, target, page=4)
    assert (report.memories, report.messages, report.skipped) == (14, 6, 0)
    assert report.personas == 2 and report.scenes == 3
    assert _scene_files(target, Scope("alice")) == _scene_files(source, Scope("alice"))
    back = MemoryStore(tmp_path / "b")
    copy_store(target, back, page=3)
    source.close()
    for store in (target, back):
        with open_memory(store) as memory:
            assert store.count_missing_vectors() == 0  # vectors came along, nothing re-embedded
            assert snapshot(memory) == expected
            assert memory.get_persona(user_id="persona-only") == "Only a persona here."


def test_an_interrupted_copy_resumes_where_it_stopped(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _filled_directory(tmp_path / "a")
    source = MemoryStore(tmp_path / "a", read_only=True)
    target = PostgresMemoryStore(postgres_url)
    calls = 0
    real = target.import_rows

    def failing(*args: Any, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            msg = "connection lost"
            raise StoreError(msg)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, "import_rows", failing)
    with pytest.raises(StoreError):
        copy_store(source, target, page=4)
    monkeypatch.setattr(target, "import_rows", real)
    report = copy_store(source, target, page=4)
    assert report.skipped == 8  # the two pages written before the failure
    assert report.memories + report.messages == 20 - 8
    again = copy_store(source, target, page=4)
    assert (again.memories, again.messages, again.personas, again.scenes) == (0, 0, 0, 0)
    source.close()
    with open_memory(target) as memory:
        assert snapshot(memory) == expected


def test_the_migrate_command_copies_and_reports(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _filled_directory(tmp_path / "a")
    assert main(["migrate", "--from", str(tmp_path / "a"), "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "memories: 14" in out and "messages: 6" in out
    assert main(["--store", postgres_url, "--embeddings", "hash", "search", "peanut",
                 "--user", "alice"]) == 0  # fmt: skip
    assert "allergic to peanuts" in capsys.readouterr().out
    assert main(["migrate", "--from", str(tmp_path / "none"), "--to", postgres_url]) == 1
    assert "holds no memory store" in capsys.readouterr().err


def test_read_commands_refuse_a_database_without_a_store(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:pw-s3cret@")
    assert main(["--store", url, "stats"]) == 1
    err = capsys.readouterr().err
    assert "holds no memory store" in err
    assert "pw-s3cret" not in err
