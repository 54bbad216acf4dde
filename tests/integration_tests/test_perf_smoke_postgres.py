"""Smoke run of the PostgreSQL perf benchmark script on tiny inputs against a real server.

The other perf scripts' smoke runs are in `tests/unit_tests/test_perf_smoke.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.unit_tests.test_perf_smoke import PERF


def _run_tiny(script: str, out: Path, *args: str) -> dict[str, Any]:
    """Run a perf script with `--tiny` and the given arguments; its JSON report."""
    subprocess.run(
        [sys.executable, str(PERF / script), "--tiny", *args, "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def test_postgres_script_runs_tiny(tmp_path: Path, postgres_server: str) -> None:
    out = tmp_path / "pg.json"
    report = _run_tiny("postgres.py", out, "--readers", "2", "--url", postgres_server)
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
    report = _run_tiny("postgres_many_users.py", out, "--url", postgres_server)
    assert report["load"]["bytes_per_user"] > 0
    (phase,) = report["phases"]
    assert phase["procs"] == 2
    assert phase["recall"]["n"] > 0 and phase["recall_cold"]["n"] > 0
    assert phase["freshness_pct"] == 100.0
    assert phase["statements_per_recall"] > 0
    assert (tmp_path / "mu.md").read_text(encoding="utf-8").startswith("# Many users")
