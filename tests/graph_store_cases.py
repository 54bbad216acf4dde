"""`TdaiStore` (a LangGraph `BaseStore`) behaviour, as checks run on every backend (issues 16, 24).

Each check in `ALL_CHECKS` takes an open `TdaiMemory` with the hash embedder; each in
`OPEN_CHECKS` takes a function that opens one on the backend under test with a given embedder
(the read-your-writes checks hold the background vector upkeep back).
`tests/unit_tests/adapters/test_graph_store.py` runs them on the in-memory and directory stores,
`tests/integration_tests/stores/test_graph_store_postgres.py` on PostgreSQL.

Together they cover what LangGraph's own store tests check (written here, not copied): put, get,
delete; batch and abatch order; search with a query, a filter, limit and offset; `index` paths;
`list_namespaces`; TTL and refresh. And what is particular to a memory: scopes, recall,
read-your-writes, items written before namespaces were kept.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.testing import HashEmbeddings
from tests.lifecycle_cases import sweep_all

ALICE = ("memories", "alice")
BOB = ("memories", "bob")

OpenMemory = Callable[[Embeddings], TdaiMemory]
"""Opens a memory on the backend under test with the given embedder."""


class HeldUpkeepEmbeddings(HashEmbeddings):
    """The hash embedder, except that the background vector upkeep waits until `release()`.

    So a check sees the state right after a write, before the upkeep embeds it, however fast
    the machine is; every other caller (searches, read-your-writes) embeds at once.
    """

    __test__ = False

    def __init__(self, dims: int = 64) -> None:
        super().__init__(dims=dims)
        self._released = threading.Event()

    def release(self) -> None:
        """Let the upkeep embed."""
        self._released.set()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents; the upkeep's thread waits for `release()` first (at most 60 s)."""
        if threading.current_thread().name == "tdai-vectors":
            self._released.wait(60)
        return super().embed_documents(texts)


@contextmanager
def held(open_memory: OpenMemory) -> Iterator[tuple[TdaiMemory, HeldUpkeepEmbeddings]]:
    """A memory whose background upkeep is held back while the block runs."""
    emb = HeldUpkeepEmbeddings()
    mem = open_memory(emb)
    try:
        yield mem, emb
    finally:
        emb.release()
        mem.close()


def cosine(emb: Embeddings, query: str, text: str) -> float:
    """The cosine similarity of a query and a text, as the embedder sees them."""
    q = np.asarray(emb.embed_query(query), dtype=np.float64)
    d = np.asarray(emb.embed_documents([text])[0], dtype=np.float64)
    return float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d)))


def keys(items: list[Item]) -> list[str]:
    return [item.key for item in items]


# -- items ------------------------------------------------------------------------------------


def check_put_get_overwrite_delete(mem: TdaiMemory) -> None:
    store = mem.as_store()
    assert store.get(ALICE, "k1") is None
    store.put(ALICE, "k1", {"content": "Alice climbs on Sundays.", "level": 3})
    first = store.get(ALICE, "k1")
    assert first is not None
    assert (first.namespace, first.key) == (ALICE, "k1")
    assert first.value == {"content": "Alice climbs on Sundays.", "level": 3}
    assert first.created_at.tzinfo is not None
    store.put(ALICE, "k1", {"content": "Alice climbs on Saturdays.", "level": 4})
    second = store.get(ALICE, "k1")
    assert second is not None
    assert second.value == {"content": "Alice climbs on Saturdays.", "level": 4}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at  # even when written within the same millisecond
    assert mem.get_memory("k1", user_id="alice") is not None  # the key is the memory id
    store.delete(ALICE, "k1")
    assert store.get(ALICE, "k1") is None
    assert mem.get_memory("k1", user_id="alice") is None
    store.delete(ALICE, "k1")  # deleting a missing item is not an error
    results = store.batch(
        [
            PutOp(ALICE, "a", {"content": "Batch one."}),
            GetOp(ALICE, "a"),
            PutOp(ALICE, "a", None),  # a put without a value deletes
            GetOp(ALICE, "a"),
        ]
    )
    assert results[0] is None and results[2] is None and results[3] is None
    assert isinstance(results[1], Item) and results[1].value == {"content": "Batch one."}


def check_memories_written_directly_are_items(mem: TdaiMemory) -> None:
    rec = mem.add_memory(
        "Alice is allergic to peanuts.", type="persona", user_id="alice", metadata={"src": "x"}
    )
    store = mem.as_store()
    item = store.get(ALICE, rec.id)
    assert item is not None
    assert item.value == {"src": "x", "content": rec.content, "type": "persona"}
    hits = store.search(ALICE, filter={"type": "persona"})
    assert keys(hits) == [rec.id]
    assert store.search((*ALICE, "sub")) == []  # they are items of the template's namespace


def check_items_written_before_namespaces_were_kept(mem: TdaiMemory) -> None:
    # what a put wrote before issue 24: the value in the metadata, no namespace, no key
    old = {"content": "Alice collects vinyl records.", "genre": "jazz"}
    mem.add_memories(
        [{"id": "old1", "content": old["content"], "metadata": {"tdai_store": {"value": old}}}],
        user_id="alice",
    )
    store = mem.as_store()
    item = store.get(ALICE, "old1")
    assert item is not None and item.value == old
    assert keys(store.search(ALICE, filter={"genre": "jazz"})) == ["old1"]
    assert keys(store.search(ALICE, query="vinyl records")) == ["old1"]
    assert store.list_namespaces() == [ALICE]
    store.put(ALICE, "old1", {**old, "genre": "soul"})  # a put records its namespace
    rec = mem.get_memory("old1", user_id="alice")
    assert rec is not None and rec.metadata["tdai_store"]["ns"] == list(ALICE)
    assert mem.as_store(namespace=("prefs", "{user_id}")).get(("prefs", "alice"), "old1") is None


def check_values_are_validated(mem: TdaiMemory) -> None:
    store = mem.as_store()
    with pytest.raises(ConfigError, match="cannot be kept"):
        store.put(ALICE, "big", {"content": "x" * 20_000})
    with pytest.raises(ConfigError, match="key"):
        store.put(ALICE, "bad\nkey", {"content": "x"})
    with pytest.raises(ConfigError, match="ttl"):
        store.put(ALICE, "k", {"content": "x"}, ttl=-1)
    with pytest.raises(ConfigError, match="must be a dict"):
        store.batch([PutOp(ALICE, "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    assert mem.stats().memories == 0


# -- namespaces -------------------------------------------------------------------------------


def check_namespaces_of_any_depth(mem: TdaiMemory) -> None:
    store = mem.as_store()
    work, year, home = (*ALICE, "work"), (*ALICE, "work", "2026"), (*ALICE, "home")
    store.put(ALICE, "a", {"content": "Alice lives in Lyon."})
    store.put(work, "w", {"content": "Alice leads the payments team."})
    store.put(year, "y", {"content": "Alice plans a reorg in March."})
    store.put(home, "h", {"content": "Alice waters the ferns on Mondays."})
    store.put((*BOB, "work"), "b", {"content": "Bob leads the payments team too."})

    def found(prefix: tuple[str, ...], **kwargs: object) -> set[tuple[tuple[str, ...], str]]:
        return {(h.namespace, h.key) for h in store.search(prefix, **kwargs)}  # type: ignore[arg-type]

    assert found(ALICE) == {(ALICE, "a"), (work, "w"), (year, "y"), (home, "h")}
    assert found(work) == {(work, "w"), (year, "y")}
    assert found(year) == {(year, "y")}
    assert found((*ALICE, "wor")) == set()  # a prefix matches whole labels
    assert found(work, query="payments team") == {(work, "w"), (year, "y")}
    assert store.get(home, "w") is None  # the namespace is part of the identity
    item = store.get(year, "y")
    assert item is not None and item.namespace == year

    # one key in two namespaces: two items, two memories of alice
    store.put(work, "note", {"content": "Work note: ship the API."})
    store.put(home, "note", {"content": "Home note: buy bread."})
    work_note, home_note = store.get(work, "note"), store.get(home, "note")
    assert work_note is not None and work_note.value["content"] == "Work note: ship the API."
    assert home_note is not None and home_note.value["content"] == "Home note: buy bread."
    assert len(mem.list_memories(user_id="alice")) == 6
    store.delete(work, "note")
    assert store.get(work, "note") is None
    assert store.get(home, "note") is not None
    store.put(work, "note", {"content": "Work note again."})  # the key is free again
    assert mem.get_memory("note", user_id="alice") is not None

    # items of every depth are memories of the user's scope: recall injects them
    result = mem.recall("Who leads the payments team at Alice's work?", user_id="alice")
    assert result is not None and "payments team" in (result.prepend_context or "")
    assert mem.list_memories(user_id="bob")[0].content == "Bob leads the payments team too."


def check_template_literals_are_part_of_the_identity(mem: TdaiMemory) -> None:
    # regression: items put under ("episodes", uid) came back from a ("prefs", ...) store
    episodes = mem.as_store(namespace=("episodes", "{user_id}"))
    prefs = mem.as_store(namespace=("prefs", "{user_id}"))
    episodes.put(("episodes", "alice"), "e1", {"content": "Alice went hiking on Sunday."})
    prefs.put(("prefs", "alice"), "p1", {"content": "Alice prefers green tea."})
    assert keys(prefs.search(("prefs", "alice"))) == ["p1"]
    assert keys(prefs.search(("prefs", "alice"), query="hiking on Sunday")) == ["p1"]
    assert prefs.get(("prefs", "alice"), "e1") is None
    assert prefs.list_namespaces() == [("prefs", "alice")]
    assert keys(episodes.search(("episodes", "alice"))) == ["e1"]
    # the same key under both: two items
    prefs.put(("prefs", "alice"), "same", {"content": "A preference."})
    episodes.put(("episodes", "alice"), "same", {"content": "An episode."})
    pref, episode = (
        prefs.get(("prefs", "alice"), "same"),
        episodes.get(("episodes", "alice"), "same"),
    )
    assert pref is not None and pref.value == {"content": "A preference."}
    assert episode is not None and episode.value == {"content": "An episode."}


def check_namespaces_the_store_cannot_use_are_refused(mem: TdaiMemory) -> None:
    store = mem.as_store()
    for namespace in [("other", "alice"), ("memories",), ("memories", "al\nice")]:
        with pytest.raises(ScopeError, match="namespace template") as raised:
            store.put(namespace, "k", {"content": "x"})
        assert isinstance(raised.value, InvalidNamespaceError)
        with pytest.raises(InvalidNamespaceError, match="namespace template"):
            store.get(namespace, "k")
    for bad in [("memories", "alice", "a.b"), ("memories", "alice", ""), ("memories", 7)]:
        with pytest.raises(InvalidNamespaceError):  # LangGraph's label rules, also in a batch
            store.batch([PutOp(ALICE, "first", {"content": "x"}), PutOp(bad, "k", {"v": 1})])  # type: ignore[arg-type]
    assert store.get(ALICE, "first") is None  # a refused batch runs none of its operations
    with pytest.raises(ScopeError, match="stops above the user"):
        store.search(("memories",))
    with pytest.raises(InvalidNamespaceError, match="stops above the user"):
        store.search(())
    with pytest.raises(ScopeError, match="namespace template"):
        store.search(("other",))
    assert mem.stats().memories == 0
    agents = mem.as_store(namespace=("users", "{user_id}", "agents", "{agent_id}"))
    agents.put(("users", "alice", "agents", "planner"), "k", {"content": "Planner note."})
    assert mem.get_memory("k", user_id="alice", agent_id="planner") is not None
    assert mem.get_memory("k", user_id="alice") is None
    with pytest.raises(ScopeError, match="stops above the user"):
        agents.search(("users", "alice"))  # the agent is part of the scope
    with pytest.raises(ConfigError, match="user_id"):
        mem.as_store(namespace=("memories", "{agent_id}"))
    with pytest.raises(ConfigError, match="cross_scope"):
        mem.as_store(cross_scope="yes")  # type: ignore[arg-type]


def check_cross_scope_search_is_opt_in(mem: TdaiMemory) -> None:
    store = mem.as_store()
    store.put(ALICE, "a", {"content": "Alice sails on the lake.", "kind": "sport"})
    store.put(BOB, "b", {"content": "Bob sails a catamaran.", "kind": "sport"})
    store.put((*BOB, "garden"), "g", {"content": "Bob grows tomatoes.", "kind": "garden"})
    admin = mem.as_store(cross_scope=True)
    everyone = {(h.namespace, h.key) for h in admin.search(("memories",))}
    assert everyone == {(ALICE, "a"), (BOB, "b"), ((*BOB, "garden"), "g")}
    assert {h.key for h in admin.search((), filter={"kind": "sport"})} == {"a", "b"}
    ranked = admin.search((), query="sails a catamaran", limit=2)
    assert keys(ranked)[0] == "b" and len(ranked) == 2
    assert ranked[0].score is not None and ranked[1].score is not None
    assert ranked[0].score >= ranked[1].score
    pages = [admin.search((), limit=1, offset=i) for i in range(4)]
    assert [keys(p) for p in pages[:3]] == [[h.key] for h in admin.search((), limit=3)]
    assert pages[3] == []
    assert keys(admin.search(ALICE)) == ["a"]  # a prefix that names a user stays in it


def check_list_namespaces(mem: TdaiMemory) -> None:
    store = mem.as_store(namespace=("users", "{user_id}", "{agent_id}"))
    for user, agent in [("alice", "chef"), ("alice", "coach"), ("bob", "chef"), ("carol", "x")]:
        store.put(("users", user, agent), "k", {"content": f"{user} with {agent}."})
    store.put(("users", "alice", "chef", "recipes", "soup"), "s", {"content": "Leek soup."})
    store.put(("users", "alice", "chef", "recipes"), "r", {"content": "Recipes index."})
    mem.add_memory("Shared memory of alice (no agent).", user_id="alice")
    assert store.list_namespaces() == [
        ("users", "alice", "chef"),
        ("users", "alice", "chef", "recipes"),
        ("users", "alice", "chef", "recipes", "soup"),
        ("users", "alice", "coach"),
        ("users", "bob", "chef"),
        ("users", "carol", "x"),
    ]
    assert store.list_namespaces(prefix=("users", "alice", "chef", "recipes")) == [
        ("users", "alice", "chef", "recipes"),
        ("users", "alice", "chef", "recipes", "soup"),
    ]
    assert store.list_namespaces(prefix=("users", "alice"), max_depth=3) == [
        ("users", "alice", "chef"),
        ("users", "alice", "coach"),
    ]
    assert store.list_namespaces(suffix=("chef",)) == [
        ("users", "alice", "chef"),
        ("users", "bob", "chef"),
    ]
    assert store.list_namespaces(suffix=("recipes", "*")) == [
        ("users", "alice", "chef", "recipes", "soup"),
    ]
    assert store.list_namespaces(prefix=("users", "*", "chef")) == [
        ("users", "alice", "chef"),
        ("users", "alice", "chef", "recipes"),
        ("users", "alice", "chef", "recipes", "soup"),
        ("users", "bob", "chef"),
    ]
    assert store.list_namespaces(prefix=("users", "*", "chef"), suffix=("soup",)) == [
        ("users", "alice", "chef", "recipes", "soup"),
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
    store.put(("users", "dave", "y"), "t", {"content": "Short-lived."}, ttl=0.5 / 60)
    assert ("users", "dave", "y") in store.list_namespaces()
    time.sleep(0.7)
    assert ("users", "dave", "y") not in store.list_namespaces()  # expired, swept or not
    shared = mem.as_store()
    assert shared.list_namespaces() == [("memories", "alice")]
    results = store.batch([ListNamespacesOp(max_depth=1), ListNamespacesOp(limit=1)])
    assert results == [[("users",)], [("users", "alice", "chef")]]


# -- search -----------------------------------------------------------------------------------


def check_search_filter_limit_offset(mem: TdaiMemory) -> None:
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

    def found(**kwargs: object) -> list[str]:
        return keys(store.search(ALICE, **kwargs))  # type: ignore[arg-type]

    assert found() == ["swim", "read", "cook", "hike"]  # no query: newest first
    assert found(limit=2) == ["swim", "read"]
    assert found(limit=2, offset=2) == ["cook", "hike"]
    assert found(offset=10) == []
    assert found(limit=0) == []
    assert found(filter={"kind": "hobby"}) == ["read", "hike"]
    assert found(filter={"kind": {"$eq": "hobby"}, "n": {"$gt": 1}}) == ["read"]
    assert found(filter={"n": {"$gte": 2, "$lt": 4}}) == ["read", "cook"]
    assert found(filter={"n": {"$lte": 1}}) == ["hike"]
    assert found(filter={"kind": {"$ne": "hobby"}}) == ["swim", "cook"]
    assert found(filter={"kind": {"$in": ["food", "sport"]}}) == ["swim", "cook"]
    assert found(filter={"kind": {"$nin": ["food", "sport"]}}) == ["read", "hike"]
    assert found(filter={"missing": "x"}) == []
    assert found(query="summer", filter={"kind": "sport"}) == ["swim"]
    assert found(query="hiking in the Alps")[0] == "hike"
    with pytest.raises(ConfigError, match=r"\$regex"):
        store.search(ALICE, filter={"kind": {"$regex": "h.*"}})
    store.put(ALICE, "nested", {"content": "Nested.", "meta": {"a": 1, "b": [1, 2]}, "n": 9})
    assert found(filter={"meta": {"a": 1}}) == ["nested"]  # nested objects match partially
    assert found(filter={"meta": {"b": [1, 2]}}) == ["nested"]
    assert found(filter={"meta": {"b": [2, 1]}}) == []
    assert keys(store.search(BOB)) == ["hike"]  # isolation
    assert store.search(BOB)[0].value["content"].startswith("Bob")


def check_query_search_ranks_every_item(mem: TdaiMemory) -> None:
    store = mem.as_store()
    texts = {
        "k0": "Alice bakes sourdough bread on weekends.",
        "k1": "Alice runs a marathon every spring.",
        "k2": "Alice restores old motorcycles.",
        "k3": "Alice speaks Portuguese and Japanese.",
        "k4": "Alice keeps a vegetable garden.",
    }
    for key, text in texts.items():
        store.put(ALICE, key, {"content": text})
    store.put(ALICE, "hidden", {"content": "Alice bakes bread too."}, index=False)
    query = "zebra quantum harpsichord"  # matches nothing well: no floor drops weak matches
    full = store.search(ALICE, query=query, limit=10)
    assert {h.key for h in full[:5]} == set(texts)
    assert (full[5].key, full[5].score) == ("hidden", None)  # unranked items come last
    scores = [h.score for h in full[:5]]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    emb = mem.embeddings
    assert emb is not None
    for hit in full[:5]:  # the score is the cosine similarity, as LangGraph's stores return
        assert hit.score == pytest.approx(cosine(emb, query, texts[hit.key]), abs=1e-5)
    paged = [
        h.key
        for offset in (0, 2, 4)
        for h in store.search(ALICE, query=query, limit=2, offset=offset)
    ]
    assert paged == keys(full)  # pages of one fixed order
    assert keys(store.search(ALICE, query=query, limit=5)) == keys(full[:5])  # hidden not needed
    store.put(ALICE, "k5", {"content": "Alice collects stamps."})
    again = {h.key: h.score for h in store.search(ALICE, query=query, limit=10)}
    assert {k: again[k] for k in texts} == {h.key: h.score for h in full[:5]}  # comparable
    best = store.search(ALICE, query="sourdough bread on weekends", limit=1)
    assert keys(best) == ["k0"]


def check_index_fields_and_index_false(mem: TdaiMemory) -> None:
    store = mem.as_store(index={"fields": ["title", "body.text"]})
    emb = mem.embeddings
    assert emb is not None
    store.put(ALICE, "doc", {"title": "Tokyo trip", "body": {"text": "ramen tour"}, "n": 1})
    rec = mem.get_memory("doc", user_id="alice")
    assert rec is not None and rec.content == "Tokyo trip\nramen tour"
    store.put(ALICE, "one", {"title": "ramen tour", "n": 2})  # one indexed text
    # an item with several indexed texts is scored by the best of them
    hits = {h.key: h.score for h in store.search(ALICE, query="ramen tour")}
    assert hits["doc"] == pytest.approx(1.0, abs=1e-3)
    assert hits["one"] == pytest.approx(1.0, abs=1e-3)
    (top,) = store.search(ALICE, query="Tokyo trip", limit=1)
    assert top.key == "doc" and top.score == pytest.approx(1.0, abs=1e-3)
    joined = cosine(emb, "ramen tour", "Tokyo trip\nramen tour")
    assert joined < 0.99  # what scoring by the joined text would have given
    store.put(ALICE, "other", {"title": "ignored", "notes": "sushi bar"}, index=["notes"])
    assert keys(store.search(ALICE, query="sushi bar", limit=1)) == ["other"]
    store.put(ALICE, "secret", {"content": "Alice's locker code is 4711."}, index=False)
    time.sleep(0.002)
    store.put(ALICE, "untitled", {"nothing": "indexed here"})  # no text at the fields
    assert store.get(ALICE, "secret") is not None
    ranked = store.search(ALICE, query="locker code 4711", limit=10)
    assert [h.key for h in ranked if h.score is None] == ["untitled", "secret"]  # newest first
    assert all(h.score is not None for h in ranked[:3])
    assert keys(store.search(ALICE, query="locker code 4711", limit=3)) == keys(ranked[:3])
    assert "secret" in keys(store.search(ALICE))  # listed without a query
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


# -- TTL, batches, async ----------------------------------------------------------------------


def check_ttl_expiry_and_refresh(mem: TdaiMemory) -> None:
    store = mem.as_store()
    store.put(ALICE, "short", {"content": "Short-lived note about parking."}, ttl=1.2 / 60)
    store.put(ALICE, "kept", {"content": "Lasting note about parking."})
    assert store.get(ALICE, "short", refresh_ttl=False) is not None
    time.sleep(1.4)
    assert store.get(ALICE, "short", refresh_ttl=False) is None
    assert keys(store.search(ALICE, query="parking note")) == ["kept"]
    assert keys(store.search(ALICE)) == ["kept"]
    sweep_all(mem)
    store.put(ALICE, "short", {"content": "Written again after it expired."})
    again = store.get(ALICE, "short")
    assert again is not None and again.value == {"content": "Written again after it expired."}

    store.put(ALICE, "renewed", {"content": "Renewed zeppelin reminder."}, ttl=2.0 / 60)
    written = store.get(ALICE, "renewed", refresh_ttl=False)
    assert written is not None
    time.sleep(1.2)
    refreshed = store.get(ALICE, "renewed")  # refresh_on_read defaults to True
    assert refreshed is not None and refreshed.updated_at == written.updated_at
    time.sleep(1.2)  # past the first expiry, within the renewed one
    assert store.get(ALICE, "renewed", refresh_ttl=False) is not None
    hits = store.search(ALICE, query="zeppelin reminder", limit=1)  # a search refreshes too
    assert keys(hits) == ["renewed"]

    default = mem.as_store(ttl={"default_ttl": 1.0 / 60, "refresh_on_read": False})
    default.put(BOB, "d", {"content": "Default TTL note."})
    assert default.get(BOB, "d") is not None
    time.sleep(1.2)
    assert default.get(BOB, "d") is None
    assert default.search(BOB) == []


def check_batch_and_abatch_keep_the_order(mem: TdaiMemory) -> None:
    store = mem.as_store()
    store.put((*ALICE, "x"), "a", {"content": "Item a.", "tag": "t"})
    ops = [
        SearchOp(ALICE, filter={"tag": "t"}),
        PutOp((*ALICE, "y"), "b", {"content": "Item b.", "tag": "t"}),
        GetOp((*ALICE, "y"), "b"),
        ListNamespacesOp(),
        GetOp(ALICE, "missing"),
        SearchOp(ALICE, filter={"tag": "t"}),
    ]
    for results in (store.batch(ops), asyncio.run(store.abatch(ops))):
        assert len(results) == 6
        first, put, got, listed, missing, last = results
        assert isinstance(first, list) and "a" in keys(first)
        assert put is None and missing is None
        assert isinstance(got, Item) and got.value == {"content": "Item b.", "tag": "t"}
        assert listed == [(*ALICE, "x"), (*ALICE, "y")]
        assert isinstance(last, list) and set(keys(last)) == {"a", "b"}


def check_async_operations(mem: TdaiMemory) -> None:
    store = mem.as_store()

    async def run() -> None:
        await store.aput(ALICE, "a", {"content": "Async note about kites."})
        item = await store.aget(ALICE, "a")
        assert item is not None and item.value["content"] == "Async note about kites."
        hits = await store.asearch(ALICE, query="kites")
        assert keys(hits) == ["a"]
        assert await store.alist_namespaces() == [ALICE]
        many = await asyncio.gather(
            *(store.aput((*ALICE, "n"), f"k{i}", {"content": f"Note {i}."}) for i in range(8))
        )
        assert many == [None] * 8
        assert len(await store.asearch((*ALICE, "n"), limit=20)) == 8
        await store.adelete(ALICE, "a")
        assert await store.aget(ALICE, "a") is None

    asyncio.run(run())


# -- read-your-writes (each opens its own memory) ---------------------------------------------


def check_store_search_reads_its_writes_with_vectors(open_memory: OpenMemory) -> None:
    with held(open_memory) as (mem, emb):
        store = mem.as_store()
        texts = {"bees": "Alice keeps bees on her roof.", "cello": "Alice plays the cello."}
        for key, text in texts.items():
            store.put(ALICE, key, {"content": text})
        assert mem.stats().pending_vectors == 2  # the upkeep has not embedded them
        query = "beekeeping on the roof"
        hits = store.search(ALICE, query=query)
        assert keys(hits) == ["bees", "cello"]
        for hit in hits:  # ranked by their vectors, not by words alone
            assert hit.score == pytest.approx(cosine(emb, query, texts[hit.key]), abs=1e-5)
        assert mem.stats().pending_vectors == 0


def check_retriever_reads_its_writes_with_vectors(open_memory: OpenMemory) -> None:
    with held(open_memory) as (mem, _):
        mem.add_memory("Alice is allergic to penicillin.", type="persona", user_id="alice")
        assert mem.stats().pending_vectors == 1
        (doc,) = mem.as_retriever(user_id="alice", k=1).invoke("Which drug allergy does she have?")
        assert doc.page_content == "Alice is allergic to penicillin."
        assert doc.metadata["embedding_score"] is not None
        assert mem.stats().pending_vectors == 0


def check_recall_does_not_wait_for_vectors(open_memory: OpenMemory) -> None:
    with held(open_memory) as (mem, _):
        mem.add_memory("Alice is allergic to penicillin.", type="persona", user_id="alice")
        result = mem.recall("Is she allergic to penicillin?", user_id="alice")
        assert result is not None
        assert (result.strategy, result.pending_vectors) == ("keyword", 1)  # told honestly
        assert mem.stats().pending_vectors == 1  # recall embedded nothing
        mem.search_memories("penicillin allergy", user_id="alice", wait_for_vectors=True)
        after = mem.recall("Is she allergic to penicillin?", user_id="alice")
        assert after is not None and (after.strategy, after.pending_vectors) == ("hybrid", 0)


ALL_CHECKS = [
    check_put_get_overwrite_delete,
    check_memories_written_directly_are_items,
    check_items_written_before_namespaces_were_kept,
    check_values_are_validated,
    check_namespaces_of_any_depth,
    check_template_literals_are_part_of_the_identity,
    check_namespaces_the_store_cannot_use_are_refused,
    check_cross_scope_search_is_opt_in,
    check_list_namespaces,
    check_search_filter_limit_offset,
    check_query_search_ranks_every_item,
    check_index_fields_and_index_false,
    check_items_are_recalled_in_their_scope,
    check_ttl_expiry_and_refresh,
    check_batch_and_abatch_keep_the_order,
    check_async_operations,
]
"""Every check on an open memory, for the backends' test modules to parametrize over."""

OPEN_CHECKS = [
    check_store_search_reads_its_writes_with_vectors,
    check_retriever_reads_its_writes_with_vectors,
    check_recall_does_not_wait_for_vectors,
]
"""Every check that opens its own memory (with `OpenMemory`)."""
