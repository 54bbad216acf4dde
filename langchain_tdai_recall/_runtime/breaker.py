"""A short circuit breaker for the memory tools when the store stops answering.

With the database frozen, every store call waits out its own timeout. Recall already bounds the
turn (`recall.timeout_ms`); without a breaker a memory tool called later in the same turn would
wait out the store's timeout once more (10 s of a turn instead of 5). So a store that just made
a caller wait past its budget is taken as unresponsive for `BREAKER_WINDOW_S`: memory-tool calls
fail at once with a clear message instead of waiting again. Recall itself is never short-cut: it
probes the store on every turn within its own budget, and the first call that answers in time
(a recall or a tool call) closes the breaker again. Backend-agnostic: it only looks at how long
calls took and whether they answered.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

__all__ = ["BREAKER_WINDOW_S", "StoreBreaker"]

logger = logging.getLogger(__name__)

BREAKER_WINDOW_S: Final = 30.0
"""How long memory-tool calls fail fast after the store made a caller wait past its budget: long
enough to cover the rest of a turn (a model call included); the next turn's recall probes anyway."""


class StoreBreaker:
    """Open after a store call ran past its budget without an answer; closed by the next answer.

    Thread-safe; one per `TdaiMemory`.
    """

    def __init__(self, *, budget_s: float, window_s: float = BREAKER_WINDOW_S) -> None:
        """`budget_s`: a call that takes this long and fails (or times out) opens the breaker.

        A store that answers with an error does so in milliseconds; one that takes a second or
        the whole recall budget to fail did not answer (a timeout of the store or of recall).
        """
        self.budget_s = budget_s
        self.window_s = window_s
        self._lock = threading.Lock()
        self._open_until = 0.0
        self._waited_s = 0.0

    @classmethod
    def for_recall(cls, recall_timeout_ms: int) -> StoreBreaker:
        """A breaker whose budget is a second, or 90 % of the recall budget if that is shorter.

        With recall switched off (`recall_timeout_ms=0`) the budget is the second.
        """
        budget_s = 1.0
        if recall_timeout_ms > 0:
            budget_s = min(0.9 * recall_timeout_ms / 1000, budget_s)
        return cls(budget_s=budget_s)

    def remaining(self) -> float:
        """Seconds the breaker stays open (0 when closed)."""
        with self._lock:
            return max(self._open_until - time.monotonic(), 0.0)

    def waited(self) -> float:
        """How long the call that opened the breaker waited, in seconds."""
        with self._lock:
            return self._waited_s

    def record(self, *, started: float, answered: bool) -> None:
        """Record a store call that began at `started` (monotonic) and answered or not."""
        elapsed = time.monotonic() - started
        with self._lock:
            if answered:
                self._open_until = 0.0
                return
            if elapsed < self.budget_s:
                return  # a quick failure: the store answers, with an error
            was_open = self._open_until > time.monotonic()
            self._open_until = time.monotonic() + self.window_s
            self._waited_s = elapsed
        if not was_open:
            logger.warning(
                "the memory store did not answer within %.1f s; memory tools fail fast for the "
                "next %.0f s (recall keeps trying every turn)",
                elapsed,
                self.window_s,
            )
