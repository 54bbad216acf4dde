"""Critical-memory recall: is the memory that must not be missed injected at default settings?

Reads the team-written case set `tests/fixtures/critical/cases.json` (safety facts, medication,
standing rules, multi-part, paraphrased and cross-language questions; each user has 6-8 ordinary
memories around the critical ones). Every case is recalled once with the package defaults; a case
passes when its critical memory is injected: in the memory block, among the pinned key memories
or the standing rules of the system context. Also reports, for comparison, whether the memory
ranks in the top 5 of a plain search (no threshold), and how many ordinary memories each case
injects.

    .venv/bin/python benchmarks/quality/critical.py --cache-dir /tmp/tdai-emb-cache
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import EMBEDDER_CHOICES, REPO_ROOT, format_table, make_embeddings, write_json

from langchain_tdai_recall import TdaiMemory

CASES = REPO_ROOT / "tests" / "fixtures" / "critical" / "cases.json"
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_critical.json"


def run(cases_path: Path, embeddings: Any, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Recall every case; returns per-case outcomes and totals."""
    data = json.loads(cases_path.read_text(encoding="utf-8"))
    users = {u["user_id"]: u for u in data["users"]}
    outcomes: list[dict[str, Any]] = []
    with TdaiMemory.open(None, embeddings=embeddings, config=config) as memory:
        for user in users.values():
            memory.add_memories(
                [{k: v for k, v in m.items() if v != ""} for m in user["memories"]],
                user_id=user["user_id"],
                show_progress=False,
            )
        memory.flush()
        for case in data["cases"]:
            user = users[case["user_id"]]
            critical = next(m for m in user["memories"] if m["id"] == case["critical"])
            result = memory.recall(case["query"], user_id=case["user_id"])
            block = [m.id for m in result.memories] if result else []
            pinned = [m.id for m in result.pinned] if result else []
            rules = [m.id for m in result.standing_rules] if result else []
            ranked = memory.search_memories(
                case["query"], limit=5, user_id=case["user_id"], min_score=0.0
            )
            where = (
                "memory block"
                if critical["id"] in block
                else "key memories"
                if critical["id"] in pinned
                else "standing rules"
                if critical["id"] in rules
                else None
            )
            outcomes.append(
                {
                    "id": case["id"],
                    "kind": case["kind"],
                    "lang": case["lang"],
                    "injected": where is not None,
                    "where": where,
                    "top5_by_search": critical["id"] in [h.id for h in ranked],
                    "others_injected": len([i for i in block if i != critical["id"]]),
                }
            )
    by: dict[str, dict[str, list[bool]]] = {"kind": defaultdict(list), "lang": defaultdict(list)}
    for o in outcomes:
        by["kind"][o["kind"]].append(o["injected"])
        by["lang"][o["lang"]].append(o["injected"])
    return {
        "cases": outcomes,
        "injected": sum(o["injected"] for o in outcomes),
        "top5_by_search": sum(o["top5_by_search"] for o in outcomes),
        "total": len(outcomes),
        "by_kind": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by["kind"].items())},
        "by_lang": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by["lang"].items())},
        "where": {
            w: sum(1 for o in outcomes if o["where"] == w)
            for w in ("memory block", "key memories", "standing rules")
        },
        "mean_other_memories_injected": round(
            sum(o["others_injected"] for o in outcomes) / max(len(outcomes), 1), 3
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="reuse embeddings across runs (.npz)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    report = run(args.cases, embeddings)
    save = getattr(embeddings, "save", None)
    if callable(save):
        save()
    write_json(args.out, {"embeddings": args.embeddings, **report})
    print(
        f"critical memories injected: {report['injected']}/{report['total']} "
        f"(top 5 of a plain search: {report['top5_by_search']}/{report['total']}); "
        f"other memories injected per case: {report['mean_other_memories_injected']}"
    )
    print(f"where: {report['where']}")
    print(format_table(["kind", "injected"], list(report["by_kind"].items())))
    print(format_table(["language of the question", "injected"], list(report["by_lang"].items())))
    missed = [o for o in report["cases"] if not o["injected"]]
    if missed:
        print("missed: " + ", ".join(o["id"] for o in missed))
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
