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

from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = ["Change", "record_version", "versions", "versions_of_current"]


_SNAPSHOT_COLS: Final = (
    "content, type, scene_name, priority, activity_start_time, activity_end_time, timestamp, "
    "session_key, source_message_ids, created_at, updated_at"
)
_COMPARED: Final = (
    "content",
    "type",
    "scene_name",
    "priority",
    "activity_start_time",
    "activity_end_time",
    "timestamp",
    "source_message_ids",
)


def _record_fields(rec: MemoryRecord) -> dict[str, object]:
    return {
        "content": rec.content,
        "type": rec.type,
        "scene_name": rec.scene_name,
        "priority": rec.priority,
        "activity_start_time": rec.activity_start_time,
        "activity_end_time": rec.activity_end_time,
        "timestamp": rec.timestamp,
        "session_key": rec.session_key,
        "source_message_ids": list(rec.source_message_ids),
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
    }


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
    if replacement is not None and change == "update":
        new = _record_fields(replacement)
        if all(old[k] == new[k] for k in _COMPARED):
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
    out: list[MemoryVersion] = []
    for version, change, actor, related, snapshot, replaced_at in rows:
        data = json.loads(snapshot)
        record = MemoryRecord(
            id=memory_id,
            content=str(data["content"]),
            type=data["type"],
            scene_name=str(data["scene_name"]),
            priority=int(data["priority"]),
            activity_start_time=data["activity_start_time"],
            activity_end_time=data["activity_end_time"],
            timestamp=data["timestamp"],
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=str(data["session_key"]),
            source_message_ids=tuple(data["source_message_ids"]),
            created_at=str(data["created_at"]),
            updated_at=str(data["updated_at"]),
        )
        out.append(
            MemoryVersion(
                version=int(version),
                record=record,
                current=False,
                change=change,
                changed_by=str(actor),
                changed_at=str(replaced_at),
                related_ids=tuple(json.loads(related)),
            )
        )
    if current is not None:
        out += versions_of_current(current, number=len(out) + 1)
    return out


def versions_of_current(current: MemoryRecord, *, number: int = 1) -> list[MemoryVersion]:
    """The current row as the last version of a memory's history."""
    return [
        MemoryVersion(
            version=number,
            record=current,
            current=True,
            change=None,
            changed_by=None,
            changed_at=None,
            related_ids=(),
        )
    ]
