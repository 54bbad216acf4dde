"""`MemoryHost`: the part of the facade that the adapters use, as a typed interface.

The adapters (the turn core `_turn`, the middleware, the tools, the LCEL runnables, the legacy
executor wrapper, the retriever) are built by `TdaiMemory` and handed the memory they serve. They
depend on this interface instead of on `memory.py`, so the facade imports its adapters and no
adapter imports the facade back: the import graph has no circle through `TdaiMemory`. The
interface names exactly what the adapters call; `TdaiMemory` satisfies it (checked by mypy in
`memory.py`). The members without an `a` twin or a place in the docs (`capture_turn`,
`memory_manager`, `check_open`, `store_breaker`) are for the adapters, not for applications.

`StoreHost` is the same for the LangGraph store (`graph_store.TdaiStore`): the public facade
methods it calls. The store, the query search and the embedding calls it also needs are handed
to it by name when `TdaiMemory.as_store` builds it, not reached through the facade's private
attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import datetime as dt

    from langchain_tdai_recall._runtime.breaker import StoreBreaker
    from langchain_tdai_recall.config import TdaiConfig
    from langchain_tdai_recall.types import (
        MemoryHit,
        MemoryRecord,
        MemoryType,
        MessageHit,
        RecallResult,
        SceneBlock,
        SceneInfo,
        Scope,
    )

__all__ = ["ManageWriter", "MemoryHost", "StoreHost"]


class ManageWriter(Protocol):
    """The writer behind `tdai_manage_memory` (`formation.manager.MemoryManager`)."""

    def run(
        self, scope: Scope, session_key: str, args: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """Apply one validated tool call in `scope`; returns the model's text and the artifact."""
        ...


@runtime_checkable
class MemoryHost(Protocol):
    """What the adapters call on the memory they serve (`TdaiMemory` is the implementation)."""

    @property
    def config(self) -> TdaiConfig:
        """The store's settings."""
        ...

    @property
    def store_breaker(self) -> StoreBreaker:
        """The breaker that skips store calls while the store does not answer in time."""
        ...

    def check_open(self) -> None:
        """Raise `StoreClosedError` when the memory is closed."""
        ...

    def capture_turn(
        self, messages: Sequence[Mapping[str, str]], *, scope: Scope, session_key: str
    ) -> None:
        """Hand a finished turn's messages to the background writer; never raises or blocks."""
        ...

    def memory_manager(self) -> ManageWriter:
        """The writer behind `tdai_manage_memory` (built once, on first use)."""
        ...

    def recall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        system_prompt: str | None = None,
        tools_guide: bool | Sequence[str] = True,
    ) -> RecallResult | None:
        """Recall memories for a turn (see `TdaiMemory.recall`)."""
        ...

    async def arecall(
        self,
        user_text: str | Sequence[object] | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        system_prompt: str | None = None,
        tools_guide: bool | Sequence[str] = True,
    ) -> RecallResult | None:
        """Async version of `recall`."""
        ...

    def search_memories(
        self,
        query: str,
        *,
        limit: int = 5,
        type: MemoryType | None = None,
        scene: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_after: dt.datetime | dt.date | str | None = None,
        created_before: dt.datetime | dt.date | str | None = None,
        active_after: dt.datetime | dt.date | str | None = None,
        active_before: dt.datetime | dt.date | str | None = None,
        wait_for_vectors: bool = False,
    ) -> list[MemoryHit]:
        """Search the scope's memories (see `TdaiMemory.search_memories`)."""
        ...

    async def asearch_memories(
        self,
        query: str,
        *,
        limit: int = 5,
        type: MemoryType | None = None,
        scene: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_after: dt.datetime | dt.date | str | None = None,
        created_before: dt.datetime | dt.date | str | None = None,
        active_after: dt.datetime | dt.date | str | None = None,
        active_before: dt.datetime | dt.date | str | None = None,
        wait_for_vectors: bool = False,
    ) -> list[MemoryHit]:
        """Async version of `search_memories`."""
        ...

    def search_conversations(
        self,
        query: str,
        *,
        limit: int = 5,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
    ) -> list[MessageHit]:
        """Search the scope's messages (see `TdaiMemory.search_conversations`)."""
        ...

    async def asearch_conversations(
        self,
        query: str,
        *,
        limit: int = 5,
        session_key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        min_score: float | None = None,
    ) -> list[MessageHit]:
        """Async version of `search_conversations`."""
        ...

    def list_scenes(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[SceneInfo]:
        """The scope's scenes, highest heat first."""
        ...

    async def alist_scenes(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[SceneInfo]:
        """Async version of `list_scenes`."""
        ...

    def read_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """One scene of the scope by name; `None` if absent."""
        ...

    async def aread_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """Async version of `read_scene`."""
        ...


@runtime_checkable
class StoreHost(Protocol):
    """What the LangGraph store calls on its memory (`TdaiMemory` is the implementation)."""

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with `read_only=True`."""
        ...

    def check_open(self) -> None:
        """Raise `StoreClosedError` when the memory is closed."""
        ...

    def delete_memory(
        self, id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete one memory of the scope; returns whether it existed."""
        ...

    def add_memories(
        self,
        records: Iterable[MemoryRecord | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[MemoryRecord]:
        """Store memories in one scope (see `TdaiMemory.add_memories`)."""
        ...
