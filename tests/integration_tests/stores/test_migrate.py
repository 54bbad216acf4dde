"""`tdai-recall migrate` / `copy_store`: local <-> PostgreSQL, exact, resumable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall.cli import main
from langchain_tdai_recall.errors import StoreError
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.local.store import MemoryStore
from langchain_tdai_recall.stores.migrate import copy_store
from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
from langchain_tdai_recall.testing import ScriptedFormationModel
from langchain_tdai_recall.testing.conformance import fill, open_memory, snapshot
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
    assert "copied: memories 14, messages 6, personas 2, scenes 3" in out
    assert "already equal: rows 0, personas 0, scenes 0" in out
    assert main(["migrate", "--from", str(tmp_path / "a"), "--to", postgres_url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["memories"], again["messages"], again["personas"], again["scenes"]) == (0,) * 4
    assert (again["skipped"], again["personas_equal"], again["scenes_equal"]) == (20, 2, 3)
    assert (
        main(
            ["--store", postgres_url, "--embeddings", "hash", "search", "peanut", "--user", "alice"]
        )
        == 0
    )
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


def test_formation_state_is_copied_so_nothing_is_formed_twice(
    tmp_path: Path, postgres_url: str
) -> None:
    config = {"pipeline": {"enabled": False}, "timezone": "+08:00"}
    source_dir = tmp_path / "a"
    with open_memory(
        MemoryStore(source_dir), extraction_model=ScriptedFormationModel(), config=config
    ) as memory:
        for text in ("I am vegetarian.", "I live in Lisbon.", "I play the cello."):
            memory.record_messages(
                [{"role": "user", "content": text}, {"role": "assistant", "content": "OK."}],
                session_key="s1",
                user_id="f",
            )
        assert memory.extract(user_id="f").windows == 1
        first = memory.list_memories(user_id="f")[0]
        memory.add_memory("I am vegan now.", id=first.id, user_id="f")  # a second version
        expected = [(v.record.content, v.change) for v in memory.history(first.id, user_id="f")]
        formed = sorted(m.content for m in memory.list_memories(user_id="f"))
    with open_memory(MemoryStore(source_dir)) as memory:  # no model: this one stays unformed
        memory.record_messages(
            [{"role": "user", "content": "I moved to Porto."}], session_key="s1", user_id="f"
        )
    source = MemoryStore(source_dir, read_only=True)
    target = PostgresMemoryStore(postgres_url)
    report = copy_store(source, target)
    source.close()
    assert report.formation >= 2  # the cursor and the history version
    with open_memory(target, extraction_model=ScriptedFormationModel(), config=config) as copy:
        assert [(v.record.content, v.change) for v in copy.history(first.id, user_id="f")] == (
            expected
        )
        pending = copy._store.formation.pending()
        assert [(p.session_key, p.messages) for p in pending] == [("s1", 1)]
        report2 = copy.extract(user_id="f")  # only the message recorded after the run
        assert report2.messages == 1
        assert sorted(m.content for m in copy.list_memories(user_id="f")) == sorted(
            [*formed, "I moved to Porto."]
        )
