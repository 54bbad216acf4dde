"""The conformance suite every store backend passes (needs `pytest`).

A backend's test module subclasses `BackendConformance` (every backend) and, for a backend whose
data outlives the process, `DurableBackendConformance`, and overrides the `factory` fixture to
return a `BackendFactory` that opens handles on one fresh store::

    class TestMyBackend(DurableBackendConformance):
        @pytest.fixture
        def factory(self, tmp_path):
            return MyFactory(tmp_path)

What the suite holds a backend to:

- **Same data, same results.** The same memories, messages, persona and scenes written through
  `TdaiMemory` into the backend and into the reference (the local in-memory store) give the same
  hits in the same order with the same scores (both legs), the same recall injection (both
  blocks), the same lists, counts and documents.
- **Scope isolation**: nothing of one scope is returned for another, not even by row reference.
- **Generations and freshness**: a write, update or delete is seen by the next search, through
  the same handle, through another handle, and through another process.
- **Durability**: everything written (vectors included) is there after the store is reopened.
- **Schema migrations**: an older schema is migrated on open, a newer one is refused, and
  opening twice changes nothing.
- **Documents**, **vector upkeep**, **read-only** and **closed** behaviour, and the async twins.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from langchain_tdai_recall.errors import (
    ConfigError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
)
from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.stores.base import BaseMemoryStore, StoredEmbedder
from langchain_tdai_recall.stores.formation import LeaseOwner, Upsert
from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import (
    MemoryRecord,
    MessageRecord,
    SceneBlock,
    SceneInfo,
    Scope,
)

__all__ = ["BackendConformance", "BackendFactory", "DurableBackendConformance"]

DIMS = 64
"""Dimension of the deterministic test embedder."""

ALICE = Scope("alice")
BOB = Scope("bob")
PLANNER = Scope("alice", "planner")

_MEMORIES: list[dict[str, Any]] = [
    {
        "id": "peanut",
        "content": "The user is allergic to peanuts.",
        "type": "persona",
        "priority": 90,
    },
    {"id": "cat", "content": "The user has a cat named Miso who likes tuna.", "type": "persona"},
    {
        "id": "dog",
        "content": "The user walked the neighbour's dog on Sunday.",
        "activity_start_time": "2025-05-04",
    },
    {
        "id": "seat",
        "content": "The user prefers window seats on long flights.",
        "type": "persona",
        "scene_name": "travel",
    },
    {
        "id": "japan",
        "content": "The user plans a trip to Japan in April to see cherry blossoms.",
        "scene_name": "travel",
        "timestamp": "2025-03-01T10:00:00Z",
    },
    {
        "id": "rule",
        "content": "Always answer in metric units.",
        "type": "instruction",
        "priority": -1,
    },
    {"id": "pinned", "content": "The user's daughter is called Lina.", "priority": 95},
    {"id": "coffee", "content": "用户每天早上喝一杯手冲咖啡。", "scene_name": "饮食"},
    {"id": "tea", "content": "用户下午喜欢喝乌龙茶，不加糖。", "scene_name": "饮食"},
    {"id": "run", "content": "用户每周跑步三次，准备参加半程马拉松。", "type": "persona"},
    {"id": "work", "content": "The user works as a nurse on night shifts.", "priority": 70},
    {
        "id": "book",
        "content": "The user is reading a novel about the sea.",
        "activity_start_time": "2025-04-01",
        "activity_end_time": "2025-04-20",
    },
]
"""Memories of the shared-data tests (English and Chinese, every type, scenes, priorities)."""

_CREATED = "2025-01-01T00:00:00.000Z"

_MESSAGES: list[tuple[str, str, str]] = [
    ("s1", "user", "I went hiking in the Alps last summer."),
    ("s1", "assistant", "That sounds wonderful! Which trail did you take?"),
    ("s1", "user", "The Eiger trail, with my sister."),
    ("s2", "user", "我想学做意大利面。"),
    ("s2", "assistant", "可以先从番茄酱意面开始。"),
    ("s2", "user", "Remind me to buy basil tomorrow."),
]
"""(session, role, text) of the shared-data tests."""

_QUERIES = [
    "Can I eat this peanut cake?",
    "what pets does the user have",
    "book a flight, window or aisle?",
    "plan a trip to Japan",
    "咖啡",
    "用户喜欢什么运动",
    "what does the user drink in the afternoon",
    "daughter",
    "nothing related at all xyzzy",
]
"""Queries compared between the backend and the reference."""


class BackendFactory(ABC):
    """Opens handles on one fresh store of the backend under test."""

    @abstractmethod
    def open(self, *, read_only: bool = False) -> BaseMemoryStore:
        """A new handle on the store (for an in-memory backend: the store, opened once)."""

    def location(self) -> str:
        """What `TdaiMemory.open` takes in another process to open the same store."""
        raise NotImplementedError

    def open_at_schema(self, version: int) -> None:
        """Create the store with only the first `version` schema migrations applied."""
        raise NotImplementedError

    def mark_newer_schema(self) -> None:
        """Make the stored schema look newer than this version of the package knows."""
        raise NotImplementedError

    def latest_schema(self) -> int:
        """The schema version this package writes."""
        raise NotImplementedError


def open_memory(store: BaseMemoryStore | None, **kwargs: Any) -> TdaiMemory:
    """A `TdaiMemory` over `store` (`None`: the reference) with the deterministic embedder."""
    kwargs.setdefault("embeddings", HashEmbeddings(dims=DIMS))
    return TdaiMemory.open(store, **kwargs)


def fill(memory: TdaiMemory) -> None:
    """Write the shared data: memories in three scopes, messages, persona and scenes."""
    records = [{**m, "created_at": _CREATED} for m in _MEMORIES]
    memory.add_memories(records, user_id=ALICE.user_id)
    memory.add_memories(
        [{"id": "bob-peanut", "content": "Bob loves peanut butter.", "created_at": _CREATED}],
        user_id=BOB.user_id,
    )
    memory.add_memories(
        [
            {
                "id": "plan",
                "content": "The planner books trains, not flights.",
                "created_at": _CREATED,
            }
        ],
        user_id=PLANNER.user_id,
        agent_id=PLANNER.agent_id,
    )
    for i, (session, role, text) in enumerate(_MESSAGES):
        memory.record_messages(
            [
                {
                    "role": role,
                    "content": text,
                    "id": f"msg-{i}",
                    "recorded_at": f"2025-02-01T10:00:{i:02d}.000Z",
                }
            ],
            session_key=session,
            user_id=ALICE.user_id,
        )
    memory.set_persona("# Alice\nNurse, runner, allergic to peanuts.", user_id=ALICE.user_id)
    memory.set_persona("Only a persona here.", user_id="persona-only")
    memory.upsert_scene(
        "travel", summary="Trips and flights", body="Japan in April.", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "饮食", summary="咖啡和茶", body="手冲咖啡，乌龙茶。", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "travel", summary="Trips, flights", body="Japan in April; Alps.", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "Travel", summary="another title, same name", body="collides", user_id=ALICE.user_id
    )
    assert memory.flush(timeout=60), "vectors were not computed in time"


def _f(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def snapshot(memory: TdaiMemory) -> dict[str, Any]:
    """Everything the shared-data tests compare: searches, recalls, lists, documents, counts."""
    out: dict[str, Any] = {}
    for query in _QUERIES:
        for scope in (ALICE, BOB, PLANNER):
            hits = memory.search_memories(
                query, limit=10, user_id=scope.user_id, agent_id=scope.agent_id
            )
            out[f"search {scope} {query}"] = [
                (h.id, _f(h.score), _f(h.keyword_score), _f(h.embedding_score)) for h in hits
            ]
            result = memory.recall(query, user_id=scope.user_id, agent_id=scope.agent_id)
            assert result is not None
            out[f"recall {scope} {query}"] = (
                result.prepend_context,
                result.append_system_context,
                [
                    (m.id, _f(m.score), _f(m.keyword_score), _f(m.embedding_score))
                    for m in result.memories
                ],
                [r.id for r in result.standing_rules],
                [r.id for r in result.pinned],
                result.strategy,
            )
        out[f"persona-only {query}"] = [
            h.id for h in memory.search_memories(query, type="persona", user_id="alice")
        ]
        out[f"scene-only {query}"] = [
            h.id for h in memory.search_memories(query, scene="TRAV", user_id="alice")
        ]
        out[f"conversations {query}"] = [
            (h.id, h.role, h.session_key, h.recorded_at, _f(h.score))
            for h in memory.search_conversations(query, limit=10, user_id="alice")
        ]
        out[f"session s2 {query}"] = [
            h.id for h in memory.search_conversations(query, session_key="s2", user_id="alice")
        ]
    out["list"] = [
        (
            r.id,
            r.content,
            r.type,
            r.priority,
            r.scene_name,
            r.activity_start_time,
            r.activity_end_time,
            r.timestamp,
            r.created_at,
        )
        for r in memory.list_memories(user_id="alice")
    ]
    out["list page"] = [r.id for r in memory.list_memories(user_id="alice", limit=3, offset=2)]
    out["list type"] = [r.id for r in memory.list_memories(user_id="alice", type="persona")]
    out["persona"] = memory.get_persona(user_id="alice")
    out["scenes"] = [(s.name, s.summary, s.heat) for s in memory.list_scenes(user_id="alice")]
    out["scene"] = memory.read_scene("travel", user_id="alice")
    stats = memory.stats()
    out["stats"] = (
        stats.memories,
        stats.messages,
        stats.scenes,
        stats.personas,
        stats.dimensions,
        stats.pending_vectors,
        sorted(
            (s.user_id, s.agent_id or "", s.memories, s.messages, s.scenes) for s in stats.scopes
        ),
    )
    scene = out["scene"]
    if scene is not None:  # times are when each store wrote it
        out["scene"] = (scene.info.name, scene.info.summary, scene.info.heat, scene.body)
    return out


# -- memory formation's state ----------------------------------------------------------------------

FORMATION_CONFIG: dict[str, Any] = {
    "pipeline": {"enabled": False, "l2MinIntervalSeconds": 0, "l2DelayAfterL1Seconds": 0},
    "extraction": {"retryBaseSeconds": 0.05, "retryMaxSeconds": 0.2, "timeoutSeconds": 5},
    "timezone": "+08:00",
}
"""Formation in the foreground only (`extract()`), with no waiting between steps."""

_TURNS: list[tuple[str, str, str]] = [
    ("alice", "s1", "I am vegetarian."),
    ("alice", "s1", "My daughter is called Mia."),
    ("alice", "s2", "我每天早上跑步五公里。"),
    ("alice", "s1", "I am vegetarian."),
    ("bob", "s1", "I drive a red bicycle to work."),
]


def _form(memory: TdaiMemory) -> dict[str, Any]:
    """Record the turns, form memories in the foreground, and describe the outcome."""
    for user, session, text in _TURNS:
        memory.record_messages(
            [{"role": "user", "content": text}, {"role": "assistant", "content": "OK."}],
            session_key=session,
            user_id=user,
        )
    report = memory.extract(all_scopes=True)
    out: dict[str, Any] = {"ok": report.ok, "windows": report.windows}
    for user in ("alice", "bob"):
        memories = memory.list_memories(user_id=user)
        out[user] = sorted((m.content, m.type, m.session_key) for m in memories)
        out[f"{user} history"] = sorted(len(memory.history(m.id, user_id=user)) for m in memories)
        out[f"{user} persona"] = memory.get_persona(user_id=user) is not None
    store = memory._store
    out["pending"] = [(p.user_id, p.session_key, p.messages) for p in store.formation.pending()]
    return out


class _FormationTests:
    """Formation-state tests shared by every backend (mixed into `BackendConformance`)."""

    def test_formation_forms_what_the_reference_forms(self, factory: BackendFactory) -> None:
        """`extract()` over the same turns writes the same memories, history and cursors."""
        with open_memory(
            None, extraction_model=ScriptedFormationModel(), config=FORMATION_CONFIG
        ) as reference:
            expected = _form(reference)
        with open_memory(
            factory.open(), extraction_model=ScriptedFormationModel(), config=FORMATION_CONFIG
        ) as memory:
            got = _form(memory)
        assert got == expected
        assert got["pending"] == [] and got["alice"]

    def test_formation_cursor_never_skips_a_message_written_meanwhile(
        self, factory: BackendFactory
    ) -> None:
        """Messages past a cursor that moves while writers run are all seen, in order."""
        store = factory.open()
        try:
            scope = Scope("cur")
            records = store.formation
            store.put_messages(scope, [_message("seed", "s")])
            scope_id = records.scope_id(scope)
            assert scope_id is not None
            stop = threading.Event()

            def write(worker: int) -> None:
                for i in range(60):
                    store.put_messages(scope, [_message(f"w{worker}-{i}", "s")])
                stop.set()

            writers = [threading.Thread(target=write, args=(w,)) for w in range(2)]
            for t in writers:
                t.start()
            seen: list[str] = []
            cursor = 0
            while True:
                finished = stop.is_set() and not any(t.is_alive() for t in writers)
                batch = records.messages_after(scope_id, "s", cursor, 7)
                refs = [m.rowid for m in batch]
                assert refs == sorted(refs) and all(r > cursor for r in refs)
                seen += [m.id for m in batch]
                if batch:
                    cursor = batch[-1].rowid
                elif finished:
                    break
            assert sorted(seen) == sorted(
                ["seed"] + [f"w{w}-{i}" for w in range(2) for i in range(60)]
            )
            assert len(seen) == len(set(seen))
            assert records.high_water() >= cursor
            older = records.messages_up_to(scope_id, "s", cursor, 5)
            assert [m.id for m in older] == seen[-5:]
        finally:
            store.close()

    def test_formation_lease_is_exclusive(self, factory: BackendFactory) -> None:
        """One owner at a time; a lost lease makes the commit write nothing."""
        store = factory.open()
        try:
            scope = Scope("lease")
            store.put_messages(scope, [_message("m1", "s")])
            records = store.formation
            scope_id = records.scope_id(scope)
            assert scope_id is not None
            a = LeaseOwner("a", host="host-a", pid=1)
            b = LeaseOwner("b", host="host-b", pid=2)
            assert records.acquire(scope_id, a, 30)
            assert records.acquire(scope_id, a, 30)  # renewing is fine
            assert not records.acquire(scope_id, b, 30)
            records.release(scope_id, b)  # not b's: nothing happens
            assert not records.acquire(scope_id, b, 30)
            records.release(scope_id, a)
            assert records.acquire(scope_id, b, 0.2)
            assert not records.acquire(scope_id, a, 30)
            time.sleep(0.4)
            assert records.acquire(scope_id, a, 30)  # b's lease expired
            rec = MemoryRecord(
                id="x",
                content="written by b",
                user_id="lease",
                created_at=_CREATED,
                updated_at=_CREATED,
            )
            lost = records.commit(
                scope_id,
                owner=b,
                upserts=[Upsert(rec, None)],
                deletes=[],
                actor="extraction",
                embedder=None,
            )
            assert not lost.ok
            assert store.get_memory(scope, "x") is None
            won = records.commit(
                scope_id,
                owner=a,
                upserts=[Upsert(rec, None)],
                deletes=[],
                actor="extraction",
                embedder=None,
            )
            assert won.ok and [r.id for r in won.written] == ["x"]
            gone = LeaseOwner("c", host=a.host, pid=_dead_pid())
            records.release(scope_id, a)
            assert records.acquire(scope_id, gone, 30)
            # c's process is gone and a is on the same host: taken over at once
            same_host = LeaseOwner("d", host=a.host, pid=os.getpid())
            assert records.acquire(scope_id, same_host, 30)
        finally:
            store.close()

    def test_formation_commit_is_all_or_nothing(self, factory: BackendFactory) -> None:
        """A commit checks the cursor, then writes memories, history, queue and cursor at once."""
        store = factory.open()
        try:
            scope = Scope("commit")
            store.put_messages(scope, [_message(f"m{i}", "s") for i in range(4)])
            records = store.formation
            scope_id = records.scope_id(scope)
            assert scope_id is not None
            msgs = records.messages_after(scope_id, "s", 0, 10)
            first, last = msgs[1].rowid, msgs[-1].rowid
            old = MemoryRecord(
                id="old",
                content="an old fact",
                user_id="commit",
                created_at=_CREATED,
                updated_at=_CREATED,
            )
            store.put_memories(scope, [old])
            new = MemoryRecord(
                id="new",
                content="a new fact",
                user_id="commit",
                created_at=_CREATED,
                updated_at=_CREATED,
            )
            moved = records.commit(
                scope_id,
                owner=None,
                upserts=[Upsert(new, None)],
                deletes=[("old", "merged", ("new",))],
                actor="extraction",
                embedder=None,
                session_key="s",
                expected_cursor=7,
                new_cursor=first,
            )
            assert not moved.ok and "cursor" in moved.reason
            assert store.get_memory(scope, "new") is None
            assert records.session(scope_id, "s").cursor == 0
            done = records.commit(
                scope_id,
                owner=None,
                upserts=[Upsert(new, None, dedupe=True)],
                deletes=[("old", "merged", ("new",))],
                actor="extraction",
                embedder=None,
                session_key="s",
                expected_cursor=0,
                new_cursor=first,
                situation="cooking",
            )
            assert done.ok and done.deleted == ("old",) and [r.id for r in done.written] == ["new"]
            assert store.get_memory(scope, "old") is None
            state = records.session(scope_id, "s")
            assert (state.cursor, state.situation) == (first, "cooking")
            assert [(p.session_key, p.messages) for p in records.pending(scope_id)] == [("s", 2)]
            backlog = records.backlog(scope_id, "s")
            assert backlog is not None and backlog.messages == 2 and backlog.user_turns == 2
            seq, queued, total = records.scene_queue(scope_id, scope, 10)
            assert [r.id for r in queued] == ["new"] and total == 1
            assert (scope_id, "commit", None) in records.scopes_with_scene_work()
            # the persona is due after changes: the written and the deleted memory count
            assert records.scope_state(scope_id).memories_since_persona == 2
            assert records.scenes_done(scope_id, seq, owner=None)
            assert records.scene_queue(scope_id, scope, 10) == (0, [], 0)
            records.persona_done(scope_id)
            assert records.scope_state(scope_id).memories_since_persona == 0
            history = records.history(scope_id, "old", scope)
            assert [(v.change, v.related_ids, v.current) for v in history] == [
                ("merged", ("new",), False)
            ]
            dup = MemoryRecord(
                id="dup",
                content="A new fact",
                user_id="commit",
                created_at=_CREATED,
                updated_at=_CREATED,
            )
            again = records.commit(
                scope_id,
                owner=None,
                upserts=[Upsert(dup, None, dedupe=True)],
                deletes=[],
                actor="tool",
                embedder=None,
            )
            assert again.ok and again.duplicates == 1 and again.written == ()
            assert records.record_failure(scope_id, "s", error="boom", retry_at=1.0) == 1
            assert records.record_failure(scope_id, "s", error="boom", retry_at=2.0) == 2
            records.set_warmup(scope_id, "s", 0)
            state = records.session(scope_id, "s")
            assert (state.failures, state.retry_at, state.warmup, state.cursor) == (
                2,
                2.0,
                0,
                first,
            )
            assert records.commit(
                scope_id,
                owner=None,
                upserts=[],
                deletes=[],
                actor="extraction",
                embedder=None,
                session_key="s",
                expected_cursor=first,
                new_cursor=last,
            ).ok
            assert records.session(scope_id, "s").failures == 0
            assert records.pending(scope_id) == []
            assert [r.id for r in records.recent_memories(scope_id, scope, 5)] == ["new"]
        finally:
            store.close()

    def test_history_and_exact_duplicates(self, factory: BackendFactory) -> None:
        """Updates and deletes keep versions; exact duplicates are not written twice."""
        store = factory.open()
        try:
            scope = Scope("hist")

            def rec(mid: str, text: str, stamp: str = _CREATED) -> MemoryRecord:
                return MemoryRecord(
                    id=mid, content=text, user_id="hist", created_at=stamp, updated_at=stamp
                )

            first = store.put_memories(scope, [rec("a", "Likes green tea."), rec("b", "Runs.")])
            assert [r.id for r in first] == ["a", "b"]
            dups = store.put_memories(
                scope,
                [rec("c", "likes GREEN tea"), rec("d", "Swims."), rec("e", "swims")],
                dedupe=[True, False, True],
            )
            assert [r.id for r in dups] == ["a", "d", "d"]
            assert store.formation.existing_duplicates(
                store.formation.scope_id(scope) or 0, ["LIKES green tea.", "nothing"]
            ) == {content_fingerprint("likes green tea"): "a"}
            store.put_memories(scope, [rec("a", "Likes black tea.", "2025-02-01T00:00:00.000Z")])
            store.put_memories(scope, [rec("a", "Likes black tea.", "2025-02-02T00:00:00.000Z")])
            mixed = store.put_memories(
                scope,
                [rec("a", "Likes oolong.", "2025-03-01T00:00:00.000Z"), rec("f", "Runs")],
                dedupe=[False, True],
            )
            assert [r.id for r in mixed] == ["a", "b"]
            assert mixed[0].created_at == _CREATED  # an update keeps the creation time
            history = store.memory_history(scope, "a")
            assert [(v.record.content, v.change, v.current) for v in history] == [
                ("Likes green tea.", "update", False),
                ("Likes black tea.", "update", False),
                ("Likes oolong.", None, True),
            ]
            assert store.delete_memories(scope, ["a", "zzz"]) == 1
            history = store.memory_history(scope, "a")
            assert [v.change for v in history] == ["update", "update", "delete"]
            assert store.memory_history(Scope("nobody"), "a") == []
        finally:
            store.close()


def _message(mid: str, session: str) -> MessageRecord:
    return MessageRecord(
        id=mid,
        role="user",
        content=f"text of {mid}",
        session_key=session,
        user_id="x",
        recorded_at=_CREATED,
    )


def _dead_pid() -> int:
    """A process id that is not running (a finished child's)."""
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    del done
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class BackendConformance(_FormationTests):
    """Tests every backend passes. Subclass and override the `factory` fixture."""

    @pytest.fixture
    def factory(self) -> BackendFactory:
        """The backend under test (override in the subclass)."""
        raise NotImplementedError

    @pytest.fixture
    def memory(self, factory: BackendFactory) -> Iterator[TdaiMemory]:
        """A `TdaiMemory` over a fresh store of the backend."""
        with open_memory(factory.open()) as mem:
            yield mem

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

    # -- documents -----------------------------------------------------------------------------

    def test_documents_behave_like_the_reference(self, memory: TdaiMemory) -> None:
        """Persona and scene calls give the reference's answers (heat, names, order)."""

        def script(mem: TdaiMemory) -> list[Any]:
            out: list[Any] = [mem.get_persona(user_id="d")]
            mem.set_persona("Likes tea.", user_id="d")
            out.append(mem.get_persona(user_id="d"))
            mem.set_persona("   ", user_id="d")
            out.append(mem.get_persona(user_id="d"))
            mem.set_persona("Likes 茶 and ☕.", user_id="d", agent_id="a")
            out.append((mem.get_persona(user_id="d"), mem.get_persona(user_id="d", agent_id="a")))
            for heat in (None, None, 7, None):
                info = mem.upsert_scene(
                    "Weekend hikes", summary=f"s{heat}", body="b", heat=heat, user_id="d"
                )
                out.append((info.name, info.summary, info.heat))
            info = mem.upsert_scene("weekend  hikes", summary="other", body="x", user_id="d")
            out.append((info.name, info.heat))
            info = mem.upsert_scene("周末 徒步", summary="中文", body="正文\n第二行", user_id="d")
            out.append((info.name, info.heat))
            out.append([(s.name, s.summary, s.heat) for s in mem.list_scenes(user_id="d")])
            block = mem.read_scene("周末-徒步", user_id="d")
            out.append(None if block is None else (block.info.summary, block.body))
            out.append(mem.read_scene("missing", user_id="d"))
            with pytest.raises(ConfigError):
                mem.read_scene("../persona", user_id="d")
            out.append(mem.delete_scene("Weekend-hikes", user_id="d"))
            out.append(mem.delete_scene("Weekend-hikes", user_id="d"))
            out.append([s.name for s in mem.list_scenes(user_id="d")])
            stats = mem.stats(user_id="d")
            out.append((stats.scenes, stats.personas))
            return out

        with open_memory(None) as reference:
            expected = script(reference)
        assert script(memory) == expected

    def test_scene_edits_are_all_or_nothing(
        self, factory: BackendFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Memory formation's scene edits: a failure half-way leaves every scene as it was."""
        store = factory.open()
        try:
            scope = Scope("scenes")
            store.upsert_scene(scope, "Kitchen", summary="cooking", body="pasta", heat=None)
            store.upsert_scene(scope, "Garden", summary="plants", body="roses", heat=None)
            before = store.scenes_with_titles(scope)
            kitchen, _ = before["Kitchen"]
            changed = SceneBlock(info=replace(kitchen.info, summary="baking"), body="bread")
            new = SceneBlock(
                info=SceneInfo(name="Garage", summary="tools", heat=1, created="", updated=""),
                body="drills",
            )

            docs = store.documents
            real_write = docs._write

            def broken(scope: Scope, block: SceneBlock, title: str) -> None:
                if block.info.name == "Garage":  # the second write of the edit fails
                    msg = "the disk went away"
                    raise RuntimeError(msg)
                real_write(scope, block, title)

            monkeypatch.setattr(docs, "_write", broken)
            with pytest.raises(RuntimeError):
                store.apply_scene_edits(scope, [(changed, "Kitchen"), (new, "Garage")], ["Garden"])
            monkeypatch.undo()
            assert store.scenes_with_titles(scope) == before
            store.apply_scene_edits(scope, [(changed, "Kitchen"), (new, "Garage")], ["Garden"])
            after = store.scenes_with_titles(scope)
            assert sorted(after) == ["Garage", "Kitchen"]
            assert after["Kitchen"][0].body == "bread"
        finally:
            store.close()

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


class DurableBackendConformance(BackendConformance):
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
