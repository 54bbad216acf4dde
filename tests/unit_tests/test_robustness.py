"""Robustness defects found by review: each test failed on the code before its fix."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.testing import HashEmbeddings

NS = ("memories", "alice")


@pytest.fixture
def memory() -> Any:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=16)) as mem:
        yield mem


# ---------------------------------------------------------------------------------------------
# A batch is checked whole before any of it is written


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"content": "x", "tags": {1, 2}}, "is a set"),
        ({"content": "y" * 40_000}, "at most 16384 bytes"),
        ({"content": "z", "blob": "q" * 20_000}, "at most 16384 bytes"),
        ({"content": "ok", "nested": {"\ud800": 1}}, "lone surrogate"),
    ],
)
def test_a_store_batch_with_a_bad_put_in_the_middle_writes_nothing(
    memory: TdaiMemory, bad: dict[str, Any], fragment: str
) -> None:
    store = memory.as_store()
    with pytest.raises(ConfigError, match=fragment) as caught:
        store.batch([PutOp(NS, "first", {"content": "first"}), PutOp(NS, "second", bad)])
    assert "'second'" in str(caught.value)
    assert store.batch([GetOp(NS, "first")]) == [None]
    assert memory.list_memories(user_id="alice") == []


def test_memory_batch_with_a_bad_record_in_the_middle_writes_nothing(memory: TdaiMemory) -> None:
    bad = {"content": "x", "metadata": {"when": object()}}
    with pytest.raises(ConfigError, match="metadata"):
        memory.add_memories([{"content": "first"}, bad, {"content": "third"}])
    assert memory.list_memories() == []


# ---------------------------------------------------------------------------------------------
# Lone surrogates are repaired (text) or refused naming the field (ids, keys), never a crash


def test_lone_surrogates_in_metadata_values_are_repaired(memory: TdaiMemory) -> None:
    record = memory.add_memory("a\ud800b", metadata={"note": "x\udc00y", "list": ["\ud800"]})
    assert record.content == "a\ufffdb"
    assert record.metadata == {"note": "x\ufffdy", "list": ["\ufffd"]}
    assert memory.get_memory(record.id) == record


def test_a_lone_surrogate_in_a_metadata_key_is_refused_naming_it(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match=r"metadata\['outer'\] has the key '\\ud800'"):
        memory.add_memory("text", metadata={"outer": {"\ud800": 1}})
    assert memory.list_memories() == []


def test_a_store_value_with_lone_surrogates_is_kept_repaired(memory: TdaiMemory) -> None:
    store = memory.as_store()
    store.put(NS, "k", {"content": "tea\ud800", "why": ["\udfff"]})
    item = store.get(NS, "k")
    assert item is not None
    assert item.value == {"content": "tea\ufffd", "why": ["\ufffd"]}
