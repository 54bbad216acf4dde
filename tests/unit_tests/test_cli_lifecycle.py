"""`tdai-recall forget`, `messages list|export|delete` and `export --messages` (issue 16)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.testing import HashEmbeddings


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class _Terminal(io.StringIO):
    """Standard input of a terminal that types `answer`."""

    def isatty(self) -> bool:
        return True


def _fill(path: Path) -> None:
    with TdaiMemory.open(path, embeddings=HashEmbeddings()) as memory:
        for agent in (None, "bot"):
            memory.add_memory(f"likes tea ({agent})", id="tea", user_id="u", agent_id=agent)
            memory.record_messages(
                [
                    {"role": "user", "content": f"hello ({agent})", "id": f"h-{agent}"},
                    {"role": "assistant", "content": "hi!", "id": f"a-{agent}"},
                ],
                session_key="s1",
                user_id="u",
                agent_id=agent,
            )
            memory.set_persona(f"persona ({agent})", user_id="u", agent_id=agent)
        memory.record_messages(
            [{"role": "user", "content": "second session", "id": "x", "recorded_at": 1_700_000}],
            session_key="s2",
            user_id="u",
        )
        memory.add_memory("other user", user_id="v")


def _store(tmp_path: Path) -> list[str]:
    return ["--store", str(tmp_path / "s"), "--embeddings", "hash"]


def test_forget_erases_the_scope_and_prints_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fill(tmp_path / "s")
    code, out, _ = run(capsys, *_store(tmp_path), "forget", "--user", "u", "--yes")
    assert code == 0
    assert "user 'u' (shared memory): 1 memories" in out and "3 messages" in out
    assert "erased 1 scope(s)" in out
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert memory.list_memories(user_id="u") == []
        assert memory.get_persona(user_id="u") is None
        assert len(memory.list_memories(user_id="u", agent_id="bot")) == 1
        assert len(memory.list_memories(user_id="v")) == 1


def test_forget_all_agents_as_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _fill(tmp_path / "s")
    code, out, _ = run(
        capsys, *_store(tmp_path), "--json", "forget", "--user", "u", "--all-agents", "-y"
    )
    assert code == 0
    report = json.loads(out)
    assert report["all_agents"] is True
    assert [(s["agent_id"], s["memories"], s["messages"]) for s in report["scopes"]] == [
        (None, 1, 3),
        ("bot", 1, 2),
    ]
    code, out, _ = run(capsys, *_store(tmp_path), "--json", "stats")
    assert [s["user_id"] for s in json.loads(out)["scopes"]] == ["v"]


def test_forget_asks_on_a_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(tmp_path / "s")
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    code, out, err = run(capsys, *_store(tmp_path), "forget", "--user", "u")
    assert code == 1 and "nothing was erased" in out
    assert "Erase everything of user 'u' (shared memory)" in err
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert len(memory.list_memories(user_id="u")) == 1
    monkeypatch.setattr("sys.stdin", _Terminal("yes\n"))
    code, out, _ = run(capsys, *_store(tmp_path), "forget", "--user", "u")
    assert code == 0 and "erased 1 scope(s)" in out
    monkeypatch.setattr("sys.stdin", _Terminal(""))  # --yes: no question at all
    code, _, err = run(capsys, *_store(tmp_path), "forget", "--user", "u", "--agent", "bot", "-y")
    assert code == 0 and "Erase" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ("forget", "--user", "u"),
        ("forget", "--user", "u", "--all-agents"),
        ("messages", "delete", "--session", "s1", "--user", "u"),
        ("messages", "delete", "h-None", "--user", "u"),
    ],
    ids=["forget", "forget-all-agents", "delete-session", "delete-ids"],
)
def test_destructive_commands_refuse_without_yes_when_not_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
) -> None:
    _fill(tmp_path / "s")
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # a pipe, as from a script: not a tty
    code, out, err = run(capsys, *_store(tmp_path), *argv)
    assert code == 1
    assert "--yes" in err and "not a terminal" in err and err.count("\n") == 1
    assert "Traceback" not in err and "erased" not in out and "deleted" not in out
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert len(memory.list_memories(user_id="u")) == 1
        assert len(memory.list_memories(user_id="u", agent_id="bot")) == 1
        assert len(memory.list_messages(user_id="u")) == 3
    code, out, _ = run(capsys, *_store(tmp_path), *argv, "--yes")
    assert code == 0


def test_forget_refuses_agent_with_all_agents_and_a_missing_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fill(tmp_path / "s")
    code, _, err = run(
        capsys, *_store(tmp_path), "forget", "--user", "u", "--agent", "bot", "--all-agents"
    )
    assert code == 1 and "--all-agents" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--store", str(tmp_path / "nope"), "forget", "--user", "u")
    assert code == 1 and "Traceback" not in err
    assert not (tmp_path / "nope").exists()


def test_messages_list_export_and_delete(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fill(tmp_path / "s")
    code, out, _ = run(capsys, *_store(tmp_path), "messages", "list", "--user", "u")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["h-None", "a-None", "x"]
    code, out, _ = run(
        capsys, *_store(tmp_path), "--json", "messages", "list", "--user", "u", "--session", "s2"
    )
    assert [m["id"] for m in json.loads(out)] == ["x"]

    target = tmp_path / "messages.jsonl"
    code, out, _ = run(
        capsys, *_store(tmp_path), "messages", "export", "--user", "u", "-o", str(target)
    )
    assert code == 0 and "exported 3 messages" in out
    lines = [json.loads(x) for x in target.read_text("utf-8").splitlines()]
    assert lines[0]["kind"] == "header"
    assert [(x["kind"], x["id"], x["session_key"]) for x in lines[1:]] == [
        ("message", "h-None", "s1"),
        ("message", "a-None", "s1"),
        ("message", "x", "s2"),
    ]

    code, _, err = run(capsys, *_store(tmp_path), "messages", "delete", "--user", "u")
    assert code == 1 and "ids or --session" in err
    code, _, err = run(capsys, *_store(tmp_path), "messages", "list", "x", "--user", "u")
    assert code == 1 and "messages delete" in err
    code, out, _ = run(
        capsys, *_store(tmp_path), "messages", "delete", "h-None", "nope", "--user", "u", "--yes"
    )
    assert code == 0 and "deleted 1 message(s)" in out
    code, out, _ = run(
        capsys, *_store(tmp_path), "messages", "delete", "--session", "s2", "--user", "u", "-y"
    )
    assert code == 0 and "deleted 1 message(s)" in out
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert [m.id for m in memory.list_messages(user_id="u")] == ["a-None"]
        assert len(memory.list_messages(user_id="u", agent_id="bot")) == 2


def test_a_jsonl_round_trip_keeps_the_conversations(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fill(tmp_path / "s")
    backup = tmp_path / "backup.jsonl"
    code, out, _ = run(
        capsys, *_store(tmp_path), "export", "--persona", "--messages", "-o", str(backup)
    )
    assert code == 0 and "(and 5 messages)" in out
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        before = {
            (u, a): memory.list_messages(user_id=u, agent_id=a)
            for u, a in (("u", None), ("u", "bot"), ("v", None))
        }
    copy = ["--store", str(tmp_path / "copy"), "--embeddings", "hash"]
    code, out, _ = run(capsys, *copy, "import-jsonl", str(backup))
    assert code == 0 and "5 new messages" in out
    with TdaiMemory.open(tmp_path / "copy", embeddings=HashEmbeddings()) as memory:
        for (u, a), messages in before.items():
            assert memory.list_messages(user_id=u, agent_id=a) == messages
        hits = memory.search_conversations("second session", user_id="u")
        assert hits and hits[0].id == "x"
    code, out, _ = run(capsys, *copy, "import-jsonl", str(backup))
    assert code == 0 and "0 new messages" in out  # importing again adds nothing


def test_an_export_without_messages_still_imports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Files written before messages were exported (no message lines) import as before."""
    old = tmp_path / "old.jsonl"
    old.write_text(
        '{"kind":"header","format":"tdai-recall-jsonl","version":1}\n'
        '{"kind":"memory","id":"m1","content":"likes tea","user_id":"u"}\n'
        '{"content":"a bare memory line"}\n',
        encoding="utf-8",
    )
    code, out, _ = run(capsys, *_store(tmp_path), "import-jsonl", str(old))
    assert code == 0 and "2 new and 0 updated memories, 0 new messages" in out


def test_messages_delete_takes_ids_after_the_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`messages delete --user u ID ...` (options first, as in the documented examples) deletes
    the ids like `messages delete ID ... --user u` does."""
    _fill(tmp_path / "s")
    code, out, err = run(
        capsys, *_store(tmp_path), "messages", "delete", "--user", "u", "-y", "h-None", "x"
    )
    assert (code, out.strip()) == (0, "deleted 2 message(s)"), err
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert [m.id for m in memory.list_messages(user_id="u")] == ["a-None"]
        assert len(memory.list_messages(user_id="u", agent_id="bot")) == 2
    code, _, err = run(capsys, *_store(tmp_path), "messages", "list", "--user", "u", "stray")
    assert code == 1 and "takes no ids" in err
    code, _, err = run(capsys, *_store(tmp_path), "stats", "--user", "u", "stray")
    assert code == 1 and "unrecognized arguments: stray" in err


def test_forget_needs_an_explicit_user(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Like `TdaiMemory.forget(user_id=...)`, `forget` without `--user` erases nothing (off a
    terminal it would not even ask) instead of erasing the default user."""
    path = tmp_path / "s"
    _fill(path)
    with TdaiMemory.open(path, embeddings=HashEmbeddings()) as memory:
        memory.add_memory("default user's fact")
    code, out, err = run(capsys, *_store(tmp_path), "forget", "-y")
    assert code == 1 and out == "" and "--user" in err
    with TdaiMemory.open(path, embeddings=HashEmbeddings()) as memory:
        assert [m.content for m in memory.list_memories()] == ["default user's fact"]
    code, out, _ = run(capsys, *_store(tmp_path), "--user", "default_user", "forget", "-y")
    assert code == 0 and "erased 1 scope(s): 1 memories" in out


def test_messages_export_without_a_scope_exports_every_scope(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Like `export`, `messages export` without `--user`/`--agent` backs up the messages of
    every scope (not only the default user's), and `import-jsonl` restores each in its own."""
    _fill(tmp_path / "s")
    target = tmp_path / "all.jsonl"
    code, out, _ = run(capsys, *_store(tmp_path), "messages", "export", "-o", str(target))
    assert code == 0 and "exported 5 messages" in out
    lines = [json.loads(x) for x in target.read_text("utf-8").splitlines()[1:]]
    assert sorted((x["agent_id"] or "", x["id"]) for x in lines) == [
        ("", "a-None"),
        ("", "h-None"),
        ("", "x"),
        ("bot", "a-bot"),
        ("bot", "h-bot"),
    ]
    copy = ["--store", str(tmp_path / "copy"), "--embeddings", "hash"]
    code, _, _ = run(capsys, *copy, "import-jsonl", str(target))
    assert code == 0
    with TdaiMemory.open(tmp_path / "copy", embeddings=HashEmbeddings()) as memory:
        assert [m.id for m in memory.list_messages(user_id="u", agent_id="bot")] == [
            "h-bot",
            "a-bot",
        ]
        assert len(memory.list_messages(user_id="u")) == 3


def test_import_jsonl_keeps_permanent_memories_permanent_under_a_default_ttl(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An exported `"expires_at": null` means "never expires": restoring the file into a store
    with `store.default_ttl_seconds` keeps it so (and keeps explicit expiries); only a line
    that says nothing about expiry gets the default."""
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        forever = memory.add_memory("likes tea forever", user_id="u")
        until = memory.add_memory("on leave", user_id="u", expires_at="2099-01-01T00:00:00Z")
    backup = tmp_path / "backup.jsonl"
    code, _, _ = run(capsys, *_store(tmp_path), "export", "-o", str(backup))
    assert code == 0
    with backup.open("a", encoding="utf-8") as out:
        out.write('{"kind":"memory","id":"bare","content":"a line without expiry","user_id":"u"}\n')
    config = tmp_path / "ttl.json"
    config.write_text(json.dumps({"store": {"default_ttl_seconds": 60}}), encoding="utf-8")
    copy = ["--store", str(tmp_path / "copy"), "--embeddings", "hash", "--config", str(config)]
    code, out, _ = run(capsys, *copy, "import-jsonl", str(backup))
    assert code == 0, out
    with TdaiMemory.open(tmp_path / "copy", embeddings=HashEmbeddings()) as memory:
        restored = {r.id: r.expires_at for r in memory.list_memories(user_id="u")}
    assert restored[forever.id] is None
    assert restored[until.id] == "2099-01-01T00:00:00.000Z"
    assert restored["bare"] is not None


def test_stats_leaves_out_expired_memories_before_the_sweep(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`tdai-recall stats` counts the memories `list` shows, not the expired rows the
    background sweep has yet to delete."""
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        assert memory._sweeper is not None
        memory._sweeper.stop()  # the expired row stays in the database, as between sweeps
        memory.add_memory("still valid", user_id="u")
        memory.add_memory("expired", user_id="u", expires_at="2001-01-01T00:00:00Z")
        assert len(memory._store.expired_memories("9999", limit=10)) == 1
    code, out, _ = run(capsys, *_store(tmp_path), "--json", "stats", "--user", "u")
    assert code == 0
    stats = json.loads(out)
    assert stats["memories"] == 1
    assert [s["memories"] for s in stats["scopes"]] == [1]
