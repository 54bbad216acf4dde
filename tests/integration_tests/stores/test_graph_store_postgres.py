"""`TdaiStore` conformance-style checks on PostgreSQL (issues 16, 24): `tests.graph_store_cases`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings
from tests import graph_store_cases as cases


@pytest.mark.parametrize("check", cases.ALL_CHECKS, ids=lambda c: c.__name__[6:])
def test_store_behaviour(postgres_url: str, check: Callable[[TdaiMemory], None]) -> None:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=32)) as memory:
        check(memory)


@pytest.mark.parametrize("check", cases.OPEN_CHECKS, ids=lambda c: c.__name__[6:])
def test_read_your_writes(postgres_url: str, check: Callable[[cases.OpenMemory], None]) -> None:
    check(lambda embeddings: TdaiMemory.open(postgres_url, embeddings=embeddings))
