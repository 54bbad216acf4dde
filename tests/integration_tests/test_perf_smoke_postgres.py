"""Smoke run of the PostgreSQL perf benchmark script on tiny inputs against a real server.

The other perf scripts' smoke runs are in `tests/unit_tests/test_perf_smoke.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit_tests.test_perf_smoke import PERF


def test_postgres_script_runs_tiny(tmp_path: Path, postgres_server: str) -> None:
    out = tmp_path / "pg.json"
    subprocess.run(
        [
            sys.executable,
            str(PERF / "postgres.py"),
            "--tiny",
            "--readers",
            "2",
            "--url",
            postgres_server,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.read_text(encoding="utf-8"))
    (one,) = report["one_scope"]
    assert one["identical_hits_and_scores"] is True
    assert one["postgres"]["search_excl_embedding"]["p50_ms"] > 0
    assert one["pgvector"]["exact_scan"]["n"] == 20
    assert report["many_scopes"]["postgres"]["indexed_scopes"] > 0
    assert report["processes"]["freshness_pct"] == 100.0
    assert report["processes"]["writes"] > 0
    assert (tmp_path / "pg.md").read_text(encoding="utf-8").startswith("# PostgreSQL backend")


def test_many_users_script_runs_tiny(tmp_path: Path, postgres_server: str) -> None:
    out = tmp_path / "mu.json"
    subprocess.run(
        [
            sys.executable,
            str(PERF / "postgres_many_users.py"),
            "--tiny",
            "--url",
            postgres_server,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["load"]["bytes_per_user"] > 0
    (phase,) = report["phases"]
    assert phase["procs"] == 2
    assert phase["recall"]["n"] > 0 and phase["recall_cold"]["n"] > 0
    assert phase["freshness_pct"] == 100.0
    assert phase["statements_per_recall"] > 0
    assert (tmp_path / "mu.md").read_text(encoding="utf-8").startswith("# Many users")
