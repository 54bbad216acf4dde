"""Deprecated path of the store conformance suite: use `langchain_tdai_recall.testing.conformance`.

Kept so that existing backend test modules keep working; the suite moved, split by part, beside
the other test kits in `langchain_tdai_recall.testing`. Every name it had is importable here.
"""

from __future__ import annotations

from langchain_tdai_recall.testing.conformance import (
    BackendConformance,
    BackendFactory,
    DurableBackendConformance,
)

# importable from here as before: the suite's shared data and helpers (not in `__all__`)
from langchain_tdai_recall.testing.conformance._shared import (  # noqa: F401
    ALICE,
    BOB,
    DIMS,
    PLANNER,
    fill,
    open_memory,
    snapshot,
)
from langchain_tdai_recall.testing.conformance.formation import FORMATION_CONFIG  # noqa: F401

__all__ = ["BackendConformance", "BackendFactory", "DurableBackendConformance"]
