"""The `tdai-recall` command line, run in-process."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from langchain_tdai_recall.cli import DEFAULT_STORE, STORE_ENV, main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path) -> list[str]:
    """Common options for a fresh store with the offline test embedder."""
    return ["--store", str(tmp_path / "store"), "--embeddings", "hash"]


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    root = tmp_path / "memory-tdai"
    shutil.copytree(FIXTURE / "data", root)
    with closing(sqlite3.connect(root / "vectors.db")) as conn:
        conn.executescript((FIXTURE / "vectors.sql").read_text(encoding="utf-8"))
        conn.commit()
    return root


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 1
    assert err.startswith("tdai-recall: error: ")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


# ---------------------------------------------------------------------------------------------
# Parsing and errors


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("demo", "add", "search", "recall", "import-upstream", "stats", "config"):
        assert command in out


def test_no_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert out == ""
    assert_one_line_error(code, err, "COMMAND")


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert_one_line_error(code, err, "frobnicate")


def test_bad_option_value(capsys: pytest.CaptureFixture[str], store: list[str]) -> None:
    code, _, err = run(capsys, "search", "x", "--limit", "0", *store)
    assert_one_line_error(code, err, "1..20")
    code, _, err = run(capsys, "add", "x", "--type", "fact", *store)
    assert_one_line_error(code, err, "fact")


def test_library_errors_are_one_line(capsys: pytest.CaptureFixture[str], store: list[str]) -> None:
    code, _, err = run(capsys, "add", "x", "--priority", "500", *store)
    assert_one_line_error(code, err, "priority")
    code, _, err = run(capsys, "add", "x", "--start", "next tuesday", *store)
    assert_one_line_error(code, err, "activity_start_time")


def test_bad_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"recall": {"maxResults": -1}}), encoding="utf-8")
    code, _, err = run(capsys, "--store", ":memory:", "--config", str(cfg), "stats")
    assert_one_line_error(code, err, "maxResults", "cfg.json")


def test_log_level_options(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--store", ":memory:", "--embeddings", "none", "recall", "hello there"]
    code, _, err = run(capsys, *base)
    assert code == 0
    assert "WARNING" in err
    assert "keyword" in err  # the one warning about the missing embedder
    code, _, err = run(capsys, "-q", *base)
    assert code == 0
    assert err == ""


# ---------------------------------------------------------------------------------------------
# config


def test_config_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "config", "defaults")
    assert code == 0
    data = json.loads(out)
    assert data["recall"]["max_results"] == 5
    assert data["recall"]["strategy"] == "hybrid"
    code, out, _ = run(capsys, "config", "defaults", "--camel")
    assert json.loads(out)["recall"]["maxResults"] == 5


def test_config_defaults_merge_a_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"recall": {"maxResults": 3}}), encoding="utf-8")
    code, out, _ = run(capsys, "--config", str(cfg), "config", "defaults")
    assert code == 0
    assert json.loads(out)["recall"]["max_results"] == 3


def test_config_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "config", "schema")
    assert code == 0
    schema = json.loads(out)
    assert "recall" in schema["properties"]
    code, out, _ = run(capsys, "config", "schema", "--camel")
    assert "maxResults" in out


# ---------------------------------------------------------------------------------------------
# add / search / recall / stats


def test_add_search_recall_stats(capsys: pytest.CaptureFixture[str], store: list[str]) -> None:
    code, out, _ = run(
        capsys, *store, "add", "用户对花生过敏。", "--type", "persona", "--priority", "90"
    )
    assert code == 0
    assert out.startswith("stored m_")
    assert "[persona]" in out
    code, out, _ = run(
        capsys,
        *store,
        "add",
        "The user flies to Lisbon for a conference.",
        "--start",
        "2026-06-02",
        "--end",
        "2026-06-05",
        "--scene",
        "travel",
        "--id",
        "trip-1",
        "--json",
    )
    assert code == 0
    record = json.loads(out)
    assert record["id"] == "trip-1"
    assert record["activity_start_time"] == "2026-06-02"

    code, out, _ = run(capsys, *store, "search", "花生", "--json")
    assert code == 0
    hits = json.loads(out)
    assert hits[0]["content"] == "用户对花生过敏。"
    assert hits[0]["score"] > 0

    code, out, _ = run(capsys, "search", "Lisbon conference", *store)
    assert code == 0
    assert "Lisbon" in out
    assert "score" in out

    code, out, _ = run(capsys, *store, "recall", "When do I fly to Lisbon?")
    assert code == 0
    assert "strategy=" in out
    assert "<relevant-memories>" in out
    assert "prepend_context" in out
    assert "append_system_context" in out
    assert "Lisbon" in out

    code, out, _ = run(capsys, *store, "recall", "Lisbon trip", "--json")
    data = json.loads(out)
    assert data["memories"][0]["id"] == "trip-1"
    assert data["memories"][0]["score"] > 0
    assert data["injected_chars"] > 0

    code, out, _ = run(capsys, *store, "stats")
    assert code == 0
    assert "memories:   2" in out
    code, out, _ = run(capsys, *store, "stats", "--json")
    assert json.loads(out)["memories"] == 2


def test_scopes_are_separate(capsys: pytest.CaptureFixture[str], store: list[str]) -> None:
    assert run(capsys, *store, "--user", "alice", "add", "Alice likes jazz.")[0] == 0
    code, out, _ = run(capsys, *store, "--user", "bob", "search", "jazz", "--json")
    assert code == 0
    assert json.loads(out) == []
    code, out, _ = run(capsys, *store, "search", "jazz", "--user", "alice", "--json")
    assert len(json.loads(out)) == 1


def test_search_messages(
    capsys: pytest.CaptureFixture[str], store: list[str], upstream: Path
) -> None:
    assert run(capsys, *store, "import-upstream", str(upstream))[0] == 0
    code, out, _ = run(capsys, *store, "search", "dark theme VS Code", "--messages")
    assert code == 0
    assert "agent:main:sess-b" in out


def test_store_from_environment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env-store"))
    assert run(capsys, "--embeddings", "none", "add", "Likes tea.")[0] == 0
    assert (tmp_path / "env-store").is_dir()


def test_default_store_is_in_the_working_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "--embeddings", "none", "add", "Likes tea.")[0] == 0
    assert (tmp_path / DEFAULT_STORE).is_dir()


def test_in_memory_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "--store", ":memory:", "--embeddings", "none", "stats")
    assert code == 0
    assert "(in memory)" in out


# ---------------------------------------------------------------------------------------------
# import-upstream


def test_import_upstream(
    capsys: pytest.CaptureFixture[str], store: list[str], upstream: Path
) -> None:
    code, out, err = run(capsys, *store, "import-upstream", str(upstream))
    assert code == 0, err
    assert "memories written:  6" in out
    assert "messages written:  5" in out
    assert "persona written:   yes" in out
    assert "superseded" in out

    code, out, _ = run(capsys, *store, "import-upstream", str(upstream), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["memories"] == 0
    assert report["unchanged"] == 6 + 5 + 3 + 1
    assert any("superseded" in s for s in report["skipped"])

    code, out, _ = run(capsys, *store, "recall", "京都有什么寺庙值得去？")
    assert code == 0
    assert "京都" in out
    assert "王小明" in out


def test_import_upstream_progress(
    capsys: pytest.CaptureFixture[str], store: list[str], upstream: Path
) -> None:
    code, _, err = run(capsys, *store, "import-upstream", str(upstream), "--progress")
    assert code == 0
    assert "messages" in err
    code, _, err = run(capsys, *store, "import-upstream", str(upstream), "--no-progress")
    assert err == ""


def test_import_upstream_missing_directory(
    capsys: pytest.CaptureFixture[str], store: list[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, *store, "import-upstream", str(tmp_path / "nope"))
    assert_one_line_error(code, err, "does not exist")


# ---------------------------------------------------------------------------------------------
# demo and entry points


def test_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo", "--embeddings", "hash")
    assert code == 0, err
    assert "<relevant-memories>" in out
    assert "<user-persona>" in out
    assert "score" in out
    assert "byte-identical in every turn" in out
    assert "what the model saw" in out
    assert "tdai_memory_search" in out
    assert "final answer" in out


@pytest.mark.slow
def test_demo_with_the_default_embedder(capsys: pytest.CaptureFixture[str]) -> None:
    # What `make demo` runs.
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert "embedder tdai-default" in out
    assert "<relevant-memories>" in out
    assert "final answer" in out


def test_demo_json_without_agent(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--embeddings", "none", "--no-agent", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["agent"] is None
    strategies = [t["recall"]["strategy"] for t in data["turns"]]
    assert strategies[-1] == "skipped"
    assert any(t["recall"]["memories"] for t in data["turns"])


def test_demo_does_not_touch_the_default_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env-store"))
    assert run(capsys, "demo", "--embeddings", "none", "--no-agent")[0] == 0
    assert list(tmp_path.iterdir()) == []


def test_python_dash_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "langchain_tdai_recall", "config", "defaults"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recall"]["max_results"] == 5
