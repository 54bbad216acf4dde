"""Rows as the backends hand them to the derived indexes: one set of types for every backend.

A backend stores records (`types.MemoryRecord`, `types.MessageRecord`); the in-memory indexes of
a scope (`stores._index`) are built from *rows*: a record plus its row reference (`rowid`, the
backend's monotonic key) and its stored vector. The local SQLite backend and PostgreSQL both
produce these, so the indexes, the recall engine and the vector upkeep never know which database
they talk to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from langchain_tdai_recall.types import MemoryRecord, MessageRecord, Scope

__all__ = [
    "L0_CONTEXT_CHARS",
    "MEMORY_COLUMNS",
    "MESSAGE_COLUMNS",
    "Layer",
    "MemoryRow",
    "MessageRow",
    "PendingVector",
    "memory_from_row",
    "message_from_row",
]

Layer = Literal["l1", "l0"]
"""`l1`: memories; `l0`: conversation messages."""

MEMORY_COLUMNS: Final = (
    "rowid",
    "id",
    "content",
    "type",
    "scene_name",
    "priority",
    "activity_start_time",
    "activity_end_time",
    "timestamp",
    "session_key",
    "source_message_ids",
    "created_at",
    "updated_at",
)
"""The columns every backend selects, in this order, to read a memory (`memory_from_row`)."""

MESSAGE_COLUMNS: Final = (
    "rowid",
    "id",
    "role",
    "content",
    "session_key",
    "session_id",
    "recorded_at",
)
"""The columns every backend selects, in this order, to read a message (`message_from_row`)."""

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


def memory_from_row(row: Sequence[object], scope: Scope) -> MemoryRecord:
    """A memory record from a row whose first 13 columns are `MEMORY_COLUMNS`."""
    (
        _,
        mid,
        content,
        mtype,
        scene,
        priority,
        start,
        end,
        ts,
        session,
        sources,
        created,
        updated,
    ) = row[:13]
    return MemoryRecord(
        id=str(mid),
        content=str(content),
        type=mtype,  # type: ignore[arg-type]
        scene_name=str(scene),
        priority=int(priority),  # type: ignore[call-overload]
        activity_start_time=start,  # type: ignore[arg-type]
        activity_end_time=end,  # type: ignore[arg-type]
        timestamp=ts,  # type: ignore[arg-type]
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        session_key=str(session),
        source_message_ids=tuple(json.loads(str(sources))),
        created_at=str(created),
        updated_at=str(updated),
    )


def message_from_row(row: Sequence[object], scope: Scope) -> MessageRecord:
    """A message record from a row whose first 7 columns are `MESSAGE_COLUMNS`."""
    _, mid, role, content, session_key, session_id, recorded_at = row[:7]
    return MessageRecord(
        id=str(mid),
        role=str(role),
        content=str(content),
        session_key=str(session_key),
        session_id=str(session_id),
        recorded_at=str(recorded_at),
        user_id=scope.user_id,
        agent_id=scope.agent_id,
    )
