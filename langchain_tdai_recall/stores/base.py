"""The storage backend interface: what `TdaiMemory` needs from a store, and nothing more.

`BaseMemoryStore` is an ABC in the manner of LangGraph's `BaseStore`: scoped, synchronous
primitives that a backend implements, a few concrete helpers built on them, and `a*` async twins
that run the synchronous method on a worker thread unless a backend overrides them. Nothing above
this interface knows which database it talks to; `testing.conformance` is the whole contract.

The interface, by part:

- **Lifecycle**: `bind()` (the tokenizer and embedder the store serves; `TdaiMemory.open` calls
  it), `close()`, `closed`, `read_only`, `location` (printable, credentials removed),
  `schema_version()`.
- **Scopes and generations**: every write bumps its scope's *generation* and stamps the rows it
  touched; a deletion leaves a tombstone. `scope_id()` is a backend-local integer key of a scope
  (stable for the life of the store); `scopes()`, `scope_stats()`.
- **Writes and scoped reads**: L1 `put_memories`, `get_memory`, `delete_memories`,
  `list_memories`; L0 `put_messages`. Search hits carry an opaque row reference (`Ref`), and
  `memories_by_ref` / `messages_by_ref` read the records of a scope for them: another scope's
  rows are never returned.
- **Search legs**: `index(scope, layer)` returns the scope's up-to-date `LayerIndex`, the keyword
  postings and vectors the ranking in `recall.search` reads. The index is derived, per process,
  from the backend's *row source* (`generation`, `memory_rows_since`, `message_rows_since`,
  `tombstones_since`; see `RowSource`), and catches up by generation before every search, so a
  write made through another process (or another application server) is seen at the next call.
- **Vector upkeep**: rows are written without a vector; `pending_vectors` / `set_vectors` are the
  to-do list and the result of the background embedder, plus the counts and the dimension reset
  it needs.
- **Documents**: the L3 persona and the L2 scenes (`documents`, a `DocumentStore`, and the scoped
  convenience methods over it, including memory formation's all-or-nothing scene edits).
- **Formation state**: `formation`, a `stores.formation.BaseFormationState` (session cursors,
  per-scope leases, the scene queue, version history and the atomic commit of memory formation),
  plus `memory_history` and the exact-duplicate check of `put_memories(dedupe=...)`.
- **Copying**: `export_rows`, `import_rows`, `document_scopes` (and the formation state's
  `export_scope` / `import_scope`), used by `stores.migrate.copy_store`.
- **Stats**: `scope_stats`, `loaded_indexes`, `pending_vector_count`, `vector_dimension`.
- **Erasure** (issue 16): `delete_scope` (everything of one scope, for `TdaiMemory.forget`),
  `user_scopes`, and L0 `list_messages` / `delete_messages`.
- **Index snapshots**: `save_index_snapshots()` (and `close()`) persist large derived indexes
  when the backend has an index cache, so the next process restores them instead of
  rebuilding them from the rows (`stores._index.snapshot`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import ConfigError, StoreClosedError, StoreReadOnlyError
from langchain_tdai_recall.stores._index.cache import ScopeCache
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY
from langchain_tdai_recall.stores._index.layer import LayerIndex, RowSource
from langchain_tdai_recall.stores._index.trim import release_freed_memory
from langchain_tdai_recall.stores.records import Layer, MemoryRow, MessageRow, PendingVector
from langchain_tdai_recall.text.tokenize import Tokenizer, get_tokenizer
from langchain_tdai_recall.types import (
    ErasedScope,
    IndexCacheStats,
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Reclaim,
    SceneBlock,
    SceneInfo,
    Scope,
    ScopeStats,
)

if TYPE_CHECKING:
    from langchain_tdai_recall.stores._index.snapshot import SnapshotCache
    from langchain_tdai_recall.stores.documents import DocumentStore
    from langchain_tdai_recall.stores.formation import BaseFormationState

__all__ = [
    "LAYERS",
    "BaseMemoryStore",
    "DerivedIndexes",
    "Layer",
    "MemoryRow",
    "MessageRow",
    "PendingVector",
    "Ref",
    "RowSource",
    "Scope",
    "StoredEmbedder",
]

logger = logging.getLogger(__name__)

Ref = int
"""Opaque reference of a stored row within its layer, as search hits carry it."""

LAYERS: tuple[Layer, ...] = ("l1", "l0")
"""The record layers: L1 memories and L0 messages."""


@dataclass(frozen=True, slots=True)
class StoredEmbedder:
    """An embedder whose vectors a store holds, as the rows record it."""

    identity: str
    """The embedder's identity (`embeddings.embedder_identity`)."""
    dimension: int
    """Length of its stored vectors."""
    vectors: int
    """Rows (memories and messages) holding one of its vectors."""


def merge_embedders(counts: Sequence[tuple[str, int, int]]) -> list[StoredEmbedder]:
    """`StoredEmbedder`s from (identity, dimension, rows) tuples, most rows first."""
    total: dict[tuple[str, int], int] = {}
    for identity, dimension, rows in counts:
        total[identity, dimension] = total.get((identity, dimension), 0) + rows
    merged = [StoredEmbedder(i, d, n) for (i, d), n in total.items()]
    return sorted(merged, key=lambda e: (-e.vectors, e.identity, e.dimension))


TRIM_AFTER_ROWS = 10_000
"""A new index of at least this many rows hands the memory its build freed back to the OS."""


class DerivedIndexes:
    """The per-process `LayerIndex` of each (scope, layer), built on first use. Thread-safe.

    Shared by the backends, whose search legs run on derived in-process indexes fed from their
    row source. The indexes live in a `ScopeCache` bounded by `budget` bytes (issue 23): past it
    the least recently used are released and rebuilt from the rows on their next use; an index
    is pinned while it is built or caught up, and one a search still holds is taken back rather
    than built twice (`stores._index.cache`). With a `SnapshotCache`, an index starts from its
    persisted snapshot when one passes every check (and is caught up from there), and `close()`
    saves the large indexes whose snapshot is missing or older.

    Args:
        cache: Where large indexes persist their snapshots, or `None`.
        budget: Bytes the indexes may take together, or `None` for no bound.
    """

    def __init__(self, cache: SnapshotCache | None = None, *, budget: int | None = None) -> None:
        self._indexes: ScopeCache[tuple[int, Layer], LayerIndex] = ScopeCache(budget)
        self._starting: dict[tuple[int, Layer], threading.Lock] = {}
        """Per key being created: a lock that the threads asking for it wait on."""
        self._lock = threading.Lock()
        self.cache = cache

    @property
    def budget(self) -> int | None:
        """Bytes the indexes may take together (`None`: no bound)."""
        return self._indexes.budget

    @budget.setter
    def budget(self, value: int | None) -> None:
        with self._lock:
            self._indexes.resize(value)

    def stats(self) -> IndexCacheStats:
        """The index cache's entries, bytes, budget, hits, misses and evictions."""
        with self._lock:
            return self._indexes.stats()

    def get(
        self,
        source: RowSource,
        scope_id: int,
        scope: Scope,
        layer: Layer,
        *,
        tokenizer: Tokenizer,
        embedder: str | None,
    ) -> LayerIndex:
        """The index of a scope's layer, caught up with every write so far.

        A new index is restored from its snapshot (if the cache has a valid one) under a lock of
        its own key, so other scopes' searches never wait for it. The entry is pinned until it
        has caught up, so the cache never releases it half-built.
        """
        key = (scope_id, layer)
        with self._lock:
            index = self._indexes.lookup(key, pin=True)
            starting = self._starting.setdefault(key, threading.Lock()) if index is None else None
        new = False
        if starting is not None:
            with starting:
                with self._lock:
                    index = self._indexes.lookup(key, pin=True)
                if index is None:
                    new = True
                    index = self._start(
                        source, scope_id, scope, layer, tokenizer=tokenizer, embedder=embedder
                    )
                    with self._lock:
                        self._indexes.add(key, index, 0, pin=True)
                        self._starting.pop(key, None)
        assert index is not None
        seen = index.generation
        nbytes: int | None = None
        try:
            index.refresh()
            if new or index.generation != seen or not self._indexes.sized(key):
                nbytes = index.nbytes()
        finally:
            with self._lock:
                self._indexes.release(key, nbytes)
        if new and len(index.meta) >= TRIM_AFTER_ROWS:
            release_freed_memory()  # the build's garbage: about half of the RSS it added
        return index

    def _start(
        self,
        source: RowSource,
        scope_id: int,
        scope: Scope,
        layer: Layer,
        *,
        tokenizer: Tokenizer,
        embedder: str | None,
    ) -> LayerIndex:
        """A new index: restored from a valid snapshot, else empty (the first refresh fills it)."""

        def empty() -> LayerIndex:
            return LayerIndex(
                source, scope_id, scope, layer, tokenizer=tokenizer, embedder=embedder
            )

        index = empty()
        cache = self.cache
        if cache is not None and cache.restore(index, source) and not cache.verify(index, source):
            index = empty()
        return index

    def scopes(self) -> int:
        """Number of scopes with an index in this process's cache."""
        with self._lock:
            return self._indexes.scopes()

    def save_snapshots(self) -> int:
        """Save the snapshots of the large indexes that changed since theirs; returns how many."""
        if self.cache is None:
            return 0
        with self._lock:
            indexes = self._indexes.values()
        return sum(self.cache.save(index) for index in indexes)

    def clear(self, *, save: bool = False) -> None:
        """Drop every index (they are rebuilt on next use), saving snapshots first if asked."""
        if save:
            try:
                self.save_snapshots()
            except Exception:  # a cache must never make closing a store fail
                logger.warning("cannot save the index snapshots", exc_info=True)
        with self._lock:
            self._indexes.clear()

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def drop_scope(self, scope_id: int) -> int:
        """Forget a scope's indexes and delete their snapshot files; returns the files deleted.

        The indexes are rebuilt from the rows on the scope's next search.
        """
        with self._lock:
            for layer in LAYERS:
                self._indexes.discard((scope_id, layer))
        return self.cache.forget(scope_id) if self.cache is not None else 0


class BaseMemoryStore(ABC):
    """A memory store backend: scoped records, documents, derived search indexes.

    Subclasses implement the abstract primitives; every method is thread-safe. Writes raise
    `StoreReadOnlyError` on a read-only store and every call raises `StoreClosedError` after
    `close()`; storage failures raise `StoreError` (or a subclass) naming where and what to do.

    Args:
        tokenizer: The keyword tokenizer (default: `bigram`); `bind()` may replace it.
        embedder_id: Identity of the embedder whose vectors count (`None`: keyword only).
        read_only: Serve reads only.
    """

    path: Path | None = None
    """The store directory of a local store; `None` for other backends."""

    def __init__(
        self,
        *,
        tokenizer: Tokenizer | None = None,
        embedder_id: str | None = None,
        read_only: bool = False,
    ) -> None:
        self.tokenizer: Tokenizer = tokenizer or get_tokenizer("bigram")
        self.embedder_id: str | None = embedder_id
        self.read_only: bool = read_only
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    def bind(self, *, tokenizer: Tokenizer, embedder_id: str | None) -> None:
        """Set the tokenizer and embedder this store serves (before any search).

        Raises:
            ConfigError: If indexes were already built with other settings.
        """
        same = tokenizer.identity == self.tokenizer.identity and embedder_id == self.embedder_id
        if not same and self.loaded_indexes():
            msg = (
                "this store already built indexes for another tokenizer or embedder; pass a "
                "fresh store object to TdaiMemory.open"
            )
            raise ConfigError(msg)
        self.tokenizer = tokenizer
        self.embedder_id = embedder_id

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    @abstractmethod
    def close(self) -> None:
        """Release connections, files and indexes (idempotent); later calls raise."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store lives, printable: a directory, `:memory:`, or a URL without secrets."""

    @property
    def durable(self) -> bool:
        """Whether the data outlives this process and is shared by every handle on `location`.

        Another handle, in this or another process, sees this one's writes. False only for a
        store that lives in one process's memory.
        """
        return True

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version of the stored data (the number of migrations applied)."""

    def _check_open(self) -> None:
        if self._closed:
            msg = "the memory store is closed; open a new one with TdaiMemory.open(...)"
            raise StoreClosedError(msg)

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            msg = (
                f"the memory store {self.location} was opened read-only "
                "(read_only=True); open it without read_only=True to write"
            )
            raise StoreReadOnlyError(msg)

    # -- scopes and counts --------------------------------------------------------------------

    @abstractmethod
    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The backend's integer key of a scope; created when `create`, else `None` if unknown."""

    @abstractmethod
    def scopes(self) -> list[Scope]:
        """Every scope that has ever held a memory or a message (an administrative call).

        A scope erased by `delete_scope` is left out until it holds a record again.
        """

    @abstractmethod
    def scope_stats(self, scope: Scope) -> ScopeStats:
        """Counts of one scope."""

    @abstractmethod
    def loaded_indexes(self) -> int:
        """Number of scopes with derived indexes loaded in this process."""

    def index_cache_stats(self) -> IndexCacheStats | None:
        """This process's bounded index cache (`store.index_cache_mib`); `None` without one."""
        return None

    def set_index_cache_budget(self, mib: float | None) -> None:
        """Bound this process's derived indexes to `mib` MiB (`None`: unbounded).

        The default is a backend without an index cache, which has nothing to bound.
        """
        self._check_open()

    def save_index_snapshots(self) -> int:
        """Persist the large derived indexes that changed since their snapshot; returns how many.

        Backends with an index cache (`stores._index.snapshot`) also do it in `close()`; the
        default is a backend without one.
        """
        self._check_open()
        return 0

    # -- L1 memories --------------------------------------------------------------------------

    @abstractmethod
    def put_memories(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
    ) -> list[MemoryRecord]:
        """Insert or update validated memories (by id within the scope) in one transaction.

        Rows are written without vectors (an unchanged text keeps its vector) and are
        keyword-searchable as soon as this returns; an update keeps `created_at` and keeps the
        replaced version in the history. With `dedupe[i]`, a record whose text exactly
        duplicates a memory of the scope (`text.fingerprint`), or an earlier record of the call,
        is not written and that memory is returned in its place. Returns the records as stored.
        """

    @abstractmethod
    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord | None:
        """One memory of the scope by id, or `None`."""

    @abstractmethod
    def delete_memories(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete memories of the scope by id (kept in the history); returns how many existed."""

    @abstractmethod
    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryVersion]:
        """Every version of a memory of the scope, oldest first (the current one last)."""

    @abstractmethod
    def list_memories(
        self, scope: Scope, *, type: MemoryType | None, limit: int | None, offset: int
    ) -> list[MemoryRecord]:
        """Unexpired memories of the scope, oldest first (creation time, then id).

        Expired ones are left out before `limit`/`offset` apply, so pages are exact.
        """

    @abstractmethod
    def memories_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MemoryRecord]:
        """Memories of the scope for search-hit references; other scopes' rows are never read."""

    def item_namespaces(self, scope: Scope) -> list[str | None]:
        """The distinct namespaces of the scope's unexpired LangGraph store items.

        Each is the JSON text of the list an item keeps in its metadata
        (`metadata["tdai_store"]["ns"]`, written by `graph_store.TdaiStore`); `None` stands for
        the memories that keep none. `TdaiStore.list_namespaces` reads it for every scope.
        This default reads the scope's index; the SQL backends ask the database instead.
        """
        index = self.index(scope, "l1")
        if index is None:
            return []
        now = time.time()
        found: set[str | None] = set()
        for rowid in index.meta:
            extras = index.extras.get(rowid)
            if extras is not None and extras.expires is not None and extras.expires <= now:
                continue
            part = extras.metadata.get(HIDDEN_KEY) if extras and extras.metadata else None
            names = part.get("ns") if isinstance(part, Mapping) else None
            found.add(json.dumps(names, ensure_ascii=False) if isinstance(names, list) else None)
        return list(found)

    # -- L0 messages --------------------------------------------------------------------------

    @abstractmethod
    def put_messages(
        self,
        scope: Scope,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert validated messages (ids already stored are skipped); returns how many were new.

        Each new message keeps the end of the message before it in its session as its context
        (searched with it). `busy_timeout_ms` bounds the wait for other writers; past it
        `StoreWriteError` is raised and nothing is written.
        """

    @abstractmethod
    def messages_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MessageRecord]:
        """Messages of the scope for search-hit references."""

    # -- search legs --------------------------------------------------------------------------

    @abstractmethod
    def index(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """The up-to-date index of a scope's layer, or `None` when the scope has no records."""

    # -- vector upkeep ------------------------------------------------------------------------

    @abstractmethod
    def pending_vectors(
        self, layer: Layer, *, after: Ref, limit: int, stale: bool
    ) -> list[PendingVector]:
        """Rows of a layer after `after` (in reference order) that need a current vector.

        Without `stale`, only rows that have no vector; with it, also rows whose vector another
        embedder made.
        """

    @abstractmethod
    def set_vectors(
        self, layer: Layer, items: Sequence[PendingVector], vectors: npt.NDArray[np.float32]
    ) -> int:
        """Store vectors for pending rows still holding the same text; returns rows updated."""

    @abstractmethod
    def pending_vector_count(self, scope: Scope | None = None) -> int:
        """Rows of both layers (in `scope`, or anywhere) still waiting for a current vector."""

    @abstractmethod
    def count_foreign_vectors(self) -> int:
        """Rows whose stored vector another embedder made."""

    @abstractmethod
    def count_missing_vectors(self) -> int:
        """Rows that have no vector at all."""

    @abstractmethod
    def vector_dimension(self, scope: Scope | None = None) -> int | None:
        """Dimension of the current embedder's stored vectors (in `scope`, or anywhere)."""

    @abstractmethod
    def vector_embedders(self) -> list[StoredEmbedder]:
        """Every embedder whose vectors the store holds (in both layers), most rows first.

        Read from the rows' own embedder tags, whatever embedder this handle was opened with.
        """

    def recorded_embedder(self) -> StoredEmbedder | None:
        """The embedder that made most of the stored vectors, or `None` when there are none.

        This is the embedder the store was built with: `tdai-recall` read commands search with
        it when it can be rebuilt offline (`embeddings.embedder_from_identity`).
        """
        embedders = self.vector_embedders()
        return embedders[0] if embedders else None

    @abstractmethod
    def drop_vectors_of_other_dimension(self, dimension: int) -> int:
        """Reset the current embedder's vectors whose dimension is not `dimension`."""

    # -- copying a store (tdai-recall migrate) ------------------------------------------------

    @abstractmethod
    def export_rows(
        self, scope: Scope, layer: Layer, *, after: Ref, limit: int
    ) -> list[MemoryRow] | list[MessageRow]:
        """A page of a scope's rows exactly as stored (times, context, vector and its embedder).

        Rows come in reference order after `after`; an empty page ends the scope.
        """

    @abstractmethod
    def import_rows(
        self, scope: Scope, layer: Layer, rows: Sequence[MemoryRow] | Sequence[MessageRow]
    ) -> int:
        """Write rows exported from another store as they are, in one transaction.

        A memory whose id the scope already holds is replaced, unless it already has the same
        `updated_at` and vector embedder (copied before: a resumed copy skips it); a message
        whose id exists is skipped. References are this store's own. Returns the rows written.
        """

    @abstractmethod
    def document_scopes(self) -> list[Scope]:
        """Every scope holding a persona or a scene (an administrative call)."""

    # -- L2 / L3 documents --------------------------------------------------------------------

    documents: DocumentStore
    """The persona and scene storage of every scope (set by the subclass)."""

    formation: BaseFormationState
    """Memory formation's cursors, leases, scene queue, history and atomic commits (set by the
    subclass; see `stores.formation`)."""

    def get_persona(self, scope: Scope) -> str | None:
        """The scope's persona, or `None`."""
        self._check_open()
        return self.documents.get_persona(scope)

    def set_persona(self, scope: Scope, text: str | None) -> None:
        """Replace the scope's persona; `None` or blank text deletes it."""
        self._check_writable()
        self.documents.set_persona(scope, text)

    def list_scenes(self, scope: Scope) -> list[SceneInfo]:
        """The scope's scenes, highest heat first."""
        self._check_open()
        return self.documents.list_scenes(scope)

    def read_scene(self, scope: Scope, name: str) -> SceneBlock | None:
        """One scene by name, or `None`; raises `ConfigError` for anything but a plain name."""
        self._check_open()
        return self.documents.read_scene(scope, name)

    def upsert_scene(
        self, scope: Scope, title: str, *, summary: str, body: str, heat: int | None
    ) -> SceneInfo:
        """Create or rewrite a scene; returns its metadata."""
        self._check_writable()
        return self.documents.upsert_scene(scope, title, summary=summary, body=body, heat=heat)

    def delete_scene(self, scope: Scope, name: str) -> bool:
        """Delete a scene; returns whether it existed."""
        self._check_writable()
        return self.documents.delete_scene(scope, name)

    def stable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        """The persona and scenes that recall puts in the system prompt."""
        self._check_open()
        return self.documents.stable_context(scope)

    def scenes_with_titles(self, scope: Scope) -> dict[str, tuple[SceneBlock, str]]:
        """Every scene of the scope with its title, by name."""
        self._check_open()
        return self.documents.scenes_with_titles(scope)

    def apply_scene_edits(
        self,
        scope: Scope,
        writes: Sequence[tuple[SceneBlock, str]],
        removes: Sequence[str],
    ) -> None:
        """Write scenes exactly as given and remove others, all or none (memory formation)."""
        self._check_writable()
        self.documents.apply_scene_edits(scope, writes, removes)

    # -- async twins (a worker thread unless a backend overrides them) --------------------------

    async def aput_memories(
        self, scope: Scope, records: Sequence[MemoryRecord]
    ) -> list[MemoryRecord]:
        """Async version of `put_memories`."""
        return await asyncio.to_thread(self.put_memories, scope, records)

    async def aget_memory(self, scope: Scope, memory_id: str) -> MemoryRecord | None:
        """Async version of `get_memory`."""
        return await asyncio.to_thread(self.get_memory, scope, memory_id)

    async def adelete_memories(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Async version of `delete_memories`."""
        return await asyncio.to_thread(self.delete_memories, scope, memory_ids)

    async def alist_memories(
        self, scope: Scope, *, type: MemoryType | None, limit: int | None, offset: int
    ) -> list[MemoryRecord]:
        """Async version of `list_memories`."""
        return await asyncio.to_thread(
            self.list_memories, scope, type=type, limit=limit, offset=offset
        )

    async def amemories_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MemoryRecord]:
        """Async version of `memories_by_ref`."""
        return await asyncio.to_thread(self.memories_by_ref, scope, refs)

    async def aput_messages(
        self,
        scope: Scope,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Async version of `put_messages`."""
        return await asyncio.to_thread(
            self.put_messages, scope, records, busy_timeout_ms=busy_timeout_ms
        )

    async def amessages_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MessageRecord]:
        """Async version of `messages_by_ref`."""
        return await asyncio.to_thread(self.messages_by_ref, scope, refs)

    async def aindex(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """Async version of `index`."""
        return await asyncio.to_thread(self.index, scope, layer)

    async def ascopes(self) -> list[Scope]:
        """Async version of `scopes`."""
        return await asyncio.to_thread(self.scopes)

    async def ascope_stats(self, scope: Scope) -> ScopeStats:
        """Async version of `scope_stats`."""
        return await asyncio.to_thread(self.scope_stats, scope)

    async def aget_persona(self, scope: Scope) -> str | None:
        """Async version of `get_persona`."""
        return await asyncio.to_thread(self.get_persona, scope)

    async def aset_persona(self, scope: Scope, text: str | None) -> None:
        """Async version of `set_persona`."""
        await asyncio.to_thread(self.set_persona, scope, text)

    async def alist_scenes(self, scope: Scope) -> list[SceneInfo]:
        """Async version of `list_scenes`."""
        return await asyncio.to_thread(self.list_scenes, scope)

    async def aread_scene(self, scope: Scope, name: str) -> SceneBlock | None:
        """Async version of `read_scene`."""
        return await asyncio.to_thread(self.read_scene, scope, name)

    async def aupsert_scene(
        self, scope: Scope, title: str, *, summary: str, body: str, heat: int | None
    ) -> SceneInfo:
        """Async version of `upsert_scene`."""
        return await asyncio.to_thread(
            self.upsert_scene, scope, title, summary=summary, body=body, heat=heat
        )

    async def adelete_scene(self, scope: Scope, name: str) -> bool:
        """Async version of `delete_scene`."""
        return await asyncio.to_thread(self.delete_scene, scope, name)

    async def astable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        """Async version of `stable_context`."""
        return await asyncio.to_thread(self.stable_context, scope)

    async def aclose(self) -> None:
        """Async version of `close`."""
        await asyncio.to_thread(self.close)

    # -- expiry (issue 16) --------------------------------------------------------------------

    def expired_memories(self, now: str, *, limit: int) -> list[tuple[Scope, str]]:
        """(scope, id) of up to `limit` memories whose `expires_at` is at or before `now`.

        `now` is UTC ISO-8601 with milliseconds and `Z` (as expiries are stored). The default,
        for a backend without expiry, finds none; searches still never return an expired
        memory (the index leaves them out).
        """
        self._check_open()
        return []

    def sweep_expired(self, now: str, *, limit: int = 500) -> int:
        """Delete up to `limit` memories expired at `now` (index entries go with them).

        Bounded work per call, for the background writer; returns how many were deleted.
        """
        self._check_writable()
        by_scope: dict[Scope, list[str]] = {}
        for scope, memory_id in self.expired_memories(now, limit=limit):
            by_scope.setdefault(scope, []).append(memory_id)
        return sum(self.delete_memories(scope, ids) for scope, ids in by_scope.items())

    def __repr__(self) -> str:
        state = ", closed" if self._closed else (", read-only" if self.read_only else "")
        return f"{type(self).__name__}({self.location}{state})"

    # -- erasure (issue 16) ---------------------------------------------------------------------

    @abstractmethod
    def delete_scope(self, scope: Scope) -> ErasedScope:
        """Erase everything of one scope; returns what was erased.

        L1 memories with their vectors and version history, L0 messages, memory formation's
        state (session cursors, the scope's scene/persona state, queued scene work, the lease),
        the persona and scenes, this process's derived indexes of the scope and their persisted
        snapshots. Rows go in one transaction, with a tombstone each, so every other handle (in
        this or another process) drops them at its next search. The scope's key (its ids and
        generation) stays, so handles that cached it keep working; listings skip a scope that
        holds nothing. Idempotent. Raises `StoreReadOnlyError` on a read-only store.
        """

    def reclaim_erased(self, mode: Reclaim) -> tuple[str, ...]:
        """Make the database drop erased rows from its files, after `delete_scope` committed.

        `TdaiMemory.forget` calls it once after its erasures. Returns the tables reclaimed; a
        backend that overwrites freed space as it deletes (the directory store) has nothing to
        do. Never raises for a refusal of the database (it is logged and left out).
        """
        del mode
        return ()

    def erase_user_leftovers(self, user_id: str) -> int:
        """Erase what is left of a user once each scope of `user_scopes` was erased.

        `TdaiMemory.forget(all_agents=True)` calls it last: a backend that can hold data of a
        user that no scope names (the directory store's folder of a long agent id whose `.id`
        file was lost) erases it here. Returns how many such unnamed scopes were erased; this
        default has none.
        """
        del user_id
        return 0

    @abstractmethod
    def user_scopes(self, user_id: str) -> list[Scope]:
        """Every scope of a user the store knows, the shared one first (an administrative call).

        Scopes with rows, history, formation state or documents, and emptied ones.
        """

    @abstractmethod
    def list_messages(
        self, scope: Scope, *, session_key: str | None, limit: int | None, offset: int
    ) -> list[MessageRecord]:
        """L0 messages of the scope (optionally of one session), in the order they were stored."""

    @abstractmethod
    def delete_messages(
        self,
        scope: Scope,
        *,
        ids: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> int:
        """Delete L0 messages of the scope by id, or a whole session; returns how many existed.

        A message that followed a deleted one in its session gets the end of its new
        predecessor as its context (and a new vector), so no other row keeps deleted text.
        """

    async def adelete_scope(self, scope: Scope) -> ErasedScope:
        """Async version of `delete_scope`."""
        return await asyncio.to_thread(self.delete_scope, scope)

    async def auser_scopes(self, user_id: str) -> list[Scope]:
        """Async version of `user_scopes`."""
        return await asyncio.to_thread(self.user_scopes, user_id)

    async def alist_messages(
        self, scope: Scope, *, session_key: str | None, limit: int | None, offset: int
    ) -> list[MessageRecord]:
        """Async version of `list_messages`."""
        return await asyncio.to_thread(
            self.list_messages, scope, session_key=session_key, limit=limit, offset=offset
        )

    async def adelete_messages(
        self,
        scope: Scope,
        *,
        ids: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> int:
        """Async version of `delete_messages`."""
        return await asyncio.to_thread(
            self.delete_messages, scope, ids=ids, session_key=session_key
        )
