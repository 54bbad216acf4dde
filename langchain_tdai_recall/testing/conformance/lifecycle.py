"""Conformance of a store's lifecycle: a closed store refuses every call; the async twins."""

from __future__ import annotations

import pytest

from langchain_tdai_recall.errors import (
    StoreClosedError,
)
from langchain_tdai_recall.testing.conformance._shared import (
    _CREATED,
    ALICE,
    BackendFactory,
)
from langchain_tdai_recall.types import (
    MemoryRecord,
    Scope,
)


class LifecycleTests:
    """Closing, and the async twins (a part of the suite)."""

    # -- lifecycle -----------------------------------------------------------------------------

    def test_a_closed_store_refuses_every_call(self, factory: BackendFactory) -> None:
        """After `close()` every call raises `StoreClosedError`."""
        store = factory.open()
        store.close()
        store.close()  # idempotent
        assert store.closed
        for call in (
            lambda: store.get_memory(ALICE, "x"),
            lambda: store.put_memories(ALICE, []),
            lambda: store.index(ALICE, "l1"),
            lambda: store.get_persona(ALICE),
            store.scopes,
        ):
            with pytest.raises(StoreClosedError):
                call()

    async def test_async_twins_run_the_sync_methods(self, factory: BackendFactory) -> None:
        """The `a*` twins give the sync methods' results."""
        store = factory.open()
        try:
            rec = MemoryRecord(
                id="a", content="async text", user_id="as", created_at=_CREATED, updated_at=_CREATED
            )
            stored = await store.aput_memories(Scope("as"), [rec])
            assert [r.id for r in stored] == ["a"]
            got = await store.aget_memory(Scope("as"), "a")
            assert got is not None and got.content == "async text"
            listed = await store.alist_memories(Scope("as"), type=None, limit=None, offset=0)
            assert [r.id for r in listed] == ["a"]
            await store.aset_persona(Scope("as"), "persona")
            assert await store.aget_persona(Scope("as")) == "persona"
            await store.aupsert_scene(Scope("as"), "s", summary="x", body="y", heat=None)
            assert [s.name for s in await store.alist_scenes(Scope("as"))] == ["s"]
            index = await store.aindex(Scope("as"), "l1")
            assert index is not None and len(index.meta) == 1
            assert await store.adelete_memories(Scope("as"), ["a"]) == 1
            assert Scope("as") in await store.ascopes()
        finally:
            await store.aclose()
        assert store.closed
