"""How a LangGraph store item is kept in a memory, and read back.

An item is one memory of its scope. What the store needs besides the memory's own fields is
kept in the memory's metadata under `"tdai_store"` (`HIDDEN_KEY`):

- `value`: the item's value, whole;
- `ns` and `key`: the item's namespace and key (its identity);
- `index: false` when no query may find it (`put(..., index=False)`, or no indexed text);
- `ttl`: its time-to-live in minutes, renewed on read;
- `vectors`: when several texts of the value are indexed (`index=["title", "body"]`), one
  vector per text, made by the store's embedder when the item was written (`FieldVectors`),
  so that a query scores the item by its best text, as LangGraph's stores do.

The memory id is the key, unless the scope already holds another item (or memory) with that id;
the item then lives at `derived_id(namespace, key)`. Either way `get`, `put` and `delete` find
it by both, and check the namespace and key it keeps.

Memories written otherwise (`add_memory`, memory formation, an import) keep no namespace: each
is an item of the template's own namespace for its scope (`NamespaceTemplate.base`), keyed by
its id and valued `{"content": ..., "type": ...}` plus its metadata. So are the items written
before items kept their namespace (no migration is needed: a later put records it).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall._exchange.records import MAX_ID_CHARS
from langchain_tdai_recall._graph.namespaces import NamespaceTemplate
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY
from langchain_tdai_recall.types import MemoryRecord, Scope

__all__ = [
    "FieldVectors",
    "derived_id",
    "filter_view",
    "item_key",
    "item_namespace",
    "item_part",
    "item_value",
]

_DIGEST_BYTES: Final = 8


def item_part(metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The store's part of a memory's metadata, or `None` when it has none."""
    part = metadata.get(HIDDEN_KEY) if metadata is not None else None
    return part if isinstance(part, Mapping) else None


def _stored_namespace(part: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    names = part.get("ns") if part is not None else None
    if isinstance(names, list) and names and all(isinstance(n, str) and n for n in names):
        return tuple(names)
    return None


def item_namespace(
    metadata: Mapping[str, Any] | None, template: NamespaceTemplate, scope: Scope
) -> tuple[str, ...] | None:
    """The namespace of a memory as an item of a store with `template`, or `None` if not one.

    A memory that keeps its namespace is an item of it when the template owns it (it fits and
    names the memory's scope); one that keeps none is an item of the template's own namespace.
    """
    stored = _stored_namespace(item_part(metadata))
    if stored is None:
        return template.base(scope)
    return stored if template.owns(stored, scope) else None


def item_key(record: MemoryRecord) -> str:
    """The item key of a memory: the key it keeps, else its id."""
    part = item_part(record.metadata)
    key = part.get("key") if part is not None else None
    return key if isinstance(key, str) and key else record.id


def item_value(record: MemoryRecord) -> dict[str, Any]:
    """The store value of a memory: what a put stored, else its content, type and metadata."""
    part = item_part(record.metadata)
    if part is not None and isinstance(part.get("value"), Mapping):
        return dict(part["value"])
    extra = {k: v for k, v in record.metadata.items() if k != HIDDEN_KEY}
    return {**extra, "content": record.content, "type": record.type}


def filter_view(metadata: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """What a filter sees of a row without reading it: the stored value, else type + metadata."""
    part = item_part(metadata)
    if part is not None and isinstance(part.get("value"), Mapping):
        value: Mapping[str, Any] = part["value"]
        return value
    extra = {k: v for k, v in (metadata or {}).items() if k != HIDDEN_KEY}
    return {**extra, "type": kind}


def derived_id(namespace: tuple[str, ...], key: str) -> str:
    """The memory id of an item whose key is taken in its scope by another item or memory.

    The key with a digest of the namespace and key (`key~0123456789abcdef`); a key too long
    for that is replaced by a longer digest.
    """
    raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.blake2b(raw.encode("utf-8"), digest_size=_DIGEST_BYTES).hexdigest()
    short = f"{key}~{digest}"
    if len(short) <= MAX_ID_CHARS:
        return short
    return "~" + hashlib.blake2b(raw.encode("utf-8"), digest_size=32).hexdigest()


@dataclass(frozen=True, slots=True)
class FieldVectors:
    """The vectors of an item's indexed texts, as kept in its metadata.

    float16 rows, base64 encoded, with the identity of the embedder that made them: a store
    opened with another embedder ignores them (the item is then scored by its memory's own
    vector, made from its texts joined).
    """

    embedder: str
    matrix: npt.NDArray[np.float32]
    """One L2-normalised row per indexed text."""

    def to_json(self) -> dict[str, Any]:
        """The form kept in the metadata."""
        rows = np.ascontiguousarray(self.matrix, dtype="<f2")
        return {
            "embedder": self.embedder,
            "dims": int(self.matrix.shape[1]),
            "f16": base64.b64encode(rows.tobytes()).decode("ascii"),
        }

    @classmethod
    def read(cls, metadata: Mapping[str, Any] | None, embedder: str | None) -> FieldVectors | None:
        """The field vectors a memory keeps, when `embedder` made them; else `None`."""
        part = item_part(metadata)
        data = part.get("vectors") if part is not None else None
        if embedder is None or not isinstance(data, Mapping) or data.get("embedder") != embedder:
            return None
        dims, encoded = data.get("dims"), data.get("f16")
        if not isinstance(dims, int) or dims < 1 or not isinstance(encoded, str):
            return None
        try:
            raw = base64.b64decode(encoded, validate=True)
        except ValueError:
            return None
        if not raw or len(raw) % (2 * dims):
            return None
        matrix = np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(-1, dims)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.isfinite(matrix).all() or not norms.all():
            return None
        return cls(embedder, matrix / norms)
