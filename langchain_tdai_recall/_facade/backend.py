"""Which store backend a `path` names: a directory, `None`, a `postgresql://` URL, a store object.

`TdaiMemory.open` and `TdaiMemory.open_store` (and through the latter the command line) choose the
backend here, once: a string that `_exchange.records.check_store_path` kept as a string is a
database URL (PostgreSQL, imported only then, so the extra stays optional); a directory or `None` is
the local backend (imported on the first open, so importing the package does not load either
backend); a store object is checked (open, and read-only when asked) and bound to the tokenizer and
the embedder. It lives beside the facade rather than in `stores/` so that the interface package does
not import its own backends' store classes at module level.
"""

from __future__ import annotations

from pathlib import Path

from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.text.tokenize import get_tokenizer

__all__ = ["open_backend"]


def open_backend(
    where: Path | str | BaseMemoryStore | None,
    cfg: TdaiConfig,
    *,
    embedder_id: str | None,
    read_only: bool,
) -> BaseMemoryStore:
    """The store backend for `TdaiMemory.open`'s `path`: a directory, a URL or a store object."""
    tokenizer = get_tokenizer(cfg.store.tokenizer)
    if isinstance(where, BaseMemoryStore):
        if where.closed:
            msg = f"the store object {where!r} is closed; pass an open one"
            raise ConfigError(msg)
        if read_only and not where.read_only:
            msg = (
                "read_only=True cannot apply to a store object opened for writing; create the "
                "store object with read_only=True instead"
            )
            raise ConfigError(msg)
        where.bind(tokenizer=tokenizer, embedder_id=embedder_id)
        if "index_cache_mib" in cfg.store.model_fields_set:  # else the store's own budget
            where.set_index_cache_budget(cfg.store.index_cache_mib)
        return where
    if isinstance(where, str):
        from langchain_tdai_recall.stores.postgres.store import (  # noqa: PLC0415 - the extra
            PostgresMemoryStore,
        )

        return PostgresMemoryStore(
            where,
            timeout_ms=cfg.store.timeout_ms,
            pool_size=cfg.store.pool_size,
            read_only=read_only,
            tokenizer=tokenizer,
            embedder_id=embedder_id,
            index_cache=cfg.store.index_cache,
            index_cache_mib=cfg.store.index_cache_mib,
        )
    if read_only and where is None:
        msg = "read_only=True needs a store directory; an in-memory store starts empty"
        raise ConfigError(msg)
    from langchain_tdai_recall.stores.local.store import MemoryStore  # noqa: PLC0415 - on first open

    return MemoryStore(
        where,
        tokenizer=tokenizer,
        embedder_id=embedder_id,
        synchronous=cfg.store.synchronous,
        read_only=read_only,
        index_cache=cfg.store.index_cache,
        index_cache_mib=cfg.store.index_cache_mib,
    )
