"""One filter language on every surface (issue 24 item 4), as checks run on every backend.

`search_memories(metadata=...)`, the `tdai_memory_search` tool's `metadata`, the retriever's
`filter` and `as_store().search(filter=...)` must return the same memories for the same filter,
the ones listed here by hand, and refuse the same unsupported filters with a `ConfigError`
(the tool: an "Invalid arguments" tool error), never with an empty result.
`tests/unit_tests/test_filter_surfaces.py` runs the checks on the in-memory and directory
stores, `tests/integration_tests/stores/test_filter_surfaces_postgres.py` on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError

UTC = dt.UTC

SEEDS: dict[str, tuple[str, dict[str, Any]]] = {
    "m1": (
        "note one about the email",
        {
            "source": "email",
            "n": 1,
            "due": "2026-03-01T09:30:00Z",
            "tags": ["a", "b"],
            "who": {"name": "ann", "age": 30},
        },
    ),
    "m2": ("note two about the chat", {"source": "chat", "n": 2, "due": "2026-03-02"}),
    "m3": ("note three about the sms", {"source": "sms", "n": 3.5, "flag": True}),
    "m4": ("note four about nothing", {}),
}

#: (filter, the memories it keeps), worked out by hand from `SEEDS`.
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"source": "email"}, {"m1"}),
    ({"source": {"$eq": "chat"}}, {"m2"}),
    ({"source": {"$ne": "email"}}, {"m2", "m3", "m4"}),
    ({"source": {"$in": ["email", "sms"]}}, {"m1", "m3"}),
    ({"source": {"$nin": ["email", "sms"]}}, {"m2", "m4"}),
    ({"n": {"$gt": 1}}, {"m2", "m3"}),
    ({"n": {"$gte": 2}}, {"m2", "m3"}),
    ({"n": {"$lt": 2}}, {"m1"}),
    ({"n": {"$lte": 2, "$gt": 1}}, {"m2"}),
    ({"n": 3.5, "flag": True}, {"m3"}),
    ({"flag": 1}, set()),  # True is not 1
    ({"tags": ["a", "b"]}, {"m1"}),
    ({"who": {"age": {"$gte": 18}}}, {"m1"}),
    ({"missing": None}, {"m1", "m2", "m3", "m4"}),
    # times: ISO texts and datetime/date operands compare as ranges (a date is its day)
    ({"due": "2026-03-01"}, {"m1"}),
    ({"due": {"$gte": "2026-03-02"}}, {"m2"}),
    ({"due": {"$gte": "2026-03-01T00:00:00+00:00"}}, {"m1", "m2"}),
    # the same instant is not before it, and 09:30Z is after 09:00Z (as texts both would differ)
    ({"due": {"$lt": "2026-03-01T10:30:00+01:00"}}, set()),
    ({"due": {"$gte": "2026-03-01T10:00:00+01:00"}}, {"m1", "m2"}),
    ({"due": {"$lt": dt.date(2026, 3, 2)}}, {"m1"}),
    ({"due": {"$lte": dt.datetime(2026, 3, 1, 12, tzinfo=UTC)}}, {"m1"}),
    ({"due": {"$gt": dt.datetime(2026, 3, 1, 12)}}, {"m2"}),  # naive = UTC
    ({"due": {"$in": [dt.date(2026, 3, 2)]}}, {"m2"}),
]

#: Filters every surface refuses, and a piece of the message naming what is wrong.
BAD: list[tuple[dict[str, Any], str]] = [
    ({"source": {"$regex": "e.*"}}, "'$regex'"),
    ({"source": {"$exists": True}}, "'$exists'"),
    ({"source": {"$in": "email"}}, "must be a list"),
    ({"source": {"$eq": "email", "kind": "x"}}, "mixes operators"),
    ({"$or": [{"source": "email"}, {"source": "sms"}]}, "'$or' at its top level"),
    ({"n": {"$gt": [1, 2]}}, "orders numbers"),
]


def _for_the_tool(spec: dict[str, Any]) -> bool:
    """Whether a model can pass the filter: JSON, at most an operator dict per field."""
    try:
        json.dumps(spec)
    except TypeError:
        return False
    return not any(
        isinstance(v, dict) and any(isinstance(w, dict) for w in v.values()) for v in spec.values()
    )


def seed(mem: TdaiMemory) -> dict[str, str]:
    """The seeds as alice's memories; memory id -> seed name."""
    names = {}
    for name, (text, metadata) in SEEDS.items():
        record = mem.add_memory(text, user_id="alice", metadata=metadata)
        names[record.id] = name
    mem.add_memory("note for bob about the email", user_id="bob", metadata={"source": "email"})
    return names


def check_every_surface_returns_the_same_memories(mem: TdaiMemory) -> None:
    names = seed(mem)
    store = mem.as_store()
    tool = mem.tools(user_id="alice")[0]
    for spec, expected in CASES:
        where = f"filter {spec!r}"
        searched = mem.search_memories(
            "note", user_id="alice", metadata=spec, limit=20, min_score=0.0
        )
        assert {names[h.id] for h in searched} == expected, where
        items = store.search(("memories", "alice"), filter=spec, limit=50)
        assert {names[i.key] for i in items} == expected, where
        queried = store.search(("memories", "alice"), query="note", filter=spec, limit=50)
        assert {names[i.key] for i in queried} == expected, where
        retriever = mem.as_retriever(user_id="alice", k=20, filter=spec)
        assert {names[d.metadata["id"]] for d in retriever.invoke("note")} == expected, where
        per_call = mem.as_retriever(user_id="alice", k=20).invoke("note", filter=spec)
        assert {names[d.metadata["id"]] for d in per_call} == expected, where
        if _for_the_tool(spec):
            call = {
                "type": "tool_call",
                "id": "c1",
                "name": tool.name,
                "args": {"query": "note", "limit": 20, "metadata": spec},
            }
            result = tool.invoke(call)
            assert isinstance(result, ToolMessage)
            assert result.status == "success", (where, result.content)
            assert {names[a["id"]] for a in result.artifact} == expected, where


async def _async_surfaces(mem: TdaiMemory, spec: dict[str, Any]) -> list[set[str]]:
    store = mem.as_store()
    hits = await mem.asearch_memories("note", user_id="alice", metadata=spec, min_score=0.0)
    items = await store.asearch(("memories", "alice"), filter=spec, limit=50)
    docs = await mem.as_retriever(user_id="alice", k=20).ainvoke("note", filter=spec)
    return [{h.id for h in hits}, {i.key for i in items}, {str(d.metadata["id"]) for d in docs}]


def check_async_surfaces_agree(mem: TdaiMemory) -> None:
    names = seed(mem)
    spec: dict[str, Any] = {"source": {"$in": ["email", "chat"]}}
    for found in asyncio.run(_async_surfaces(mem, spec)):
        assert {names[i] for i in found} == {"m1", "m2"}


def check_unsupported_filters_are_errors_everywhere(mem: TdaiMemory) -> None:
    seed(mem)
    store = mem.as_store()
    tool = mem.tools(user_id="alice")[0]
    for spec, words in BAD:
        with pytest.raises(ConfigError, match=r"^metadata.*" + _escaped(words)):
            mem.search_memories("note", user_id="alice", metadata=spec)
        with pytest.raises(ConfigError, match=r"^filter.*" + _escaped(words)):
            store.search(("memories", "alice"), filter=spec)
        with pytest.raises(ConfigError, match=r"^filter.*" + _escaped(words)):
            mem.as_retriever(user_id="alice", filter=spec)
        with pytest.raises(ConfigError, match=r"^filter.*" + _escaped(words)):
            mem.as_retriever(user_id="alice").invoke("note", filter=spec)
        call = {
            "type": "tool_call",
            "id": "c1",
            "name": tool.name,
            "args": {"query": "note", "metadata": spec},
        }
        result = tool.invoke(call)
        assert result.status == "error"
        assert words in str(result.content), result.content
        assert "Invalid arguments" in str(result.content)


def check_the_tool_says_what_its_schema_takes(mem: TdaiMemory) -> None:
    seed(mem)
    tool = mem.tools(user_id="alice")[0]
    args = {"query": "note", "metadata": {"who": {"age": {"$gte": 18}}}}
    result = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert result.status == "error"
    assert "metadata['who'] nests an object" in str(result.content), result.content
    assert "Input should be" not in str(result.content)  # no list of union errors


def check_the_retriever_refuses_unknown_invoke_keywords(mem: TdaiMemory) -> None:
    seed(mem)
    retriever = mem.as_retriever(user_id="alice")
    with pytest.raises(ConfigError, match=r"unknown keyword\(s\) \['metadata'\]"):
        retriever.invoke("note", metadata={"source": "email"})
    with pytest.raises(ConfigError, match=r"unknown keyword\(s\) \['where'\]"):
        asyncio.run(retriever.ainvoke("note", where={"source": "email"}))
    assert len(retriever.invoke("note", k=2)) == 2
    docs = retriever.invoke("note", created_before="2000-01-01")
    assert docs == []


def _escaped(words: str) -> str:
    return re.escape(words)


ALL_CHECKS = [
    check_every_surface_returns_the_same_memories,
    check_async_surfaces_agree,
    check_unsupported_filters_are_errors_everywhere,
    check_the_tool_says_what_its_schema_takes,
    check_the_retriever_refuses_unknown_invoke_keywords,
]
