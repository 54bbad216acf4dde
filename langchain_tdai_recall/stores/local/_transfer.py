"""Copying the local store's formation state (`tdai-recall migrate`).

`LocalFormationState` adds the copy of memory formation's state to `FormationRecords`: cursors
(carried by the id of the message they point at), history versions, the scene queue and
scene/persona state. The rows themselves are copied by `SqliteRecords.export_*`/`import_*`.
"""

from __future__ import annotations

from langchain_tdai_recall.stores.formation import (
    FormationSnapshot,
    SessionCursor,
    SessionState,
    VersionRow,
)
from langchain_tdai_recall.stores.local._formation import FormationRecords

__all__ = ["LocalFormationState"]


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
