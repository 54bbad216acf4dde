"""Running one recall: store work on the recall threads, waits for models on the caller's side.

A recall is written as a generator (`RecallEngine._recall`): it does its store work (indexes,
records, persona and scenes) and yields a `ModelCall` where it needs a model's answer (the query
embedding, the reranker). `drive` / `adrive` run each stretch of store work on a recall worker
thread and wait for the model themselves (on the calling thread in `recall`, on the event loop
in `arecall`), then resume the generator with the answer, or throw the model's error or a
`TimeoutError` into it. So a recall worker thread never waits for a model: a hung or slow
embedder (or reranker) cannot hold the threads that other recalls' store work needs, and what it
costs a recall is bounded by that model's own timeout; the keyword results, the persona and the
rest of the system context still come.

The store breaker (`_runtime.breaker`) hears only about the store work: a stretch that answered
closes it, one that failed or did not answer before the recall's deadline counts as the store not
answering, measured from when it was handed to the recall threads (which run nothing else). Time
spent waiting for a model is never counted against the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_tdai_recall.types import RecallResult

if TYPE_CHECKING:
    from langchain_tdai_recall._runtime.breaker import StoreBreaker

__all__ = ["ModelCall", "RecallSteps", "adrive", "drive"]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A model call a recall waits for outside its worker thread."""

    future: Future[Any]
    """The call, running on the model's own threads."""
    timeout_s: float
    """The longest wait for it (the recall's deadline may cut it shorter)."""
    timeout_error: Callable[[], BaseException]
    """The error thrown into the recall when the wait ends first (it may cancel the call)."""


RecallSteps = Generator[ModelCall, object, RecallResult]
"""A recall in progress: yields the model calls it waits for, returns its result."""


@dataclass(frozen=True, slots=True)
class _Reply:
    """What resumes a recall: the model's answer, or the error to throw at its `yield`."""

    value: object = None
    error: BaseException | None = None


class _Stepper:
    """Advances one recall generator a stretch of store work at a time (on worker threads)."""

    def __init__(self, start: Callable[[], RecallSteps]) -> None:
        self._start = start
        self._steps: RecallSteps | None = None

    def advance(self, reply: _Reply | None) -> ModelCall | RecallResult:
        """Run the recall up to its next model call (returned) or to its end (its result)."""
        try:
            if self._steps is None:
                self._steps = self._start()
                return next(self._steps)
            if reply is not None and reply.error is not None:
                return self._steps.throw(reply.error)
            return self._steps.send(reply.value if reply is not None else None)
        except StopIteration as done:
            result: RecallResult = done.value
            return result


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _record(breaker: StoreBreaker | None, started: float, *, answered: bool) -> None:
    if breaker is not None:
        breaker.record(started=started, answered=answered)


def drive(
    start: Callable[[], RecallSteps],
    *,
    executor: Executor,
    deadline: float,
    breaker: StoreBreaker | None,
) -> RecallResult:
    """Run a recall to its result, never past `deadline` (`time.monotonic()`).

    Raises:
        TimeoutError: If store work did not finish before the deadline.
        Exception: Whatever the recall raised.
    """
    stepper = _Stepper(start)
    reply: _Reply | None = None
    while True:
        submitted = time.monotonic()
        future = executor.submit(stepper.advance, reply)
        try:
            step = future.result(timeout=_remaining(deadline))
        except Exception:
            future.cancel()
            _record(breaker, submitted, answered=False)
            raise
        _record(breaker, submitted, answered=True)
        if isinstance(step, RecallResult):
            return step
        try:
            reply = _Reply(step.future.result(timeout=min(step.timeout_s, _remaining(deadline))))
        except TimeoutError:
            reply = _Reply(error=step.timeout_error())
        except Exception as exc:  # the model's failure is the recall's to handle
            reply = _Reply(error=exc)


async def adrive(
    start: Callable[[], RecallSteps],
    *,
    executor: Executor,
    deadline: float,
    breaker: StoreBreaker | None,
) -> RecallResult:
    """Async version of `drive`: the event loop is never blocked, and no thread waits."""
    loop = asyncio.get_running_loop()
    stepper = _Stepper(start)
    reply: _Reply | None = None
    while True:
        submitted = time.monotonic()
        work = loop.run_in_executor(executor, stepper.advance, reply)
        try:
            step = await asyncio.wait_for(work, timeout=_remaining(deadline))
        except Exception:
            _record(breaker, submitted, answered=False)
            raise
        _record(breaker, submitted, answered=True)
        if isinstance(step, RecallResult):
            return step
        wait = min(step.timeout_s, _remaining(deadline))
        try:
            reply = _Reply(await asyncio.wait_for(asyncio.wrap_future(step.future), timeout=wait))
        except TimeoutError:
            reply = _Reply(error=step.timeout_error())
        except asyncio.CancelledError:
            step.future.cancel()
            raise
        except Exception as exc:
            reply = _Reply(error=exc)
