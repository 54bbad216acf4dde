"""The memory store: durable records, documents and derived indexes behind one object.

`MemoryStore` is the local backend of `stores.base.BaseMemoryStore`: scoped calls that take a
`Scope` and never expose SQL (L1 and L0 writes and reads, search support, persona and scene
documents, counts, and the upkeep of vectors), backed by SQLite, Markdown files and in-memory
indexes. `path=None` keeps everything in one process's memory.

Opening checks the directory up front and raises the package's errors with the path and the fix:
`StoreReadOnlyError` for a directory or file that cannot be written (use `read_only=True` to
search it), `StoreCorruptedError` for an empty, damaged or foreign database file, `StoreError`
for anything else. A read-only store serves every read and refuses every write.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import (
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.stores._index.layer import LayerIndex
from langchain_tdai_recall.stores._index.snapshot import SnapshotCache, index_cache_dir
from langchain_tdai_recall.stores.base import (
    LAYERS,
    BaseMemoryStore,
    DerivedIndexes,
    Ref,
    StoredEmbedder,
    merge_embedders,
)
from langchain_tdai_recall.stores.documents import DocumentStore, InMemoryDocuments
from langchain_tdai_recall.stores.local import _transfer
from langchain_tdai_recall.stores.local._documents import FileDocuments
from langchain_tdai_recall.stores.local._sqlite import (
    Layer,
    MemoryRow,
    MessageRow,
    PendingVector,
    SqliteRecords,
)
from langchain_tdai_recall.text.tokenize import Tokenizer
from langchain_tdai_recall.types import (
    MemoryRecord,
    MemoryType,
    MemoryVersion,
    MessageRecord,
    Scope,
    ScopeStats,
)

__all__ = ["INDEX_CACHE_DIRNAME", "LAYERS", "MemoryStore", "PendingVector", "Ref", "Scope"]

logger = logging.getLogger(__name__)

INDEX_CACHE_DIRNAME = "index-cache"
"""Subdirectory of a store directory that holds its index snapshots (`index_cache="auto"`)."""


def _prepare_directory(path: Path, *, read_only: bool) -> Path:
    """Check (and, for writing, create) the store directory."""
    try:
        exists = path.exists()
    except OSError as exc:  # a name too long, a symlink loop, ...
        msg = f"cannot use {path} as a memory store directory: {exc.strerror or exc}"
        raise StoreError(msg) from exc
    if exists and not path.is_dir():
        msg = f"{path} is a file, not a memory store directory; pass the store's directory"
        raise StoreError(msg)
    if read_only:
        if not path.is_dir():
            msg = (
                f"there is no memory store at {path}; a read-only open needs an existing store "
                "(open it without read_only=True to create one)"
            )
            raise StoreError(msg)
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            msg = (
                f"the memory store directory {path} cannot be written ({exc.strerror}); open it "
                "with TdaiMemory.open(path, read_only=True) to search it, or fix its permissions"
            )
            raise StoreReadOnlyError(msg) from exc
        if exc.errno == errno.ENOSPC:
            msg = f"no space left on the device to create the memory store {path}; free space"
            raise StoreWriteError(msg) from exc
        msg = f"cannot create the memory store directory {path}: {exc.strerror or exc}"
        raise StoreError(msg) from exc
    return path


class MemoryStore(BaseMemoryStore):
    """SQLite records + Markdown documents + per-scope keyword/vector indexes.

    `path=None` keeps everything in memory (SQLite `:memory:` and dictionaries) through the very
    same code, so tests of the in-memory store exercise the durable one. Thread-safe.

    Args:
        path: The store directory, or `None` for an in-memory store.
        tokenizer: The keyword tokeniser.
        embedder_id: Identity of the embedder whose vectors count (`None`: keyword only).
        synchronous: SQLite durability, `"normal"` or `"full"`.
        read_only: Serve reads only; writes raise `StoreReadOnlyError`.
        index_cache: Directory of the persisted index snapshots: `"auto"` (the store's
            `index-cache` subdirectory; none for an in-memory store), a path, or `None` (off).
    """

    def __init__(
        self,
        path: Path | None,
        *,
        tokenizer: Tokenizer | None = None,
        embedder_id: str | None = None,
        synchronous: str = "normal",
        read_only: bool = False,
        index_cache: Path | str | None = "auto",
    ) -> None:
        if path is None and read_only:
            msg = "read_only=True needs a store directory; an in-memory store starts empty"
            raise StoreError(msg)
        if path is not None:
            path = _prepare_directory(path, read_only=read_only)
        super().__init__(tokenizer=tokenizer, embedder_id=embedder_id, read_only=read_only)
        self.path = path
        self._db = SqliteRecords(path, synchronous=synchronous, read_only=read_only)
        try:
            self.documents: DocumentStore = (
                FileDocuments(path, read_only=read_only)
                if path is not None
                else InMemoryDocuments()
            )
        except BaseException:
            self._db.close()
            raise
        self.formation = _transfer.LocalFormationState(self._db)
        """Memory formation's cursors, leases, scene queue and atomic commits (its scope ids
        are those of this store)."""
        cache_dir = index_cache_dir(
            index_cache, path / INDEX_CACHE_DIRNAME if path is not None else None
        )
        self._indexes = DerivedIndexes(
            SnapshotCache(cache_dir, "local", writable=not read_only)
            if cache_dir is not None
            else None
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The store directory, or `:memory:`."""
        return str(self.path) if self.path is not None else ":memory:"

    @property
    def durable(self) -> bool:
        """A directory store is durable and shared; an in-memory one is neither."""
        return self.path is not None

    def schema_version(self) -> int:
        """Number of SQLite schema migrations applied."""
        self._check_open()
        return self._db._schema

    def close(self) -> None:
        """Save the large indexes' snapshots, release the database, drop the indexes."""
        if not self._closed:
            self._closed = True
            self._indexes.clear(save=True)
        self._db.close()

    def save_index_snapshots(self) -> int:
        """Write the snapshots of the large indexes that changed since theirs (also on close)."""
        self._check_open()
        return self._indexes.save_snapshots()

    def _check_open(self) -> None:
        if self._closed:
            msg = "the memory store is closed; open a new one with TdaiMemory.open(path)"
            raise StoreClosedError(msg)

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            msg = (
                f"the memory store {self.path} was opened read-only "
                "(TdaiMemory.open(path, read_only=True)); open it without read_only=True to write"
            )
            raise StoreReadOnlyError(msg)

    def _scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        return self._db.scope_id(scope, create=create)

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """The scope's key in this store (created when `create`)."""
        if create:
            self._check_writable()
        else:
            self._check_open()
        return self._db.scope_id(scope, create=create)

    # -- scopes and counts --------------------------------------------------------------------

    def scopes(self) -> list[Scope]:
        """Every scope that has ever held a memory or a message."""
        self._check_open()
        return [scope for _, scope in self._db.scopes()]

    def scope_stats(self, scope: Scope) -> ScopeStats:
        """Counts of one scope."""
        self._check_open()
        scope_id = self._scope_id(scope)
        return ScopeStats(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            memories=0 if scope_id is None else self._db.count("l1", scope_id),
            messages=0 if scope_id is None else self._db.count("l0", scope_id),
            scenes=self.documents.count_scenes(scope),
            has_persona=self.documents.get_persona(scope) is not None,
        )

    def vector_dimension(self, scope: Scope | None = None) -> int | None:
        """Dimension of the stored vectors of the current embedder (in `scope`, or anywhere)."""
        self._check_open()
        if self.embedder_id is None:
            return None
        if scope is None:
            return self._db.stored_dimension(self.embedder_id)
        scope_id = self._scope_id(scope)
        return None if scope_id is None else self._db.stored_dimension(self.embedder_id, scope_id)

    def pending_vector_count(self, scope: Scope | None = None) -> int:
        """Rows of both layers (in `scope`, or anywhere) still waiting for a current vector."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        scope_id = None if scope is None else self._scope_id(scope)
        if scope is not None and scope_id is None:
            return 0
        return sum(
            self._db.count_pending_vectors(layer, self.embedder_id, scope_id=scope_id)
            for layer in LAYERS
        )

    def loaded_indexes(self) -> int:
        """Number of scope indexes built in this process."""
        return self._indexes.scopes()

    # -- L1 memories --------------------------------------------------------------------------

    def put_memories(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        *,
        dedupe: Sequence[bool] | None = None,
    ) -> list[MemoryRecord]:
        """Insert or update validated memories (by id within the scope) in one transaction.

        Rows are written without vectors (an unchanged text keeps its vector) and are
        keyword-searchable as soon as this returns. A replaced version is kept in the
        history. With `dedupe[i]`, a record whose text exactly duplicates a memory of the scope
        (`text.fingerprint`) is not written and that memory is returned instead. Returns the
        records as stored.
        """
        self._check_writable()
        if not records:
            return []
        scope_id = self._scope_id(scope, create=True)
        assert scope_id is not None
        return self._db.upsert_memories(scope_id, records, dedupe=dedupe)

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord | None:
        """One memory of the scope by id, or `None`."""
        self._check_open()
        scope_id = self._scope_id(scope)
        return None if scope_id is None else self._db.get_memory(scope_id, memory_id, scope)

    def delete_memories(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete memories of the scope by id; returns how many existed."""
        self._check_writable()
        scope_id = self._scope_id(scope)
        return 0 if scope_id is None else self._db.delete_memories(scope_id, memory_ids)

    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryVersion]:
        """Every version of a memory of the scope, oldest first (the current one last)."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None:
            return []
        return self.formation.history(scope_id, memory_id, scope)

    def list_memories(
        self, scope: Scope, *, type: MemoryType | None, limit: int | None, offset: int
    ) -> list[MemoryRecord]:
        """Memories of the scope, oldest first (creation time, then id)."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None:
            return []
        return self._db.list_memories(scope_id, scope, type=type, limit=limit, offset=offset)

    def memories_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MemoryRecord]:
        """Memories of the scope for search-hit references; other scopes' rows are never read."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None or not refs:
            return {}
        return self._db.memories_by_rowid(scope_id, refs, scope)

    # -- L0 messages --------------------------------------------------------------------------

    def put_messages(
        self,
        scope: Scope,
        records: Sequence[MessageRecord],
        *,
        busy_timeout_ms: int | None = None,
    ) -> int:
        """Insert validated messages (ids already stored are skipped); returns how many were new.

        `busy_timeout_ms` bounds the wait for another process's write lock (default 10 s);
        past it `StoreWriteError` is raised and nothing is written.
        """
        self._check_writable()
        if not records:
            return 0
        scope_id = self._scope_id(scope, create=True)
        assert scope_id is not None
        return self._db.insert_messages(scope_id, records, busy_timeout_ms=busy_timeout_ms)

    def messages_by_ref(self, scope: Scope, refs: Sequence[Ref]) -> dict[Ref, MessageRecord]:
        """Messages of the scope for search-hit references."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None or not refs:
            return {}
        return self._db.messages_by_rowid(scope_id, refs, scope)

    # -- copying a store ----------------------------------------------------------------------

    def export_rows(
        self, scope: Scope, layer: Layer, *, after: Ref, limit: int
    ) -> list[MemoryRow] | list[MessageRow]:
        """A page of a scope's rows as stored."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None:
            return []
        if layer == "l1":
            return _transfer.export_memories(self._db, scope_id, scope, after=after, limit=limit)
        return _transfer.export_messages(self._db, scope_id, scope, after=after, limit=limit)

    def import_rows(
        self, scope: Scope, layer: Layer, rows: Sequence[MemoryRow] | Sequence[MessageRow]
    ) -> int:
        """Write rows copied from another store as they are."""
        self._check_writable()
        if not rows:
            return 0
        scope_id = self._scope_id(scope, create=True)
        assert scope_id is not None
        if layer == "l1":
            memories = [r for r in rows if isinstance(r, MemoryRow)]
            return _transfer.import_memories(self._db, scope_id, memories)
        messages = [r for r in rows if isinstance(r, MessageRow)]
        return _transfer.import_messages(self._db, scope_id, messages)

    def document_scopes(self) -> list[Scope]:
        """Scopes holding a persona or a scene."""
        self._check_open()
        return self.documents.scopes()

    # -- search support -----------------------------------------------------------------------

    def index(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """The up-to-date index of a scope's layer, or `None` when the scope has no records."""
        self._check_open()
        scope_id = self._scope_id(scope)
        if scope_id is None:
            return None
        return self._indexes.get(
            self._db, scope_id, scope, layer, tokenizer=self.tokenizer, embedder=self.embedder_id
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
        return self._db.pending_vectors(
            layer, self.embedder_id, after=after, limit=limit, stale=stale
        )

    def vector_embedders(self) -> list[StoredEmbedder]:
        """Every embedder whose vectors the store holds, most rows first."""
        self._check_open()
        return merge_embedders([c for layer in LAYERS for c in self._db.vector_embedders(layer)])

    def count_foreign_vectors(self) -> int:
        """Rows whose stored vector another embedder made."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(self._db.count_foreign_vectors(layer, self.embedder_id) for layer in LAYERS)

    def count_missing_vectors(self) -> int:
        """Rows that have no vector at all."""
        self._check_open()
        if self.embedder_id is None:
            return 0
        return sum(
            self._db.count_pending_vectors(layer, self.embedder_id, stale=False) for layer in LAYERS
        )

    def set_vectors(
        self, layer: Layer, items: Sequence[PendingVector], vectors: npt.NDArray[np.float32]
    ) -> int:
        """Store the current embedder's vectors for pending rows still holding the same text."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self._db.set_vectors(layer, items, vectors, self.embedder_id)

    def drop_vectors_of_other_dimension(self, dimension: int) -> int:
        """Reset the current embedder's vectors whose dimension is not `dimension`."""
        self._check_writable()
        if self.embedder_id is None:
            return 0
        return self._db.drop_vectors(self.embedder_id, keep_dimension=dimension)
