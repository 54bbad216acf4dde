"""Memory versions kept and read in SQL, written once for the local store and PostgreSQL.

Before an update, a merge or a delete ends the current version of a memory, its remembered
fields are copied as JSON to the version table (`stores.history` owns the format) with what
ended it, who, and the ids involved, inside the caller's write transaction: a version is
recorded if and only if the change it describes commits. The caller holds its scope's
generation lock, so version numbers cannot race.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall.stores.history import (
    SNAPSHOT_FIELDS,
    is_new_version,
    versions_from_rows,
)
from langchain_tdai_recall.stores.records import stored_metadata
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall.stores._sql.dialect import Dialect

__all__ = ["read_versions", "record_version", "snapshot_of"]

# `conn` below is a backend's connection inside the caller's transaction: sqlite3 or psycopg,
# which both run `conn.execute(sql, params)`.

_SNAPSHOT_SQL: Final = ", ".join(f'"{c}"' for c in SNAPSHOT_FIELDS)


def snapshot_of(
    conn: Any, dialect: Dialect, scope_id: int, memory_id: str
) -> dict[str, object] | None:
    """The remembered fields of a memory's current row, or `None`."""
    row = conn.execute(
        dialect.sql(f"SELECT {_SNAPSHOT_SQL} FROM {{p}}memories WHERE scope_id = ? AND id = ?"),
        (scope_id, memory_id),
    ).fetchone()
    if row is None:
        return None
    old: dict[str, object] = dict(zip(SNAPSHOT_FIELDS, row, strict=True))
    old["source_message_ids"] = json.loads(str(old["source_message_ids"]))
    old["metadata"] = stored_metadata(old["metadata"])
    return old


def record_version(
    conn: Any,
    dialect: Dialect,
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
        conn: A connection inside the caller's write transaction (which holds the scope's
            generation lock, so version numbers cannot race).
        dialect: The backend's SQL dialect.
        scope_id: The scope of the memory.
        memory_id: The memory about to be changed or removed.
        change: What ends the current version.
        actor: Who changes it (`api`, `extraction`, `tool`).
        at: When (UTC ISO-8601).
        related: Ids involved (the absorbing memory of `merged`, the absorbed ones of `merge`).
        replacement: For `update`: the new version. When it equals the current one in every
            remembered field, nothing is recorded (re-writing the same memory is not a version).
        old: The current row's fields (`snapshot_of`) when the caller has already read them.

    Returns:
        Whether a version was recorded (`False` when the memory does not exist or is unchanged).
    """
    if old is None:
        old = snapshot_of(conn, dialect, scope_id, memory_id)
    if old is None or not is_new_version(old, change, replacement):
        return False
    conn.execute(
        dialect.sql(
            "INSERT INTO {p}memory_versions (scope_id, memory_id, version, change, actor, "
            "related_ids, snapshot, replaced_at) "
            "SELECT ?, ?, COUNT(*) + 1, ?, ?, ?, ?, ? FROM {p}memory_versions "
            "WHERE scope_id = ? AND memory_id = ?"
        ),
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


def read_versions(
    conn: Any,
    dialect: Dialect,
    scope_id: int,
    memory_id: str,
    *,
    scope: Scope,
    current: MemoryRecord | None,
) -> list[MemoryVersion]:
    """Every version of a memory, oldest first; the current row (if any) is the last one."""
    rows = conn.execute(
        dialect.sql(
            "SELECT version, change, actor, related_ids, snapshot, replaced_at "
            "FROM {p}memory_versions WHERE scope_id = ? AND memory_id = ? ORDER BY version"
        ),
        (scope_id, memory_id),
    ).fetchall()
    return versions_from_rows(rows, memory_id, scope, current)
