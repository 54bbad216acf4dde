"""LoCoMo retrieval quality through the public `TdaiMemory` API (SPEC §12).

One memory scope per conversation. Two memory variants, each evaluated separately:

- `observations`: every machine-written observation is an L1 memory; it covers its source turns.
- `turns`: every dialogue turn is an L1 memory (`Speaker: text`, plus the caption of a shared
  photo), with the session date as its timestamp; it covers itself.
- `messages`: every dialogue turn is an L0 message of its session (the first speaker as `user`,
  the second as `assistant`), searched with `search_conversations`; ranking only. Each message is
  indexed with the end of the one before it in its session, so this variant measures the
  conversation search the memory tools use.

Each question of categories 1-4 is a query; its cleaned evidence turn ids are the relevant set
(category 5, adversarial, is reported separately). Three strategies side by side (`keyword`,
`embedding`, `hybrid`), each in two settings:

- `ranking`: `search_memories` with every threshold at 0 - pure ranking quality: R@5 and
  Hit@5 from `limit=5` (what recall with `max_results=5` ranks), R@10, MRR and nDCG@10 (binary
  gains) from `limit=10`.
- `default`: `recall()` with the default settings: the share of the evidence that reaches the
  model (in the memory block or the system context: standing rules, pinned memories, the
  profile), the share in the memory block alone, mean memories in the block and in the system
  context per query, and the false-injection rate - the same question recalled against the next
  conversation's scope, where the answer is absent: memories put in that scope's block.

Usage::

    python benchmarks/quality/locomo.py [--data PATH] [--limit-conversations N] [--out PATH]
        [--embeddings default|e5|e5-raw|use|use-raw|hash|none] [--variants observations,turns]
        [--modes keyword,embedding,hybrid] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
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
    HEADLINE_CATEGORIES,
    LOCOMO_CATEGORIES,
    REPO_ROOT,
    CachedEmbeddings,
    Conversation,
    format_table,
    hit_at_k,
    load_locomo,
    make_embeddings,
    mean,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
    turn_content,
    write_json,
)
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory

MODES: tuple[str, ...] = ("keyword", "embedding", "hybrid")
VARIANTS: tuple[str, ...] = ("observations", "turns", "messages")
K = 10
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_locomo.json"

Coverage = dict[str, tuple[str, ...]]
_DIALOGUE_EPOCH_MS = 1_577_836_800_000
"""2020-01-01T00:00:00Z: the recording time of a dialogue's first turn (one second per turn)."""


def build_records(conv: Conversation, variant: str) -> tuple[list[dict[str, Any]], Coverage]:
    """The L1 records of one conversation and, per record id, the turn ids it covers."""
    records: list[dict[str, Any]] = []
    coverage: Coverage = {}
    if variant == "observations":
        for idx, obs in enumerate(conv.observations):
            rid = f"obs-{idx:05d}"
            records.append(
                {
                    "id": rid,
                    "content": obs.text,
                    "type": "episodic",
                    "timestamp": obs.date.isoformat() if obs.date else None,
                    "source_message_ids": list(obs.source_ids),
                }
            )
            coverage[rid] = obs.source_ids
    else:
        for turn in conv.turns:
            rid = "turn-" + turn.dia_id.replace(":", "-")
            records.append(
                {
                    "id": rid,
                    "content": turn_content(turn),
                    "type": "episodic",
                    "timestamp": turn.date.isoformat() if turn.date else None,
                    "session_key": f"session-{turn.session}",
                }
            )
            coverage[rid] = (turn.dia_id,)
    return records, coverage


def open_memory(embeddings: Embeddings | None, mode: str) -> TdaiMemory:
    """An in-memory store configured for one strategy, otherwise with the default settings."""
    recall: dict[str, Any] = {"strategy": mode, "max_results": 5}
    return TdaiMemory.open(None, embeddings=embeddings, config={"recall": recall})


def _summarise(rows: list[dict[str, float]], keys: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for key in keys:
        out[key] = round(mean(r[key] for r in rows), 4)
    return out


def _by_category(rows: list[dict[str, float]], keys: Sequence[str]) -> dict[str, Any]:
    headline = [r for r in rows if r["category"] in HEADLINE_CATEGORIES]
    result: dict[str, Any] = {"overall": _summarise(headline, keys), "by_category": {}}
    for cat, name in LOCOMO_CATEGORIES.items():
        sub = [r for r in rows if r["category"] == cat]
        if sub:
            result["by_category"][f"{cat}-{name}"] = _summarise(sub, keys)
    return result


def evaluate(
    convs: list[Conversation],
    variant: str,
    mode: str,
    embeddings: Embeddings | None,
    *,
    log: logging.Logger,
) -> dict[str, Any]:
    """Ranking and default-settings metrics of one strategy on one memory variant."""
    coverages: dict[str, Coverage] = {}
    out: dict[str, Any] = {}
    for ranking in (True, False):
        start = time.perf_counter()
        with open_memory(embeddings, mode) as memory:
            for conv in convs:
                records, coverages[conv.sample_id] = build_records(conv, variant)
                memory.add_memories(records, user_id=conv.sample_id, show_progress=False)
            memory.flush()  # vectors are computed in the background; measure with all of them
            rows: list[dict[str, float]] = []
            false_counts: list[int] = []
            strategies: dict[str, int] = {}
            for idx, conv in enumerate(convs):
                coverage = coverages[conv.sample_id]
                other = convs[(idx + 1) % len(convs)] if len(convs) > 1 else None
                for question in conv.questions:
                    relevant_items = sum(
                        1 for ids in coverage.values() if set(ids).intersection(question.evidence)
                    )
                    if ranking:
                        # hybrid takes 3 x limit candidates per leg, so the top 5 of a limit-10
                        # search can differ from a limit-5 search: @5 metrics use limit=5, as
                        # recall with max_results=5 does
                        top5 = [
                            coverage.get(h.id, ())
                            for h in memory.search_memories(
                                question.question, limit=5, user_id=conv.sample_id, min_score=0.0
                            )
                        ]
                        covered = [
                            coverage.get(h.id, ())
                            for h in memory.search_memories(
                                question.question, limit=K, user_id=conv.sample_id, min_score=0.0
                            )
                        ]
                        rows.append(
                            {
                                "category": question.category,
                                "recall@5": 100 * recall_at_k(top5, question.evidence, 5),
                                "recall@10": 100 * recall_at_k(covered, question.evidence, 10),
                                "hit@5": 100 * hit_at_k(top5, question.evidence, 5),
                                "mrr": reciprocal_rank(covered, question.evidence),
                                "ndcg@10": ndcg_at_k(
                                    covered, question.evidence, K, n_relevant_items=relevant_items
                                ),
                            }
                        )
                        continue
                    result = memory.recall(question.question, user_id=conv.sample_id)
                    ids = [m.id for m in result.memories] if result is not None else []
                    # the system context (standing rules, pinned memories and the profile) is
                    # in front of the model on every turn too
                    system = (
                        [m.id for m in (*result.standing_rules, *result.pinned, *result.profile)]
                        if result is not None
                        else []
                    )
                    if result is not None:
                        strategies[result.strategy] = strategies.get(result.strategy, 0) + 1
                    covered = [coverage.get(i, ()) for i in ids]
                    shown = [coverage.get(i, ()) for i in (*ids, *system)]
                    rows.append(
                        {
                            "category": question.category,
                            "recall@5": 100 * recall_at_k(shown, question.evidence, len(shown)),
                            "recall@5_block": 100 * recall_at_k(covered, question.evidence, 5),
                            "injected": float(len(ids)),
                            "system_context": float(len(system)),
                        }
                    )
                    if other is not None and question.category in HEADLINE_CATEGORIES:
                        foreign = memory.recall(question.question, user_id=other.sample_id)
                        false_counts.append(len(foreign.memories) if foreign is not None else 0)
        if ranking:
            out["ranking"] = _by_category(
                rows, ("recall@5", "recall@10", "hit@5", "mrr", "ndcg@10")
            )
        else:
            out["default"] = _by_category(
                rows, ("recall@5", "recall@5_block", "injected", "system_context")
            )
            out["default"]["strategies_used"] = strategies
            out["default"]["false_injection"] = (
                {
                    "n": len(false_counts),
                    "mean_injected": round(mean(false_counts), 4),
                    "share_injecting_nothing": round(
                        mean(1.0 if c == 0 else 0.0 for c in false_counts), 4
                    ),
                }
                if false_counts
                else None
            )
        log.info(
            "%s / %s / %s: %.1f s",
            variant,
            mode,
            "ranking" if ranking else "default",
            time.perf_counter() - start,
        )
    return out


def evaluate_messages(
    convs: list[Conversation], mode: str, embeddings: Embeddings | None, *, log: logging.Logger
) -> dict[str, Any]:
    """Ranking quality of `search_conversations` over the dialogue recorded as L0 messages."""
    start = time.perf_counter()
    rows: list[dict[str, float]] = []
    with open_memory(embeddings, mode) as memory:
        for conv in convs:
            first = conv.speakers[0]
            messages = [
                {
                    "id": turn.dia_id,
                    "role": "user" if turn.speaker == first else "assistant",
                    "content": turn_content(turn),
                    "session_key": f"session-{turn.session}",
                    # Dialogue order, not the wall clock: ties in relevance are broken by recency,
                    # so recording times taken from the clock made runs differ.
                    "recorded_at": _DIALOGUE_EPOCH_MS + 1000 * position,
                }
                for position, turn in enumerate(conv.turns)
            ]
            for session in sorted({m["session_key"] for m in messages}):
                memory.record_messages(
                    [m for m in messages if m["session_key"] == session],
                    session_key=session,
                    user_id=conv.sample_id,
                )
        memory.flush()
        for conv in convs:
            for question in conv.questions:
                hits = memory.search_conversations(
                    question.question, limit=5, user_id=conv.sample_id, min_score=0.0
                )
                top5 = [(h.id,) for h in hits]
                rows.append(
                    {
                        "category": question.category,
                        "recall@5": 100 * recall_at_k(top5, question.evidence, 5),
                        "hit@5": 100 * hit_at_k(top5, question.evidence, 5),
                    }
                )
    log.info("messages / %s / ranking: %.1f s", mode, time.perf_counter() - start)
    return {"ranking": _by_category(rows, ("recall@5", "hit@5"))}


def _print_report(payload: dict[str, Any]) -> None:
    for variant, per_mode in payload["results"].items():
        if variant == "messages":
            print("\n## LoCoMo dialogue as L0 messages (search_conversations, ranking)\n")
            print(
                format_table(
                    ["strategy", "R@5", "Hit@5"],
                    [
                        [
                            mode,
                            f"{res['ranking']['overall']['recall@5']:.1f}",
                            f"{res['ranking']['overall']['hit@5']:.1f}",
                        ]
                        for mode, res in per_mode.items()
                    ],
                )
            )
            continue
        print(f"\n## LoCoMo {variant} (categories 1-4, n={payload['questions_headline']})\n")
        rows = []
        for mode, res in per_mode.items():
            rk = res["ranking"]["overall"]
            df = res["default"]["overall"]
            fi = res["default"]["false_injection"]
            rows.append(
                [
                    mode,
                    f"{rk['recall@5']:.1f}",
                    f"{rk['recall@10']:.1f}",
                    f"{rk['mrr']:.3f}",
                    f"{rk['ndcg@10']:.3f}",
                    f"{df['recall@5']:.1f}",
                    f"{df['recall@5_block']:.1f}",
                    f"{df['injected']:.2f}",
                    f"{df['system_context']:.1f}",
                    f"{fi['mean_injected']:.2f}" if fi else "n/a",
                ]
            )
        print(
            format_table(
                [
                    "strategy",
                    "R@5",
                    "R@10",
                    "MRR",
                    "nDCG@10",
                    "reaches model",
                    "in block",
                    "block/q",
                    "system ctx/q",
                    "false inj./q",
                ],
                rows,
            )
        )
        cats = [f"{c}-{LOCOMO_CATEGORIES[c]}" for c in (*HEADLINE_CATEGORIES, 5)]
        cat_rows = []
        for mode, res in per_mode.items():
            by_cat = res["ranking"]["by_category"]
            cat_rows.append(
                [mode] + [f"{by_cat[c]['recall@5']:.1f}" if c in by_cat else "n/a" for c in cats]
            )
        print(f"\nR@5 by category (ranking, threshold 0; {cats[-1]} is not in the headline):\n")
        print(format_table(["strategy", *cats], cat_rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_ROOT / "locomo")
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="reuse embeddings across runs (.npz)"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bench").setLevel(logging.WARNING if args.quiet else logging.INFO)
    log = logging.getLogger("bench.locomo")
    variants = [v for v in args.variants.split(",") if v]
    modes = [m for m in args.modes.split(",") if m]
    for value, allowed, what in ((variants, VARIANTS, "variant"), (modes, MODES, "mode")):
        unknown = set(value) - set(allowed)
        if unknown:
            parser.error(f"unknown {what}(s) {sorted(unknown)}; allowed: {allowed}")
    if args.embeddings == "none":
        modes = [m for m in modes if m == "keyword"]

    started = time.perf_counter()
    convs = load_locomo(args.data)
    if args.limit_conversations is not None:
        convs = convs[: args.limit_conversations]
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)

    results: dict[str, Any] = {}
    for variant in variants:
        results[variant] = {}
        for mode in modes:
            results[variant][mode] = (
                evaluate_messages(convs, mode, embeddings, log=log)
                if variant == "messages"
                else evaluate(convs, variant, mode, embeddings, log=log)
            )
    if isinstance(embeddings, CachedEmbeddings):
        embeddings.save()

    questions = [q for c in convs for q in c.questions]
    payload: dict[str, Any] = {
        "benchmark": "locomo",
        "data": str(args.data),
        "conversations": [c.sample_id for c in convs],
        "questions_headline": sum(1 for q in questions if q.category in HEADLINE_CATEGORIES),
        "questions_by_category": {
            str(cat): sum(1 for q in questions if q.category == cat) for cat in LOCOMO_CATEGORIES
        },
        "questions_dropped_no_evidence": sum(c.dropped_questions for c in convs),
        "evidence_ids_dropped": sum(c.dropped_evidence for c in convs),
        "memories": {
            "observations": sum(len(c.observations) for c in convs),
            "turns": sum(len(c.turns) for c in convs),
        },
        "embeddings": args.embeddings,
        "embedder_identity": getattr(embeddings, "identity", None),
        "k": K,
        "metrics_note": (
            "recall@k, hit@5 in percent; mrr, ndcg@10 in 0..1; ranking = search_memories with "
            "thresholds 0 (limit=5 for @5, limit=10 for the rest); default = recall() with "
            "default thresholds and max_results=5; "
            "false_injection = same question recalled against the next conversation's scope"
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
