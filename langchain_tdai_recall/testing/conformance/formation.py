"""Conformance of memory formation's state: forming, the cursor, the lease, the commit, history.

Every backend keeps formation's state (cursors, leases, pending windows, versions) itself; these
tests hold it to what the reference forms from the same turns.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.stores.formation import LeaseOwner, Upsert
from langchain_tdai_recall.testing import ScriptedFormationModel
from langchain_tdai_recall.testing.conformance._shared import (
    _CREATED,
    BackendFactory,
    _dead_pid,
    _message,
    open_memory,
)
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.types import (
    MemoryRecord,
    Scope,
)

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


class FormationTests:
    """Formation-state tests shared by every backend (a part of the suite)."""

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
