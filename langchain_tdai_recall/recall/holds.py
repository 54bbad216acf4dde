"""Profiles held for a conversation, so the system message stays in the provider's cache.

A provider caches a prompt's prefix: the system message and everything after it up to the first
byte that differs. The user profile is part of the system message, and with memory formation on,
every formation window that adds a memory would rewrite it, and with it the cached prefix of the
whole conversation so far. So the profile a session (`session_key`) was first shown is *held*:
later recalls of that session show the same profile lines, while the memories added meanwhile
reach the model through the memory block, which `recall.gate` lets through when the message is
about them (the engine hands it the rows the held profile leaves out: its *held-out* rows).

A hold ends, and the next recall chooses the profile afresh, when

- the session ends: `TdaiMemory.end_session()`, or no recall of it for
  `recall.profile_hold_seconds` (by then a provider's cache has lapsed too);
- the pinned memories change (the system message changes then anyway);
- a memory of the held profile is deleted, expires, or is edited (a held profile never shows
  text the store no longer holds).

Holds live in the process (at most `MAX_SESSIONS`, least recently used dropped first): a
restarted process chooses each session's profile afresh once. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final

from langchain_tdai_recall.types import MemoryRecord, Scope

__all__ = ["MAX_SESSIONS", "HeldProfile", "ProfileHolds"]

MAX_SESSIONS: Final = 4096
"""Most sessions whose profile is held at once (each holds a few hundred tokens of text)."""


@dataclass(frozen=True, slots=True)
class HeldProfile:
    """A profile as chosen at one moment, with what tells whether it still holds."""

    records: tuple[MemoryRecord, ...]
    """The profile's memories, in profile order."""
    lines: tuple[str, ...]
    """Their lines."""
    rows: tuple[tuple[int, str], ...]
    """(row reference, last write time) of each memory: a held profile whose rows are gone or
    were rewritten is not shown again."""
    pinned: frozenset[int]
    """Row references of the standing rules and pinned memories it was chosen beside."""

    @property
    def refs(self) -> frozenset[int]:
        """Row references of the profile's memories."""
        return frozenset(rowid for rowid, _ in self.rows)


class ProfileHolds:
    """The profile each live session was first shown (see the module docstring)."""

    def __init__(
        self, *, max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[Scope, str, Hashable], tuple[float, HeldProfile]] = (
            OrderedDict()
        )

    def choose(
        self,
        scope: Scope,
        session_key: str,
        variant: Hashable,
        fresh: HeldProfile,
        *,
        hold_seconds: float,
        still_valid: Callable[[HeldProfile], bool],
    ) -> HeldProfile:
        """The profile this session shows now: the held one while it holds, else `fresh`.

        `variant` names what else shapes the lines (language, budget); `still_valid` checks the
        held profile's rows against the store.
        """
        key = (scope, session_key, variant)
        now = self._clock()
        with self._lock:
            entry = self._held.pop(key, None)
        if entry is not None:
            seen, held = entry
            if (
                now - seen <= hold_seconds
                and held.pinned == fresh.pinned
                and (held.rows == fresh.rows or still_valid(held))
            ):
                self._put(key, now, held)
                return held
        self._put(key, now, fresh)
        return fresh

    def _put(self, key: tuple[Scope, str, Hashable], now: float, held: HeldProfile) -> None:
        with self._lock:
            self._held[key] = (now, held)
            while len(self._held) > self._max:
                self._held.popitem(last=False)

    def end(self, scope: Scope, session_key: str | None = None) -> None:
        """End the holds of one session of `scope` (every session when `session_key` is None)."""
        with self._lock:
            for key in [
                k
                for k in self._held
                if k[0] == scope and (session_key is None or k[1] == session_key)
            ]:
                del self._held[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)
