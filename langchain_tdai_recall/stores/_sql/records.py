"""The record SQL that SQLite and PostgreSQL share, written once over their dialects.

`SqlRecords` implements most of `stores.records.RecordBackend` (and the row primitives of
`RowWriter` that formation's commit composes) with statements both databases read alike once
spelled by their `Dialect`: reads of memories and messages by scope and generation, the
history-keeping row writes and deletes, the copy of rows between stores, and the vector upkeep.
A backend subclass adds its hooks (`stores._sql.backend.SqlBackend`: connections, the form in
which it binds vectors, the generation bump), the scope lookup, and the reads and writes it does
its own way for speed (a batch of new memories, the lookup of search hits by reference). The
vector upkeep's statements are `stores._sql.vectors`'.

Every write bumps the scope's generation first (`bump`), inside its transaction, and stamps the
rows it touches with it; a deletion leaves a tombstone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall.stores._sql.dialect import utc_now
from langchain_tdai_recall.stores._sql.erasure import SqlErasure
from langchain_tdai_recall.stores._sql.history import read_versions, record_version, snapshot_of
from langchain_tdai_recall.stores._sql.vectors import SqlVectors
from langchain_tdai_recall.stores.history import versions_of_current
from langchain_tdai_recall.stores.records import (
    L0_CONTEXT_CHARS,
    MESSAGE_COLUMNS,
    Layer,
    MemoryRow,
    MessageRow,
    memory_from_row,
    message_from_row,
    metadata_json,
)
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import (
    Change,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Scope,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from langchain_tdai_recall.stores._sql.dialect import Dialect

__all__ = ["INSERT_MEMORY", "SqlRecords", "agent_key", "memory_params"]

_MEMORY_INSERT: Final = """
    INSERT INTO {p}memories (scope_id, id, content, type, scene_name, priority,
        activity_start_time, activity_end_time, "timestamp", session_key, source_message_ids,
        created_at, updated_at, metadata, expires_at, generation, embedder, vector, content_key)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

INSERT_MEMORY: Final = _MEMORY_INSERT
"""A new memory row: `memory_params`, then embedder, vector and content key."""

_UPSERT_MEMORY: Final = (
    _MEMORY_INSERT
    + """
    ON CONFLICT (scope_id, id) DO UPDATE SET
        embedder = CASE WHEN excluded.vector IS NOT NULL THEN excluded.embedder
                   WHEN {p}memories.content = excluded.content THEN {p}memories.embedder END,
        vector = CASE WHEN excluded.vector IS NOT NULL THEN excluded.vector
                 WHEN {p}memories.content = excluded.content THEN {p}memories.vector END,
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, "timestamp" = excluded."timestamp",
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        updated_at = excluded.updated_at, generation = excluded.generation,
        content_key = excluded.content_key, metadata = excluded.metadata,
        expires_at = excluded.expires_at
"""
)
"""A memory written by this store: an update keeps `created_at`, and keeps the row's vector
when no new one comes and the content did not change."""

_COPY_MEMORY: Final = (
    _MEMORY_INSERT
    + """
    ON CONFLICT (scope_id, id) DO UPDATE SET
        content = excluded.content, type = excluded.type, scene_name = excluded.scene_name,
        priority = excluded.priority, activity_start_time = excluded.activity_start_time,
        activity_end_time = excluded.activity_end_time, "timestamp" = excluded."timestamp",
        session_key = excluded.session_key, source_message_ids = excluded.source_message_ids,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        generation = excluded.generation, embedder = excluded.embedder, vector = excluded.vector,
        content_key = excluded.content_key, metadata = excluded.metadata,
        expires_at = excluded.expires_at
"""
)
"""A memory copied from another store: every field as it was, replacing a row of its id."""

_INSERT_MESSAGE: Final = (
    "INSERT INTO {p}messages (scope_id, id, role, content, session_key, session_id, "
    "recorded_at, context, generation, embedder, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_MESSAGE_COLS: Final = ", ".join(MESSAGE_COLUMNS)

_COPY_TIMEOUT_S: Final = 120.0
"""Bound of one page of a store copy (large pages of vectors), where calls are bounded."""


def agent_key(agent_id: str | None) -> str:
    """A scope's agent as stored: `''` is the user's shared memory."""
    return agent_id or ""


def memory_params(
    dialect: Dialect, scope_id: int, rec: MemoryRecord, gen: int
) -> tuple[object, ...]:
    """The first 16 columns of a memory row (up to `generation`), as the dialect stores text."""
    t = dialect.text
    return (
        scope_id,
        t(rec.id),
        t(rec.content),
        rec.type,
        t(rec.scene_name),
        rec.priority,
        rec.activity_start_time,
        rec.activity_end_time,
        rec.timestamp,
        t(rec.session_key),
        t(json.dumps(list(rec.source_message_ids), ensure_ascii=False)),
        rec.created_at,
        rec.updated_at,
        t(metadata_json(rec)),
        rec.expires_at,
        gen,
    )


class SqlRecords(SqlVectors, SqlErasure):
    """The shared part of a SQL backend's records (see the module docstring)."""

    def _memory_select(self, where: str) -> str:
        d = self.dialect
        return d.sql(f"SELECT {d.memory_columns} FROM {{p}}memories WHERE {where}")

    # -- scopes -------------------------------------------------------------------------------

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (bumped by every write to it)."""
        with self._reading("read a scope's generation") as conn:
            row = conn.execute(
                self.dialect.sql("SELECT generation FROM {p}scopes WHERE scope_id = ?"),
                (scope_id,),
            ).fetchone()
        return int(row[0]) if row else 0

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows in a layer, for one scope or all."""
        table = self._table(layer)
        with self._reading("count rows") as conn:
            if scope_id is None:
                row = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            else:
                row = conn.execute(
                    self.dialect.sql(f"SELECT COUNT(*) FROM {table} WHERE scope_id = ?"),
                    (scope_id,),
                ).fetchone()
        return int(row[0]) if row else 0

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids deleted from a scope's layer after `generation`."""
        with self._reading("read deletions") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    "SELECT row_ref FROM {p}tombstones WHERE scope_id = ? AND layer = ? "
                    "AND generation > ?"
                ),
                (scope_id, layer, generation),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def rowids_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids of a scope's layer written after `generation`, ascending (from the index)."""
        with self._reading("list rows to index") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    f"SELECT rowid FROM {self._table(layer)} WHERE scope_id = ? AND generation > ?"
                ),
                (scope_id, generation),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

    # -- L1 memories: rows inside a caller's transaction --------------------------------------

    def find_duplicate(self, conn: Any, scope_id: int, rec: MemoryRecord) -> MemoryRecord | None:
        """The scope's memory whose text is an exact duplicate of `rec`'s, or `None`."""
        row = conn.execute(
            self._memory_select("scope_id = ? AND content_key = ? ORDER BY rowid LIMIT 1"),
            (scope_id, content_fingerprint(rec.content)),
        ).fetchone()
        return memory_from_row(row, Scope(rec.user_id, rec.agent_id)) if row else None

    def write_memory_row(
        self,
        conn: Any,
        scope_id: int,
        gen: int,
        rec: MemoryRecord,
        *,
        actor: str,
        embedder: str | None = None,
        vector: npt.NDArray[np.float32] | None = None,
        change: Change = "update",
        related: Sequence[str] = (),
    ) -> MemoryRecord:
        """Insert or update one row inside the caller's transaction; returns it as stored.

        An existing row keeps its `created_at`; its replaced version goes to the history as
        `change` (by `actor`, naming `related` ids). `vector` (made by `embedder` from the new
        content) is stored with the row; without one, an unchanged text keeps its vector and a
        changed one waits for the vector upkeep.
        """
        d = self.dialect
        mid = d.text(rec.id) or ""
        old = snapshot_of(conn, d, scope_id, mid)
        created = str(old["created_at"]) if old is not None else rec.created_at
        if old is not None:
            record_version(
                conn,
                d,
                scope_id,
                mid,
                change=change,
                actor=actor,
                at=rec.updated_at,
                related=related,
                replacement=rec,
                old=old,
            )
        given = vector is not None and embedder is not None
        conn.execute(
            d.sql(_UPSERT_MEMORY),
            (
                *memory_params(d, scope_id, rec, gen),
                embedder if given else None,
                self._vector_param(vector) if vector is not None and given else None,
                content_fingerprint(rec.content),
            ),
        )
        return rec if created == rec.created_at else replace(rec, created_at=created)

    def delete_memory_row(
        self,
        conn: Any,
        scope_id: int,
        gen: int,
        memory_id: str,
        *,
        actor: str,
        at: str,
        change: Change = "delete",
        related: Sequence[str] = (),
    ) -> bool:
        """Delete one row inside the caller's transaction; its last version goes to the history."""
        d = self.dialect
        mid = d.text(memory_id) or ""
        if not record_version(
            conn, d, scope_id, mid, change=change, actor=actor, at=at, related=related
        ):
            return False
        row = conn.execute(
            d.sql("DELETE FROM {p}memories WHERE scope_id = ? AND id = ? RETURNING rowid"),
            (scope_id, mid),
        ).fetchone()
        assert row is not None
        conn.execute(
            d.sql(
                "INSERT INTO {p}tombstones (scope_id, layer, row_ref, generation) "
                "VALUES (?, 'l1', ?, ?)"
            ),
            (scope_id, int(row[0]), gen),
        )
        return True

    # -- L1 memories --------------------------------------------------------------------------

    def upsert_memories(
        self,
        scope_id: int,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
        actor: str = "api",
    ) -> list[MemoryRecord]:
        """Insert or update records (by id within the scope) in one transaction, in order.

        An update keeps the original `created_at`, records the replaced version in the history,
        and keeps the row's vector when the content did not change; otherwise the row waits for
        a new vector. With `dedupe[i]`, a record whose text is an exact duplicate (see
        `text.fingerprint`) of a memory already in the scope, or of an earlier record of the
        call, is not written: that memory is returned in its place. Returns the records as
        stored.
        """
        flags = list(dedupe) if dedupe is not None else [False] * len(records)
        with self._writing("write memories") as conn:
            gen = self.bump(conn, scope_id)  # locks the scope: what is read below stays true
            stored = self._insert_new(conn, scope_id, gen, records, flags)
            if stored is not None:
                return stored
            return [
                (self.find_duplicate(conn, scope_id, rec) if flag else None)
                or self.write_memory_row(conn, scope_id, gen, rec, actor=actor)
                for rec, flag in zip(records, flags, strict=True)
            ]

    def _insert_new(
        self,
        conn: Any,
        scope_id: int,
        gen: int,
        records: Sequence[MemoryRecord],
        flags: Sequence[bool],
    ) -> list[MemoryRecord] | None:
        """A backend's faster write of a batch of new memories, or `None` (record by record)."""
        del conn, scope_id, gen, records, flags
        return None

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id.

        The oldest such memory (smallest reference) when there are several.
        """
        keys = sorted({content_fingerprint(t) for t in texts})
        out: dict[str, str] = {}
        for part in self._parts(keys):
            among, params = self.dialect.any_of("content_key", part)
            with self._reading("look for duplicates") as conn:
                rows = conn.execute(
                    self.dialect.sql("SELECT content_key, id FROM {p}memories WHERE scope_id = ?")
                    + f" AND {among} ORDER BY rowid DESC",
                    [scope_id, *params],
                ).fetchall()
            out.update((str(k), str(i)) for k, i in rows)
        return out

    def get_memory(self, scope_id: int, memory_id: str, scope: Scope) -> MemoryRecord | None:
        """One memory by id, or `None`."""
        with self._reading("read a memory") as conn:
            row = conn.execute(
                self._memory_select("scope_id = ? AND id = ?"),
                (scope_id, self.dialect.text(memory_id)),
            ).fetchone()
        return memory_from_row(row, scope) if row else None

    def delete_memories(
        self, scope_id: int, memory_ids: Sequence[str], *, actor: str = "api"
    ) -> int:
        """Delete by id (each deleted version is kept in the history); returns how many existed."""
        at = utc_now()
        with self._writing("delete memories") as conn:
            gen = self.bump(conn, scope_id)
            return sum(
                self.delete_memory_row(conn, scope_id, gen, m, actor=actor, at=at)
                for m in memory_ids
            )

    def memory_history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        mid = self.dialect.text(memory_id) or ""
        with self._reading("read a memory's history") as conn:
            row = conn.execute(
                self._memory_select("scope_id = ? AND id = ?"), (scope_id, mid)
            ).fetchone()
            current = memory_from_row(row, scope) if row else None
            if not self._has_history():
                return [] if current is None else versions_of_current(current)
            return read_versions(conn, self.dialect, scope_id, mid, scope=scope, current=current)

    def list_memories(
        self,
        scope_id: int,
        scope: Scope,
        *,
        type: MemoryType | None,
        limit: int | None,
        offset: int,
    ) -> list[MemoryRecord]:
        """Unexpired memories of a scope, oldest first (stable order: creation, then id).

        Expired rows are left out in the SQL, before `LIMIT`/`OFFSET`, so a page is full while
        unexpired memories remain and offset paging sees each of them once, swept or not.
        """
        d = self.dialect
        where = f"scope_id = ? AND {self._unexpired()}"
        params: list[object] = [scope_id, utc_now()]
        if type is not None:
            where += " AND type = ?"
            params.append(type)
        where += f" ORDER BY created_at{d.collate_c}, id{d.collate_c} LIMIT ? OFFSET ?"
        params += [d.no_limit if limit is None else limit, offset]
        with self._reading("list memories") as conn:
            rows = conn.execute(self._memory_select(where), params).fetchall()
        return [memory_from_row(r, scope) for r in rows]

    def memory_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MemoryRow]:
        """Rows of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        return self._memory_rows(
            "read memories to index",
            "generation > ? AND rowid > ? AND rowid <= ? ORDER BY rowid",
            scope,
            scope_id,
            generation,
            after,
            upto,
        )

    def _memory_rows(
        self, action: str, where: str, scope: Scope, *params: object
    ) -> list[MemoryRow]:
        d = self.dialect
        rows = self._fetch_stored(
            action,
            d.sql(
                f"SELECT {d.memory_columns}, embedder, vector FROM {{p}}memories "
                f"WHERE scope_id = ? AND {where}"
            ),
            params,
        )
        return [MemoryRow(int(r[0]), memory_from_row(r, scope), r[-2], r[-1]) for r in rows]

    # -- L0 messages --------------------------------------------------------------------------

    def insert_messages(
        self,
        scope_id: int,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert messages; ids already in the scope (or earlier in the batch) are skipped.

        Each new message records the end of the message before it in its session (from this
        batch, else the last one stored) as its context. Returns how many were new.
        """
        t = self.dialect.text
        with self._writing("write messages", busy_timeout_ms=busy_timeout_ms) as conn:
            gen = self.bump(conn, scope_id)  # also locks the scope: the reads below stay true
            ids = list(dict.fromkeys(t(r.id) or "" for r in records))
            existing = self._existing_messages(conn, scope_id, ids)
            previous: dict[str, str] = {}
            params: list[tuple[object, ...]] = []
            for rec in records:
                mid = t(rec.id) or ""
                if mid in existing:
                    continue
                existing.add(mid)
                session = t(rec.session_key) or ""
                if session not in previous:
                    row = conn.execute(
                        self.dialect.sql(
                            "SELECT content FROM {p}messages WHERE scope_id = ? "
                            "AND session_key = ? ORDER BY rowid DESC LIMIT 1"
                        ),
                        (scope_id, session),
                    ).fetchone()
                    previous[session] = str(row[0]) if row else ""
                content = t(rec.content) or ""
                params.append(
                    (
                        scope_id,
                        mid,
                        rec.role,
                        content,
                        session,
                        t(rec.session_id),
                        rec.recorded_at,
                        previous[session][-L0_CONTEXT_CHARS:],
                        gen,
                        None,
                        None,
                    )
                )
                previous[session] = content
            if params:
                self._execute_many(conn, self.dialect.sql(_INSERT_MESSAGE), params)
        return len(params)

    def message_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MessageRow]:
        """Messages of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        return self._message_rows(
            "read messages to index",
            "generation > ? AND rowid > ? AND rowid <= ? ORDER BY rowid",
            scope,
            scope_id,
            generation,
            after,
            upto,
        )

    def _message_rows(
        self, action: str, where: str, scope: Scope, *params: object
    ) -> list[MessageRow]:
        rows = self._fetch_stored(
            action,
            self.dialect.sql(
                f"SELECT {_MESSAGE_COLS}, {self._context_column}, embedder, vector "
                f"FROM {{p}}messages WHERE scope_id = ? AND {where}"
            ),
            params,
        )
        return [
            MessageRow(int(r[0]), message_from_row(r, scope), r[-2], r[-1], context=str(r[-3]))
            for r in rows
        ]

    # -- copying a store ----------------------------------------------------------------------

    def export_memories(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MemoryRow]:
        """A page of a scope's memory rows in reference order, with vectors."""
        return self._memory_rows(
            "read memories to copy",
            "rowid > ? ORDER BY rowid LIMIT ?",
            scope,
            scope_id,
            after,
            limit,
        )

    def export_messages(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MessageRow]:
        """A page of a scope's message rows in reference order, with context and vectors."""
        return self._message_rows(
            "read messages to copy",
            "rowid > ? ORDER BY rowid LIMIT ?",
            scope,
            scope_id,
            after,
            limit,
        )

    def import_memories(self, scope_id: int, rows: Sequence[MemoryRow]) -> int:
        """Write copied memory rows as they are (see `BaseMemoryStore.import_rows`).

        A memory already copied (same id, `updated_at` and vector embedder) is skipped, so an
        interrupted copy resumes cheaply. Returns the rows written.
        """
        d = self.dialect
        with self._writing("write copied memories", timeout_s=_COPY_TIMEOUT_S) as conn:
            gen = self.bump(conn, scope_id)
            ids = [d.text(r.record.id) or "" for r in rows]
            have = {
                str(i): (str(u), e)
                for i, u, e in self._select_among(
                    conn,
                    "SELECT id, updated_at, embedder FROM {p}memories",
                    "id",
                    ids,
                    where=self.dialect.sql("scope_id = ?"),
                    params=(scope_id,),
                )
            }
            params = []
            for row, mid in zip(rows, ids, strict=True):
                rec = row.record
                vector = self._stored_vector(row.vector, row.embedder)
                embedder = row.embedder if vector is not None else None
                if have.get(mid) == (rec.updated_at, embedder):
                    continue
                params.append(
                    (
                        *memory_params(d, scope_id, rec, gen),
                        embedder,
                        vector,
                        content_fingerprint(rec.content),
                    )
                )
            if params:
                self._execute_many(conn, d.sql(_COPY_MEMORY), params)
        return len(params)

    def import_messages(self, scope_id: int, rows: Sequence[MessageRow]) -> int:
        """Write copied message rows as they are; ids already stored are skipped."""
        d = self.dialect
        t = d.text
        with self._writing("write copied messages", timeout_s=_COPY_TIMEOUT_S) as conn:
            gen = self.bump(conn, scope_id)
            existing = self._existing_messages(conn, scope_id, [t(r.record.id) or "" for r in rows])
            params = []
            for row in rows:
                rec = row.record
                mid = t(rec.id) or ""
                if mid in existing:
                    continue
                existing.add(mid)
                vector = self._stored_vector(row.vector, row.embedder)
                params.append(
                    (
                        scope_id,
                        mid,
                        rec.role,
                        t(rec.content),
                        t(rec.session_key),
                        t(rec.session_id),
                        rec.recorded_at,
                        t(row.context),
                        gen,
                        row.embedder if vector is not None else None,
                        vector,
                    )
                )
            if params:
                self._execute_many(conn, d.sql(_INSERT_MESSAGE), params)
        return len(params)

    def _existing_messages(self, conn: Any, scope_id: int, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the scope's messages hold (inside the caller's transaction)."""
        return {
            str(r[0])
            for r in self._select_among(
                conn,
                "SELECT id FROM {p}messages",
                "id",
                ids,
                where=self.dialect.sql("scope_id = ?"),
                params=(scope_id,),
            )
        }

    # -- expiry (issue 16) --------------------------------------------------------------------

    def _unexpired(self, column: str = "expires_at") -> str:
        """The condition that a row has not expired at the bound parameter (now, as stored).

        Expiries are UTC ISO texts of one fixed-width form (`normalize_expiry`, milliseconds,
        `Z`), so byte-wise text order is time order on both databases; the expired side is
        `expires_at <= now`, as for the sweep and `is_expired`.
        """
        return f"({column} IS NULL OR {column}{self.dialect.collate_c} > ?)"

    def count_unexpired_memories(self, scope_id: int) -> int:
        """Memories of a scope that have not expired now (what reads return, swept or not)."""
        with self._reading("count memories") as conn:
            row = conn.execute(
                self.dialect.sql(
                    f"SELECT COUNT(*) FROM {{p}}memories WHERE scope_id = ? AND {self._unexpired()}"
                ),
                (scope_id, utc_now()),
            ).fetchone()
        return int(row[0]) if row else 0

    def item_namespaces(self, scope_id: int) -> list[str | None]:
        """The distinct namespaces (JSON text) of a scope's unexpired LangGraph store items.

        `None` stands for the memories that keep none (written otherwise, or before items had
        one). Read from the metadata (`tdai_store.ns`), without reading the rows into Python.
        """
        with self._reading("list store namespaces") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    f"SELECT DISTINCT {self.dialect.item_namespace} FROM {{p}}memories "
                    f"WHERE scope_id = ? AND {self._unexpired()}"
                ),
                (scope_id, utc_now()),
            ).fetchall()
        return [None if r[0] is None else str(r[0]) for r in rows]

    def expired_memories(self, now: str, limit: int) -> list[tuple[Scope, str]]:
        """(scope, id) of up to `limit` memories whose `expires_at` is at or before `now`.

        Expiries are UTC ISO texts of one form, so they compare with `now` as text (byte-wise;
        the `*_expiry` partial index serves the search).
        """
        c = self.dialect.collate_c
        with self._reading("find expired memories") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    "SELECT s.user_id, s.agent_id, m.id FROM {p}memories m "
                    "JOIN {p}scopes s ON s.scope_id = m.scope_id "
                    f"WHERE m.expires_at IS NOT NULL AND m.expires_at{c} <= ? "
                    f"ORDER BY m.expires_at{c} LIMIT ?"
                ),
                (now, limit),
            ).fetchall()
        return [(Scope(str(u), str(a) or None), str(i)) for u, a, i in rows]
