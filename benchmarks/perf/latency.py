"""Latency, throughput and footprint of langchain-tdai-recall against a LangChain ensemble.

For each size N (memories in ONE scope) this script

1. generates N synthetic zh/en memories and embeds them with a fast deterministic embedder
   (`_corpus.HashingEmbeddings`, so that 100k is feasible),
2. bulk-inserts them through the public API into a directory store (insert rate),
3. times the first search (the in-memory indexes are built from SQLite on first use),
4. times `search_memories(q, limit=5)` and `recall(q)` (hybrid, the default strategy) over the
   queries, excluding query embedding (query vectors are precomputed) and including the real
   default embedder's `embed_query` (its vector is computed and thrown away, so the results are
   the same and only the cost is added),
5. times LangChain's `EnsembleRetriever([FAISS retriever, BM25Retriever])` on the same texts,
   vectors and queries (k=5; query vectors precomputed too),
6. measures, in fresh subprocesses, the RSS added by opening the store and building its indexes
   (reported per 100k memories) and the cold `import langchain_tdai_recall` + open time.

Run from the repository root:

    python benchmarks/perf/latency.py                      # sizes 10000,100000
    python benchmarks/perf/latency.py --tiny --out /tmp/perf.json   # smoke test, a few seconds

The baseline needs `langchain-community` and `rank_bm25` (the `bench` dependency group); without
them it is skipped and reported as such. Wall-clock numbers depend on what else runs on the
machine; the load average at start and end is recorded next to them.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import HashingEmbeddings, make_memories, make_queries

REPO = Path(__file__).resolve().parents[2]
USER = "perf-user"


class PrecomputedEmbeddings(Embeddings):
    """Hashing embedder with precomputed vectors, optionally charged another embedder's cost.

    Texts passed to `precompute` are answered from a matrix (a dict lookup per text), so bulk
    insert and search measure the store, not the embedder. With `cost_of` set, `embed_query`
    first runs that embedder's `embed_query` on the same text and discards the result.
    """

    def __init__(self, dim: int = 384) -> None:
        self.inner = HashingEmbeddings(dim)
        self.identity = f"perf-hashing-embeddings-{dim}"
        self._row: dict[str, int] = {}
        self._matrix = np.empty((0, dim), dtype=np.float32)
        self.cost_of: Embeddings | None = None

    def precompute(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` now and remember their vectors; returns them."""
        vectors = self.inner.embed_array(list(texts))
        base = len(self._matrix)
        self._matrix = np.vstack([self._matrix, vectors])
        for i, text in enumerate(texts):
            self._row[text] = base + i
        return vectors

    def vectors_of(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of `texts` (precomputed ones looked up, others computed)."""
        return self._lookup(texts)

    def _lookup(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._row.get(t, -1) for t in texts]
        if min(rows, default=0) < 0:
            return self.inner.embed_array(list(texts))
        return self._matrix[rows]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._lookup(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        if self.cost_of is not None:
            self.cost_of.embed_query(text)
        return self._lookup([text])[0].tolist()  # type: ignore[no-any-return]


def _pct(samples: Sequence[tuple[float, float]]) -> dict[str, float]:
    """p50/p99 of wall time and of the process's CPU time (all threads), in ms."""
    arr = np.asarray(samples) * 1e3
    wall, cpu = arr[:, 0], arr[:, 1]
    return {
        "p50_ms": round(float(np.percentile(wall, 50)), 3),
        "p99_ms": round(float(np.percentile(wall, 99)), 3),
        "mean_ms": round(float(wall.mean()), 3),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 3),
        "cpu_p99_ms": round(float(np.percentile(cpu, 99)), 3),
        "n": len(samples),
    }


def _time_calls(
    fn: Callable[[str], object], queries: Sequence[str], warmup: int = 5
) -> list[tuple[float, float]]:
    """(wall, process CPU) seconds per call; CPU time is less sensitive to other processes."""
    for q in queries[:warmup]:
        fn(q)
    out = []
    gc.collect()
    for q in queries:
        c, t = time.process_time(), time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t, time.process_time() - c))
    return out


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _default_embedder() -> Embeddings | None:
    try:
        from langchain_tdai_recall.embeddings import DefaultEmbeddings

        emb = DefaultEmbeddings()
        emb.embed_query("warm up")
    except Exception as exc:  # reported; the rest of the run goes on
        print(f"  default embedder unavailable: {exc}", file=sys.stderr)
        return None
    return emb


def _baseline(
    texts: list[str],
    vectors: np.ndarray,
    emb: PrecomputedEmbeddings,
    queries: Sequence[str],
) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's sunset
            from langchain_classic.retrievers import EnsembleRetriever
            from langchain_community.retrievers import BM25Retriever
            from langchain_community.vectorstores import FAISS
    except ImportError as exc:
        return {"skipped": f"{exc} (install the bench group: langchain-community, rank_bm25)"}
    t = time.perf_counter()
    store = FAISS.from_embeddings(list(zip(texts, vectors.tolist(), strict=True)), embedding=emb)
    t_faiss = time.perf_counter() - t
    t = time.perf_counter()
    bm25 = BM25Retriever.from_texts(texts, k=5)
    t_bm25 = time.perf_counter() - t
    ensemble = EnsembleRetriever(
        retrievers=[store.as_retriever(search_kwargs={"k": 5}), bm25], weights=[0.5, 0.5]
    )
    samples = _time_calls(ensemble.invoke, queries, warmup=2)
    return {
        "retriever": "EnsembleRetriever([FAISS.as_retriever(k=5), BM25Retriever(k=5)])",
        "build_faiss_s": round(t_faiss, 2),
        "build_bm25_s": round(t_bm25, 2),
        "search": _pct(samples),
    }


def _child_rss(store_dir: str, dim: int, query: str) -> dict[str, float]:
    """In a fresh process: RSS added by opening the store and by the first search.

    FAISS and the package are imported before the first reading, so the numbers are the data's.
    """
    code = f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096
import numpy, langchain_core, faiss
from latency import PrecomputedEmbeddings
from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import vectors as _vectors
r0 = r1 = rss()
m = TdaiMemory.open({store_dir!r}, embeddings=PrecomputedEmbeddings({dim}))
r2 = rss()
t = time.perf_counter()
m.search_memories({query!r}, user_id={USER!r})
t_first = time.perf_counter() - t
r3 = rss()
print(json.dumps({{"import": r1 - r0, "open": r2 - r1, "first_search": r3 - r2,
                   "first_search_s": t_first}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cold_open(store_dir: str, dim: int, repeats: int) -> dict[str, Any]:
    """Fresh interpreter: `import langchain_tdai_recall` + `TdaiMemory.open(existing dir)`."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
t0 = time.perf_counter()
import langchain_tdai_recall
t1 = time.perf_counter()
from latency import PrecomputedEmbeddings
emb = PrecomputedEmbeddings({dim})
t2 = time.perf_counter()
m = langchain_tdai_recall.TdaiMemory.open({store_dir!r}, embeddings=emb)
t3 = time.perf_counter()
m.search_memories("hello", user_id={USER!r})
t4 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "open_s": t3 - t2, "first_search_s": t4 - t3}}))
"""
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO
        )
        total = time.perf_counter() - t
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["process_s"] = total
        runs.append(row)
    keys = ("import_s", "open_s", "first_search_s", "process_s")
    med = {k: round(statistics.median(r[k] for r in runs), 3) for k in keys}
    med["import_plus_open_s"] = round(
        statistics.median(r["import_s"] + r["open_s"] for r in runs), 3
    )
    med["repeats"] = repeats
    return med


def run_size(
    n: int,
    queries: list[str],
    *,
    dim: int,
    default_emb: Embeddings | None,
    baseline: bool,
    workdir: Path,
    cold_repeats: int,
) -> dict[str, Any]:
    from langchain_tdai_recall import TdaiMemory

    print(f"== {n} memories", file=sys.stderr)
    records = make_memories(n, seed=0)
    for i, record in enumerate(records):
        # the generator repeats texts; an explicit id keeps every record (no exact-duplicate
        # merge), so the scope really holds n memories
        record["id"] = f"perf-{i:07d}"
    texts = [str(r["content"]) for r in records]
    emb = PrecomputedEmbeddings(dim)
    t = time.perf_counter()
    emb.precompute(list(dict.fromkeys(texts)))
    embed_s = time.perf_counter() - t
    vectors = emb.vectors_of(texts)
    emb.precompute(queries)
    result: dict[str, Any] = {"memories": n, "embed_documents_s": round(embed_s, 2)}

    store_dir = workdir / f"store_{n}"
    with TdaiMemory.open(store_dir, embeddings=emb) as memory:
        t = time.perf_counter()
        memory.add_memories(records, user_id=USER, show_progress=False)
        memory.flush()  # vectors are stored in the background; include them, as before
        insert_s = time.perf_counter() - t
        result["bulk_insert"] = {
            "seconds": round(insert_s, 2),
            "records_per_s": round(n / insert_s, 1),
            "note": (
                "directory store, one add_memories call plus flush() (rows and vectors "
                "stored); document vectors precomputed "
                "(embedding excluded; see embed_documents_s for the hashing embedder)"
            ),
        }
        print(f"  inserted in {insert_s:.1f} s", file=sys.stderr)
        t = time.perf_counter()
        memory.search_memories(queries[0], user_id=USER)
        result["first_search_s"] = round(time.perf_counter() - t, 3)

        def search(q: str) -> object:
            return memory.search_memories(q, limit=5, user_id=USER)

        def recall(q: str) -> object:
            return memory.recall(q, user_id=USER)

        result["search_excl_embedding"] = _pct(_time_calls(search, queries))
        result["recall_excl_embedding"] = _pct(_time_calls(recall, queries))
        last = memory.recall(queries[-1], user_id=USER)
        if last is not None:
            result["recall_strategy"] = last.strategy
            result["recall_memories"] = len(last.memories)
        if default_emb is not None:
            emb.cost_of = default_emb
            result["search_incl_default_embedding"] = _pct(_time_calls(search, queries))
            result["recall_incl_default_embedding"] = _pct(_time_calls(recall, queries))
            emb.cost_of = None
        print(
            f"  search p50 {result['search_excl_embedding']['p50_ms']} ms, "
            f"recall p50 {result['recall_excl_embedding']['p50_ms']} ms",
            file=sys.stderr,
        )

    if baseline:
        base_queries = queries if n <= 20_000 else queries[: max(10, len(queries) // 4)]
        result["baseline"] = _baseline(texts, vectors, emb, base_queries)
        base = result["baseline"].get("search")
        if base is not None:
            ours = result["search_excl_embedding"]["p50_ms"]
            result["speedup_search_p50"] = round(base["p50_ms"] / ours, 1)
            print(f"  baseline p50 {base['p50_ms']} ms", file=sys.stderr)

    rss = _child_rss(str(store_dir), dim, queries[0])
    total = rss["open"] + rss["first_search"]
    result["rss"] = {
        "bytes_after_open_and_first_search": int(total),
        "mib_per_100k_memories": round(total / n * 100_000 / 2**20, 1),
        "bytes_per_memory": round(total / n, 1),
        "first_search_s_fresh_process": round(rss["first_search_s"], 3),
    }
    if cold_repeats:
        result["cold_import_open"] = _cold_open(str(store_dir), dim, cold_repeats)
    return result


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Performance (`benchmarks/perf/latency.py`)",
        "",
        f"Machine: {report['machine']}. Load average at start / end: "
        f"{report['loadavg_start']} / {report['loadavg_end']}. Timed queries per size: "
        f"{report['queries']} (the ensemble baseline at 100k: a quarter of them).",
        "",
    ]
    header = (
        "| metric (memories in one scope) | "
        + " | ".join(f"{r['memories']:,}" for r in report["sizes"])
        + " |"
    )
    lines += [header, "|---|" + "---|" * len(report["sizes"])]

    def cell(r: dict[str, Any], *path: str) -> str:
        cur: Any = r
        for p in path:
            if not isinstance(cur, dict) or p not in cur:
                return "–"
            cur = cur[p]
        return str(cur)

    rows = [
        (
            "search p50 / p99 ms, wall (process CPU), excl. query embedding",
            ("search_excl_embedding",),
        ),
        (
            "recall p50 / p99 ms, wall (process CPU), excl. query embedding",
            ("recall_excl_embedding",),
        ),
        ("search p50 / p99 ms (incl. default embedder)", ("search_incl_default_embedding",)),
        ("recall p50 / p99 ms (incl. default embedder)", ("recall_incl_default_embedding",)),
        ("EnsembleRetriever(FAISS, BM25) p50 / p99 ms", ("baseline", "search")),
    ]
    for label, path in rows:
        vals = []
        for r in report["sizes"]:
            node: Any = r
            for p in path:
                node = node.get(p, {}) if isinstance(node, dict) else {}
            vals.append(
                f"{node['p50_ms']} / {node['p99_ms']} (CPU {node['cpu_p50_ms']} / "
                f"{node['cpu_p99_ms']})"
                if "p50_ms" in node
                else "–"
            )
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    simple = [
        ("speed-up vs ensemble (search p50)", ("speedup_search_p50",)),
        ("bulk insert (embedding excluded), records/s", ("bulk_insert", "records_per_s")),
        ("first search after insert (index build), s", ("first_search_s",)),
        ("RSS after open + first search, MiB per 100k memories", ("rss", "mib_per_100k_memories")),
        ("marginal RSS vs previous size, MiB per 100k", ("rss", "marginal_mib_per_100k_memories")),
        ("cold import + open, s (median)", ("cold_import_open", "import_plus_open_s")),
        ("first search in a fresh process, s", ("cold_import_open", "first_search_s")),
    ]
    for label, path in simple:
        lines.append(f"| {label} | " + " | ".join(cell(r, *path) for r in report["sizes"]) + " |")
    if report.get("default_embedder_query"):
        q = report["default_embedder_query"]
        lines += [
            "",
            f"Default embedder `embed_query` alone: p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms.",
        ]
    lines += [
        "",
        "Targets (SPEC §12 / issue 2): search p50 ≤ 5 ms at 100k excluding embedding; ≥ 20× "
        "(issue: 50×) faster than the ensemble at 100k; cold import + open of a 10k store < 1 s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated memory counts")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per size")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/perf.json"))
    parser.add_argument("--md", default=None, help="Markdown summary (default: --out with .md)")
    parser.add_argument("--tiny", action="store_true", help="smoke test: 300 memories, 10 queries")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--no-default-embedder", action="store_true")
    parser.add_argument("--cold-repeats", type=int, default=5)
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",") if s]
    n_queries = args.queries
    if args.tiny:
        sizes, n_queries, args.cold_repeats = [300], 10, 1
    queries = make_queries(n_queries, seed=1)
    report: dict[str, Any] = {
        "machine": (
            f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
        ),
        "loadavg_start": _loadavg(),
        "queries": n_queries,
        "dim": args.dim,
    }
    default_emb = None if (args.no_default_embedder or args.tiny) else _default_embedder()
    if default_emb is not None:
        report["default_embedder_query"] = _pct(_time_calls(default_emb.embed_query, queries))
    with tempfile.TemporaryDirectory(prefix="tdai-perf-") as tmp:
        report["sizes"] = [
            run_size(
                n,
                queries,
                dim=args.dim,
                default_emb=default_emb,
                baseline=not args.no_baseline,
                workdir=Path(tmp),
                cold_repeats=args.cold_repeats if n <= 20_000 else 0,
            )
            for n in sizes
        ]
    sized = report["sizes"]
    for small, large in itertools.pairwise(sized):
        extra = large["rss"]["bytes_after_open_and_first_search"]
        extra -= small["rss"]["bytes_after_open_and_first_search"]
        per = extra / (large["memories"] - small["memories"])
        large["rss"]["marginal_bytes_per_memory"] = round(per, 1)
        large["rss"]["marginal_mib_per_100k_memories"] = round(per * 100_000 / 2**20, 1)
    report["loadavg_end"] = _loadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md = Path(args.md) if args.md else out.with_suffix(".md")
    md.write_text(to_markdown(report), encoding="utf-8")
    print(f"wrote {out} and {md}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
