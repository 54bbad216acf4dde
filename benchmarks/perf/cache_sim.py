"""Simulated hit rate of the per-process index cache against its budget (issue 23 item 4).

A population of `--users` users sends requests whose user follows a Zipf law (exponents
`--zipf`, e.g. 0.8, 1.0, 1.2: the larger, the more the traffic concentrates on returning users).
`--workers` worker processes each keep a least-recently-used cache of per-user indexes, of a
budget in MiB turned into a number of users by `--scope-kib` (the in-process footprint of one
user's indexes; 77.5 MiB per 1,000 users of 20 memories measured on main before issue 23, so
about 79 KiB). Requests reach the workers either at random (any load balancer) or sticky (the
user's id hashed to one worker: an ingress or a gateway routing by user). A hit is a request
whose user's index the worker already holds; a miss builds it from the rows (a cold recall).

The first `--warm` requests fill the caches and are not counted. A static population with no
churn: real traffic with users joining and leaving gives somewhat lower hit rates.

    python benchmarks/perf/cache_sim.py                 # ~2 minutes
    python benchmarks/perf/cache_sim.py --tiny --out /tmp/sim.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def requests(users: int, s: float, n: int, seed: int) -> np.ndarray:
    """`n` user ids drawn from a Zipf law of exponent `s` over `users` users (ranks shuffled)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** s
    ranks = np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(n))
    order = rng.permutation(users)
    return order[np.minimum(ranks, users - 1)]


def simulate(
    stream: np.ndarray, workers: int, capacity: int, *, sticky: bool, warm: int, seed: int
) -> float:
    """Hit rate of `workers` LRU caches of `capacity` users each, after `warm` requests."""
    caches: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(workers)]
    route = (
        (stream * 2654435761 % 2**32) % workers
        if sticky
        else np.random.default_rng(seed).integers(0, workers, len(stream))
    )
    hits = 0
    for i, (user, w) in enumerate(zip(stream.tolist(), route.tolist(), strict=True)):
        cache = caches[w]
        if user in cache:
            cache.move_to_end(user)
            if i >= warm:
                hits += 1
            continue
        cache[user] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return hits / max(len(stream) - warm, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=600_000)
    parser.add_argument("--warm", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--zipf", default="0.8,1.0,1.2")
    parser.add_argument("--budgets-mib", default="32,64,128,256,512,1024,2048")
    parser.add_argument("--scope-kib", type=float, default=79.4)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/cache_sim.json"))
    args = parser.parse_args()
    if args.tiny:
        args.users, args.requests, args.warm, args.budgets_mib = 2000, 20_000, 5000, "4,16"
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for s in (float(x) for x in args.zipf.split(",")):
        stream = requests(args.users, s, args.requests, seed=1)
        for budget in (int(x) for x in args.budgets_mib.split(",")):
            capacity = max(int(budget * 1024 / args.scope_kib), 1)
            row: dict[str, Any] = {"zipf_s": s, "budget_mib": budget, "users_per_worker": capacity}
            for sticky in (False, True):
                rate = simulate(
                    stream, args.workers, capacity, sticky=sticky, warm=args.warm, seed=2
                )
                row["sticky_hit_pct" if sticky else "random_hit_pct"] = round(100 * rate, 1)
            rows.append(row)
            print(row, file=sys.stderr)
    report = {
        "users": args.users,
        "requests": args.requests,
        "warm": args.warm,
        "workers": args.workers,
        "scope_kib": args.scope_kib,
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# Index cache hit rate against its budget, simulated (issue 23)",
        "",
        f"{args.users} users, Zipf over users, {args.workers} workers each with an LRU cache of "
        f"the budget ({args.scope_kib} KiB per user of 20 memories); {args.requests} requests, "
        f"the first {args.warm} warm the caches. Hit rate in %, random vs sticky routing. "
        f"Raw figures: `{out.name}`.",
        "",
        "| Zipf s | budget MiB (users per worker) | random | sticky |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['zipf_s']} | {r['budget_mib']} ({r['users_per_worker']}) | "
        f"{r['random_hit_pct']} | {r['sticky_hit_pct']} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
