"""Conformance of vector upkeep: the primitives that compute, store and replace vectors."""

from __future__ import annotations

import numpy as np

from langchain_tdai_recall.testing.conformance._shared import (
    _CREATED,
    BackendFactory,
)
from langchain_tdai_recall.types import (
    MemoryRecord,
    MessageRecord,
    Scope,
)


class VectorTests:
    """Vector upkeep primitives (a part of the suite)."""

    # -- vector upkeep -------------------------------------------------------------------------

    def test_vector_upkeep_primitives(self, factory: BackendFactory) -> None:
        """Pending rows, stored vectors, counts and the dimension reset."""
        store = factory.open()
        store.bind(tokenizer=store.tokenizer, embedder_id="test-embedder")
        scope = Scope("v")
        records = [
            MemoryRecord(
                id=f"m{i}",
                content=f"text {i}",
                user_id="v",
                created_at=_CREATED,
                updated_at=_CREATED,
            )
            for i in range(5)
        ]
        store.put_memories(scope, records)
        store.put_messages(
            scope,
            [
                MessageRecord(
                    id="x",
                    role="user",
                    content="hello",
                    session_key="s",
                    user_id="v",
                    recorded_at=_CREATED,
                )
            ],
        )
        try:
            assert store.count_missing_vectors() == 6
            assert store.pending_vector_count(scope) == 6
            assert store.pending_vector_count(Scope("nobody")) == 0
            pending = store.pending_vectors("l1", after=0, limit=3, stale=False)
            assert [p.text for p in pending] == ["text 0", "text 1", "text 2"]
            rest = store.pending_vectors("l1", after=pending[-1].ref, limit=10, stale=False)
            assert [p.text for p in rest] == ["text 3", "text 4"]
            store.put_memories(
                scope,
                [
                    MemoryRecord(
                        id="m1",
                        content="changed",
                        user_id="v",
                        created_at=_CREATED,
                        updated_at=_CREATED,
                    )
                ],
            )
            vectors = np.eye(3, 8, dtype=np.float32)
            assert store.set_vectors("l1", pending, vectors) == 2  # m1's text changed
            assert store.vector_dimension() == 8
            assert store.vector_dimension(scope) == 8
            assert store.vector_dimension(Scope("nobody")) is None
            assert store.pending_vector_count(scope) == 4
            index = store.index(scope, "l1")
            assert index is not None
            assert index.stats() == (5, 2)
            assert store.drop_vectors_of_other_dimension(16) == 2
            assert store.pending_vector_count(scope) == 6
            assert store.count_foreign_vectors() == 0
            l0 = store.pending_vectors("l0", after=0, limit=10, stale=True)
            assert [p.text for p in l0] == ["hello"]
        finally:
            store.close()
