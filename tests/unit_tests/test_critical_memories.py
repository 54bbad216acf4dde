"""The memory that must not be missed reaches the model, at default settings, with the default
embedder.

`tests/fixtures/critical/cases.json` is the team's own set (issue 7 #4): safety facts, medication,
hard rules, multi-part and paraphrased questions, Chinese, English and cross-language, each user
with 6-8 ordinary memories around the critical ones. `first_person.json` and
`first_person_after.json` (issue 15) are first-person requests whose need is implicit, to users
with 5-12 memories of ordinary priority, plus irrelevant requests to the same users.
`benchmarks/quality/critical.py` reports the same cases in more detail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import RecallResult, TdaiMemory

CASES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "critical" / "cases.json").read_text(encoding="utf-8")
)
MEMORY_BY_ID = {m["id"]: m for u in CASES["users"] for m in u["memories"]}

pytestmark = pytest.mark.slow  # loads the bundled embedder


@pytest.fixture(scope="module")
def store() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None) as memory:  # the defaults: bundled embedder, default config
        for user in CASES["users"]:
            memory.add_memories(user["memories"], user_id=user["user_id"])
        assert memory.flush(timeout=600)
        yield memory


def _injected_text(result: RecallResult | None) -> str:
    if result is None:
        return ""
    return (result.prepend_context or "") + "\n" + (result.append_system_context or "")


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["id"])
def test_critical_memory_is_injected(store: TdaiMemory, case: dict[str, Any]) -> None:
    critical = MEMORY_BY_ID[case["critical"]]
    result = store.recall(case["query"], user_id=case["user_id"])
    assert result is not None, "recall timed out or failed"
    assert critical["content"] in _injected_text(result), (case["query"], critical["content"])


def test_ordinary_memories_are_not_pinned(store: TdaiMemory) -> None:
    """Pinning is for the few memories that matter every turn, not for everything."""
    for user in CASES["users"]:
        result = store.recall("hello", user_id=user["user_id"])
        assert result is not None
        pinned = {m.id for m in result.pinned} | {m.id for m in result.standing_rules}
        ordinary = {m["id"] for m in user["memories"] if "-o" in m["id"]}
        assert not pinned & ordinary


FIRST_PERSON = [
    json.loads((Path(__file__).parents[1] / "fixtures" / "critical" / name).read_text("utf-8"))
    for name in ("first_person.json", "first_person_after.json")
]


@pytest.fixture(scope="module")
def first_person_store() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None) as memory:
        for data in FIRST_PERSON:
            for user in data["users"]:
                memory.add_memories(user["memories"], user_id=user["user_id"])
        assert memory.flush(timeout=600)
        yield memory


@pytest.mark.parametrize(
    "case", [c for d in FIRST_PERSON for c in d["cases"]], ids=lambda c: str(c["id"])
)
def test_first_person_request_brings_what_it_needs(
    first_person_store: TdaiMemory, case: dict[str, Any]
) -> None:
    users = {u["user_id"]: u for d in FIRST_PERSON for u in d["users"]}
    needed = next(m for m in users[case["user_id"]]["memories"] if m["id"] == case["critical"])
    result = first_person_store.recall(case["query"], user_id=case["user_id"])
    assert result is not None
    assert needed["content"] in _injected_text(result), (case["query"], needed["content"])


def test_irrelevant_requests_keep_the_memory_block_quiet(first_person_store: TdaiMemory) -> None:
    requests = [r for d in FIRST_PERSON for r in d["irrelevant"]]
    injected = []
    for request in requests:
        result = first_person_store.recall(request["query"], user_id=request["user_id"])
        assert result is not None
        injected.append(len(result.memories))
    assert sum(injected) / len(injected) <= 0.5, injected
