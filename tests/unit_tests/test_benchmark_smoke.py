"""Smoke runs of the quality benchmark scripts on tiny synthetic fixtures, so they cannot rot."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUALITY = ROOT / "benchmarks" / "quality"
FIXTURES = ROOT / "tests" / "fixtures" / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", QUALITY / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def common() -> ModuleType:
    _load("locomo")  # puts benchmarks/quality on sys.path
    return sys.modules["_common"]


def test_locomo_evidence_cleaning_and_metrics(common: ModuleType) -> None:
    known = {"D1:2", "D2:3", "D11:26", "D30:5"}
    ids, dropped = common.clean_dia_ids(["D1:02; D2:3", "D:11:26", "D30:05", "D9:9", "D"], known)
    assert ids == ["D1:2", "D2:3", "D11:26", "D30:5"]
    assert dropped == 2
    covered = [("a",), ("x", "b"), ("c",)]
    assert common.recall_at_k(covered, ["a", "b", "z"], 1) == pytest.approx(1 / 3)
    assert common.recall_at_k(covered, ["a", "b", "z"], 2) == pytest.approx(2 / 3)
    assert common.hit_at_k(covered, ["c"], 2) == 0.0
    assert common.reciprocal_rank(covered, ["b"]) == pytest.approx(0.5)
    assert common.ndcg_at_k(covered, ["a"], 10, n_relevant_items=1) == pytest.approx(1.0)
    assert common.ndcg_at_k(covered, ["c"], 10, n_relevant_items=1) == pytest.approx(0.5)
    convs = common.load_locomo(FIXTURES / "locomo")
    first = convs[0]
    assert len(first.turns) == 8 and len(first.observations) == 8
    assert first.dropped_questions == 1  # its only evidence id does not exist
    assert {q.evidence for q in first.questions if q.category == 1} == {("D1:2", "D2:2")}
    assert first.turns[0].date is not None and first.turns[0].date.year == 2024
    assert "[shares a photo: a photo of a grey cat" in common.turn_content(first.turns[4])


@pytest.mark.parametrize("embeddings", ["hash", "none"])
def test_locomo_script_runs(tmp_path: Path, embeddings: str) -> None:
    out = tmp_path / "locomo.json"
    args = ["--data", str(FIXTURES / "locomo"), "--embeddings", embeddings, "--out", str(out)]
    assert _load("locomo").main([*args, "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["conversations"] == ["tiny-1", "tiny-2"]
    assert payload["questions_headline"] == 8
    modes = ["keyword"] if embeddings == "none" else ["keyword", "embedding", "hybrid"]
    for variant in ("observations", "turns"):
        assert list(payload["results"][variant]) == modes
        for res in payload["results"][variant].values():
            ranking = res["ranking"]["overall"]
            assert ranking["n"] == 8
            for key in ("recall@5", "recall@10", "hit@5"):
                assert 0.0 <= ranking[key] <= 100.0
            assert ranking["recall@5"] <= ranking["recall@10"]
            assert 0.0 <= ranking["mrr"] <= 1.0 and 0.0 <= ranking["ndcg@10"] <= 1.0
            default = res["default"]
            assert 0.0 <= default["overall"]["injected"] <= 5.0
            assert 0.0 <= default["false_injection"]["mean_injected"] <= 5.0
        # the fixture is tiny and lexical: keyword ranking must find most evidence
        assert payload["results"][variant]["keyword"]["ranking"]["overall"]["recall@10"] >= 75.0


@pytest.mark.parametrize("embeddings", ["hash", "none"])
def test_zh_eval_script_runs(tmp_path: Path, embeddings: str) -> None:
    out = tmp_path / "zh.json"
    args = ["--data", str(FIXTURES / "zh_eval"), "--embeddings", embeddings, "--out", str(out)]
    assert _load("zh_eval").main([*args, "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["users"] == ["t01", "t02"]
    assert payload["queries_by_kind"]["absent"] == 2
    for res in payload["results"].values():
        ranking = res["ranking"]["all_answerable"]
        assert ranking["n"] == 8
        assert 0.0 <= ranking["recall@5"] <= 1.0
        assert 0.0 <= res["ranking"]["by_kind"]["keyword"]["recall@5"] <= 1.0
        absent = res["default"]["absent"]
        assert absent["n"] == 2
        assert 0.0 <= absent["share_injecting_nothing"] <= 1.0
    assert payload["results"]["keyword"]["ranking"]["by_kind"]["keyword"]["recall@5"] == 1.0


def test_critical_script_runs(tmp_path: Path) -> None:
    out = tmp_path / "critical.json"
    assert _load("critical").main(["--embeddings", "hash", "--out", str(out)]) == 0
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert {"cases / default", "first_person / default", "first_person / no profile"} <= set(runs)
    for run in runs.values():
        assert run["total"] == len(run["cases"]) > 20
        assert 0 <= run["injected"] <= run["total"]
        assert set(run["where"]) == {"memory block", "standing rules", "pinned", "profile"}
    irrelevant = runs["first_person / default"]
    assert irrelevant["irrelevant_requests"] > 10
    assert irrelevant["mean_block_memories_irrelevant"] >= 0


def test_medium_script_runs(tmp_path: Path) -> None:
    out = tmp_path / "medium.json"
    args = ["--embeddings", "hash", "--users", "maya,ruth", "--limit", "6", "--out", str(out)]
    assert _load("medium").main([*args, "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert set(payload["sets"]) == {"dev", "after"}
    for variants in payload["sets"].values():
        assert set(variants) == {"all 50", "rated"}
        for variant, report in variants.items():
            summary = report["summary"]
            assert summary["requests"] == 6 and summary["irrelevant_requests"] == 6
            assert 0 <= summary["needs_reached"] <= summary["needs"] >= 6
            assert sum(summary["by_channel"].values()) == summary["needs_reached"]
            assert {"block", "pinned", "standing rules", "profile"} <= set(summary["by_channel"])
            assert summary["mean_block_memories_irrelevant"] >= 0
            assert summary["max_system_memory_chars"] > 0  # every user has a profile
            if variant == "all 50":  # nothing reaches priority 90: nothing is pinned
                assert summary["by_channel"]["pinned"] == 0
    dev = payload["sets"]["dev"]["all 50"]
    assert {c["user"] for c in dev["cases"]} == {"maya"} and len(dev["irrelevant"]) == 6
    assert "cases" not in payload["sets"]["after"]["rated"]  # held out: totals only
    # maya's levothyroxine (priority 92) is pinned when rated
    assert payload["sets"]["dev"]["rated"]["summary"]["by_channel"]["pinned"] >= 1


def test_locomo_messages_variant_reports_ranking(tmp_path: Path) -> None:
    out = tmp_path / "locomo.json"
    args = ["--data", str(FIXTURES / "locomo"), "--embeddings", "hash", "--out", str(out)]
    assert _load("locomo").main([*args, "--variants", "messages", "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    overall = payload["results"]["messages"]["hybrid"]["ranking"]["overall"]
    assert 0.0 <= overall["recall@5"] <= 100.0 and overall["n"] > 0


def test_formation_oracle_script_runs(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "_bench_formation", ROOT / "benchmarks" / "formation" / "locomo_oracle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "formation.json"
    args = ["--data", str(FIXTURES / "locomo"), "--embeddings", "hash", "--out", str(out)]
    assert module.main([*args, "--overhead-rounds", "1", "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    storage = payload["quality"]["storage"]
    assert storage["stored_pct"] == 100.0 and storage["duplicates"] == 0
    assert storage["unexpected"] == 0
    assert payload["quality"]["calls"]["oracle_unaligned_windows"] == 0
    prompt = payload["quality"]["prompt_chars"]
    assert prompt["max"] <= prompt["bound"]


def test_candidate_floor_script_runs(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "_bench_candidate_floor", ROOT / "benchmarks" / "formation" / "candidate_floor.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "floor.json"
    args = ["--data", str(FIXTURES / "locomo"), "--embeddings", "hash", "--out", str(out)]
    assert module.main([*args, "--quiet"]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    for row in payload["pairs"].values():
        shares = list(row["reach_floor_pct"].values())
        assert shares == sorted(shares, reverse=True)  # a higher floor never offers more
    assert payload["locomo"]["observations"] > 0
