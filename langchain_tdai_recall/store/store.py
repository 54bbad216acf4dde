"""The memory store: durable records, documents and derived indexes behind one object."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from langchain_tdai_recall.store._documents import DocumentStore, FileDocuments, InMemoryDocuments
from langchain_tdai_recall.store._scope import LayerIndex
from langchain_tdai_recall.store._sqlite import Layer, SqliteRecords
from langchain_tdai_recall.text.tokenize import Tokenizer

__all__ = ["MemoryStore", "Scope"]

logger = logging.getLogger(__name__)

Scope = tuple[str, str | None]
"""(user_id, agent_id); `agent_id=None` is the user's shared memory."""


class MemoryStore:
    """SQLite records + Markdown documents + per-scope keyword/vector indexes.

    `path=None` keeps everything in memory (SQLite `:memory:` and dictionaries) through the very
    same code, so tests of the in-memory store exercise the durable one.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        tokenizer: Tokenizer,
        embedder_id: str | None,
        synchronous: str = "normal",
    ) -> None:
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.tokenizer = tokenizer
        self.embedder_id = embedder_id
        self.db = SqliteRecords(path, synchronous=synchronous)
        self.documents: DocumentStore = (
            FileDocuments(path) if path is not None else InMemoryDocuments()
        )
        self._indexes: dict[tuple[int, Layer], LayerIndex] = {}
        self._lock = threading.Lock()

    def scope_id(self, scope: Scope, *, create: bool = False) -> int | None:
        """SQLite id of a scope (created on demand for writes)."""
        return self.db.scope_id(scope[0], scope[1], create=create)

    def index(self, scope: Scope, layer: Layer) -> LayerIndex | None:
        """The up-to-date index of a scope's layer, or `None` when the scope has no records."""
        scope_id = self.scope_id(scope)
        if scope_id is None:
            return None
        key = (scope_id, layer)
        with self._lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = LayerIndex(
                    self.db,
                    scope_id,
                    scope,
                    layer,
                    tokenizer=self.tokenizer,
                    embedder=self.embedder_id,
                )
        index.refresh()
        return index

    def loaded_indexes(self) -> int:
        """Number of scope indexes built in this process."""
        with self._lock:
            return len({scope_id for scope_id, _ in self._indexes})

    def close(self) -> None:
        """Release the database and drop the in-memory indexes."""
        with self._lock:
            self._indexes.clear()
        self.db.close()
