"""Conformance of a backend whose data outlives the process and is shared between handles.

Handles and processes see each other's writes at their next call, everything is there after
reopening, read-only handles refuse writes, and schema migrations run once and only forward.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from langchain_tdai_recall.errors import (
    StoreError,
    StoreReadOnlyError,
)
from langchain_tdai_recall.stores.base import StoredEmbedder
from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel
from langchain_tdai_recall.testing.conformance._shared import (
    DIMS,
    BackendFactory,
    fill,
    open_memory,
    snapshot,
)
from langchain_tdai_recall.testing.conformance.backend import BackendConformance
from langchain_tdai_recall.testing.conformance.erasure import DurableErasureTests
from langchain_tdai_recall.testing.conformance.formation import FORMATION_CONFIG


class DurableBackendConformance(BackendConformance, DurableErasureTests):
    """Tests of a backend whose data outlives the process and is shared between handles."""

    def test_a_write_through_another_handle_is_seen_at_the_next_call(
        self, factory: BackendFactory
    ) -> None:
        """Writes, deletes and documents of one handle are seen by the other's next call."""
        with open_memory(factory.open()) as writer, open_memory(factory.open()) as reader:
            assert reader.search_memories("kayak", user_id="f") == []
            for i in range(20):
                writer.add_memory(f"The user paddled a kayak on lake {i}.", id=f"k{i}", user_id="f")
                found = {h.id for h in reader.search_memories("kayak lake", limit=50, user_id="f")}
                assert f"k{i}" in found
                result = reader.recall(f"kayak on lake {i}", user_id="f")
                assert result is not None
                assert f"lake {i}." in (result.prepend_context or "")
            writer.delete_memory("k3", user_id="f")
            assert "k3" not in {
                h.id for h in reader.search_memories("kayak", limit=50, user_id="f")
            }
            writer.set_persona("Paddles kayaks.", user_id="f")
            assert reader.get_persona(user_id="f") == "Paddles kayaks."
            writer.upsert_scene("lakes", summary="kayak trips", body="b", user_id="f")
            context = reader.recall("kayak", user_id="f")
            assert context is not None and "kayak trips" in (context.append_system_context or "")

    def test_a_write_in_another_process_is_seen_at_the_next_call(
        self, factory: BackendFactory
    ) -> None:
        """A write and a delete made by another process are seen by the next search here."""
        with open_memory(factory.open()) as reader:
            assert reader.search_memories("glacier", user_id="p") == []
            script = textwrap.dedent(
                f"""
                from langchain_tdai_recall import TdaiMemory
                from langchain_tdai_recall.testing import HashEmbeddings
                with TdaiMemory.open({factory.location()!r},
                                     embeddings=HashEmbeddings(dims={DIMS})) as m:
                    m.add_memory("The user hiked across a glacier in Iceland.", id="g",
                                 user_id="p")
                    m.delete_memory("gone", user_id="p")
                    m.record_messages([{{"role": "user", "content": "glacier photos"}}],
                                      session_key="s", user_id="p")
                    m.flush(timeout=30)
                """
            )
            reader.add_memory("This one is deleted by the other process.", id="gone", user_id="p")
            assert [h.id for h in reader.search_memories("deleted other", user_id="p")] == ["gone"]
            done = subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            hits = reader.search_memories("glacier", user_id="p")
            assert [h.id for h in hits] == ["g"]
            assert hits[0].embedding_score is not None  # its vector came along
            assert reader.search_memories("deleted other", user_id="p", min_score=0.2) == []
            assert [h.content for h in reader.search_conversations("glacier", user_id="p")] == [
                "glacier photos"
            ]

    def test_everything_is_there_after_reopening(self, factory: BackendFactory) -> None:
        """Closing and reopening keeps every record, vector and document."""
        with open_memory(factory.open()) as memory:
            fill(memory)
            before = snapshot(memory)
        store = factory.open()
        with open_memory(store) as memory:
            assert store.count_missing_vectors() == 0
            assert snapshot(memory) == before

    def test_a_read_only_handle_reads_and_refuses_writes(self, factory: BackendFactory) -> None:
        """A read-only handle serves reads and raises `StoreReadOnlyError` on writes."""
        with open_memory(factory.open()) as memory:
            memory.add_memory("The user plays the cello.", id="cello", user_id="r")
            memory.set_persona("Cellist.", user_id="r")
            assert memory.flush(timeout=30)
        with open_memory(factory.open(read_only=True)) as reader:
            assert reader.read_only
            assert [h.id for h in reader.search_memories("cello", user_id="r")] == ["cello"]
            assert reader.get_persona(user_id="r") == "Cellist."
            with pytest.raises(StoreReadOnlyError):
                reader.add_memory("nope", user_id="r")
            with pytest.raises(StoreReadOnlyError):
                reader.set_persona("nope", user_id="r")
            with pytest.raises(StoreReadOnlyError):
                reader.delete_memory("cello", user_id="r")

    def test_the_store_remembers_its_embedder_and_a_read_never_re_embeds(
        self, factory: BackendFactory
    ) -> None:
        """`vector_embedders` names who made the stored vectors, whatever a handle uses."""

        def embedders() -> list[StoredEmbedder]:
            store = factory.open(read_only=True)
            try:
                return store.vector_embedders()
            finally:
                store.close()

        with open_memory(factory.open()) as memory:
            memory.add_memory("The user plays the cello.", id="cello", user_id="r")
            memory.record_messages(
                [{"role": "user", "content": "I practised the cello."}],
                session_key="s",
                user_id="r",
            )
            assert memory.flush(timeout=30)
        built = [StoredEmbedder(f"hash-embeddings-v1-{DIMS}", DIMS, 2)]
        assert embedders() == built
        reader_store = factory.open(read_only=True)
        assert reader_store.recorded_embedder() == built[0]
        with open_memory(reader_store, embeddings=HashEmbeddings(dims=24)) as reader:
            assert [h.id for h in reader.search_memories("cello", user_id="r")] == ["cello"]
            assert reader.flush(timeout=5) and reader.reindex() == 0
        assert embedders() == built  # a read-only handle re-embeds nothing
        with open_memory(factory.open(), embeddings=HashEmbeddings(dims=24)) as writer:
            assert writer.flush(timeout=30)  # opening for writing re-embeds
        assert embedders() == [StoredEmbedder("hash-embeddings-v1-24", 24, 2)]

    def test_two_handles_forming_at_once_form_each_message_once(
        self, factory: BackendFactory
    ) -> None:
        """Formation runs through two handles at once: the lease lets each window run once."""
        texts = [f"Fact number {i}: the user owns {i} plants." for i in range(12)]
        with (
            open_memory(
                factory.open(), extraction_model=ScriptedFormationModel(), config=FORMATION_CONFIG
            ) as a,
            open_memory(
                factory.open(), extraction_model=ScriptedFormationModel(), config=FORMATION_CONFIG
            ) as b,
        ):
            for i, text in enumerate(texts):
                a.record_messages(
                    [{"role": "user", "content": text}, {"role": "assistant", "content": "OK."}],
                    session_key=f"s{i % 3}",
                    user_id="two",
                )
            reports: list[Any] = []
            runs = [
                threading.Thread(target=lambda m=m: reports.append(m.extract(user_id="two")))
                for m in (a, b)
            ]
            for t in runs:
                t.start()
            for t in runs:
                t.join(120)
            reports.append(a.extract(user_id="two"))
            assert sum(r.messages for r in reports) == 2 * len(texts)
            assert sorted(m.content for m in b.list_memories(user_id="two")) == sorted(texts)

    # -- schema --------------------------------------------------------------------------------

    def test_opening_twice_changes_nothing(self, factory: BackendFactory) -> None:
        """Setup is idempotent: a second open keeps the schema version."""
        first = factory.open()
        version = first.schema_version()
        first.close()
        second = factory.open()
        try:
            assert second.schema_version() == version == factory.latest_schema()
        finally:
            second.close()

    def test_an_older_schema_is_migrated_on_open(self, factory: BackendFactory) -> None:
        """A store at schema 1 is migrated to the latest schema and works."""
        factory.open_at_schema(1)
        store = factory.open()
        with open_memory(store) as memory:
            assert store.schema_version() == factory.latest_schema()
            memory.add_memory("Migrated stores accept writes.", id="w", user_id="m")
            memory.record_messages(
                [{"role": "user", "content": "and messages"}], session_key="s", user_id="m"
            )
            assert [h.id for h in memory.search_memories("migrated", user_id="m")] == ["w"]

    def test_a_newer_schema_is_refused(self, factory: BackendFactory) -> None:
        """A store written by a newer version is refused with `StoreError`."""
        factory.open().close()
        factory.mark_newer_schema()
        with pytest.raises(StoreError, match="newer"):
            factory.open()
