"""Memory version history in PostgreSQL: the same rules as every backend (`stores.history`).

Before an update, a merge or a delete ends the current version of a memory, its row is copied to
`tdai_memory_versions` (as JSON, with what ended it, who and the ids involved), inside the
caller's transaction: a version is recorded if and only if the change it describes commits. An
update that changes none of the remembered fields records nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import psycopg

from langchain_tdai_recall.stores.history import (
    SNAPSHOT_FIELDS,
    is_new_version,
    versions_from_rows,
)
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = ["record_version", "versions"]

_SNAPSHOT: Final = SNAPSHOT_FIELDS
_SNAPSHOT_SQL: Final = ", ".join(f'"{c}"' for c in _SNAPSHOT)


def snapshot_of(
    conn: psycopg.Connection[Any], scope_id: int, memory_id: str
) -> dict[str, object] | None:
    """The remembered fields of a memory's current row, or `None`."""
    row = conn.execute(
        f"SELECT {_SNAPSHOT_SQL} FROM tdai_memories WHERE scope_id = %s AND id = %s",
        (scope_id, memory_id),
    ).fetchone()
    if row is None:
        return None
    old: dict[str, object] = dict(zip(_SNAPSHOT, row, strict=True))
    old["source_message_ids"] = json.loads(str(old["source_message_ids"]))
    return old


def record_version(
    conn: psycopg.Connection[Any],
    scope_id: int,
    memory_id: str,
    *,
    change: Change,
    actor: str,
    at: str,
    related: Sequence[str] = (),
    replacement: MemoryRecord | None = None,
    old: dict[str, object] | None = None,
) -> bool:
    """Copy the current row of `memory_id` to the history before it changes.

    Args:
        conn: A connection inside the caller's write transaction (holding the scope's lock).
        scope_id: The scope of the memory.
        memory_id: The memory about to be changed or removed.
        change: What ends the current version.
        actor: Who changes it (`api`, `extraction`, `tool`).
        at: When (UTC ISO-8601).
        related: Ids involved (see `stores.local._history.record_version`).
        replacement: For `update`: the new version; an identical one records nothing.
        old: The current row's fields when the caller has already read them.

    Returns:
        Whether a version was recorded.
    """
    if old is None:
        old = snapshot_of(conn, scope_id, memory_id)
    if old is None:
        return False
    if not is_new_version(old, change, replacement):
        return False
    conn.execute(
        """
        INSERT INTO tdai_memory_versions (scope_id, memory_id, version, change, actor,
            related_ids, snapshot, replaced_at)
        SELECT %s, %s, COUNT(*) + 1, %s, %s, %s, %s, %s FROM tdai_memory_versions
        WHERE scope_id = %s AND memory_id = %s
        """,
        (
            scope_id,
            memory_id,
            change,
            actor,
            json.dumps(list(related), ensure_ascii=False),
            json.dumps(old, ensure_ascii=False),
            at,
            scope_id,
            memory_id,
        ),
    )
    return True


def versions(
    conn: psycopg.Connection[Any],
    scope_id: int,
    memory_id: str,
    scope: Scope,
    current: MemoryRecord | None,
) -> list[MemoryVersion]:
    """Every version of a memory, oldest first; the current row (if any) is the last one."""
    rows = conn.execute(
        "SELECT version, change, actor, related_ids, snapshot, replaced_at "
        "FROM tdai_memory_versions WHERE scope_id = %s AND memory_id = %s ORDER BY version",
        (scope_id, memory_id),
    ).fetchall()
    return versions_from_rows(rows, memory_id, scope, current)
