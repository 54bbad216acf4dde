"""Shared helpers of the formation tests: stores with a scripted model, turns, waiting."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel

FAST: dict[str, Any] = {
    "pipeline": {
        "enabled": False,  # tests that exercise the background switch it on
        "l2MinIntervalSeconds": 0,
        "l2DelayAfterL1Seconds": 0,
        "closeTimeoutSeconds": 5,
    },
    "extraction": {"retryBaseSeconds": 0.05, "retryMaxSeconds": 0.2, "timeoutSeconds": 5},
    "timezone": "+08:00",
}


def merge(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in (extra or {}).items():
        if isinstance(value, dict):
            out.setdefault(key, {}).update(value)
        else:
            out[key] = value
    return out


OpenMemory = Callable[..., TdaiMemory]


@pytest.fixture(params=["memory", "directory"])
def open_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenMemory]:
    """Open stores (in memory or in a directory) with a scripted model; all closed at the end."""
    opened: list[TdaiMemory] = []

    def factory(
        model: Any = None, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> TdaiMemory:
        path = None if request.param == "memory" else tmp_path / "store"
        memory = TdaiMemory.open(
            path,
            embeddings=kwargs.pop("embeddings", HashEmbeddings(dims=64)),
            config=merge(FAST, config),
            extraction_model=model if model is not None else ScriptedFormationModel(),
            **kwargs,
        )
        opened.append(memory)
        return memory

    yield factory
    for memory in opened:
        memory.close()


def say(
    memory: TdaiMemory,
    texts: list[str],
    *,
    session: str = "s1",
    user_id: str | None = None,
    answer: str = "OK.",
) -> int:
    """Record one turn (user text + assistant answer) per text; returns messages stored."""
    stored = 0
    for text in texts:
        stored += memory.record_messages(
            [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
            session_key=session,
            user_id=user_id,
        )
    return stored


def contents(memory: TdaiMemory, **scope: Any) -> list[str]:
    return sorted(m.content for m in memory.list_memories(**scope))


def wait_idle(memory: TdaiMemory, timeout: float = 10.0) -> None:
    """Wait until captured turns are written (they notify formation) and formation is idle."""
    formation = memory._formation
    assert formation is not None
    assert memory._writer.flush(timeout), "the L0 writer did not drain"
    assert formation.wait_idle(timeout), "formation did not become idle"
