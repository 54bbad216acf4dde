"""Large scopes: restart time, resident memory, search latency and bulk import at 100k and 1M.

For each size N (memories in ONE scope, explicit ids so that no exact-duplicate merge shrinks
the corpus) this script

1. bulk-imports N synthetic memories through `TdaiMemory.add_memories` into a directory store
   and records when the call returned (durable), when a keyword search first found the last
   record (keyword-searchable) and when the background embedder had stored every vector
   (vectors precomputed by `_corpus.HashingEmbeddings`, so the store is measured, not the
   embedder),
2. in fresh processes, times the first search after a restart without an index snapshot
   (indexes rebuilt from SQLite) and with one (the snapshot written when the previous process
   closed), and measures the resident memory that opening the store plus that first search
   added (RSS from /proc, reported per 100k memories),
3. in a fresh process started from the snapshot, times `search_memories(q, limit=5)` (hybrid)
   over the queries, excluding query embedding (query vectors precomputed): p50 / p99.

Run from the repository root:

    python benchmarks/perf/scale.py                          # sizes 100000,1000000
    python benchmarks/perf/scale.py --tiny --out /tmp/s.json # smoke test, a few seconds

The 1M store needs about 2.5 GB of disk and some minutes to build; `--keep DIR` keeps the
stores in DIR and reuses them on the next run (the import figures then come from the run that
built them). The load average at start and end is recorded next to the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from _corpus import make_memories, make_queries  # noqa: E402
from latency import PrecomputedEmbeddings  # noqa: E402

USER = "scale-user"
DIM = 384


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _records(n: int) -> list[dict[str, object]]:
    records = make_memories(n, seed=0)
    for i, record in enumerate(records):
        record["id"] = f"scale-{i:07d}"
    # the last record carries a word no other has, to time when it becomes keyword-searchable
    records[-1]["content"] = f"{records[-1]['content']} zanzibarquartz"
    return records


def build(store_dir: Path, n: int) -> dict[str, Any]:
    """Import `n` memories with one `add_memories` call; time ack, keyword search, vectors."""
    from langchain_tdai_recall import TdaiMemory

    records = _records(n)
    texts = [str(r["content"]) for r in records]
    emb = PrecomputedEmbeddings(DIM)
    emb.precompute(list(dict.fromkeys(texts)))
    with TdaiMemory.open(store_dir, embeddings=emb) as memory:
        t0 = time.perf_counter()
        memory.add_memories(records, user_id=USER, show_progress=False)
        t_ack = time.perf_counter() - t0
        hits = memory.search_memories("zanzibarquartz", user_id=USER)
        t_keyword = time.perf_counter() - t0
        found = any(h.id == records[-1]["id"] for h in hits)
        pending_after_ack = memory._store.pending_vector_count()
        memory.flush()
        t_vectors = time.perf_counter() - t0
        stats = memory._store.scope_stats(memory.scope(USER, None))
    return {
        "memories": stats.memories,
        "ack_s": round(t_ack, 2),
        "records_per_s_ack": round(n / t_ack, 1),
        "keyword_searchable_s": round(t_keyword, 2),
        "last_record_found_by_keyword": found,
        "pending_vectors_at_first_search": pending_after_ack,
        "all_vectors_s": round(t_vectors, 2),
        "records_per_s_with_vectors": round(n / t_vectors, 1),
        "note": (
            "one add_memories call with explicit ids; ack = the call returned (rows durable "
            "and keyword-searchable); keyword = the first search after it found the last "
            "record (includes building the keyword index); vectors = flush() returned "
            "(background embedder, vectors precomputed)"
        ),
    }


_CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096
import numpy, faiss, langchain_core
from latency import PrecomputedEmbeddings
from _corpus import make_queries
from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import vectors as _vectors
from langchain_tdai_recall.stores._index import keyword as _keyword
from langchain_tdai_recall.stores._index import layer as _scope
queries = make_queries({queries}, seed=1)
emb = PrecomputedEmbeddings({dim})
emb.precompute(queries)
r0 = rss()
t0 = time.perf_counter()
m = TdaiMemory.open({store!r}, embeddings=emb, config={config!r})
t1 = time.perf_counter()
m.search_memories(queries[0], user_id={user!r})
t2 = time.perf_counter()
r1 = rss()
out = {{"open_s": t1 - t0, "first_search_s": t2 - t1, "rss_bytes": r1 - r0,
        "rss_total_bytes": r1}}
if {timed}:
    import gc
    for q in queries[:5]:
        m.search_memories(q, limit=5, user_id={user!r})
    gc.collect()
    samples = []
    for q in queries:
        t = time.perf_counter()
        m.search_memories(q, limit=5, user_id={user!r})
        samples.append(time.perf_counter() - t)
    out["search_s"] = samples
t3 = time.perf_counter()
m.close()
out["close_s"] = time.perf_counter() - t3
print(json.dumps(out))
"""


def child(store_dir: Path, *, snapshots: bool, queries: int, timed: bool) -> dict[str, Any]:
    """Run one fresh process on the store; returns its measurements."""
    config = {"store": {"index_cache": "auto" if snapshots else None}}
    code = _CHILD.format(
        here=str(HERE),
        queries=queries,
        dim=DIM,
        store=str(store_dir),
        config=config,
        user=USER,
        timed=timed,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cache_dir(store_dir: Path) -> Path:
    from langchain_tdai_recall.stores.local.store import INDEX_CACHE_DIRNAME

    return store_dir / INDEX_CACHE_DIRNAME


def run_size(n: int, workdir: Path, *, queries: int, repeats: int) -> dict[str, Any]:
    """Every measurement of one size."""
    print(f"== {n} memories", file=sys.stderr)
    store_dir = workdir / f"scale_{n}"
    built = store_dir / "build.json"
    if built.exists():
        result: dict[str, Any] = {"import": json.loads(built.read_text(encoding="utf-8"))}
        result["import"]["reused_store"] = True
    else:
        shutil.rmtree(store_dir, ignore_errors=True)
        result = {"import": build(store_dir, n)}
        built.write_text(json.dumps(result["import"]), encoding="utf-8")
    result["memories"] = result["import"]["memories"]
    print(f"  import {result['import']}", file=sys.stderr)

    cold = []
    for _ in range(repeats):
        # no snapshot to start from; the run writes one when it closes (after measuring)
        shutil.rmtree(_cache_dir(store_dir), ignore_errors=True)
        cold.append(child(store_dir, snapshots=True, queries=1, timed=False))
    writer = cold[-1]
    warm = [child(store_dir, snapshots=True, queries=1, timed=False) for _ in range(repeats)]
    timed = child(store_dir, snapshots=True, queries=queries, timed=True)
    snapshot_bytes = sum(p.stat().st_size for p in _cache_dir(store_dir).glob("*"))

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    per_100k = 100_000 / max(result["memories"], 1) / 2**20
    result["restart_without_snapshot"] = {
        "first_search_s": med(cold, "first_search_s"),
        "open_s": med(cold, "open_s"),
        "rss_mib_per_100k": round(med(cold, "rss_bytes") * per_100k, 1),
        "rss_total_mib": round(med(cold, "rss_total_bytes") / 2**20, 1),
    }
    result["restart_with_snapshot"] = {
        "first_search_s": med(warm, "first_search_s"),
        "open_s": med(warm, "open_s"),
        "rss_mib_per_100k": round(med(warm, "rss_bytes") * per_100k, 1),
        "rss_total_mib": round(med(warm, "rss_total_bytes") / 2**20, 1),
        "snapshot_write_on_close_s": round(writer["close_s"], 3),
        "snapshot_mib": round(snapshot_bytes / 2**20, 1),
    }
    samples = sorted(timed["search_s"])
    result["search_excl_embedding"] = {
        "p50_ms": round(1e3 * statistics.median(samples), 3),
        "p99_ms": round(1e3 * samples[min(len(samples) - 1, int(0.99 * len(samples)))], 3),
        "n": len(samples),
    }
    result["repeats"] = repeats
    print(
        f"  restart {result['restart_without_snapshot']} -> {result['restart_with_snapshot']}; "
        f"search {result['search_excl_embedding']}",
        file=sys.stderr,
    )
    return result


def to_markdown(report: dict[str, Any]) -> str:
    """The summary table."""
    sizes = report["sizes"]
    head = "| metric (memories in one scope) | " + " | ".join(f"{s['memories']:,}" for s in sizes)
    lines = [
        "# Large scopes (`benchmarks/perf/scale.py`)",
        "",
        f"Machine: {report['machine']}. Load average at start / end: "
        f"{report['loadavg_start']} / {report['loadavg_end']}. Timed queries: "
        f"{report['queries']}; restarts: median of {report['repeats']} fresh processes.",
        "",
        head + " |",
        "|---" * (len(sizes) + 1) + "|",
    ]

    def row(label: str, *path: str) -> None:
        cells = []
        for s in sizes:
            value: Any = s
            for key in path:
                value = value.get(key, "–") if isinstance(value, dict) else "–"
            cells.append(str(value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("first search after restart, no snapshot, s", "restart_without_snapshot", "first_search_s")
    row("first search after restart, from snapshot, s", "restart_with_snapshot", "first_search_s")
    row("RSS, no snapshot, MiB per 100k", "restart_without_snapshot", "rss_mib_per_100k")
    row("RSS, from snapshot, MiB per 100k", "restart_with_snapshot", "rss_mib_per_100k")
    row("snapshot size, MiB", "restart_with_snapshot", "snapshot_mib")
    row("snapshot write at close, s", "restart_with_snapshot", "snapshot_write_on_close_s")
    row("search p50 ms, excl. query embedding", "search_excl_embedding", "p50_ms")
    row("search p99 ms, excl. query embedding", "search_excl_embedding", "p99_ms")
    row("bulk import: add_memories returned, records/s", "import", "records_per_s_ack")
    row("bulk import: keyword-searchable after, s", "import", "keyword_searchable_s")
    row("bulk import: every vector stored after, s", "import", "all_vectors_s")
    if any(size["import"].get("reused_store") for size in sizes):
        lines += [
            "",
            "The stores were kept from an earlier run (`--keep`): the bulk-import rows are that "
            "run's figures.",
        ]
    lines += [
        "",
        "Targets (issue 10): first search after a restart at 100k ≤ 1 s; RSS ≤ 250 MiB per "
        "100k memories (384-d); search p50 at 1M ≤ 10 ms excluding query embedding. RSS is "
        "what opening the store and the first search added in a fresh process (the package, "
        "numpy and FAISS were imported before the first reading).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated sizes")
    parser.add_argument("--queries", type=int, default=200, help="timed queries")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per restart")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/scale.json"))
    parser.add_argument("--keep", default=None, help="keep (and reuse) the stores in this dir")
    parser.add_argument("--tiny", action="store_true", help="smoke test: 2500 memories")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.tiny:
        sizes, args.queries, args.repeats = [2500], 10, 1  # above the snapshot minimum
    report: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "loadavg_start": _loadavg(),
        "queries": args.queries,
        "repeats": args.repeats,
        "dim": DIM,
        "queries_sample": make_queries(2, seed=1),
    }
    with tempfile.TemporaryDirectory(prefix="tdai-scale-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        report["sizes"] = [
            run_size(n, workdir, queries=args.queries, repeats=args.repeats) for n in sizes
        ]
    report["loadavg_end"] = _loadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md = out.with_suffix(".md")
    md.write_text(to_markdown(report), encoding="utf-8")
    print(f"wrote {out} and {md}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
