"""Conformance of erasure (issue 16): `forget`, and listing and deleting L0 messages.

A scope rich in every surface (memories with history, messages in two sessions, persona, scenes,
formation state with a live lease, vectors, index snapshots where the backend keeps them) is
forgotten, then every surface is read back through the public API and through the store, in this
process and, for a durable backend, in a new process; another scope of the same user and
another user are left exactly as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from langchain_tdai_recall.errors import ConfigError, StoreReadOnlyError
from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.formation import LeaseOwner, ScopeState, Upsert
from langchain_tdai_recall.testing import (
    FormationWindow,
    PersonaRequest,
    ScriptedFormationModel,
)
from langchain_tdai_recall.testing.conformance._shared import BackendFactory, open_memory
from langchain_tdai_recall.testing.conformance.formation import FORMATION_CONFIG
from langchain_tdai_recall.types import MemoryRecord, Scope

GONE = Scope("gone-user")
"""The scope that is forgotten."""
GONE_AGENT = Scope("gone-user", "helper")
"""Another scope of the same user (kept by a scope forget, erased by `all_agents=True`)."""
KEPT = Scope("kept-user")
"""Another user, never touched."""

_QUERIES = ("vegetarian", "Lisbon", "daughter Mia", "tram", "跑步")
_MARKERS = ("Lisbon", "Mia", "tram", "跑步", "Trips", "Family", "Persona")
"""Words of the scopes' data: none may be injected by recall after `forget`."""

_READ_EVERYTHING = """
import json, sys
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.testing.conformance.erasure import read_surfaces
from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.types import MemoryRecord, Scope
with TdaiMemory.open(sys.argv[1], embeddings=HashEmbeddings(dims=64)) as memory:
    out = {
        f"{u}/{a}": read_surfaces(memory, Scope(u, a or None))
        for u, a in json.loads(sys.argv[2])
    }
print(json.dumps(out, sort_keys=True))
"""


def _fill_scope(memory: TdaiMemory, scope: Scope, tag: str) -> None:
    """Memories with history, messages in two sessions (formed), persona, scenes."""
    user, agent = scope.user_id, scope.agent_id
    for session, text in (
        ("s1", f"I am vegetarian and live in Lisbon ({tag})."),
        ("s1", f"My daughter is called Mia ({tag})."),
        ("s2", f"我每天早上跑步五公里（{tag}）。"),
    ):
        memory.record_messages(
            [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
            session_key=session,
            user_id=user,
            agent_id=agent,
        )
    memory.extract(user_id=user, agent_id=agent)  # formed memories, cursors, scene queue
    memory.add_memory(f"Takes the tram to work ({tag}).", id="tram", user_id=user, agent_id=agent)
    memory.add_memory(f"Takes tram 28 to work ({tag}).", id="tram", user_id=user, agent_id=agent)
    memory.add_memory(f"Old note ({tag}).", id="old", user_id=user, agent_id=agent)
    memory.delete_memory("old", user_id=user, agent_id=agent)  # history only
    memory.set_persona(f"# Persona\nVegetarian in Lisbon ({tag}).", user_id=user, agent_id=agent)
    memory.upsert_scene(
        "travel", summary="Trips", body=f"Lisbon trams ({tag}).", user_id=user, agent_id=agent
    )
    memory.upsert_scene(
        "family", summary="Family", body=f"Mia ({tag}).", user_id=user, agent_id=agent
    )
    memory.record_messages(  # a session formation has not reached yet
        [{"role": "user", "content": f"Pending Lisbon chat ({tag})."}],
        session_key="s3",
        user_id=user,
        agent_id=agent,
    )


def read_surfaces(memory: TdaiMemory, scope: Scope) -> dict[str, Any]:
    """Every surface of a scope, through the public API and the store, as plain data."""
    user, agent = scope.user_id, scope.agent_id
    store = memory._store
    out: dict[str, Any] = {}
    memories = memory.list_memories(user_id=user, agent_id=agent)
    out["memories"] = sorted((m.id, m.content) for m in memories)
    out["history"] = {
        mid: len(memory.history(mid, user_id=user, agent_id=agent))
        for mid in sorted({m.id for m in memories} | {"tram", "old"})
    }
    out["get tram"] = memory.get_memory("tram", user_id=user, agent_id=agent) is not None
    out["messages"] = [
        (m.id, m.session_key, m.content) for m in memory.list_messages(user_id=user, agent_id=agent)
    ]
    out["persona"] = memory.get_persona(user_id=user, agent_id=agent)
    out["scenes"] = [s.name for s in memory.list_scenes(user_id=user, agent_id=agent)]
    out["scene travel"] = memory.read_scene("travel", user_id=user, agent_id=agent) is not None
    for query in _QUERIES:
        out[f"search {query}"] = [
            h.id for h in memory.search_memories(query, limit=20, user_id=user, agent_id=agent)
        ]
        out[f"conversations {query}"] = [
            h.id for h in memory.search_conversations(query, limit=20, user_id=user, agent_id=agent)
        ]
        result = memory.recall(query, user_id=user, agent_id=agent)
        injected = (
            ""
            if result is None
            else ((result.prepend_context or "") + (result.append_system_context or ""))
        )
        out[f"recall {query}"] = (
            None
            if result is None
            else (
                [m.id for m in result.memories],
                bool(result.prepend_context),
                sorted(w for w in _MARKERS if w in injected),
            )
        )
    stats = memory.stats()
    out["listed"] = any(s.user_id == user and s.agent_id == agent for s in stats.scopes)
    scope_stats = memory.stats(user_id=user, agent_id=agent)
    out["stats"] = (
        scope_stats.memories,
        scope_stats.messages,
        scope_stats.scenes,
        scope_stats.personas,
    )
    out["store scopes"] = scope in store.scopes()
    out["document scopes"] = scope in store.document_scopes()
    out["pending vectors"] = store.pending_vector_count(scope)
    for layer in ("l1", "l0"):
        out[f"rows {layer}"] = len(store.export_rows(scope, layer, after=0, limit=100_000))
        index = store.index(scope, layer)
        out[f"index {layer}"] = 0 if index is None else len(index.meta)
    scope_id = store.scope_id(scope)
    formation = store.formation
    if scope_id is None:
        out["formation"] = "no scope"
    else:
        snap = formation.export_scope(scope_id)
        empty = snap.scope_state is None or snap.scope_state == ScopeState()
        out["formation"] = (
            [s.session_key for s in snap.sessions],
            len(snap.versions),
            empty,
            list(snap.scene_queue),
        )
        out["pending sessions"] = [
            p.session_key for p in formation.pending() if p.scope_id == scope_id
        ]
        out["scene work"] = [s for s, _, _ in formation.scopes_with_scene_work() if s == scope_id]
    return out


def _is_empty(surfaces: dict[str, Any]) -> list[str]:
    """The names of the surfaces that still hold something."""
    held = []
    for name, value in surfaces.items():
        if name == "formation":
            if value != "no scope" and list(value) != [[], 0, True, []]:
                held.append(name)
        elif name == "history":
            if any(value.values()):
                held.append(name)
        elif name.startswith("recall"):
            if value is not None and (value[0] or value[1] or value[2]):
                held.append(name)
        elif name == "stats":
            if any(value):
                held.append(name)
        elif value:
            held.append(name)
    return held


def _fresh_process(location: str, scopes: list[Scope]) -> dict[str, Any]:
    keys = json.dumps([[s.user_id, s.agent_id or ""] for s in scopes])
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_READ_EVERYTHING), location, keys],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _location(factory: BackendFactory) -> str | None:
    try:
        return factory.location()
    except NotImplementedError:
        return None


def _formed(store: BaseMemoryStore) -> TdaiMemory:
    return open_memory(store, extraction_model=ScriptedFormationModel(), config=FORMATION_CONFIG)


class ErasureTests:
    """`forget` and L0 listing and deletion, on every backend (a part of the suite)."""

    def test_forget_erases_every_surface_and_nothing_else(self, factory: BackendFactory) -> None:
        """After `forget`, every surface of the scope is empty, here and in a new process."""
        store = factory.open()
        with _formed(store) as memory:
            for scope, tag in ((GONE, "g"), (GONE_AGENT, "ga"), (KEPT, "k")):
                _fill_scope(memory, scope, tag)
            assert memory.flush(timeout=60)
            memory.record_messages(  # a session formation has not reached yet
                [{"role": "user", "content": "Pending Lisbon chat."}],
                session_key="s4",
                user_id=GONE.user_id,
            )
            memory.reindex(show_progress=False)  # its vector too (the upkeep yields to callers)
            scope_id = store.scope_id(GONE)
            assert scope_id is not None
            assert store.formation.acquire(scope_id, LeaseOwner("someone"), 600)
            memory.preload(user_id=GONE.user_id)  # indexes built (and snapshots, if any)
            before = {s: read_surfaces(memory, s) for s in (GONE, GONE_AGENT, KEPT)}
            held = _is_empty(before[GONE])
            assert {"memories", "messages", "persona", "scenes", "history", "formation"} <= set(
                held
            )

            report = memory.forget(user_id=GONE.user_id)

            assert report.all_agents is False
            assert [(s.user_id, s.agent_id) for s in report.scopes] == [(GONE.user_id, None)]
            erased = report.scopes[0]
            assert erased.memories == len(before[GONE]["memories"])
            assert erased.messages == len(before[GONE]["messages"])
            assert erased.scenes == 2 and erased.persona
            assert erased.memory_versions >= 2 and erased.formation_state >= 2
            assert erased.vectors >= erased.memories + erased.messages
            after = read_surfaces(memory, GONE)
            assert _is_empty(after) == [], after
            for kept in (GONE_AGENT, KEPT):
                assert read_surfaces(memory, kept) == before[kept]
            # the lease is gone too: any owner can take it at once
            assert store.formation.acquire(scope_id, LeaseOwner("next"), 1)
            store.formation.release(scope_id, LeaseOwner("next"))
            assert memory.forget(user_id=GONE.user_id).scopes[0].memories == 0  # idempotent
        location = _location(factory)
        if location is not None:
            fresh = _fresh_process(location, [GONE, GONE_AGENT, KEPT])
            assert _is_empty(fresh[f"{GONE.user_id}/"]) == [], fresh[f"{GONE.user_id}/"]
            assert _is_empty(fresh[f"{KEPT.user_id}/"]) != []
            assert fresh[f"{GONE_AGENT.user_id}/{GONE_AGENT.agent_id}"]["memories"]

    def test_forget_all_agents_erases_every_scope_of_the_user(
        self, factory: BackendFactory
    ) -> None:
        """`all_agents=True` erases the shared scope and every agent's; other users stay."""
        with open_memory(factory.open()) as memory:
            memory.add_memory("shared fact", user_id="u")
            memory.add_memory("agent fact", user_id="u", agent_id="a1")
            memory.record_messages(
                [{"role": "user", "content": "agent chat"}],
                session_key="s",
                user_id="u",
                agent_id="a2",
            )
            memory.set_persona("persona of a3 only", user_id="u", agent_id="a3")
            memory.add_memory("other user", user_id="v")
            with pytest.raises(ConfigError):
                memory.forget(user_id="u", agent_id="a1", all_agents=True)
            report = memory.forget(user_id="u", all_agents=True)
            assert report.all_agents
            assert [s.agent_id for s in report.scopes] == [None, "a1", "a2", "a3"]
            assert (report.memories, report.messages, report.personas) == (2, 1, 1)
            for agent in (None, "a1", "a2", "a3"):
                assert _is_empty(read_surfaces(memory, Scope("u", agent))) == []
            assert [m.content for m in memory.list_memories(user_id="v")] == ["other user"]
            assert [s.user_id for s in memory.stats().scopes] == ["v"]

    def test_list_messages_pages_in_stored_order(self, factory: BackendFactory) -> None:
        """`list_messages` lists a scope's messages in stored order, by session and by page."""
        with open_memory(factory.open()) as memory:
            for i in range(5):
                memory.record_messages(
                    [{"role": "user", "content": f"m{i}", "id": f"id{i}"}],
                    session_key="even" if i % 2 == 0 else "odd",
                    user_id="lm",
                )
            memory.record_messages([{"role": "user", "content": "x"}], session_key="s", user_id="o")
            assert [m.id for m in memory.list_messages(user_id="lm")] == [
                f"id{i}" for i in range(5)
            ]
            assert [m.id for m in memory.list_messages(user_id="lm", session_key="odd")] == [
                "id1",
                "id3",
            ]
            assert [m.id for m in memory.list_messages(user_id="lm", limit=2, offset=2)] == [
                "id2",
                "id3",
            ]
            assert memory.list_messages(user_id="nobody") == []
            with pytest.raises(ConfigError):
                memory.list_messages(user_id="lm", limit=-1)

    def test_a_window_read_before_the_erasure_is_never_committed(
        self, factory: BackendFactory
    ) -> None:
        """A commit of a window whose messages were erased meanwhile writes nothing.

        Even with the lease taken again and the cursor where it was (the erasure resets it).
        """
        store = factory.open()
        with open_memory(store) as memory:
            memory.record_messages(
                [{"role": "user", "content": "my pin is 1234"}], session_key="s", user_id="w"
            )
            scope_id = store.scope_id(Scope("w"))
            assert scope_id is not None
            records = store.formation
            window = records.messages_after(scope_id, "s", 0, 10)
            owner = LeaseOwner("late-run")
            assert records.acquire(scope_id, owner, 60)
            memory.forget(user_id="w")
            assert records.acquire(scope_id, owner, 60)  # renewed after the erasure
            memory.record_messages(  # the session goes on after the erasure
                [{"role": "user", "content": "new chat"}], session_key="s", user_id="w"
            )
            outcome = records.commit(
                scope_id,
                owner=owner,
                upserts=[
                    Upsert(
                        MemoryRecord(
                            id="pin",
                            content="The user's pin is 1234.",
                            user_id="w",
                            created_at="2025-01-01T00:00:00.000Z",
                            updated_at="2025-01-01T00:00:00.000Z",
                        ),
                        None,
                    )
                ],
                deletes=[],
                actor="extraction",
                embedder=None,
                session_key="s",
                expected_cursor=0,
                new_cursor=window[-1].rowid,
            )
            records.release(scope_id, owner)
            assert not outcome.ok and "deleted" in outcome.reason
            assert memory.list_memories(user_id="w") == []
            assert records.session(scope_id, "s").cursor == 0

    def test_delete_messages_leaves_no_trace_of_them(self, factory: BackendFactory) -> None:
        """Deleted messages are gone from lists, searches and the next message's context."""
        store = factory.open()
        with open_memory(store) as memory:
            turns = [
                ("a", "user", "My secret code word is pineapple-zebra."),
                ("b", "assistant", "Understood, I will remember the code word."),
                ("c", "user", "Also I like tea."),
            ]
            memory.record_messages(
                [{"id": i, "role": r, "content": t} for i, r, t in turns],
                session_key="s1",
                user_id="dm",
            )
            memory.record_messages(
                [{"id": "z", "role": "user", "content": "other session pineapple"}],
                session_key="s2",
                user_id="dm",
            )
            assert memory.flush(timeout=60)
            assert "b" in {h.id for h in memory.search_conversations("pineapple", user_id="dm")}
            with pytest.raises(ConfigError):
                memory.delete_messages(user_id="dm")
            with pytest.raises(ConfigError):
                memory.delete_messages(["a"], session_key="s1", user_id="dm")

            assert memory.delete_messages(["a", "missing"], user_id="dm") == 1

            assert [m.id for m in memory.list_messages(user_id="dm")] == ["b", "c", "z"]
            rows = store.export_rows(Scope("dm"), "l0", after=0, limit=100)
            assert all("pineapple-zebra" not in r.context for r in rows)  # type: ignore[union-attr]
            assert memory.flush(timeout=60)
            hits = memory.search_conversations("pineapple zebra", limit=10, user_id="dm")
            assert {h.id for h in hits} <= {"z"}
            assert memory.delete_messages(session_key="s2", user_id="dm") == 1
            assert memory.delete_messages("b", user_id="dm") == 1
            assert [m.id for m in memory.list_messages(user_id="dm")] == ["c"]
            assert memory.stats(user_id="dm").messages == 1
            assert memory.delete_messages(session_key="nope", user_id="dm") == 0


class DurableErasureTests:
    """Erasure seen through other handles on one durable store (a part of the suite)."""

    def test_forget_on_a_read_only_store_is_refused(self, factory: BackendFactory) -> None:
        """A read-only handle refuses `forget` and `delete_messages` and changes nothing."""
        with open_memory(factory.open()) as memory:
            memory.add_memory("kept", user_id="ro")
            memory.record_messages(
                [{"role": "user", "content": "hi"}], session_key="s", user_id="ro"
            )
        with open_memory(factory.open(read_only=True)) as memory:
            with pytest.raises(StoreReadOnlyError):
                memory.forget(user_id="ro")
            with pytest.raises(StoreReadOnlyError):
                memory.delete_messages(session_key="s", user_id="ro")
            assert len(memory.list_memories(user_id="ro")) == 1
            assert len(memory.list_messages(user_id="ro")) == 1

    def test_another_handle_sees_the_erasure_and_keeps_writing(
        self, factory: BackendFactory
    ) -> None:
        """A handle with built indexes finds nothing after another one forgets the scope.

        Its later writes to the scope land where a new handle reads them.
        """
        with open_memory(factory.open()) as first, open_memory(factory.open()) as second:
            first.add_memory("The user collects stamps.", id="stamps", user_id="h")
            first.record_messages(
                [{"role": "user", "content": "I collect stamps"}], session_key="s", user_id="h"
            )
            assert first.flush(timeout=60)
            assert [h.id for h in second.search_memories("stamps", user_id="h")] == ["stamps"]
            assert second.search_conversations("stamps", user_id="h")

            first.forget(user_id="h")

            assert second.search_memories("stamps", user_id="h") == []
            assert second.search_conversations("stamps", user_id="h") == []
            result = second.recall("stamps", user_id="h")
            assert result is None or not result.memories
            second.add_memory("The user now collects coins.", id="coins", user_id="h")
            assert [m.id for m in first.list_memories(user_id="h")] == ["coins"]
            assert [h.id for h in first.search_memories("coins", user_id="h")] == ["coins"]
        with open_memory(factory.open()) as third:
            assert [m.id for m in third.list_memories(user_id="h")] == ["coins"]
            assert [s.user_id for s in third.stats().scopes] == ["h"]

    def test_a_run_in_another_handle_cannot_commit_into_a_forgotten_scope(
        self, factory: BackendFactory
    ) -> None:
        """A run of another handle, waiting for its model at `forget`, commits nothing.

        The lease its commit needs is gone (another handle stands for another process).
        """
        in_model = threading.Event()
        release = threading.Event()

        def extract(window: FormationWindow) -> list[dict[str, Any]]:
            in_model.set()
            assert release.wait(30)
            return [{"content": "The user's code is 7.", "type": "persona", "priority": 80}]

        config = {**FORMATION_CONFIG, "extraction": {**FORMATION_CONFIG["extraction"]}}
        config["extraction"]["timeoutSeconds"] = 30
        with (
            open_memory(factory.open()) as admin,
            open_memory(
                factory.open(),
                extraction_model=ScriptedFormationModel(extract=extract),
                config=config,
            ) as server,
        ):
            server.record_messages(
                [{"role": "user", "content": "my code is 7"}], session_key="s", user_id="x"
            )
            runner = threading.Thread(target=lambda: server.extract(user_id="x"))
            runner.start()
            try:
                assert in_model.wait(30)
                assert admin.forget(user_id="x").messages == 1
            finally:
                release.set()
                runner.join(30)
            assert admin.list_memories(user_id="x") == []
            assert server.list_memories(user_id="x") == []
            assert server.list_messages(user_id="x") == []
        with open_memory(factory.open()) as fresh:
            surfaces = read_surfaces(fresh, Scope("x"))
            assert _is_empty(surfaces) == [], surfaces

    def test_a_persona_update_in_another_handle_writes_nothing_back(
        self, factory: BackendFactory
    ) -> None:
        """A persona rewrite of another handle, waiting for its model at `forget`, is dropped.

        The memories it was written from are gone when the answer comes.
        """
        in_model = threading.Event()
        release = threading.Event()

        def persona(request: PersonaRequest) -> dict[str, Any]:
            in_model.set()
            assert release.wait(30)
            return {"action": "rewrite", "persona": "# Profile\n- code is 7"}

        config = {**FORMATION_CONFIG, "extraction": {**FORMATION_CONFIG["extraction"]}}
        config["extraction"]["timeoutSeconds"] = 30
        config["persona"] = {"triggerEveryN": 1}
        with (
            open_memory(factory.open()) as admin,
            open_memory(
                factory.open(),
                extraction_model=ScriptedFormationModel(persona=persona),
                config=config,
            ) as server,
        ):
            server.record_messages(
                [{"role": "user", "content": "my code is 7"}], session_key="s", user_id="p"
            )
            runner = threading.Thread(target=lambda: server.extract(user_id="p"))
            runner.start()
            try:
                assert in_model.wait(30)
                assert admin.forget(user_id="p").memories == 1
            finally:
                release.set()
                runner.join(30)
            assert server.get_persona(user_id="p") is None
        with open_memory(factory.open()) as fresh:
            surfaces = read_surfaces(fresh, Scope("p"))
            assert _is_empty(surfaces) == [], surfaces
