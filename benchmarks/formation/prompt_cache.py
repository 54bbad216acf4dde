"""Prompt caching over a 20-turn conversation with memory formation on (SPEC §12).

A provider caches a prompt's prefix: the system message and the conversation after it, up to the
first byte that differs from the previous call. This script runs one scripted conversation of 20
turns through `create_agent(..., middleware=[memory.middleware()])` with memory formation in the
background (`ScriptedFormationModel`: every user message that states a fact becomes a memory, so
each formation window writes a memory or two), and records every request the chat model
(`FakeToolCallingChatModel`) received. It reports:

- **system-message variants**: distinct system messages over the model calls, and how often the
  system message changed from one call to the next;
- **cached-prefix share**: for each call after the first, the share of the prompt's estimated
  tokens (`text.tokens`) in the prefix it shares with the previous call (system message, then
  each message in order, compared character by character), averaged over the calls;
- **formation reaching the model**: the turns that ask about a fact the user stated earlier in
  the same conversation and that formation had already stored, and whether that memory's text
  was in the turn's prompt (memory block or system message).

Both settings run side by side: `held` (the default: a session keeps the profile it started
with, `recall.profile_hold_seconds`) and `per turn` (`profile_hold_seconds = None`: the profile
is chosen afresh every turn, the behaviour before the hold).

After each turn the script waits for formation to be idle and the new memories to have vectors
(the worst case for the cache: every window's memories are visible at the next turn).

Usage::

    python benchmarks/formation/prompt_cache.py [--embeddings hash|default] [--out PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Final

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import (
    FakeToolCallingChatModel,
    FormationWindow,
    HashEmbeddings,
    ScriptedFormationModel,
)
from langchain_tdai_recall.text.tokens import estimate_tokens

USER: Final = "maria"

SEED: Final = [
    ("Works as a physiotherapist in Valencia", "persona", 70),
    ("Is vegetarian", "persona", 75),
    ("Has two children, Leo (9) and Ana (6)", "persona", 80),
    ("Prefers answers in short bullet points", "instruction", 60),
    ("Drives a hybrid car", "persona", 50),
    ("Plays padel on Thursday evenings", "persona", 55),
    ("Her husband Jorge is a chef", "persona", 72),
    ("Is training for a half marathon in March", "episodic", 60),
    ("Reads historical novels", "persona", 45),
    ("Speaks Spanish, English and some French", "persona", 74),
]
"""What the user's memory holds before the conversation (a small store: all in the profile)."""

TURNS: Final = [
    ("Hi! Can you help me plan the week?", None),
    (
        "We adopted a beagle puppy called Churro last weekend.",
        "Adopted a beagle puppy named Churro",
    ),
    ("What should I cook on Monday?", None),
    ("My mother Carmen moves in with us next month.", "Her mother Carmen moves in next month"),
    ("Any ideas for a rainy Saturday with the kids?", None),
    ("I started learning the violin with a teacher called Ines.", "Learns the violin with Ines"),
    ("What food should I buy for Churro?", None),
    ("I switched padel to Tuesday evenings.", "Plays padel on Tuesday evenings now"),
    ("Remind me what to pack for the half marathon.", None),
    ("How often should Churro go to the vet as a puppy?", None),
    (
        "Jorge's restaurant opens a second place in Alicante.",
        "Jorge opens a restaurant in Alicante",
    ),
    ("Suggest a book for the weekend.", None),
    ("Which room should my mother Carmen get when she moves in?", None),
    ("I hurt my left ankle at padel yesterday.", "Hurt her left ankle playing padel"),
    ("Can I still run the half marathon with my ankle?", None),
    ("How long should I practise the violin each day?", None),
    ("What gift could I bring to Jorge's opening in Alicante?", None),
    ("Plan a light dinner for tonight.", None),
    ("Thanks, that is all for today.", None),
    ("One more thing: what time is padel now?", None),
]
"""(user message, the memory formation forms from it or None)."""

ASKS: Final = {6: 1, 9: 1, 12: 3, 14: 13, 15: 5, 16: 10, 19: 7}
"""Turn index -> index of the earlier turn whose formed memory it needs."""


def _extract(window: FormationWindow) -> list[dict[str, Any]]:
    facts = dict(TURNS)
    return [
        {"content": facts[m["text"]], "type": "persona", "priority": 65, "source_ids": [m["id"]]}
        for m in window.messages
        if m.get("role") == "user" and facts.get(m["text"])
    ]


def _prompt_parts(messages: list[BaseMessage]) -> list[str]:
    return [f"{m.type}:{m.content}" for m in messages]


def _shared_prefix_tokens(before: list[str], now: list[str]) -> tuple[int, int]:
    """(estimated tokens of the prefix `now` shares with `before`, estimated tokens of `now`)."""
    total = sum(estimate_tokens(p) for p in now)
    shared = 0
    for old, new in zip(before, now, strict=False):
        if old == new:
            shared += estimate_tokens(new)
            continue
        common = 0
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            common += 1
        shared += estimate_tokens(new[:common])
        break
    return shared, total


def _wait(memory: TdaiMemory, timeout: float = 30.0) -> None:
    formation = memory._formation  # the benchmark waits like the tests do
    assert formation is not None
    memory._writer.flush(timeout)
    formation.wait_idle(timeout)
    deadline = time.monotonic() + timeout
    while memory.stats(user_id=USER).pending_vectors and time.monotonic() < deadline:
        time.sleep(0.02)


def run(*, hold: bool, embeddings: Any) -> dict[str, Any]:
    """One conversation; the figures of one setting."""
    config: dict[str, Any] = {
        "recall": {"profile_hold_seconds": 600 if hold else None},
        "pipeline": {"l2MinIntervalSeconds": 0, "l2DelayAfterL1Seconds": 0},
    }
    model = FakeToolCallingChatModel(default_reply="Sure.")
    formation = ScriptedFormationModel(extract=_extract)
    with TdaiMemory.open(
        None, embeddings=embeddings, config=config, extraction_model=formation
    ) as memory:
        memory.add_memories(
            [{"content": c, "type": t, "priority": p} for c, t, p in SEED], user_id=USER
        )
        memory.flush()
        agent = create_agent(
            model,
            system_prompt="You are Maria's assistant.",
            middleware=[memory.middleware()],
            checkpointer=InMemorySaver(),
        )
        run_config = {"configurable": {"thread_id": "week", "user_id": USER}}
        calls_before = 0
        turn_of_call: list[int] = []
        stored_before: list[set[str]] = []
        for turn, (text, _) in enumerate(TURNS):
            stored_before.append({m.content for m in memory.list_memories(user_id=USER)})
            agent.invoke({"messages": [HumanMessage(text)]}, run_config)
            turn_of_call += [turn] * (len(model.requests) - calls_before)
            calls_before = len(model.requests)
            _wait(memory)
        formed = len(memory.list_memories(user_id=USER)) - len(SEED)
    requests = model.requests
    systems = [str(r[0].content) if r and r[0].type == "system" else "" for r in requests]
    changes = sum(1 for a, b in itertools.pairwise(systems) if a != b)
    shares = []
    for before, now in itertools.pairwise(requests):
        shared, total = _shared_prefix_tokens(_prompt_parts(before), _prompt_parts(now))
        shares.append(shared / total if total else 1.0)
    reached = {}
    for turn, source in ASKS.items():
        fact = TURNS[source][1]
        assert fact is not None
        if fact not in stored_before[turn]:
            continue  # formation had not formed it yet (its window runs later)
        prompt = "\n".join(
            "\n".join(_prompt_parts(r)[:1] + _prompt_parts(r)[-1:])
            for r, t in zip(requests, turn_of_call, strict=True)
            if t == turn
        )
        reached[turn] = fact in prompt  # the memory's text: the block or the system message
    return {
        "model_calls": len(requests),
        "memories_formed": formed,
        "system_variants": len(set(systems)),
        "system_changes": changes,
        "cached_prefix_share_mean": round(sum(shares) / len(shares), 4),
        "cached_prefix_share_min": round(min(shares), 4),
        "system_tokens_mean": round(sum(estimate_tokens(s) for s in systems) / len(systems), 1),
        "formed_reached": sum(reached.values()),
        "formed_asked": len(reached),
        "reached_by_turn": {str(k + 1): v for k, v in reached.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embeddings", choices=("hash", "default"), default="default")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/prompt_cache.json"))
    args = parser.parse_args(argv)
    if args.embeddings == "hash":
        embeddings: Any = HashEmbeddings(dims=64)
    else:
        from langchain_tdai_recall.embeddings import DefaultEmbeddings

        embeddings = DefaultEmbeddings()
    results = {
        "embeddings": args.embeddings,
        "turns": len(TURNS),
        "held": run(hold=True, embeddings=embeddings),
        "per_turn": run(hold=False, embeddings=embeddings),
    }
    for name in ("held", "per_turn"):
        r = results[name]
        print(
            f"{name:9s} calls={r['model_calls']} formed={r['memories_formed']} "
            f"system variants={r['system_variants']} changes={r['system_changes']} "
            f"cached prefix share mean={r['cached_prefix_share_mean']:.3f} "
            f"min={r['cached_prefix_share_min']:.3f} "
            f"formed facts reaching the model={r['formed_reached']}/{r['formed_asked']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
