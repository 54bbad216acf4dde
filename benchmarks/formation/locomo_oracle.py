"""Memory formation end to end on LoCoMo with an oracle model (SPEC §12, formation issue).

Every dialogue turn of every session is recorded through `record_messages`, as the middleware
does after each agent turn (one LoCoMo speaker is the "user", the other the "assistant"), with
formation running in the background (default schedule: warm-up 1, 2, 4, then every 5 turns);
`flush()` then forms what is left. The chat model is an *oracle*: for each extraction window it
answers the dataset's observations whose evidence ends inside that window (an observation is
anchored at its last evidence turn), citing the window's evidence messages; consolidation
answers "add" for everything (LoCoMo's observations are distinct facts).

Reported:

- **stored / expected**: distinct observation texts found in the formed store over those of the
  dataset (target 100 %); **duplicates**: stored memories whose text repeats another's (target 0);
  **unexpected**: stored memories that are no observation.
- **R@5** of the questions (categories 1-4) against the formed store and against direct ingestion
  of the observations (`add_memories`, as `benchmarks/quality/locomo.py` does), both in the
  ranking setting (thresholds 0) and with default settings (`recall()`); target: within 1 point.
  A formed memory covers the evidence turns of the observation whose text it carries.
- **prompt size** per extraction call (characters of system + user prompt): p50 / p99 / max,
  beside the bound the configured caps imply.
- **turn overhead**: latency with formation on vs off (same turns, same embedder, a directory
  store), p50 / p99, for the two ways a turn reaches the store: an agent turn as the adapters
  hand it over (`_capture_turn`, what the middleware, `wrap_model` and the executor wrapper call;
  the write and the formation hook run on the background writer) and an explicit
  `record_messages` call (written, then the hook, in the caller's thread); and the formation hook
  alone. Target: p99 difference ≤ 5 ms.
- **throughput** with an instant model: turns per second formed by `extract()` over a store with
  everything recorded, and recorded-and-formed end to end.

LoCoMo is CC BY-NC 4.0: it is read from `../shared/data/locomo` and never copied here.

Usage::

    python benchmarks/formation/locomo_oracle.py [--data PATH] [--embeddings default|hash|none]
        [--limit-conversations N] [--cache-dir DIR] [--out PATH] [--quiet]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))

from _common import (
    DEFAULT_DATA_ROOT,
    EMBEDDER_CHOICES,
    HEADLINE_CATEGORIES,
    REPO_ROOT,
    CachedEmbeddings,
    Conversation,
    load_locomo,
    make_embeddings,
    mean,
    percentiles,
    recall_at_k,
    write_json,
)
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import (
    FormationWindow,
    HashEmbeddings,
    ScriptedFormationModel,
)
from langchain_tdai_recall.text.fingerprint import normal_form
from langchain_tdai_recall.types import Scope

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "formation_locomo.json"
OVERHEAD_OUT = REPO_ROOT / "benchmarks" / "results" / "formation_overhead.json"
PACED_THINK_MS = 20.0
"""Pause between turns in the paced overhead run, standing in for the agent's model call (a
real one takes hundreds of milliseconds)."""
TIMEZONE = "+00:00"

log = logging.getLogger("bench.formation")


# -- the recorded conversation and the oracle ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One L0 message as recorded, with the LoCoMo turn it is."""

    conv: int
    index: int
    dia_id: str
    session: int
    role: str
    text: str
    recorded_at: str


@dataclass(slots=True)
class Plan:
    """Everything recorded, and what the oracle knows about it."""

    messages: list[list[Message]] = field(default_factory=list)
    """Per conversation, in recording order."""
    anchored: list[dict[int, list[tuple[str, tuple[str, ...]]]]] = field(default_factory=list)
    """Per conversation: message index → observations (text, evidence ids) anchored there."""
    by_key: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    """(time as shown to the model, text) → (conversation, message index)."""
    dia_index: list[dict[str, int]] = field(default_factory=list)


def _message_text(turn: Any) -> str:
    text = turn.text.strip()
    if turn.image_caption:
        text += f" [shares a photo: {turn.image_caption}]"
    return text


def build_plan(convs: Sequence[Conversation]) -> Plan:
    plan = Plan()
    for c, conv in enumerate(convs):
        speaker_a = conv.speakers[0]
        messages: list[Message] = []
        for i, turn in enumerate(conv.turns):
            start = turn.date or dt.datetime(2023, 1, 1)
            when = start.replace(tzinfo=dt.UTC) + dt.timedelta(seconds=i % 60)
            messages.append(
                Message(
                    conv=c,
                    index=i,
                    dia_id=turn.dia_id,
                    session=turn.session,
                    role="user" if turn.speaker == speaker_a else "assistant",
                    text=_message_text(turn),
                    recorded_at=when.isoformat(),
                )
            )
        index = {m.dia_id: m.index for m in messages}
        last_of_session: dict[int, int] = {}
        for m in messages:
            last_of_session[m.session] = m.index
        anchored: dict[int, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
        for obs in conv.observations:
            positions = [index[d] for d in obs.source_ids if d in index]
            anchor = max(positions) if positions else last_of_session[obs.session]
            anchored[anchor].append((obs.text, obs.source_ids))
        for m in messages:
            shown = dt.datetime.fromisoformat(m.recorded_at).isoformat(timespec="minutes")
            plan.by_key.setdefault((shown, m.text), []).append((c, m.index))
        plan.messages.append(messages)
        plan.anchored.append(dict(anchored))
        plan.dia_index.append(index)
    return plan


class Oracle:
    """Answers each extraction window with the observations anchored inside it."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.per_window: list[int] = []
        self.unaligned = 0

    def _align(self, window: FormationWindow) -> tuple[int, int] | None:
        items = window.messages
        first = items[0]
        for conv, start in self.plan.by_key.get((str(first["time"]), str(first["text"])), []):
            msgs = self.plan.messages[conv]
            if start + len(items) > len(msgs):
                continue
            if all(msgs[start + j].text == str(items[j]["text"]) for j in range(len(items))):
                return conv, start
        return None

    def extract(self, window: FormationWindow) -> Any:
        found = self._align(window)
        if found is None:
            self.unaligned += 1
            msg = "the oracle could not place this window"
            raise RuntimeError(msg)
        conv, start = found
        aliases = {
            self.plan.messages[conv][start + j].dia_id: str(item["id"])
            for j, item in enumerate(window.messages)
        }
        memories = []
        for j in range(len(window.messages)):
            for text, evidence in self.plan.anchored[conv].get(start + j, []):
                memories.append(
                    {
                        "content": text,
                        "type": "episodic",
                        "priority": 50,
                        "source_ids": [aliases[d] for d in evidence if d in aliases],
                        "activity_start": self.plan.messages[conv][start + j].recorded_at[:10],
                    }
                )
        self.per_window.append(len(memories))
        return {"situation": "", "memories": memories}


def formation_config(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "timezone": TIMEZONE,
        "pipeline": {"l1IdleTimeoutSeconds": 3600, "closeTimeoutSeconds": 600},
    }
    for key, value in (extra or {}).items():
        cfg.setdefault(key, {}).update(value)
    return cfg


Path_ = Literal["record_messages", "capture"]
"""How turns reach the store: an explicit `record_messages` call, or an agent turn handed to the
background writer (`_capture_turn`, what the middleware, `wrap_model` and `ExecutorMemory` do)."""


def record(
    memory: TdaiMemory,
    plan: Plan,
    convs: Sequence[Conversation],
    *,
    think_ms: float = 0.0,
    via: Path_ = "record_messages",
) -> list[float]:
    """Record every turn (a user message and the answers up to the next user message).

    `think_ms` waits between turns, standing in for the agent's model call. Returns the latency
    of each turn's hand-over in milliseconds (`via="capture"` gives the messages the writer's
    ids and times, so the oracle cannot place them: use it with the default scripted model).
    """
    latencies: list[float] = []
    for c, conv in enumerate(convs):
        pending: list[Message] = []

        def flush(batch: list[Message], conv_id: str = conv.sample_id) -> None:
            if not batch:
                return
            session = f"session_{batch[0].session}"
            started = time.perf_counter()
            if via == "capture":
                memory._capture_turn(
                    [{"role": m.role, "content": m.text} for m in batch],
                    scope=Scope(conv_id),
                    session_key=session,
                )
            else:
                memory.record_messages(
                    [
                        {
                            "id": m.dia_id,
                            "role": m.role,
                            "content": m.text,
                            "recorded_at": m.recorded_at,
                        }
                        for m in batch
                    ],
                    session_key=session,
                    user_id=conv_id,
                )
            latencies.append((time.perf_counter() - started) * 1000)
            if think_ms:
                time.sleep(think_ms / 1000)

        for m in plan.messages[c]:
            starts_turn = m.role == "user" and any(p.role == "assistant" for p in pending)
            if pending and (starts_turn or m.session != pending[0].session):
                flush(pending)
                pending = []
            pending.append(m)
        flush(pending)
    return latencies


# -- quality --------------------------------------------------------------------------------------


def r_at_5(
    memory: TdaiMemory,
    convs: Sequence[Conversation],
    coverage_of: Any,
    *,
    ranking: bool,
) -> float:
    rows: list[float] = []
    for conv in convs:
        for q in conv.questions:
            if q.category not in HEADLINE_CATEGORIES:
                continue
            if ranking:
                hits = memory.search_memories(q.question, limit=5, user_id=conv.sample_id)
                covered = [coverage_of(conv, h.id, h.content) for h in hits]
            else:
                result = memory.recall(q.question, user_id=conv.sample_id)
                mems = result.memories if result is not None else ()
                covered = [coverage_of(conv, m.id, m.content) for m in mems]
            rows.append(100 * recall_at_k(covered, q.evidence, 5))
    return round(mean(rows), 2)


def _direct_store(
    convs: Sequence[Conversation], embeddings: Embeddings | None, cfg: dict[str, Any]
) -> tuple[TdaiMemory, dict[tuple[str, str], tuple[str, ...]]]:
    """Observations ingested directly (as benchmarks/quality/locomo.py does), with coverage."""
    direct = TdaiMemory.open(None, embeddings=embeddings, config=formation_config(cfg))
    coverage: dict[tuple[str, str], tuple[str, ...]] = {}
    for conv in convs:
        records = []
        for idx, o in enumerate(conv.observations):
            rid = f"obs-{idx:05d}"
            coverage[(conv.sample_id, rid)] = o.source_ids
            records.append(
                {
                    "id": rid,
                    "content": o.text,
                    "type": "episodic",
                    "timestamp": o.date.isoformat() if o.date else None,
                }
            )
        direct.add_memories(records, user_id=conv.sample_id, show_progress=False)
    return direct, coverage


def _storage(memory: TdaiMemory, convs: Sequence[Conversation]) -> dict[str, Any]:
    totals = {"expected": 0, "stored": 0, "duplicates": 0, "unexpected": 0}
    per_conv: dict[str, Any] = {}
    for conv in convs:
        expected = {normal_form(o.text) for o in conv.observations}
        stored = [normal_form(m.content) for m in memory.list_memories(user_id=conv.sample_id)]
        row = {
            "expected": len(expected),
            "stored": len(expected & set(stored)),
            "duplicates": len(stored) - len(set(stored)),
            "unexpected": len(set(stored) - expected),
        }
        per_conv[conv.sample_id] = row
        for key, value in row.items():
            totals[key] += value
    return {
        **totals,
        "stored_pct": round(100 * totals["stored"] / max(totals["expected"], 1), 3),
        "per_conversation": per_conv,
    }


def _prompt_sizes(model: ScriptedFormationModel, memory: TdaiMemory) -> dict[str, Any]:
    calls = model.calls_of("extract")
    sizes = [c.prompt_chars for c in calls]
    cfg = memory.config.extraction
    system = max(len(c.system) for c in calls)
    pct = percentiles(sizes, (50, 99))
    per_message = 100 * (cfg.window_messages + cfg.background_messages)
    return {
        "calls": len(calls),
        "p50": pct["p50"],
        "p99": pct["p99"],
        "max": max(sizes),
        "system_prompt_max": system,
        "bound": system + cfg.window_chars + cfg.background_chars + per_message + 200,
        "note": "bound = system prompt + window_chars + background_chars + 100 characters of "
        "JSON per message + 200 for the headers",
    }


def quality(
    convs: Sequence[Conversation], embeddings: Embeddings | None, plan: Plan
) -> dict[str, Any]:
    """Form every conversation through the pipeline; compare it with direct ingestion."""
    oracle = Oracle(plan)
    model = ScriptedFormationModel(extract=oracle.extract)
    texts = {
        (conv.sample_id, normal_form(o.text)): o.source_ids
        for conv in convs
        for o in conv.observations
    }

    def by_text(conv: Conversation, _id: str, content: str) -> tuple[str, ...]:
        return texts.get((conv.sample_id, normal_form(content)), ())

    out: dict[str, Any] = {}
    ranking_cfg = {"recall": {"score_threshold": 0.0, "keyword_score_threshold": 0.0}}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        with TdaiMemory.open(
            Path(tmp) / "formed",
            embeddings=embeddings,
            config=formation_config(),
            extraction_model=model,
        ) as memory:
            record(memory, plan, convs)
            # what the background runs left, formed in the foreground (as flush() does), with
            # the report that flush() does not return
            flushed = memory.extract(all_scopes=True)
            memory.flush()
            out["formed_in_s"] = round(time.perf_counter() - started, 1)
            out["flush_report"] = flushed.event()
            out["storage"] = _storage(memory, convs)
            out["prompt_chars"] = _prompt_sizes(model, memory)
            out["calls"] = {
                "extract": len(model.calls_of("extract")),
                "consolidate": len(model.calls_of("consolidate")),
                "scenes": len(model.calls_of("scenes")),
                "persona": len(model.calls_of("persona")),
                "oracle_unaligned_windows": oracle.unaligned,
                "memories_per_window_max": max(oracle.per_window or [0]),
            }
            direct, coverage = _direct_store(convs, embeddings, {})

            def by_id(conv: Conversation, rid: str, _content: str) -> tuple[str, ...]:
                return coverage.get((conv.sample_id, rid), ())

            with direct:
                out["recall_at_5"] = {
                    "default": {
                        "direct": r_at_5(direct, convs, by_id, ranking=False),
                        "formed": r_at_5(memory, convs, by_text, ranking=False),
                    }
                }
        direct_rank, coverage = _direct_store(convs, embeddings, ranking_cfg)
        with (
            direct_rank,
            TdaiMemory.open(
                Path(tmp) / "formed", embeddings=embeddings, config=formation_config(ranking_cfg)
            ) as formed_rank,
        ):
            out["recall_at_5"]["ranking"] = {
                "direct": r_at_5(direct_rank, convs, by_id, ranking=True),
                "formed": r_at_5(formed_rank, convs, by_text, ranking=True),
            }
    for setting in out["recall_at_5"].values():
        setting["difference"] = round(setting["formed"] - setting["direct"], 2)
    return out


# -- turn overhead and throughput ---------------------------------------------------------------


def overhead(
    convs: Sequence[Conversation],
    plan: Plan,
    rounds: int,
    *,
    think_ms: float = 0.0,
    via: Path_ = "record_messages",
) -> dict[str, Any]:
    """Turn latency with formation off and on (hash embedder, directory store)."""
    result: dict[str, Any] = {"via": via}
    samples: dict[str, list[float]] = {"off": [], "on": []}
    hook: list[float] = []
    for _ in range(rounds):
        for mode in ("off", "on"):
            with tempfile.TemporaryDirectory() as tmp:
                model: ScriptedFormationModel | None = None
                if mode == "on":  # an instant model that forms every user message
                    model = (
                        ScriptedFormationModel(extract=Oracle(plan).extract)
                        if via == "record_messages"
                        else ScriptedFormationModel()
                    )
                memory = TdaiMemory.open(
                    Path(tmp) / mode,
                    embeddings=HashEmbeddings(),
                    config=formation_config(),
                    extraction_model=model,
                )
                gc.collect()
                samples[mode] += record(memory, plan, convs, think_ms=think_ms, via=via)
                if mode == "on":
                    scope = Scope("probe")
                    for _ in range(2000):
                        started = time.perf_counter()
                        memory._after_capture(scope, "probe")
                        hook.append((time.perf_counter() - started) * 1000)
                memory.close()
    for mode, values in samples.items():
        pct = percentiles(values, (50, 90, 99))
        result[mode] = {
            "turns": len(values),
            "p50_ms": round(pct["p50"], 3),
            "p90_ms": round(pct["p90"], 3),
            "p99_ms": round(pct["p99"], 3),
            "mean_ms": round(statistics.fmean(values), 3),
        }
    result["p99_difference_ms"] = round(result["on"]["p99_ms"] - result["off"]["p99_ms"], 3)
    result["p50_difference_ms"] = round(result["on"]["p50_ms"] - result["off"]["p50_ms"], 3)
    hp = percentiles(hook, (50, 99))
    result["hook_alone"] = {
        "calls": len(hook),
        "p50_ms": round(hp["p50"], 4),
        "p99_ms": round(hp["p99"], 4),
    }
    return result


def throughput(
    convs: Sequence[Conversation], plan: Plan, embeddings: Embeddings | None, label: str
) -> dict[str, Any]:
    turns = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = ScriptedFormationModel(extract=Oracle(plan).extract)
        memory = TdaiMemory.open(
            Path(tmp) / "tp",
            embeddings=embeddings,
            config=formation_config({"pipeline": {"enabled": False}}),
            extraction_model=model,
        )
        turns = len(record(memory, plan, convs))
        started = time.perf_counter()
        report = memory.extract(all_scopes=True)
        formed_s = time.perf_counter() - started
        memory.close()
    with tempfile.TemporaryDirectory() as tmp:
        model = ScriptedFormationModel(extract=Oracle(plan).extract)
        started = time.perf_counter()
        memory = TdaiMemory.open(
            Path(tmp) / "e2e",
            embeddings=embeddings,
            config=formation_config(),
            extraction_model=model,
        )
        record(memory, plan, convs)
        memory.flush()
        e2e_s = time.perf_counter() - started
        memory.close()
    return {
        "embedder": label,
        "turns": turns,
        "messages": report.messages,
        "windows": report.windows,
        "extract_s": round(formed_s, 2),
        "turns_per_s_formation": round(turns / formed_s, 1),
        "record_and_form_s": round(e2e_s, 2),
        "turns_per_s_end_to_end": round(turns / e2e_s, 1),
    }


def _print(payload: dict[str, Any]) -> None:
    q = payload["quality"]
    s = q["storage"]
    print(
        f"stored/expected: {s['stored']}/{s['expected']} = {s['stored_pct']} %  "
        f"duplicates: {s['duplicates']}  unexpected: {s['unexpected']}"
    )
    for setting, r in q["recall_at_5"].items():
        print(f"R@5 {setting}: direct {r['direct']}  formed {r['formed']}  diff {r['difference']}")
    p = q["prompt_chars"]
    print(f"prompt chars p50 {p['p50']} p99 {p['p99']} max {p['max']} (bound {p['bound']})")
    for name, row in payload["turn_overhead"].items():
        print(
            f"turn overhead ({name}) p99: off {row['off']['p99_ms']} ms, on {row['on']['p99_ms']} "
            f"ms, diff {row['p99_difference_ms']} ms; hook alone p99 "
            f"{row['hook_alone']['p99_ms']} ms"
        )
    for row in payload["throughput"]:
        print(
            f"throughput ({row['embedder']}): {row['turns_per_s_formation']} turns/s formation, "
            f"{row['turns_per_s_end_to_end']} turns/s end to end"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_ROOT / "locomo")
    parser.add_argument("--embeddings", choices=EMBEDDER_CHOICES, default="default")
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--overhead-rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--overhead-only",
        action="store_true",
        help="only the turn overhead (no quality run, no throughput): a few minutes; writes "
        "formation_overhead.json unless --out is given",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)

    started = time.perf_counter()
    convs = load_locomo(args.data)
    if args.limit_conversations is not None:
        convs = convs[: args.limit_conversations]
    if args.overhead_only:
        return _overhead_only(convs, args.overhead_rounds, args.out or OVERHEAD_OUT, args.quiet)
    plan = build_plan(convs)
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    log.info("quality run (%s embedder) ...", args.embeddings)
    q = quality(convs, embeddings, plan)
    if isinstance(embeddings, CachedEmbeddings):
        embeddings.save()
    log.info("turn overhead ...")
    o = _turn_overheads(convs, args.overhead_rounds)
    log.info("throughput ...")
    t = [throughput(convs, plan, HashEmbeddings(), "hash")]
    payload: dict[str, Any] = {
        "benchmark": "formation-locomo-oracle",
        "data": str(args.data),
        "conversations": [c.sample_id for c in convs],
        "turns": sum(len(c.turns) for c in convs),
        "observations": sum(len(c.observations) for c in convs),
        "questions_headline": sum(
            1 for c in convs for q2 in c.questions if q2.category in HEADLINE_CATEGORIES
        ),
        "embeddings": args.embeddings,
        "embedder_identity": getattr(embeddings, "identity", None),
        "settings": formation_config(),
        "targets": {
            "stored_pct": 100,
            "duplicates": 0,
            "recall_at_5_difference_max": 1.0,
            "turn_overhead_p99_ms_max": 5.0,
        },
        "quality": q,
        "turn_overhead": o,
        "throughput": t,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out = args.out or DEFAULT_OUT
    write_json(out, payload)
    if not args.quiet:
        _print(payload)
        print(f"written to {out}")
    return 0


def _turn_overheads(convs: Sequence[Conversation], rounds: int) -> dict[str, Any]:
    """The four overhead runs: capture and `record_messages`, back to back and paced."""
    few = convs[:3]
    few_plan = build_plan(few)
    o: dict[str, Any] = {}
    for via in ("capture", "record_messages"):
        o[f"{via}_back_to_back"] = overhead(few, few_plan, rounds, via=via)
        o[f"{via}_paced_{PACED_THINK_MS:g}ms"] = overhead(
            few, few_plan, rounds, think_ms=PACED_THINK_MS, via=via
        )
    return o


def _overhead_only(convs: Sequence[Conversation], rounds: int, out: Path, quiet: bool) -> int:
    started = time.perf_counter()
    o = _turn_overheads(convs, rounds)
    payload: dict[str, Any] = {
        "benchmark": "formation-turn-overhead",
        "conversations": [c.sample_id for c in convs[:3]],
        "rounds": rounds,
        "load_average": os.getloadavg()[0],
        "targets": {"turn_overhead_p99_ms_max": 5.0},
        "turn_overhead": o,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    write_json(out, payload)
    if not quiet:
        for name, row in o.items():
            print(
                f"turn overhead ({name}) p99: off {row['off']['p99_ms']} ms, on "
                f"{row['on']['p99_ms']} ms, diff {row['p99_difference_ms']} ms"
            )
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
