"""The background L0 writer: captured turns are written without holding up the user's answer.

An agent turn hands its finished L0 messages to `TurnWriter.submit` and returns at once. One
daemon thread per store writes the turns in the order they came:

- a write that meets another process's write lock waits at most `ATTEMPT_BUSY_MS` per attempt
  and is retried with backoff (50 ms doubling up to 2 s), for as long as the process lives;
  the disk being full is retried the same way. An accepted turn is never dropped while the
  process lives and the store is open;
- ids are fixed when a turn is accepted, so a retried write never stores a message twice;
- after each stored turn the `after_write` hook runs (background memory formation schedules its
  work there);
- `close(timeout)` stops accepting turns and waits at most `timeout` seconds for the queue to
  drain; turns still queued then are reported in one WARNING with their count and are lost.

The thread is a daemon thread, so process exit never waits for it; `TdaiMemory` flushes it from
`close()`, which also runs at interpreter exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from langchain_tdai_recall.errors import (
    StoreClosedError,
    StoreCorruptedError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.types import MessageRecord, Scope

__all__ = ["ATTEMPT_BUSY_MS", "TurnWriter"]

logger = logging.getLogger(__name__)

ATTEMPT_BUSY_MS: Final = 1000
"""How long one write attempt waits for another process's write lock."""
_FIRST_RETRY_S: Final = 0.05
_MAX_RETRY_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class _Turn:
    scope: Scope
    session_key: str
    records: tuple[MessageRecord, ...]


class TurnWriter:
    """Writes accepted turns in order on one background daemon thread.

    Args:
        write: Stores one turn's records in one scope (`busy_timeout_ms` bounds the lock wait)
            and returns how many were new; raises `StoreWriteError` for passing failures.
        after_write: Called with (scope, session_key) after each stored turn; its errors are
            logged and ignored.
        name: Thread name.
    """

    def __init__(
        self,
        write: Callable[[Scope, Sequence[MessageRecord], int], int],
        after_write: Callable[[Scope, str], None],
        *,
        name: str = "tdai-l0-writer",
    ) -> None:
        self._write = write
        self._after_write = after_write
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[_Turn] = deque()
        self._accepted = 0
        self._finished = 0
        self._closing = False
        self._give_up_at = float("inf")
        self._thread: threading.Thread | None = None

    def submit(self, scope: Scope, session_key: str, records: Sequence[MessageRecord]) -> bool:
        """Queue one turn; returns `False` (nothing queued) once the writer is closing."""
        with self._cond:
            if self._closing:
                return False
            self._queue.append(_Turn(scope, session_key, tuple(records)))
            self._accepted += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return True

    @property
    def pending(self) -> int:
        """Turns accepted but not yet written."""
        with self._cond:
            return len(self._queue)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every turn accepted so far is written (or given up); `False` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._accepted
            while self._finished < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def close(self, timeout: float) -> int:
        """Stop accepting turns and write what is queued for at most `timeout` seconds.

        Returns how many turns were left unwritten (and are lost); they are also logged.
        """
        with self._cond:
            self._closing = True
            self._give_up_at = time.monotonic() + max(timeout, 0.0)
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(max(timeout, 0.0))
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
            self._finished = self._accepted
            self._cond.notify_all()
        if left:
            logger.warning(
                "close() gave up after %.1f s with %d captured turns (%d messages) not yet "
                "written (the database stayed locked or unwritable); they are lost",
                timeout,
                len(left),
                sum(len(t.records) for t in left),
            )
        return len(left)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                turn = self._queue[0]
            outcome = self._write_with_retry(turn)
            with self._cond:
                if outcome != "gave up" and self._queue and self._queue[0] is turn:
                    self._queue.popleft()
                    self._finished += 1
                self._cond.notify_all()
            if outcome == "stored":
                try:
                    self._after_write(turn.scope, turn.session_key)
                except Exception:
                    logger.warning("the after-capture hook failed", exc_info=True)
            elif outcome == "gave up":
                return  # close() counts and reports what is left

    def _write_with_retry(self, turn: _Turn) -> Literal["stored", "lost", "gave up"]:
        delay = _FIRST_RETRY_S
        warned = False
        while True:
            try:
                self._write(turn.scope, turn.records, ATTEMPT_BUSY_MS)
            except StoreWriteError as exc:
                if not warned:
                    warned = True
                    logger.warning("L0 capture is waiting to be written: %s", exc)
            except (StoreClosedError, StoreReadOnlyError, StoreCorruptedError) as exc:
                logger.warning("L0 capture cannot be written and is lost: %s", exc)
                return "lost"  # retrying cannot help; do not hold up the turns behind it
            except Exception:
                logger.exception("L0 capture failed and is lost")
                return "lost"
            else:
                if warned:
                    logger.info("the waiting L0 capture was written")
                return "stored"
            with self._cond:
                if self._closing and time.monotonic() >= self._give_up_at:
                    return "gave up"
                self._cond.wait(min(delay, max(self._give_up_at - time.monotonic(), 0.0)))
            delay = min(delay * 2, _MAX_RETRY_S)
