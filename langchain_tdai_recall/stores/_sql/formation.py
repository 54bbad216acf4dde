"""Memory formation's state written once over SQL: both backends' cursors, leases and commit.

`SqlFormationState` implements `stores.formation.BaseFormationState` with the statements the
local store and PostgreSQL share, spelled for each by its `Dialect`: reading L0 past a cursor,
session and scope state, the scene queue, the copy of a scope's state, and the one commit per
window (lease check, cursor check, memory writes with their history, scene queue, cursor move)
in one transaction. A backend supplies its record primitives (`records.RowWriter`), its
connections, a batch insert, and `acquire`, which each bases on its own clock and locks.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from langchain_tdai_recall._runtime.process import pid_alive
from langchain_tdai_recall.stores._sql.dialect import utc_now
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
from langchain_tdai_recall.stores.records import memory_from_row
from langchain_tdai_recall.types import Change, MemoryRecord

if TYPE_CHECKING:
    from langchain_tdai_recall.stores._sql.dialect import Dialect
    from langchain_tdai_recall.stores.records import RowWriter
    from langchain_tdai_recall.types import MemoryVersion, Scope

__all__ = ["SqlFormationState", "may_take_lease"]


def _message(row: Sequence[Any]) -> L0Message:
    return L0Message(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]))


def _session(row: Sequence[Any]) -> SessionState:
    return SessionState(
        int(row[0]), int(row[1]), str(row[2]), int(row[3]), float(row[4]), str(row[5])
    )


def may_take_lease(owner: LeaseOwner, held_by: str, host: str, pid: int, live: bool) -> bool:
    """Whether `owner` may take a lease that `held_by` (on `host`, process `pid`) holds.

    A free, expired or own lease is taken; another owner's live lease only when that owner is a
    process of this host that no longer exists (killed): it is taken over at once. Another
    host's process cannot be checked, and another engine of this process is alive.
    """
    if not held_by or held_by == owner.token or not live:
        return True
    if host != owner.host or pid == owner.pid:
        return False
    return not pid_alive(pid)


class SqlFormationState(BaseFormationState):
    """`BaseFormationState` written once over a SQL backend's record primitives and dialect.

    A backend supplies its `RowWriter` (the records, whose scope ids these are), its `Dialect`,
    a read connection and a transaction (`_reading`, `_writing`), a batch insert, and `acquire`,
    which each backend bases on its own clock and locks. Everything else, the commit first, is
    here: the same statements in each backend's spelling, so that both keep the contract of this
    module the same way.
    """

    records: RowWriter
    dialect: Dialect

    @abstractmethod
    def _reading(self, action: str) -> AbstractContextManager[Any]:
        """A read connection for a few statements (no transaction); `action` names it."""

    @abstractmethod
    def _writing(
        self, action: str, *, timeout_s: float | None = None
    ) -> AbstractContextManager[Any]:
        """A write transaction (committed on success, rolled back on error)."""

    @abstractmethod
    def _insert_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        """Run one insert statement for each of `rows` inside the caller's transaction."""

    def _has_tables(self) -> bool:
        """Whether the formation tables exist (a read-only open of an older store lacks them)."""
        return True

    def _sql(self, template: str) -> str:
        return self.dialect.sql(template)

    def _text(self, text: str | None) -> str | None:
        return self.dialect.text(text)

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
        with self._reading("read messages to form memories") as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT rowid, id, role, content, recorded_at FROM {p}messages "
                    "WHERE scope_id = ? AND session_key = ? AND rowid > ? ORDER BY rowid LIMIT ?"
                ),
                (scope_id, self._text(session_key), cursor, limit),
            ).fetchall()
        return [_message(r) for r in rows]

    def messages_up_to(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's last `limit` messages with row id <= `cursor`, oldest first."""
        if limit <= 0:
            return []
        with self._reading("read messages to form memories") as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT rowid, id, role, content, recorded_at FROM {p}messages "
                    "WHERE scope_id = ? AND session_key = ? AND rowid <= ? "
                    "ORDER BY rowid DESC LIMIT ?"
                ),
                (scope_id, self._text(session_key), cursor, limit),
            ).fetchall()
        return [_message(r) for r in rows][::-1]

    def high_water(self) -> int:
        """The largest L0 row id so far (0 when there is none)."""
        with self._reading("read the newest message") as conn:
            row = conn.execute(
                self._sql("SELECT COALESCE(MAX(rowid), 0) FROM {p}messages")
            ).fetchone()
        return int(row[0]) if row else 0

    # -- session state ------------------------------------------------------------------------

    def session(self, scope_id: int, session_key: str) -> SessionState:
        """The session's state (defaults when it was never formed)."""
        with self._reading("read a formation cursor") as conn:
            row = conn.execute(
                self._sql(
                    "SELECT cursor, warmup, situation, failures, retry_at, last_error "
                    "FROM {p}formation_sessions WHERE scope_id = ? AND session_key = ?"
                ),
                (scope_id, self._text(session_key)),
            ).fetchone()
        return SessionState() if row is None else _session(row)

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
            "COUNT(*), SUM(CASE WHEN m.role = 'user' THEN 1 ELSE 0 END), "
            "COALESCE(f.cursor, 0), COALESCE(f.warmup, 1), COALESCE(f.situation, ''), "
            "COALESCE(f.failures, 0), COALESCE(f.retry_at, 0), COALESCE(f.last_error, '') "
            "FROM {p}messages m JOIN {p}scopes s ON s.scope_id = m.scope_id "
            "LEFT JOIN {p}formation_sessions f "
            "ON f.scope_id = m.scope_id AND f.session_key = m.session_key "
            "WHERE m.rowid > COALESCE(f.cursor, 0)"
        )
        params: list[object] = []
        if scope_id is not None:
            sql += " AND m.scope_id = ?"
            params.append(scope_id)
        if session_key is not None:
            sql += " AND m.session_key = ?"
            params.append(self._text(session_key))
        if up_to is not None:
            sql += " AND m.rowid <= ?"
            params.append(up_to)
        sql += (
            " GROUP BY m.scope_id, s.user_id, s.agent_id, m.session_key, f.cursor, f.warmup, "
            "f.situation, f.failures, f.retry_at, f.last_error ORDER BY MIN(m.rowid)"
        )
        with self._reading("list pending formation work") as conn:
            rows = conn.execute(self._sql(sql), params).fetchall()
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
        """One session's state and the messages past its cursor (an index range, not a scan).

        `None` when nothing is pending.
        """
        key = self._text(session_key)
        with self._reading("read a session's backlog") as conn:
            row = conn.execute(
                self._sql(
                    "SELECT s.user_id, s.agent_id, f.cursor, f.warmup, f.situation, f.failures, "
                    "f.retry_at, f.last_error FROM {p}scopes s "
                    "LEFT JOIN {p}formation_sessions f "
                    "ON f.scope_id = s.scope_id AND f.session_key = ? WHERE s.scope_id = ?"
                ),
                (key, scope_id),
            ).fetchone()
            if row is None:
                return None
            state = SessionState() if row[2] is None else _session(row[2:8])
            counts = conn.execute(
                self._sql(
                    "SELECT COUNT(*), COALESCE(SUM(CASE WHEN role = 'user' THEN 1 ELSE 0 END), 0) "
                    "FROM {p}messages WHERE scope_id = ? AND session_key = ? AND rowid > ?"
                ),
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
        d = self.dialect
        with self._reading("read recent memories") as conn:
            rows = conn.execute(
                d.sql(
                    f"SELECT {d.memory_columns} FROM {{p}}memories WHERE scope_id = ? "
                    f"ORDER BY updated_at{d.collate_c} DESC, rowid DESC LIMIT ?"
                ),
                (scope_id, limit),
            ).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def record_failure(
        self, scope_id: int, session_key: str, *, error: str, retry_at: float
    ) -> int:
        """Count a failed window (the cursor stays); returns the consecutive failures.

        A session that holds no message any more (erased by `forget` while the window was
        formed) gets no state: there is nothing to retry.
        """
        session = self._text(session_key)
        with self._writing("record a formation failure") as conn:
            row = conn.execute(
                self._sql(
                    "INSERT INTO {p}formation_sessions (scope_id, session_key, failures, "
                    "retry_at, last_error) SELECT ?, ?, 1, ?, ? WHERE EXISTS (SELECT 1 FROM "
                    "{p}messages WHERE scope_id = ? AND session_key = ?) "
                    "ON CONFLICT (scope_id, session_key) DO UPDATE SET "
                    "failures = {p}formation_sessions.failures + 1, "
                    "retry_at = excluded.retry_at, last_error = excluded.last_error "
                    "RETURNING failures"
                ),
                (scope_id, session, retry_at, self._text(error[:500]), scope_id, session),
            ).fetchone()
        return int(row[0]) if row else 0

    def set_warmup(self, scope_id: int, session_key: str, warmup: int) -> None:
        """Store a session's warm-up threshold (0 = graduated).

        Not for a session that holds no message any more (erased by `forget`).
        """
        session = self._text(session_key)
        with self._writing("store a warm-up threshold") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {p}formation_sessions (scope_id, session_key, warmup) "
                    "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM {p}messages "
                    "WHERE scope_id = ? AND session_key = ?) "
                    "ON CONFLICT (scope_id, session_key) DO UPDATE SET warmup = excluded.warmup"
                ),
                (scope_id, session, warmup, scope_id, session),
            )

    # -- leases -------------------------------------------------------------------------------

    def release(self, scope_id: int, owner: LeaseOwner) -> None:
        """Give the lease back (only if it is ours)."""
        with self._writing("give a formation lease back") as conn:
            conn.execute(
                self._sql("DELETE FROM {p}formation_leases WHERE scope_id = ? AND owner = ?"),
                (scope_id, owner.token),
            )

    def _holds(self, conn: Any, scope_id: int, owner: LeaseOwner) -> bool:
        """Whether `owner` holds the lease (locking the lease row where rows are locked)."""
        row = conn.execute(
            self._sql(
                f"SELECT owner FROM {{p}}formation_leases WHERE scope_id = ?"
                f"{self.dialect.for_update}"
            ),
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
        """Apply one window's (or one tool call's) writes and move the cursor, atomically.

        With `owner`, the lease must still be ours; with `session_key`, the cursor must still
        be `expected_cursor` and the window's last message (`new_cursor`) must still exist (not
        erased meanwhile). Otherwise nothing is written and `ok` is False. Locks are taken in
        one order (lease row, session row, scope row), so concurrent commits cannot deadlock.
        """
        now = utc_now()
        written: list[MemoryRecord] = []
        deleted: list[str] = []
        duplicates = 0
        key = self._text(session_key)
        records = self.records
        with self._writing("commit formed memories") as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return CommitOutcome(False, "the scope's formation lease was taken over")
            if session_key is not None:
                row = conn.execute(
                    self._sql(
                        "SELECT cursor FROM {p}formation_sessions WHERE scope_id = ? "
                        f"AND session_key = ?{self.dialect.for_update}"
                    ),
                    (scope_id, key),
                ).fetchone()
                current = int(row[0]) if row else 0
                if current != expected_cursor:
                    return CommitOutcome(
                        False, f"the cursor moved ({expected_cursor} → {current}) meanwhile"
                    )
            gen = records.bump(conn, scope_id)  # locks the scope: an erasure is before or after
            if session_key is not None and new_cursor is not None:
                last = conn.execute(
                    self._sql("SELECT 1 FROM {p}messages WHERE rowid = ? AND scope_id = ?"),
                    (new_cursor, scope_id),
                ).fetchone()
                if last is None:  # erased by forget or delete_messages while it was formed
                    return CommitOutcome(False, "the window's messages were deleted meanwhile")
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
                written.append(
                    records.write_memory_row(
                        conn,
                        scope_id,
                        gen,
                        up.record,
                        actor=actor,
                        embedder=embedder,
                        vector=up.vector.astype(np.float32) if up.vector is not None else None,
                        change=up.change,
                        related=up.related,
                    )
                )
            if queue_scenes and written:
                self._insert_many(
                    conn,
                    self._sql(
                        "INSERT INTO {p}formation_scene_queue (scope_id, memory_id) VALUES (?, ?)"
                    ),
                    [(scope_id, self._text(r.id)) for r in written],
                )
            if session_key is not None and new_cursor is not None:
                conn.execute(
                    self._sql(
                        "INSERT INTO {p}formation_sessions (scope_id, session_key, cursor, "
                        "situation, warmup) VALUES (?, ?, ?, ?, COALESCE(?, 1)) "
                        "ON CONFLICT (scope_id, session_key) DO UPDATE SET "
                        "cursor = excluded.cursor, "
                        "situation = COALESCE(?, {p}formation_sessions.situation), "
                        "warmup = COALESCE(?, {p}formation_sessions.warmup), failures = 0, "
                        "retry_at = 0, last_error = ''"
                    ),
                    (
                        scope_id,
                        key,
                        new_cursor,
                        self._text(situation or ""),
                        warmup,
                        self._text(situation),
                        warmup,
                    ),
                )
            if written or deleted:  # the persona is due again after changes, deletions too
                conn.execute(
                    self._sql(
                        "INSERT INTO {p}formation_scopes (scope_id, memories_since_persona) "
                        "VALUES (?, ?) ON CONFLICT (scope_id) DO UPDATE SET "
                        "memories_since_persona = {p}formation_scopes.memories_since_persona "
                        "+ excluded.memories_since_persona"
                    ),
                    (scope_id, len(written) + len(deleted)),
                )
        return CommitOutcome(True, "", tuple(written), tuple(deleted), duplicates)

    # -- scenes and persona -------------------------------------------------------------------

    def scope_state(self, scope_id: int) -> ScopeState:
        """The scope's scene/persona state."""
        with self._reading("read formation state") as conn:
            row = conn.execute(
                self._sql(
                    "SELECT scenes_at, memories_since_persona, persona_at, failures, retry_at, "
                    "last_error FROM {p}formation_scopes WHERE scope_id = ?"
                ),
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
        d = self.dialect
        with self._reading("read the scene queue") as conn:
            total = conn.execute(
                d.sql("SELECT COUNT(*) FROM {p}formation_scene_queue WHERE scope_id = ?"),
                (scope_id,),
            ).fetchone()
            rows = conn.execute(
                d.sql(
                    "SELECT seq, memory_id FROM {p}formation_scene_queue WHERE scope_id = ? "
                    "ORDER BY seq LIMIT ?"
                ),
                (scope_id, limit),
            ).fetchall()
            if not rows:
                return 0, [], 0
            ids = list(dict.fromkeys(str(r[1]) for r in rows))
            among, params = d.any_of("id", ids)
            found = conn.execute(
                d.sql(f"SELECT {d.memory_columns} FROM {{p}}memories WHERE scope_id = ? AND ")
                + among,
                [scope_id, *params],
            ).fetchall()
        by_id = {str(r[1]): memory_from_row(r, scope) for r in found}
        count = int(total[0]) if total else 0
        return int(rows[-1][0]), [by_id[i] for i in ids if i in by_id], count

    def scopes_with_scene_work(self) -> list[tuple[int, str, str | None]]:
        """Scopes with scene or persona work: (scope_id, user_id, agent_id).

        A non-empty scene queue, or memories written, updated or deleted since formation last
        wrote the scope's persona.
        """
        with self._reading("list scopes with scene work") as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT q.scope_id, s.user_id, s.agent_id FROM {p}formation_scene_queue q "
                    "JOIN {p}scopes s ON s.scope_id = q.scope_id UNION "
                    "SELECT f.scope_id, s.user_id, s.agent_id FROM {p}formation_scopes f "
                    "JOIN {p}scopes s ON s.scope_id = f.scope_id "
                    "WHERE f.memories_since_persona > 0 AND f.persona_at > 0 ORDER BY 1"
                )
            ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]) or None) for r in rows]

    def scenes_done(self, scope_id: int, up_to_seq: int, *, owner: LeaseOwner | None) -> bool:
        """Mark queued memories up to `up_to_seq` as folded into the scenes."""
        now = time.time()
        with self._writing("update the scene queue") as conn:
            if owner is not None and not self._holds(conn, scope_id, owner):
                return False
            conn.execute(
                self._sql("DELETE FROM {p}formation_scene_queue WHERE scope_id = ? AND seq <= ?"),
                (scope_id, up_to_seq),
            )
            conn.execute(
                self._sql(
                    "INSERT INTO {p}formation_scopes (scope_id, scenes_at) VALUES (?, ?) "
                    "ON CONFLICT (scope_id) DO UPDATE SET scenes_at = excluded.scenes_at, "
                    "failures = 0, retry_at = 0, last_error = ''"
                ),
                (scope_id, now),
            )
        return True

    def persona_done(self, scope_id: int) -> None:
        """A valid persona answer (written or kept): the new-memory counter starts again."""
        with self._writing("update formation state") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {p}formation_scopes (scope_id, persona_at) VALUES (?, ?) "
                    "ON CONFLICT (scope_id) DO UPDATE SET memories_since_persona = 0, "
                    "persona_at = excluded.persona_at"
                ),
                (scope_id, time.time()),
            )

    def scenes_failed(self, scope_id: int, *, error: str, retry_at: float) -> None:
        """Count a failed scene/persona update (the queue stays)."""
        with self._writing("record a scene failure") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {p}formation_scopes (scope_id, failures, retry_at, last_error) "
                    "VALUES (?, 1, ?, ?) ON CONFLICT (scope_id) DO UPDATE SET "
                    "failures = {p}formation_scopes.failures + 1, "
                    "retry_at = excluded.retry_at, last_error = excluded.last_error"
                ),
                (scope_id, retry_at, self._text(error[:500])),
            )

    # -- history ------------------------------------------------------------------------------

    def history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        return self.records.memory_history(scope_id, memory_id, scope)

    # -- copying a store ----------------------------------------------------------------------

    def export_scope(self, scope_id: int) -> FormationSnapshot:
        """The scope's cursors (by message id), history, scene/persona state and scene queue."""
        if not self._has_tables():
            return FormationSnapshot()
        with self._reading("read formation state to copy") as conn:
            sessions = conn.execute(
                self._sql(
                    "SELECT f.session_key, f.cursor, f.warmup, f.situation, f.failures, "
                    "f.retry_at, f.last_error, m.id FROM {p}formation_sessions f "
                    "LEFT JOIN {p}messages m ON m.rowid = f.cursor AND m.scope_id = f.scope_id "
                    f"WHERE f.scope_id = ? ORDER BY f.session_key{self.dialect.collate_c}"
                ),
                (scope_id,),
            ).fetchall()
            versions = conn.execute(
                self._sql(
                    "SELECT memory_id, version, change, actor, related_ids, snapshot, "
                    "replaced_at FROM {p}memory_versions WHERE scope_id = ? ORDER BY seq"
                ),
                (scope_id,),
            ).fetchall()
            queue = conn.execute(
                self._sql(
                    "SELECT memory_id FROM {p}formation_scene_queue WHERE scope_id = ? ORDER BY seq"
                ),
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
        t = self._text
        written = 0
        with self._writing("write copied formation state", timeout_s=120.0) as conn:
            for item in snapshot.sessions:
                cursor = 0
                if item.message_id is not None:
                    found = conn.execute(
                        self._sql("SELECT rowid FROM {p}messages WHERE scope_id = ? AND id = ?"),
                        (scope_id, t(item.message_id)),
                    ).fetchone()
                    if found is None:
                        continue  # its messages were not copied: leave the session unformed
                    cursor = int(found[0])
                st = item.state
                cur = conn.execute(
                    self._sql(
                        "INSERT INTO {p}formation_sessions (scope_id, session_key, cursor, "
                        "warmup, situation, failures, retry_at, last_error) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope_id, session_key) "
                        "DO UPDATE SET cursor = excluded.cursor, warmup = excluded.warmup, "
                        "situation = excluded.situation "
                        "WHERE {p}formation_sessions.cursor < excluded.cursor"
                    ),
                    (
                        scope_id,
                        t(item.session_key),
                        cursor,
                        st.warmup,
                        t(st.situation),
                        st.failures,
                        st.retry_at,
                        t(st.last_error),
                    ),
                )
                written += max(cur.rowcount, 0)
            for v in snapshot.versions:
                cur = conn.execute(
                    self._sql(
                        "INSERT INTO {p}memory_versions (scope_id, memory_id, version, change, "
                        "actor, related_ids, snapshot, replaced_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                    ),
                    (
                        scope_id,
                        t(v.memory_id),
                        v.version,
                        v.change,
                        v.actor,
                        t(v.related_ids),
                        t(v.snapshot),
                        v.replaced_at,
                    ),
                )
                written += max(cur.rowcount, 0)
            state = snapshot.scope_state
            if state is not None:
                conn.execute(
                    self._sql(
                        "INSERT INTO {p}formation_scopes (scope_id, scenes_at, "
                        "memories_since_persona, persona_at, failures, retry_at, last_error) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope_id) DO NOTHING"
                    ),
                    (
                        scope_id,
                        state.scenes_at,
                        state.memories_since_persona,
                        state.persona_at,
                        state.failures,
                        state.retry_at,
                        t(state.last_error),
                    ),
                )
            if (
                snapshot.scene_queue
                and conn.execute(
                    self._sql("SELECT 1 FROM {p}formation_scene_queue WHERE scope_id = ? LIMIT 1"),
                    (scope_id,),
                ).fetchone()
                is None
            ):
                self._insert_many(
                    conn,
                    self._sql(
                        "INSERT INTO {p}formation_scene_queue (scope_id, memory_id) VALUES (?, ?)"
                    ),
                    [(scope_id, t(m)) for m in snapshot.scene_queue],
                )
        return written
