"""Copying rows in and out of the local store as they are (`tdai-recall migrate`).

Export reads a scope's rows page by page in reference order with everything stored about them
(times, a message's context, the vector and the embedder that made it). Import writes such rows
into a scope of this store in one transaction that bumps the scope's generation, keeping ids and
times; references are this store's own. A memory already copied (same id, `updated_at` and vector
embedder) is skipped, so a copy that was interrupted resumes cheaply; a message id that exists is
skipped. `LocalFormationState` adds the copy of memory formation's state: cursors (carried by
the id of the message they point at), history versions, the scene queue and scene/persona state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from langchain_tdai_recall.stores.formation import (
    FormationSnapshot,
    SessionCursor,
    SessionState,
    VersionRow,
)
from langchain_tdai_recall.stores.local._formation import FormationRecords
from langchain_tdai_recall.stores.local._sqlite import (
    _MEMORY_COLS,
    _MESSAGE_COLS,
    MemoryRow,
    MessageRow,
    SqliteRecords,
)
from langchain_tdai_recall.stores.records import memory_from_row, message_from_row
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import Scope

__all__ = [
    "LocalFormationState",
    "export_memories",
    "export_messages",
    "import_memories",
    "import_messages",
]

_COPY_MEMORY: Final = """
    INSERT INTO memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, timestamp, session_key, source_message_ids,
        created_at, updated_at, generation, embedder, vector, content_key)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope_id, id) DO UPDATE SET
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, timestamp = excluded.timestamp,
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        generation = excluded.generation, embedder = excluded.embedder, vector = excluded.vector,
        content_key = excluded.content_key
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
    return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]


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
        MessageRow(int(r[0]), message_from_row(r, scope), r[-2], r[-1], context=str(r[-3]))
        for r in rows
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
                    scope_id,
                    rec.id,
                    rec.content,
                    rec.type,
                    rec.scene_name,
                    rec.priority,
                    rec.activity_start_time,
                    rec.activity_end_time,
                    rec.timestamp,
                    rec.session_key,
                    json.dumps(list(rec.source_message_ids), ensure_ascii=False),
                    rec.created_at,
                    rec.updated_at,
                    gen,
                    embedder,
                    row.vector if has_vector else None,
                    content_fingerprint(rec.content),
                ),
            )
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
                    scope_id,
                    rec.id,
                    rec.role,
                    rec.content,
                    rec.session_key,
                    rec.session_id,
                    rec.recorded_at,
                    row.context,
                    gen,
                    row.embedder if has_vector else None,
                    row.vector if has_vector else None,
                ),
            )
            written += cur.rowcount
    return written


class LocalFormationState(FormationRecords):
    """The local store's formation state, with the copy primitives of `stores.formation`."""

    def export_scope(self, scope_id: int) -> FormationSnapshot:
        """The scope's cursors (by message id), history, scene/persona state and scene queue."""
        if not self.db.has_formation_tables:  # a read-only open of an older store
            return FormationSnapshot()
        with self.db.reading() as conn:
            sessions = conn.execute(
                "SELECT f.session_key, f.cursor, f.warmup, f.situation, f.failures, f.retry_at, "
                "f.last_error, m.id FROM formation_sessions f LEFT JOIN messages m "
                "ON m.rowid = f.cursor AND m.scope_id = f.scope_id WHERE f.scope_id = ? "
                "ORDER BY f.session_key",
                (scope_id,),
            ).fetchall()
            versions = conn.execute(
                "SELECT memory_id, version, change, actor, related_ids, snapshot, replaced_at "
                "FROM memory_versions WHERE scope_id = ? ORDER BY seq",
                (scope_id,),
            ).fetchall()
            queue = conn.execute(
                "SELECT memory_id FROM formation_scene_queue WHERE scope_id = ? ORDER BY seq",
                (scope_id,),
            ).fetchall()
        state = self.scope_state(scope_id)
        return FormationSnapshot(
            sessions=tuple(
                SessionCursor(
                    str(r[0]),
                    SessionState(
                        int(r[1]), int(r[2]), str(r[3]), int(r[4]), float(r[5]), str(r[6])
                    ),
                    None if r[7] is None else str(r[7]),
                )
                for r in sessions
            ),
            versions=tuple(
                VersionRow(str(r[0]), int(r[1]), *(str(x) for x in r[2:])) for r in versions
            ),
            scope_state=state,
            scene_queue=tuple(str(r[0]) for r in queue),
        )

    def import_scope(self, scope_id: int, snapshot: FormationSnapshot) -> int:
        """Write another store's snapshot into this scope (see `BaseFormationState`)."""
        written = 0
        with self.db.transaction() as conn:
            for item in snapshot.sessions:
                cursor = 0
                if item.message_id is not None:
                    found = conn.execute(
                        "SELECT rowid FROM messages WHERE scope_id = ? AND id = ?",
                        (scope_id, item.message_id),
                    ).fetchone()
                    if found is None:
                        continue  # its messages were not copied: leave the session unformed
                    cursor = int(found[0])
                st = item.state
                cur = conn.execute(
                    "INSERT INTO formation_sessions (scope_id, session_key, cursor, warmup, "
                    "situation, failures, retry_at, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (scope_id, session_key) DO UPDATE SET cursor = excluded.cursor, "
                    "warmup = excluded.warmup, situation = excluded.situation "
                    "WHERE formation_sessions.cursor < excluded.cursor",
                    (
                        scope_id,
                        item.session_key,
                        cursor,
                        st.warmup,
                        st.situation,
                        st.failures,
                        st.retry_at,
                        st.last_error,
                    ),
                )
                written += max(cur.rowcount, 0)
            for v in snapshot.versions:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO memory_versions (scope_id, memory_id, version, change, "
                    "actor, related_ids, snapshot, replaced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        scope_id,
                        v.memory_id,
                        v.version,
                        v.change,
                        v.actor,
                        v.related_ids,
                        v.snapshot,
                        v.replaced_at,
                    ),
                )
                written += max(cur.rowcount, 0)
            state = snapshot.scope_state
            if (
                state is not None
                and conn.execute(
                    "SELECT 1 FROM formation_scopes WHERE scope_id = ?", (scope_id,)
                ).fetchone()
                is None
            ):
                conn.execute(
                    "INSERT INTO formation_scopes (scope_id, scenes_at, memories_since_persona, "
                    "persona_at, failures, retry_at, last_error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        scope_id,
                        state.scenes_at,
                        state.memories_since_persona,
                        state.persona_at,
                        state.failures,
                        state.retry_at,
                        state.last_error,
                    ),
                )
            if (
                snapshot.scene_queue
                and conn.execute(
                    "SELECT 1 FROM formation_scene_queue WHERE scope_id = ?", (scope_id,)
                ).fetchone()
                is None
            ):
                conn.executemany(
                    "INSERT INTO formation_scene_queue (scope_id, memory_id) VALUES (?, ?)",
                    [(scope_id, m) for m in snapshot.scene_queue],
                )
        return written
