"""Names every part of the `tdai-recall` command line shares.

The program name, the store defaults, and the usage error that the entry point reports as one
line.

It sits below the parser and the commands so that both can use these names without importing
each other.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_STORE", "IN_MEMORY", "PROG", "STORE_ENV", "UsageError"]

PROG: Final = "tdai-recall"


STORE_ENV: Final = "TDAI_RECALL_STORE"
"""Environment variable naming the default store directory."""


DEFAULT_STORE: Final = "tdai-store"
"""Store directory used when neither `--store` nor `$TDAI_RECALL_STORE` is given (relative to
the working directory)."""


IN_MEMORY: Final = ":memory:"
"""`--store` value for a throw-away in-memory store."""


class UsageError(Exception):
    """A command-line mistake, reported like any other error (one line, status 1)."""
