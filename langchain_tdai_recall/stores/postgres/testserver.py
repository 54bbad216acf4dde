"""Deprecated path of the throw-away PostgreSQL server; use `testing.postgres` instead.

Kept so that existing imports and `python -m langchain_tdai_recall.stores.postgres.testserver`
keep working; the server moved beside the other test kits in `langchain_tdai_recall.testing`.
Its names are looked up on first use, so the storage package never imports the test kits (which
stand above it) unless this old path is used.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Final

# the names are resolved on first use by `__getattr__` below
__all__ = ["TemporaryPostgres", "TemporaryPostgresError", "bundled_binaries"]  # noqa: F822

_HOME: Final = "langchain_tdai_recall.testing.postgres"
_NAMES: Final = frozenset(
    # `__all__`, `main` and, importable from here as before, the module's constants
    {*__all__, "main", "COPY_DIR", "OS_USER", "PORT", "PREFIX", "SETTINGS"}
)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(_HOME), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES})


if __name__ == "__main__":
    sys.exit(__getattr__("main")())
