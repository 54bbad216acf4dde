"""Many users in one process: resident memory, cold and resident recall, cache hit rate (issue 23).

An application server's load is many users with a few dozen memories each, served over days.
This script fills a directory store with `--users` users of `--memories` memories each (in a
child process, `_corpus.HashingEmbeddings`, so embedding costs nothing), then in a fresh process
with the configured index cache (`store.index_cache_mib`, default 512 MiB):

1. recalls once for each user in turn, sampling resident memory (RSS) as it goes: the growth per
   1,000 users over the second half is what the budget must hold near zero; these recalls are
   all of a *cold* scope (its index is built from the rows);
2. recalls again for the last 1,000 users served (*resident*: their indexes are in the cache)
   and for the first 1,000 (*cold again*: evicted long ago, rebuilt);
3. serves a Zipf mix of returning users (`--zipf` requests, exponent `--zipf-s`) and reports the
   share of recalls that found their scope resident;
4. adds one memory to each of `--writes` random users and searches it right after (writes per
   second, freshness).

Run from the repository root:

    python benchmarks/perf/many_users.py --users 10000 --out /tmp/mu.json
    python benchmarks/perf/many_users.py --users 100000 \\
        --out benchmarks/results/many_users.json --md benchmarks/results/many_users.md

`--store DIR` keeps the filled store for another run (filled once; reused when it holds the same
number of users); `--budget-mib none` serves with an unbounded cache (the behaviour before
issue 23, for comparison).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import HashingEmbeddings, make_memories, make_queries

REPO = Path(__file__).resolve().parents[2]
_MARKER = "many_users.json"


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 3) if values else float("nan")


def _user(u: int) -> str:
    return f"user-{u:06d}"


def populate(store: Path, users: int, memories: int) -> dict[str, float]:
    """Fill `store` with `users` users of `memories` memories each; returns the insert rate."""
    from langchain_tdai_recall import TdaiMemory

    started = time.perf_counter()
    with TdaiMemory.open(store, embeddings=HashingEmbeddings()) as memory:
        for u in range(users):
            memory.add_memories(make_memories(memories, seed=u), user_id=_user(u))
            if u % 5000 == 4999:
                print(f"  filled {u + 1} users, {time.perf_counter() - started:.0f} s", flush=True)
        memory.flush(timeout=3600)
    elapsed = time.perf_counter() - started
    (store / _MARKER).write_text(json.dumps({"users": users, "memories": memories}))
    return {"fill_s": round(elapsed, 1), "records_per_s": round(users * memories / elapsed, 1)}


def _recall(memory: Any, user: str, query: str) -> tuple[float, bool]:
    """One recall: (milliseconds, whether the scope's index had to be built)."""
    store = memory._store
    before = store.index_cache_stats().misses
    started = time.perf_counter()
    memory.recall(query, user_id=user)
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, store.index_cache_stats().misses > before


def serve(  # noqa: PLR0915 - one measurement, step by step
    store: Path, users: int, budget: float | None, args: argparse.Namespace
) -> dict[str, Any]:
    """The measurements of the module docstring, in this process."""
    from langchain_tdai_recall import TdaiMemory

    queries = make_queries(256)
    config: dict[str, Any] = {}
    if budget != -1:
        config = {"store": {"index_cache_mib": budget}}
    rng = random.Random(5)
    out: dict[str, Any] = {}
    with TdaiMemory.open(store, embeddings=HashingEmbeddings(), config=config) as memory:
        memory.recall("warm up", user_id=_user(0))  # imports, FAISS, the tokenizer's caches
        gc.collect()
        out["rss_open_mib"] = round(_rss_mib(), 1)
        samples: list[dict[str, float]] = []
        cold: list[float] = []
        served = min(args.serve_users or users, users)
        step = max(served // 100, 1)
        started = time.perf_counter()
        for u in range(served):
            ms, built = _recall(memory, _user(u), queries[u % len(queries)])
            if u >= served // 2:
                cold.append(ms)
            if u % step == step - 1:
                stats = memory.stats(user_id=_user(u)).index_cache
                assert stats is not None
                samples.append(
                    {
                        "users": u + 1,
                        "rss_mib": round(_rss_mib(), 1),
                        "s": round(time.perf_counter() - started, 1),
                        "cache_mib": round(stats.bytes / 2**20, 1),
                        "entries": stats.entries,
                        "evictions": stats.evictions,
                    }
                )
                if u % (step * 10) == step * 10 - 1:
                    print(f"  served {u + 1} users: {samples[-1]}", flush=True)
        half = next(s for s in samples if s["users"] >= served // 2)
        last = samples[-1]
        out["served_in_turn"] = served
        out["rss_samples"] = samples
        print(json.dumps({k: v for k, v in out.items() if k != "rss_samples"}), flush=True)
        out["rss_at_half_mib"] = half["rss_mib"]
        out["rss_at_end_mib"] = last["rss_mib"]
        out["growth_mib_per_1000_users_second_half"] = round(
            (last["rss_mib"] - half["rss_mib"]) / ((last["users"] - half["users"]) / 1000), 2
        )
        out["growth_mib_per_1000_users_first_1000"] = round(
            samples[min(len(samples) - 1, max(1000 // step - 1, 0))]["rss_mib"]
            - out["rss_open_mib"],
            2,
        )
        out["first_touch_recall_ms_second_half"] = {"p50": _pct(cold, 50), "p99": _pct(cold, 99)}
        held = memory.stats(user_id=_user(0)).index_cache
        assert held is not None
        tail = max(min(1000, held.entries // 2, served // 4), 1)  # still resident
        resident, resident_built = [], 0
        for u in range(served - tail, served):
            ms, built = _recall(memory, _user(u), queries[(u * 7) % len(queries)])
            resident.append(ms)
            resident_built += built
        again, again_built = [], 0
        for u in range(tail):
            ms, built = _recall(memory, _user(u), queries[(u * 7) % len(queries)])
            again.append(ms)
            again_built += built
        out["resident_recall_ms"] = {
            "p50": _pct(resident, 50),
            "p99": _pct(resident, 99),
            "n": len(resident),
            "built": resident_built,
        }
        out["cold_recall_ms"] = {
            "p50": _pct(again, 50),
            "p99": _pct(again, 99),
            "n": len(again),
            "built": again_built,
        }
        ranks = list(range(users))
        rng.shuffle(ranks)
        weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** args.zipf_s
        picks = np.random.default_rng(11).choice(users, size=args.zipf, p=weights / weights.sum())
        zipf_hit, zipf_cold, zipf_warm = 0, [], []
        for k, rank in enumerate(picks.tolist()):
            ms, built = _recall(memory, _user(ranks[rank]), queries[k % len(queries)])
            (zipf_cold if built else zipf_warm).append(ms)
            zipf_hit += not built
        print(json.dumps({"resident": out["resident_recall_ms"], "cold": out["cold_recall_ms"]}))
        out["zipf"] = {
            "requests": args.zipf,
            "s": args.zipf_s,
            "hit_rate": round(zipf_hit / max(args.zipf, 1), 4),
            "resident_p50_ms": _pct(zipf_warm, 50),
            "cold_p50_ms": _pct(zipf_cold, 50),
            "all_p50_ms": _pct(zipf_warm + zipf_cold, 50),
            "all_p99_ms": _pct(zipf_warm + zipf_cold, 99),
        }
        print(json.dumps(out["zipf"]), flush=True)
        fresh, add_s, search_s = 0, 0.0, 0.0
        for w in range(args.writes):
            user = _user(rng.randrange(users))
            started = time.perf_counter()
            memory.add_memory(f"The user bought a kayak named qv{w}z.", user_id=user)
            add_s += time.perf_counter() - started
            started = time.perf_counter()
            found = memory.search_memories(f"qv{w}z", user_id=user, limit=3)
            search_s += time.perf_counter() - started
            fresh += any(f"qv{w}z" in hit.content for hit in found)
        out["writes"] = {
            "n": args.writes,
            "writes_per_s": round(args.writes / add_s, 1),
            "search_after_write_ms": round(search_s / max(args.writes, 1) * 1000, 2),
            "freshness": round(fresh / max(args.writes, 1), 4),
        }
        final = memory.stats(user_id=_user(0)).index_cache
        assert final is not None
        out["index_cache"] = {
            "budget_mib": None if final.budget is None else round(final.budget / 2**20, 1),
            "entries": final.entries,
            "mib": round(final.bytes / 2**20, 1),
            "hits": final.hits,
            "misses": final.misses,
            "evictions": final.evictions,
        }
        out["rss_final_mib"] = round(_rss_mib(), 1)
    return out


def _markdown(result: dict[str, Any]) -> str:
    r = result
    s = r["serve"]
    budget = s["index_cache"]["budget_mib"]
    lines = [
        "# Many users in one process (`benchmarks/perf/many_users.py`, issue 23)",
        "",
        f"Machine: {r['machine']}. {r['users']:,} users x {r['memories']} memories, "
        f"`HashingEmbeddings` (384-d), directory store, one process, index cache budget "
        f"{budget if budget is not None else 'unbounded'} MiB. Load average at start / end: "
        f"{r['load_start']} / {r['load_end']}.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| RSS after open, at half, at end of serving every user once (MiB) | "
        f"{s['rss_open_mib']} / {s['rss_at_half_mib']} / {s['rss_at_end_mib']} |",
        f"| RSS growth per 1,000 users over the second half (MiB) | "
        f"{s['growth_mib_per_1000_users_second_half']} |",
        f"| RSS growth over the first 1,000 users (MiB) | "
        f"{s['growth_mib_per_1000_users_first_1000']} |",
        f"| recall p50 / p99 ms, resident scope | {s['resident_recall_ms']['p50']} / "
        f"{s['resident_recall_ms']['p99']} |",
        f"| recall p50 / p99 ms, cold scope (evicted, rebuilt from the rows) | "
        f"{s['cold_recall_ms']['p50']} / {s['cold_recall_ms']['p99']} |",
        f"| recall p50 / p99 ms, first touch (second half) | "
        f"{s['first_touch_recall_ms_second_half']['p50']} / "
        f"{s['first_touch_recall_ms_second_half']['p99']} |",
        f"| Zipf mix (s={s['zipf']['s']}, {s['zipf']['requests']:,} requests): hit rate, "
        f"p50 / p99 ms | {s['zipf']['hit_rate']:.1%}, {s['zipf']['all_p50_ms']} / "
        f"{s['zipf']['all_p99_ms']} |",
        f"| writes per s (`add_memory`, one thread); search right after it, mean ms; "
        f"freshness | {s['writes']['writes_per_s']}; {s['writes']['search_after_write_ms']}; "
        f"{s['writes']['freshness']:.0%} |",
        f"| index cache at the end: entries, MiB, evictions | {s['index_cache']['entries']:,}, "
        f"{s['index_cache']['mib']}, {s['index_cache']['evictions']:,} |",
        "",
        "Targets (issue 23): growth over the second 50k users <= 5 MiB per 1,000; cold recall "
        "p50 <= 10 ms.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--memories", type=int, default=20)
    parser.add_argument("--budget-mib", default="default", help="MiB, 'none' or 'default'")
    parser.add_argument("--zipf", type=int, default=20_000)
    parser.add_argument("--zipf-s", type=float, default=1.1)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument(
        "--serve-users", type=int, default=0, help="recall in turn for the first N users only"
    )
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    parser.add_argument("--populate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.populate:
        print(json.dumps(populate(args.store, args.users, args.memories)))
        return
    budget: float | None = (
        -1
        if args.budget_mib == "default"
        else None
        if args.budget_mib == "none"
        else float(args.budget_mib)
    )
    temp = None
    store = args.store
    if store is None:
        temp = tempfile.mkdtemp(prefix="many-users-")
        store = Path(temp) / "store"
    result: dict[str, Any] = {
        "users": args.users,
        "memories": args.memories,
        "machine": (
            f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
        ),
        "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        marker = store / _MARKER
        filled = json.loads(marker.read_text()) if marker.exists() else None
        if filled != {"users": args.users, "memories": args.memories}:
            if store.exists():
                shutil.rmtree(store)
            print(f"filling {args.users} users ...", flush=True)
            child = subprocess.run(  # a separate process: serving starts from a fresh heap
                [sys.executable, __file__, "--populate", "--store", str(store),
                 "--users", str(args.users), "--memories", str(args.memories)],
                check=True, capture_output=True, text=True, cwd=REPO,
            )  # fmt: skip
            result["fill"] = json.loads(child.stdout.strip().splitlines()[-1])
        print("serving ...", flush=True)
        result["serve"] = serve(store, args.users, budget, args)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    result["load_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=1)
    summary = {k: v for k, v in result["serve"].items() if k != "rss_samples"}
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.md is not None:
        args.md.write_text(_markdown(result), encoding="utf-8")


if __name__ == "__main__":
    main()
