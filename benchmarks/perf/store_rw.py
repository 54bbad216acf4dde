"""What read-your-writes costs the LangGraph store (`memory.as_store()`) and the retriever.

Issue 24: a search by meaning must see every write made before it, with its vector. Vectors are
computed in the background after a write; two designs give read-your-writes:

- embed on put (as LangGraph's own stores do): every put waits for its text's embedding;
- wait at the search (chosen): a put returns as before; a query search (and the retriever)
  first embeds the rows of its scope still without a vector (`VectorUpkeep.embed_scope_now`).

For each embedder (`hash`: `HashEmbeddings`; `default`: the bundled model), in one process and
one run, so the numbers are side by side, this script times:

1. `put` of a one-text item (what every put costs now) and of an item with two indexed texts
   (whose texts are embedded at the put, since their vectors are kept with the item);
2. embedding one text (what embed-on-put would add to every put);
3. a query search right after a put (it embeds the new row first) against the same search with
   nothing pending (query embedding only);
4. the retriever right after `add_memory` against the retriever with nothing pending;
5. a store search without a query and with one over scopes of growing size (every item is
   ranked: the cost grows with the scope).

Run from the repository root:

    python benchmarks/perf/store_rw.py                       # hash and default, 40 rounds
    python benchmarks/perf/store_rw.py --tiny --out /tmp/store_rw.json   # smoke test

Wall-clock numbers depend on what else runs on the machine; the load average at start and end
is recorded next to them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from langchain_tdai_recall import TdaiMemory  # noqa: E402
from langchain_tdai_recall.testing import HashEmbeddings  # noqa: E402

TOPICS = [
    "keeps bees on the roof",
    "plays the cello in an orchestra",
    "is allergic to penicillin",
    "runs a marathon every spring",
    "restores old motorcycles",
    "speaks Portuguese and Japanese",
    "grows tomatoes in a greenhouse",
    "prefers aisle seats on trains",
]


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(p99, 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _embeddings(name: str) -> Any:
    return HashEmbeddings(dims=384) if name == "hash" else "default"


def measure(name: str, rounds: int, sizes: list[int]) -> dict[str, Any]:
    """Every measurement for one embedder."""
    out: dict[str, Any] = {"embedder": name}
    with TdaiMemory.open(None, embeddings=_embeddings(name)) as mem:
        store = mem.as_store()
        multi = mem.as_store(index={"fields": ["title", "body"]})
        emb = mem.embeddings
        assert emb is not None
        mem.add_memory("warm-up", user_id="warm")
        mem.flush()
        mem.search_memories("warm-up", user_id="warm")
        puts, multis, embeds, fresh, settled = [], [], [], [], []
        for i in range(rounds):
            ns = ("memories", f"u{i}")
            text = f"User {i} {TOPICS[i % len(TOPICS)]}."
            puts.append(_time(lambda: store.put(ns, "k", {"content": text})))  # noqa: B023
            query = f"what does user {i} do?"
            fresh.append(_time(lambda: store.search(ns, query=query)))  # noqa: B023
            settled.append(_time(lambda: store.search(ns, query=query)))  # noqa: B023
            value = {"title": f"Note {i}", "body": text}
            multis.append(_time(lambda: multi.put(ns, "m", value)))  # noqa: B023
            embeds.append(_time(lambda: emb.embed_documents([text])))  # noqa: B023
        out["put_one_text"] = _stats(puts)
        out["put_two_indexed_texts"] = _stats(multis)
        out["embed_one_text"] = _stats(embeds)
        out["search_right_after_put"] = _stats(fresh)
        out["search_nothing_pending"] = _stats(settled)
        retr_fresh, retr_settled = [], []
        for i in range(rounds):
            user = f"r{i}"
            retriever = mem.as_retriever(user_id=user, k=3)
            mem.add_memory(f"User {i} {TOPICS[i % len(TOPICS)]}.", user_id=user)
            query = f"what about user {i}?"
            retr_fresh.append(_time(lambda: retriever.invoke(query)))  # noqa: B023
            retr_settled.append(_time(lambda: retriever.invoke(query)))  # noqa: B023
        out["retriever_right_after_add"] = _stats(retr_fresh)
        out["retriever_nothing_pending"] = _stats(retr_settled)
        out["pending_after"] = mem.stats().pending_vectors
    out["scopes"] = _scopes(name, sizes, rounds) if name == "hash" else []
    return out


def _scopes(name: str, sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    """Store searches over one scope of each size (hash embedder: building is fast)."""
    rows = []
    for size in sizes:
        with TdaiMemory.open(None, embeddings=_embeddings(name)) as mem:
            ns = ("memories", "big")
            mem.add_memories(
                [
                    {
                        "id": f"k{i}",
                        "content": f"Note {i}: {TOPICS[i % len(TOPICS)]}.",
                        "metadata": {
                            "tdai_store": {"value": {"content": f"Note {i}."}, "ns": list(ns)}
                        },
                    }
                    for i in range(size)
                ],
                user_id="big",
            )
            mem.flush()
            store = mem.as_store()
            store.search(ns, query="warm-up")
            listing = [_time(lambda: store.search(ns, limit=10)) for _ in range(rounds)]  # noqa: B023
            query = [
                _time(lambda: store.search(ns, query="who keeps bees?", limit=10))  # noqa: B023
                for _ in range(rounds)
            ]
            rows.append(
                {
                    "items": size,
                    "search_no_query": _stats(listing),
                    "search_query": _stats(query),
                }
            )
    return rows


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Read-your-writes of the LangGraph store and the retriever (issue 24)",
        "",
        f"Machine: {report['machine']}; load average {report['load_start']} at start, "
        f"{report['load_end']} at end. {report['rounds']} rounds each; milliseconds. "
        "Reproduce: `python benchmarks/perf/store_rw.py`.",
        "",
        "| embedder | put, one text | put, two indexed texts | embed one text (embed-on-put's "
        "cost per put) | query search right after a put | query search, nothing pending | "
        "retriever right after add_memory | retriever, nothing pending |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        cells = [
            run["put_one_text"],
            run["put_two_indexed_texts"],
            run["embed_one_text"],
            run["search_right_after_put"],
            run["search_nothing_pending"],
            run["retriever_right_after_add"],
            run["retriever_nothing_pending"],
        ]
        shown = " | ".join(f"{c['p50_ms']:.2f} (p99 {c['p99_ms']:.2f})" for c in cells)
        lines.append(f"| {run['embedder']} | {shown} |")
    scopes = [row for run in report["runs"] for row in run["scopes"]]
    if scopes:
        lines += [
            "",
            "Store search over one scope (hash embedder, p50 / p99 ms): every item under the "
            "prefix is ranked, so the cost grows with the scope.",
            "",
            "| items in the scope | search without a query (limit 10) | query search (limit 10) |",
            "|---:|---:|---:|",
        ]
        for row in scopes:
            a, b = row["search_no_query"], row["search_query"]
            lines.append(
                f"| {row['items']} | {a['p50_ms']:.2f} / {a['p99_ms']:.2f} | "
                f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="hash,default")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tiny", action="store_true", help="hash only, a few rounds")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "store_rw.json"))
    args = parser.parse_args(argv)
    embedders = ["hash"] if args.tiny else args.embedders.split(",")
    rounds = 5 if args.tiny else args.rounds
    sizes = [200] if args.tiny else [int(s) for s in args.sizes.split(",")]
    report: dict[str, Any] = {
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "rounds": rounds,
        "runs": [measure(name, rounds, sizes) for name in embedders],
    }
    report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(_markdown(report), encoding="utf-8")
    print(_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
