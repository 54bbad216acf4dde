"""Latency of time-aware recall (issue 22): messages that name a time, at 10k and 100k memories.

Builds one scope of N synthetic memories (`_corpus.make_memories`) whose episodic memories carry
activity dates spread over the two years before a fixed `NOW` (the others have none: their write
time, the build time, is their only time, and persona facts are never matched by it). Then, in
one run and side by side, it times `recall()` (hybrid, query vectors precomputed: the query
embedding is excluded) for

- the perf corpus's ordinary questions (no time in them), with `recall.time_aware` on and off,
- time questions ("what did I buy last month?", "上个月买了什么？", "in March 2025", ...), on
  and off,
- a time question right after a write (the index's time table is rebuilt once per change of the
  rows, on the first time question that needs it),
- the resolver alone (`text.timeexpr.resolve_time`) per message.

Run from the repository root:

    python benchmarks/perf/time_latency.py                     # sizes 10000,100000
    python benchmarks/perf/time_latency.py --tiny --out /tmp/t.json  # smoke test, seconds

Timings on a shared machine are noisy: compare the on/off columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import make_memories, make_queries
from latency import PrecomputedEmbeddings, _loadavg, _pct, _time_calls

REPO = Path(__file__).resolve().parents[2]
USER = "perf-time-user"
NOW = dt.datetime(2026, 12, 3, 18, 0, tzinfo=dt.UTC)
TIME_QUESTIONS = (
    "What did I buy last month?",
    "What did I do last weekend?",
    "What did I spend money on in November?",
    "Where did I travel in March 2025?",
    "What did I do two weeks ago?",
    "Who did I have dinner with yesterday?",
    "What happened on 2026-10-14?",
    "What did I do over the summer?",
    "上个月买了什么？",
    "去年五月去了哪里？",
    "这周末有什么安排？",
    "三天前和谁吃了饭？",
    "2025年3月做了什么？",
    "上周跑了多少公里？",
    "春节去哪了？",
    "What did I do this year?",
)


def _dated(records: list[dict[str, object]], seed: int) -> None:
    """Give episodic records an activity date in the two years before `NOW`."""
    rng = random.Random(seed)
    for record in records:
        if record["type"] == "episodic":
            day = NOW.date() - dt.timedelta(days=rng.randint(0, 730))
            record["activity_start_time"] = day.isoformat()


def _resolver_cost(texts: Sequence[str]) -> dict[str, float]:
    from langchain_tdai_recall.text.timeexpr import resolve_time

    today = NOW.date()
    samples = []
    for text in texts:
        t = time.perf_counter()
        resolve_time(text, today)
        samples.append(time.perf_counter() - t)
    samples.sort()
    return {
        "p50_us": round(statistics.median(samples) * 1e6, 1),
        "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6, 1),
        "n": len(samples),
    }


def run_size(n: int, n_queries: int, *, dim: int, workdir: Path) -> dict[str, Any]:
    from langchain_tdai_recall import TdaiMemory

    print(f"== {n} memories", file=sys.stderr)
    records = make_memories(n, seed=0)
    for i, record in enumerate(records):
        record["id"] = f"perf-{i:07d}"
    _dated(records, seed=1)
    plain = make_queries(n_queries, seed=1)
    timed = [TIME_QUESTIONS[i % len(TIME_QUESTIONS)] for i in range(n_queries)]
    emb = PrecomputedEmbeddings(dim)
    emb.precompute(list(dict.fromkeys(str(r["content"]) for r in records)))
    emb.precompute(list(dict.fromkeys(plain + timed)))
    store_dir = workdir / f"store_{n}"
    result: dict[str, Any] = {
        "memories": n,
        "dated_memories": sum(1 for r in records if "activity_start_time" in r),
    }
    with TdaiMemory.open(store_dir, embeddings=emb) as memory:
        memory.add_memories(records, user_id=USER, show_progress=False)
        memory.flush()
    # the same store twice, time-aware and not, timed call by call in turn (a shared machine's
    # load then weighs on both columns alike)
    shutil.copytree(store_dir, workdir / f"store_{n}_off")
    on = TdaiMemory.open(store_dir, embeddings=emb, config={"timezone": "UTC"})
    off = TdaiMemory.open(
        workdir / f"store_{n}_off",
        embeddings=emb,
        config={"timezone": "UTC", "recall": {"time_aware": False}},
    )
    with on, off:
        for memory in (on, off):
            memory.search_memories(plain[0], user_id=USER)  # build the indexes
        for kind, queries in (("plain", plain), ("time", timed)):
            samples: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
            for q in queries:
                for key, memory in (("on", on), ("off", off)):
                    samples[key] += _time_calls(
                        lambda q, m=memory: m.recall(q, user_id=USER, now=NOW), [q], warmup=0
                    )
            for key in ("on", "off"):
                result[f"{kind}_{key}"] = _pct(samples[key])
            print(
                f"  {kind}: p50 on {result[f'{kind}_on']['p50_ms']} ms, "
                f"off {result[f'{kind}_off']['p50_ms']} ms",
                file=sys.stderr,
            )
        injected = [on.recall(q, user_id=USER, now=NOW) for q in TIME_QUESTIONS]
        result["time_questions_injected_mean"] = round(
            statistics.mean(len(r.memories) for r in injected if r is not None), 2
        )
        # a write makes the next recall catch the index up (and, time-aware, rebuild the time
        # table on the first time question)
        after_write: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(7):
            for key, memory in (("on", on), ("off", off)):
                memory.add_memory(f"Bought a new kettle, number {i}", user_id=USER)
                t = time.perf_counter()
                memory.recall(TIME_QUESTIONS[0], user_id=USER, now=NOW)
                after_write[key].append(time.perf_counter() - t)
        for key in ("on", "off"):
            result[f"time_after_write_{key}_p50_ms"] = round(
                statistics.median(after_write[key]) * 1e3, 2
            )
    result["resolver"] = {
        "plain": _resolver_cost(plain),
        "time_questions": _resolver_cost(timed),
    }
    return result


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Time-aware recall latency (issue 22)",
        "",
        f"Generated by `benchmarks/perf/time_latency.py`; load average {report['load_before']}"
        f" -> {report['load_after']} (a shared machine: compare columns of one run).",
        "Recall p50 / p99 in ms, hybrid, query embedding excluded (vectors precomputed).",
        "",
        "| memories | plain, off | plain, on | time questions, off | time questions, on | "
        "time question after a write, off / on | resolver p50 (plain / time) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["sizes"]:

        def cell(name: str, r: dict[str, Any] = r) -> str:
            return f"{r[name]['p50_ms']} / {r[name]['p99_ms']}"

        lines.append(
            f"| {r['memories']:,} | {cell('plain_off')} | {cell('plain_on')} | "
            f"{cell('time_off')} | {cell('time_on')} | {r['time_after_write_off_p50_ms']} / "
            f"{r['time_after_write_on_p50_ms']} | "
            f"{r['resolver']['plain']['p50_us']} µs / {r['resolver']['time_questions']['p50_us']}"
            " µs |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated memory counts")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per kind")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/perf_time.json"))
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--tiny", action="store_true", help="smoke test: 600 memories, 8 queries")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sizes, args.queries = "600", 8
    report: dict[str, Any] = {"load_before": _loadavg(), "sizes": []}
    with tempfile.TemporaryDirectory(prefix="tdai-time-perf-") as tmp:
        for n in (int(s) for s in args.sizes.split(",") if s):
            report["sizes"].append(run_size(n, args.queries, dim=args.dim, workdir=Path(tmp)))
    report["load_after"] = _loadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = to_markdown(report)
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
