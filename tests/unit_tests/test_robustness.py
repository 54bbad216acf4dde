"""Robustness defects found by review: each test failed on the code before its fix."""

from __future__ import annotations

import io
import logging
import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp

from langchain_tdai_recall import TdaiMemory, __version__
from langchain_tdai_recall._exchange.records import (
    MAX_CONTENT_CHARS,
    check_store_path,
    is_database_location,
)
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.embeddings import DefaultEmbeddings
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores import LocalMemoryStore, PostgresMemoryStore
from langchain_tdai_recall.testing import (
    FailingEmbeddings,
    HashEmbeddings,
    RatingRequest,
    ScriptedFormationModel,
    SlowEmbeddings,
)

NS = ("memories", "alice")


# ---------------------------------------------------------------------------------------------
# A batch is checked whole before any of it is written


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"content": "x", "tags": {1, 2}}, "is a set"),
        ({"content": "y" * 40_000}, "at most 16384 bytes"),
        ({"content": "z", "blob": "q" * 20_000}, "at most 16384 bytes"),
        ({"content": "ok", "nested": {"\ud800": 1}}, "lone surrogate"),
    ],
)
def test_a_store_batch_with_a_bad_put_in_the_middle_writes_nothing(
    memory: TdaiMemory, bad: dict[str, Any], fragment: str
) -> None:
    store = memory.as_store()
    with pytest.raises(ConfigError, match=fragment) as caught:
        store.batch([PutOp(NS, "first", {"content": "first"}), PutOp(NS, "second", bad)])
    assert "'second'" in str(caught.value)
    assert store.batch([GetOp(NS, "first")]) == [None]
    assert memory.list_memories(user_id="alice") == []


def test_memory_batch_with_a_bad_record_in_the_middle_writes_nothing(memory: TdaiMemory) -> None:
    bad = {"content": "x", "metadata": {"when": object()}}
    with pytest.raises(ConfigError, match="metadata"):
        memory.add_memories([{"content": "first"}, bad, {"content": "third"}])
    assert memory.list_memories() == []


# ---------------------------------------------------------------------------------------------
# Lone surrogates are repaired (text) or refused naming the field (ids, keys), never a crash


def test_lone_surrogates_in_metadata_values_are_repaired(memory: TdaiMemory) -> None:
    record = memory.add_memory("a\ud800b", metadata={"note": "x\udc00y", "list": ["\ud800"]})
    assert record.content == "a\ufffdb"
    assert record.metadata == {"note": "x\ufffdy", "list": ["\ufffd"]}
    assert memory.get_memory(record.id) == record


def test_a_lone_surrogate_in_a_metadata_key_is_refused_naming_it(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match=r"metadata\['outer'\] has the key '\\ud800'"):
        memory.add_memory("text", metadata={"outer": {"\ud800": 1}})
    assert memory.list_memories() == []


def test_a_store_value_with_lone_surrogates_is_kept_repaired(memory: TdaiMemory) -> None:
    store = memory.as_store()
    store.put(NS, "k", {"content": "tea\ud800", "why": ["\udfff"]})
    item = store.get(NS, "k")
    assert item is not None
    assert item.value == {"content": "tea\ufffd", "why": ["\ufffd"]}


def test_import_jsonl_repairs_lone_surrogates_and_reimports_as_unchanged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [
        r'{"content": "a\ud800b"}',
        r'{"kind": "message", "role": "user", "content": "hi\udc00", "session_key": "s\ud800"}',
        r'{"kind": "persona", "text": "p\ud800"}',
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = ["--store", str(tmp_path / "store"), "--embeddings", "hash"]
    assert main([*store, "import-jsonl", str(source)]) == 0
    assert "1 new and 0 updated memories, 1 new messages, 1 personas" in capsys.readouterr().out
    assert main([*store, "import-jsonl", str(source)]) == 0
    assert "3 lines already stored as they are" in capsys.readouterr().out
    with TdaiMemory.open(tmp_path / "store", embeddings=HashEmbeddings(dims=16)) as mem:
        assert [r.content for r in mem.list_memories()] == ["a\ufffdb"]
        assert [(m.content, m.session_key) for m in mem.list_messages()] == [
            ("hi\ufffd", "s\ufffd")
        ]
        assert mem.get_persona() == "p\ufffd"


def test_import_jsonl_names_the_line_of_a_surrogate_id(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"content": "ok"}\n{"content": "x", "id": "m\\ud800"}\n', encoding="utf-8")
    code = main(
        ["--store", str(tmp_path / "store"), "--embeddings", "hash", "import-jsonl", str(source)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "line 2" in err and "lone surrogate" in err and "nothing was imported" in err


def _upstream_jsonl(root: Path) -> Path:
    (root / "records").mkdir(parents=True)
    (root / "conversations").mkdir()
    (root / "scene_blocks").mkdir()
    (root / "records" / "2025-05-01.jsonl").write_text(
        "\n".join(
            [
                r'{"id": "m_ok", "content": "tea \ud800 time", "type": "episodic", '
                r'"scene_name": "s\udc00", "sessionKey": "k\ud800", '
                r'"source_message_ids": ["msg\ud800", "msg_ok"]}',
                r'{"id": "m_bad\ud800", "content": "bad id", "type": "episodic"}',
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (root / "conversations" / "2025-05-01.jsonl").write_text(
        r'{"id": "msg_bad\ud800", "role": "user", "content": "x", "sessionKey": "k"}' + "\n"
        r'{"role": "user", "content": "hello \udfff", "sessionKey": "k\ud800", '
        r'"sessionId": "\ud800", "timestamp": 1746086390000}' + "\n",
        encoding="utf-8",
    )
    (root / "scene_blocks" / os.fsdecode(b"trip-\xff.md")).write_text("Went to Kyoto.\n")
    return root


def test_import_upstream_repairs_text_and_skips_surrogate_ids(
    memory: TdaiMemory, tmp_path: Path
) -> None:
    root = _upstream_jsonl(tmp_path / "memory-tdai")
    report = memory.import_upstream(root)
    assert [
        (r.id, r.content, r.scene_name, r.session_key, r.source_message_ids)
        for r in memory.list_memories()
    ] == [("m_ok", "tea \ufffd time", "s\ufffd", "k\ufffd", ("msg_ok",))]
    assert [(m.content, m.session_key, m.session_id) for m in memory.list_messages()] == [
        ("hello \ufffd", "k\ufffd", "\ufffd")
    ]
    assert [s.name for s in memory.list_scenes()] == ["trip-\ufffd"]
    skipped = "\n".join(report.skipped)
    assert "'m_bad\\ud800'" in skipped and "'msg_bad\\ud800'" in skipped
    skipped.encode("utf-8")  # printable as it is
    again = memory.import_upstream(root)
    assert (again.memories, again.messages) == (0, 0)


def test_import_upstream_repairs_a_database_text_that_is_not_utf8(
    memory: TdaiMemory, tmp_path: Path
) -> None:
    root = tmp_path / "memory-tdai"
    root.mkdir()
    with closing(sqlite3.connect(root / "vectors.db")) as conn:
        conn.execute(
            "CREATE TABLE l1_records (record_id TEXT PRIMARY KEY, content TEXT NOT NULL, "
            "type TEXT DEFAULT '', priority INTEGER DEFAULT 50, scene_name TEXT DEFAULT '', "
            "session_key TEXT DEFAULT '', session_id TEXT DEFAULT '', "
            "timestamp_str TEXT DEFAULT '', timestamp_start TEXT DEFAULT '', "
            "timestamp_end TEXT DEFAULT '', created_time TEXT DEFAULT '', "
            "updated_time TEXT DEFAULT '', metadata_json TEXT DEFAULT '{}')"
        )
        conn.execute(
            "INSERT INTO l1_records (record_id, content, type) "
            "VALUES ('m_1', CAST(X'6f6bff21' AS TEXT), 'episodic')"
        )
        conn.commit()
    memory.import_upstream(root)
    assert [r.content for r in memory.list_memories()] == ["ok\ufffd!"]


# ---------------------------------------------------------------------------------------------
# An unknown namespace placeholder is refused when the store is made


@pytest.mark.parametrize(
    "template",
    [
        ("memories", "{user_id}", "{tenant}"),
        ("memories", "{tenant}"),
        ("memories", "{langgraph_user_id}"),
        ("memories", "{user_id}", "x{agent_id}"),
        ("memories", "{user_id}", "tenant}"),
    ],
)
def test_an_unknown_namespace_placeholder_is_refused(
    memory: TdaiMemory, template: tuple[str, ...]
) -> None:
    bad = next(p for p in template if p not in ("{user_id}", "{agent_id}") and "}" in p)
    with pytest.raises(ConfigError, match="is not a placeholder of this store") as caught:
        memory.as_store(namespace=template)
    assert repr(bad) in str(caught.value)
    memory.as_store(namespace=("memories", "{user_id}", "{agent_id}"))  # the known ones


# ---------------------------------------------------------------------------------------------
# Command line: --version, delete confirms, libpq strings, ":memory:"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tdai-recall {__version__}"


def test_delete_refuses_without_yes_off_a_terminal_and_asks_on_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as mem:
        mem.add_memory("tea", id="tea")
        mem.add_memory("coffee", id="coffee")
    store = ["--store", str(tmp_path / "s"), "--embeddings", "hash"]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main([*store, "delete", "tea"]) == 1
    err = capsys.readouterr().err
    assert "standard input is not a terminal" in err and "--yes" in err
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    assert main([*store, "delete", "tea"]) == 1
    assert "Delete 1 memories" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    assert main([*store, "delete", "tea"]) == 0
    assert capsys.readouterr().out == "deleted tea\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main([*store, "delete", "coffee", "--yes"]) == 0
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as mem:
        assert mem.list_memories() == []


@pytest.mark.parametrize(
    "location", ["host=db.internal dbname=memory user=app", "  dbname=memory", "port=5433"]
)
def test_a_libpq_string_names_postgresql(location: str, tmp_path: Path) -> None:
    assert check_store_path(location) == location.strip()
    assert is_database_location(location)


def test_a_libpq_string_opens_postgresql_not_a_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[object] = []

    class _RefusedError(Exception):
        pass

    def fake(url: str, **kwargs: Any) -> None:
        seen.append(url)
        raise _RefusedError

    monkeypatch.setattr("langchain_tdai_recall.stores.postgres.store.PostgresMemoryStore", fake)
    with pytest.raises(_RefusedError):
        TdaiMemory.open("host=/nonexistent dbname=memory", embeddings=None)
    assert seen == ["host=/nonexistent dbname=memory"]
    assert list(tmp_path.iterdir()) == []  # no directory named after the string


def test_memory_path_opens_an_in_memory_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with TdaiMemory.open(":memory:", embeddings=None) as mem:
        mem.add_memory("tea")
        assert mem.path is None
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Embedders: wrong-typed arguments, and texts without any feature


@pytest.mark.parametrize("dims", ["8", 8.0, True, None, 1, 10**7])
def test_hash_embeddings_refuses_a_wrong_dims_naming_it(dims: object) -> None:
    with pytest.raises(ConfigError, match=r"HashEmbeddings dims must be an integer in 2\.\.") as e:
        HashEmbeddings(dims=dims)  # type: ignore[arg-type]
    assert repr(dims) in str(e.value)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: SlowEmbeddings(HashEmbeddings(), delay_s="1"), "delay_s"),  # type: ignore[arg-type]
        (lambda: SlowEmbeddings(HashEmbeddings(), delay_s=-1), "delay_s"),
        (lambda: SlowEmbeddings("hash", delay_s=1), "wraps a LangChain Embeddings"),  # type: ignore[arg-type]
        (lambda: FailingEmbeddings(HashEmbeddings(), documents="yes"), "documents"),  # type: ignore[arg-type]
    ],
)
def test_test_embedders_refuse_wrong_arguments(make: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        make()


def test_default_embeddings_refuses_a_non_bool_calibrate() -> None:
    with pytest.raises(ConfigError, match="calibrate must be True or False, got str 'no'"):
        DefaultEmbeddings(calibrate="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["!!", "", "...", "\ud800"])
def test_a_text_without_features_is_embedded_once(text: str) -> None:
    emb = HashEmbeddings(dims=16)
    (vector,) = emb.embed_documents([text])
    assert any(vector) and emb.embed_documents([text]) == [vector]  # deterministic, not zeros
    assert emb.embed_documents(["hello"]) == [emb.embed_query("hello")]  # others unchanged
    with TdaiMemory.open(None, embeddings=emb) as mem:
        mem.add_memory(text or "?", id="m")
        mem.add_memory("hello there")
        assert mem.flush(timeout=10)
        assert mem.stats().pending_vectors == 0  # nothing left for the upkeep to retry


# ---------------------------------------------------------------------------------------------
# The rating of store items: one WARNING per process for failed calls


def test_failed_ratings_warn_once_per_process(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("langchain_tdai_recall.formation.rating._warned", threading.Event())
    calls = 0

    def down(request: RatingRequest) -> Any:
        nonlocal calls
        calls += 1
        msg = "provider down"
        raise RuntimeError(msg)

    config = {
        "pipeline": {"enabled": False},
        "extraction": {"retryBaseSeconds": 0.02, "retryMaxSeconds": 0.05, "timeoutSeconds": 5},
    }
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall.formation.rating")
    for user in ("alice", "bob"):  # two memories in one process
        with TdaiMemory.open(
            None,
            embeddings=HashEmbeddings(dims=16),
            config=config,
            extraction_model=ScriptedFormationModel(rate=down),
        ) as mem:
            mem.as_store().put(("memories", user), "k", {"content": "Allergic to peanuts."})
            deadline = time.monotonic() + 10
            while (mem.rating_report() is None or mem.rating_report().failed_calls < 3) and (  # type: ignore[union-attr]
                time.monotonic() < deadline
            ):
                time.sleep(0.02)
            assert mem.rating_report().failed_calls >= 3  # type: ignore[union-attr]
            mem.close(timeout=0.1)
    records = [r for r in caplog.records if r.name.endswith("formation.rating")]
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "further failures are logged at DEBUG" in warnings[0].message
    assert sum("failed" in r.message for r in records) >= 6  # the others at DEBUG


# ---------------------------------------------------------------------------------------------
# A memory's text is bounded


def test_memory_content_is_bounded_with_a_clear_error(memory: TdaiMemory) -> None:
    assert len(memory.add_memory("x" * MAX_CONTENT_CHARS, id="edge").content) == MAX_CONTENT_CHARS
    with pytest.raises(ConfigError, match=f"content is {MAX_CONTENT_CHARS + 1} characters"):
        memory.add_memories([{"content": "ok"}, {"content": "y" * (MAX_CONTENT_CHARS + 1)}])
    assert [r.id for r in memory.list_memories()] == ["edge"]  # the batch wrote nothing
    assert memory.record_messages(  # a conversation's message has no such bound
        [{"role": "user", "content": "z" * (MAX_CONTENT_CHARS + 1)}], session_key="s"
    )


def test_an_upstream_record_over_the_bound_is_skipped_with_its_reason(
    memory: TdaiMemory, tmp_path: Path
) -> None:
    root = tmp_path / "memory-tdai"
    (root / "records").mkdir(parents=True)
    long = "w" * (MAX_CONTENT_CHARS + 1)
    (root / "records" / "a.jsonl").write_text(
        f'{{"id": "m_long", "content": "{long}", "type": "episodic"}}\n'
        '{"id": "m_ok", "content": "fine", "type": "episodic"}\n',
        encoding="utf-8",
    )
    report = memory.import_upstream(root)
    assert [r.id for r in memory.list_memories()] == ["m_ok"]
    assert any("m_long" in s and f"over {MAX_CONTENT_CHARS}" in s for s in report.skipped)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"path": 5}, "path must be a directory"),
        ({"path": None, "synchronous": "x"}, "synchronous must be 'normal' or 'full'"),
        ({"path": None, "tokenizer": "bigram"}, "tokenizer must be a Tokenizer"),
        ({"path": None, "embedder_id": 5}, "embedder_id must be a string"),
        ({"path": None, "read_only": "yes"}, "read_only must be True or False"),
    ],
)
def test_the_local_store_refuses_wrong_arguments(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=f"LocalMemoryStore: {fragment}"):
        LocalMemoryStore(**kwargs)


def test_the_local_store_takes_a_string_path(tmp_path: Path) -> None:
    store = LocalMemoryStore(str(tmp_path / "s"))  # type: ignore[arg-type]
    try:
        assert store.path == tmp_path / "s"
    finally:
        store.close()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"read_only": "yes"}, "read_only must be True or False"),
        ({"tokenizer": "bigram"}, "tokenizer must be a Tokenizer"),
        ({"embedder_id": 5}, "embedder_id must be a string"),
    ],
)
def test_the_postgres_store_refuses_wrong_arguments_before_connecting(
    kwargs: dict[str, Any], fragment: str
) -> None:
    # nothing listens there, and the unit tests block TCP: only a check made before connecting
    # can answer with the argument's name
    with pytest.raises(ConfigError, match=f"PostgresMemoryStore: {fragment}"):
        PostgresMemoryStore("postgresql://tdai@127.0.0.1:9/none", **kwargs)
