"""What a SQL backend supplies to the statements written once in `stores._sql`.

`SqlBackend` is the base of the shared record classes: a backend subclass gives its `Dialect`,
its connections (a read, a write transaction, a batch of one statement), how it binds vectors,
how it spells a message's embedded text, and its generation bump. The helpers below build on
them: a layer's table, and reads of `column IN values` in lists short enough to bind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, TypeVar

from langchain_tdai_recall.stores.records import Layer

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from langchain_tdai_recall.stores._sql.dialect import Dialect

__all__ = ["TABLES", "SqlBackend"]

_T = TypeVar("_T")

TABLES: Final[dict[Layer, str]] = {"l1": "memories", "l0": "messages"}
"""The table of each layer (before the dialect's prefix)."""

_MAX_VARIABLES: Final = 500
"""Bound parameters per `IN (...)` list (SQLite's limit is 32766 on recent builds)."""


class SqlBackend(ABC):
    """The hooks a SQL backend supplies, and the helpers built on them."""

    dialect: Dialect

    # -- what a backend supplies --------------------------------------------------------------

    @abstractmethod
    def _reading(self, action: str) -> AbstractContextManager[Any]:
        """A read connection for a few statements (no transaction); `action` names it."""

    @abstractmethod
    def _writing(
        self, action: str, *, timeout_s: float | None = None, busy_timeout_ms: int | None = None
    ) -> AbstractContextManager[Any]:
        """A write transaction (committed on success, rolled back on error).

        `timeout_s` bounds a long call where the backend bounds calls; `busy_timeout_ms` bounds
        the wait for another writer where the backend bounds that per call (SQLite).
        """

    @abstractmethod
    def _execute_many(self, conn: Any, sql: str, rows: Sequence[tuple[object, ...]]) -> int:
        """Run `sql` once for each of `rows` in the caller's transaction; rows changed."""

    @staticmethod
    @abstractmethod
    def bump(conn: Any, scope_id: int) -> int:
        """Advance a scope's generation inside the caller's transaction; returns the new one."""

    @abstractmethod
    def _vector_param(self, vector: npt.NDArray[np.float32]) -> object:
        """A vector as this backend binds it."""

    @abstractmethod
    def _stored_vector(self, blob: bytes | None, embedder: str | None) -> object | None:
        """A copied row's stored vector (little-endian float32 bytes) as bound; `None`: none."""

    @abstractmethod
    def _embedded_text(self, layer: Layer) -> str:
        """SQL for the text a row is embedded from: a message with its context."""

    @property
    def _context_column(self) -> str:
        """SQL for a message's context."""
        return "context"

    def _has_history(self) -> bool:
        """Whether the version table exists (a read-only open of an older store lacks it)."""
        return True

    def _fetch_stored(self, action: str, sql: str, params: Sequence[object]) -> list[Any]:
        """The rows of a read that returns stored vectors (a backend may read them binary)."""
        with self._reading(action) as conn:
            return list(conn.execute(sql, params).fetchall())

    # -- helpers ------------------------------------------------------------------------------

    def _table(self, layer: Layer) -> str:
        return self.dialect.prefix + TABLES[layer]

    def _parts(self, values: Sequence[_T]) -> Iterator[Sequence[_T]]:
        """`values` in lists short enough to bind (one, for a dialect that binds arrays)."""
        size = len(values) or 1 if self.dialect.arrays else _MAX_VARIABLES
        for start in range(0, len(values), size):
            yield values[start : start + size]

    def _select_among(
        self,
        conn: Any,
        select: str,
        column: str,
        values: Sequence[object],
        *,
        where: str = "",
        params: Sequence[object] = (),
    ) -> list[Any]:
        """Rows of `select WHERE [where AND] column IN values`, in lists short enough to bind."""
        rows: list[Any] = []
        for part in self._parts(values):
            among, bound = self.dialect.any_of(column, part)
            condition = f"{where} AND {among}" if where else among
            rows += conn.execute(
                self.dialect.sql(select) + f" WHERE {condition}", [*params, *bound]
            ).fetchall()
        return rows
