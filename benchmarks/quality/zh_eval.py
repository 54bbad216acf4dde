"""zh_eval (Chinese / mixed-language) recall quality through the public `TdaiMemory` API.

Each user's memories go into that user's scope (type, scene, priority and activity times kept);
each query is run against its user's scope. Three strategies side by side (`keyword`,
`embedding`, `hybrid`), each in two settings:

- `ranking`: `search_memories` with every threshold at 0: R@5 and Hit@5 (from `limit=5`, what
  recall with `max_results=5` ranks) and MRR (from `limit=10`) per kind over answerable queries.
- `default`: `recall()` with the default thresholds and `max_results=5`: R@5 per kind of what
  is injected, and for `absent` queries (the fact is not stored) the share that inject nothing
  and the mean number injected.

Relative times in the queries ("去年国庆节", "下周末") are resolved against the set's reference
date, 2025-06-15 (its README), passed as `now` to `recall` and `search_memories`.

Usage::

    python benchmarks/quality/zh_eval.py [--data DIR] [--users u01,u02] [--out PATH]
        [--embeddings default|e5|e5-raw|use|use-raw|hash|none] [--modes keyword,embedding,hybrid]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DEFAULT_DATA_ROOT,
    EMBEDDER_CHOICES,
    REPO_ROOT,
    ZH_KINDS,
    CachedEmbeddings,
    ZhQuery,
    ZhUser,
    format_table,
    hit_at_k,
    load_zh_eval,
    make_embeddings,
    mean,
    percentiles,
    recall_at_k,
    reciprocal_rank,
    write_json,
)
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory

MODES: tuple[str, ...] = ("keyword", "embedding", "hybrid")
K = 10
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_zh_eval.json"


REFERENCE_NOW = dt.datetime(2025, 6, 15, 12, 0)
"""The set's reference date (a Sunday), in the store's timezone."""


def _records(user: ZhUser) -> list[dict[str, Any]]:
    return [
        {
            "id": m.id,
            "content": m.content,
            "type": m.type,
            "scene_name": m.scene_name,
            "priority": m.priority,
            "activity_start_time": m.activity_start_time or None,
            "activity_end_time": m.activity_end_time or None,
        }
        for m in user.memories
    ]


def open_memory(embeddings: Embeddings | None, mode: str) -> TdaiMemory:
    """An in-memory store configured for one strategy, otherwise with the default settings."""
    recall: dict[str, Any] = {"strategy": mode, "max_results": 5}
    return TdaiMemory.open(None, embeddings=embeddings, config={"recall": recall})


def _per_kind(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    answerable = [r for r in rows if r["kind"] != "absent"]
    out: dict[str, Any] = {
        "all_answerable": {
            "n": len(answerable),
            **{k: round(mean(r[k] for r in answerable), 4) for k in keys},
        },
        "by_kind": {},
    }
    for kind in ZH_KINDS:
        sub = [r for r in rows if r["kind"] == kind and kind != "absent"]
        if sub:
            out["by_kind"][kind] = {
                "n": len(sub),
                **{k: round(mean(r[k] for r in sub), 4) for k in keys},
            }
    return out


def evaluate(
    users: list[ZhUser],
    queries: list[ZhQuery],
    mode: str,
    embeddings: Embeddings | None,
    *,
    log: logging.Logger,
) -> dict[str, Any]:
    """Ranking and default-settings metrics of one strategy."""
    out: dict[str, Any] = {}
    for ranking in (True, False):
        start = time.perf_counter()
        with open_memory(embeddings, mode) as memory:
            for user in users:
                memory.add_memories(_records(user), user_id=user.user_id, show_progress=False)
            memory.flush()  # vectors are computed in the background; measure with all of them
            rows: list[dict[str, Any]] = []
            absent_top: dict[str, list[float]] = {"embedding": [], "keyword": []}
            absent_injected: list[int] = []
            for query in queries:
                if ranking:
                    # @5 metrics from limit=5 (hybrid's candidate depth follows the limit)
                    hits = memory.search_memories(
                        query.query,
                        limit=5,
                        user_id=query.user_id,
                        min_score=0.0,
                        now=REFERENCE_NOW,
                    )
                    if query.kind == "absent":
                        # the legs' own numbers (cosine, keyword relevance) are comparable with
                        # score_threshold; `score` itself is a fused rank score
                        for leg, values in absent_top.items():
                            found = [getattr(h, f"{leg}_score") for h in hits]
                            values.append(max((v for v in found if v is not None), default=0.0))
                        continue
                    top5 = [(h.id,) for h in hits]
                    covered = [
                        (h.id,)
                        for h in memory.search_memories(
                            query.query,
                            limit=K,
                            user_id=query.user_id,
                            min_score=0.0,
                            now=REFERENCE_NOW,
                        )
                    ]
                    rows.append(
                        {
                            "kind": query.kind,
                            "recall@5": recall_at_k(top5, query.relevant, 5),
                            "hit@5": hit_at_k(top5, query.relevant, 5),
                            "mrr": reciprocal_rank(covered, query.relevant),
                        }
                    )
                    continue
                result = memory.recall(query.query, user_id=query.user_id, now=REFERENCE_NOW)
                ids = [m.id for m in result.memories] if result is not None else []
                # the system context (standing rules, pinned memories, the user profile) is in
                # front of the model on every turn
                pinned = (
                    [m.id for m in (*result.standing_rules, *result.pinned, *result.profile)]
                    if result is not None
                    else []
                )
                if query.kind == "absent":
                    absent_injected.append(len(ids))
                    continue
                shown = [(i,) for i in (*ids, *pinned)]
                rows.append(
                    {
                        "kind": query.kind,
                        "recall@5": recall_at_k(shown, query.relevant, len(shown)),
                        "recall@5_block": recall_at_k([(i,) for i in ids], query.relevant, 5),
                        "injected": float(len(ids)),
                        "pinned": float(len(pinned)),
                    }
                )
        if ranking:
            out["ranking"] = _per_kind(rows, ("recall@5", "hit@5", "mrr"))
            out["ranking"]["absent_top_leg_score"] = {
                leg: {k: round(v, 4) for k, v in percentiles(values, (10, 50, 90)).items()}
                for leg, values in absent_top.items()
                if any(values)
            }
        else:
            out["default"] = _per_kind(rows, ("recall@5", "recall@5_block", "injected", "pinned"))
            out["default"]["absent"] = {
                "n": len(absent_injected),
                "share_injecting_nothing": round(
                    mean(1.0 if c == 0 else 0.0 for c in absent_injected), 4
                ),
                "mean_injected": round(mean(absent_injected), 4),
            }
        log.info(
            "zh_eval / %s / %s: %.1f s",
            mode,
            "ranking" if ranking else "default",
            time.perf_counter() - start,
        )
    return out


def _print_report(payload: dict[str, Any]) -> None:
    kinds = [k for k in ZH_KINDS if k != "absent"]
    for setting in ("ranking", "default"):
        title = (
            "ranking (search_memories, thresholds 0)"
            if setting == "ranking"
            else "default settings (recall())"
        )
        print(f"\n## zh_eval R@5 by kind, {title}\n")
        rows = []
        for mode, res in payload["results"].items():
            part = res[setting]
            row: list[object] = [mode, part["all_answerable"]["recall@5"]]
            row += [part["by_kind"].get(k, {}).get("recall@5", "n/a") for k in kinds]
            if setting == "default":
                row.append(part["all_answerable"]["recall@5_block"])
                row.append(part["absent"]["share_injecting_nothing"])
            rows.append(row)
        header = ["strategy", "ALL", *kinds]
        if setting == "default":
            header += ["ALL, memory block only", "absent: nothing injected"]
        print(format_table(header, rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_ROOT / "zh_eval")
    parser.add_argument("--users", default="", help="comma-separated user ids (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="reuse embeddings across runs (.npz)"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bench").setLevel(logging.WARNING if args.quiet else logging.INFO)
    log = logging.getLogger("bench.zh_eval")
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {sorted(unknown)}; allowed: {MODES}")
    if args.embeddings == "none":
        modes = [m for m in modes if m == "keyword"]

    started = time.perf_counter()
    users, queries = load_zh_eval(args.data)
    if args.users:
        wanted = set(args.users.split(","))
        users = [u for u in users if u.user_id in wanted]
    user_ids = {u.user_id for u in users}
    queries = [q for q in queries if q.user_id in user_ids]
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)

    results = {mode: evaluate(users, queries, mode, embeddings, log=log) for mode in modes}
    if isinstance(embeddings, CachedEmbeddings):
        embeddings.save()

    payload: dict[str, Any] = {
        "benchmark": "zh_eval",
        "data": str(args.data),
        "users": sorted(user_ids),
        "memories": sum(len(u.memories) for u in users),
        "queries_by_kind": {k: sum(1 for q in queries if q.kind == k) for k in ZH_KINDS},
        "embeddings": args.embeddings,
        "embedder_identity": getattr(embeddings, "identity", None),
        "metrics_note": (
            "recall@5, hit@5 and mrr in 0..1 over answerable queries; ranking = "
            "search_memories with thresholds 0; default = recall() with default thresholds and "
            "max_results=5; absent = queries whose fact is not stored"
        ),
        "results": results,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    write_json(args.out, payload)
    if not args.quiet:
        _print_report(payload)
        print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
