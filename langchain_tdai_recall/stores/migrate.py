"""Copy a memory store into another one, of the same or another backend (`tdai-recall migrate`).

Everything of every scope is copied as stored: L1 memories with their ids, times and vectors
(tagged with the embedder that made them, so the target re-embeds only what another embedder
made), L0 messages with their context and vectors, personas and scenes (heat, times and title
kept), and memory formation's state: each session's cursor (moved to the target's reference of
the same message, so nothing is formed twice), the memory version history, the scene queue.
Rows are read and written in pages, each page in one transaction of the target.

The copy is resumable: run it again after an interruption and rows already copied are skipped
(a memory with the same id, `updated_at` and vector embedder; a message with the same id), so it
continues where it stopped. Copying into a store that already holds data merges: a memory id that
exists in the same scope is replaced by the source's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from langchain_tdai_recall._runtime.progress import progress
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores.base import LAYERS, BaseMemoryStore
from langchain_tdai_recall.types import Scope

__all__ = ["DEFAULT_PAGE", "CopyReport", "copy_store", "report_json"]

logger = logging.getLogger(__name__)

DEFAULT_PAGE: Final = 500
"""Rows read and written per transaction."""


@dataclass(slots=True, kw_only=True)
class CopyReport:
    """What `copy_store` did."""

    scopes: int = 0
    """Scopes visited."""
    memories: int = 0
    """L1 memories written (new or replaced)."""
    messages: int = 0
    """L0 messages written."""
    personas: int = 0
    """Personas written."""
    scenes: int = 0
    """Scene blocks written."""
    formation: int = 0
    """Memory formation's cursors and history versions written."""
    skipped: int = 0
    """Rows already present in the target (copied by an earlier, interrupted run)."""
    personas_equal: int = 0
    """Personas the target already held word for word (not written)."""
    scenes_equal: int = 0
    """Scene blocks the target already held exactly (not written)."""
    per_scope: dict[Scope, tuple[int, int]] = field(default_factory=dict)
    """(memories, messages) read from the source, per scope."""


def copy_store(
    source: BaseMemoryStore,
    target: BaseMemoryStore,
    *,
    page: int = DEFAULT_PAGE,
    show_progress: bool | None = None,
) -> CopyReport:
    """Copy every scope of `source` into `target` (see the module docstring).

    Args:
        source: The store to read (may be opened read-only).
        target: The store to write.
        page: Rows per read and per write transaction, 1..10000.
        show_progress: Progress bar on standard error (`None`: only on a terminal).

    Returns:
        Counts of what was written and skipped.

    Raises:
        ConfigError: If `page` is out of range or both are the same store.
        StoreError: If either store fails; what was copied so far stays, and a new run resumes.
    """
    if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= 10_000:
        msg = f"page must be an integer in 1..10000, got {page!r}"
        raise ConfigError(msg)
    if source is target or (source.durable and source.location == target.location):
        msg = f"source and target are the same store ({source.location}); pick another target"
        raise ConfigError(msg)
    report = CopyReport()
    scopes = list(dict.fromkeys([*source.scopes(), *source.document_scopes()]))
    total = 0
    for scope in scopes:
        stats = source.scope_stats(scope)
        report.per_scope[scope] = (stats.memories, stats.messages)
        total += stats.memories + stats.messages
    logger.info(
        "copying %d scopes, %d rows from %s to %s",
        len(scopes),
        total,
        source.location,
        target.location,
    )
    with progress(total, desc="copying", unit="rows", enabled=show_progress) as bar:
        for scope in scopes:
            report.scopes += 1
            for layer in LAYERS:
                after = 0
                while True:
                    rows = source.export_rows(scope, layer, after=after, limit=page)
                    if not rows:
                        break
                    written = target.import_rows(scope, layer, rows)
                    if layer == "l1":
                        report.memories += written
                    else:
                        report.messages += written
                    report.skipped += len(rows) - written
                    after = rows[-1].rowid
                    bar.update(len(rows))
            report.formation += _copy_formation(source, target, scope)
            persona = source.get_persona(scope)
            if persona is not None:
                if target.get_persona(scope) == persona:
                    report.personas_equal += 1
                else:
                    target.set_persona(scope, persona)
                    report.personas += 1
            copied, equal = _copy_scenes(source, target, scope)
            report.scenes += copied
            report.scenes_equal += equal
    return report


def report_json(report: CopyReport) -> dict[str, object]:
    """`report` as plain JSON values (a scope key becomes its user and agent fields)."""
    return {
        "scopes": report.scopes,
        "memories": report.memories,
        "messages": report.messages,
        "personas": report.personas,
        "scenes": report.scenes,
        "formation": report.formation,
        "skipped": report.skipped,
        "personas_equal": report.personas_equal,
        "scenes_equal": report.scenes_equal,
        "per_scope": [
            {"user_id": s.user_id, "agent_id": s.agent_id, "memories": m, "messages": n}
            for s, (m, n) in report.per_scope.items()
        ],
    }


def _copy_formation(source: BaseMemoryStore, target: BaseMemoryStore, scope: Scope) -> int:
    """Copy a scope's formation cursors (by message id), history, scene queue and state."""
    theirs = source.formation.scope_id(scope)
    if theirs is None:
        return 0
    snapshot = source.formation.export_scope(theirs)
    if not (snapshot.sessions or snapshot.versions or snapshot.scene_queue):
        return 0
    ours = target.formation.scope_id(scope, create=True)
    assert ours is not None
    return target.formation.import_scope(ours, snapshot)


def _copy_scenes(source: BaseMemoryStore, target: BaseMemoryStore, scope: Scope) -> tuple[int, int]:
    """Copy a scope's scenes exactly (name, title, summary, heat, times, body).

    Returns:
        (scenes written, scenes the target already held exactly).
    """
    copied = equal = 0
    theirs = source.documents
    ours = target.documents
    for name in theirs._names(scope):
        found = theirs._read(scope, name)
        if found is None:
            continue
        block, title = found
        if ours._read(scope, name) == found:
            equal += 1
            continue
        with ours._lock:
            ours._write(scope, block, title)
        copied += 1
    return copied, equal
