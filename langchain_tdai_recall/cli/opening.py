"""How a command opens its store, through `TdaiMemory`.

Which store `--store` names, whether one exists there, and which embedder reads it.

Read commands open an existing store read-only, with the embedder its vectors were made with when
that can be rebuilt offline (else keyword-only, with a note on stderr); writing commands create
the store on first use.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from langchain_tdai_recall._exchange.records import is_database_location
from langchain_tdai_recall.cli._base import DEFAULT_STORE, IN_MEMORY, PROG, STORE_ENV, UsageError
from langchain_tdai_recall.errors import TdaiRecallError
from langchain_tdai_recall.stores.local import DB_FILENAME

if TYPE_CHECKING:
    import argparse

    from langchain_core.embeddings import Embeddings

    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.stores.base import BaseMemoryStore, StoredEmbedder

__all__ = [
    "chosen_embeddings",
    "existing_store_path",
    "open_backend",
    "open_existing",
    "open_for_writing",
    "open_recorded",
    "pending_vectors",
    "recorded_embedder",
    "store_path",
    "warm_up",
]

logger = logging.getLogger(__name__)

_MIGRATE_STORE: Final = {"store": {"timeout_ms": 120_000, "pool_size": 2}}
"""Store settings of `migrate`: a page of rows may take long; two connections are enough."""

HASH_DIMS: Final = 64
"""Dimension of the `--embeddings hash` test embedder."""


def store_path(args: argparse.Namespace) -> Path | str | None:
    """The store of `--store`: a directory, a PostgreSQL URL, or `None` (in memory)."""
    raw = args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE
    return _location(raw)


def _location(raw: str) -> Path | str | None:
    if raw == IN_MEMORY:
        return None
    if _is_database_url(raw):
        return raw.strip()
    return Path(raw).expanduser()


def _is_database_url(raw: str) -> bool:
    return is_database_location(raw)  # a postgresql:// URL or a libpq key=value string


def _embeddings(name: str | None) -> Embeddings | Literal["default"] | None:
    if name == "none":
        return None
    if name == "hash":
        from langchain_tdai_recall.testing import HashEmbeddings  # noqa: PLC0415

        return HashEmbeddings(dims=HASH_DIMS)
    return "default"


def open_for_writing(args: argparse.Namespace, path: Path | str | None) -> TdaiMemory:
    """Open (creating on first use) the store at `path`; for commands that write.

    Without `--embeddings`, an existing store is opened with the embedder its vectors were made
    with (see `chosen_embeddings`), so that writing to it does not re-embed it.
    """
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415 - keeps --help fast

    embeddings = _embeddings(args.embeddings)
    if args.embeddings is None and _store_exists(path):
        recorded = recorded_embedder(path, must_exist=False)
        embeddings = chosen_embeddings(args, recorded, searches=False)
    return TdaiMemory.open(
        path,
        embeddings=embeddings,
        config=args.config,
        show_progress=args.progress,
    )


def open_existing(
    args: argparse.Namespace, *, write: bool = False, searches: bool = False
) -> TdaiMemory:
    """Open the store of `--store` only if it exists: read commands never create one.

    Read commands (`write=False`) open it read-only: nothing is written, nothing re-embedded.
    Without `--embeddings` the store's own embedder is used (`chosen_embeddings`); `searches`
    marks the commands for which a keyword-only fallback is worth a note on stderr.

    Raises:
        UsageError: If the path does not exist or holds no memory store.
    """
    return open_recorded(args, write=write, searches=searches)[0]


def open_recorded(
    args: argparse.Namespace, *, write: bool, searches: bool
) -> tuple[TdaiMemory, StoredEmbedder | None]:
    """`open_existing`, and the embedder that made most of the store's vectors."""
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415 - keeps --help fast

    path = existing_store_path(args)
    recorded = recorded_embedder(path)
    memory = TdaiMemory.open(
        path,
        embeddings=chosen_embeddings(args, recorded, searches=searches),
        config=args.config,
        show_progress=args.progress,
        read_only=not write and path is not None,  # `:memory:` starts empty: nothing to keep
    )
    return memory, recorded


def _store_exists(path: Path | str | None) -> bool:
    if path is None:
        return False
    if isinstance(path, Path):
        return (path / DB_FILENAME).is_file()
    return True  # a database URL: `recorded_embedder` finds out (no store: no vectors)


def _raw_store(
    path: Path | str, *, read_only: bool = True, config: dict[str, Any] | None = None
) -> BaseMemoryStore:
    """The store object `TdaiMemory.open` would use, without an embedder or background work."""
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415 - keeps --help fast

    return TdaiMemory.open_store(path, config=config, read_only=read_only)


def recorded_embedder(path: Path | str | None, *, must_exist: bool = True) -> StoredEmbedder | None:
    """The embedder that made most of the store's vectors (`None`: no vectors, or no store).

    Raises:
        TdaiRecallError: If the store cannot be opened, or (`must_exist`) a database URL holds
            no store.
    """
    if path is None:
        return None
    try:
        store = _raw_store(path)
    except TdaiRecallError:
        if must_exist or isinstance(path, Path):
            raise
        return None  # a database without a store yet (a writing command creates it)
    try:
        return store.recorded_embedder()
    finally:
        store.close()


def chosen_embeddings(
    args: argparse.Namespace, recorded: StoredEmbedder | None, *, searches: bool
) -> Embeddings | Literal["default"] | None:
    """The embedder a command on an existing store uses.

    `--embeddings` when given. Otherwise the embedder the store's vectors were made with, when
    it can be rebuilt offline (the bundled one, the test hash embedder); keyword-only when it
    cannot (an application's hosted embedder: rebuilding it would need its settings and
    credentials, and another embedder would have to re-embed the whole store); the bundled one
    for a store that holds no vectors yet.
    """
    from langchain_tdai_recall.embeddings import (  # noqa: PLC0415 - keeps --help fast
        embedder_from_identity,
        embedder_identity,
        resolve_embeddings,
    )

    if args.embeddings is not None:
        chosen = _embeddings(args.embeddings)
        if searches and recorded is not None and chosen is not None:
            built = resolve_embeddings(chosen)
            if built is not None and embedder_identity(built) != recorded.identity:
                _note(
                    args,
                    f"the store's vectors were made by {recorded.identity}, not by "
                    f"--embeddings {args.embeddings}: the vector search finds none of them and "
                    f"this read re-embeds nothing ('{PROG} reindex --embeddings "
                    f"{args.embeddings}' re-embeds the store)",
                )
            return built
        return chosen
    if recorded is None:
        return "default"
    rebuilt = embedder_from_identity(recorded.identity, recorded.dimension)
    if rebuilt is None and searches:
        _note(
            args,
            f"this store's vectors were made by {recorded.identity} ({recorded.dimension} "
            "dims), which cannot be rebuilt offline here, so this command searches by keyword "
            "only and re-embeds nothing; for vector search, open the store from Python with "
            "the application's embedder: TdaiMemory.open(path, embeddings=..., read_only=True)",
        )
    return rebuilt


def _note(args: argparse.Namespace, message: str) -> None:
    """One line on stderr (unless `-q`) about a read that cannot use the store's vectors.

    The library's own warnings about the same fact (no embedder; an index snapshot made with
    the store's embedder, not this one) are left out of this run's log output.
    """
    if args.quiet <= 0:
        print(f"{PROG}: note: {message}", file=sys.stderr)
    handler = getattr(args, "log_handler", None)
    if isinstance(handler, logging.Handler):
        handler.addFilter(_not_about_the_embedder)


_EMBEDDER_WARNINGS: Final = ("this memory store has no embedder", "ignoring the index snapshot")


def _not_about_the_embedder(record: logging.LogRecord) -> bool:
    """Log filter: drop the warnings that a `_note` already explained."""
    text = record.getMessage()
    return not (
        text.startswith(_EMBEDDER_WARNINGS)
        and ("snapshot" not in text or "tokenizer or embedder" in text)
    )


def existing_store_path(args: argparse.Namespace) -> Path | str | None:
    """The path or URL of `--store` when a store exists there (or `None` for `:memory:`).

    Raises:
        UsageError: If the path does not exist or holds no memory store.
    """
    path = store_path(args)
    if isinstance(path, str):
        return path  # opening it (read-only first) raises when the database holds no store
    if path is not None and not (path / DB_FILENAME).is_file():
        what = "does not exist" if not path.exists() else "holds no memory store"
        msg = (
            f"{path} {what}; pass the directory of an existing store with --store (or "
            f"${STORE_ENV}), or create one with '{PROG} add', '{PROG} import-jsonl' or "
            f"'{PROG} import-upstream'"
        )
        raise UsageError(msg)
    return path


def warm_up(memory: TdaiMemory) -> None:
    """Load the embedder before a timed recall or search.

    A command-line call is a fresh process: the bundled embedder loads lazily, and loading it
    inside the recall would count against `embedding.query_timeout_ms` and could push the query
    onto the keyword-only fallback.
    """
    if memory.embeddings is None:
        return
    started = time.perf_counter()
    try:
        memory.embeddings.embed_query("warm-up")
    except Exception as exc:  # recall itself reports the failure and degrades
        logger.debug("embedder warm-up failed: %s", exc)
    logger.debug("embedder ready in %.0f ms", (time.perf_counter() - started) * 1000)


def pending_vectors(path: Path | str | None, identity: str) -> int:
    """Rows of the store whose vector `identity` has not made (missing or another's)."""
    if path is None:
        return 0
    store = _raw_store(path)
    try:
        store.bind(tokenizer=store.tokenizer, embedder_id=identity)
        return store.pending_vector_count()
    finally:
        store.close()


def open_backend(raw: str, *, read_only: bool, what: str) -> BaseMemoryStore:
    """A store object for `migrate` (no embedder, no background work)."""
    where = _location(raw)
    if where is None:
        msg = f"{what} needs a directory or a postgresql:// URL, not {IN_MEMORY}"
        raise UsageError(msg)
    if read_only and isinstance(where, Path) and not (where / DB_FILENAME).is_file():
        msg = f"{what} {where} holds no memory store; pass the directory of an existing store"
        raise UsageError(msg)
    return _raw_store(where, read_only=read_only, config=_MIGRATE_STORE)
