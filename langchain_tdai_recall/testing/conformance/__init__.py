"""The conformance suite every store backend passes (needs `pytest`).

A backend's test module subclasses `BackendConformance` (every backend) and, for a backend whose
data outlives the process, `DurableBackendConformance`, and overrides the `factory` fixture to
return a `BackendFactory` that opens handles on one fresh store::

    class TestMyBackend(DurableBackendConformance):
        @pytest.fixture
        def factory(self, tmp_path):
            return MyFactory(tmp_path)

What the suite holds a backend to:

- **Same data, same results.** The same memories, messages, persona and scenes written through
  `TdaiMemory` into the backend and into the reference (the local in-memory store) give the same
  hits in the same order with the same scores (both legs), the same recall injection (both
  blocks), the same lists, counts and documents.
- **Scope isolation**: nothing of one scope is returned for another, not even by row reference.
- **Generations and freshness**: a write, update or delete is seen by the next search, through
  the same handle, through another handle, and through another process.
- **Durability**: everything written (vectors included) is there after the store is reopened.
- **Schema migrations**: an older schema is migrated on open, a newer one is refused, and
  opening twice changes nothing.
- **Documents**, **vector upkeep**, **read-only** and **closed** behaviour, and the async twins.
- **Index cache**: under a budget smaller than any index, concurrent searches and writes lose
  nothing and see every change (`cache`).

The suite is split by part: `memories` (same data, same results; scope isolation; generations),
`documents`, `vectors` (vector upkeep), `lifecycle` (closing, async twins), `formation`
(formation's state), `durable` (handles, processes, reopening, read-only, schema), assembled in
`backend`; `_shared` holds the shared data, `BackendFactory` and the comparison helpers.
"""

from __future__ import annotations

# `__all__` and, outside it, the shared data and helpers for tests that reuse them
from langchain_tdai_recall.testing.conformance._shared import (  # noqa: F401
    ALICE,
    BOB,
    DIMS,
    PLANNER,
    BackendFactory,
    fill,
    open_memory,
    snapshot,
)
from langchain_tdai_recall.testing.conformance.backend import BackendConformance
from langchain_tdai_recall.testing.conformance.durable import DurableBackendConformance
from langchain_tdai_recall.testing.conformance.formation import FORMATION_CONFIG  # noqa: F401

__all__ = ["BackendConformance", "BackendFactory", "DurableBackendConformance"]
