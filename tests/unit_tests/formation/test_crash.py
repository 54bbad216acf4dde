"""Exactly once across crashes and processes: kill -9 mid-run, rerun, and concurrent processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FormationWindow, HashEmbeddings, ScriptedFormationModel

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

CONFIG: dict[str, Any] = {
    "pipeline": {"enabled": False, "flushOnClose": False},
    "extraction": {"windowMessages": 4, "maxWindowsPerRun": 1000, "timeoutSeconds": 120},
    "persona": {"enabled": False},
}

WORKER = textwrap.dedent(
    """
    import json, sys, threading, time
    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel

    path, stall_at, where, delay = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    config = json.loads(sys.argv[5])
    calls = {"extract": 0, "embed": 0, "write": 0}

    def stall(kind):
        calls[kind] += 1
        if where == kind and calls[kind] == stall_at:
            print("STALL", flush=True)
            time.sleep(120)

    def extract(window):
        stall("extract")
        time.sleep(delay)
        return [
            {"content": "Memory of " + m["text"], "type": "persona", "priority": 50,
             "source_ids": [m["id"]]}
            for m in window.messages if m["role"] == "user"
        ]

    class Embeddings(HashEmbeddings):
        def embed_documents(self, texts):
            if threading.current_thread() is threading.main_thread():  # not the vector upkeep
                stall("embed")
            return super().embed_documents(texts)

    memory = TdaiMemory.open(path, embeddings=Embeddings(), config=config,
                             extraction_model=ScriptedFormationModel(extract=extract))
    db = memory._store._db
    original = db.write_memory_row
    def write(*args, **kwargs):
        row = original(*args, **kwargs)
        stall("write")  # inside the open transaction
        return row
    db.write_memory_row = write
    report = memory.extract(all_scopes=True)
    print(json.dumps({"windows": report.windows, "calls": calls["extract"],
                      "locked": report.locked_scopes, "errors": list(report.errors)}), flush=True)
    memory.close()
    """
)


def expected_extract(window: FormationWindow) -> Any:
    return [
        {
            "content": "Memory of " + m["text"],
            "type": "persona",
            "priority": 50,
            "source_ids": [m["id"]],
        }
        for m in window.messages
        if m["role"] == "user"
    ]


def record(path: Path, users: list[str], turns: int) -> None:
    with TdaiMemory.open(path, embeddings=HashEmbeddings(), config=CONFIG) as memory:
        for user in users:
            for t in range(turns):
                memory.record_messages(
                    [
                        {"role": "user", "content": f"{user} fact {t}"},
                        {"role": "assistant", "content": "noted"},
                    ],
                    session_key="s",
                    user_id=user,
                )


def start(tmp_path: Path, path: Path, stall_at: int, where: str, delay: float = 0.0) -> Any:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(path),
            str(stall_at),
            where,
            str(delay),
            json.dumps(CONFIG),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def stored(path: Path, users: list[str]) -> list[str]:
    with TdaiMemory.open(path, embeddings=HashEmbeddings(), config=CONFIG) as memory:
        return sorted(m.content for u in users for m in memory.list_memories(user_id=u))


@pytest.mark.parametrize(
    ("where", "stall_at"),
    [("extract", 3), ("embed", 2), ("write", 5)],
    ids=["during-the-model-call", "during-embedding", "inside-the-commit-transaction"],
)
def test_G_X7_kill_9_mid_run_then_rerun_no_duplicate_no_loss(
    tmp_path: Path, where: str, stall_at: int
) -> None:
    path = tmp_path / "store"
    record(path, ["u1"], turns=20)  # 40 messages, 10 windows of 4
    proc = start(tmp_path, path, stall_at, where)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "STALL", proc.stderr.read() if proc.stderr else line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    partial = stored(path, ["u1"])
    assert len(partial) == len(set(partial)) and len(partial) < 20
    model = ScriptedFormationModel(extract=expected_extract)
    started = time.monotonic()
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=CONFIG, extraction_model=model
    ) as memory:
        report = memory.extract(user_id="u1")  # the dead process's lease is taken over at once
        assert report.ok and report.locked_scopes == 0
    assert time.monotonic() - started < 30
    final = stored(path, ["u1"])
    assert final == sorted(f"Memory of u1 fact {t}" for t in range(20))


def test_G_X18_two_processes_sharing_a_store_form_each_window_once(tmp_path: Path) -> None:
    path = tmp_path / "store"
    users = [f"u{i}" for i in range(6)]
    record(path, users, turns=6)  # 6 scopes × 3 windows
    procs = [start(tmp_path, path, 0, "none", delay=0.02) for _ in range(2)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert all(not o["errors"] for o in outputs)
    assert sum(o["calls"] for o in outputs) == 18  # every window answered exactly once
    final = stored(path, users)
    assert final == sorted(f"Memory of {u} fact {t}" for u in users for t in range(6))
