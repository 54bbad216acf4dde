"""Conformance of the bounded index cache (issue 23): eviction loses nothing, serves nothing stale.

With a budget of 1 KiB every scope's index is released as soon as no search or write holds it,
so each use rebuilds it, takes it back from a search still holding it, or races another thread
doing either. Writer threads add and delete memories of their users and check each change at the
next search; searcher threads meanwhile read every user. At the end every user holds exactly
what was written, and the cache holds only the most recently used index (nothing fits).
"""

from __future__ import annotations

import threading

from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.testing.conformance._shared import BackendFactory, open_memory

_USERS = 6
_WRITES = 12
_BUDGET_MIB = 1 / 1024
"""1 KiB: smaller than any index, so every index is evicted once no one holds it."""


def _text(user: int, i: int) -> str:
    return f"The user visited place zq{user}x{i} on a trip."


def _ids(memory: TdaiMemory, user: int, query: str) -> set[str]:
    hits = memory.search_memories(query, limit=100, user_id=f"c{user}")
    return {hit.id for hit in hits}


class IndexCacheTests:
    """The index cache releases and rebuilds scopes under load without losing or staling data."""

    def test_eviction_under_concurrent_searches_and_writes_loses_nothing(
        self, factory: BackendFactory
    ) -> None:
        """A 1 KiB budget, writers and searchers at once: every search is exact and scoped."""
        store = factory.open()
        store.set_index_cache_budget(_BUDGET_MIB)
        errors: list[str] = []
        done = threading.Event()
        with open_memory(store) as memory:

            def write(user: int) -> None:
                try:
                    for i in range(_WRITES):
                        memory.add_memory(_text(user, i), id=f"c{user}-{i}", user_id=f"c{user}")
                        if f"c{user}-{i}" not in _ids(memory, user, f"zq{user}x{i}"):
                            errors.append(f"user {user}: write {i} not seen by the next search")
                        if i % 3 == 2:
                            memory.delete_memory(f"c{user}-{i - 1}", user_id=f"c{user}")
                            if f"c{user}-{i - 1}" in _ids(memory, user, f"zq{user}x{i - 1}"):
                                errors.append(f"user {user}: deleted {i - 1} still found")
                except Exception as exc:  # reported by the test
                    errors.append(f"writer {user}: {exc!r}")

            def search(seed: int) -> None:
                try:
                    k = seed
                    while not done.is_set():
                        user = k % _USERS
                        k += 1
                        found = _ids(memory, user, "visited place trip")
                        strays = [i for i in found if not i.startswith(f"c{user}-")]
                        if strays:
                            errors.append(f"user {user}: another scope's hits {strays}")
                        memory.recall("where did I travel", user_id=f"c{user}")
                except Exception as exc:  # reported by the test
                    errors.append(f"searcher {seed}: {exc!r}")

            writers = [threading.Thread(target=write, args=(u,)) for u in range(_USERS)]
            searchers = [threading.Thread(target=search, args=(s,)) for s in range(3)]
            for thread in [*searchers, *writers]:
                thread.start()
            for thread in writers:
                thread.join(timeout=300)
            done.set()
            for thread in searchers:
                thread.join(timeout=60)
            assert errors == []
            for user in range(_USERS):
                kept = {
                    f"c{user}-{i}" for i in range(_WRITES) if not (i % 3 == 1 and i + 1 < _WRITES)
                }
                assert _ids(memory, user, "visited place trip") == kept
                listed = {m.id for m in memory.list_memories(user_id=f"c{user}")}
                assert listed == kept
            stats = store.index_cache_stats()
            assert stats is not None
            assert stats.budget == 1024
            assert stats.evictions > 0
            assert stats.entries <= 1  # only the most recently used is kept: nothing fits
            assert stats.bytes <= 64 * 1024
            shown = memory.stats().index_cache
            assert shown is not None
            assert shown.budget == 1024

    def test_an_unbounded_cache_keeps_every_scope(self, factory: BackendFactory) -> None:
        """`None` keeps every index; a later budget releases the least recently used first."""
        store = factory.open()
        store.set_index_cache_budget(None)
        with open_memory(store) as memory:
            for user in range(4):
                memory.add_memory(_text(user, 0), id=f"c{user}-0", user_id=f"c{user}")
                assert _ids(memory, user, f"zq{user}x0") == {f"c{user}-0"}
            unbounded = store.index_cache_stats()
            assert unbounded is not None
            assert unbounded.budget is None
            assert unbounded.entries >= 4
            assert unbounded.evictions == 0
            store.set_index_cache_budget(_BUDGET_MIB)
            bounded = store.index_cache_stats()
            assert bounded is not None
            assert bounded.entries == 1  # the most recently used (user 3's) is kept
            assert bounded.evictions == unbounded.entries - 1
            for user in range(4):  # rebuilt from the rows
                assert _ids(memory, user, f"zq{user}x0") == {f"c{user}-0"}
