"""SQLite state of memory formation: the local spelling of `SqlFormationState`.

Exactly-once rests on three facts, kept in SQLite as follows:

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

The statements are the shared ones; this module supplies the connections (the store's own, under
its locks) and the lease, whose expiry is this host's clock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from langchain_tdai_recall.stores._sql.formation import SqlFormationState, may_take_lease
from langchain_tdai_recall.stores.formation import LeaseOwner
from langchain_tdai_recall.stores.local._records import SQLITE, SqliteRecords

__all__ = ["LocalFormationState"]


class LocalFormationState(SqlFormationState):
    """Formation's state over the store's `SqliteRecords` (same connections, same locks).

    `MemoryStore.formation` holds the store's instance. Scopes are addressed by the store's
    scope ids (`scope_id`), the keys of the formation tables.
    """

    dialect = SQLITE

    def __init__(self, db: SqliteRecords) -> None:
        self.db = db
        self.records = db

    def _reading(self, action: str) -> AbstractContextManager[Any]:
        return self.db.reading()

    def _writing(
        self, action: str, *, timeout_s: float | None = None
    ) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def _insert_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        conn.executemany(sql, rows)

    def _has_tables(self) -> bool:
        return self.db.has_formation_tables

    def acquire(self, scope_id: int, owner: LeaseOwner, ttl_s: float) -> bool:
        """Take (or renew) the scope's lease; `False` while another live owner holds it."""
        now = time.time()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT owner, host, pid, expires_at FROM formation_leases WHERE scope_id = ?",
                (scope_id,),
            ).fetchone()
            if row is not None and not may_take_lease(
                owner, str(row[0]), str(row[1]), int(row[2]), float(row[3]) > now
            ):
                return False
            conn.execute(
                "INSERT INTO formation_leases (scope_id, owner, host, pid, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope_id) DO UPDATE SET "
                "owner = excluded.owner, host = excluded.host, pid = excluded.pid, "
                "expires_at = excluded.expires_at",
                (scope_id, owner.token, owner.host, owner.pid, now + ttl_s),
            )
        return True
