"""Recall for one turn under the failure policy, and the per-run cache that reuses it.

`run_recall` / `arun_recall` call the memory's recall, report it as the `tdai_recall` retriever
run (`_turn.run`) and turn a failure into an empty `RecallOutcome` (`_runtime.failure`); `TurnCache`
keeps per-run values outside the agent state, bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from langchain_core.runnables import RunnableConfig

from langchain_tdai_recall._runtime.failure import report_failure
from langchain_tdai_recall._turn.identity import TurnIdentity
from langchain_tdai_recall._turn.run import (
    afinish_recall_run,
    astart_recall_run,
    finish_recall_run,
    recall_failure,
    start_recall_run,
)
from langchain_tdai_recall.types import RecallResult

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = ["RecallOutcome", "TurnCache", "TurnRecall", "arun_recall", "run_recall"]


logger = logging.getLogger("langchain_tdai_recall._turn")


_KEPT_ENTRIES: Final = 512
"""Bound of every per-run map here: the oldest runs are forgotten first."""

T = TypeVar("T")


# -- recall ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    """One recall call: its result (or `None`), how long it took, and why it failed if it did."""

    result: RecallResult | None
    elapsed_ms: float
    error: str | None = None


def _recall_failed(memory: MemoryHost, exc: Exception, started: float) -> RecallOutcome:
    report_failure(exc, action="recall", on_error=memory.config.recall.on_error)
    return RecallOutcome(None, (time.perf_counter() - started) * 1000, type(exc).__name__)


def _recall_done(result: RecallResult | None, started: float) -> RecallOutcome:
    elapsed = (time.perf_counter() - started) * 1000
    if result is not None:
        logger.debug(
            "recall: %d memories, strategy=%s, %d chars injected, %.1f ms",
            len(result.memories),
            result.strategy,
            result.injected_chars,
            elapsed,
        )
    return RecallOutcome(result, elapsed, result.error if result is not None else None)


def _traced(memory: MemoryHost) -> bool:
    """Whether tracing may carry the memory texts (`recall.trace_memory_text`)."""
    return memory.config.recall.trace_memory_text


def run_recall(
    memory: MemoryHost,
    text: str,
    identity: TurnIdentity,
    *,
    system_prompt: str | None = None,
    tools_guide: bool | tuple[str, ...] = True,
    config: RunnableConfig | None = None,
) -> RecallOutcome:
    """Recall for one turn under the failure policy (a failure injects nothing).

    `system_prompt` is the app's own system prompt (the language signal of the system context);
    `tools_guide` says whether the model has the memory tools (or which of them). Callback
    handlers of the run (`config`, else the current run's) see the recall as a child retriever
    run named `tdai_recall` with the injected memories as documents (`_turn.run`; their text
    only with `recall.trace_memory_text`).
    """
    scope = identity.scope
    run = start_recall_run(text, scope, identity.session_key, config)
    started = time.perf_counter()
    try:
        result = memory.recall(
            text,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=identity.session_key,
            system_prompt=system_prompt,
            tools_guide=tools_guide,
        )
    except Exception as exc:  # recall must never break the agent (unless told to)
        finish_recall_run(run, scope, None, exc, text=_traced(memory))
        return _recall_failed(memory, exc, started)
    outcome = _recall_done(result, started)
    if run is not None:
        failure = recall_failure(memory.config.recall, result, outcome.elapsed_ms)
        finish_recall_run(run, scope, result, failure, text=_traced(memory))
    return outcome


async def arun_recall(
    memory: MemoryHost,
    text: str,
    identity: TurnIdentity,
    *,
    system_prompt: str | None = None,
    tools_guide: bool | tuple[str, ...] = True,
    config: RunnableConfig | None = None,
) -> RecallOutcome:
    """Async version of `run_recall`."""
    scope = identity.scope
    run = await astart_recall_run(text, scope, identity.session_key, config)
    started = time.perf_counter()
    try:
        result = await memory.arecall(
            text,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=identity.session_key,
            system_prompt=system_prompt,
            tools_guide=tools_guide,
        )
    except Exception as exc:
        await afinish_recall_run(run, scope, None, exc, text=_traced(memory))
        return _recall_failed(memory, exc, started)
    outcome = _recall_done(result, started)
    if run is not None:
        failure = recall_failure(memory.config.recall, result, outcome.elapsed_ms)
        await afinish_recall_run(run, scope, result, failure, text=_traced(memory))
    return outcome


@dataclass(frozen=True, slots=True)
class TurnRecall:
    """What was recalled for one turn, kept for the turn's model calls and its report."""

    identity: TurnIdentity
    """Identity the recall ran under."""
    outcome: RecallOutcome
    """The recall and its timing."""


class TurnCache(Generic[T]):
    """Per-run values keyed by turn, kept outside the agent state (so never streamed).

    Bounded: a run that never finished (an exception, an interrupt never resumed) is forgotten
    once `maxsize` newer turns arrived. Thread-safe.
    """

    def __init__(self, maxsize: int = _KEPT_ENTRIES) -> None:
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable) -> T | None:
        """The value of `key`, or `None`."""
        with self._lock:
            return self._values.get(key)

    def put(self, key: Hashable, value: T) -> None:
        """Remember `value` for `key` (the newest entry)."""
        with self._lock:
            self._values.pop(key, None)
            self._values[key] = value
            while len(self._values) > self._maxsize:
                self._values.popitem(last=False)

    def pop(self, key: Hashable) -> T | None:
        """Remove and return the value of `key`, or `None`."""
        with self._lock:
            return self._values.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
