"""The bounded index cache (issue 23): LRU by bytes, pins, taking back, budget settings."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from langchain_tdai_recall import IndexCacheStats, TdaiConfig, TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index.cache import (
    MIB,
    SCOPE_KEYS_KEPT,
    SCOPE_SIDE_CACHE,
    LruDict,
    ScopeCache,
    budget_bytes,
)
from langchain_tdai_recall.stores.local.store import MemoryStore
from langchain_tdai_recall.testing import HashEmbeddings


class _Value:
    """A weak-referenceable cached value."""


def test_least_recently_used_is_released_first() -> None:
    cache: ScopeCache[str, _Value] = ScopeCache(250)
    values = {k: _Value() for k in "abc"}
    for key in "abc":
        cache.add(key, values[key], 100, pin=False)
    assert cache.keys() == ["b", "c"]  # a was the least recently used
    assert cache.lookup("b", pin=False) is values["b"]
    cache.add("d", _Value(), 100, pin=False)
    assert cache.keys() == ["b", "d"]
    stats = cache.stats()
    assert (stats.entries, stats.bytes, stats.budget, stats.evictions) == (2, 200, 250, 2)


def test_a_pinned_entry_is_never_released() -> None:
    cache: ScopeCache[str, _Value] = ScopeCache(100)
    held = _Value()
    cache.add("held", held, 0, pin=True)
    cache.add("other", _Value(), 0, pin=False)
    cache.release("held", 500)  # unpinned, over budget, not the newest: released
    assert cache.keys() == ["other"]
    assert cache.lookup("held", pin=True) is held  # taken back while the caller holds it
    cache.add("big", _Value(), 500, pin=False)
    assert cache.keys() == ["held", "big"]  # the pinned one stays, the unpinned older one goes
    cache.release("held", 50)
    assert cache.keys() == ["big"]
    assert cache.stats().bytes == 500  # the newest is kept even past the budget


def test_a_released_value_nobody_holds_is_rebuilt() -> None:
    cache: ScopeCache[str, _Value] = ScopeCache(0)
    cache.add("a", _Value(), 10, pin=False)
    cache.add("b", _Value(), 10, pin=False)
    gc.collect()
    assert cache.keys() == ["b"]
    assert cache.lookup("a", pin=False) is None
    assert cache.stats().misses == 2  # the adds: values built


def test_discard_forgets_a_held_value_too() -> None:
    cache: ScopeCache[str, _Value] = ScopeCache(0)
    held = _Value()
    cache.add("a", held, 10, pin=False)
    cache.add("b", _Value(), 10, pin=False)  # "a" is released, still held here
    cache.discard("a")
    assert cache.lookup("a", pin=False) is None  # an erased scope is never taken back


@pytest.mark.parametrize("bad", [-1, "512", True, float("nan"), float("inf"), 2**31])
def test_a_bad_budget_names_the_field_the_value_and_the_fix(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"index_cache_mib .* None for an unbounded") as info:
        budget_bytes(bad)
    assert repr(bad) in str(info.value)
    with pytest.raises(ConfigError, match="index_cache_mib"):
        MemoryStore(None, index_cache_mib=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, "lots", float("inf")])
def test_a_bad_configured_budget_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"store\.index_cache_mib"):
        TdaiConfig.from_dict({"store": {"index_cache_mib": bad}})


def test_budget_units() -> None:
    assert budget_bytes(None) is None
    assert budget_bytes(0) == 0
    assert budget_bytes(1.5) == MIB + MIB // 2
    assert TdaiConfig().store.index_cache_mib == 512
    assert TdaiConfig.from_dict({"store": {"indexCacheMib": None}}).store.index_cache_mib is None


def _fill(memory: TdaiMemory, users: int) -> None:
    for user in range(users):
        memory.add_memory(f"The user likes the colour c{user}.", id=f"m{user}", user_id=f"u{user}")


def test_the_configured_budget_bounds_a_store_built_by_the_config(tmp_path: Path) -> None:
    config = {"store": {"index_cache_mib": 0.05}}  # about 52 KB: a few small scopes
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        _fill(memory, 30)
        for user in range(30):
            assert [h.id for h in memory.search_memories(f"c{user}", user_id=f"u{user}")] == [
                f"m{user}"
            ]
        stats = memory.stats().index_cache
        assert isinstance(stats, IndexCacheStats)
        assert stats.budget == int(0.05 * MIB)
        assert 0 < stats.bytes <= stats.budget
        assert 0 < stats.entries < 30
        assert stats.evictions > 0
        assert stats.misses >= 30
        before = stats.hits
        memory.search_memories("c29", user_id="u29")  # the most recent scope is still held
        after = memory.stats().index_cache
        assert after is not None
        assert after.hits == before + 1
        assert after.misses == stats.misses


def test_a_store_object_keeps_its_budget_unless_the_config_sets_one() -> None:
    own = MemoryStore(None, index_cache_mib=3)
    with TdaiMemory.open(own, embeddings=None) as memory:
        stats = memory.stats().index_cache
        assert stats is not None
        assert stats.budget == 3 * MIB
    store = MemoryStore(None, index_cache_mib=3)
    config = {"store": {"index_cache_mib": None}}
    with TdaiMemory.open(store, embeddings=None, config=config) as memory:
        stats = memory.stats().index_cache
        assert stats is not None
        assert stats.budget is None


def test_concurrent_first_uses_of_one_scope_build_it_once(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(dims=64)) as memory:
        _fill(memory, 1)
        memory.close()
    store = MemoryStore(tmp_path)
    with TdaiMemory.open(store, embeddings=HashEmbeddings(dims=64)) as memory:
        barrier = threading.Barrier(4)

        def search() -> None:
            barrier.wait()
            memory.search_memories("c0", user_id="u0")

        threads = [threading.Thread(target=search) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = store.index_cache_stats()
        assert stats is not None
        assert stats.misses == 1  # one build; the other threads waited for it
        assert stats.hits == 3
        assert stats.entries == 1


def test_side_caches_are_bounded() -> None:
    lru: LruDict[int, int] = LruDict(3)
    for key in range(3):
        lru[key] = key
    assert lru.get(0) == 0  # 0 is now the most recently used
    lru[3] = 3
    assert list(lru) == [2, 0, 3]  # 1 was the least recently used
    assert len(lru) == 3
    assert lru.get(99, -1) == -1


def test_a_store_keeps_bounded_scope_keys_and_contexts(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    with TdaiMemory.open(store, embeddings=None) as memory:
        _fill(memory, 5)
        for user in range(5):
            memory.recall("colour", user_id=f"u{user}")
        scope_keys = store._db._scope_cache
        contexts = store.documents._context_cache  # type: ignore[attr-defined]
        assert isinstance(scope_keys, LruDict)
        assert isinstance(contexts, LruDict)
        assert (scope_keys.maxsize, contexts.maxsize) == (SCOPE_KEYS_KEPT, SCOPE_SIDE_CACHE)
        assert len(contexts) == 5
