"""SQLite state of memory formation: cursors, leases, the scene queue, and the one commit.

Exactly-once rests on three facts kept here:

1. **The cursor is the L0 row id** (`messages.rowid`, AUTOINCREMENT). Rows are assigned ids inside
   the writer's transaction and writers are serialised, so a reader never sees a row before
   another one with a smaller id appears later: "everything past the cursor" is exact (upstream
   G-X6 used a shared timestamp and a strict `>`).
2. **One transaction per window**: the memories it adds, updates, merges and deletes, their
   history versions, the scene queue entries and the cursor move commit together or not at
   all, so a crash at any moment leaves either the old state (the window is extracted again,
   nothing was written) or the new one (G-X7).
3. **A lease per scope** (`formation_leases`), taken with `BEGIN IMMEDIATE` so it holds across
   processes sharing the store (G-X18). The commit checks, inside its transaction, that the lease
   is still ours and that the cursor is still where the window started; a process whose lease
   was taken over after it stalled writes nothing. A lease whose owner process on this host no
   longer exists is taken over at once instead of waiting for it to expire.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

import numpy as np

from langchain_tdai_recall._process import pid_alive
from langchain_tdai_recall.stores.formation import (
    BaseFormationState,
    CommitOutcome,
    L0Message,
    LeaseOwner,
    PendingSession,
    ScopeState,
    SessionState,
    Upsert,
)
from langchain_tdai_recall.stores.local._sqlite import _MEMORY_COLS, SqliteRecords
from langchain_tdai_recall.stores.records import memory_from_row
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = ["FormationRecords"]


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FormationRecords(BaseFormationState):
    """Formation's SQL over the store's `SqliteRecords` (same connections, same locks).

    `MemoryStore.formation` holds the store's instance. Scopes are addressed by the store's
    scope ids (`scope_id`), the keys of the formation tables.
    """

    def __init__(self, db: SqliteRecords) -> None:
        self.db = db

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The store's id of a scope (`None` when it never held anything and not `create`)."""
        return self.db.scope_id(scope, create=create)

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""
        return self.db.existing_duplicates(scope_id, texts)

    # -- reading L0 -------------------------------------------------------------------------

    def messages_after(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's messages with row id > `cursor`, oldest first, at most `limit`."""
        with self.db.reading() as conn:
            rows = conn.execute(
                "SELECT rowid, id, role, content, recorded_at FROM messages "
                "WHERE scope_id = ? AND session_key = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                (scope_id, session_key, cursor, limit),
            ).fetchall()
        return [L0Message(int(r), str(i), str(ro), str(c), str(t)) for r, i, ro, c, t in rows]

    def messages_up_to(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's last `limit` messages with row id ≤ `cursor`, oldest first."""
        if limit <= 0:
            return []
        with self.db.reading() as conn:
            rows = conn.execute(
                "SELECT rowid, id, role, content, recorded_at FROM messages "
                "WHERE scope_id = ? AND session_key = ? AND rowid <= ? "
                "ORDER BY rowid DESC LIMIT ?",
                (scope_id, session_key, cursor, limit),
            ).fetchall()
        return [L0Message(int(r), str(i), str(ro), str(c), str(t)) for r, i, ro, c, t in rows][::-1]

    # -- session state ------------------------------------------------------------------------

    def session(self, scope_id: int, session_key: str) -> SessionState:
        """The session's state (defaults when it was never formed)."""
        with self.db.reading() as conn:
            row = conn.execute(
                "SELECT cursor, warmup, situation, failures, retry_at, last_error "
                "FROM formation_sessions WHERE scope_id = ? AND session_key = ?",
                (scope_id, session_key),
            ).fetchone()
        if row is None:
            return SessionState()
        return SessionState(
            int(row[0]), int(row[1]), str(row[2]), int(row[3]), float(row[4]), str(row[5])
        )

    def high_water(self) -> int:
        """The largest L0 row id so far (0 when there is none)."""
        with self.db.reading() as conn:
            (top,) = conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages").fetchone()
        return int(top)

    def pending(
        self,
        scope_id: int | None = None,
        session_key: str | None = None,
        *,
        up_to: int | None = None,
    ) -> list[PendingSession]:
        """Sessions with messages past their cursor (one scope, one session, or all).

        With `up_to`, only messages with row ids up to it are considered. This reads every
        message of the scopes involved: it serves `flush()`, `extract()` and the scan at open;
        per-session bookkeeping uses `backlog`.
        """
        sql = (
            "SELECT m.scope_id, s.user_id, s.agent_id, m.session_key, "
            "COUNT(*), SUM(m.role = 'user'), "
            "COALESCE(f.cursor, 0), COALESCE(f.warmup, 1), COALESCE(f.situation, ''), "
            "COALESCE(f.failures, 0), COALESCE(f.retry_at, 0), COALESCE(f.last_error, '') "
            "FROM messages m JOIN scopes s ON s.scope_id = m.scope_id "
            "LEFT JOIN formation_sessions f "
            "ON f.scope_id = m.scope_id AND f.session_key = m.session_key "
            "WHERE m.rowid > COALESCE(f.cursor, 0)"
        )
        params: list[object] = []
        if scope_id is not None:
            sql += " AND m.scope_id = ?"
            params.append(scope_id)
        if session_key is not None:
            sql += " AND m.session_key = ?"
            params.append(session_key)
        if up_to is not None:
            sql += " AND m.rowid <= ?"
            params.append(up_to)
        sql += " GROUP BY m.scope_id, m.session_key ORDER BY MIN(m.rowid)"
        with self.db.reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            PendingSession(
                scope_id=int(r[0]),
                user_id=str(r[1]),
                agent_id=str(r[2]) or None,
                session_key=str(r[3]),
                state=SessionState(
                    int(r[6]), int(r[7]), str(r[8]), int(r[9]), float(r[10]), str(r[11])
                ),
                messages=int(r[4]),
                user_turns=int(r[5] or 0),
            )
            for r in rows
        ]

    def backlog(self, scope_id: int, session_key: str) -> PendingSession | None:
        """One session's state and the messages past its cursor (an index range, not a scan).

        `None` when nothing is pending.
        """
        state = self.session(scope_id, session_key)
        with self.db.reading() as conn:
            row = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(role = 'user'), 0) FROM messages "
                "WHERE scope_id = ? AND session_key = ? AND rowid > ?",
                (scope_id, session_key, state.cursor),
            ).fetchone()
            scope = conn.execute(
                "SELECT user_id, agent_id FROM scopes WHERE scope_id = ?", (scope_id,)
            ).fetchone()
        if not row or not row[0] or scope is None:
            return None
        return PendingSession(
            scope_id=scope_id,
            user_id=str(scope[0]),
            agent_id=str(scope[1]) or None,
            session_key=session_key,
            state=state,
            messages=int(row[0]),
            user_turns=int(row[1]),
        )

    def recent_memories(self, scope_id: int, scope: Scope, limit: int) -> list[MemoryRecord]:
        """The scope's most recently written memories, newest first."""
        with self.db.reading() as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ? "
                "ORDER BY updated_at DESC, rowid DESC LIMIT ?",
                (scope_id, limit),
            ).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def record_failure(
        self, scope_id: int, session_key: str, *, error: str, retry_at: float
    ) -> int:
        """Count a failed window (the cursor stays); returns the consecutive failures."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO formation_sessions (scope_id, session_key, failures, retry_at, "
                "last_error) VALUES (?, ?, 1, ?, ?) ON CONFLICT (scope_id, session_key) DO UPDATE "
                "SET failures = failures + 1, retry_at = excluded.retry_at, "
                "last_error = excluded.last_error",
                (scope_id, session_key, retry_at, error[:500]),
            )
            (failures,) = conn.execute(
                "SELECT failures FROM formation_sessions WHERE scope_id = ? AND session_key = ?",
                (scope_id, session_key),
            ).fetchone()
        return int(failures)

    def set_warmup(self, scope_id: int, session_key: str, warmup: int) -> None:
        """Store a session's warm-up threshold (0 = graduated)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO formation_sessions (scope_id, session_key, warmup) VALUES (?, ?, ?) "
                "ON CONFLICT (scope_id, session_key) DO UPDATE SET warmup = excluded.warmup",
                (scope_id, session_key, warmup),
            )

    # -- leases -------------------------------------------------------------------------------

    def acquire(self, scope_id: int, owner: LeaseOwner, ttl_s: float) -> bool:
        """Take (or renew) the scope's lease; `False` while another live owner holds it."""
        now = time.time()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT owner, host, pid, expires_at FROM formation_leases WHERE scope_id = ?",
                (scope_id,),
            ).fetchone()
            if row is not None and row[0] != owner.token and float(row[3]) > now:
                if row[1] != owner.host or int(row[2]) == owner.pid:
                    return False  # another host (liveness unknown), or another engine here
                if pid_alive(int(row[2])):
                    return False
                # its owner process on this host is gone (killed): take the lease over now
            conn.execute(
                "INSERT INTO formation_leases (scope_id, owner, host, pid, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope_id) DO UPDATE SET "
                "owner = excluded.owner, host = excluded.host, pid = excluded.pid, "
                "expires_at = excluded.expires_at",
                (scope_id, owner.token, owner.host, owner.pid, now + ttl_s),
            )
        return True

    def release(self, scope_id: int, owner: LeaseOwner) -> None:
        """Give the lease back (only if it is ours)."""
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM formation_leases WHERE scope_id = ? AND owner = ?",
                (scope_id, owner.token),
            )

    @staticmethod
    def _holds(conn: object, scope_id: int, owner: LeaseOwner) -> bool:
        row = conn.execute(  # type: ignore[attr-defined]
            "SELECT owner, expires_at FROM formation_leases WHERE scope_id = ?", (scope_id,)
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
        """Apply one window's (or one tool call's) writes and move the cursor, atomically.

        With `owner`, the lease must still be ours; with `session_key`, the cursor must still
        be `expected_cursor`. Otherwise nothing is written and `ok` is False.
        """
        now = _now_iso()
        written: list[MemoryRecord] = []
        deleted: list[str] = []
        duplicates = 0
        with self.db.transaction() as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return CommitOutcome(False, "the scope's formation lease was taken over")
            if session_key is not None:
                row = conn.execute(
                    "SELECT cursor FROM formation_sessions WHERE scope_id = ? AND session_key = ?",
                    (scope_id, session_key),
                ).fetchone()
                current = int(row[0]) if row else 0
                if current != expected_cursor:
                    return CommitOutcome(
                        False, f"the cursor moved ({expected_cursor} → {current}) meanwhile"
                    )
            gen = self.db.bump(conn, scope_id)
            for memory_id, change, related in deletes:
                if self.db.delete_memory_row(
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
                if up.dedupe and self.db.find_duplicate(conn, scope_id, up.record) is not None:
                    duplicates += 1
                    continue
                blob = up.vector.astype(np.float32).tobytes() if up.vector is not None else None
                written.append(
                    self.db.write_memory_row(
                        conn,
                        scope_id,
                        gen,
                        up.record,
                        actor=actor,
                        embedder=embedder,
                        vector=blob,
                        change=up.change,
                        related=up.related,
                    )
                )
            if queue_scenes and written:
                conn.executemany(
                    "INSERT INTO formation_scene_queue (scope_id, memory_id) VALUES (?, ?)",
                    [(scope_id, r.id) for r in written],
                )
            if session_key is not None and new_cursor is not None:
                conn.execute(
                    "INSERT INTO formation_sessions (scope_id, session_key, cursor, situation, "
                    "warmup) VALUES (?, ?, ?, ?, COALESCE(?, 1)) "
                    "ON CONFLICT (scope_id, session_key) DO UPDATE SET cursor = excluded.cursor, "
                    "situation = COALESCE(?, situation), warmup = COALESCE(?, warmup), "
                    "failures = 0, retry_at = 0, last_error = ''",
                    (scope_id, session_key, new_cursor, situation or "", warmup, situation, warmup),
                )
            if written or deleted:  # the persona is due again after changes, deletions too
                conn.execute(
                    "INSERT INTO formation_scopes (scope_id, memories_since_persona) "
                    "VALUES (?, ?) ON CONFLICT (scope_id) DO UPDATE SET memories_since_persona "
                    "= memories_since_persona + excluded.memories_since_persona",
                    (scope_id, len(written) + len(deleted)),
                )
        return CommitOutcome(True, "", tuple(written), tuple(deleted), duplicates)

    # -- scenes and persona -------------------------------------------------------------------

    def scope_state(self, scope_id: int) -> ScopeState:
        """The scope's scene/persona state."""
        with self.db.reading() as conn:
            row = conn.execute(
                "SELECT scenes_at, memories_since_persona, persona_at, failures, retry_at, "
                "last_error FROM formation_scopes WHERE scope_id = ?",
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
        with self.db.reading() as conn:
            (total,) = conn.execute(
                "SELECT COUNT(*) FROM formation_scene_queue WHERE scope_id = ?", (scope_id,)
            ).fetchone()
            rows = conn.execute(
                "SELECT seq, memory_id FROM formation_scene_queue WHERE scope_id = ? "
                "ORDER BY seq LIMIT ?",
                (scope_id, limit),
            ).fetchall()
            if not rows:
                return 0, [], 0
            ids = list(dict.fromkeys(str(r[1]) for r in rows))
            marks = ",".join("?" * len(ids))
            found = conn.execute(
                f"SELECT {_MEMORY_COLS} FROM memories WHERE scope_id = ? AND id IN ({marks})",
                [scope_id, *ids],
            ).fetchall()
        by_id = {str(r[1]): memory_from_row(r, scope) for r in found}
        return int(rows[-1][0]), [by_id[i] for i in ids if i in by_id], int(total)

    def scopes_with_scene_work(self) -> list[tuple[int, str, str | None]]:
        """Scopes with scene or persona work: (scope_id, user_id, agent_id).

        A non-empty scene queue, or memories written, updated or deleted since formation last
        wrote the scope's persona.
        """
        with self.db.reading() as conn:
            rows = conn.execute(
                "SELECT q.scope_id, s.user_id, s.agent_id FROM formation_scene_queue q "
                "JOIN scopes s ON s.scope_id = q.scope_id UNION "
                "SELECT f.scope_id, s.user_id, s.agent_id FROM formation_scopes f "
                "JOIN scopes s ON s.scope_id = f.scope_id "
                "WHERE f.memories_since_persona > 0 AND f.persona_at > 0 ORDER BY 1"
            ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]) or None) for r in rows]

    def scenes_done(self, scope_id: int, up_to_seq: int, *, owner: LeaseOwner | None) -> bool:
        """Mark queued memories up to `up_to_seq` as folded into the scenes."""
        now = time.time()
        with self.db.transaction() as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return False
            conn.execute(
                "DELETE FROM formation_scene_queue WHERE scope_id = ? AND seq <= ?",
                (scope_id, up_to_seq),
            )
            conn.execute(
                "INSERT INTO formation_scopes (scope_id, scenes_at) VALUES (?, ?) "
                "ON CONFLICT (scope_id) DO UPDATE SET scenes_at = excluded.scenes_at, "
                "failures = 0, retry_at = 0, last_error = ''",
                (scope_id, now),
            )
        return True

    def persona_done(self, scope_id: int) -> None:
        """A valid persona answer (written or kept): the new-memory counter starts again."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO formation_scopes (scope_id, persona_at) VALUES (?, ?) "
                "ON CONFLICT (scope_id) DO UPDATE SET memories_since_persona = 0, "
                "persona_at = excluded.persona_at",
                (scope_id, time.time()),
            )

    def scenes_failed(self, scope_id: int, *, error: str, retry_at: float) -> None:
        """Count a failed scene/persona update (the queue stays)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO formation_scopes (scope_id, failures, retry_at, last_error) "
                "VALUES (?, 1, ?, ?) ON CONFLICT (scope_id) DO UPDATE SET "
                "failures = failures + 1, retry_at = excluded.retry_at, "
                "last_error = excluded.last_error",
                (scope_id, retry_at, error[:500]),
            )

    # -- history ------------------------------------------------------------------------------

    def history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        return self.db.memory_history(scope_id, memory_id, scope)
