"""The record-backend interface, and the rows it hands to the derived indexes.

A backend stores records (`types.MemoryRecord`, `types.MessageRecord`); the in-memory indexes of
a scope (`stores._index`) are built from *rows*: a record plus its row reference (`rowid`, the
backend's monotonic key) and its stored vector. The local SQLite backend and PostgreSQL both
produce these, so the indexes, the recall engine and the vector upkeep never know which database
they talk to.

`RecordBackend` names the seam the two backends share: the SQL of scopes, memories, messages,
tombstones and vectors, addressed by the backend's integer scope ids. The scope-level store
(`stores._scoped.ScopedStore`) is written once over it; a backend writes this and its opening.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from langchain_tdai_recall.types import MemoryRecord, MessageRecord, Scope

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from langchain_tdai_recall.types import Change, MemoryType, MemoryVersion

__all__ = [
    "L0_CONTEXT_CHARS",
    "MEMORY_COLUMNS",
    "MESSAGE_COLUMNS",
    "Layer",
    "MemoryRow",
    "MessageRow",
    "PendingVector",
    "RecordBackend",
    "RowWriter",
    "memory_from_row",
    "message_from_row",
    "metadata_json",
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
    "metadata",
    "expires_at",
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
    """A memory record from a row whose first 15 columns are `MEMORY_COLUMNS`."""
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
        metadata,
        expires,
    ) = row[:15]
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
        metadata=_metadata(metadata),
        expires_at=None if expires is None else str(expires),
    )


def _metadata(value: object) -> dict[str, object]:
    """Stored metadata (JSON text, or a dict from PostgreSQL's jsonb) as a dict."""
    if value is None or value in ("", "{}"):
        return {}
    if isinstance(value, dict):
        return value
    loaded = json.loads(str(value))
    return loaded if isinstance(loaded, dict) else {}


def metadata_json(record: MemoryRecord) -> str:
    """A record's metadata as the JSON text the backends store."""
    return json.dumps(dict(record.metadata), ensure_ascii=False, separators=(",", ":"))


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


class RecordBackend(Protocol):
    """The scope-id-keyed record SQL of a backend (`SqliteRecords`, `PostgresRecords`).

    Scopes are addressed by the backend's integer ids (`scope_id`); `Scope` arguments only label
    the records read back. Every write runs in one transaction that bumps its scope's generation
    and stamps the rows it touched, so the backend is also the derived indexes' row source
    (`generation`, `count`, `*_rows_since`, `tombstones_since`: `stores._index.layer.RowSource`).
    Failures raise the package's `StoreError` family.
    """

    # -- scopes -------------------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool) -> int | None:
        """The id of a scope; created when `create`, else `None` if unknown."""
        ...

    def scopes(self) -> list[tuple[int, Scope]]:
        """Every scope that has held a memory or a message: (scope_id, scope)."""
        ...

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (bumped by every write to it)."""
        ...

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows in a layer, for one scope or all."""
        ...

    def rowids_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids of a scope's layer written after `generation`, ascending."""
        ...

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row references deleted from a scope's layer after `generation`."""
        ...

    # -- L1 memories --------------------------------------------------------------------------

    def upsert_memories(
        self,
        scope_id: int,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
    ) -> list[MemoryRecord]:
        """Insert or update records in one transaction (see `BaseMemoryStore.put_memories`)."""
        ...

    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""
        ...

    def get_memory(self, scope_id: int, memory_id: str, scope: Scope) -> MemoryRecord | None:
        """One memory by id, or `None`."""
        ...

    def delete_memories(self, scope_id: int, memory_ids: Sequence[str]) -> int:
        """Delete by id (each deleted version is kept in the history); returns how many existed."""
        ...

    def memory_history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""
        ...

    def list_memories(
        self,
        scope_id: int,
        scope: Scope,
        *,
        type: MemoryType | None,
        limit: int | None,
        offset: int,
    ) -> list[MemoryRecord]:
        """Memories of a scope, oldest first (creation time, then id)."""
        ...

    def memory_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MemoryRow]:
        """Rows of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        ...

    def memories_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MemoryRecord]:
        """Records of the scope for the given row ids (missing or foreign ones are left out)."""
        ...

    # -- L0 messages --------------------------------------------------------------------------

    def insert_messages(
        self,
        scope_id: int,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert messages (ids already stored are skipped); returns how many were new.

        `busy_timeout_ms` bounds the wait for another writer where the backend can bound one
        call (SQLite); others bound every call alike.
        """
        ...

    def message_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MessageRow]:
        """Messages of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        ...

    def messages_by_rowid(
        self, scope_id: int, rowids: Sequence[int], scope: Scope
    ) -> dict[int, MessageRecord]:
        """Messages of the scope for the given row ids."""
        ...

    # -- copying a store ----------------------------------------------------------------------

    def export_memories(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MemoryRow]:
        """A page of a scope's memory rows in reference order, with vectors."""
        ...

    def export_messages(
        self, scope_id: int, scope: Scope, *, after: int, limit: int
    ) -> list[MessageRow]:
        """A page of a scope's message rows in reference order, with context and vectors."""
        ...

    def import_memories(self, scope_id: int, rows: Sequence[MemoryRow]) -> int:
        """Write copied memory rows as they are (see `BaseMemoryStore.import_rows`)."""
        ...

    def import_messages(self, scope_id: int, rows: Sequence[MessageRow]) -> int:
        """Write copied message rows as they are; ids already stored are skipped."""
        ...

    # -- vector upkeep ------------------------------------------------------------------------

    def pending_vectors(
        self, layer: Layer, embedder: str, *, after: int, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows after ref `after` that need a vector from `embedder`, in ref order."""
        ...

    def set_vectors(
        self,
        layer: Layer,
        items: Sequence[PendingVector],
        vectors: npt.NDArray[np.float32],
        embedder: str,
    ) -> int:
        """Store vectors for pending rows whose text is still the embedded text."""
        ...

    def count_pending_vectors(
        self, layer: Layer, embedder: str, *, scope_id: int | None = None, stale: bool = True
    ) -> int:
        """Rows without a vector (and, with `stale`, rows whose vector is another embedder's)."""
        ...

    def vector_embedders(self, layer: Layer) -> list[tuple[str, int, int]]:
        """(embedder, dimension, rows) of every embedder that made stored vectors in a layer."""
        ...

    def count_foreign_vectors(self, layer: Layer, embedder: str) -> int:
        """Rows holding a vector made by another embedder."""
        ...

    def stored_dimension(self, embedder: str, scope_id: int | None = None) -> int | None:
        """Dimension of the vectors `embedder` made (optionally in one scope), if any."""
        ...

    def drop_vectors(self, embedder: str, *, keep_dimension: int) -> int:
        """Forget `embedder`'s vectors of another dimension; returns how many rows were reset."""
        ...

    # -- expiry (issue 16)

    def expired_memories(self, now: str, limit: int) -> list[tuple[Scope, str]]:
        """(scope, id) of up to `limit` memories whose `expires_at` is at or before `now`."""
        ...

    def count_unexpired_memories(self, scope_id: int) -> int:
        """Memories of a scope that have not expired now (what reads return, swept or not)."""
        ...

    def item_namespaces(self, scope_id: int) -> list[str | None]:
        """Distinct LangGraph store namespaces (JSON text, `None`: none kept) of a scope."""
        ...

    # -- erasure (issue 16) -------------------------------------------------------------------

    def delete_scope_rows(self, scope_id: int) -> dict[str, int]:
        """Delete every row of a scope in one transaction (`stores._sql.erasure`).

        Returns the counts of `memories`, `memory_versions`, `messages`, `vectors` and
        `formation_state`.
        """
        ...

    def user_scope_keys(self, user_id: str) -> list[Scope]:
        """Every scope row of a user, emptied ones included (the shared scope first)."""
        ...

    def list_messages(
        self,
        scope_id: int,
        scope: Scope,
        *,
        session_key: str | None,
        limit: int | None,
        offset: int,
    ) -> list[MessageRecord]:
        """Messages of a scope (optionally one session) in the order they were stored."""
        ...

    def delete_messages(
        self, scope_id: int, *, ids: Sequence[str] | None, session_key: str | None
    ) -> int:
        """Delete messages of a scope by id or by session; returns how many existed."""
        ...


class RowWriter(RecordBackend, Protocol):
    """A `RecordBackend` with the row primitives that run inside a caller's transaction.

    Memory formation's commit (`stores.formation.SqlFormationState`) composes them, with its own
    state, into one transaction. `conn` is the backend's connection inside that transaction.
    """

    def bump(self, conn: Any, scope_id: int) -> int:
        """Advance a scope's generation (locking the scope); returns the new one."""
        ...

    def find_duplicate(self, conn: Any, scope_id: int, rec: MemoryRecord) -> MemoryRecord | None:
        """The scope's memory whose text is an exact duplicate of `rec`'s, or `None`."""
        ...

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
        """Insert or update one row; its replaced version goes to the history as `change`."""
        ...

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
        """Delete one row; its last version goes to the history. Whether it existed."""
        ...
