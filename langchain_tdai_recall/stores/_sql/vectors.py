"""The vector upkeep's SQL, written once for SQLite and PostgreSQL.

Rows are written without a vector and embedded later: a row whose vector is NULL, or was made by
another embedder, is the to-do list of the vector upkeep (`pending_vectors`), so the upkeep
resumes after a restart without extra bookkeeping. `set_vectors` stores a vector only while the
row still holds the text it was made from; the counts and the dimension reset serve the checks
at open (an embedder that changed its dimension).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_tdai_recall.stores._sql.backend import TABLES, SqlBackend
from langchain_tdai_recall.stores.records import Layer, PendingVector

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SqlVectors"]


class SqlVectors(SqlBackend):
    """The vector-upkeep part of a SQL backend's records."""

    # -- vector upkeep ------------------------------------------------------------------------

    def _other_embedder(self, stale: bool) -> str:
        """The condition of a row waiting for a vector (`stale`: also another embedder's)."""
        if stale:
            return f"(vector IS NULL OR embedder {self.dialect.distinct_from} ?)"
        return "vector IS NULL"

    def count_pending_vectors(
        self, layer: Layer, embedder: str, *, scope_id: int | None = None, stale: bool = True
    ) -> int:
        """Rows without a vector (and, with `stale`, rows whose vector is another embedder's)."""
        where = self._other_embedder(stale)
        params: list[object] = [embedder] if stale else []
        if scope_id is not None:
            where += " AND scope_id = ?"
            params.append(scope_id)
        with self._reading("count rows waiting for vectors") as conn:
            row = conn.execute(
                self.dialect.sql(f"SELECT COUNT(*) FROM {self._table(layer)} WHERE {where}"),
                params,
            ).fetchone()
        return int(row[0]) if row else 0

    def vector_embedders(self, layer: Layer) -> list[tuple[str, int, int]]:
        """(embedder, dimension, rows) of every embedder that made stored vectors in a layer."""
        dim = self.dialect.dimension
        with self._reading("read the embedders of stored vectors") as conn:
            rows = conn.execute(
                f"SELECT embedder, {dim}, COUNT(*) FROM {self._table(layer)} "
                f"WHERE vector IS NOT NULL AND embedder IS NOT NULL GROUP BY embedder, {dim}"
            ).fetchall()
        return [(str(e), int(d), int(n)) for e, d, n in rows]

    def count_foreign_vectors(self, layer: Layer, embedder: str) -> int:
        """Rows holding a vector made by another embedder."""
        with self._reading("count vectors") as conn:
            row = conn.execute(
                self.dialect.sql(
                    f"SELECT COUNT(*) FROM {self._table(layer)} WHERE vector IS NOT NULL "
                    f"AND embedder {self.dialect.distinct_from} ?"
                ),
                (embedder,),
            ).fetchone()
        return int(row[0]) if row else 0

    def pending_vectors(
        self, layer: Layer, embedder: str, *, after: int, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows after ref `after` that need a vector, in ref order.

        Without `stale` only rows with no vector are listed (served by a partial index); with
        it, rows whose vector another embedder made are listed too (a table scan).
        """
        params: tuple[object, ...] = (embedder, after, limit) if stale else (after, limit)
        with self._reading("read rows waiting for vectors") as conn:
            rows = conn.execute(
                self.dialect.sql(
                    f"SELECT rowid, {self._embedded_text(layer)} FROM {self._table(layer)} "
                    f"WHERE {self._other_embedder(stale)} AND rowid > ? ORDER BY rowid LIMIT ?"
                ),
                params,
            ).fetchall()
        return [PendingVector(int(r), str(t)) for r, t in rows]

    def set_vectors(
        self,
        layer: Layer,
        items: Sequence[PendingVector],
        vectors: npt.NDArray[np.float32],
        embedder: str,
    ) -> int:
        """Store vectors for pending rows whose text is still the embedded text.

        A row updated or deleted since it was read is left alone (it is embedded again with
        its new text). Returns how many rows were updated.
        """
        if not items:
            return 0
        table = self._table(layer)
        with self._writing("store vectors") as conn:
            scope_of = {
                int(r): int(s)
                for r, s in self._select_among(
                    conn,
                    f"SELECT rowid, scope_id FROM {table}",
                    "rowid",
                    [item.ref for item in items],
                )
            }
            gens = {s: self.bump(conn, s) for s in sorted(set(scope_of.values()))}
            params = [
                (
                    self._vector_param(vec),
                    embedder,
                    gens[scope_of[item.ref]],
                    item.ref,
                    item.text,
                )
                for item, vec in zip(items, vectors, strict=True)
                if item.ref in scope_of
            ]
            return self._execute_many(
                conn,
                self.dialect.sql(
                    f"UPDATE {table} SET vector = ?, embedder = ?, generation = ? "
                    f"WHERE rowid = ? AND {self._embedded_text(layer)} = ?"
                ),
                params,
            )

    def stored_dimension(self, embedder: str, scope_id: int | None = None) -> int | None:
        """Dimension of the vectors `embedder` made (optionally in one scope), if any."""
        with self._reading("read the vector dimension") as conn:
            for layer in TABLES:
                sql = (
                    f"SELECT {self.dialect.dimension} FROM {self._table(layer)} "
                    "WHERE embedder = ? AND vector IS NOT NULL"
                )
                params: list[object] = [embedder]
                if scope_id is not None:
                    sql += " AND scope_id = ?"
                    params.append(scope_id)
                row = conn.execute(self.dialect.sql(sql + " LIMIT 1"), params).fetchone()
                if row is not None:
                    return int(row[0])
        return None

    def drop_vectors(self, embedder: str, *, keep_dimension: int) -> int:
        """Forget `embedder`'s vectors of another dimension; those rows wait for new ones.

        Used when an embedder with an unchanged identity starts returning vectors of another
        dimension (its endpoint or settings changed). Returns how many rows were reset.
        """
        d = self.dialect
        reset = 0
        with self._writing("reset vectors") as conn:
            for layer in TABLES:
                table = self._table(layer)
                other = f"embedder = ? AND {d.dimension} != ?"
                scope_ids = sorted(
                    int(r[0])
                    for r in conn.execute(
                        d.sql(f"SELECT DISTINCT scope_id FROM {table} WHERE {other}"),
                        (embedder, keep_dimension),
                    ).fetchall()
                )
                for scope_id in scope_ids:
                    gen = self.bump(conn, scope_id)
                    cur = conn.execute(
                        d.sql(
                            f"UPDATE {table} SET vector = NULL, embedder = NULL, generation = ? "
                            f"WHERE scope_id = ? AND {other}"
                        ),
                        (gen, scope_id, embedder, keep_dimension),
                    )
                    reset += max(cur.rowcount, 0)
        return reset
