"""Deprecated path of the store conformance suite: use `langchain_tdai_recall.testing.conformance`.

Kept so that existing backend test modules keep working; the suite moved, split by part, beside
the other test kits in `langchain_tdai_recall.testing`. Every name it had is importable here. The
names are looked up on first use, so the storage package never imports the test kits (which
stand above it and need `pytest`) unless this old path is used.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

# the names are resolved on first use by `__getattr__` below
__all__ = ["BackendConformance", "BackendFactory", "DurableBackendConformance"]  # noqa: F822

_SUITE: Final = "langchain_tdai_recall.testing.conformance"
_HOMES: Final[dict[str, str]] = {
    "BackendConformance": _SUITE,
    "BackendFactory": _SUITE,
    "DurableBackendConformance": _SUITE,
    # importable from here as before: the suite's shared data and helpers (not in `__all__`)
    "ALICE": f"{_SUITE}._shared",
    "BOB": f"{_SUITE}._shared",
    "DIMS": f"{_SUITE}._shared",
    "PLANNER": f"{_SUITE}._shared",
    "fill": f"{_SUITE}._shared",
    "open_memory": f"{_SUITE}._shared",
    "snapshot": f"{_SUITE}._shared",
    "FORMATION_CONFIG": f"{_SUITE}.formation",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
