"""The formation-state part of the backend interface: what memory formation keeps in the store.

Memory formation (`formation/`) reads the recorded L0 messages past a per-session cursor, asks a
model for memories, and writes them, their history and the cursor move in one atomic commit,
holding a per-scope lease so that one process at a time forms a scope. A backend's
`BaseMemoryStore.formation` implements this ABC; both SQL backends do it with
`stores._sql.formation.SqlFormationState`, written once over their dialects (the local store's
`stores.local._formation`, PostgreSQL's `stores.postgres._formation`).

The contract, which `testing.conformance` checks on every backend:

- **Cursors are L0 row references, monotonic per scope**: a message written after another of
  the same scope has a larger reference and is never visible before it, so "everything past the
  cursor" is exact.
- **One commit per window**: the memories it adds, updates, merges and deletes, their history
  versions, the scene-queue entries and the cursor move are written together or not at all; the
  commit writes nothing when the lease is no longer its owner's or the cursor moved meanwhile.
- **A lease per scope**, exclusive across processes and hosts; a lease whose owner process on
  this host is gone is taken over at once, others when they expire.
- **History**: every replaced or deleted version of a memory is kept, oldest first.

Scopes are addressed by the backend's integer scope ids (`scope_id`), as formation's tables are.
"""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from langchain_tdai_recall.types import Change, MemoryRecord

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from langchain_tdai_recall.types import MemoryVersion, Scope

__all__ = [
    "BaseFormationState",
    "CommitOutcome",
    "FormationSnapshot",
    "L0Message",
    "LeaseOwner",
    "PendingSession",
    "ScopeState",
    "SessionCursor",
    "SessionState",
    "Upsert",
    "VersionRow",
]


# -- the values formation reads and commits (shared by every backend) --------------------------


@dataclass(frozen=True, slots=True)
class L0Message:
    """One stored L0 message as formation reads it."""

    rowid: int
    """The monotonic row id: the cursor key."""
    id: str
    """The message id (stored as a memory's source id)."""
    role: str
    """`user` or `assistant`."""
    content: str
    """The text as recorded."""
    recorded_at: str
    """When it was recorded (ISO-8601)."""


@dataclass(frozen=True, slots=True)
class SessionState:
    """Formation state of one session of one scope."""

    cursor: int = 0
    warmup: int = 1
    situation: str = ""
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class PendingSession:
    """A session with L0 messages past its cursor."""

    scope_id: int
    user_id: str
    agent_id: str | None
    session_key: str
    state: SessionState
    messages: int
    """Messages past the cursor."""
    user_turns: int
    """User messages past the cursor (the scheduler's turn count)."""


@dataclass(frozen=True, slots=True)
class ScopeState:
    """Scene and persona state of one scope."""

    scenes_at: float = 0.0
    memories_since_persona: int = 0
    persona_at: float = 0.0
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Who holds a scope's lease: one formation engine of one process."""

    token: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)


@dataclass(frozen=True, slots=True)
class Upsert:
    """One memory row to write in a commit."""

    record: MemoryRecord
    vector: npt.NDArray[np.float32] | None
    """The current embedder's vector of `record.content`, or `None` (the vector upkeep embeds
    the row later)."""
    change: Change = "update"
    """How a replaced version is labelled in the history (`update` or `merge`)."""
    related: tuple[str, ...] = ()
    dedupe: bool = False
    """For new memories: do not write when an exact duplicate appeared meanwhile."""


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What a commit did."""

    ok: bool
    """Whether it committed (False: lease lost or cursor moved; nothing was written)."""
    reason: str = ""
    written: tuple[MemoryRecord, ...] = ()
    """Rows written (new and updated)."""
    deleted: tuple[str, ...] = ()
    """Ids deleted."""
    duplicates: int = 0
    """New memories not written because an exact duplicate appeared meanwhile."""


@dataclass(frozen=True, slots=True)
class SessionCursor:
    """A session's formation state, with its cursor as the id of the last message formed."""

    session_key: str
    state: SessionState
    """The state (its `cursor` is this store's reference; another store maps `message_id`)."""
    message_id: str | None
    """Id of the message at the cursor (`None` for cursor 0)."""


@dataclass(frozen=True, slots=True)
class VersionRow:
    """One stored history version, as kept (the snapshot and related ids as JSON)."""

    memory_id: str
    version: int
    change: str
    actor: str
    related_ids: str
    snapshot: str
    replaced_at: str


@dataclass(frozen=True, slots=True)
class FormationSnapshot:
    """A scope's formation state and history, for copying it into another store."""

    sessions: tuple[SessionCursor, ...] = ()
    versions: tuple[VersionRow, ...] = ()
    scope_state: ScopeState | None = None
    scene_queue: tuple[str, ...] = ()
    """Memory ids waiting to be folded into the scenes, oldest first."""


class BaseFormationState(ABC):
    """Cursors, leases, the scene queue, history and the atomic commit of memory formation."""

    @abstractmethod
    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The store's id of a scope (`None` when it never held anything and not `create`)."""

    @abstractmethod
    def existing_duplicates(self, scope_id: int, texts: Sequence[str]) -> dict[str, str]:
        """For each text with an exact duplicate in the scope: fingerprint -> existing id."""

    # -- reading L0 -------------------------------------------------------------------------

    @abstractmethod
    def messages_after(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's messages with reference > `cursor`, oldest first, at most `limit`."""

    @abstractmethod
    def messages_up_to(
        self, scope_id: int, session_key: str, cursor: int, limit: int
    ) -> list[L0Message]:
        """The session's last `limit` messages with reference <= `cursor`, oldest first."""

    @abstractmethod
    def high_water(self) -> int:
        """The largest L0 reference so far (0 when there is none)."""

    # -- session state ------------------------------------------------------------------------

    @abstractmethod
    def session(self, scope_id: int, session_key: str) -> SessionState:
        """The session's state (defaults when it was never formed)."""

    @abstractmethod
    def pending(
        self,
        scope_id: int | None = None,
        session_key: str | None = None,
        *,
        up_to: int | None = None,
    ) -> list[PendingSession]:
        """Sessions with messages past their cursor (one scope, one session, or all)."""

    @abstractmethod
    def backlog(self, scope_id: int, session_key: str) -> PendingSession | None:
        """One session's state and the messages past its cursor; `None` when nothing is."""

    @abstractmethod
    def recent_memories(self, scope_id: int, scope: Scope, limit: int) -> list[MemoryRecord]:
        """The scope's most recently written memories, newest first."""

    @abstractmethod
    def record_failure(
        self, scope_id: int, session_key: str, *, error: str, retry_at: float
    ) -> int:
        """Count a failed window (the cursor stays); returns the consecutive failures."""

    @abstractmethod
    def set_warmup(self, scope_id: int, session_key: str, warmup: int) -> None:
        """Store a session's warm-up threshold (0 = graduated)."""

    # -- leases -------------------------------------------------------------------------------

    @abstractmethod
    def acquire(self, scope_id: int, owner: LeaseOwner, ttl_s: float) -> bool:
        """Take (or renew) the scope's lease; `False` while another live owner holds it."""

    @abstractmethod
    def release(self, scope_id: int, owner: LeaseOwner) -> None:
        """Give the lease back (only if it is ours)."""

    # -- the commit ---------------------------------------------------------------------------

    @abstractmethod
    def commit(
        self,
        scope_id: int,
        *,
        owner: LeaseOwner | None,
        upserts: Sequence[Upsert],
        deletes: Sequence[tuple[str, Change, tuple[str, ...]]],
        actor: str,
        embedder: str | None,
        session_key: str | None = None,
        expected_cursor: int | None = None,
        new_cursor: int | None = None,
        situation: str | None = None,
        warmup: int | None = None,
        queue_scenes: bool = True,
    ) -> CommitOutcome:
        """Apply one window's (or one tool call's) writes and move the cursor, atomically.

        With `owner`, the lease must still be ours; with `session_key`, the cursor must still
        be `expected_cursor` and the window's last message (`new_cursor`) must still exist (not
        erased meanwhile). Otherwise nothing is written and `ok` is False.
        """

    # -- scenes and persona -------------------------------------------------------------------

    @abstractmethod
    def scope_state(self, scope_id: int) -> ScopeState:
        """The scope's scene/persona state."""

    @abstractmethod
    def scene_queue(
        self, scope_id: int, scope: Scope, limit: int
    ) -> tuple[int, list[MemoryRecord], int]:
        """(last seq read, the queued memories that still exist, how many are queued in all)."""

    @abstractmethod
    def scopes_with_scene_work(self) -> list[tuple[int, str, str | None]]:
        """Scopes with scene or persona work: (scope_id, user_id, agent_id).

        A non-empty scene queue, or memories written, updated or deleted since formation last
        wrote the scope's persona (`persona_done`).
        """

    @abstractmethod
    def scenes_done(self, scope_id: int, up_to_seq: int, *, owner: LeaseOwner | None) -> bool:
        """Mark queued memories up to `up_to_seq` as folded into the scenes."""

    @abstractmethod
    def persona_done(self, scope_id: int) -> None:
        """A valid persona answer (written or kept): the new-memory counter starts again."""

    @abstractmethod
    def scenes_failed(self, scope_id: int, *, error: str, retry_at: float) -> None:
        """Count a failed scene/persona update (the queue stays)."""

    # -- history ------------------------------------------------------------------------------

    @abstractmethod
    def history(self, scope_id: int, memory_id: str, scope: Scope) -> list[MemoryVersion]:
        """Every version of a memory, oldest first (the current row last)."""

    # -- copying a store ----------------------------------------------------------------------

    @abstractmethod
    def export_scope(self, scope_id: int) -> FormationSnapshot:
        """The scope's cursors (by message id), history, scene/persona state and scene queue."""

    @abstractmethod
    def import_scope(self, scope_id: int, snapshot: FormationSnapshot) -> int:
        """Write another store's snapshot into this scope, after its messages were copied.

        A cursor moves to this store's reference of the same message, and only forward; history
        versions already present are kept; the scene queue and state are written when this
        scope has none. Returns the cursors and versions written.
        """
