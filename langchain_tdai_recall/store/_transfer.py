"""Copying rows in and out of the local store as they are (`tdai-recall migrate`).

Export reads a scope's rows page by page in reference order with everything stored about them
(times, a message's context, the vector and the embedder that made it). Import writes such rows
into a scope of this store in one transaction that bumps the scope's generation, keeping ids and
times; references are this store's own. A memory already copied (same id, `updated_at` and vector
embedder) is skipped, so a copy that was interrupted resumes cheaply; a message id that exists is
skipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from langchain_tdai_recall.store._sqlite import (
    _MEMORY_COLS,
    _MESSAGE_COLS,
    MemoryRow,
    MessageRow,
    SqliteRecords,
    _memory,
    _message,
)
from langchain_tdai_recall.types import Scope

__all__ = ["export_memories", "export_messages", "import_memories", "import_messages"]

_COPY_MEMORY: Final = """
    INSERT INTO memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, timestamp, session_key, source_message_ids,
        created_at, updated_at, generation, embedder, vector)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope_id, id) DO UPDATE SET
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, timestamp = excluded.timestamp,
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        generation = excluded.generation, embedder = excluded.embedder, vector = excluded.vector
"""


def export_memories(
    db: SqliteRecords, scope_id: int, scope: Scope, *, after: int, limit: int
) -> list[MemoryRow]:
    """A page of a scope's memory rows in reference order, with vectors."""
    with db._read() as conn:
        rows = conn.execute(
            f"SELECT {_MEMORY_COLS}, embedder, vector FROM memories "
            "WHERE scope_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (scope_id, after, limit),
        ).fetchall()
    return [MemoryRow(int(r[0]), _memory(r, scope), r[-2], r[-1]) for r in rows]


def export_messages(
    db: SqliteRecords, scope_id: int, scope: Scope, *, after: int, limit: int
) -> list[MessageRow]:
    """A page of a scope's message rows in reference order, with context and vectors."""
    with db._read() as conn:
        rows = conn.execute(
            f"SELECT {_MESSAGE_COLS}, {db._context_column}, embedder, vector FROM messages "
            "WHERE scope_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (scope_id, after, limit),
        ).fetchall()
    return [
        MessageRow(int(r[0]), _message(r, scope), r[-2], r[-1], context=str(r[-3])) for r in rows
    ]


def import_memories(db: SqliteRecords, scope_id: int, rows: Sequence[MemoryRow]) -> int:
    """Write copied memory rows as they are; returns how many were written."""
    written = 0
    with db._write() as conn:
        gen = db._bump(conn, scope_id)
        for row in rows:
            rec = row.record
            has_vector = bool(row.vector) and row.embedder is not None
            embedder = row.embedder if has_vector else None
            found = conn.execute(
                "SELECT updated_at, embedder FROM memories WHERE scope_id = ? AND id = ?",
                (scope_id, rec.id),
            ).fetchone()
            if found is not None and (found[0], found[1]) == (rec.updated_at, embedder):
                continue
            conn.execute(
                _COPY_MEMORY,
                (
                    scope_id, rec.id, rec.content, rec.type, rec.scene_name, rec.priority,
                    rec.activity_start_time, rec.activity_end_time, rec.timestamp,
                    rec.session_key, json.dumps(list(rec.source_message_ids), ensure_ascii=False),
                    rec.created_at, rec.updated_at, gen, embedder,
                    row.vector if has_vector else None,
                ),
            )  # fmt: skip
            written += 1
    return written


def import_messages(db: SqliteRecords, scope_id: int, rows: Sequence[MessageRow]) -> int:
    """Write copied message rows as they are (ids already stored are skipped)."""
    written = 0
    with db._write() as conn:
        gen = db._bump(conn, scope_id)
        for row in rows:
            rec = row.record
            has_vector = bool(row.vector) and row.embedder is not None
            cur = conn.execute(
                "INSERT OR IGNORE INTO messages (scope_id, id, role, content, session_key, "
                "session_id, recorded_at, context, generation, embedder, vector) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    scope_id, rec.id, rec.role, rec.content, rec.session_key, rec.session_id,
                    rec.recorded_at, row.context, gen, row.embedder if has_vector else None,
                    row.vector if has_vector else None,
                ),
            )  # fmt: skip
            written += cur.rowcount
    return written
