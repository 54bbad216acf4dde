"""Memory formation's state in PostgreSQL: the server's spelling of `stores.formation`'s state.

The same contract as the local store (see `stores.formation`), kept by PostgreSQL's locks
instead of SQLite's single writer:

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

Lock order, to stay free of deadlocks: lease row, then the session row, then the scope row. The
statements are the shared ones (`SqlFormationState`); this module supplies the pooled, bounded
connections and the lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from langchain_tdai_recall.stores._sql.formation import SqlFormationState, may_take_lease
from langchain_tdai_recall.stores.formation import LeaseOwner
from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.postgres._records import POSTGRES, PostgresRecords

__all__ = ["PostgresFormationState"]

_NOW: Final = "extract(epoch FROM clock_timestamp())"
"""The server's clock, in epoch seconds."""


class PostgresFormationState(SqlFormationState):
    """Formation's state over the PostgreSQL backend's pool and records."""

    dialect = POSTGRES

    def __init__(self, db: Database, records: PostgresRecords) -> None:
        self.db = db
        self.records = records

    def _reading(self, action: str) -> AbstractContextManager[Any]:
        return self.db.connection(action)

    def _writing(
        self, action: str, *, timeout_s: float | None = None
    ) -> AbstractContextManager[Any]:
        return self.db.transaction(action, timeout_s=timeout_s)

    def _insert_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        with conn.cursor() as cur:
            cur.executemany(sql, rows)

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
            if not may_take_lease(owner, str(row[0]), str(row[1]), int(row[2]), bool(row[3])):
                return False
            conn.execute(
                "UPDATE tdai_formation_leases SET owner = %s, host = %s, pid = %s, "
                f"expires_at = {_NOW} + %s WHERE scope_id = %s",
                (owner.token, owner.host, owner.pid, ttl_s, scope_id),
            )
        return True
