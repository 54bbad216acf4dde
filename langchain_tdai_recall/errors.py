"""Exceptions raised by langchain-tdai-recall.

Every exception derives from `TdaiRecallError`; most also derive from the builtin a caller would
naturally catch::

    TdaiRecallError
    ├── ConfigError (ValueError)            a developer mistake: bad option, bad input value
    │   └── ScopeError                      an invalid or missing user_id / agent_id
    ├── MissingDependencyError (ImportError) an optional extra is not installed
    ├── StoreError                          storage failed (the message names the path)
    │   ├── StoreClosedError                the store was used after close()
    │   ├── StoreReadOnlyError              a write to a store that cannot or may not be written
    │   ├── StoreCorruptedError             the database file is damaged, empty or not a store
    │   └── StoreWriteError                 a write failed for a passing reason (locked by
    │                                       another process, disk full); nothing was written
    ├── EmbeddingError                      the embedder failed or returned malformed vectors
    ├── RecallTimeoutError (TimeoutError)   recall exceeded recall.timeout_ms (on_error="raise")
    └── ImportUpstreamError                 an upstream data directory could not be read
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EmbeddingError",
    "ImportUpstreamError",
    "MissingDependencyError",
    "RecallTimeoutError",
    "ScopeError",
    "StoreClosedError",
    "StoreCorruptedError",
    "StoreError",
    "StoreReadOnlyError",
    "StoreWriteError",
    "TdaiRecallError",
]


class TdaiRecallError(Exception):
    """Root of every exception this package raises."""


class ConfigError(TdaiRecallError, ValueError):
    """Invalid configuration or argument: a developer mistake, raised before any work is done."""

    problems: list[tuple[str, str]] = []  # noqa: RUF012 - replaced per instance, never mutated
    """For configuration models: (dotted field, what is wrong) per problem."""


class ScopeError(ConfigError):
    """An invalid `user_id`/`agent_id`, or a missing `user_id` where one is required."""


class MissingDependencyError(TdaiRecallError, ImportError):
    """An optional dependency is missing; the message gives the install command."""

    def __init__(self, package: str, *, extra: str) -> None:
        self.package = package
        self.extra = extra
        msg = (
            f"{package!r} is not installed; install it with "
            f'pip install "langchain-tdai-recall[{extra}]" '
            f'(in a checkout of the repository: pip install -e ".[{extra}]")'
        )
        super().__init__(msg)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_missing_dependency, (self.package, self.extra))


def _rebuild_missing_dependency(package: str, extra: str) -> MissingDependencyError:
    return MissingDependencyError(package, extra=extra)


class StoreError(TdaiRecallError):
    """The memory store failed to open, read or write; the message names the path and the fix."""


class StoreClosedError(StoreError):
    """The store was used after `close()`."""


class StoreReadOnlyError(StoreError):
    """A write was refused because the store is read-only.

    Either it was opened with `read_only=True`, or its directory or database file cannot be
    written (then open it with `read_only=True` to search it).
    """


class StoreCorruptedError(StoreError):
    """The database file is damaged, empty (0 bytes) or not a memory store; nothing was changed.

    Restore the file from a backup, or move it aside to start an empty store.
    """


class StoreWriteError(StoreError):
    """A write failed for a reason that may pass; nothing of the failed call was written.

    The database stayed locked by another process, or the disk is full. Retry once the cause is
    gone.
    """


class EmbeddingError(TdaiRecallError):
    """The embedder failed, timed out outside the recall path, or returned malformed vectors."""


class RecallTimeoutError(TdaiRecallError, TimeoutError):
    """Recall exceeded `recall.timeout_ms`; raised only with `on_error="raise"`."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(f"recall exceeded recall.timeout_ms={timeout_ms}")

    def __reduce__(self) -> tuple[object, ...]:
        return (RecallTimeoutError, (self.timeout_ms,))


class ImportUpstreamError(TdaiRecallError):
    """An upstream (TencentDB Agent Memory) data directory could not be imported."""
