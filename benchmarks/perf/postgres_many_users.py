"""Many users served by several worker processes sharing one PostgreSQL (issue 23 item 2).

One database holds `--users` users with `--per` memories each (synthetic zh/en memories with
precomputed 384-d vectors, loaded with `import_rows`). Then, for each process count in
`--procs`, that many worker processes serve turns for `--seconds`, as application workers
behind a load balancer that routes every request to any worker:

- turns come back to back in each worker, or paced at `--rate` turns per second over all
  workers (Poisson arrivals; a latency is timed from the call, not from its arrival);
- each turn picks a user from a Zipf law over the population (a few users return often, most
  rarely), recalls for that user's message, and with probability `--write-ratio` stores a new
  memory for that user (`add_memory`, written without a vector: the upkeep embeds it);
- a recall is **cold** when this process had not served that user yet (its in-process index is
  built from the rows), **resident** otherwise;
- **freshness**: every turn a worker searches for the newest memory another worker has
  acknowledged and counts it fresh when that search returns it (target 100 %).

Per recall the script also keeps the process CPU time, the time the garbage collector ran during
it and the SQL statements it sent (psycopg's `Cursor.execute` / `executemany` counted in the
worker), to tell what drives the slow tail: a recall whose wall time is far above its CPU time
waited (for a core, shared with the other workers, PostgreSQL and the other threads, or for the
server); one with a long collection paused for the GC. Bytes per user are PostgreSQL's table and
index sizes over the users. The machine's load average is recorded beside each phase.

Run from the repository root (needs the `postgres` extra; without `--url` a throw-away server is
started from the `pgserver` wheel, as the tests do):

    python benchmarks/perf/postgres_many_users.py                    # 10k users, 1/2/4 procs
    python benchmarks/perf/postgres_many_users.py --tiny --out /tmp/mu.json   # smoke test
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import make_queries
from latency import PrecomputedEmbeddings, _loadavg
from postgres import CONFIG, DIM, _new_database, _rows

REPO = Path(__file__).resolve().parents[2]
SLOW_MS = 50.0
"""A recall slower than this (the issue's p99 target) is examined for its cause."""


# -- workers ---------------------------------------------------------------------------------------


class _Statements:
    """Counts the SQL statements this process sends (psycopg cursors, every thread), and the
    wall time spent inside them (summed over threads)."""

    count = 0
    seconds = 0.0

    @classmethod
    def install(cls) -> None:
        import psycopg

        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            cls.count += 1
            t = time.perf_counter()
            try:
                return execute(self, *args, **kwargs)
            finally:
                cls.seconds += time.perf_counter() - t

        def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            cls.count += len(params_seq)
            t = time.perf_counter()
            try:
                return executemany(self, query, params_seq, **kwargs)
            finally:
                cls.seconds += time.perf_counter() - t

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]


class _GcClock:
    """Seconds spent in the garbage collector since the process started."""

    total = 0.0
    _start = 0.0

    @classmethod
    def install(cls) -> None:
        def callback(phase: str, info: dict[str, Any]) -> None:
            del info
            if phase == "start":
                cls._start = time.perf_counter()
            else:
                cls.total += time.perf_counter() - cls._start

        gc.callbacks.append(callback)


def _runqueue_seconds() -> float:
    """Time this process's threads have waited for a core (Linux schedstat), in seconds."""
    total = 0
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
    except OSError:
        return 0.0
    return total / 1e9


def _zipf_order(users: int, s: float) -> tuple[list[int], np.ndarray]:
    """A fixed popularity order of the users (the same for every worker) and its CDF."""
    order = list(range(users))
    random.Random(0).shuffle(order)
    weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** s
    return order, np.cumsum(weights / weights.sum())


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker(url: str, cfg: dict[str, Any], me: int, sync: tuple[Any, ...]) -> None:  # noqa: PLR0915
    counter, slots, slot_users, ready, go, out = sync
    from langchain_tdai_recall.memory import TdaiMemory

    _Statements.install()
    _GcClock.install()
    seed = 1000 + me
    emb = PrecomputedEmbeddings(DIM)
    queries = make_queries(300, seed=seed)
    emb.precompute(queries)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    order, cdf = _zipf_order(cfg["users"], cfg["zipf"])
    procs = cfg["procs"]
    # wall, cpu, gc, cold, statements, at, in SQL, waiting for a core (seconds but cold/count)
    samples: list[tuple[float, float, float, int, int, float, float, float]] = []
    writes: list[tuple[float, int]] = []
    fresh = checked = 0
    misses: list[int] = []
    last_seen = [0] * procs
    seen: set[int] = set()
    with TdaiMemory.open(url, embeddings=emb, config=CONFIG) as memory:
        memory.recall("warm up", user_id="nobody-warmup")  # imports and pools, not a user
        with ready.get_lock():
            ready.value += 1
        while not go.value:
            time.sleep(0.01)
        started = time.monotonic()
        stop = started + cfg["seconds"]
        draws = iter(())
        gap = cfg["procs"] / cfg["rate"] if cfg["rate"] else 0.0
        due = time.monotonic()
        while time.monotonic() < stop:
            if gap:  # paced: this worker's share of `--rate` turns per second, Poisson arrivals
                due += rng.expovariate(1.0 / gap)
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            rank = next(draws, None)
            if rank is None:
                draws = iter(np.searchsorted(cdf, nrng.random(1024)).tolist())
                rank = next(draws)
            u = order[min(rank, cfg["users"] - 1)]
            s0, g0, d0, q0 = (
                _Statements.count,
                _GcClock.total,
                _Statements.seconds,
                _runqueue_seconds(),
            )
            c, t = time.process_time(), time.perf_counter()
            memory.recall(rng.choice(queries), user_id=f"user{u}")
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            waited = _runqueue_seconds() - q0
            cold = u not in seen
            seen.add(u)
            samples.append(
                (
                    wall,
                    cpu,
                    _GcClock.total - g0,
                    int(cold),
                    _Statements.count - s0,
                    t - started,
                    _Statements.seconds - d0,
                    waited,
                )
            )
            if rng.random() < cfg["write_ratio"]:
                with counter.get_lock():
                    counter.value += 1
                    k = counter.value
                s0 = _Statements.count
                t = time.perf_counter()
                memory.add_memory(
                    f"The user noted freshmark{k} while talking about the garden.",
                    id=f"w{k}",
                    user_id=f"user{u}",
                )
                writes.append((time.perf_counter() - t, _Statements.count - s0))
                slot_users[me] = u
                slots[me] = k
            if procs > 1:  # the newest write another worker acknowledged
                j = rng.choice([p for p in range(procs) if p != me])
                k, v = slots[j], slot_users[j]
                if k and k != last_seen[j]:
                    last_seen[j] = k
                    hits = memory.search_memories(f"freshmark{k}", limit=1, user_id=f"user{v}")
                    seen.add(v)
                    checked += 1
                    if hits and hits[0].id == f"w{k}":
                        fresh += 1
                    else:
                        misses.append(k)
        elapsed = time.monotonic() - started
        rss = _rss_mib()
    out.put(
        {
            "samples": samples,
            "writes": writes,
            "seconds": elapsed,
            "fresh": fresh,
            "checked": checked,
            "misses": misses[:20],
            "users_served": len(seen),
            "rss_mib": round(rss, 1),
        }
    )


# -- phases ----------------------------------------------------------------------------------------


def load(url: str, users: int, per: int) -> dict[str, Any]:
    """`users` scopes of `per` memories (50 distinct blocks of rows, reused)."""
    import psycopg

    from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
    from langchain_tdai_recall.types import Scope

    emb = PrecomputedEmbeddings(DIM)
    template = _rows(per * 50, emb, seed=5, prefix="m")
    store = PostgresMemoryStore(url)
    store.bind(tokenizer=store.tokenizer, embedder_id=emb.identity)
    t = time.perf_counter()
    for u in range(users):
        block = (u % 50) * per
        store.import_rows(Scope(f"user{u}"), "l1", template[block : block + per])
        if u and u % 2000 == 0:
            print(f"  loaded {u} users", file=sys.stderr)
    seconds = time.perf_counter() - t
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples::bigint "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND c.relname LIKE 'tdai_%' AND n.nspname = current_schema()"
        ).fetchall()
    total = sum(int(b) for _, b, _ in sizes)
    return {
        "users": users,
        "memories_per_user": per,
        "load_s": round(seconds, 1),
        "rows_per_s": round(users * per / seconds),
        "bytes_total": total,
        "bytes_per_user": round(total / users),
        "bytes_per_memory": round(total / (users * per)),
        "tables": {str(n): {"bytes": int(b), "rows": int(r)} for n, b, r in sizes if int(b)},
    }


def _pct(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    arr = np.asarray(values) * 1e3
    return {
        "p50_ms": round(float(np.percentile(arr, 50)), 2),
        "p99_ms": round(float(np.percentile(arr, 99)), 2),
        "mean_ms": round(float(arr.mean()), 2),
        "n": len(values),
    }


def _median_ms(values: list[float]) -> float | None:
    return round(float(np.median(values)) * 1e3, 1) if values else None


def _xacts(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def _scans(url: str) -> dict[str, tuple[int, int]]:
    """(sequential scans, index scans) of the memory and message tables so far."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT relname, seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE relname IN ('tdai_memories', 'tdai_messages')"
        ).fetchall()
    return {str(n): (int(s), int(i)) for n, s, i in rows}


def serve(url: str, cfg: dict[str, Any]) -> dict[str, Any]:
    procs = cfg["procs"]
    print(f"== {procs} worker processes, {cfg['seconds']:.0f} s", file=sys.stderr)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    slots = ctx.Array("q", procs)
    slot_users = ctx.Array("q", procs)
    ready, go, out = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Queue()
    sync = (counter, slots, slot_users, ready, go, out)
    workers = [ctx.Process(target=_worker, args=(url, cfg, i, sync)) for i in range(procs)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 300
    while ready.value < procs:
        if time.monotonic() > deadline or not all(w.is_alive() for w in workers):
            msg = "the worker processes did not get ready"
            raise RuntimeError(msg)
        time.sleep(0.05)
    load_before, x0, scans0 = _loadavg(), _xacts(url), _scans(url)
    go.value = 1
    results = [out.get(timeout=cfg["seconds"] + 600) for _ in range(procs)]
    for w in workers:
        w.join(60)
    load_after, x1 = _loadavg(), _xacts(url)
    time.sleep(1.0)  # the closed backends' statistics reach the cumulative views
    scans1 = _scans(url)
    samples = [s for r in results for s in r["samples"]]
    writes = [w for r in results for w in r["writes"]]
    seconds = max(r["seconds"] for r in results)
    wall = [s[0] for s in samples]
    resident = [s[0] for s in samples if not s[3]]
    cold = [s[0] for s in samples if s[3]]
    slow = [s for s in samples if s[0] * 1e3 > SLOW_MS]
    checked = sum(r["checked"] for r in results)
    fresh = sum(r["fresh"] for r in results)
    turns = len(samples)
    summary: dict[str, Any] = {
        "procs": procs,
        "seconds": round(seconds, 1),
        "zipf_s": cfg["zipf"],
        "write_ratio": cfg["write_ratio"],
        "rate_per_s": cfg["rate"] or None,
        "recall": _pct(wall),
        "recall_resident": _pct(resident),
        "recall_cold": _pct(cold),
        "cold_share_pct": round(100.0 * len(cold) / max(turns, 1), 1),
        "recalls_per_s": round(turns / seconds, 1),
        "writes": len(writes),
        "writes_per_s": round(len(writes) / seconds, 1),
        "write": _pct([w[0] for w in writes]),
        "freshness_checks": checked,
        "freshness_pct": round(100.0 * fresh / checked, 3) if checked else None,
        "stale_examples": [m for r in results for m in r["misses"]][:20],
        "statements_per_recall": round(float(np.mean([s[4] for s in samples])), 2),
        "statements_per_write": round(float(np.mean([w[1] for w in writes])), 2)
        if writes
        else None,
        "server_transactions_per_turn": round((x1 - x0) / max(turns, 1), 2),
        "sequential_scans": {t: scans1[t][0] - scans0.get(t, (0, 0))[0] for t in sorted(scans1)},
        "users_served_per_proc": [r["users_served"] for r in results],
        "rss_mib_per_proc": [r["rss_mib"] for r in results],
        "slow_recalls": {
            "threshold_ms": SLOW_MS,
            "count": len(slow),
            "share_pct": round(100.0 * len(slow) / max(turns, 1), 2),
            "cold_pct": round(100.0 * sum(s[3] for s in slow) / len(slow), 1) if slow else None,
            "with_gc_over_10ms_pct": round(100.0 * sum(s[2] > 0.01 for s in slow) / len(slow), 1)
            if slow
            else None,
            "cpu_over_half_of_wall_pct": round(
                100.0 * sum(s[1] > 0.5 * s[0] for s in slow) / len(slow), 1
            )
            if slow
            else None,
            "median_cpu_ms": round(float(np.median([s[1] for s in slow])) * 1e3, 1)
            if slow
            else None,
            "median_wall_ms": round(float(np.median([s[0] for s in slow])) * 1e3, 1)
            if slow
            else None,
            "in_first_5_s_pct": round(100.0 * sum(s[5] < 5.0 for s in slow) / len(slow), 1)
            if slow
            else None,
            "median_sql_ms": _median_ms([s[6] for s in slow]),
            "median_runqueue_ms": _median_ms([s[7] for s in slow]),
        },
        "all_recalls_median_sql_ms": _median_ms([s[6] for s in samples]),
        "all_recalls_median_runqueue_ms": _median_ms([s[7] for s in samples]),
        "gc_ms_per_recall_mean": round(float(np.mean([s[2] for s in samples])) * 1e3, 3),
        "load_before": load_before,
        "load_after": load_after,
    }
    r = summary["recall"]
    print(
        f"  recall p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms (resident "
        f"{(summary['recall_resident'] or {}).get('p99_ms')} p99, cold "
        f"{(summary['recall_cold'] or {}).get('p50_ms')} p50), {summary['writes_per_s']} "
        f"writes/s, fresh {summary['freshness_pct']} %, slow {summary['slow_recalls']}",
        file=sys.stderr,
    )
    return summary


# -- report ----------------------------------------------------------------------------------------


def to_markdown(report: dict[str, Any], raw: str) -> str:
    data = report["load"]
    lines = [
        "# Many users on one PostgreSQL, several worker processes (issue 23)",
        "",
        f"{report['machine']}; {report['server']}. {data['users']} users x "
        f"{data['memories_per_user']} memories; Zipf s = {report['phases'][0]['zipf_s']} over "
        f"the users, random routing to the workers, {report['phases'][0]['write_ratio']:.0%} of "
        f"turns also write; "
        + (
            f"{report['phases'][0]['rate_per_s']} turns/s over all workers (Poisson arrivals)."
            if report["phases"][0].get("rate_per_s")
            else "each worker serves turns back to back (a closed loop: the machine is saturated)."
        )
        + f" Raw figures: `{raw}`.",
        "",
        f"Storage: {data['bytes_per_user']} bytes per user ({data['bytes_per_memory']} per "
        f"memory with its 384-d vector and indexes); load {data['rows_per_s']} rows/s.",
        "",
        "| procs | recall p50 / p99 ms | resident p50 / p99 | cold p50 / p99 (share) | "
        "writes/s | fresh | statements per recall / write | load before -> after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in report["phases"]:
        res, cold = p["recall_resident"] or {}, p["recall_cold"] or {}
        lines.append(
            f"| {p['procs']} | {p['recall']['p50_ms']} / {p['recall']['p99_ms']} | "
            f"{res.get('p50_ms')} / {res.get('p99_ms')} | {cold.get('p50_ms')} / "
            f"{cold.get('p99_ms')} ({p['cold_share_pct']} %) | {p['writes_per_s']} | "
            f"{p['freshness_pct']} % | {p['statements_per_recall']} / "
            f"{p['statements_per_write']} | {p['load_before'][0]} -> {p['load_after'][0]} |"
        )
    lines += ["", "Slow recalls (over 50 ms):", ""]
    for p in report["phases"]:
        s = p["slow_recalls"]
        lines.append(
            f"- {p['procs']} procs: {s['count']} ({s['share_pct']} %), cold {s['cold_pct']} %, "
            f"GC over 10 ms in {s['with_gc_over_10ms_pct']} %, CPU over half the wall time in "
            f"{s['cpu_over_half_of_wall_pct']} %; median {s['median_wall_ms']} ms wall = "
            f"{s['median_cpu_ms']} ms CPU (all threads), {s['median_sql_ms']} ms in SQL calls, "
            f"{s['median_runqueue_ms']} ms of threads waiting for a core"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a PostgreSQL server (superuser URL); default: throw-away")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--per", type=int, default=20)
    parser.add_argument("--procs", default="1,2,4", help="process counts, one phase each")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--write-ratio", type=float, default=0.2)
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="turns per second over all workers (Poisson arrivals); 0: each worker serves "
        "turns back to back (a closed loop, which saturates the machine)",
    )
    parser.add_argument("--tiny", action="store_true", help="smoke test sizes")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/postgres_many_users.json"))
    args = parser.parse_args()
    if args.tiny:
        args.users, args.per, args.procs, args.seconds = 60, 5, "2", 4.0
    from langchain_tdai_recall.testing.postgres import TemporaryPostgres

    with ExitStack() as stack:
        server = args.url or stack.enter_context(TemporaryPostgres()).url()
        import psycopg

        with psycopg.connect(server) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        url = _new_database(server, "bench_many_users")
        report: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}",
            "server": f"PostgreSQL {row[0] if row else '?'} (pgserver wheel, unix socket, "
            "fsync off)"
            if not args.url
            else "external",
        }
        print(f"== loading {args.users} users x {args.per} memories", file=sys.stderr)
        report["load"] = load(url, args.users, args.per)
        report["phases"] = [
            serve(
                url,
                {
                    "users": args.users,
                    "procs": int(n),
                    "seconds": args.seconds,
                    "zipf": args.zipf,
                    "write_ratio": args.write_ratio,
                    "rate": args.rate,
                },
            )
            for n in args.procs.split(",")
            if n
        ]
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(to_markdown(report, out.name), encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
