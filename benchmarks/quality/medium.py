"""Medium stores: does what a request needs reach the model when a user holds 150+ memories?

Reads the team-written sets in `tests/fixtures/medium/` (format in the README beside them):

- `dev.json`: the development set, written before recall was tuned for stores of hundreds of
  memories: 5 users (2 English, 2 Chinese, 1 mixing both) with 150-170 L1 memories each, 20
  first-person requests per user (`explicit`, `implicit`, `multipart`, `temporal`,
  `cross_language`), each naming the memories it needs, and 16 irrelevant requests per user.
- `after.json`: held out (one user in the same format), reported separately; not for tuning:
  only its totals are printed and written, never its per-request outcomes.

Each user gets an in-memory `TdaiMemory` with the chosen embedder and the default config (only
`timezone` set to the user's). Its memories are loaded in two variants, then `flush()`:

- `all 50`: every memory at priority 50 (what direct writes, imports and LangGraph-store writes
  get; types are kept);
- `rated`: the priorities in the file, as memory formation rates them (so the profile budget is
  contended).

Every request is recalled once with `recall(text, user_id=...)`; the request's `now` (the user's
reference time) is passed as `now=` when `recall()` accepts it, and reported as not passed
otherwise. A needed memory **reaches the model** when its content appears in `prepend_context`
(the `<relevant-memories>` block) or in `append_system_context` (standing rules, pinned memories,
the profile). Reported: the share of needs that reach the model, overall and by kind; the same per
request (every need reached); by channel (block, pinned, profile, standing rules); "top 5 always"
(a need is among `search_memories(text, limit=5, min_score=0)`: the search's top 5 with no
threshold, upstream's hybrid); memories in the block per irrelevant request; and the code points
of memory text in the system context per turn (mean and max over every recall).

    .venv/bin/python benchmarks/quality/medium.py --cache-dir /tmp/tdai-emb-cache
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    EMBEDDER_CHOICES,
    REPO_ROOT,
    format_table,
    make_embeddings,
    system_memory_chars,
    system_memory_tokens,
    write_json,
)

from langchain_tdai_recall import RecallResult, TdaiMemory

DATA_DIR = REPO_ROOT / "tests" / "fixtures" / "medium"
SETS: tuple[str, ...] = ("dev", "after")
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "quality_medium.json"
KINDS: tuple[str, ...] = ("explicit", "implicit", "multipart", "temporal", "cross_language")
CHANNELS: tuple[str, ...] = ("block", "pinned", "standing rules", "profile")
"""Where a need that reached the model was found, in this order of precedence."""
VARIANTS: tuple[str, ...] = ("all 50", "rated")
FLAT_PRIORITY = 50
DIAGNOSTIC_LIMIT = 20
"""Depth of the extra search that records each need's rank and relevance (for diagnosis)."""


def load_set(path: Path) -> list[dict[str, Any]]:
    """The users of one set file (`dev.json` or `after.json`)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    users: list[dict[str, Any]] = data["users"]
    return users


def variant_records(user: Mapping[str, Any], variant: str) -> list[dict[str, Any]]:
    """The user's memories as `add_memories` records, priorities per the variant."""
    records = []
    for m in user["memories"]:
        record = {k: v for k, v in m.items() if v not in ("", None)}
        if variant == "all 50":
            record["priority"] = FLAT_PRIORITY
        records.append(record)
    return records


def _accepts_now(method: Callable[..., Any]) -> bool:
    return "now" in inspect.signature(method).parameters


def channel_of(result: RecallResult, memory_id: str) -> str | None:
    """The first channel (block, pinned, standing rules, profile) that holds the memory."""
    for name, records in (
        ("block", result.memories),
        ("pinned", result.pinned),
        ("standing rules", result.standing_rules),
        ("profile", result.profile),
    ):
        if any(m.id == memory_id for m in records):
            return name
    return None


def reaches_model(result: RecallResult | None, content: str) -> bool:
    """Whether the memory's text is in the block or the system context of this turn."""
    if result is None:
        return False
    return content in (result.prepend_context or "") or content in (
        result.append_system_context or ""
    )


def _need_outcome(
    result: RecallResult | None,
    need: str,
    content: str,
    top5: Sequence[str],
    rank: Mapping[str, tuple[int, float]],
) -> dict[str, Any]:
    """Whether one needed memory reached the model, through which channel, and its search rank."""
    reached = reaches_model(result, content)
    channel = None
    if result is not None and reached:
        channel = channel_of(result, need) or "text"
    return {
        "id": need,
        "reached": reached,
        "channel": channel,
        "in_block": result is not None and any(m.id == need for m in result.memories),
        "top5": need in top5,
        "rank": rank[need][0] if need in rank else None,
        "score": rank[need][1] if need in rank else None,
    }


class _Session:
    """One user's store in one variant, with the hooks the installed package offers."""

    def __init__(self, memory: TdaiMemory, user: Mapping[str, Any]) -> None:
        self.memory = memory
        self.user_id = str(user["user_id"])
        self.now = dt.datetime.fromisoformat(str(user["now"]))
        self.recall_takes_now = _accepts_now(memory.recall)
        self.search_takes_now = _accepts_now(memory.search_memories)

    def recall(self, text: str, now: dt.datetime) -> RecallResult | None:
        kwargs: dict[str, Any] = {"now": now} if self.recall_takes_now else {}
        return self.memory.recall(text, user_id=self.user_id, **kwargs)

    def ranked(self, text: str, limit: int, now: dt.datetime) -> list[tuple[str, float]]:
        kwargs: dict[str, Any] = {"now": now} if self.search_takes_now else {}
        hits = self.memory.search_memories(
            text, limit=limit, user_id=self.user_id, min_score=0.0, **kwargs
        )
        return [(h.id, h.score) for h in hits]


def run_user(
    user: Mapping[str, Any],
    variant: str,
    embeddings: Any,
    *,
    limit: int | None = None,
) -> dict[str, Any]:
    """Recall every request of one user in one variant; per-request outcomes."""
    contents = {str(m["id"]): str(m["content"]) for m in user["memories"]}
    config = {"timezone": str(user["timezone"])}
    requests = list(user["requests"])[:limit]
    irrelevant = list(user["irrelevant"])[:limit]
    outcomes: list[dict[str, Any]] = []
    noise: list[dict[str, Any]] = []
    with TdaiMemory.open(None, embeddings=embeddings, config=config) as memory:
        memory.add_memories(
            variant_records(user, variant), user_id=str(user["user_id"]), show_progress=False
        )
        memory.flush()
        session = _Session(memory, user)
        for request in requests:
            now = dt.datetime.fromisoformat(str(request.get("now") or user["now"]))
            result = session.recall(str(request["text"]), now)
            top5 = [i for i, _ in session.ranked(str(request["text"]), 5, now)]
            deep = session.ranked(str(request["text"]), DIAGNOSTIC_LIMIT, now)
            rank = {i: (n, round(score, 4)) for n, (i, score) in enumerate(deep, start=1)}
            needs = [
                _need_outcome(result, need, contents[need], top5, rank) for need in request["needs"]
            ]
            outcomes.append(
                {
                    "id": request["id"],
                    "user": user["user_id"],
                    "kind": request["kind"],
                    "text": request["text"],
                    "needs": needs,
                    "all_reached": all(n["reached"] for n in needs),
                    "block": [m.id for m in result.memories] if result else [],
                    "system_memory_chars": system_memory_chars(
                        result.append_system_context if result else None
                    ),
                    "system_memory_tokens": system_memory_tokens(
                        result.append_system_context if result else None
                    ),
                    "profile_memories": len(result.profile) if result else 0,
                    "timed_out": result is None,
                    "degraded": result is not None and result.error is not None,
                }
            )
        for request in irrelevant:
            result = session.recall(str(request["text"]), session.now)
            noise.append(
                {
                    "id": request["id"],
                    "block": [m.id for m in result.memories] if result else [],
                    "system_memory_chars": system_memory_chars(
                        result.append_system_context if result else None
                    ),
                    "system_memory_tokens": system_memory_tokens(
                        result.append_system_context if result else None
                    ),
                    "profile_memories": len(result.profile) if result else 0,
                    "timed_out": result is None,
                    "degraded": result is not None and result.error is not None,
                }
            )
        now_passed = session.recall_takes_now
    return {"cases": outcomes, "irrelevant": noise, "now_passed": now_passed}


def _share(flags: Iterable[bool]) -> str:
    values = list(flags)
    return f"{sum(values)}/{len(values)}"


def summarize(cases: list[dict[str, Any]], noise: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals of one set in one variant."""
    needs = [n | {"kind": c["kind"]} for c in cases for n in c["needs"]]
    by_kind: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        kind_needs = [n for n in needs if n["kind"] == kind]
        kind_cases = [c for c in cases if c["kind"] == kind]
        if kind_cases:
            by_kind[kind] = {
                "needs_reached": _share(n["reached"] for n in kind_needs),
                "requests_reached": _share(c["all_reached"] for c in kind_cases),
                "needs_top5": _share(n["top5"] for n in kind_needs),
            }
    channels: dict[str, int] = defaultdict(int)
    for n in needs:
        if n["reached"]:
            channels[n["channel"]] += 1
    system = [c["system_memory_chars"] for c in cases] + [r["system_memory_chars"] for r in noise]
    tokens = [c["system_memory_tokens"] for c in cases] + [r["system_memory_tokens"] for r in noise]
    n_needs = max(len(needs), 1)
    return {
        "requests": len(cases),
        "needs": len(needs),
        "needs_reached": sum(n["reached"] for n in needs),
        "needs_reached_pct": round(100 * sum(n["reached"] for n in needs) / n_needs, 1),
        "requests_reached": sum(c["all_reached"] for c in cases),
        "needs_top5": sum(n["top5"] for n in needs),
        "needs_top5_pct": round(100 * sum(n["top5"] for n in needs) / n_needs, 1),
        "needs_in_block": sum(n["in_block"] for n in needs),
        "by_kind": by_kind,
        "by_user": {
            user: _share(n["reached"] for c in cases if c["user"] == user for n in c["needs"])
            for user in dict.fromkeys(c["user"] for c in cases)
        },
        "by_channel": {
            ch: channels[ch] for ch in (*CHANNELS, "text") if ch in CHANNELS or channels[ch]
        },
        "mean_block_memories": round(sum(len(c["block"]) for c in cases) / max(len(cases), 1), 2),
        "irrelevant_requests": len(noise),
        "mean_block_memories_irrelevant": (
            round(sum(len(r["block"]) for r in noise) / len(noise), 3) if noise else None
        ),
        "irrelevant_with_block": sum(1 for r in noise if r["block"]),
        "mean_system_memory_chars": round(sum(system) / max(len(system), 1), 1),
        "max_system_memory_chars": max(system, default=0),
        "mean_system_memory_tokens": round(sum(tokens) / max(len(tokens), 1), 1),
        "profile_memories_by_user": {
            user: max(c["profile_memories"] for c in cases if c["user"] == user)
            for user in dict.fromkeys(c["user"] for c in cases)
        },
        "max_system_memory_tokens": max(tokens, default=0),
        "timed_out": sum(c["timed_out"] for c in cases) + sum(r["timed_out"] for r in noise),
        "degraded": sum(c["degraded"] for c in cases) + sum(r["degraded"] for r in noise),
    }


def run_set(
    users: list[dict[str, Any]], embeddings: Any, *, limit: int | None = None
) -> dict[str, Any]:
    """Both variants of one set: totals and per-request outcomes."""
    out: dict[str, Any] = {}
    now_passed = True
    warm = getattr(embeddings, "warm_queries", None)
    if callable(warm):  # recall's query-embedding timeout must never see a cold or busy model
        warm(
            [
                str(r["text"])
                for u in users
                for r in [*u["requests"][:limit], *u["irrelevant"][:limit]]
            ]
        )
    for variant in VARIANTS:
        cases: list[dict[str, Any]] = []
        noise: list[dict[str, Any]] = []
        for user in users:
            result = run_user(user, variant, embeddings, limit=limit)
            cases.extend(result["cases"])
            noise.extend(result["irrelevant"])
            now_passed = now_passed and result["now_passed"]
        out[variant] = {"summary": summarize(cases, noise), "cases": cases, "irrelevant": noise}
    out["now_passed"] = now_passed
    return out


def _rows(name: str, report: Mapping[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for variant in VARIANTS:
        s = report[variant]["summary"]
        rows.append(
            [
                f"{name} / {variant}",
                f"{s['needs_reached']}/{s['needs']} ({s['needs_reached_pct']:.0f} %)",
                f"{s['requests_reached']}/{s['requests']}",
                ", ".join(s["by_kind"][k]["needs_reached"] for k in KINDS if k in s["by_kind"]),
                ", ".join(f"{k} {v}" for k, v in s["by_channel"].items()),
                f"{s['needs_top5']}/{s['needs']} ({s['needs_top5_pct']:.0f} %)",
                "n/a"
                if s["mean_block_memories_irrelevant"] is None
                else f"{s['mean_block_memories_irrelevant']:.2f}",
                f"{s['mean_system_memory_chars']:.0f} / {s['max_system_memory_chars']}",
                f"{s['mean_system_memory_tokens']:.0f} / {s['max_system_memory_tokens']}",
            ]
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated: dev,after")
    parser.add_argument("--users", default="", help="comma-separated user ids (default: all)")
    parser.add_argument(
        "--limit", type=int, default=None, help="first N requests and irrelevant requests per user"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="reuse embeddings across runs (.npz)"
    )
    parser.add_argument("--quiet", action="store_true", help="no list of the dev set's misses")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    wanted = {u for u in args.users.split(",") if u}
    reports: dict[str, dict[str, Any]] = {}
    for name in [s for s in args.sets.split(",") if s]:
        users = [
            u
            for u in load_set(args.data_dir / f"{name}.json")
            if not wanted or u["user_id"] in wanted
        ]
        if users:
            reports[name] = run_set(users, embeddings, limit=args.limit)
    save = getattr(embeddings, "save", None)
    if callable(save):
        save()
    now_passed = all(r["now_passed"] for r in reports.values())
    write_json(
        args.out,
        {
            "embeddings": args.embeddings,
            "now_passed": now_passed,
            "sets": {
                # held out: totals only (its per-request outcomes are not for tuning)
                name: {
                    v: {"summary": r[v]["summary"]} if name == "after" else r[v] for v in VARIANTS
                }
                for name, r in reports.items()
            },
        },
    )
    rows = [row for name, report in reports.items() for row in _rows(name, report)]
    print(
        format_table(
            [
                "set / variant",
                "needs reaching the model",
                "requests fully served",
                "by kind: " + " / ".join(KINDS),
                "by channel",
                "top 5 always",
                "block / irrelevant",
                "memory chars in system per turn (mean / max)",
                "estimated tokens of it (mean / max)",
            ],
            rows,
        )
    )
    for name, report in reports.items():
        for variant in VARIANTS:
            sizes = report[variant]["summary"]["profile_memories_by_user"]
            listed = ", ".join(f"{user} {n}" for user, n in sizes.items())
            print(f"profile memories per user, {name} / {variant}: {listed}")
    failed = sum(
        r[v]["summary"]["timed_out"] + r[v]["summary"]["degraded"]
        for r in reports.values()
        for v in VARIANTS
    )
    if failed:
        print(f"\nWARNING: {failed} recalls timed out or degraded: rerun on a quieter machine")
    if not now_passed:
        print(
            "\nrecall() takes no `now`: requests were not anchored to their reference time "
            "(temporal phrases resolve against the real clock, if at all)"
        )
    if not args.quiet:  # the held-out set's misses are not printed: it is not for tuning
        for name, report in reports.items():
            if name == "after":
                continue
            for variant in VARIANTS:
                missed = [
                    f"{c['id']}:{n['id']}"
                    for c in report[variant]["cases"]
                    for n in c["needs"]
                    if not n["reached"]
                ]
                if missed:
                    print(f"{name} / {variant}: missed {', '.join(missed)}")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
