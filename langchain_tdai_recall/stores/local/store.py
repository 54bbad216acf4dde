"""The memory store: durable records, documents and derived indexes behind one object.

`MemoryStore` is the local backend of `stores.base.BaseMemoryStore`: scoped calls that take a
`Scope` and never expose SQL (L1 and L0 writes and reads, search support, persona and scene
documents, counts, and the upkeep of vectors), backed by SQLite, Markdown files and in-memory
indexes. `path=None` keeps everything in one process's memory. The scope-level calls are
`stores._scoped.ScopedStore`'s, over `SqliteRecords`; this module adds opening, the directory
checks and the local wording of its errors.

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
from pathlib import Path

from langchain_tdai_recall.errors import (
    ConfigError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.stores._index.cache import DEFAULT_INDEX_CACHE_MIB, budget_bytes
from langchain_tdai_recall.stores._index.snapshot import SnapshotCache, index_cache_dir
from langchain_tdai_recall.stores._scoped import ScopedStore, check_store_arguments
from langchain_tdai_recall.stores.base import LAYERS, Ref
from langchain_tdai_recall.stores.documents import DocumentStore, InMemoryDocuments
from langchain_tdai_recall.stores.local._documents import FileDocuments
from langchain_tdai_recall.stores.local._formation import LocalFormationState
from langchain_tdai_recall.stores.local._records import PendingVector, SqliteRecords
from langchain_tdai_recall.text.tokenize import Tokenizer
from langchain_tdai_recall.types import Scope

__all__ = ["INDEX_CACHE_DIRNAME", "LAYERS", "MemoryStore", "PendingVector", "Ref", "Scope"]

logger = logging.getLogger(__name__)

INDEX_CACHE_DIRNAME = "index-cache"
"""Subdirectory of a store directory that holds its index snapshots (`index_cache="auto"`)."""


def _check_arguments(
    path: object, tokenizer: object, embedder_id: object, synchronous: object, read_only: object
) -> None:
    """Refuse a wrongly typed constructor argument, naming it (before any file is touched)."""
    problem = None
    if path is not None and not isinstance(path, str | os.PathLike):
        problem = f"path must be a directory (str or Path) or None, got {type(path).__name__}"
    elif synchronous not in ("normal", "full"):
        problem = f"synchronous must be 'normal' or 'full', got {synchronous!r:.40}"
    if problem is not None:
        msg = f"LocalMemoryStore: {problem}"
        raise ConfigError(msg)
    check_store_arguments(
        "LocalMemoryStore", tokenizer=tokenizer, embedder_id=embedder_id, read_only=read_only
    )


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


class MemoryStore(ScopedStore):
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
        index_cache_mib: Budget in MiB of this process's in-memory search indexes (default
            512; `None`: unbounded). Past it the least recently used scopes' indexes are
            released and rebuilt from the rows on their next search (`store.index_cache_mib`).
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
        index_cache_mib: float | None = DEFAULT_INDEX_CACHE_MIB,
    ) -> None:
        _check_arguments(path, tokenizer, embedder_id, synchronous, read_only)
        budget_bytes(index_cache_mib)  # a bad budget fails before anything is opened
        if path is None and read_only:
            msg = "read_only=True needs a store directory; an in-memory store starts empty"
            raise StoreError(msg)
        if path is not None:
            path = _prepare_directory(Path(path), read_only=read_only)
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
        cache_dir = index_cache_dir(
            index_cache, path / INDEX_CACHE_DIRNAME if path is not None else None
        )
        super().__init__(
            self._db,
            snapshots=(
                SnapshotCache(cache_dir, "local", writable=not read_only)
                if cache_dir is not None
                else None
            ),
            tokenizer=tokenizer,
            embedder_id=embedder_id,
            read_only=read_only,
            index_cache_mib=index_cache_mib,
        )
        self.formation = LocalFormationState(self._db)
        """Memory formation's cursors, leases, scene queue and atomic commits (its scope ids
        are those of this store)."""

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

    def _release(self) -> None:
        self._db.close()

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
