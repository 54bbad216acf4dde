"""One filter language on every surface, on the in-memory and directory stores (issue 24)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from langchain_tdai_recall import TdaiMemory
from tests import filter_cases as cases


@pytest.mark.parametrize("check", cases.ALL_CHECKS, ids=lambda c: c.__name__[6:])
def test_filters(memory: TdaiMemory, check: Callable[[TdaiMemory], None]) -> None:
    check(memory)
