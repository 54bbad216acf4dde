"""`forget` on the local store: background work cannot bring a scope back, files are erased.

The conformance part `testing/conformance/erasure.py` reads every surface after a `forget` on
every backend (here and in a new process); these tests cover what only a local process shows:
work that was under way when `forget` was called (a formation run waiting for its model, captured
turns still queued, vectors being computed), the index snapshot files and another handle's
snapshots, and the bytes left in the database file.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError, StoreWriteError
from langchain_tdai_recall.stores._index import snapshot
from langchain_tdai_recall.stores.local import DB_FILENAME
from langchain_tdai_recall.stores.local.store import INDEX_CACHE_DIRNAME
from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel, SlowEmbeddings
from langchain_tdai_recall.testing._formation import ConsolidationRequest, FormationWindow
from langchain_tdai_recall.types import Scope

FAST: dict[str, Any] = {
    "pipeline": {"enabled": False, "l2MinIntervalSeconds": 0, "l2DelayAfterL1Seconds": 0},
    "extraction": {"retryBaseSeconds": 0.05, "retryMaxSeconds": 0.2, "timeoutSeconds": 30},
}


def _empty(memory: TdaiMemory, user: str) -> None:
    """Nothing of the user's shared scope is left, in any surface the facade and store show."""
    store = memory._store
    scope = Scope(user)
    assert memory.list_memories(user_id=user) == []
    assert memory.list_messages(user_id=user) == []
    assert memory.search_memories("secret", user_id=user) == []
    assert memory.search_conversations("secret", user_id=user) == []
    assert store.pending_vector_count(scope) == 0
    scope_id = store.scope_id(scope)
    if scope_id is not None:
        snap = store.formation.export_scope(scope_id)
        assert (snap.sessions, snap.versions, snap.scene_queue) == ((), (), ())
        assert [p for p in store.formation.pending() if p.scope_id == scope_id] == []


def test_a_formation_run_in_flight_finishes_before_the_erasure(tmp_path: Path) -> None:
    """A run waiting for its model when `forget` is called commits first and is then erased."""
    in_model = threading.Event()
    release = threading.Event()

    def extract(window: FormationWindow) -> list[dict[str, Any]]:
        in_model.set()
        assert release.wait(30)
        return [{"content": "The user's secret is 42.", "type": "persona", "priority": 80}]

    model = ScriptedFormationModel(extract=extract)
    with TdaiMemory.open(
        tmp_path / "s", embeddings=HashEmbeddings(), extraction_model=model, config=FAST
    ) as memory:
        memory.record_messages(
            [{"role": "user", "content": "my secret is 42"}], session_key="s1", user_id="u"
        )
        runner = threading.Thread(target=lambda: memory.extract(user_id="u"))
        runner.start()
        assert in_model.wait(30)
        done: list[object] = []
        forgetting = threading.Thread(target=lambda: done.append(memory.forget(user_id="u")))
        forgetting.start()
        forgetting.join(0.5)
        assert forgetting.is_alive(), "forget must wait for the run that is forming the scope"
        release.set()
        runner.join(30)
        forgetting.join(30)
        assert done and not forgetting.is_alive()
        report = done[0]
        assert report.memories == 1 and report.messages == 1  # type: ignore[attr-defined]
        assert memory.flush(timeout=30)
        _empty(memory, "u")
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as fresh:
        _empty(fresh, "u")


def test_forget_gives_up_on_a_run_that_does_not_finish(tmp_path: Path) -> None:
    """Past `timeout`, `forget` raises and erases nothing of the scope the run holds."""
    in_model = threading.Event()
    release = threading.Event()

    def extract(window: FormationWindow) -> list[dict[str, Any]]:
        in_model.set()
        release.wait(30)
        return []

    model = ScriptedFormationModel(extract=extract)
    with TdaiMemory.open(
        tmp_path / "s", embeddings=HashEmbeddings(), extraction_model=model, config=FAST
    ) as memory:
        memory.record_messages([{"role": "user", "content": "hi"}], session_key="s", user_id="u")
        runner = threading.Thread(target=lambda: memory.extract(user_id="u"))
        runner.start()
        assert in_model.wait(30)
        try:
            with pytest.raises(StoreWriteError, match="formation run"):
                memory.forget(user_id="u", timeout=0.3)
            assert len(memory.list_messages(user_id="u")) == 1
        finally:
            release.set()
            runner.join(30)
        assert memory.forget(user_id="u").messages == 1


def test_captured_turns_still_queued_are_erased_not_written_after(tmp_path: Path) -> None:
    """Turns the writer had not stored yet when `forget` was called do not appear afterwards."""
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        store = memory._store
        gate = threading.Event()
        original = store.put_messages

        def slow_put(*args: Any, **kwargs: Any) -> int:
            assert gate.wait(30)
            return original(*args, **kwargs)

        store.put_messages = slow_put  # type: ignore[method-assign]
        memory._capture_turn(
            [{"role": "user", "content": "my secret turn"}, {"role": "assistant", "content": "ok"}],
            scope=Scope("u"),
            session_key="s1",
        )
        done: list[object] = []
        forgetting = threading.Thread(target=lambda: done.append(memory.forget(user_id="u")))
        forgetting.start()
        forgetting.join(0.3)
        assert forgetting.is_alive(), "forget waits for the queued turn"
        gate.set()
        forgetting.join(30)
        assert done and done[0].messages == 2  # type: ignore[attr-defined]
        assert memory.flush(timeout=30)
        _empty(memory, "u")


def test_vectors_being_computed_do_not_come_back(tmp_path: Path) -> None:
    """Rows being embedded when `forget` runs get no vector stored anywhere afterwards."""
    slow = SlowEmbeddings(HashEmbeddings(), delay_s=0.3, queries_only=False)
    with TdaiMemory.open(tmp_path / "s", embeddings=slow) as memory:
        memory.add_memories(
            [{"content": f"secret number {i}"} for i in range(40)], user_id="u", show_progress=False
        )
        time.sleep(0.1)  # the upkeep has picked up the first batch
        report = memory.forget(user_id="u")
        assert report.memories == 40
        assert memory.flush(timeout=30)
        _empty(memory, "u")
        assert memory._store.vector_embedders() == []


def test_background_formation_of_a_forgotten_scope_writes_nothing_back(tmp_path: Path) -> None:
    """Turns counted and idle timers armed before `forget` form nothing afterwards."""
    config = {
        **FAST,
        "pipeline": {**FAST["pipeline"], "enabled": True, "l1IdleTimeoutSeconds": 0.3},
    }
    with TdaiMemory.open(
        tmp_path / "s",
        embeddings=HashEmbeddings(),
        extraction_model=ScriptedFormationModel(),
        config=config,
    ) as memory:
        memory.record_messages(
            [{"role": "user", "content": "my secret plan"}], session_key="s1", user_id="u"
        )
        memory.forget(user_id="u")
        time.sleep(1.0)  # the idle timer would have fired by now
        assert memory._formation is not None and memory._formation.wait_idle(10)
        _empty(memory, "u")
        scope_id = memory._store.scope_id(Scope("u"))
        assert scope_id is not None
        assert memory._store.formation.scope_state(scope_id).memories_since_persona == 0


def test_index_snapshots_of_the_scope_are_deleted_and_not_written_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot files of the scope go; another handle's close does not save them again."""
    monkeypatch.setattr(snapshot, "SNAPSHOT_MIN_ROWS", 2)
    path = tmp_path / "s"
    cache = path / INDEX_CACHE_DIRNAME
    with TdaiMemory.open(path, embeddings=HashEmbeddings()) as memory:
        for user in ("u", "v"):
            memory.add_memories([{"content": f"secret {user} {i}"} for i in range(3)], user_id=user)
            memory.record_messages(
                [{"role": "user", "content": f"secret {user} {i}"} for i in range(3)],
                session_key="s",
                user_id=user,
            )
        assert memory.flush(timeout=30)
        other = TdaiMemory.open(path, embeddings=HashEmbeddings())
        try:
            other.preload(user_id="u")  # its own indexes of the scope, saved at its close
            other.add_memory("secret u, newer", user_id="u")
            assert other.search_memories("newer", user_id="u")  # its index moved past its file
            memory.preload(user_id="u")
            memory.preload(user_id="v")
            u_id = memory._store.scope_id(Scope("u"))
            files = sorted(p.name for p in cache.iterdir())
            assert len(files) == 4 and sum(f.endswith(f"-{u_id}.tdxs") for f in files) == 2

            report = memory.forget(user_id="u")

            assert report.index_snapshots == 2
            assert [p.name for p in cache.iterdir() if p.name.endswith(f"-{u_id}.tdxs")] == []
        finally:
            other.close()
        assert [p.name for p in cache.iterdir() if p.name.endswith(f"-{u_id}.tdxs")] == []
        assert len(list(cache.iterdir())) == 2  # the other user's


def test_the_database_file_keeps_no_copy_of_the_erased_text(tmp_path: Path) -> None:
    """Freed pages are overwritten and the log is folded: the bytes are gone from the files."""
    path = tmp_path / "s"
    marker = "zq-unique-secret-marker"
    with TdaiMemory.open(path, embeddings=HashEmbeddings()) as memory:
        memory.add_memories([{"content": f"{marker} {i}"} for i in range(200)], user_id="u")
        memory.record_messages(
            [{"role": "user", "content": f"{marker} message"}], session_key="s", user_id="u"
        )
        memory.add_memory("a memory of someone else", user_id="v")
        assert memory.flush(timeout=30)
        db = memory._store._db  # type: ignore[attr-defined]
        with db.transaction() as conn:  # as SQLite builds without SQLITE_SECURE_DELETE have it
            conn.execute("PRAGMA secure_delete = OFF")
        memory.forget(user_id="u")
        data = b"".join(p.read_bytes() for p in path.iterdir() if p.name.startswith(DB_FILENAME))
        assert marker.encode() not in data
        assert [m.content for m in memory.list_memories(user_id="v")] == [
            "a memory of someone else"
        ]


def test_forget_validates_its_arguments(tmp_path: Path) -> None:
    """`user_id` is required, `all_agents` a bool, `timeout` a bounded number."""
    with TdaiMemory.open(None, embeddings=None) as memory:
        with pytest.raises(TypeError):
            memory.forget()  # type: ignore[call-arg]
        with pytest.raises(ConfigError, match="all_agents"):
            memory.forget(user_id="u", all_agents="yes")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="timeout"):
            memory.forget(user_id="u", timeout=-1)
        with pytest.raises(ConfigError, match="reclaim must be 'vacuum', 'full' or 'none'"):
            memory.forget(user_id="u", reclaim="compact")  # type: ignore[arg-type]
        report = memory.forget(user_id="u", reclaim="full")
        assert report.reclaim == "full" and report.reclaimed == ()  # overwritten as it erases
        memory.add_memory("default user's", user_id=None)
        assert memory.forget(user_id=None).memories == 1  # None names the default user
        assert memory.list_memories() == []
        with pytest.raises(ConfigError, match="ids"):
            memory.delete_messages(42, user_id="u")  # type: ignore[arg-type]


async def test_async_twins(tmp_path: Path) -> None:
    """`aforget`, `alist_messages` and `adelete_messages` give the sync results."""
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        memory.record_messages(
            [{"role": "user", "content": "a", "id": "a"}, {"role": "user", "content": "b"}],
            session_key="s",
            user_id="u",
        )
        assert [m.id for m in await memory.alist_messages(user_id="u", limit=1)] == ["a"]
        assert await memory.adelete_messages(["a"], user_id="u") == 1
        report = await memory.aforget(user_id="u")
        assert report.messages == 1
        assert await memory.alist_messages(user_id="u") == []


def test_a_memory_tool_consolidation_in_flight_finishes_before_the_erasure(
    tmp_path: Path,
) -> None:
    """A memory tool consolidation waiting for its model finishes before the erasure.

    It cannot rewrite the memories it read once the scope is forgotten.
    """
    in_model = threading.Event()
    release = threading.Event()
    seen: list[ConsolidationRequest] = []

    def consolidate(request: ConsolidationRequest) -> list[dict[str, Any]]:
        in_model.set()
        assert release.wait(30)
        seen.append(request)
        return [
            {
                "new_id": n["id"],
                "action": "merge",
                "target_ids": list(n["candidates"]),
                "content": "The user drinks green tea every morning (merged).",
            }
            for n in request.new
        ]

    model = ScriptedFormationModel(consolidate=consolidate)
    with TdaiMemory.open(
        tmp_path / "s", embeddings=HashEmbeddings(), extraction_model=model, config=FAST
    ) as memory:
        memory.add_memory("The user likes green tea in the morning.", user_id="u")
        manager = memory.memory_manager()
        manager.remember(
            Scope("u"),
            "s1",
            "The user likes green tea in the morning a lot.",
            kind="persona",
            priority=50,
        )
        assert in_model.wait(30), "no background consolidation was started"
        done: list[object] = []
        forgetting = threading.Thread(target=lambda: done.append(memory.forget(user_id="u")))
        forgetting.start()
        forgetting.join(0.5)
        assert forgetting.is_alive(), "forget waits for the consolidation in flight"
        release.set()
        forgetting.join(30)
        assert done and seen and seen[0].new[0]["candidates"]
        assert memory.flush(timeout=30)
        _empty(memory, "u")


def test_langgraph_store_items_and_metadata_go_with_the_scope(tmp_path: Path) -> None:
    """Items written through `memory.as_store()` (memories with metadata) are erased too."""
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        store = memory.as_store()
        store.put(("memories", "u"), "pref", {"text": "likes secret jazz"})
        store.put(("memories", "v"), "pref", {"text": "likes rock"})
        memory.add_memory("tagged secret", metadata={"topic": "music"}, user_id="u")
        assert store.get(("memories", "u"), "pref") is not None
        report = memory.forget(user_id="u")
        assert report.memories == 2
        assert store.get(("memories", "u"), "pref") is None
        assert store.search(("memories", "u"), query="jazz") == []
        assert memory.search_memories("secret", user_id="u") == []
        item = store.get(("memories", "v"), "pref")
        assert item is not None and item.value == {"text": "likes rock"}


def test_all_agents_erases_a_hashed_scope_folder_that_lost_its_id_file(tmp_path: Path) -> None:
    # issue 26 item 5: a long agent id gets a hashed folder named by its `.id` file; with the
    # file gone no scope names the folder, and `forget(all_agents=True)` left it on disk
    long_agent = "planner-" + "é" * 100  # 608 bytes percent-encoded
    other_agent = "helper-" + "ü" * 100
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        memory.set_persona("Secret persona of the planner", user_id="alice", agent_id=long_agent)
        memory.upsert_scene(
            "trip", summary="s", body="Secret trip", user_id="alice", agent_id=other_agent
        )
        memory.add_memory("Secret shared memory", user_id="alice")
        memory.add_memory("Bob's memory", user_id="bob")
        alice_dir = memory._store.documents.scope_dir(Scope("alice")).parent
        hashed = [p for p in alice_dir.iterdir() if "~" in p.name]
        assert len(hashed) == 2
        for folder in hashed:
            (folder / ".id").unlink()  # lost (a backup that skipped dotfiles, a manual cleanup)
        assert {s.agent_id for s in memory._store.user_scopes("alice")} == {None}
        report = memory.forget(user_id="alice", all_agents=True)
        assert memory.get_persona(user_id="alice", agent_id=long_agent) is None
        assert memory.list_scenes(user_id="alice", agent_id=other_agent) == []
        assert not alice_dir.exists()
        assert report.unnamed_scopes == 2 and len(report.scopes) == 1
        assert [m.content for m in memory.list_memories(user_id="bob")] == ["Bob's memory"]
    leftovers = [p for p in (tmp_path / "s").rglob("*") if p.is_file()]
    assert not any(b"Secret" in p.read_bytes() for p in leftovers if p.suffix == ".md")


def test_forget_of_one_scope_leaves_the_users_unnamed_folders(tmp_path: Path) -> None:
    long_agent = "planner-" + "é" * 100  # 608 bytes percent-encoded
    with TdaiMemory.open(tmp_path / "s", embeddings=HashEmbeddings()) as memory:
        memory.set_persona("Planner persona", user_id="alice", agent_id=long_agent)
        memory.set_persona("Shared persona", user_id="alice")
        folder = memory._store.documents.scope_dir(Scope("alice", long_agent))
        (folder / ".id").unlink()
        report = memory.forget(user_id="alice")  # the shared memory only
        assert report.unnamed_scopes == 0 and report.personas == 1
        assert memory.get_persona(user_id="alice", agent_id=long_agent) == "Planner persona"
