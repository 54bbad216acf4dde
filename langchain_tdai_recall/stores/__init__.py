"""Storage backends behind one interface (`BaseMemoryStore`).

- `LocalMemoryStore`: a directory (SQLite + Markdown files) or, with `path=None`, one process's
  memory; the default of `TdaiMemory.open(path)`.
- `PostgresMemoryStore` (extra `postgres`): PostgreSQL + pgvector, shared by many application
  servers; what `TdaiMemory.open("postgresql://...")` opens.

`testing.conformance` is the test suite every backend passes (`stores.conformance` is its old
path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_tdai_recall.stores.base import BaseMemoryStore

if TYPE_CHECKING:
    from langchain_tdai_recall.stores.local.store import MemoryStore as LocalMemoryStore
    from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore

__all__ = ["BaseMemoryStore", "LocalMemoryStore", "PostgresMemoryStore"]


def __getattr__(name: str) -> Any:
    if name == "LocalMemoryStore":
        from langchain_tdai_recall.stores.local.store import MemoryStore  # noqa: PLC0415

        return MemoryStore
    if name == "PostgresMemoryStore":
        from langchain_tdai_recall.stores.postgres.store import (  # noqa: PLC0415
            PostgresMemoryStore,
        )

        return PostgresMemoryStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
