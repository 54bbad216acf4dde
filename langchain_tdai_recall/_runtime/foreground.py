"""Callers before background work on the local store's write lock.

The local store serialises its writes with one lock per process. The package's background
workers (vector upkeep, memory formation, the L0 writer, the expiry sweep, the memory tool's
consolidations) write in runs of short transactions, and with a plain lock they take turns with
a caller: a caller writing turn after turn (`record_messages` back to back) found a background
transaction in its way again and again (measured with formation on: the caller's wait for the
lock 7 to 23 ms at p99, against 0.02 ms with this lock; `benchmarks/results/formation.md`).

`ForegroundFirstLock` is a reentrant lock that leaves the way to callers: a background acquirer
steps aside while a caller waits for the lock, and for `CALLER_GRACE_S` after a caller released
it (a caller writing turn after turn is back within that), so a caller waits at most for the
background transaction in progress. A background thread is one that called `mark_background()`
(the workers do so when they start); every other thread is a caller. Background work is
deferred, never starved: an acquirer that has stepped aside for `BACKGROUND_MAX_WAIT_S` goes
next, before callers, and in the gaps between callers it goes at once.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Final

__all__ = [
    "BACKGROUND_MAX_WAIT_S",
    "CALLER_GRACE_S",
    "ForegroundFirstLock",
    "in_background",
    "mark_background",
]

BACKGROUND_MAX_WAIT_S: Final = 1.0
"""Longest a background acquirer steps aside for callers; then it goes next."""
CALLER_GRACE_S: Final = 0.005
"""How long after a caller released the lock background acquirers still leave it to callers: a
caller writing turn after turn comes back within it, and would otherwise find a background
transaction in its way at every call."""

_local = threading.local()


def mark_background() -> None:
    """Mark the current thread as one of the package's background workers."""
    _local.background = True


def in_background() -> bool:
    """Whether the current thread is a background worker (`mark_background`)."""
    return bool(getattr(_local, "background", False))


class ForegroundFirstLock:
    """A reentrant lock that callers' threads take before background workers waiting for it.

    Example:
        ```python
        lock = ForegroundFirstLock()
        with lock, lock:  # reentrant
            pass
        ```
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._callers = threading.Condition(self._mutex)
        """Where callers' threads wait."""
        self._background = threading.Condition(self._mutex)
        """Where background threads wait (not woken by releases while callers wait)."""
        self._owner: int | None = None
        self._depth = 0
        self._callers_waiting = 0
        self._background_waiting = 0
        self._overdue = 0
        """Background acquirers that stepped aside for `BACKGROUND_MAX_WAIT_S`: they go next."""
        self._background_owns = False
        self._caller_left = 0.0
        """When a caller last released the lock (`time.monotonic()`)."""

    def _polite_until(self) -> float:
        """Until when a background acquirer leaves the lock to callers (0: it need not)."""
        return 0.0 if self._callers_waiting else self._caller_left + CALLER_GRACE_S

    def _stepping_aside(self, now: float) -> bool:
        """Whether a background acquirer leaves the lock to callers now."""
        return self._callers_waiting > 0 or now < self._polite_until()

    def _wake_next(self) -> None:
        """Wake whoever goes next now that the lock is free (with the mutex held)."""
        if self._overdue:
            self._background.notify_all()
        elif self._callers_waiting:
            self._callers.notify()
        elif self._background_waiting:
            self._background.notify()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (again, when this thread holds it); as `threading.RLock.acquire`."""
        me = threading.get_ident()
        background = getattr(_local, "background", False)
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and (
                (not self._callers_waiting and time.monotonic() >= self._polite_until())
                if background
                else not self._overdue
            ):  # the common case, inline
                self._owner, self._depth, self._background_owns = me, 1, background
                return True
            if not blocking:
                return False
            return self._wait(me, background, timeout)

    def _wait(self, me: int, background: bool, timeout: float) -> bool:
        """Wait for the lock (with the mutex held); `False` when `timeout` passed first."""
        now = time.monotonic()
        deadline = None if timeout < 0 else now + timeout
        overdue_at = now + BACKGROUND_MAX_WAIT_S
        overdue = False
        cond = self._background if background else self._callers
        if background:
            self._background_waiting += 1
        else:
            self._callers_waiting += 1
        try:
            while True:
                now = time.monotonic()
                if background and not overdue and now >= overdue_at:
                    overdue = True
                    self._overdue += 1
                stepping_aside = background and not overdue and self._stepping_aside(now)
                if self._owner is None and (
                    not stepping_aside if background else not self._overdue
                ):
                    self._owner, self._depth, self._background_owns = me, 1, background
                    return True
                if deadline is not None and now >= deadline:
                    return False
                ends = [deadline] if deadline is not None else []
                if background and not overdue:
                    aside_until = self._polite_until()
                    ends += [overdue_at, aside_until] if aside_until > now else [overdue_at]
                cond.wait(min(ends) - now if ends else None)
        finally:
            if overdue:
                self._overdue -= 1
            if background:
                self._background_waiting -= 1
            else:
                self._callers_waiting -= 1
            if self._owner is None:
                self._wake_next()  # it gave up, or a thread stepping aside for it may go

    def release(self) -> None:
        """Release one level of the lock; the last one lets the next thread in."""
        with self._mutex:
            if self._owner != threading.get_ident():
                msg = "cannot release a lock this thread does not hold"
                raise RuntimeError(msg)
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                if not self._background_owns:
                    self._caller_left = time.monotonic()
                self._wake_next()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
