"""The SQL of erasure (issue 16), written once: a scope's rows, L0 listing and L0 deletion.

`delete_scope_rows` removes, in one transaction that starts by bumping the scope's generation
(on PostgreSQL that locks the scope's row, so no other server writes to the scope meanwhile),
every row keyed by the scope: memories with their vectors, messages, the version history and
memory formation's state (session cursors, the scope's scene/persona state, the scene queue,
the lease). Each deleted memory and message leaves a tombstone, so the derived indexes of every
other handle (in this or another process) drop it at their next search, as after any deletion.
The scope's key row (`scopes`: user id, agent id, generation) stays: other handles cache its id
and keep writing to it, and its generation must keep growing for their indexes to catch up. A
`scope` tombstone marks it as erased, and the listings (`scopes()`) skip it until it holds a
record again. The persona and scenes are the documents' part (`DocumentStore`).

`delete_messages` keeps the context of the messages around a deleted one true: a message that
followed a deleted one gets the end of its new predecessor (or none) as its context and waits
for a new vector, so no trace of a deleted message's text stays in another row.

How deleted data leaves the disk is the backend's: `_erasing` is the erasure's transaction
(SQLite overwrites the freed pages and folds its write-ahead log afterwards; PostgreSQL leaves
dead rows to `VACUUM`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from langchain_tdai_recall.stores._sql.backend import TABLES, SqlBackend
from langchain_tdai_recall.stores.records import (
    L0_CONTEXT_CHARS,
    MESSAGE_COLUMNS,
    Layer,
    message_from_row,
)
from langchain_tdai_recall.types import MessageRecord, Scope

__all__ = ["SqlErasure"]

_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_FORMATION_TABLES: Final = (
    "formation_sessions",
    "formation_scopes",
    "formation_scene_queue",
    "formation_leases",
)
_ERASE_TIMEOUT_S: Final = 300.0
"""Bound of one erasure transaction where the backend bounds calls (a scope of a million rows
deletes well within it)."""
_NO_LIMIT: Final = 1 << 62
_LAYERS: Final[tuple[Layer, ...]] = ("l1", "l0")


class SqlErasure(SqlBackend):
    """Erasure statements over a SQL backend's hooks (see the module docstring)."""

    def _erasing(self, action: str) -> AbstractContextManager[Any]:
        """The write transaction of an erasure; a backend may also scrub what it freed."""
        return self._writing(action, timeout_s=_ERASE_TIMEOUT_S)

    def delete_scope_rows(self, scope_id: int) -> dict[str, int]:
        """Delete every row of a scope in one transaction; returns counts by surface."""
        sql = self.dialect.sql
        counts = dict.fromkeys(
            ("memories", "memory_versions", "messages", "vectors", "formation_state"), 0
        )
        with self._erasing("erase a scope") as conn:
            gen = self.bump(conn, scope_id)
            for layer in _LAYERS:
                table, name = TABLES[layer], "memories" if layer == "l1" else "messages"
                row = conn.execute(
                    sql(f"SELECT COUNT(*), COUNT(vector) FROM {{p}}{table} WHERE scope_id = ?"),
                    (scope_id,),
                ).fetchone()
                counts[name] = int(row[0])
                counts["vectors"] += int(row[1])
                conn.execute(
                    sql(
                        "INSERT INTO {p}tombstones (scope_id, layer, row_ref, generation) "
                        f"SELECT scope_id, ?, rowid, ? FROM {{p}}{table} WHERE scope_id = ?"
                    ),
                    (layer, gen, scope_id),
                )
                conn.execute(sql(f"DELETE FROM {{p}}{table} WHERE scope_id = ?"), (scope_id,))
            conn.execute(
                sql("DELETE FROM {p}tombstones WHERE scope_id = ? AND layer = 'scope'"),
                (scope_id,),
            )
            conn.execute(  # the mark that keeps the emptied scope out of `scopes()`
                sql(
                    "INSERT INTO {p}tombstones (scope_id, layer, row_ref, generation) "
                    "VALUES (?, 'scope', 0, ?)"
                ),
                (scope_id, gen),
            )
            if self._has_history():
                counts["memory_versions"] = self._delete_all(conn, "memory_versions", scope_id)
                for table in _FORMATION_TABLES:
                    counts["formation_state"] += self._delete_all(conn, table, scope_id)
        return counts

    def _delete_all(self, conn: Any, table: str, scope_id: int) -> int:
        cur = conn.execute(
            self.dialect.sql(f"DELETE FROM {{p}}{table} WHERE scope_id = ?"), (scope_id,)
        )
        return max(int(cur.rowcount), 0)

    def user_scope_keys(self, user_id: str) -> list[Scope]:
        """Every scope row of a user, emptied ones included (the shared scope first)."""
        with self._reading("list a user's scopes") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    "SELECT agent_id FROM {p}scopes WHERE user_id = ? ORDER BY agent_id"
                ),
                (self.dialect.text(user_id),),
            ).fetchall()
        return [Scope(user_id, str(a) or None) for (a,) in rows]

    def list_messages(
        self,
        scope_id: int,
        scope: Scope,
        *,
        session_key: str | None,
        limit: int | None,
        offset: int,
    ) -> list[MessageRecord]:
        """Messages of a scope (optionally one session) in the order they were stored."""
        where = "scope_id = ?"
        params: list[object] = [scope_id]
        if session_key is not None:
            where += " AND session_key = ?"
            params.append(self.dialect.text(session_key))
        params += [_NO_LIMIT if limit is None else limit, offset]
        with self._reading("list messages") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    f"SELECT {_MESSAGE_COLS} FROM {{p}}messages WHERE {where} "
                    "ORDER BY rowid LIMIT ? OFFSET ?"
                ),
                params,
            ).fetchall()
        return [message_from_row(r, scope) for r in rows]

    def delete_messages(
        self,
        scope_id: int,
        *,
        ids: Sequence[str] | None,
        session_key: str | None,
    ) -> int:
        """Delete messages of a scope by id or by session; returns how many existed."""
        text = self.dialect.text
        with self._erasing("delete messages") as conn:
            gen = self.bump(conn, scope_id)  # first: the reads below stay true (PostgreSQL)
            if session_key is not None:
                found = conn.execute(
                    self.dialect.sql(
                        "SELECT rowid, session_key FROM {p}messages "
                        "WHERE scope_id = ? AND session_key = ?"
                    ),
                    (scope_id, text(session_key)),
                ).fetchall()
            else:
                wanted = list(dict.fromkeys(text(i) or "" for i in ids or ()))
                found = self._select_among(
                    conn,
                    "SELECT rowid, session_key FROM {p}messages",
                    "id",
                    wanted,
                    where="scope_id = " + self.dialect.mark,
                    params=(scope_id,),
                )
            if not found:
                return 0  # the generation moved for nothing: harmless (indexes find no rows)
            refs = [int(r) for r, _ in found]
            self._execute_many(
                conn,
                self.dialect.sql(
                    "INSERT INTO {p}tombstones (scope_id, layer, row_ref, generation) "
                    "VALUES (?, 'l0', ?, ?)"
                ),
                [(scope_id, ref, gen) for ref in refs],
            )
            for part in self._parts(refs):
                among, bound = self.dialect.any_of("rowid", part)
                conn.execute(self.dialect.sql("DELETE FROM {p}messages") + f" WHERE {among}", bound)
            first: dict[str, int] = {}
            for ref, session in found:
                first[str(session)] = min(int(ref), first.get(str(session), int(ref)))
            for session, since in first.items():
                self._recontext(conn, scope_id, session, since, gen)
        return len(found)

    def _recontext(self, conn: Any, scope_id: int, session: str, since: int, gen: int) -> None:
        """Give each message of a session after `since` the end of its (new) predecessor."""
        sql = self.dialect.sql
        row = conn.execute(
            sql(
                "SELECT content FROM {p}messages WHERE scope_id = ? AND session_key = ? "
                "AND rowid < ? ORDER BY rowid DESC LIMIT 1"
            ),
            (scope_id, session, since),
        ).fetchone()
        previous = str(row[0]) if row else ""
        rows = conn.execute(
            sql(
                "SELECT rowid, content, context FROM {p}messages WHERE scope_id = ? "
                "AND session_key = ? AND rowid > ? ORDER BY rowid"
            ),
            (scope_id, session, since),
        ).fetchall()
        for ref, content, context in rows:
            wanted = previous[-L0_CONTEXT_CHARS:]
            if str(context) != wanted:
                conn.execute(
                    sql(
                        "UPDATE {p}messages SET context = ?, vector = NULL, embedder = NULL, "
                        "generation = ? WHERE rowid = ?"
                    ),
                    (wanted, gen, ref),
                )
            previous = str(content)
