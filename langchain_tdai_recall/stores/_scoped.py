"""The scope-level store, written once over a backend's records (`RecordBackend`).

Every backend turns the interface's `Scope`-keyed calls into the same steps: check that the store
is open (and writable, for a write), look up the scope's integer id (creating it on a first
write), answer empty for a scope that never held anything, and hand the id to its record SQL.
The derived search indexes, the stats and the vector-upkeep counts are the same arithmetic over
those records. `ScopedStore` is that part of `BaseMemoryStore`; a backend subclass adds only what
differs: how it opens, where it lives, its schema version, and what closing releases.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index.cache import DEFAULT_INDEX_CACHE_MIB, budget_bytes
from langchain_tdai_recall.stores.base import (
    LAYERS,
    BaseMemoryStore,
    DerivedIndexes,
    Ref,
    StoredEmbedder,
    merge_embedders,
)
from langchain_tdai_recall.stores.records import (
    Layer,
    MemoryRow,
    MessageRow,
    PendingVector,
    RecordBackend,
)
from langchain_tdai_recall.text.tokenize import Tokenizer
from langchain_tdai_recall.types import (
    ErasedScope,
    IndexCacheStats,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Scope,
    ScopeStats,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from langchain_tdai_recall.stores._index.layer import LayerIndex
    from langchain_tdai_recall.stores._index.snapshot import SnapshotCache

__all__ = ["ScopedStore", "check_store_arguments"]


def check_store_arguments(
    store: str, *, tokenizer: object, embedder_id: object, read_only: object
) -> None:
    """Refuse a wrongly typed argument every backend takes, naming it, before anything is opened."""
    problem = None
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        problem = f"tokenizer must be a Tokenizer or None, got {type(tokenizer).__name__}"
    elif embedder_id is not None and not isinstance(embedder_id, str):
        problem = f"embedder_id must be a string or None, got {type(embedder_id).__name__}"
    elif not isinstance(read_only, bool):
        problem = f"read_only must be True or False, got {read_only!r:.40}"
    if problem is not None:
        msg = f"{store}: {problem}"
        raise ConfigError(msg)


class ScopedStore(BaseMemoryStore):
    """`BaseMemoryStore` over a `RecordBackend`: Scope -> id, checks, indexes, counts.

    Args:
        records: The backend's record SQL.
        snapshots: Where large derived indexes persist their snapshots, or `None`.
        index_cache_mib: Budget of this process's derived indexes in MiB (`None`: unbounded);
            past it the least recently used scopes' indexes are released and rebuilt on use.
        tokenizer: The keyword tokenizer (see `BaseMemoryStore`).
        embedder_id: Identity of the embedder whose vectors count.
        read_only: Serve reads only.
    """

    def __init__(
        self,
        records: RecordBackend,
        *,
        snapshots: SnapshotCache | None,
        tokenizer: Tokenizer | None,
        embedder_id: str | None,
        read_only: bool,
        index_cache_mib: float | None = DEFAULT_INDEX_CACHE_MIB,
    ) -> None:
        budget = budget_bytes(index_cache_mib)
        super().__init__(tokenizer=tokenizer, embedder_id=embedder_id, read_only=read_only)
        self.records: RecordBackend = records
        """The backend's record SQL, keyed by scope id."""
        self._indexes = DerivedIndexes(snapshots, budget=budget)

    # -- lifecycle ----------------------------------------------------------------------------

    @abstractmethod
    def _release(self) -> None:
        """Release the backend's connections (idempotent)."""

    def close(self) -> None:
        """Save the large indexes' snapshots (with an index cache), drop the indexes, release."""
        if not self._closed:
            self._closed = True
            self._indexes.clear(save=True)
        self._release()

    def save_index_snapshots(self) -> int:
        """Write the snapshots of the large indexes that changed since theirs (also on close)."""
        self._check_open()
        return self._indexes.save_snapshots()

    def loaded_indexes(self) -> int:
        """Number of scopes with derived indexes built in this process."""
        return self._indexes.scopes()

    def index_cache_stats(self) -> IndexCacheStats:
        """This process's index cache: entries, bytes, budget, hits, misses, evictions."""
        return self._indexes.stats()

    def set_index_cache_budget(self, mib: float | None) -> None:
        """Bound this process's derived indexes to `mib` MiB (`None`: unbounded).

        Raises:
            ConfigError: If `mib` is not `None` nor a number of MiB in 0..2**30.
        """
        self._indexes.budget = budget_bytes(mib)

    # -- scopes and counts --------------------------------------------------------------------

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The scope's key in this store (created when `create`)."""
        if create:
            self._check_writable()
        else:
            self._check_open()
        return self.records.scope_id(scope, create=create)

    def _known(self, scope: Scope) -> int | None:
        """The id of a scope for a read (`None`: it never held anything)."""
        self._check_open()
        return self.records.scope_id(scope, create=False)

    def _created(self, scope: Scope) -> int:
        """The id of a scope for a write, created on its first one."""
        self._check_writable()
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        return scope_id

    def scopes(self) -> list[Scope]:
        """Every scope that has ever held a memory or a message."""
        self._check_open()
        return [scope for _, scope in self.records.scopes()]

    def scope_stats(self, scope: Scope) -> ScopeStats:
        """Counts of one scope (memories: the unexpired ones, whether swept or not)."""
        scope_id = self._known(scope)
        return ScopeStats(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            memories=0 if scope_id is None else self.records.count_unexpired_memories(scope_id),
            messages=0 if scope_id is None else self.records.count("l0", scope_id),
            scenes=self.documents.count_scenes(scope),
            has_persona=self.documents.get_persona(scope) is not None,
        )

    def document_scopes(self) -> list[Scope]:
        """Scopes holding a persona or a scene."""
        self._check_open()
        return self.documents.scopes()

    # -- L1 memories --------------------------------------------------------------------------

    def put_memories(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
    ) -> list[MemoryRecord]:
        """Insert or update memories in one transaction (see `BaseMemoryStore.put_memories`)."""
        self._check_writable()
        if not records:
            return []
        return self.records.upsert_memories(self._created(scope), records, dedupe=dedupe)

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord | None:
        """One memory of the scope by id, or `None`."""
        scope_id = self._known(scope)
        return None if scope_id is None else self.records.get_memory(scope_id, memory_id, scope)

    def delete_memories(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete memories of the scope by id; returns how many existed."""
        self._check_writable()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None or not memory_ids:
            return 0
        return self.records.delete_memories(scope_id, memory_ids)

    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryVersion]:
        """Every version of a memory of the scope, oldest first (the current one last)."""
        scope_id = self._known(scope)
        if scope_id is None:
            return []
        return self.records.memory_history(scope_id, memory_id, scope)

    def list_memories(
        self, scope: Scope, *, type: MemoryType | None, limit: int | None, offset: int
    ) -> list[MemoryRecord]:
        """Unexpired memories of the scope, oldest first (creation time, then id)."""
        scope_id = self._known(scope)
        if scope_id is None:
            return []
        return self.records.list_memories(scope_id, scope, type=type, limit=limit, offset=offset)

    def item_namespaces(self, scope: Scope) -> list[str | None]:
        """Distinct LangGraph store namespaces of the scope (see `BaseMemoryStore`), by SQL."""
        scope_id = self._known(scope)
        return [] if scope_id is None else self.records.item_namespaces(scope_id)

    def memories_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MemoryRecord]:
        """Memories of the scope for search-hit references; other scopes' rows are never read."""
        scope_id = self._known(scope)
        if scope_id is None or not refs:
            return {}
        return self.records.memories_by_rowid(scope_id, refs, scope)

    # -- L0 messages --------------------------------------------------------------------------

    def put_messages(
        self,
        scope: Scope,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert validated messages (ids already stored are skipped); returns how many were new.

        `busy_timeout_ms` bounds the wait for another process's write lock where the backend
        bounds one call (the local store; default 10 s); past it `StoreWriteError` is raised and
        nothing is written. PostgreSQL bounds every call by the store's `timeout_ms`.
        """
        self._check_writable()
        if not records:
            return 0
        return self.records.insert_messages(
            self._created(scope), records, busy_timeout_ms=busy_timeout_ms
        )

    def messages_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MessageRecord]:
        """Messages of the scope for search-hit references."""
        scope_id = self._known(scope)
        if scope_id is None or not refs:
            return {}
        return self.records.messages_by_rowid(scope_id, refs, scope)

    # -- copying a store ----------------------------------------------------------------------

    def export_rows(
        self, scope: Scope, layer: Layer, *, after: Ref, limit: int
    ) -> list[MemoryRow] | list[MessageRow]:
        """A page of a scope's rows as stored."""
        scope_id = self._known(scope)
        if scope_id is None:
            return []
        if layer == "l1":
            return self.records.export_memories(scope_id, scope, after=after, limit=limit)
        return self.records.export_messages(scope_id, scope, after=after, limit=limit)

    def import_rows(
        self, scope: Scope, layer: Layer, rows: Sequence[MemoryRow] | Sequence[MessageRow]
    ) -> int:
        """Write rows copied from another store as they are."""
        self._check_writable()
        if not rows:
            return 0
        scope_id = self._created(scope)
        if layer == "l1":
            return self.records.import_memories(
                scope_id, [r for r in rows if isinstance(r, MemoryRow)]
            )
        return self.records.import_messages(
            scope_id, [r for r in rows if isinstance(r, MessageRow)]
        )

    # -- search support -----------------------------------------------------------------------

    def index(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """The scope's derived index of `layer`, caught up with every write so far.

        `None` when the scope has no records.
        """
        scope_id = self._known(scope)
        if scope_id is None:
            return None
        return self._indexes.get(
            self.records,
            scope_id,
            scope,
            layer,
            tokenizer=self.tokenizer,
            embedder=self.embedder_id,
        )

    # -- vector upkeep ------------------------------------------------------------------------

    def pending_vectors(
        self, layer: Layer, *, after: Ref, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows of a layer after `after` that need a vector from the current embedder.

        Without `stale`, only rows that have no vector (cheap); with it, also rows whose vector
        another embedder made (a full scan, for the first pass after opening).
        """
        self._check_writable()
        if self.embedder_id is None:
            return []
        return self.records.pending_vectors(
            layer, self.embedder_id, after=after, limit=limit, stale=stale
        )

    def set_vectors(
        self, layer: Layer, items: Sequence[PendingVector], vectors: npt.NDArray[np.float32]
    ) -> int:
        """Store the current embedder's vectors for pending rows still holding the same text."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self.records.set_vectors(layer, items, vectors, self.embedder_id)

    def pending_vector_count(self, scope: Scope | None = None) -> int:
        """Rows of both layers (in `scope`, or anywhere) still waiting for a current vector."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        scope_id = None if scope is None else self.records.scope_id(scope, create=False)
        if scope is not None and scope_id is None:
            return 0
        return sum(
            self.records.count_pending_vectors(layer, self.embedder_id, scope_id=scope_id)
            for layer in LAYERS
        )

    def vector_embedders(self) -> list[StoredEmbedder]:
        """Every embedder whose vectors the store holds, most rows first."""
        self._check_open()
        return merge_embedders(
            [c for layer in LAYERS for c in self.records.vector_embedders(layer)]
        )

    def count_foreign_vectors(self) -> int:
        """Rows whose stored vector another embedder made."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(self.records.count_foreign_vectors(layer, self.embedder_id) for layer in LAYERS)

    def count_missing_vectors(self) -> int:
        """Rows that have no vector at all."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(
            self.records.count_pending_vectors(layer, self.embedder_id, stale=False)
            for layer in LAYERS
        )

    def vector_dimension(self, scope: Scope | None = None) -> int | None:
        """Dimension of the current embedder's stored vectors (in `scope`, or anywhere)."""
        self._check_open()
        if self.embedder_id is None:
            return None
        if scope is None:
            return self.records.stored_dimension(self.embedder_id)
        scope_id = self.records.scope_id(scope, create=False)
        return (
            None if scope_id is None else self.records.stored_dimension(self.embedder_id, scope_id)
        )

    def drop_vectors_of_other_dimension(self, dimension: int) -> int:
        """Reset the current embedder's vectors whose dimension is not `dimension`."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self.records.drop_vectors(self.embedder_id, keep_dimension=dimension)

    # -- expiry (issue 16) --------------------------------------------------------------------

    def expired_memories(self, now: str, *, limit: int) -> list[tuple[Scope, str]]:
        """(scope, id) of up to `limit` memories whose expiry is at or before `now`."""
        self._check_open()
        return self.records.expired_memories(now, limit)

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def delete_scope(self, scope: Scope) -> ErasedScope:
        """Erase everything of one scope (see `BaseMemoryStore.delete_scope`).

        The rows in one transaction (`stores._sql.erasure`), then the persona and scenes, then
        this process's indexes of the scope and their snapshot files.
        """
        self._check_writable()
        scope_id = self.records.scope_id(scope, create=False)
        counts = self.records.delete_scope_rows(scope_id) if scope_id is not None else {}
        persona, scenes = self.documents.delete_scope_documents(scope)
        snapshots = self._indexes.drop_scope(scope_id) if scope_id is not None else 0
        return ErasedScope(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            persona=persona,
            scenes=scenes,
            index_snapshots=snapshots,
            **counts,
        )

    def erase_user_leftovers(self, user_id: str) -> int:
        """Erase the user's documents no scope names (see `BaseMemoryStore`)."""
        self._check_writable()
        return self.documents.delete_user_leftovers(user_id)

    def user_scopes(self, user_id: str) -> list[Scope]:
        """Every scope of a user: with a key row, or with documents."""
        self._check_open()
        found = [*self.records.user_scope_keys(user_id), *self.documents.user_scopes(user_id)]
        return sorted(dict.fromkeys(found), key=lambda s: s.agent_id or "")

    def list_messages(
        self, scope: Scope, *, session_key: str | None, limit: int | None, offset: int
    ) -> list[MessageRecord]:
        """L0 messages of the scope (optionally one session), in the order they were stored."""
        scope_id = self._known(scope)
        if scope_id is None:
            return []
        return self.records.list_messages(
            scope_id, scope, session_key=session_key, limit=limit, offset=offset
        )

    def delete_messages(
        self,
        scope: Scope,
        *,
        ids: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> int:
        """Delete L0 messages of the scope by id or by session; returns how many existed."""
        self._check_writable()
        scope_id = self.records.scope_id(scope, create=False)
        if scope_id is None:
            return 0
        return self.records.delete_messages(scope_id, ids=ids, session_key=session_key)
