"""Reading the original's `vectors.db`, read-only.

L1 rows come from `l1_records`, L0 rows from `l0_conversations`. Only the columns that exist
are selected, so an older schema reads with its missing fields empty; the sqlite-vec and FTS5
tables are derived and never read.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall.errors import ImportUpstreamError
from langchain_tdai_recall.upstream._fields import (
    as_str,
    memory_item,
    message_item,
)
from langchain_tdai_recall.upstream.items import DB_NAME, UpstreamMemory, UpstreamMessage

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["open_db", "read_db_memories", "read_db_messages", "table_names"]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def open_db(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        conn.text_factory = _text  # text that is not UTF-8 is repaired, not a crash mid-import
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        msg = (
            f"{path} is not a readable SQLite database ({exc}); move it aside to import from "
            "the JSONL files instead (superseded records will then be imported too)"
        )
        raise ImportUpstreamError(msg) from exc
    return conn


def table_names(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {str(r[0]) for r in rows}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}


def _select(conn: sqlite3.Connection, table: str, wanted: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of `table` with the wanted columns that exist (missing ones read as `None`)."""
    have = _columns(conn, table)
    cols = [c for c in wanted if c in have]
    if not cols:
        return []
    rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid")
    return [{c: row[c] for c in cols} for row in rows]


_L1_COLUMNS: Final = (
    "record_id",
    "content",
    "type",
    "priority",
    "scene_name",
    "session_key",
    "timestamp_str",
    "created_time",
    "updated_time",
    "metadata_json",
)


_L0_COLUMNS: Final = (
    "record_id",
    "session_key",
    "session_id",
    "role",
    "message_text",
    "recorded_at",
    "timestamp",
)


def read_db_memories(
    conn: sqlite3.Connection,
    sources: Mapping[str, tuple[str, ...]],
    skipped: list[str],
) -> tuple[list[UpstreamMemory], set[str]]:
    """Importable rows of `l1_records`, and the ids of all its rows (importable or not)."""
    out: list[UpstreamMemory] = []
    ids: set[str] = set()
    origin = f"{DB_NAME}:l1_records"
    for row in _select(conn, "l1_records", _L1_COLUMNS):
        rid = as_str(row.get("record_id")).strip()
        if not rid:
            skipped.append(f"record ({origin}): missing record_id")
            continue
        ids.add(rid)
        memory = memory_item(
            origin,
            skipped,
            memory_id=rid,
            content=row.get("content"),
            memory_type=row.get("type"),
            priority=row.get("priority"),
            scene_name=row.get("scene_name"),
            metadata=row.get("metadata_json"),
            session_key=row.get("session_key"),
            source_message_ids=sources.get(rid, ()),
            created_at=as_str(row.get("created_time")) or as_str(row.get("timestamp_str")),
            updated_at=row.get("updated_time"),
        )
        if memory is not None:
            out.append(memory)
    return out, ids


def read_db_messages(conn: sqlite3.Connection, skipped: list[str]) -> list[UpstreamMessage]:
    """Importable rows of `l0_conversations`, in table order."""
    origin = f"{DB_NAME}:l0_conversations"
    out: list[UpstreamMessage] = []
    for row in _select(conn, "l0_conversations", _L0_COLUMNS):
        message = message_item(
            origin,
            skipped,
            message_id=row.get("record_id"),
            role=row.get("role"),
            content=row.get("message_text"),
            session_key=row.get("session_key"),
            session_id=row.get("session_id"),
            timestamp=row.get("timestamp"),
            recorded_at=row.get("recorded_at"),
        )
        if message is not None:
            out.append(message)
    return out
