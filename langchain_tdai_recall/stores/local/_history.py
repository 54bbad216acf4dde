"""Memory version history: every L1 version that was replaced or removed is kept.

An update, a merge and a delete each end the current version of a memory. Before the row changes,
its old state is copied to `memory_versions` together with what ended it (`update`, `merge` for
the memory that absorbed others, `merged` for one absorbed into another, `delete`), who did it
(`api`, `extraction`, `tool`) and the ids involved. Plain inserts write nothing here, so bulk
ingestion pays nothing for history; `memory.history(id)` lists the stored versions followed by the
current row.

These helpers run inside the caller's write transaction, so a version is recorded if and only if
the change it describes is committed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Final

from langchain_tdai_recall.stores.history import is_new_version, versions_from_rows
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = ["record_version", "versions"]


_SNAPSHOT_COLS: Final = (
    "content, type, scene_name, priority, activity_start_time, activity_end_time, timestamp, "
    "session_key, source_message_ids, created_at, updated_at"
)


def record_version(
    conn: sqlite3.Connection,
    scope_id: int,
    memory_id: str,
    *,
    change: Change,
    actor: str,
    at: str,
    related: Sequence[str] = (),
    replacement: MemoryRecord | None = None,
) -> bool:
    """Copy the current row of `memory_id` to the history before it changes.

    Args:
        conn: A connection inside the caller's write transaction.
        scope_id: The scope of the memory.
        memory_id: The memory about to be changed or removed.
        change: What ends the current version.
        actor: Who changes it (`api`, `extraction`, `tool`).
        at: When (UTC ISO-8601).
        related: Ids involved (the absorbing memory of `merged`, the absorbed ones of `merge`).
        replacement: For `update`: the new version. When it equals the current one in every
            remembered field, nothing is recorded (re-writing the same memory is not a version).

    Returns:
        Whether a version was recorded (`False` when the memory does not exist or is unchanged).
    """
    row = conn.execute(
        f"SELECT {_SNAPSHOT_COLS} FROM memories WHERE scope_id = ? AND id = ?",
        (scope_id, memory_id),
    ).fetchone()
    if row is None:
        return False
    names = [c.strip() for c in _SNAPSHOT_COLS.split(",")]
    old: dict[str, object] = dict(zip(names, row, strict=True))
    old["source_message_ids"] = json.loads(str(old["source_message_ids"]))
    if not is_new_version(old, change, replacement):
        return False
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM memory_versions WHERE scope_id = ? AND memory_id = ?",
        (scope_id, memory_id),
    ).fetchone()
    conn.execute(
        """
        INSERT INTO memory_versions (scope_id, memory_id, version, change, actor, related_ids,
            snapshot, replaced_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
        """,
        (
            scope_id,
            memory_id,
            int(count) + 1,
            change,
            actor,
            json.dumps(list(related), ensure_ascii=False),
            json.dumps(old, ensure_ascii=False),
            at,
        ),
    )
    return True


def versions(
    conn: sqlite3.Connection,
    scope_id: int,
    memory_id: str,
    scope: Scope,
    current: MemoryRecord | None,
) -> list[MemoryVersion]:
    """Every version of a memory, oldest first; the current row (if any) is the last one."""
    rows = conn.execute(
        "SELECT version, change, actor, related_ids, snapshot, replaced_at FROM memory_versions "
        "WHERE scope_id = ? AND memory_id = ? ORDER BY version",
        (scope_id, memory_id),
    ).fetchall()
    return versions_from_rows(rows, memory_id, scope, current)
