"""Smoke runs of the perf benchmark scripts on tiny inputs, so they cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PERF = Path(__file__).resolve().parents[2] / "benchmarks" / "perf"


def _run(script: str, out: Path) -> dict[str, object]:
    subprocess.run(
        [sys.executable, str(PERF / script), "--tiny", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_latency_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("latency.py", tmp_path / "perf.json")
    (size,) = report["sizes"]  # type: ignore[misc]
    assert size["memories"] == 300
    assert size["search_excl_embedding"]["p50_ms"] > 0
    assert size["recall_excl_embedding"]["n"] == 10
    assert size["recall_strategy"] == "hybrid"
    assert size["bulk_insert"]["records_per_s"] > 0
    assert size["cold_import_open"]["import_plus_open_s"] > 0
    assert "search" in size["baseline"] or "skipped" in size["baseline"]
    assert (tmp_path / "perf.md").read_text(encoding="utf-8").startswith("# Performance")


def test_index_options_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("index_options.py", tmp_path / "idx.json")
    (run,) = report["runs"]  # type: ignore[misc]
    chosen = [o for o in run["options"] if o["option"].startswith("VectorIndex")]
    assert chosen[0]["recall@15"] == 1.0
    assert run["updates"]["add_1_us"] > 0


def test_scale_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("scale.py", tmp_path / "scale.json")
    (size,) = report["sizes"]  # type: ignore[misc]
    assert size["memories"] == 2500  # explicit ids: no exact-duplicate merge
    assert size["import"]["last_record_found_by_keyword"] is True
    assert size["restart_with_snapshot"]["snapshot_mib"] > 0
    assert size["restart_with_snapshot"]["first_search_s"] > 0
    assert size["restart_without_snapshot"]["rss_mib_per_100k"] > 0
    assert size["search_excl_embedding"]["n"] == 10
    assert (tmp_path / "scale.md").read_text(encoding="utf-8").startswith("# Large scopes")


def test_time_latency_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("time_latency.py", tmp_path / "time.json")
    (size,) = report["sizes"]  # type: ignore[misc]
    assert size["memories"] == 600
    assert size["dated_memories"] > 0
    for column in ("plain_on", "plain_off", "time_on", "time_off"):
        assert size[column]["n"] == 8
        assert size[column]["p50_ms"] > 0
    assert size["time_questions_injected_mean"] > 0
    assert size["resolver"]["time_questions"]["p50_us"] > 0
    text = (tmp_path / "time.md").read_text(encoding="utf-8")
    assert text.startswith("# Time-aware recall latency")


def test_store_rw_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("store_rw.py", tmp_path / "store_rw.json")
    (run,) = report["runs"]  # type: ignore[misc]
    assert run["embedder"] == "hash"
    assert run["put_one_text"]["n"] == 5
    assert run["search_right_after_put"]["p50_ms"] > 0
    assert run["scopes"][0]["items"] == 200
    assert (tmp_path / "store_rw.md").read_text(encoding="utf-8").startswith("# Read-your")


def test_cache_sim_script_runs_tiny(tmp_path: Path) -> None:
    report = _run("cache_sim.py", tmp_path / "sim.json")
    rows = report["rows"]
    assert isinstance(rows, list) and len(rows) == 6  # 3 exponents x 2 budgets
    for small, large in zip(rows[::2], rows[1::2], strict=True):
        assert 0 < small["random_hit_pct"] <= large["random_hit_pct"] <= 100
        assert small["random_hit_pct"] <= small["sticky_hit_pct"]  # sticky never worse here
    assert (tmp_path / "sim.md").read_text(encoding="utf-8").startswith("# Index cache")
