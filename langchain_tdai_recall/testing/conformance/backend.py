"""`BackendConformance`: the tests every backend passes, assembled from the parts of the suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.testing.conformance._shared import (
    BackendFactory,
    open_memory,
)
from langchain_tdai_recall.testing.conformance.cache import IndexCacheTests
from langchain_tdai_recall.testing.conformance.documents import DocumentTests
from langchain_tdai_recall.testing.conformance.erasure import ErasureTests
from langchain_tdai_recall.testing.conformance.formation import FormationTests
from langchain_tdai_recall.testing.conformance.lifecycle import LifecycleTests
from langchain_tdai_recall.testing.conformance.memories import MemoryTests
from langchain_tdai_recall.testing.conformance.vectors import VectorTests


class BackendConformance(
    MemoryTests,
    DocumentTests,
    VectorTests,
    LifecycleTests,
    FormationTests,
    ErasureTests,
    IndexCacheTests,
):
    """Tests every backend passes. Subclass and override the `factory` fixture."""

    @pytest.fixture
    def factory(self) -> BackendFactory:
        """The backend under test (override in the subclass)."""
        raise NotImplementedError

    @pytest.fixture
    def memory(self, factory: BackendFactory) -> Iterator[TdaiMemory]:
        """A `TdaiMemory` over a fresh store of the backend."""
        with open_memory(factory.open()) as mem:
            yield mem
