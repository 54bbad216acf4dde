"""The bounded cache of a process's derived indexes: least recently used out, by bytes (issue 23).

A process serving many users would otherwise keep the index of every scope it ever searched
(about 80 KiB for a user with 20 memories, so gigabytes after 100k users). `ScopeCache` keeps
them within a byte budget (`store.index_cache_mib`): when the estimated bytes of the cached
indexes pass it, the least recently used ones are released. The most recently used one is always
kept, so a scope larger than the whole budget (a million memories) is not rebuilt at every
search while it is the one being served. A released index is rebuilt from the
rows (or restored from its snapshot) on its next use, so nothing is lost and, since every use
catches an index up with the rows first, nothing stale is served.

Pinning. `DerivedIndexes` pins an entry while it builds or catches it up, and the eviction skips
pinned entries. An index a search still holds after that is only unlisted by an eviction, never
torn down: the search goes on with it, and the index stays reachable through a weak reference, so
a use of the same scope in the meantime takes that very object back (`lookup`) instead of
building a second copy. Its memory is freed when the last holder lets it go.

Not thread-safe: `DerivedIndexes` calls it under its lock.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import IndexCacheStats

__all__ = [
    "DEFAULT_INDEX_CACHE_MIB",
    "MAX_INDEX_CACHE_MIB",
    "MIB",
    "SCOPE_KEYS_KEPT",
    "SCOPE_SIDE_CACHE",
    "LruDict",
    "ScopeCache",
    "budget_bytes",
]

MIB: Final = 1 << 20
DEFAULT_INDEX_CACHE_MIB: Final = 512
"""The default budget: with about 80 KiB per small scope, some 6,500 users stay resident, and
a large scope (1M memories, about 1 GiB) is still served, alone, past it."""
MAX_INDEX_CACHE_MIB: Final = 1 << 30
"""Largest budget accepted (a mebibyte count this large means a unit mistake)."""


def budget_bytes(mib: object, field: str = "index_cache_mib") -> int | None:
    """The budget in bytes for `mib` mebibytes (`None`: unbounded).

    Raises:
        ConfigError: If `mib` is not `None` nor a number in 0..2**30 (0 keeps nothing cached
            beyond the searches in flight).
    """
    if mib is None:
        return None
    if (
        isinstance(mib, bool)
        or not isinstance(mib, int | float)
        or not 0 <= mib <= MAX_INDEX_CACHE_MIB  # False for NaN too
    ):
        msg = (
            f"{field} must be a number of MiB from 0 to {MAX_INDEX_CACHE_MIB}, or None for an "
            f"unbounded index cache; got {mib!r} (the default is {DEFAULT_INDEX_CACHE_MIB})"
        )
        raise ConfigError(msg)
    return int(mib * MIB)


SCOPE_KEYS_KEPT: Final = 65_536
"""Scope-to-id lookups a store keeps (about 200 bytes each; an id never changes)."""
SCOPE_SIDE_CACHE: Final = 4_096
"""Per-scope renderings a store keeps besides the indexes (the persona and scene list)."""

_K = TypeVar("_K")
_V = TypeVar("_V")


class LruDict(OrderedDict[_K, _V]):
    """A dict of at most `maxsize` entries: a read marks an entry used, the least used goes.

    For a store's small per-scope side caches (scope ids, rendered documents), so that they do
    not grow with every user served. Safe to call from several threads (a race at worst drops
    an entry, which the owner recomputes).
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get(self, key: _K, default: _V | None = None) -> _V | None:  # type: ignore[override]
        """The value of `key`, now the most recently used, or `default`."""
        try:
            value = self[key]
            self.move_to_end(key)
        except KeyError:
            return default
        return value

    def __setitem__(self, key: _K, value: _V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            try:
                self.popitem(last=False)
            except KeyError:
                break


@dataclass(slots=True)
class _Entry(Generic[_V]):
    value: _V
    nbytes: int
    pins: int = 0


class ScopeCache(Generic[_K, _V]):
    """Values (derived indexes) by key, least recently used released first past `budget` bytes.

    Args:
        budget: Bytes the cached values may take together, or `None` for no bound.
    """

    def __init__(self, budget: int | None) -> None:
        self.budget = budget
        self._entries: OrderedDict[_K, _Entry[_V]] = OrderedDict()
        self._retired: weakref.WeakValueDictionary[_K, _V] = weakref.WeakValueDictionary()
        """Released values some caller may still hold: taken back instead of rebuilt."""
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[_K]:
        """The cached keys, least recently used first."""
        return list(self._entries)

    def scopes(self) -> int:
        """Distinct first parts of the cached (scope, layer) keys."""
        return len({key[0] for key in self._entries if isinstance(key, tuple)})

    def values(self) -> list[_V]:
        """The cached values, least recently used first."""
        return [entry.value for entry in self._entries.values()]

    def lookup(self, key: _K, *, pin: bool) -> _V | None:
        """The value of `key` (now the most recently used, a hit), or `None`.

        A value released while a caller still held it is taken back into the cache. A miss is
        counted by the `add` of the value built in its place.
        """
        entry = self._entries.get(key)
        if entry is None:
            value = self._retired.pop(key, None)
            if value is None:
                return None
            entry = self._entries[key] = _Entry(value, 0)
        else:
            self._entries.move_to_end(key)
        self._hits += 1
        if pin:
            entry.pins += 1
        return entry.value

    def sized(self, key: _K) -> bool:
        """Whether `key` is cached with a recorded size (a value taken back has none yet)."""
        entry = self._entries.get(key)
        return entry is not None and entry.nbytes > 0

    def add(self, key: _K, value: _V, nbytes: int, *, pin: bool) -> None:
        """Cache a value just built as the most recently used (pinned when `pin`): a miss."""
        self.discard(key)
        self._misses += 1
        self._entries[key] = _Entry(value, nbytes, 1 if pin else 0)
        self._bytes += nbytes
        self._evict()

    def release(self, key: _K, nbytes: int | None) -> None:
        """Unpin `key`, recording its size when `nbytes` is given, then keep within budget."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.pins = max(entry.pins - 1, 0)
        if nbytes is not None:
            self._bytes += nbytes - entry.nbytes
            entry.nbytes = nbytes
        self._evict()

    def discard(self, key: _K) -> None:
        """Forget `key` entirely (erasure, a dropped store): it is neither cached nor taken back."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
        self._retired.pop(key, None)

    def clear(self) -> None:
        """Forget every value."""
        self._entries.clear()
        self._retired.clear()
        self._bytes = 0

    def resize(self, budget: int | None) -> None:
        """Set a new budget and release what no longer fits."""
        self.budget = budget
        self._evict()

    def _evict(self) -> None:
        budget = self.budget
        if budget is None or self._bytes <= budget:
            return
        newest = next(reversed(self._entries), None)
        for key in [k for k, e in self._entries.items() if not e.pins and k != newest]:
            entry = self._entries.pop(key)
            self._bytes -= entry.nbytes
            self._evictions += 1
            self._retired[key] = entry.value
            if self._bytes <= budget:
                return

    def stats(self) -> IndexCacheStats:
        """Entries, bytes, budget and the hit, miss and eviction counts so far."""
        return IndexCacheStats(
            entries=len(self._entries),
            bytes=self._bytes,
            budget=self.budget,
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
        )
