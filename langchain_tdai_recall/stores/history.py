"""The history codec: how a replaced version of a memory is kept, the same in every backend.

An update, a merge and a delete each end the current version of a memory. Before the row
changes, the backend copies its remembered fields (`SNAPSHOT_FIELDS`, metadata and expiry
included) as one JSON object to its version table, with what ended it (`update`, `merge`,
`merged`, `delete`), who did it and the ids involved, inside the write's own transaction. An
update that changes none of `COMPARED_FIELDS` is not a new version. A snapshot is JSON, so
adding fields needs no migration: versions recorded before a field existed read it as empty
(no metadata, no expiry). This module owns the format: what a snapshot holds, when an update is a
new version, and how stored versions read back as `MemoryVersion`s; the statements that keep and
read versions are written once over the SQL backends' dialects in `stores._sql.history`. Plain
inserts write nothing to the history, so bulk ingestion pays nothing for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Final, cast

from langchain_tdai_recall.stores.records import stored_metadata
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryVersion, Scope

__all__ = [
    "COMPARED_FIELDS",
    "SNAPSHOT_FIELDS",
    "is_new_version",
    "record_fields",
    "versions_from_rows",
    "versions_of_current",
]

SNAPSHOT_FIELDS: Final = (
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
    "metadata",
    "expires_at",
)
"""The fields of a memory a version keeps (its scope and id are the version row's own)."""

COMPARED_FIELDS: Final = (
    "content",
    "type",
    "scene_name",
    "priority",
    "activity_start_time",
    "activity_end_time",
    "timestamp",
    "source_message_ids",
    "metadata",
)
"""The fields whose change makes an update a new version. Write times, the session and the
expiry do not: every update renews a default TTL (`store.default_ttl_seconds`), and re-writing
the same memory is not a new version of it; the expiry is kept in each version all the same."""


def record_fields(rec: MemoryRecord) -> dict[str, object]:
    """The snapshot of a record: `SNAPSHOT_FIELDS`, JSON-ready."""
    return {
        "content": rec.content,
        "type": rec.type,
        "scene_name": rec.scene_name,
        "priority": rec.priority,
        "activity_start_time": rec.activity_start_time,
        "activity_end_time": rec.activity_end_time,
        "timestamp": rec.timestamp,
        "session_key": rec.session_key,
        "source_message_ids": list(rec.source_message_ids),
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "metadata": dict(rec.metadata),
        "expires_at": rec.expires_at,
    }


def is_new_version(
    old: Mapping[str, object], change: Change, replacement: MemoryRecord | None
) -> bool:
    """Whether ending the version `old` (a snapshot) by `change` is worth a history entry.

    Every merge and delete is; an update only when `replacement` differs from `old` in one of
    `COMPARED_FIELDS` (re-writing the same memory is not a version).
    """
    if replacement is None or change != "update":
        return True
    new = record_fields(replacement)
    return any(old[k] != new[k] for k in COMPARED_FIELDS)


def versions_from_rows(
    rows: Iterable[tuple[object, ...]],
    memory_id: str,
    scope: Scope,
    current: MemoryRecord | None,
) -> list[MemoryVersion]:
    """A memory's history from its stored version rows, oldest first, then the current row.

    Each row is `(version, change, actor, related_ids JSON, snapshot JSON, replaced_at)`, in
    version order.
    """
    out: list[MemoryVersion] = []
    for version, change, actor, related, snapshot, replaced_at in rows:
        data = json.loads(str(snapshot))
        record = MemoryRecord(
            id=memory_id,
            content=str(data["content"]),
            type=data["type"],
            scene_name=str(data["scene_name"]),
            priority=int(data["priority"]),
            activity_start_time=data["activity_start_time"],
            activity_end_time=data["activity_end_time"],
            timestamp=data["timestamp"],
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=str(data["session_key"]),
            source_message_ids=tuple(data["source_message_ids"]),
            created_at=str(data["created_at"]),
            updated_at=str(data["updated_at"]),
            metadata=stored_metadata(data.get("metadata")),  # absent from older versions
            expires_at=None if data.get("expires_at") is None else str(data["expires_at"]),
        )
        out.append(
            MemoryVersion(
                version=int(str(version)),
                record=record,
                current=False,
                change=cast("Change", change),  # one of the values the backends write
                changed_by=str(actor),
                changed_at=str(replaced_at),
                related_ids=tuple(json.loads(str(related))),
            )
        )
    if current is not None:
        out += versions_of_current(current, number=len(out) + 1)
    return out


def versions_of_current(current: MemoryRecord, *, number: int = 1) -> list[MemoryVersion]:
    """The current row as the last version of a memory's history."""
    return [
        MemoryVersion(
            version=number,
            record=current,
            current=True,
            change=None,
            changed_by=None,
            changed_at=None,
            related_ids=(),
        )
    ]
