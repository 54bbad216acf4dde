"""One filter language on every surface, on PostgreSQL (issue 24): `tests.filter_cases`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings
from tests import filter_cases as cases


@pytest.mark.parametrize("check", cases.ALL_CHECKS, ids=lambda c: c.__name__[6:])
def test_filters(postgres_url: str, check: Callable[[TdaiMemory], None]) -> None:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=32)) as memory:
        check(memory)
