"""SQLite side of erasure (issue 16): a scope's rows, L0 listing and L0 deletion.

`delete_scope_rows` removes, in one `BEGIN IMMEDIATE` transaction, every row keyed by the scope:
memories (with their vectors), messages, the version history and memory formation's state
(session cursors, the scope's scene/persona state, the scene queue, the lease). It bumps the
scope's generation and leaves a tombstone per deleted row, so the derived indexes of every other
process sharing the directory drop those rows at their next search, exactly as after any other
deletion. The scope's key row (`scopes`: user id, agent id, generation) stays: other processes
cache its id and keep writing to it, and its generation must keep growing for their indexes to
catch up. Listings skip a scope that holds nothing (`SqliteRecords.scopes`).

The transaction runs with `PRAGMA secure_delete` on, so the freed database pages are overwritten
with zeros rather than left holding the deleted text, and a `wal_checkpoint(TRUNCATE)` follows,
so the write-ahead log does not keep older copies of those pages either (best effort: a reader
in another process can hold the log back until it finishes).

`delete_messages` keeps the context of the messages around a deleted one true: a message that
followed a deleted one gets the end of its new predecessor (or none) as its context and waits
for a new vector, so no trace of a deleted message's text stays in another row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Final

from langchain_tdai_recall.stores.local._records import SqliteRecords
from langchain_tdai_recall.stores.records import L0_CONTEXT_CHARS, MESSAGE_COLUMNS, message_from_row
from langchain_tdai_recall.types import MessageRecord, Scope

__all__ = ["delete_messages", "delete_scope_rows", "list_messages", "user_scope_keys"]

_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)
_FORMATION_TABLES: Final = (
    "formation_sessions",
    "formation_scopes",
    "formation_scene_queue",
    "formation_leases",
)
_CHUNK: Final = 500


def _count(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> int:
    (n,) = conn.execute(sql, params).fetchone()
    return int(n)


def delete_scope_rows(db: SqliteRecords, scope_id: int) -> dict[str, int]:
    """Delete every row of a scope in one transaction; returns counts by surface."""
    counts = dict.fromkeys(
        ("memories", "memory_versions", "messages", "vectors", "formation_state"), 0
    )
    with _erasing(db) as conn:
        gen = db.bump(conn, scope_id)
        for layer, table, name in (("l1", "memories", "memories"), ("l0", "messages", "messages")):
            row = conn.execute(
                f"SELECT COUNT(*), COUNT(vector) FROM {table} WHERE scope_id = ?", (scope_id,)
            ).fetchone()
            counts[name] = int(row[0])
            counts["vectors"] += int(row[1])
            conn.execute(
                "INSERT INTO tombstones (scope_id, layer, row_ref, generation) "
                f"SELECT scope_id, ?, rowid, ? FROM {table} WHERE scope_id = ?",
                (layer, gen, scope_id),
            )
            conn.execute(f"DELETE FROM {table} WHERE scope_id = ?", (scope_id,))
        # the mark that keeps the emptied scope out of listings (`SqliteRecords.scopes`)
        conn.execute("DELETE FROM tombstones WHERE scope_id = ? AND layer = 'scope'", (scope_id,))
        conn.execute(
            "INSERT INTO tombstones (scope_id, layer, row_ref, generation) "
            "VALUES (?, 'scope', 0, ?)",
            (scope_id, gen),
        )
        if db.has_formation_tables:
            counts["memory_versions"] = conn.execute(
                "DELETE FROM memory_versions WHERE scope_id = ?", (scope_id,)
            ).rowcount
            for table in _FORMATION_TABLES:
                counts["formation_state"] += conn.execute(
                    f"DELETE FROM {table} WHERE scope_id = ?", (scope_id,)
                ).rowcount
    return counts


@contextmanager
def _erasing(db: SqliteRecords) -> Iterator[sqlite3.Connection]:
    """A write transaction whose deletions overwrite the freed pages; the log is folded after.

    `secure_delete` is a setting of the connection: it is put back as it was afterwards.
    """
    with db.transaction() as conn:
        (before,) = conn.execute("PRAGMA secure_delete").fetchone()
        conn.execute("PRAGMA secure_delete = ON")
        try:
            yield conn
        finally:
            conn.execute(f"PRAGMA secure_delete = {int(before)}")
    if db.path is not None:
        _checkpoint(db)


def _checkpoint(db: SqliteRecords) -> None:
    """Fold the write-ahead log into the database and truncate it (best effort)."""
    with suppress(Exception), db._write_lock:  # outside any transaction
        db._conn(write=True).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()


def user_scope_keys(db: SqliteRecords, user_id: str) -> list[Scope]:
    """Every scope row of a user, empty ones included (the shared scope first)."""
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT agent_id FROM scopes WHERE user_id = ? ORDER BY agent_id", (user_id,)
        ).fetchall()
    return [Scope(user_id, str(a) or None) for (a,) in rows]


def list_messages(
    db: SqliteRecords,
    scope_id: int,
    scope: Scope,
    *,
    session_key: str | None,
    limit: int | None,
    offset: int,
) -> list[MessageRecord]:
    """Messages of a scope (optionally one session) in the order they were stored."""
    sql = f"SELECT {_MESSAGE_COLS} FROM messages WHERE scope_id = ?"
    params: list[object] = [scope_id]
    if session_key is not None:
        sql += " AND session_key = ?"
        params.append(session_key)
    sql += " ORDER BY rowid LIMIT ? OFFSET ?"
    params += [-1 if limit is None else limit, offset]
    with db.reading() as conn:
        rows = conn.execute(sql, params).fetchall()
    return [message_from_row(r, scope) for r in rows]


def delete_messages(
    db: SqliteRecords,
    scope_id: int,
    *,
    ids: Sequence[str] | None,
    session_key: str | None,
) -> int:
    """Delete messages of a scope by id or by session; returns how many existed."""
    with _erasing(db) as conn:
        found: list[tuple[int, str]] = []
        if session_key is not None:
            found = [
                (int(r), str(s))
                for r, s in conn.execute(
                    "SELECT rowid, session_key FROM messages WHERE scope_id = ? "
                    "AND session_key = ?",
                    (scope_id, session_key),
                )
            ]
        else:
            wanted = list(dict.fromkeys(ids or ()))
            for start in range(0, len(wanted), _CHUNK):
                part = wanted[start : start + _CHUNK]
                marks = ",".join("?" * len(part))
                found += [
                    (int(r), str(s))
                    for r, s in conn.execute(
                        f"SELECT rowid, session_key FROM messages WHERE scope_id = ? "
                        f"AND id IN ({marks})",
                        [scope_id, *part],
                    )
                ]
        if not found:
            return 0
        gen = db.bump(conn, scope_id)
        for start in range(0, len(found), _CHUNK):
            refs = [r for r, _ in found[start : start + _CHUNK]]
            marks = ",".join("?" * len(refs))
            conn.executemany(
                "INSERT INTO tombstones (scope_id, layer, row_ref, generation) "
                "VALUES (?, 'l0', ?, ?)",
                [(scope_id, ref, gen) for ref in refs],
            )
            conn.execute(f"DELETE FROM messages WHERE rowid IN ({marks})", refs)
        first: dict[str, int] = {}
        for ref, session in found:
            first[session] = min(ref, first.get(session, ref))
        for session, since in first.items():
            _recontext(conn, scope_id, session, since, gen)
    return len(found)


def _recontext(conn: sqlite3.Connection, scope_id: int, session: str, since: int, gen: int) -> None:
    """Give each message of a session after `since` the end of its (new) predecessor."""
    row = conn.execute(
        "SELECT content FROM messages WHERE scope_id = ? AND session_key = ? AND rowid < ? "
        "ORDER BY rowid DESC LIMIT 1",
        (scope_id, session, since),
    ).fetchone()
    previous = str(row[0]) if row else ""
    rows = conn.execute(
        "SELECT rowid, content, context FROM messages WHERE scope_id = ? AND session_key = ? "
        "AND rowid > ? ORDER BY rowid",
        (scope_id, session, since),
    ).fetchall()
    for ref, content, context in rows:
        wanted = previous[-L0_CONTEXT_CHARS:]
        if str(context) != wanted:
            conn.execute(
                "UPDATE messages SET context = ?, vector = NULL, embedder = NULL, "
                "generation = ? WHERE rowid = ?",
                (wanted, gen, ref),
            )
        previous = str(content)
