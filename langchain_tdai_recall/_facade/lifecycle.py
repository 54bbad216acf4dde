"""The background parts of an open `TdaiMemory`: how they are wired, and their order at shutdown.

An open memory owns background work: the L0 writer (captured turns), the vector upkeep, memory
formation's scheduler, and three daemon thread pools. `shutdown` stops them in the one order
that loses nothing (turns are written before they are formed, memories formed before they are
embedded) within bounded times, and releases the store; it runs from `close()` or from the
memory's finalizer, so it holds no reference to the memory itself. `writer_callbacks` connects
the writer to the store and to formation through a weak reference for the same reason. The
timeout and flag checks are those of the lifecycle calls (`open`, `close`, `flush`).
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from langchain_tdai_recall._exchange.records import shown
from langchain_tdai_recall.errors import ConfigError

if TYPE_CHECKING:
    from langchain_tdai_recall._embedding.upkeep import VectorUpkeep
    from langchain_tdai_recall._runtime.threads import DaemonExecutor
    from langchain_tdai_recall._runtime.writer import TurnWriter
    from langchain_tdai_recall.formation.scheduler import FormationScheduler
    from langchain_tdai_recall.stores.base import BaseMemoryStore
    from langchain_tdai_recall.types import MessageRecord, Scope

__all__ = ["MAX_CLOSE_TIMEOUT_S", "check_flag", "check_timeout", "shutdown", "writer_callbacks"]

MAX_CLOSE_TIMEOUT_S: Final = 3600.0
"""The longest close timeout a caller may ask for."""


class CountsTurns(Protocol):
    """What the writer's after-write hook calls on the memory (`TdaiMemory._after_capture`)."""

    def _after_capture(self, scope: Scope, session_key: str) -> None: ...


def shutdown(
    writer: TurnWriter,
    formation: list[FormationScheduler],
    upkeep: VectorUpkeep | None,
    store: BaseMemoryStore,
    pools: tuple[DaemonExecutor, ...],
    *,
    timeout: float,
    formation_timeout: float,
) -> None:
    """Stop a store's background work and release it.

    In order: queued turns are written (the writer), what is pending is formed (formation, at
    most `formation_timeout` seconds, so it sees every turn), and rows still without a vector
    are embedded (the upkeep); the writer and the upkeep share `timeout` seconds. Runs from
    `close()`, or, for a store nobody closed, when it is garbage-collected or the interpreter
    exits (`weakref.finalize`). It holds no reference to the `TdaiMemory` (`formation` is a slot
    holding its scheduler, once started).
    """
    started = time.monotonic()
    try:
        writer.close(timeout)
        spent = time.monotonic() - started
        if formation:
            formation[0].close(formation_timeout)
        if upkeep is not None:
            left = timeout - spent if store.durable else 0.0
            upkeep.stop(max(left, 0.0))
    finally:
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        store.close()


def writer_callbacks(
    memory: CountsTurns, store: BaseMemoryStore, upkeep: VectorUpkeep | None
) -> tuple[Callable[[Scope, Sequence[MessageRecord], int], int], Callable[[Scope, str], None]]:
    """The background writer's write and after-write hook.

    Neither holds a strong reference to `memory`, so a memory nobody closed can still be
    garbage-collected (and then shut down by its finalizer).
    """

    def write(scope: Scope, records: Sequence[MessageRecord], busy_ms: int) -> int:
        kept = store.put_messages(scope, records, busy_timeout_ms=busy_ms)
        if kept and upkeep is not None:
            upkeep.wake()
        return kept

    ref = weakref.ref(memory)

    def after_write(scope: Scope, session_key: str) -> None:
        alive = ref()
        if alive is not None:  # looked up per call, so a later override takes effect
            alive._after_capture(scope, session_key)

    return write, after_write


def check_timeout(field: str, value: object) -> float:
    """A close timeout in seconds, 0..`MAX_CLOSE_TIMEOUT_S`; `ConfigError` names `field`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_CLOSE_TIMEOUT_S  # first: isfinite overflows on a huge int
        or not math.isfinite(value)
    ):
        limit = f"{MAX_CLOSE_TIMEOUT_S:.0f}"
        msg = f"{field} must be a number of seconds in 0..{limit}, got {shown(value)}"
        raise ConfigError(msg)
    return float(value)


def check_flag(field: str, value: object, *, optional: bool = False) -> None:
    """Refuse anything but a bool (or `None` when `optional`) for `field`."""
    if not isinstance(value, bool) and not (optional and value is None):
        allowed = "True, False or None" if optional else "True or False"
        msg = f"{field} must be {allowed}, got {shown(value)}"
        raise ConfigError(msg)
