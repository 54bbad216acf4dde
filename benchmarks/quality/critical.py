"""Critical-memory recall: does the memory a request needs reach the model at default settings?

Reads the team-written case sets in `tests/fixtures/critical/`:

- `cases.json`: safety facts, medication, standing rules, multi-part, paraphrased and
  cross-language questions; each user has 6-8 ordinary memories around critical ones that carry
  the priorities memory formation gives them (most of them pinned by priority).
- `first_person.json`: first-person requests whose need is implicit ("plan dinner for Friday" for
  a vegetarian), to users with 5-12 memories of ordinary priority (40-80, or the `add_memory`
  defaults), plus irrelevant requests to the same users ("what's the capital of France?").
  Written before the injection decision was tuned.
- `first_person_after.json`: more cases of the same kind, written after tuning (reported
  separately: they are the closest thing to held-out data this repository has).

Every case is recalled once; a case passes when its critical memory reaches the model: in the
`<relevant-memories>` block or in the system context (standing rules, memories pinned by
priority, the user profile). Reported beside it: where it went, whether it ranks in the top 5 of
a plain search (no threshold), memories in the block per case, memories in the block per
irrelevant request, and the characters of memory lines the system context carries per turn.

Variants (one row each):
- `default`: the package defaults.
- `ordinary priorities`: `cases.json` with every priority replaced by an ordinary one (critical
  memories 60-80, as a user might rate them; rules -1 kept): measures what reaches the model
  without pinning.
- `no profile`: `recall.profile_max_tokens = None`: what relevance alone (the memory block) brings.

    .venv/bin/python benchmarks/quality/critical.py --cache-dir /tmp/tdai-emb-cache
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    EMBEDDER_CHOICES,
    REPO_ROOT,
    format_table,
    make_embeddings,
    system_memory_chars,
    write_json,
)

from langchain_tdai_recall import RecallResult, TdaiMemory

CASES_DIR = REPO_ROOT / "tests" / "fixtures" / "critical"
CASE_SETS = ("cases.json", "first_person.json", "first_person_after.json")
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_critical.json"
ORDINARY_PRIORITY = 70
"""Priority given to critical memories in the `ordinary priorities` variant (below every pin)."""


def _ordinary(data: dict[str, Any]) -> dict[str, Any]:
    """The same cases with every priority ordinary: critical memories 60-80, others 50."""
    out = copy.deepcopy(data)
    critical = {c["critical"] for c in out["cases"]}
    for user in out["users"]:
        for i, m in enumerate(user["memories"]):
            if m.get("priority") == -1:
                continue
            m["priority"] = 60 + 10 * (i % 3) if m["id"] in critical else 50
    return out


def _where(result: RecallResult | None, memory_id: str) -> str | None:
    if result is None:
        return None
    for name, records in (
        ("memory block", result.memories),
        ("standing rules", result.standing_rules),
        ("pinned", result.pinned),
        ("profile", result.profile),
    ):
        if any(m.id == memory_id for m in records):
            return name
    return None


def run(
    data: dict[str, Any], embeddings: Any, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Recall every case and irrelevant request of one case set; per-case outcomes and totals."""
    users = {u["user_id"]: u for u in data["users"]}
    outcomes: list[dict[str, Any]] = []
    irrelevant: list[int] = []
    system_chars: list[int] = []
    with TdaiMemory.open(None, embeddings=embeddings, config=config) as memory:
        for user in users.values():
            memory.add_memories(
                [{k: v for k, v in m.items() if v != ""} for m in user["memories"]],
                user_id=user["user_id"],
                show_progress=False,
            )
        memory.flush()
        for case in data["cases"]:
            result = memory.recall(case["query"], user_id=case["user_id"])
            ranked = memory.search_memories(
                case["query"], limit=5, user_id=case["user_id"], min_score=0.0
            )
            where = _where(result, case["critical"])
            block = [m.id for m in result.memories] if result else []
            system_chars.append(
                system_memory_chars(result.append_system_context if result else None)
            )
            outcomes.append(
                {
                    "id": case["id"],
                    "kind": case["kind"],
                    "lang": case["lang"],
                    "injected": where is not None,
                    "where": where,
                    "top5_by_search": case["critical"] in [h.id for h in ranked],
                    "block": len(block),
                    "others_in_block": len([i for i in block if i != case["critical"]]),
                }
            )
        for request in data.get("irrelevant", []):
            result = memory.recall(request["query"], user_id=request["user_id"])
            irrelevant.append(len(result.memories) if result else 0)
    by: dict[str, dict[str, list[bool]]] = {"kind": defaultdict(list), "lang": defaultdict(list)}
    for o in outcomes:
        by["kind"][o["kind"]].append(o["injected"])
        by["lang"][o["lang"]].append(o["injected"])
    n = max(len(outcomes), 1)
    return {
        "cases": outcomes,
        "injected": sum(o["injected"] for o in outcomes),
        "top5_by_search": sum(o["top5_by_search"] for o in outcomes),
        "total": len(outcomes),
        "by_kind": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by["kind"].items())},
        "by_lang": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by["lang"].items())},
        "where": {
            w: sum(1 for o in outcomes if o["where"] == w)
            for w in ("memory block", "standing rules", "pinned", "profile")
        },
        "mean_block_memories": round(sum(o["block"] for o in outcomes) / n, 3),
        "irrelevant_requests": len(irrelevant),
        "mean_block_memories_irrelevant": (
            round(sum(irrelevant) / len(irrelevant), 3) if irrelevant else None
        ),
        "mean_system_memory_chars": round(sum(system_chars) / max(len(system_chars), 1), 1),
        "max_system_memory_chars": max(system_chars, default=0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases-dir", type=Path, default=CASES_DIR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="reuse embeddings across runs (.npz)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    no_profile = {"recall": {"profile_max_tokens": None}}
    reports: dict[str, dict[str, Any]] = {}
    for name in CASE_SETS:
        path = args.cases_dir / name
        if not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        stem = path.stem
        reports[f"{stem} / default"] = run(data, embeddings)
        if name == "cases.json":
            reports[f"{stem} / ordinary priorities"] = run(_ordinary(data), embeddings)
            reports[f"{stem} / ordinary priorities, no profile"] = run(
                _ordinary(data), embeddings, no_profile
            )
        else:
            reports[f"{stem} / no profile"] = run(data, embeddings, no_profile)
    save = getattr(embeddings, "save", None)
    if callable(save):
        save()
    write_json(args.out, {"embeddings": args.embeddings, "runs": reports})
    rows = [
        [
            name,
            f"{r['injected']}/{r['total']}",
            f"{r['top5_by_search']}/{r['total']}",
            f"{r['mean_block_memories']:.2f}",
            "n/a"
            if r["mean_block_memories_irrelevant"] is None
            else f"{r['mean_block_memories_irrelevant']:.2f}",
            f"{r['mean_system_memory_chars']:.0f} / {r['max_system_memory_chars']}",
            ", ".join(f"{k} {v}" for k, v in r["where"].items() if v),
        ]
        for name, r in reports.items()
    ]
    print(
        format_table(
            [
                "case set / variant",
                "reaches model",
                "top 5 of search",
                "block/case",
                "block/irrelevant",
                "memory chars in system (mean / max)",
                "where",
            ],
            rows,
        )
    )
    for name, r in reports.items():
        missed = [o["id"] for o in r["cases"] if not o["injected"]]
        if missed:
            print(f"{name}: missed {', '.join(missed)}")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
