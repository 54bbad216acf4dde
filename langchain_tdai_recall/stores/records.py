"""Rows as the backends hand them to the derived indexes: one set of types for every backend.

A backend stores records (`types.MemoryRecord`, `types.MessageRecord`); the in-memory indexes of
a scope (`stores._index`) are built from *rows*: a record plus its row reference (`rowid`, the
backend's monotonic key) and its stored vector. The local SQLite backend and PostgreSQL both
produce these, so the indexes, the recall engine and the vector upkeep never know which database
they talk to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from langchain_tdai_recall.types import MemoryRecord, MessageRecord

__all__ = ["L0_CONTEXT_CHARS", "Layer", "MemoryRow", "MessageRow", "PendingVector"]

Layer = Literal["l1", "l0"]
"""`l1`: memories; `l0`: conversation messages."""

L0_CONTEXT_CHARS: Final = 300
"""Code points of the previous message of a session kept as a message's context (its end), so a
message is searched together with the turn it answers."""


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """A memory row as the index needs it: metadata for ranking, text, and the vector."""

    rowid: int
    record: MemoryRecord
    embedder: str | None
    vector: bytes | None


@dataclass(frozen=True, slots=True)
class MessageRow:
    """A message row as the index needs it."""

    rowid: int
    record: MessageRecord
    embedder: str | None
    vector: bytes | None
    context: str = ""
    """The end of the previous message of the session (indexed with the message)."""


@dataclass(frozen=True, slots=True)
class PendingVector:
    """A row waiting for a vector: its reference and the text to embed."""

    ref: int
    text: str
