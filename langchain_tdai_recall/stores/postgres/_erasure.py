"""PostgreSQL side of erasure (issue 16): a scope's rows and documents, L0 listing and deletion.

The same meaning as the local store's `stores/local/_erasure.py`. `delete_scope_rows` is one
transaction that starts by bumping the scope's generation (which locks the scope's row, so no
other server writes to the scope meanwhile) and deletes every row keyed by the scope: memories
with their vectors, messages, the version history, memory formation's state, the persona and
the scenes; each deleted memory and message leaves a tombstone, so every server's derived index
drops it at its next search. The scope's key row stays (other servers cache its id; its
generation must keep growing). PostgreSQL keeps deleted tuples on disk until `VACUUM` reclaims
them (autovacuum does, in time); run `VACUUM` on the `tdai_` tables to make that immediate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg

from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.postgres._records import bump, pg_text
from langchain_tdai_recall.stores.records import L0_CONTEXT_CHARS, MESSAGE_COLUMNS, message_from_row
from langchain_tdai_recall.types import MessageRecord, Scope

__all__ = ["delete_messages", "delete_scope_rows", "list_messages", "user_scope_keys"]

_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_FORMATION_TABLES: Final = (
    "tdai_formation_sessions",
    "tdai_formation_scopes",
    "tdai_formation_scene_queue",
    "tdai_formation_leases",
)
_ERASE_TIMEOUT_S: Final = 300.0
"""Bound of one erasure transaction (a scope of a million rows deletes in well under it)."""


def delete_scope_rows(db: Database, scope_id: int) -> dict[str, int]:
    """Delete every row and document of a scope in one transaction; returns counts by surface."""
    counts = dict.fromkeys(
        (
            "memories",
            "memory_versions",
            "messages",
            "vectors",
            "formation_state",
            "scenes",
            "persona",
        ),
        0,
    )
    timeout = max(db.timeout_s, _ERASE_TIMEOUT_S)
    with db.transaction("erase a scope", timeout_s=timeout) as conn:
        gen = bump(conn, scope_id)
        for layer, table, name in (
            ("l1", "tdai_memories", "memories"),
            ("l0", "tdai_messages", "messages"),
        ):
            row = conn.execute(
                f"SELECT COUNT(*), COUNT(vector) FROM {table} WHERE scope_id = %s", (scope_id,)
            ).fetchone()
            assert row is not None
            counts[name] = int(row[0])
            counts["vectors"] += int(row[1])
            conn.execute(
                "INSERT INTO tdai_tombstones (scope_id, layer, row_ref, generation) "
                f"SELECT scope_id, %s, rowid, %s FROM {table} WHERE scope_id = %s",
                (layer, gen, scope_id),
            )
            conn.execute(f"DELETE FROM {table} WHERE scope_id = %s", (scope_id,))
        # the mark that keeps the emptied scope out of listings (`PostgresRecords.scopes`)
        conn.execute(
            "DELETE FROM tdai_tombstones WHERE scope_id = %s AND layer = 'scope'", (scope_id,)
        )
        conn.execute(
            "INSERT INTO tdai_tombstones (scope_id, layer, row_ref, generation) "
            "VALUES (%s, 'scope', 0, %s)",
            (scope_id, gen),
        )
        counts["memory_versions"] = _delete(conn, "tdai_memory_versions", scope_id)
        for table in _FORMATION_TABLES:
            counts["formation_state"] += _delete(conn, table, scope_id)
        counts["scenes"] = _delete(conn, "tdai_scenes", scope_id)
        counts["persona"] = _delete(conn, "tdai_personas", scope_id)
    return counts


def _delete(conn: psycopg.Connection[Any], table: str, scope_id: int) -> int:
    return conn.execute(f"DELETE FROM {table} WHERE scope_id = %s", (scope_id,)).rowcount


def user_scope_keys(db: Database, user_id: str) -> list[Scope]:
    """Every scope row of a user, empty ones included (the shared scope first)."""
    with db.connection("list a user's scopes") as conn:
        rows = conn.execute(
            "SELECT agent_id FROM tdai_scopes WHERE user_id = %s ORDER BY agent_id",
            (pg_text(user_id) or "",),
        ).fetchall()
    return [Scope(user_id, str(a) or None) for (a,) in rows]


def list_messages(
    db: Database,
    scope_id: int,
    scope: Scope,
    *,
    session_key: str | None,
    limit: int | None,
    offset: int,
) -> list[MessageRecord]:
    """Messages of a scope (optionally one session) in the order they were stored."""
    sql = f"SELECT {_MESSAGE_COLS} FROM tdai_messages WHERE scope_id = %s"
    params: list[object] = [scope_id]
    if session_key is not None:
        sql += " AND session_key = %s"
        params.append(pg_text(session_key) or "")
    sql += " ORDER BY rowid LIMIT %s OFFSET %s"
    params += [limit, offset]
    with db.connection("list messages") as conn:
        rows = conn.execute(sql, params).fetchall()
    return [message_from_row(r, scope) for r in rows]


def delete_messages(
    db: Database,
    scope_id: int,
    *,
    ids: Sequence[str] | None,
    session_key: str | None,
) -> int:
    """Delete messages of a scope by id or by session; returns how many existed."""
    with db.transaction("delete messages") as conn:
        gen = bump(conn, scope_id)  # locks the scope first: the reads below stay true
        if session_key is not None:
            found = conn.execute(
                "DELETE FROM tdai_messages WHERE scope_id = %s AND session_key = %s "
                "RETURNING rowid, session_key",
                (scope_id, pg_text(session_key) or ""),
            ).fetchall()
        else:
            wanted = list(dict.fromkeys(pg_text(i) or "" for i in ids or ()))
            found = conn.execute(
                "DELETE FROM tdai_messages WHERE scope_id = %s AND id = ANY(%s) "
                "RETURNING rowid, session_key",
                (scope_id, wanted),
            ).fetchall()
        if not found:
            return 0  # the generation moved for nothing: harmless (indexes find no rows)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO tdai_tombstones (scope_id, layer, row_ref, generation) "
                "VALUES (%s, 'l0', %s, %s)",
                [(scope_id, int(ref), gen) for ref, _ in found],
            )
        first: dict[str, int] = {}
        for ref, session in found:
            first[str(session)] = min(int(ref), first.get(str(session), int(ref)))
        for session, since in first.items():
            _recontext(conn, scope_id, session, since, gen)
    return len(found)


def _recontext(
    conn: psycopg.Connection[Any], scope_id: int, session: str, since: int, gen: int
) -> None:
    """Give each message of a session after `since` the end of its (new) predecessor."""
    row = conn.execute(
        "SELECT content FROM tdai_messages WHERE scope_id = %s AND session_key = %s "
        "AND rowid < %s ORDER BY rowid DESC LIMIT 1",
        (scope_id, session, since),
    ).fetchone()
    previous = str(row[0]) if row else ""
    rows = conn.execute(
        "SELECT rowid, content, context FROM tdai_messages WHERE scope_id = %s "
        "AND session_key = %s AND rowid > %s ORDER BY rowid",
        (scope_id, session, since),
    ).fetchall()
    for ref, content, context in rows:
        wanted = previous[-L0_CONTEXT_CHARS:]
        if str(context) != wanted:
            conn.execute(
                "UPDATE tdai_messages SET context = %s, vector = NULL, embedder = NULL, "
                "generation = %s WHERE rowid = %s",
                (wanted, gen, ref),
            )
        previous = str(content)
