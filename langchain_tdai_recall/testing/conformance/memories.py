"""Conformance of memories and messages: same data same results, scope isolation, generations."""

from __future__ import annotations

import json

from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.stores.formation import FormationSnapshot, VersionRow
from langchain_tdai_recall.testing.conformance._shared import (
    _CREATED,
    _MEMORIES,
    _QUERIES,
    ALICE,
    BOB,
    PLANNER,
    BackendFactory,
    _f,
    fill,
    open_memory,
    snapshot,
)
from langchain_tdai_recall.types import (
    Scope,
)


class MemoryTests:
    """Searches, recalls, scopes and freshness of memories and messages (a part of the suite)."""

    # -- same data, same results --------------------------------------------------------------

    def test_same_data_gives_the_same_hits_scores_and_injection(self, memory: TdaiMemory) -> None:
        """The shared data gives the reference's searches, recalls, lists, documents and counts."""
        with open_memory(None) as reference:
            fill(reference)
            expected = snapshot(reference)
        fill(memory)
        got = snapshot(memory)
        assert got.keys() == expected.keys()
        for key in expected:
            assert got[key] == expected[key], key

    def test_keyword_only_stores_rank_alike(self, factory: BackendFactory) -> None:
        """Without an embedder, keyword search and recall match the reference."""
        with (
            open_memory(None, embeddings=None) as reference,
            open_memory(factory.open(), embeddings=None) as memory,
        ):
            for mem in (reference, memory):
                mem.add_memories(
                    [{**m, "created_at": _CREATED} for m in _MEMORIES], user_id="alice"
                )
            for query in _QUERIES:
                expected = [
                    (h.id, _f(h.score))
                    for h in reference.search_memories(query, limit=10, user_id="alice")
                ]
                got = [
                    (h.id, _f(h.score))
                    for h in memory.search_memories(query, limit=10, user_id="alice")
                ]
                assert got == expected, query
                r1 = reference.recall(query, user_id="alice")
                r2 = memory.recall(query, user_id="alice")
                assert r1 is not None and r2 is not None
                assert r2.prepend_context == r1.prepend_context
                assert r2.strategy == r1.strategy == "keyword"

    # -- scope isolation -----------------------------------------------------------------------

    def test_scopes_are_isolated(self, factory: BackendFactory) -> None:
        """No call returns another scope's rows, not even given their references."""
        store = factory.open()
        with open_memory(store) as memory:
            fill(memory)
            alice_index = store.index(ALICE, "l1")
            assert alice_index is not None
            alice_refs = list(alice_index.meta)
            assert store.memories_by_ref(BOB, alice_refs) == {}
            assert store.memories_by_ref(PLANNER, alice_refs) == {}
            assert set(store.memories_by_ref(ALICE, alice_refs)) == set(alice_refs)
            l0 = store.index(ALICE, "l0")
            assert l0 is not None
            assert store.messages_by_ref(BOB, list(l0.meta)) == {}
            for query in ("peanut", "flights trains", "咖啡"):
                assert {h.id for h in memory.search_memories(query, user_id="bob")} <= {
                    "bob-peanut"
                }
                planner = memory.search_memories(query, user_id="alice", agent_id="planner")
                assert {h.id for h in planner} <= {"plan"}
            assert memory.get_memory("peanut", user_id="bob") is None
            assert memory.get_memory("plan", user_id="alice") is None
            assert memory.delete_memory("peanut", user_id="bob") is False
            assert memory.get_memory("peanut", user_id="alice") is not None
            assert memory.search_conversations("hiking", user_id="bob") == []
            assert memory.get_persona(user_id="bob") is None
            assert memory.list_scenes(user_id="alice", agent_id="planner") == []
            bob = memory.recall("peanut butter sandwich", user_id="bob")
            assert bob is not None
            assert "allergic" not in (bob.prepend_context or "")
            assert "metric" not in (bob.append_system_context or "")

    # -- generations ---------------------------------------------------------------------------

    def test_writes_updates_and_deletes_are_seen_by_the_next_search(
        self, memory: TdaiMemory
    ) -> None:
        """The derived index catches up with every write before the next search."""
        memory.add_memory("The user collects vintage stamps.", id="stamps", user_id="u")
        assert [h.id for h in memory.search_memories("stamps", user_id="u")] == ["stamps"]
        memory.add_memory("The user collects old postcards.", id="stamps", user_id="u")
        assert memory.search_memories("vintage stamps", user_id="u", min_score=0.2) == []
        assert [h.id for h in memory.search_memories("postcards", user_id="u")] == ["stamps"]
        memory.add_memory("The user keeps bees.", id="bees", user_id="u")
        assert {h.id for h in memory.search_memories("bees postcards", user_id="u")} == {
            "stamps",
            "bees",
        }
        assert memory.delete_memory("stamps", user_id="u")
        assert [h.id for h in memory.search_memories("bees postcards", user_id="u")] == ["bees"]
        memory.record_messages(
            [{"role": "user", "content": "I adopted a parrot"}], session_key="s", user_id="u"
        )
        assert [h.content for h in memory.search_conversations("parrot", user_id="u")] == [
            "I adopted a parrot"
        ]

    def test_an_update_keeps_created_at_and_an_unchanged_text_keeps_its_vector(
        self, factory: BackendFactory
    ) -> None:
        """An update keeps the creation time; rewriting the same text keeps the vector."""
        store = factory.open()
        with open_memory(store) as memory:
            memory.add_memories(
                [{"id": "jazz", "content": "The user likes jazz.", "created_at": "2024-01-01"}],
                user_id="u",
            )
            assert memory.flush(timeout=30)
            again = memory.add_memory("The user likes jazz.", id="jazz", user_id="u", priority=80)
            assert again.created_at.startswith("2024-01-01")
            assert store.pending_vector_count(Scope("u")) == 0
            memory.add_memory("The user likes blues.", id="jazz", user_id="u")
            assert store.pending_vector_count(Scope("u")) in (0, 1)  # upkeep may be done

    def test_history_keeps_metadata_and_expiry_and_reads_older_versions(
        self, factory: BackendFactory
    ) -> None:
        """Each version keeps the metadata and expiry it had; older versions read without them."""
        store = factory.open()
        with open_memory(store) as memory:
            first = memory.add_memory(
                "Parked on level 3",
                id="car",
                user_id="u",
                metadata={"source": "app", "level": 3},
                expires_at="2031-01-01T00:00:00Z",
            )
            memory.add_memory(
                "Parked on level 3", id="car", user_id="u", metadata={"source": "valet"}
            )  # only the metadata changed: a new version
            memory.add_memory(
                "Parked on level 3",
                id="car",
                user_id="u",
                metadata={"source": "valet"},
                expires_at="2032-01-01T00:00:00Z",
            )  # only the expiry changed (a renewed TTL does that): no new version
            memory.delete_memory("car", user_id="u")
            versions = memory.history("car", user_id="u")
            assert [(v.record.metadata, v.record.expires_at) for v in versions] == [
                ({"source": "app", "level": 3}, first.expires_at),
                ({"source": "valet"}, "2032-01-01T00:00:00.000Z"),
            ]
            assert [v.change for v in versions] == ["update", "delete"]
            # a version recorded before snapshots held metadata and expiry still reads
            scope_id = store.formation.scope_id(Scope("u"))
            assert scope_id is not None
            old = {
                "content": "Parked on level 1",
                "type": "episodic",
                "scene_name": "",
                "priority": 50,
                "activity_start_time": None,
                "activity_end_time": None,
                "timestamp": None,
                "session_key": "",
                "source_message_ids": [],
                "created_at": "2024-01-01T00:00:00.000Z",
                "updated_at": "2024-01-01T00:00:00.000Z",
            }
            store.formation.import_scope(
                scope_id,
                FormationSnapshot(
                    versions=(
                        VersionRow(
                            "bike",
                            1,
                            "delete",
                            "api",
                            "[]",
                            json.dumps(old),
                            "2024-02-01T00:00:00.000Z",
                        ),
                    )
                ),
            )
            (legacy,) = memory.history("bike", user_id="u")
            assert legacy.record.content == "Parked on level 1"
            assert (legacy.record.metadata, legacy.record.expires_at) == ({}, None)
