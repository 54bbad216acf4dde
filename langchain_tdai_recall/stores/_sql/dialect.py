"""The SQL dialect hooks: where SQLite and PostgreSQL differ, so that the rest is written once.

The two SQL backends keep the same tables under the same column names and mean the same by every
statement; what differs is small and listed here: PostgreSQL's tables carry a `tdai_` prefix,
its parameters are `%s` (SQLite's `?`), a text cannot hold NUL, a list binds as one array, rows
are locked with `FOR UPDATE`, text is ordered by `COLLATE "C"` (SQLite's default), "no limit"
is `NULL` (SQLite's `-1`), a vector's dimension is read with `vector_dims`, and a field of the
JSON metadata with `jsonb` operators (SQLite's `json_extract`). Shared
statements are written in SQLite's spelling with `{p}` before each table name; `Dialect.sql`
turns one into the backend's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langchain_tdai_recall.stores.records import MEMORY_COLUMNS
from langchain_tdai_recall.types import iso_utc

__all__ = ["Dialect", "same_text", "utc_now"]


def same_text(text: str | None) -> str | None:
    """Text as a backend that stores any string keeps it: unchanged."""
    return text


def utc_now() -> str:
    """Now in UTC, as the backends store times (ISO-8601, milliseconds, `Z`)."""
    return iso_utc()


@dataclass(frozen=True)
class Dialect:
    """How one SQL backend spells what both say."""

    prefix: str
    """Prefix of every table name (`tdai_` in PostgreSQL's shared databases)."""
    mark: str
    """The parameter mark: `?` or `%s`."""
    text: Callable[[str | None], str | None] = same_text
    """A text as the database can store it (PostgreSQL: NUL becomes U+FFFD)."""
    arrays: bool = False
    """Whether a list binds as one array parameter (`= ANY(%s)`), else one mark per item."""
    for_update: str = ""
    """Appended to a read that must lock its rows until the transaction ends."""
    collate_c: str = ""
    """Appended to a text column that must sort by code point."""
    distinct_from: str = "IS NOT"
    """The null-safe "differs from" operator."""
    dimension: str = "length(vector) / 4"
    """The dimension of the stored vector `vector`."""
    no_limit: int | None = -1
    """The `LIMIT` parameter that means no limit."""
    item_namespace: str = "json_extract(metadata, '$.tdai_store.ns')"
    """The namespace a LangGraph store item keeps in its metadata (`tdai_store.ns`), as JSON
    text, or NULL (`graph_store`)."""
    memory_columns: str = ", ".join(
        "NULLIF(metadata, '{}')" if c == "metadata" else c for c in MEMORY_COLUMNS
    )
    """`records.MEMORY_COLUMNS` as a select list (`memory_from_row` reads it); empty metadata is
    read as NULL, so reading many rows makes no string for it."""
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def sql(self, template: str) -> str:
        """A shared statement in this dialect: `{p}` is the table prefix, `?` a parameter."""
        done = self._cache.get(template)
        if done is None:
            done = template.replace("{p}", self.prefix).replace("?", self.mark)
            self._cache[template] = done
        return done

    def any_of(self, column: str, values: Sequence[object]) -> tuple[str, list[object]]:
        """`column` is one of `values` (not empty): the SQL condition and its parameters."""
        if self.arrays:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({','.join([self.mark] * len(values))})", list(values)
