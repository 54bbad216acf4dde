"""The PostgreSQL + pgvector backend: `pip install "langchain-tdai-recall[postgres]"`.

`PostgresMemoryStore` is imported on first use, so that `stores.postgres.testserver` (the old
path of the throw-away server `testing.postgres`, which needs only the `pgserver` wheel) can be
imported without psycopg; without the extra installed, using
`PostgresMemoryStore` raises `MissingDependencyError` with the install command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore

__all__ = ["PostgresMemoryStore"]


def __getattr__(name: str) -> Any:
    if name == "PostgresMemoryStore":
        from langchain_tdai_recall.stores.postgres.store import (  # noqa: PLC0415
            PostgresMemoryStore,
        )

        return PostgresMemoryStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
