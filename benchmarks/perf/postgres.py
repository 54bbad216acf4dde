"""The PostgreSQL backend beside the local store, and several processes on one PostgreSQL.

Sections (all in one run, same machine, the load average recorded beside each):

1. **One scope of N memories** (10k and 100k): the same rows (synthetic zh/en memories with
   precomputed 384-d vectors from `_corpus.HashingEmbeddings`) are loaded into a local directory
   store and a PostgreSQL database; for each, the first search (the per-process index is built
   from the rows), `search_memories` and `recall` p50/p99 excluding query embedding, the cost of
   the per-call freshness check when nothing changed (`index()`), and whether both backends
   return the same hits and scores. For the decision on where the vector leg runs, pgvector
   itself is timed on the same table: an exact scan and an HNSW index (build time, p50/p99 and
   recall@k against the exact answer), both filtered by scope.
2. **Many small scopes** (10k scopes x 100 memories): searches and recalls on random scopes,
   split into the first call of a scope in the process (its index is built) and later calls.
3. **Several processes on one PostgreSQL** (4 recall loops + 1 writer): recall p50/p99 in each
   reader, writes per second, and freshness: before every recall a reader reads how many writes
   the writer has acknowledged, and after the recall it searches for the newest one; a write
   counts as fresh when that next call finds it (the target is 100 %).

Run from the repository root (needs the `postgres` extra; without `--url` a throw-away server is
started from the `pgserver` wheel, as the tests do):

    python benchmarks/perf/postgres.py                          # the full run (~1 h)
    python benchmarks/perf/postgres.py --tiny --out /tmp/pg.json  # smoke test, under a minute
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import make_memories, make_queries
from latency import PrecomputedEmbeddings, _loadavg, _pct, _time_calls

REPO = Path(__file__).resolve().parents[2]
DIM = 384
CREATED = "2025-01-01T00:00:00.000Z"


# -- data ------------------------------------------------------------------------------------------


def _rows(n: int, emb: PrecomputedEmbeddings, *, seed: int, prefix: str) -> list[Any]:
    """`n` memory rows with precomputed vectors, as `import_rows` takes them."""
    from langchain_tdai_recall.stores.records import MemoryRow
    from langchain_tdai_recall.types import MemoryRecord

    records = make_memories(n, seed=seed)
    texts = [str(r["content"]) for r in records]
    vectors = emb.precompute(texts)
    out = []
    for i, (rec, vec) in enumerate(zip(records, vectors, strict=True)):
        memory = MemoryRecord(
            id=f"{prefix}{i}",
            content=str(rec["content"]),
            type=rec["type"],  # type: ignore[arg-type]
            scene_name=str(rec["scene_name"]),
            priority=int(rec["priority"]),  # type: ignore[call-overload]
            user_id="u",
            created_at=CREATED,
            updated_at=CREATED,
        )
        out.append(MemoryRow(i + 1, memory, emb.identity, vec.astype("<f4").tobytes()))
    return out


def _load(store: Any, scope: Any, rows: Sequence[Any], page: int = 2000) -> float:
    t = time.perf_counter()
    for start in range(0, len(rows), page):
        store.import_rows(scope, "l1", rows[start : start + page])
    return time.perf_counter() - t


CONFIG: dict[str, Any] = {"recall": {"pin_priority": None, "pin_instruction_priority": None}}
"""Pinning by priority off: the synthetic corpus has about 5 % instructions of priority >= 70
and the recall engine reads every pinned candidate on every recall (about 570 records per recall
at 10k memories, 5,700 at 100k), which would measure that path rather than the backends."""


def _open_backend(kind: str, where: str, emb: PrecomputedEmbeddings) -> Any:
    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.stores.local.store import MemoryStore
    from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore

    store = MemoryStore(Path(where)) if kind == "local" else PostgresMemoryStore(where)
    return TdaiMemory.open(store, embeddings=emb, config=CONFIG)


def _new_database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


# -- 1. one scope ----------------------------------------------------------------------------------


def _same_results(a: Any, b: Any, queries: Sequence[str], user: str) -> bool:
    def top(memory: Any, q: str) -> list[tuple[str, float]]:
        return [(h.id, round(h.score, 9)) for h in memory.search_memories(q, limit=5, user_id=user)]

    return all(top(a, q) == top(b, q) for q in queries)


def _pgvector_legs(
    url: str, emb: PrecomputedEmbeddings, queries: Sequence[str], k: int, *, hnsw: bool
) -> dict[str, Any]:
    """Server-side vector search on the same rows: exact scan and HNSW (pgvector 0.6)."""
    import psycopg
    from psycopg.types import TypeInfo

    from langchain_tdai_recall.stores.postgres._connection import _VectorDumper

    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        info = TypeInfo.fetch(conn, "vector")
        assert info is not None
        conn.adapters.register_dumper(np.ndarray, type("D", (_VectorDumper,), {"oid": info.oid}))
        scope_id = conn.execute("SELECT scope_id FROM tdai_scopes WHERE user_id = 'u'").fetchone()
        assert scope_id is not None
        qv = [np.asarray(emb.embed_query(q), dtype=np.float32) for q in queries]
        sql = "SELECT rowid FROM tdai_memories WHERE scope_id = %s ORDER BY vector <#> %s LIMIT %s"

        def run(label: str) -> list[list[int]]:
            answers: list[list[int]] = []
            samples = []
            for v in qv:
                c, t = time.process_time(), time.perf_counter()
                # prepare=False: a prepared (generic) plan cannot use the HNSW index
                rows = conn.execute(sql, (scope_id[0], v, k), prepare=False).fetchall()
                answers.append([r[0] for r in rows])
                samples.append((time.perf_counter() - t, time.process_time() - c))
            out[label] = _pct(samples)
            return answers

        conn.execute("ANALYZE tdai_memories")  # fresh statistics, as autovacuum would give
        conn.execute("SET enable_indexscan = off")
        exact = run("exact_scan")
        conn.execute("RESET enable_indexscan")
        if hnsw:
            conn.execute("SET maintenance_work_mem = '512MB'")
            t = time.perf_counter()
            conn.execute(
                "CREATE INDEX bench_hnsw ON tdai_memories USING hnsw "
                f"((vector::vector({DIM})) vector_ip_ops) WITH (m = 16, ef_construction = 64)"
            )
            out["hnsw_build_s"] = round(time.perf_counter() - t, 1)
            conn.execute("ANALYZE tdai_memories")
            for ef in (40, 200):
                conn.execute(f"SET hnsw.ef_search = {ef}")
                found = run(f"hnsw_ef{ef}")
                hits = sum(len(set(f) & set(e)) for f, e in zip(found, exact, strict=True))
                out[f"hnsw_ef{ef}"]["recall_at_k"] = round(hits / (k * len(exact)), 3)
                out[f"hnsw_ef{ef}"]["rows_returned_mean"] = round(
                    sum(len(f) for f in found) / len(found), 2
                )
            conn.execute("DROP INDEX bench_hnsw")
    out["k"] = k
    return out


def one_scope(n: int, queries: list[str], *, server: str, work: Path, hnsw: bool) -> dict[str, Any]:
    from langchain_tdai_recall.types import Scope

    print(f"== one scope of {n} memories", file=sys.stderr)
    emb = PrecomputedEmbeddings(DIM)
    emb.precompute(queries)
    rows = _rows(n, emb, seed=0, prefix="m")
    result: dict[str, Any] = {"memories": n, "load_before": _loadavg()}
    url = _new_database(server, f"bench_one_{n}")
    where = {"local": str(work / f"one_{n}"), "postgres": url}
    memories: dict[str, Any] = {}
    with ExitStack() as stack:
        for kind in ("local", "postgres"):
            memory = stack.enter_context(_open_backend(kind, where[kind], emb))
            memories[kind] = memory
            store = memory._store
            load_s = _load(store, Scope("u"), rows)
            part: dict[str, Any] = {
                "load_s": round(load_s, 1),
                "load_rows_per_s": round(n / load_s),
            }
            t = time.perf_counter()
            memory.search_memories(queries[0], user_id="u")
            part["first_search_s"] = round(time.perf_counter() - t, 3)

            def search(q: str, m: Any = memory) -> object:
                return m.search_memories(q, limit=5, user_id="u")

            def recall(q: str, m: Any = memory) -> object:
                return m.recall(q, user_id="u")

            def check(_: str, s: Any = store) -> object:
                return s.index(Scope("u"), "l1")

            part["search_excl_embedding"] = _pct(_time_calls(search, queries))
            part["recall_excl_embedding"] = _pct(_time_calls(recall, queries))
            part["freshness_check_unchanged"] = _pct(_time_calls(check, queries))
            result[kind] = part
            print(
                f"  {kind}: load {load_s:.1f} s, first search {part['first_search_s']} s, "
                f"search p50 {part['search_excl_embedding']['p50_ms']} ms, "
                f"recall p50 {part['recall_excl_embedding']['p50_ms']} ms",
                file=sys.stderr,
            )
        result["identical_hits_and_scores"] = _same_results(
            memories["local"], memories["postgres"], queries, "u"
        )
    print("  pgvector server-side legs", file=sys.stderr)
    result["pgvector"] = _pgvector_legs(url, emb, queries, 15, hnsw=hnsw)
    result["load_after"] = _loadavg()
    return result


# -- 2. many small scopes --------------------------------------------------------------------------


def many_scopes(
    scopes: int, per: int, queries: list[str], *, server: str, work: Path, calls: int
) -> dict[str, Any]:
    from langchain_tdai_recall.types import Scope

    print(f"== {scopes} scopes x {per} memories", file=sys.stderr)
    emb = PrecomputedEmbeddings(DIM)
    emb.precompute(queries)
    template = _rows(per * 50, emb, seed=3, prefix="x")  # 50 distinct blocks of `per` rows
    result: dict[str, Any] = {"scopes": scopes, "per_scope": per, "load_before": _loadavg()}
    url = _new_database(server, f"bench_many_{scopes}")
    where = {"local": str(work / f"many_{scopes}"), "postgres": url}
    rng = random.Random(7)
    plan = [(f"user{rng.randrange(scopes)}", rng.choice(queries)) for _ in range(calls)]
    for kind in ("local", "postgres"):
        with _open_backend(kind, where[kind], emb) as memory:
            store = memory._store
            t = time.perf_counter()
            for s in range(scopes):
                block = (s % 50) * per
                store.import_rows(Scope(f"user{s}"), "l1", template[block : block + per])
            load_s = time.perf_counter() - t
            first: list[tuple[float, float]] = []
            again: list[tuple[float, float]] = []
            recalls: list[tuple[float, float]] = []
            seen: set[str] = set()
            for user, q in plan:
                c, t = time.process_time(), time.perf_counter()
                memory.search_memories(q, limit=5, user_id=user)
                sample = (time.perf_counter() - t, time.process_time() - c)
                (again if user in seen else first).append(sample)
                seen.add(user)
                c, t = time.process_time(), time.perf_counter()
                memory.recall(q, user_id=user)
                recalls.append((time.perf_counter() - t, time.process_time() - c))
            if kind == "postgres":
                result["pgvector_exact_per_scope"] = _pgvector_scoped(url, emb, plan)
            result[kind] = {
                "load_s": round(load_s, 1),
                "load_rows_per_s": round(scopes * per / load_s),
                "search_first_call_in_scope": _pct(first),
                "search_later_calls": _pct(again) if again else None,
                "recall_after_search": _pct(recalls),
                "indexed_scopes": store.loaded_indexes(),
            }
            first_p50 = result[kind]["search_first_call_in_scope"]["p50_ms"]
            recall_p50 = result[kind]["recall_after_search"]["p50_ms"]
            print(
                f"  {kind}: load {load_s:.0f} s, search p50 first {first_p50} ms, "
                f"recall p50 {recall_p50} ms",
                file=sys.stderr,
            )
    result["load_after"] = _loadavg()
    return result


def _pgvector_scoped(
    url: str, emb: PrecomputedEmbeddings, plan: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """The vector leg alone in the server for small scopes: an exact scan of one scope."""
    import psycopg
    from psycopg.types import TypeInfo

    from langchain_tdai_recall.stores.postgres._connection import _VectorDumper

    with psycopg.connect(url, autocommit=True) as conn:
        info = TypeInfo.fetch(conn, "vector")
        assert info is not None
        conn.adapters.register_dumper(np.ndarray, type("D", (_VectorDumper,), {"oid": info.oid}))
        samples = []
        for user, q in plan:
            v = np.asarray(emb.embed_query(q), dtype=np.float32)
            c, t = time.process_time(), time.perf_counter()
            conn.execute(
                "SELECT m.rowid FROM tdai_memories m JOIN tdai_scopes s USING (scope_id) "
                "WHERE s.user_id = %s AND s.agent_id = '' ORDER BY m.vector <#> %s LIMIT 15",
                (user, v),
            ).fetchall()
            samples.append((time.perf_counter() - t, time.process_time() - c))
    return _pct(samples)


# -- 3. several processes --------------------------------------------------------------------------


def _reader(url: str, scopes: int, seconds: float, seed: int, sync: tuple[Any, ...]) -> None:
    acked, ready, go, out = sync
    from langchain_tdai_recall.memory import TdaiMemory

    emb = PrecomputedEmbeddings(DIM)
    queries = make_queries(200, seed=seed)
    emb.precompute(queries)
    rng = random.Random(seed)
    lat: list[float] = []
    fresh = checked = 0
    misses: list[int] = []
    with TdaiMemory.open(url, embeddings=emb, config=CONFIG) as memory:
        for s in range(scopes):  # warm: every scope's index built once
            memory.search_memories("warm up", user_id=f"user{s}")
        with ready.get_lock():
            ready.value += 1
        while not go.value:
            time.sleep(0.01)
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            k = acked.value
            t = time.perf_counter()
            memory.recall(rng.choice(queries), user_id=f"user{rng.randrange(scopes)}")
            lat.append(time.perf_counter() - t)
            if k:
                hits = memory.search_memories(f"freshmark{k}", limit=1, user_id=f"user{k % scopes}")
                checked += 1
                if hits and hits[0].id == f"w{k}":
                    fresh += 1
                else:
                    misses.append(k)
    out.put({"latencies": lat, "fresh": fresh, "checked": checked, "misses": misses[:20]})


def _writer(url: str, scopes: int, seconds: float, sync: tuple[Any, Any, Any, Any]) -> None:
    from langchain_tdai_recall.memory import TdaiMemory

    acked, ready, go, out = sync
    emb = PrecomputedEmbeddings(DIM)
    n = 0
    lat: list[float] = []
    with TdaiMemory.open(url, embeddings=emb, config=CONFIG) as memory:
        with ready.get_lock():
            ready.value += 1
        while not go.value:  # the readers' timed window and the writes start together
            time.sleep(0.01)
        stop = time.monotonic() + seconds
        started = time.monotonic()
        while time.monotonic() < stop:
            n += 1
            t = time.perf_counter()
            memory.add_memory(
                f"The user noted freshmark{n} during a call about the garden.",
                id=f"w{n}",
                user_id=f"user{n % scopes}",
            )
            lat.append(time.perf_counter() - t)
            acked.value = n
        elapsed = time.monotonic() - started
        memory.flush(timeout=60)
    out.put({"writes": n, "seconds": elapsed, "latencies": lat})


def processes(
    readers: int, scopes: int, per: int, seconds: float, *, server: str
) -> dict[str, Any]:
    from langchain_tdai_recall.stores.local.store import Scope
    from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore

    print(f"== {readers} recall processes + 1 writer on one PostgreSQL", file=sys.stderr)
    url = _new_database(server, "bench_procs")
    emb = PrecomputedEmbeddings(DIM)
    template = _rows(per, emb, seed=5, prefix="p")
    store = PostgresMemoryStore(url)
    store.bind(tokenizer=store.tokenizer, embedder_id=emb.identity)
    for s in range(scopes):
        store.import_rows(Scope(f"user{s}"), "l1", template)
    store.close()
    ctx = mp.get_context("spawn")
    acked = ctx.Value("q", 0)
    ready = ctx.Value("i", 0)
    go = ctx.Value("i", 0)
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_reader, args=(url, scopes, seconds, 100 + i, (acked, ready, go, out)))
        for i in range(readers)
    ]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 600
    while ready.value < readers:  # every reader has built its indexes
        if time.monotonic() > deadline or not all(w.is_alive() for w in workers):
            msg = "the reader processes did not get ready"
            raise RuntimeError(msg)
        time.sleep(0.1)
    # the writer opens its store (a spawned process imports the package: seconds on a busy
    # machine) before anyone's clock starts, so every reader's window sees writes to check
    writer = ctx.Process(target=_writer, args=(url, scopes, seconds, (acked, ready, go, out)))
    writer.start()
    while ready.value < readers + 1:
        if time.monotonic() > deadline or not writer.is_alive():
            msg = "the writer process did not get ready"
            raise RuntimeError(msg)
        time.sleep(0.05)
    load_before = _loadavg()
    go.value = 1
    results = [out.get(timeout=seconds + 600) for _ in range(readers + 1)]
    for w in [*workers, writer]:
        w.join(60)
    load_after = _loadavg()
    reads = [r for r in results if "fresh" in r]
    (write,) = [r for r in results if "writes" in r]
    lat = [x for r in reads for x in r["latencies"]]
    checked = sum(r["checked"] for r in reads)
    fresh = sum(r["fresh"] for r in reads)
    summary = {
        "readers": readers,
        "scopes": scopes,
        "memories_per_scope": per,
        "seconds": seconds,
        "recall": _pct([(x, 0.0) for x in lat]),
        "recalls_per_reader": [len(r["latencies"]) for r in reads],
        "writes": write["writes"],
        "writes_per_s": round(write["writes"] / write["seconds"], 1),
        "write": _pct([(x, 0.0) for x in write["latencies"]]),
        "freshness_checks": checked,
        "freshness_pct": round(100.0 * fresh / checked, 3) if checked else None,
        "stale_examples": [m for r in reads for m in r["misses"]][:20],
        "load_before": load_before,
        "load_after": load_after,
    }
    for key in ("recall", "write"):
        summary[key] = {k: v for k, v in summary[key].items() if not k.startswith("cpu")}
    print(
        f"  recall p50 {summary['recall']['p50_ms']} ms p99 {summary['recall']['p99_ms']} ms, "
        f"{summary['writes_per_s']} writes/s, fresh {summary['freshness_pct']} %",
        file=sys.stderr,
    )
    return summary


# -- report ----------------------------------------------------------------------------------------


def to_markdown(report: dict[str, Any], raw: str = "postgres.json") -> str:
    lines = [
        "# PostgreSQL backend: local vs PostgreSQL, and several processes on one server",
        "",
        f"Machine: {report['machine']}. Server: {report['server']}. Generated by "
        f"`benchmarks/perf/postgres.py`; raw numbers in `{raw}`. Latencies exclude "
        "query embedding (precomputed 384-d vectors); pinning by priority is off (`CONFIG` in "
        "the script). Load averages (1/5/15 min) of the shared 2-core machine are given with "
        "each section.",
        "",
        "## One scope",
        "",
        "| memories | backend | load rows/s | first search s | search p50 / p99 ms | "
        "recall p50 / p99 ms | freshness check p50 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for part in report["one_scope"]:
        for kind in ("local", "postgres"):
            r = part[kind]
            lines.append(
                f"| {part['memories']:,} | {kind} | {r['load_rows_per_s']:,} | "
                f"{r['first_search_s']} | {r['search_excl_embedding']['p50_ms']} / "
                f"{r['search_excl_embedding']['p99_ms']} | {r['recall_excl_embedding']['p50_ms']}"
                f" / {r['recall_excl_embedding']['p99_ms']} | "
                f"{r['freshness_check_unchanged']['p50_ms']} |"
            )
    lines += [
        "",
        "Same hits and scores on both backends: "
        + ", ".join(
            f"{p['memories']:,}: {p['identical_hits_and_scores']}" for p in report["one_scope"]
        )
        + ". Load averages: "
        + "; ".join(
            f"{p['memories']:,}: {p['load_before']} -> {p['load_after']}"
            for p in report["one_scope"]
        )
        + ".",
        "",
    ]
    lines += [
        "### The vector leg in the server (pgvector 0.6), same rows, filtered by scope",
        "",
        "The vector leg alone (no keyword leg, no fusion, no records); custom plans "
        "(a prepared statement's generic plan does not use the HNSW index).",
        "",
        "| memories | variant | p50 / p99 ms | recall@k vs exact | rows returned (of k) |",
        "|---|---|---|---|---|",
    ]
    for part in report["one_scope"]:
        pv = part["pgvector"]
        lines.append(
            f"| {part['memories']:,} | exact scan | {pv['exact_scan']['p50_ms']} / "
            f"{pv['exact_scan']['p99_ms']} | 1 | {pv['k']} |"
        )
        for ef in (40, 200):
            h = pv.get(f"hnsw_ef{ef}")
            if h:
                lines.append(
                    f"| {part['memories']:,} | HNSW ef_search={ef} (build {pv['hnsw_build_s']} s)"
                    f" | {h['p50_ms']} / {h['p99_ms']} | {h['recall_at_k']} | "
                    f"{h['rows_returned_mean']} |"
                )
    if report.get("many_scopes"):
        m = report["many_scopes"]
        lines += [
            "",
            f"## {m['scopes']:,} scopes x {m['per_scope']} memories",
            "",
            "| backend | load rows/s | search p50 / p99 ms, first call in a scope | "
            "later calls | recall p50 / p99 ms |",
            "|---|---|---|---|---|",
        ]
        for kind in ("local", "postgres"):
            r = m[kind]
            later = r["search_later_calls"]
            lines.append(
                f"| {kind} | {r['load_rows_per_s']:,} | "
                f"{r['search_first_call_in_scope']['p50_ms']} / "
                f"{r['search_first_call_in_scope']['p99_ms']} | "
                + (f"{later['p50_ms']} / {later['p99_ms']}" if later else "-")
                + f" | {r['recall_after_search']['p50_ms']} / "
                f"{r['recall_after_search']['p99_ms']} |"
            )
        pv = m.get("pgvector_exact_per_scope")
        if pv:
            lines.append(
                f"\nThe vector leg alone in the server (pgvector exact scan of the scope, "
                f"k=15): p50 / p99 {pv['p50_ms']} / {pv['p99_ms']} ms."
            )
        lines.append(f"\nLoad averages: {m['load_before']} -> {m['load_after']}.")
    if report.get("processes"):
        p = report["processes"]
        lines += [
            "",
            f"## {p['readers']} recall processes + 1 writer on one PostgreSQL",
            "",
            f"{p['scopes']} scopes of {p['memories_per_scope']} memories; {p['seconds']} s.",
            "",
            "| recall p50 / p99 ms | recalls per reader | writes/s | write p50 / p99 ms | "
            "fresh at the next call |",
            "|---|---|---|---|---|",
            f"| {p['recall']['p50_ms']} / {p['recall']['p99_ms']} | "
            f"{', '.join(map(str, p['recalls_per_reader']))} | {p['writes_per_s']} | "
            f"{p['write']['p50_ms']} / {p['write']['p99_ms']} | {p['freshness_pct']} % of "
            f"{p['freshness_checks']:,} |",
            "",
            f"Load averages: {p['load_before']} -> {p['load_after']}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a PostgreSQL server (superuser URL); default: throw-away")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--scopes", default="10000x100", help="SCOPESxPER, or 0 to skip")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-hnsw", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="smoke test sizes")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/postgres.json"))
    args = parser.parse_args()
    if args.tiny:
        args.sizes, args.scopes, args.queries, args.seconds = "300", "30x20", 20, 8.0
    queries = make_queries(args.queries, seed=1)
    from langchain_tdai_recall.testing.postgres import TemporaryPostgres

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="tdai-pg-bench-") as tmp:
        server = args.url or stack.enter_context(TemporaryPostgres()).url()
        import psycopg

        with psycopg.connect(server) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        report: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}",
            "server": f"PostgreSQL {row[0] if row else '?'} (pgserver wheel, unix socket, "
            "fsync off)"
            if not args.url
            else "external",
        }
        report["one_scope"] = [
            one_scope(int(n), queries, server=server, work=Path(tmp), hnsw=not args.no_hnsw)
            for n in args.sizes.split(",")
            if n
        ]
        if args.scopes != "0":
            scopes, per = (int(x) for x in args.scopes.split("x"))
            report["many_scopes"] = many_scopes(
                scopes, per, queries, server=server, work=Path(tmp), calls=2 * args.queries
            )
        if args.readers:
            report["processes"] = processes(
                args.readers,
                100 if not args.tiny else 5,
                1000 if not args.tiny else 50,
                args.seconds,
                server=server,
            )
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(to_markdown(report, out.name), encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
