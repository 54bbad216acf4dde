"""The memory that must not be missed is injected, at default settings, with the default embedder.

`tests/fixtures/critical/cases.json` is the team's own set (issue 7 #4): safety facts, medication,
hard rules, multi-part and paraphrased questions, Chinese, English and cross-language, each user
with 6-8 ordinary memories around the critical ones. `benchmarks/quality/critical.py` reports the
same cases in more detail.
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
