"""`TdaiStore` (a LangGraph `BaseStore`) behaviour, as checks run on every backend (issue 16).

Each `check_*` takes an open `TdaiMemory`; `tests/unit_tests/adapters/test_graph_store.py` runs
them on the in-memory and directory stores, and
`tests/integration_tests/stores/test_graph_store_postgres.py` on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError, ScopeError
from tests.lifecycle_cases import sweep_all

ALICE = ("memories", "alice")
BOB = ("memories", "bob")


def check_put_get_overwrite_delete(mem: TdaiMemory) -> None:
    store = mem.as_store()
    assert store.get(ALICE, "k1") is None
    store.put(ALICE, "k1", {"content": "Alice climbs on Sundays.", "level": 3})
    first = store.get(ALICE, "k1")
    assert first is not None
    assert (first.namespace, first.key) == (ALICE, "k1")
    assert first.value == {"content": "Alice climbs on Sundays.", "level": 3}
    assert first.created_at.tzinfo is not None
    time.sleep(0.01)
    store.put(ALICE, "k1", {"content": "Alice climbs on Saturdays.", "level": 4})
    second = store.get(ALICE, "k1")
    assert second is not None
    assert second.value == {"content": "Alice climbs on Saturdays.", "level": 4}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert mem.get_memory("k1", user_id="alice") is not None
    store.delete(ALICE, "k1")
    assert store.get(ALICE, "k1") is None
    assert mem.get_memory("k1", user_id="alice") is None
    store.delete(ALICE, "k1")  # deleting a missing item is not an error
    results = store.batch(
        [
            PutOp(ALICE, "a", {"content": "Batch one."}),
            GetOp(ALICE, "a"),
            PutOp(ALICE, "a", None),
            GetOp(ALICE, "a"),
        ]
    )
    assert results[0] is None and results[2] is None and results[3] is None
    assert results[1] is not None and results[1].value == {"content": "Batch one."}


def check_memories_written_directly_are_items(mem: TdaiMemory) -> None:
    rec = mem.add_memory(
        "Alice is allergic to peanuts.", type="persona", user_id="alice", metadata={"src": "x"}
    )
    store = mem.as_store()
    item = store.get(ALICE, rec.id)
    assert item is not None
    assert item.value == {"src": "x", "content": rec.content, "type": "persona"}
    hits = store.search(ALICE, filter={"type": "persona"})
    assert [h.key for h in hits] == [rec.id]


def check_search_query_filter_limit_offset(mem: TdaiMemory) -> None:
    store = mem.as_store()
    docs = {
        "hike": {"content": "Alice hikes in the Alps every summer.", "kind": "hobby", "n": 1},
        "cook": {"content": "Alice cooks Thai curry on Fridays.", "kind": "food", "n": 2},
        "read": {"content": "Alice reads science fiction novels.", "kind": "hobby", "n": 3},
        "swim": {"content": "Alice swims in the lake in summer.", "kind": "sport", "n": 4},
    }
    for key, value in docs.items():
        store.put(ALICE, key, value)
        time.sleep(0.002)  # distinct write times: newest-first order is defined
    store.put(BOB, "hike", {"content": "Bob hikes in the Alps too.", "kind": "hobby", "n": 1})

    found = store.search(ALICE, query="hiking in the Alps", limit=2)
    assert found and found[0].key == "hike"
    assert all(h.namespace == ALICE for h in found)
    assert found[0].score is not None and 0 < found[0].score <= 1
    assert len(found) <= 2

    def keys(**kwargs: object) -> list[str]:
        return [h.key for h in store.search(ALICE, **kwargs)]  # type: ignore[arg-type]

    assert keys() == ["swim", "read", "cook", "hike"]  # no query: newest first
    assert keys(limit=2) == ["swim", "read"]
    assert keys(limit=2, offset=2) == ["cook", "hike"]
    assert keys(offset=10) == []
    assert keys(filter={"kind": "hobby"}) == ["read", "hike"]
    assert keys(filter={"kind": {"$eq": "hobby"}, "n": {"$gt": 1}}) == ["read"]
    assert keys(filter={"n": {"$gte": 2, "$lt": 4}}) == ["read", "cook"]
    assert keys(filter={"n": {"$lte": 1}}) == ["hike"]
    assert keys(filter={"kind": {"$ne": "hobby"}}) == ["swim", "cook"]
    assert keys(filter={"kind": {"$in": ["food", "sport"]}}) == ["swim", "cook"]
    assert keys(filter={"kind": {"$nin": ["food", "sport"]}}) == ["read", "hike"]
    assert keys(filter={"missing": "x"}) == []
    assert keys(query="summer", filter={"kind": "sport"}) == ["swim"]
    with pytest.raises(ConfigError, match=r"\$regex"):
        store.search(ALICE, filter={"kind": {"$regex": "h.*"}})
    # isolation: bob's item is never in alice's results, and the reverse
    assert [h.key for h in store.search(BOB)] == ["hike"]
    assert store.search(BOB)[0].value["content"].startswith("Bob")


def check_namespaces_outside_the_template_are_refused(mem: TdaiMemory) -> None:
    store = mem.as_store()
    for namespace in [("other", "alice"), ("memories",), ("memories", "alice", "extra")]:
        with pytest.raises(ScopeError, match="namespace template"):
            store.put(namespace, "k", {"content": "x"})
        with pytest.raises(ScopeError, match="namespace template"):
            store.get(namespace, "k")
    with pytest.raises(ScopeError, match="must name the user"):
        store.search(("memories",))
    with pytest.raises(ScopeError, match="namespace template"):
        store.search(("other",))
    assert mem.stats().memories == 0
    agents = mem.as_store(namespace=("users", "{user_id}", "agents", "{agent_id}"))
    agents.put(("users", "alice", "agents", "planner"), "k", {"content": "Planner note."})
    assert mem.get_memory("k", user_id="alice", agent_id="planner") is not None
    assert mem.get_memory("k", user_id="alice") is None
    with pytest.raises(ConfigError, match="user_id"):
        mem.as_store(namespace=("memories", "{agent_id}"))


def check_list_namespaces(mem: TdaiMemory) -> None:
    store = mem.as_store(namespace=("users", "{user_id}", "{agent_id}"))
    for user, agent in [("alice", "chef"), ("alice", "coach"), ("bob", "chef"), ("carol", "x")]:
        store.put(("users", user, agent), "k", {"content": f"{user} with {agent}."})
    mem.add_memory("Shared memory of alice (no agent).", user_id="alice")
    assert store.list_namespaces() == [
        ("users", "alice", "chef"),
        ("users", "alice", "coach"),
        ("users", "bob", "chef"),
        ("users", "carol", "x"),
    ]
    assert store.list_namespaces(prefix=("users", "alice")) == [
        ("users", "alice", "chef"),
        ("users", "alice", "coach"),
    ]
    assert store.list_namespaces(suffix=("chef",)) == [
        ("users", "alice", "chef"),
        ("users", "bob", "chef"),
    ]
    assert store.list_namespaces(prefix=("users", "*", "chef")) == [
        ("users", "alice", "chef"),
        ("users", "bob", "chef"),
    ]
    assert store.list_namespaces(suffix=("*", "x")) == [("users", "carol", "x")]
    assert store.list_namespaces(max_depth=2) == [
        ("users", "alice"),
        ("users", "bob"),
        ("users", "carol"),
    ]
    assert store.list_namespaces(max_depth=2, limit=1, offset=1) == [("users", "bob")]
    assert store.list_namespaces(prefix=("nobody",)) == []
    store.delete(("users", "carol", "x"), "k")
    assert ("users", "carol", "x") not in store.list_namespaces()
    shared = mem.as_store()
    assert shared.list_namespaces() == [("memories", "alice")]


def check_index_fields_and_index_false(mem: TdaiMemory) -> None:
    store = mem.as_store(index={"fields": ["title", "body.text"]})
    store.put(ALICE, "doc", {"title": "Tokyo trip", "body": {"text": "ramen tour"}, "n": 1})
    rec = mem.get_memory("doc", user_id="alice")
    assert rec is not None and rec.content == "Tokyo trip\nramen tour"
    assert [h.key for h in store.search(ALICE, query="ramen tour")] == ["doc"]
    store.put(ALICE, "other", {"title": "ignored", "notes": "sushi bar"}, index=["notes"])
    assert [h.key for h in store.search(ALICE, query="sushi bar")] == ["other"]
    store.put(ALICE, "secret", {"content": "Alice's locker code is 4711."}, index=False)
    assert store.get(ALICE, "secret") is not None
    assert "secret" not in {h.key for h in store.search(ALICE, query="locker code 4711")}
    assert "secret" in {h.key for h in store.search(ALICE)}  # listed without a query
    result = mem.recall("What is Alice's locker code 4711?", user_id="alice")
    shown = "" if result is None else f"{result.prepend_context}{result.append_system_context}"
    assert "4711" not in shown


def check_items_are_recalled_in_their_scope(mem: TdaiMemory) -> None:
    store = mem.as_store()
    store.put(ALICE, "tea", {"content": "Alice drinks oolong tea every morning."})
    alice = mem.recall("What tea does she drink in the morning?", user_id="alice")
    assert alice is not None and "oolong" in (alice.prepend_context or "")
    bob = mem.recall("What tea does she drink in the morning?", user_id="bob")
    assert bob is None or "oolong" not in f"{bob.prepend_context}{bob.append_system_context}"


def check_ttl_expiry_and_refresh(mem: TdaiMemory) -> None:
    store = mem.as_store()
    store.put(ALICE, "short", {"content": "Short-lived note about parking."}, ttl=1.2 / 60)
    store.put(ALICE, "kept", {"content": "Lasting note about parking."})
    assert store.get(ALICE, "short", refresh_ttl=False) is not None
    time.sleep(1.4)
    assert store.get(ALICE, "short", refresh_ttl=False) is None
    assert [h.key for h in store.search(ALICE, query="parking note")] == ["kept"]
    assert [h.key for h in store.search(ALICE)] == ["kept"]
    sweep_all(mem)

    store.put(ALICE, "renewed", {"content": "Renewed zeppelin reminder."}, ttl=2.0 / 60)
    written = store.get(ALICE, "renewed", refresh_ttl=False)
    assert written is not None
    time.sleep(1.2)
    refreshed = store.get(ALICE, "renewed")  # refresh_on_read defaults to True
    assert refreshed is not None and refreshed.updated_at == written.updated_at
    time.sleep(1.2)  # past the first expiry, within the renewed one
    assert store.get(ALICE, "renewed", refresh_ttl=False) is not None
    hits = store.search(ALICE, query="zeppelin reminder")  # a search refreshes too
    assert [h.key for h in hits] == ["renewed"]

    default = mem.as_store(ttl={"default_ttl": 1.0 / 60, "refresh_on_read": False})
    default.put(BOB, "d", {"content": "Default TTL note."})
    assert default.get(BOB, "d") is not None
    time.sleep(1.2)
    assert default.get(BOB, "d") is None
    assert default.search(BOB) == []


def check_async_operations(mem: TdaiMemory) -> None:
    store = mem.as_store()

    async def run() -> None:
        await store.aput(ALICE, "a", {"content": "Async note about kites."})
        item = await store.aget(ALICE, "a")
        assert item is not None and item.value["content"] == "Async note about kites."
        hits = await store.asearch(ALICE, query="kites")
        assert [h.key for h in hits] == ["a"]
        assert await store.alist_namespaces() == [ALICE]
        results = await store.abatch([SearchOp(ALICE, None), GetOp(BOB, "a")])
        assert [h.key for h in results[0]] == ["a"]  # type: ignore[union-attr]
        assert results[1] is None
        await store.adelete(ALICE, "a")
        assert await store.aget(ALICE, "a") is None

    asyncio.run(run())


def check_values_are_validated(mem: TdaiMemory) -> None:
    store = mem.as_store()
    with pytest.raises(ConfigError, match="cannot be kept"):
        store.put(ALICE, "big", {"content": "x" * 20_000})
    with pytest.raises(ConfigError, match="key"):
        store.put(ALICE, "bad\nkey", {"content": "x"})
    with pytest.raises(ConfigError, match="ttl"):
        store.put(ALICE, "k", {"content": "x"}, ttl=-1)
    assert mem.stats().memories == 0


ALL_CHECKS = [
    check_put_get_overwrite_delete,
    check_memories_written_directly_are_items,
    check_search_query_filter_limit_offset,
    check_namespaces_outside_the_template_are_refused,
    check_list_namespaces,
    check_index_fields_and_index_false,
    check_items_are_recalled_in_their_scope,
    check_ttl_expiry_and_refresh,
    check_async_operations,
    check_values_are_validated,
]
"""Every check, for the backends' test modules to parametrize over."""
