"""`TdaiStore` conformance-style checks on the in-memory and directory stores (issue 16).

The same checks run on PostgreSQL in `tests/integration_tests/stores/test_graph_store_postgres.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from langchain_tdai_recall import TdaiMemory
from tests import graph_store_cases as cases


@pytest.mark.parametrize("check", cases.ALL_CHECKS, ids=lambda c: c.__name__[6:])
def test_store_behaviour(memory: TdaiMemory, check: Callable[[TdaiMemory], None]) -> None:
    check(memory)
