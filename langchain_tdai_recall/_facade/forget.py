"""Erasure of a scope (`TdaiMemory.forget`) with the background work that could bring it back.

`forget` must leave nothing of a scope behind, also not through work that was already under way
when it was called. In order, for each scope:

1. **Captured turns** still queued in the background L0 writer are written (so that they are
   erased too, rather than written after the erasure).
2. **The memory tool's background consolidations** queued so far finish (a consolidation in
   flight could otherwise rewrite memories it read before the erasure).
3. **Memory formation**: the scope's in-process formation lock is taken, so a run of the scope
   that is reading messages or waiting for the model finishes (and commits) first, and no run
   of the scope starts until the erasure is over. Across processes the erasure deletes the
   scope's lease, so a run elsewhere fails its commit (the lease is checked in the commit's
   transaction).
4. The store erases everything of the scope (`BaseMemoryStore.delete_scope`).
5. The formation scheduler drops what it had counted or queued for the scope; it handles every
   item queued before (e.g. a finished run's bookkeeping, which could write a session cursor
   back), and the store's erasure is then run once more, which only finds such leftovers.
6. Vectors being computed need nothing: the upkeep stores a vector only into a row that still
   holds the text it embedded, and the rows are gone.

Waiting for 1-3 is bounded by `timeout`; when it passes first, nothing is erased and
`StoreWriteError` says what was still running.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_tdai_recall.errors import StoreWriteError
from langchain_tdai_recall.types import ErasedScope, ForgetReport, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._runtime.writer import TurnWriter
    from langchain_tdai_recall.formation.manager import MemoryManager
    from langchain_tdai_recall.formation.scheduler import FormationScheduler
    from langchain_tdai_recall.stores.base import BaseMemoryStore

__all__ = ["erase_scopes", "merge_erasures"]

logger = logging.getLogger(__name__)


def merge_erasures(first: ErasedScope, second: ErasedScope) -> ErasedScope:
    """The counts of two passes over one scope, added up."""
    added = {
        f.name: getattr(first, f.name) + getattr(second, f.name)
        for f in dataclasses.fields(ErasedScope)
        if f.name not in ("user_id", "agent_id", "persona")
    }
    return dataclasses.replace(first, persona=first.persona or second.persona, **added)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def erase_scopes(
    store: BaseMemoryStore,
    scopes: Sequence[Scope],
    *,
    writer: TurnWriter,
    manager: MemoryManager | None,
    formation: FormationScheduler | None,
    timeout: float,
    user_id: str,
    agent_id: str | None,
    all_agents: bool,
) -> ForgetReport:
    """Erase `scopes` after draining the background work that could write to them."""
    deadline = time.monotonic() + timeout
    if not writer.flush(_left(deadline)):
        msg = (
            f"forget: captured turns were still being written after {timeout:g} s (the "
            "database is locked or slow); nothing was erased, retry"
        )
        raise StoreWriteError(msg)
    if manager is not None and not manager.flush(deadline):
        msg = (
            f"forget: the memory tool's background consolidations did not finish within "
            f"{timeout:g} s; nothing was erased, retry"
        )
        raise StoreWriteError(msg)
    erased = [_erase_one(store, scope, formation, deadline, timeout) for scope in scopes]
    logger.info("forget erased %d scope(s)", len(erased))
    return ForgetReport(
        user_id=user_id, agent_id=agent_id, all_agents=all_agents, scopes=tuple(erased)
    )


def _erase_one(
    store: BaseMemoryStore,
    scope: Scope,
    formation: FormationScheduler | None,
    deadline: float,
    timeout: float,
) -> ErasedScope:
    scope_id = store.scope_id(scope) if formation is not None else None
    if formation is None or scope_id is None:
        return store.delete_scope(scope)
    lock = formation.engine.scope_lock(scope_id)
    if not lock.acquire(timeout=_left(deadline)):
        msg = (
            f"forget: a memory formation run of the scope was still running after {timeout:g} "
            "s; nothing of that scope was erased, retry (or pass a longer timeout)"
        )
        raise StoreWriteError(msg)
    try:
        report = store.delete_scope(scope)
        if not formation.forget_scope(scope_id, _left(deadline) + 1.0):
            logger.warning("forget: the formation scheduler did not confirm in time")
        return merge_erasures(report, store.delete_scope(scope))
    finally:
        lock.release()
