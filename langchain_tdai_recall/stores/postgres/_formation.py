"""Memory formation's state in PostgreSQL: cursors, leases, the scene queue, the one commit.

The same contract as the local store's `stores.local._formation` (see `stores.formation`), kept by
PostgreSQL's locks instead of SQLite's single writer:

1. **Cursors are L0 row references, monotonic per scope.** Every message write bumps the
   scope's generation first, which locks the scope's row until the commit, and only then takes
   row ids: writers of one scope commit in row-id order, so "everything past the cursor" of a
   session is exact.
2. **One transaction per window**: lease check, cursor check, memory writes with their history
   versions, scene-queue entries and the cursor move commit together or not at all.
3. **A lease per scope**, exclusive across processes and hosts: taking it locks the lease row
   (`SELECT ... FOR UPDATE`), and a commit holds that lock while it checks that the lease is
   still its owner's, so a take-over cannot slip in between the check and the writes. Lease
   expiry uses the server's clock, so application servers with skewed clocks agree on it; a
   lease whose owner process on the same host is gone is taken over at once. The scheduling
   times (`scenes_at`, `persona_at`, `retry_at`) are the formation process's own clock, as in the
   local store, since that process compares them.

Lock order, to stay free of deadlocks: lease row, then the session row, then the scope row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import psycopg

from langchain_tdai_recall._process import pid_alive
from langchain_tdai_recall.stores.formation import (
    BaseFormationState,
    CommitOutcome,
    FormationSnapshot,
    L0Message,
    LeaseOwner,
    PendingSession,
    ScopeState,
    SessionCursor,
    SessionState,
    Upsert,
    VersionRow,
)
from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.postgres._records import (
    _MEMORY_COLS,
    PostgresRecords,
    _utc_now,
    bump,
    pg_text,
)
from langchain_tdai_recall.stores.records import memory_from_row
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = ["PostgresFormationState"]

_NOW: Final = "extract(epoch FROM clock_timestamp())"
"""The server's clock, in epoch seconds."""


def _session(row: Sequence[Any]) -> SessionState:
    return SessionState(
        int(row[0]), int(row[1]), str(row[2]), int(row[3]), float(row[4]), str(row[5])
    )


class PostgresFormationState(BaseFormationState):
    """Formation's SQL over the PostgreSQL backend's pool and records."""

    def __init__(self, db: Database, records: PostgresRecords) -> None:
        self.db = db
        self.records = records

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The store's id of a scope (`None` when it never held anything and not `create`)."""
        return self.records.scope_id(scope, create=create)

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""
        return self.records.existing_duplicates(scope_id, texts)

    # -- reading L0 -------------------------------------------------------------------------

    def messages_after(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's messages with row id > `cursor`, oldest first, at most `limit`."""
        with self.db.connection("read messages to form memories") as conn:
            rows = conn.execute(
                "SELECT rowid, id, role, content, recorded_at FROM tdai_messages "
                "WHERE scope_id = %s AND session_key = %s AND rowid > %s ORDER BY rowid "
                "LIMIT %s",
                (scope_id, pg_text(session_key), cursor, limit),
            ).fetchall()
        return [L0Message(int(r), str(i), str(ro), str(c), str(t)) for r, i, ro, c, t in rows]

    def messages_up_to(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's last `limit` messages with row id <= `cursor`, oldest first."""
        if limit <= 0:
            return []
        with self.db.connection("read messages to form memories") as conn:
            rows = conn.execute(
                "SELECT rowid, id, role, content, recorded_at FROM tdai_messages "
                "WHERE scope_id = %s AND session_key = %s AND rowid <= %s "
                "ORDER BY rowid DESC LIMIT %s",
                (scope_id, pg_text(session_key), cursor, limit),
            ).fetchall()
        return [L0Message(int(r), str(i), str(ro), str(c), str(t)) for r, i, ro, c, t in rows][::-1]

    def high_water(self) -> int:
        """The largest L0 row id so far (0 when there is none)."""
        with self.db.connection("read the newest message") as conn:
            row = conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM tdai_messages").fetchone()
        return int(row[0]) if row else 0

    # -- session state ------------------------------------------------------------------------

    def session(self, scope_id: int, session_key: str) -> SessionState:
        """The session's state (defaults when it was never formed)."""
        with self.db.connection("read a formation cursor") as conn:
            row = conn.execute(
                "SELECT cursor, warmup, situation, failures, retry_at, last_error "
                "FROM tdai_formation_sessions WHERE scope_id = %s AND session_key = %s",
                (scope_id, pg_text(session_key)),
            ).fetchone()
        return SessionState() if row is None else _session(row)

    def pending(
        self,
        scope_id: int | None = None,
        session_key: str | None = None,
        *,
        up_to: int | None = None,
    ) -> list[PendingSession]:
        """Sessions with messages past their cursor (one scope, one session, or all)."""
        sql = (
            "SELECT m.scope_id, s.user_id, s.agent_id, m.session_key, "
            "COUNT(*), COUNT(*) FILTER (WHERE m.role = 'user'), "
            "COALESCE(f.cursor, 0), COALESCE(f.warmup, 1), COALESCE(f.situation, ''), "
            "COALESCE(f.failures, 0), COALESCE(f.retry_at, 0), COALESCE(f.last_error, '') "
            "FROM tdai_messages m JOIN tdai_scopes s ON s.scope_id = m.scope_id "
            "LEFT JOIN tdai_formation_sessions f "
            "ON f.scope_id = m.scope_id AND f.session_key = m.session_key "
            "WHERE m.rowid > COALESCE(f.cursor, 0)"
        )
        params: list[object] = []
        if scope_id is not None:
            sql += " AND m.scope_id = %s"
            params.append(scope_id)
        if session_key is not None:
            sql += " AND m.session_key = %s"
            params.append(pg_text(session_key))
        if up_to is not None:
            sql += " AND m.rowid <= %s"
            params.append(up_to)
        sql += (
            " GROUP BY m.scope_id, s.user_id, s.agent_id, m.session_key, f.cursor, f.warmup, "
            "f.situation, f.failures, f.retry_at, f.last_error ORDER BY MIN(m.rowid)"
        )
        with self.db.connection("list pending formation work") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            PendingSession(
                scope_id=int(r[0]),
                user_id=str(r[1]),
                agent_id=str(r[2]) or None,
                session_key=str(r[3]),
                state=_session(r[6:12]),
                messages=int(r[4]),
                user_turns=int(r[5] or 0),
            )
            for r in rows
        ]

    def backlog(self, scope_id: int, session_key: str) -> PendingSession | None:
        """One session's state and the messages past its cursor; `None` when nothing is."""
        key = pg_text(session_key) or ""
        with self.db.connection("read a session's backlog") as conn:
            row = conn.execute(
                "SELECT s.user_id, s.agent_id, f.cursor, f.warmup, f.situation, f.failures, "
                "f.retry_at, f.last_error FROM tdai_scopes s LEFT JOIN tdai_formation_sessions f "
                "ON f.scope_id = s.scope_id AND f.session_key = %s WHERE s.scope_id = %s",
                (key, scope_id),
            ).fetchone()
            if row is None:
                return None
            state = SessionState() if row[2] is None else _session(row[2:8])
            counts = conn.execute(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE role = 'user') FROM tdai_messages "
                "WHERE scope_id = %s AND session_key = %s AND rowid > %s",
                (scope_id, key, state.cursor),
            ).fetchone()
        if not counts or not counts[0]:
            return None
        return PendingSession(
            scope_id=scope_id,
            user_id=str(row[0]),
            agent_id=str(row[1]) or None,
            session_key=session_key,
            state=state,
            messages=int(counts[0]),
            user_turns=int(counts[1]),
        )

    def recent_memories(self, scope_id: int, scope: Scope, limit: int) -> list[MemoryRecord]:
        """The scope's most recently written memories, newest first."""
        with self.db.connection("read recent memories") as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s "
                'ORDER BY updated_at COLLATE "C" DESC, rowid DESC LIMIT %s',
                (scope_id, limit),
            ).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def record_failure(
        self, scope_id: int, session_key: str, *, error: str, retry_at: float
    ) -> int:
        """Count a failed window (the cursor stays); returns the consecutive failures."""
        with self.db.transaction("record a formation failure") as conn:
            row = conn.execute(
                "INSERT INTO tdai_formation_sessions (scope_id, session_key, failures, retry_at, "
                "last_error) VALUES (%s, %s, 1, %s, %s) ON CONFLICT (scope_id, session_key) "
                "DO UPDATE SET failures = tdai_formation_sessions.failures + 1, "
                "retry_at = excluded.retry_at, last_error = excluded.last_error "
                "RETURNING failures",
                (scope_id, pg_text(session_key), retry_at, pg_text(error[:500])),
            ).fetchone()
        return int(row[0]) if row else 1

    def set_warmup(self, scope_id: int, session_key: str, warmup: int) -> None:
        """Store a session's warm-up threshold (0 = graduated)."""
        with self.db.transaction("store a warm-up threshold") as conn:
            conn.execute(
                "INSERT INTO tdai_formation_sessions (scope_id, session_key, warmup) "
                "VALUES (%s, %s, %s) ON CONFLICT (scope_id, session_key) DO UPDATE SET "
                "warmup = excluded.warmup",
                (scope_id, pg_text(session_key), warmup),
            )

    # -- leases -------------------------------------------------------------------------------

    def acquire(self, scope_id: int, owner: LeaseOwner, ttl_s: float) -> bool:
        """Take (or renew) the scope's lease; `False` while another live owner holds it."""
        with self.db.transaction("take a formation lease") as conn:
            conn.execute(
                "INSERT INTO tdai_formation_leases (scope_id, owner, host, pid, expires_at) "
                "VALUES (%s, '', '', 0, 0) ON CONFLICT (scope_id) DO NOTHING",
                (scope_id,),
            )
            row = conn.execute(
                f"SELECT owner, host, pid, expires_at > {_NOW} FROM tdai_formation_leases "
                "WHERE scope_id = %s FOR UPDATE",
                (scope_id,),
            ).fetchone()
            assert row is not None
            held, host, pid, live = str(row[0]), str(row[1]), int(row[2]), bool(row[3])
            if held and held != owner.token and live:
                if host != owner.host or pid == owner.pid:
                    return False  # another host (liveness unknown), or another engine here
                if pid_alive(pid):
                    return False
                # its owner process on this host is gone (killed): take the lease over now
            conn.execute(
                "UPDATE tdai_formation_leases SET owner = %s, host = %s, pid = %s, "
                f"expires_at = {_NOW} + %s WHERE scope_id = %s",
                (owner.token, owner.host, owner.pid, ttl_s, scope_id),
            )
        return True

    def release(self, scope_id: int, owner: LeaseOwner) -> None:
        """Give the lease back (only if it is ours)."""
        with self.db.transaction("give a formation lease back") as conn:
            conn.execute(
                "DELETE FROM tdai_formation_leases WHERE scope_id = %s AND owner = %s",
                (scope_id, owner.token),
            )

    @staticmethod
    def _holds(conn: psycopg.Connection[Any], scope_id: int, owner: LeaseOwner) -> bool:
        """Whether `owner` holds the lease; locks the lease row until the transaction ends."""
        row = conn.execute(
            "SELECT owner FROM tdai_formation_leases WHERE scope_id = %s FOR UPDATE",
            (scope_id,),
        ).fetchone()
        return row is not None and row[0] == owner.token

    # -- the commit ---------------------------------------------------------------------------

    def commit(
        self,
        scope_id: int,
        *,
        owner: LeaseOwner | None,
        upserts: Sequence[Upsert],
        deletes: Sequence[tuple[str, Change, tuple[str, ...]]],
        actor: str,
        embedder: str | None,
        session_key: str | None = None,
        expected_cursor: int | None = None,
        new_cursor: int | None = None,
        situation: str | None = None,
        warmup: int | None = None,
        queue_scenes: bool = True,
    ) -> CommitOutcome:
        """Apply one window's (or one tool call's) writes and move the cursor, atomically."""
        now = _utc_now()
        written: list[MemoryRecord] = []
        deleted: list[str] = []
        duplicates = 0
        key = pg_text(session_key)
        with self.db.transaction("commit formed memories") as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return CommitOutcome(False, "the scope's formation lease was taken over")
            if session_key is not None:
                row = conn.execute(
                    "SELECT cursor FROM tdai_formation_sessions WHERE scope_id = %s "
                    "AND session_key = %s FOR UPDATE",
                    (scope_id, key),
                ).fetchone()
                current = int(row[0]) if row else 0
                if current != expected_cursor:
                    return CommitOutcome(
                        False, f"the cursor moved ({expected_cursor} → {current}) meanwhile"
                    )
            gen = bump(conn, scope_id)
            records = self.records
            for memory_id, change, related in deletes:
                if records.delete_memory_row(
                    conn,
                    scope_id,
                    gen,
                    memory_id,
                    actor=actor,
                    at=now,
                    change=change,
                    related=related,
                ):
                    deleted.append(memory_id)
            for up in upserts:
                if up.dedupe and records.find_duplicate(conn, scope_id, up.record) is not None:
                    duplicates += 1
                    continue
                vector = up.vector.astype(np.float32) if up.vector is not None else None
                written.append(
                    records.write_memory_row(
                        conn,
                        scope_id,
                        gen,
                        up.record,
                        actor=actor,
                        embedder=embedder,
                        vector=vector,
                        change=up.change,
                        related=up.related,
                    )
                )
            if queue_scenes and written:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tdai_formation_scene_queue (scope_id, memory_id) "
                        "VALUES (%s, %s)",
                        [(scope_id, pg_text(r.id)) for r in written],
                    )
            if session_key is not None and new_cursor is not None:
                conn.execute(
                    "INSERT INTO tdai_formation_sessions (scope_id, session_key, cursor, "
                    "situation, warmup) VALUES (%s, %s, %s, %s, COALESCE(%s, 1)) "
                    "ON CONFLICT (scope_id, session_key) DO UPDATE SET cursor = excluded.cursor, "
                    "situation = COALESCE(%s, tdai_formation_sessions.situation), "
                    "warmup = COALESCE(%s, tdai_formation_sessions.warmup), failures = 0, "
                    "retry_at = 0, last_error = ''",
                    (
                        scope_id,
                        key,
                        new_cursor,
                        pg_text(situation or ""),
                        warmup,
                        pg_text(situation),
                        warmup,
                    ),
                )
            if written or deleted:  # the persona is due again after changes, deletions too
                conn.execute(
                    "INSERT INTO tdai_formation_scopes (scope_id, memories_since_persona) "
                    "VALUES (%s, %s) ON CONFLICT (scope_id) DO UPDATE SET memories_since_persona"
                    " = tdai_formation_scopes.memories_since_persona "
                    "+ excluded.memories_since_persona",
                    (scope_id, len(written) + len(deleted)),
                )
        return CommitOutcome(True, "", tuple(written), tuple(deleted), duplicates)

    # -- scenes and persona -------------------------------------------------------------------

    def scope_state(self, scope_id: int) -> ScopeState:
        """The scope's scene/persona state."""
        with self.db.connection("read formation state") as conn:
            row = conn.execute(
                "SELECT scenes_at, memories_since_persona, persona_at, failures, retry_at, "
                "last_error FROM tdai_formation_scopes WHERE scope_id = %s",
                (scope_id,),
            ).fetchone()
        if row is None:
            return ScopeState()
        return ScopeState(
            float(row[0]), int(row[1]), float(row[2]), int(row[3]), float(row[4]), str(row[5])
        )

    def scene_queue(
        self, scope_id: int, scope: Scope, limit: int
    ) -> tuple[int, list[MemoryRecord], int]:
        """(last seq read, the queued memories that still exist, how many are queued in all)."""
        with self.db.connection("read the scene queue") as conn:
            total = conn.execute(
                "SELECT COUNT(*) FROM tdai_formation_scene_queue WHERE scope_id = %s",
                (scope_id,),
            ).fetchone()
            rows = conn.execute(
                "SELECT seq, memory_id FROM tdai_formation_scene_queue WHERE scope_id = %s "
                "ORDER BY seq LIMIT %s",
                (scope_id, limit),
            ).fetchall()
            if not rows:
                return 0, [], 0
            ids = list(dict.fromkeys(str(r[1]) for r in rows))
            found = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM tdai_memories WHERE scope_id = %s AND id = ANY(%s)",
                (scope_id, ids),
            ).fetchall()
        by_id = {str(r[1]): memory_from_row(r, scope) for r in found}
        count = int(total[0]) if total else 0
        return int(rows[-1][0]), [by_id[i] for i in ids if i in by_id], count

    def scopes_with_scene_work(self) -> list[tuple[int, str, str | None]]:
        """Scopes with scene or persona work: (scope_id, user_id, agent_id).

        A non-empty scene queue, or memories written, updated or deleted since formation last
        wrote the scope's persona.
        """
        with self.db.connection("list scopes with scene work") as conn:
            rows = conn.execute(
                "SELECT q.scope_id, s.user_id, s.agent_id "
                "FROM tdai_formation_scene_queue q JOIN tdai_scopes s ON s.scope_id = q.scope_id "
                "UNION SELECT f.scope_id, s.user_id, s.agent_id FROM tdai_formation_scopes f "
                "JOIN tdai_scopes s ON s.scope_id = f.scope_id "
                "WHERE f.memories_since_persona > 0 AND f.persona_at > 0 ORDER BY 1"
            ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]) or None) for r in rows]

    def scenes_done(self, scope_id: int, up_to_seq: int, *, owner: LeaseOwner | None) -> bool:
        """Mark queued memories up to `up_to_seq` as folded into the scenes."""
        with self.db.transaction("update the scene queue") as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return False
            conn.execute(
                "DELETE FROM tdai_formation_scene_queue WHERE scope_id = %s AND seq <= %s",
                (scope_id, up_to_seq),
            )
            conn.execute(
                "INSERT INTO tdai_formation_scopes (scope_id, scenes_at) "
                "VALUES (%s, %s) ON CONFLICT (scope_id) DO UPDATE SET "
                "scenes_at = excluded.scenes_at, failures = 0, retry_at = 0, last_error = ''",
                (scope_id, time.time()),
            )
        return True

    def persona_done(self, scope_id: int) -> None:
        """A valid persona answer (written or kept): the new-memory counter starts again."""
        with self.db.transaction("update formation state") as conn:
            conn.execute(
                "INSERT INTO tdai_formation_scopes (scope_id, persona_at) "
                "VALUES (%s, %s) ON CONFLICT (scope_id) DO UPDATE SET "
                "memories_since_persona = 0, persona_at = excluded.persona_at",
                (scope_id, time.time()),
            )

    def scenes_failed(self, scope_id: int, *, error: str, retry_at: float) -> None:
        """Count a failed scene/persona update (the queue stays)."""
        with self.db.transaction("record a scene failure") as conn:
            conn.execute(
                "INSERT INTO tdai_formation_scopes (scope_id, failures, retry_at, last_error) "
                "VALUES (%s, 1, %s, %s) ON CONFLICT (scope_id) DO UPDATE SET "
                "failures = tdai_formation_scopes.failures + 1, retry_at = excluded.retry_at, "
                "last_error = excluded.last_error",
                (scope_id, retry_at, pg_text(error[:500])),
            )

    # -- history ------------------------------------------------------------------------------

    def history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        return self.records.memory_history(scope_id, memory_id, scope)

    # -- copying a store ----------------------------------------------------------------------

    def export_scope(self, scope_id: int) -> FormationSnapshot:
        """The scope's cursors (by message id), history, scene/persona state and scene queue."""
        with self.db.connection("read formation state to copy") as conn:
            sessions = conn.execute(
                "SELECT f.session_key, f.cursor, f.warmup, f.situation, f.failures, f.retry_at, "
                "f.last_error, m.id FROM tdai_formation_sessions f LEFT JOIN tdai_messages m "
                "ON m.rowid = f.cursor AND m.scope_id = f.scope_id WHERE f.scope_id = %s "
                'ORDER BY f.session_key COLLATE "C"',
                (scope_id,),
            ).fetchall()
            versions = conn.execute(
                "SELECT memory_id, version, change, actor, related_ids, snapshot, replaced_at "
                "FROM tdai_memory_versions WHERE scope_id = %s ORDER BY seq",
                (scope_id,),
            ).fetchall()
            queue = conn.execute(
                "SELECT memory_id FROM tdai_formation_scene_queue WHERE scope_id = %s ORDER BY seq",
                (scope_id,),
            ).fetchall()
        return FormationSnapshot(
            sessions=tuple(
                SessionCursor(str(r[0]), _session(r[1:7]), None if r[7] is None else str(r[7]))
                for r in sessions
            ),
            versions=tuple(
                VersionRow(str(r[0]), int(r[1]), *(str(x) for x in r[2:])) for r in versions
            ),
            scope_state=self.scope_state(scope_id),
            scene_queue=tuple(str(r[0]) for r in queue),
        )

    def import_scope(self, scope_id: int, snapshot: FormationSnapshot) -> int:
        """Write another store's snapshot into this scope (see `BaseFormationState`)."""
        written = 0
        with self.db.transaction("write copied formation state", timeout_s=120.0) as conn:
            for item in snapshot.sessions:
                cursor = 0
                if item.message_id is not None:
                    found = conn.execute(
                        "SELECT rowid FROM tdai_messages WHERE scope_id = %s AND id = %s",
                        (scope_id, pg_text(item.message_id)),
                    ).fetchone()
                    if found is None:
                        continue  # its messages were not copied: leave the session unformed
                    cursor = int(found[0])
                st = item.state
                cur = conn.execute(
                    "INSERT INTO tdai_formation_sessions (scope_id, session_key, cursor, warmup, "
                    "situation, failures, retry_at, last_error) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (scope_id, session_key) "
                    "DO UPDATE SET cursor = excluded.cursor, warmup = excluded.warmup, "
                    "situation = excluded.situation "
                    "WHERE tdai_formation_sessions.cursor < excluded.cursor",
                    (
                        scope_id,
                        pg_text(item.session_key),
                        cursor,
                        st.warmup,
                        pg_text(st.situation),
                        st.failures,
                        st.retry_at,
                        pg_text(st.last_error),
                    ),
                )
                written += max(cur.rowcount, 0)
            if snapshot.versions:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tdai_memory_versions (scope_id, memory_id, version, change, "
                        "actor, related_ids, snapshot, replaced_at) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING "
                        "RETURNING 1",
                        [
                            (
                                scope_id,
                                pg_text(v.memory_id),
                                v.version,
                                v.change,
                                v.actor,
                                pg_text(v.related_ids),
                                pg_text(v.snapshot),
                                v.replaced_at,
                            )
                            for v in snapshot.versions
                        ],
                        returning=True,
                    )
                    while True:
                        written += len(cur.fetchall())
                        if not cur.nextset():
                            break
            state = snapshot.scope_state
            if state is not None:
                conn.execute(
                    "INSERT INTO tdai_formation_scopes (scope_id, scenes_at, "
                    "memories_since_persona, persona_at, failures, retry_at, last_error) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (scope_id) DO NOTHING",
                    (
                        scope_id,
                        state.scenes_at,
                        state.memories_since_persona,
                        state.persona_at,
                        state.failures,
                        state.retry_at,
                        pg_text(state.last_error),
                    ),
                )
            if (
                snapshot.scene_queue
                and not conn.execute(
                    "SELECT 1 FROM tdai_formation_scene_queue WHERE scope_id = %s LIMIT 1",
                    (scope_id,),
                ).fetchone()
            ):
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tdai_formation_scene_queue (scope_id, memory_id) "
                        "VALUES (%s, %s)",
                        [(scope_id, pg_text(m)) for m in snapshot.scene_queue],
                    )
        return written
