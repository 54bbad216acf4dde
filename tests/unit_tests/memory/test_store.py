"""Store conformance (run against the in-memory and the directory store) and durability."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import (
    ConfigError,
    MemoryRecord,
    ScopeError,
    StoreClosedError,
    TdaiMemory,
)
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope

# -- L1 CRUD and validation ---------------------------------------------------------------------


def test_add_get_update_keeps_created_at(memory: TdaiMemory) -> None:
    first = memory.add_memory("likes oolong tea", id="t1", user_id="u")
    time.sleep(0.002)
    second = memory.add_memory("likes green tea", id="t1", type="persona", user_id="u")
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    got = memory.get_memory("t1", user_id="u")
    assert got is not None and got.content == "likes green tea" and got.type == "persona"
    assert len(memory.list_memories(user_id="u")) == 1
    assert [h.id for h in memory.search_memories("green tea", user_id="u")] == ["t1"]
    assert memory.search_memories("oolong", user_id="u") == []


def test_delete_and_list(memory: TdaiMemory) -> None:
    memory.add_memories(
        [
            {"id": "a", "content": "alpha fact", "type": "persona"},
            {"id": "b", "content": "beta fact"},
            MemoryRecord(id="c", content="gamma fact", type="instruction"),
        ],
        user_id="u",
    )
    assert [m.id for m in memory.list_memories(user_id="u", type="persona")] == ["a"]
    assert memory.delete_memory("b", user_id="u") is True
    assert memory.delete_memory("b", user_id="u") is False
    assert memory.get_memory("b", user_id="u") is None
    assert "b" not in {h.id for h in memory.search_memories("beta fact", user_id="u")}
    assert {m.id for m in memory.list_memories(user_id="u")} == {"a", "c"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": ""}, "content"),
        ({"content": "x", "type": "episode"}, "type"),
        ({"content": "x", "priority": 101}, "priority"),
        ({"content": "x", "priority": "high"}, "priority"),
        ({"content": "x", "activity_start_time": "next tuesday"}, "activity_start_time"),
        ({"content": "x", "source_message_ids": "m1"}, "source_message_ids"),
    ],
)
def test_bad_records_name_the_field_and_store_nothing(
    memory: TdaiMemory, kwargs: dict[str, object], field: str
) -> None:
    good = {"content": "a valid memory"}
    with pytest.raises(ConfigError, match=field):
        memory.add_memories([good, kwargs], user_id="u")
    assert memory.list_memories(user_id="u") == []  # validated before anything is written


@pytest.mark.parametrize("user_id", ["", "   ", "a\nb", "x" * 300, 42])
def test_bad_scope_ids_are_rejected(memory: TdaiMemory, user_id: object) -> None:
    with pytest.raises(ScopeError, match="user_id"):
        memory.add_memory("x", user_id=user_id)  # type: ignore[arg-type]


def test_unknown_dict_fields_are_rejected(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match="contnet"):
        memory.add_memories([{"contnet": "typo"}], user_id="u")


def test_times_accept_dates_and_datetimes(memory: TdaiMemory) -> None:
    import datetime as dt

    rec = memory.add_memory(
        "conference talk",
        activity_start_time=dt.date(2025, 5, 1),
        activity_end_time=dt.datetime(2025, 5, 2, 18, 0, tzinfo=dt.UTC),
        user_id="u",
    )
    assert rec.activity_start_time == "2025-05-01"
    assert rec.activity_end_time == "2025-05-02T18:00:00+00:00"


# -- isolation ----------------------------------------------------------------------------------


def test_scopes_are_isolated_randomised(memory: TdaiMemory) -> None:
    rng = random.Random(11)
    users = [f"user-{i}" for i in range(12)]
    agents: list[str | None] = [None, "agent-a", "agent-b"]
    secret: dict[tuple[str, str | None], str] = {}
    for user in users:
        for agent in agents:
            token = f"tok{rng.randrange(10**9):09d}"
            secret[(user, agent)] = token
            memory.add_memory(f"the secret code is {token}", user_id=user, agent_id=agent)
            memory.record_messages(
                [{"role": "user", "content": f"my code {token}"}],
                session_key="s",
                user_id=user,
                agent_id=agent,
            )
    for (user, agent), token in secret.items():
        own = memory.search_memories(f"secret code {token}", user_id=user, agent_id=agent)
        assert {h.content for h in own} >= {f"the secret code is {token}"}
        for hit in memory.search_memories(
            "the secret code is", limit=20, user_id=user, agent_id=agent
        ):
            assert hit.content.endswith(token)
        result = memory.recall(f"what is my secret code {token}", user_id=user, agent_id=agent)
        assert result is not None
        assert all(m.content.endswith(token) for m in result.memories)
        convo = memory.search_conversations("my code", limit=20, user_id=user, agent_id=agent)
        assert [h.content for h in convo] == [f"my code {token}"]
    # a user who never wrote anything sees nothing
    assert memory.search_memories("secret code", user_id="stranger") == []
    assert memory.get_memory(memory.list_memories(user_id="user-0")[0].id, user_id="user-1") is None


# -- L0 messages --------------------------------------------------------------------------------


def test_record_messages_dedupes_and_strips_injection(memory: TdaiMemory) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    msgs = [
        SystemMessage("you are helpful"),
        HumanMessage(
            "<relevant-memories>\n- [persona] x\n</relevant-memories>\n\nbook a flight", id="h1"
        ),
        AIMessage("Booked the flight to Osaka", id="a1"),
        {"role": "user", "content": "   "},
    ]
    assert memory.record_messages(msgs, session_key="s1", user_id="u") == 2
    assert memory.record_messages(msgs, session_key="s1", user_id="u") == 0  # same ids
    hits = memory.search_conversations("book a flight", user_id="u")
    assert sorted((h.role, h.content) for h in hits) == [
        ("assistant", "Booked the flight to Osaka"),
        ("user", "book a flight"),  # the injected block was stripped before storing
    ]
    memory.record_messages(
        [{"role": "user", "content": "flight to Osaka again"}], session_key="s2", user_id="u"
    )
    only_s2 = memory.search_conversations("Osaka", session_key="s2", user_id="u")
    assert [h.session_key for h in only_s2] == ["s2"]


# -- L2 / L3 ------------------------------------------------------------------------------------


def test_persona_roundtrip(memory: TdaiMemory) -> None:
    assert memory.get_persona(user_id="u") is None
    memory.set_persona("# Me\nengineer", user_id="u")
    assert memory.get_persona(user_id="u") == "# Me\nengineer"
    assert memory.get_persona(user_id="u", agent_id="other") is None
    memory.set_persona(None, user_id="u")
    assert memory.get_persona(user_id="u") is None


def test_scenes_lifecycle_heat_and_safety(memory: TdaiMemory) -> None:
    info = memory.upsert_scene(
        "Trip to Japan", summary="May trip", body="# Plan\nday 1", user_id="u"
    )
    assert info.name == "Trip-to-Japan" and info.heat == 1
    again = memory.upsert_scene("Trip to Japan", summary="May trip v2", body="b2", user_id="u")
    assert again.heat == 2 and again.created == info.created
    other = memory.upsert_scene("Trip/to Japan", summary="clash", body="c", user_id="u")
    assert other.name != again.name  # a different title normalising to a used name
    memory.upsert_scene("咖啡", summary="coffee", body="美式", heat=100, user_id="u")
    assert next(s.name for s in memory.list_scenes(user_id="u")) == "咖啡"
    block = memory.read_scene("Trip-to-Japan", user_id="u")
    assert block is not None and block.body == "b2" and block.info.summary == "May trip v2"
    assert memory.list_scenes(user_id="u")[1].heat == 2  # reading did not change heat
    for bad in ("../persona", "a/b", "..", "/etc/passwd"):
        with pytest.raises(ConfigError):
            memory.read_scene(bad, user_id="u")
    assert memory.read_scene("missing", user_id="u") is None
    assert memory.read_scene("咖啡", user_id="v") is None  # other scope
    assert memory.delete_scene("咖啡", user_id="u") is True
    assert memory.delete_scene("咖啡", user_id="u") is False


def test_stats_counts_per_scope(memory: TdaiMemory) -> None:
    memory.add_memory("a", user_id="u1")
    memory.add_memory("b", user_id="u2", agent_id="x")
    memory.record_messages([{"role": "user", "content": "hi"}], session_key="s", user_id="u1")
    memory.set_persona("p", user_id="u1")
    stats = memory.stats()
    assert (stats.memories, stats.messages, stats.personas) == (2, 1, 1)
    assert {(s.user_id, s.agent_id) for s in stats.scopes} == {("u1", None), ("u2", "x")}
    assert memory.stats(user_id="u2", agent_id="x").memories == 1
    assert stats.embedder == "hash-embeddings-v1-64"


def test_closed_store_raises(store_kind: str, tmp_path: Path) -> None:
    mem = TdaiMemory.open(None if store_kind == "memory" else tmp_path, embeddings=None)
    mem.close()
    mem.close()  # idempotent
    with pytest.raises(StoreClosedError):
        mem.add_memory("x")


async def test_async_twins_match_sync(memory: TdaiMemory) -> None:
    await memory.aadd_memory("async coffee fact", user_id="u")
    sync_hits = memory.search_memories("coffee", user_id="u")
    async_hits = await memory.asearch_memories("coffee", user_id="u")
    assert [h.id for h in sync_hits] == [h.id for h in async_hits]
    async_recall = await memory.arecall("coffee", user_id="u")
    sync_recall = memory.recall("coffee", user_id="u")
    assert async_recall is not None and sync_recall is not None
    assert async_recall.prepend_context == sync_recall.prepend_context
    assert len(await memory.alist_memories(user_id="u")) == 1


# -- durability (directory store) ---------------------------------------------------------------


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(64)) as mem:
        mem.add_memory("likes jasmine tea", user_id="u", id="m1")
        mem.record_messages(
            [{"role": "user", "content": "jasmine please"}], session_key="s", user_id="u"
        )
        mem.set_persona("tea lover", user_id="u")
        mem.upsert_scene("tea", summary="tea", body="jasmine", user_id="u")
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(64)) as mem:
        assert [h.id for h in mem.search_memories("jasmine tea", user_id="u")] == ["m1"]
        assert mem.search_conversations("jasmine", user_id="u")[0].content == "jasmine please"
        assert mem.get_persona(user_id="u") == "tea lover"
        assert [s.name for s in mem.list_scenes(user_id="u")] == ["tea"]
    assert (tmp_path / "memory.sqlite3").exists()
    assert list(tmp_path.glob("scopes/u/@shared/scenes/tea.md"))


def test_new_embedder_reembeds_at_open(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(64)) as mem:
        mem.add_memories(
            [{"content": f"fact number {i} about tea"} for i in range(30)], user_id="u"
        )
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        assert mem.flush(timeout=30)  # re-embedding runs in the background after open
        assert mem.reindex() == 0  # nothing left to do
        assert mem.stats().pending_vectors == 0
        hits = mem.search_memories("fact number 3 about tea", user_id="u")
        assert hits and hits[0].embedding_score is not None
        assert mem.stats(user_id="u").dimensions == 32


def test_two_instances_on_one_directory_see_each_others_writes(tmp_path: Path) -> None:
    with (
        TdaiMemory.open(tmp_path, embeddings=None) as a,
        TdaiMemory.open(tmp_path, embeddings=None) as b,
    ):
        a.add_memory("orchid care notes", id="x", user_id="u")
        assert [h.id for h in b.search_memories("orchid", user_id="u")] == ["x"]
        b.delete_memory("x", user_id="u")
        a.add_memory("orchid watering schedule", id="y", user_id="u")
        assert [h.id for h in a.search_memories("orchid", user_id="u")] == ["y"]
        assert [h.id for h in b.search_memories("orchid", user_id="u")] == ["y"]


def test_threads_adding_and_recalling(memory: TdaiMemory) -> None:
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                memory.add_memory(f"thread {n} note {i} about gardening", user_id=f"u{n % 2}")
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(25):
                result = memory.recall("gardening note", user_id="u0")
                assert result is not None
                assert all("thread" in m.content for m in result.memories)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(memory.list_memories(user_id="u0")) == 50
    assert len(memory.list_memories(user_id="u1")) == 50
    assert len(memory.search_memories("thread 3 note 24 gardening", limit=50, user_id="u1")) > 0


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.testing import HashEmbeddings
    mem = TdaiMemory.open(sys.argv[1], embeddings=HashEmbeddings(32))
    i = 0
    while True:
        rec = mem.add_memory(f"durable fact {i}", id=f"k{i}", user_id="u")
        print(rec.id, flush=True)
        i += 1
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_kill_9_loses_no_returned_memory(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(store)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    returned: list[str] = []
    deadline = time.monotonic() + 60
    while len(returned) < 60 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        returned.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert len(returned) >= 60, "the writer did not get going"
    with TdaiMemory.open(store, embeddings=HashEmbeddings(32)) as mem:
        stored = {m.id for m in mem.list_memories(user_id="u")}
        assert set(returned) <= stored
        assert mem.search_memories(f"durable fact {len(returned) - 1}", user_id="u")


def test_stable_context_sees_every_kind_of_edit(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.set_persona("v1", user_id="u")
        mem.upsert_scene("travel", summary="trip", body="b", user_id="u")
        first = mem.recall("hello", user_id="u")
        assert first is not None and "v1" in (first.append_system_context or "")
        again = mem.recall("again", user_id="u")
        assert again is not None
        assert again.append_system_context == first.append_system_context
        # a person edits the persona file in place, with another length
        persona_file = next(tmp_path.glob("scopes/u/@shared/persona.md"))
        persona_file.write_text("version two", encoding="utf-8")
        edited = mem.recall("hello", user_id="u")
        assert edited is not None and "version two" in (edited.append_system_context or "")
        # another instance (think: another process) adds a scene
        with TdaiMemory.open(tmp_path, embeddings=None) as other:
            other.upsert_scene("cooking", summary="recipes", body="b", user_id="u")
        added = mem.recall("hello", user_id="u")
        assert added is not None and "cooking" in (added.append_system_context or "")
        mem.delete_scene("travel", user_id="u")
        removed = mem.recall("hello", user_id="u")
        assert removed is not None and "travel" not in (removed.append_system_context or "")


def test_preload_builds_indexes_before_the_first_search(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        mem.add_memory("preloaded fact", user_id="u")
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        assert mem.stats().indexed_scopes == 0
        mem.preload(user_id="u")
        assert mem.stats().indexed_scopes == 1
        assert mem.search_memories("preloaded fact", user_id="u")


def test_conversation_search_finds_an_answer_through_the_turn_it_answers(
    memory: TdaiMemory,
) -> None:
    memory.record_messages(
        [
            {"id": "q1", "role": "user", "content": "Which hotel should we book in Kyoto?"},
            {"id": "a1", "role": "assistant", "content": "The Ryokan Sakura near Gion."},
            {"id": "q2", "role": "user", "content": "And what about dinner?"},
        ],
        session_key="trip",
        user_id="u",
    )
    memory.record_messages(
        [{"id": "x1", "role": "user", "content": "Hotel prices in Osaka"}],
        session_key="other",
        user_id="u",
    )
    memory.flush()
    hits = memory.search_conversations("hotel in Kyoto", user_id="u", min_score=0.2)
    # the answer names neither word; it is found through the question it answers
    assert {"Which hotel should we book in Kyoto?", "The Ryokan Sakura near Gion."} <= {
        h.content for h in hits
    }
    # a message's context is its own session's previous message only
    assert all(h.content != "And what about dinner?" for h in hits)
    # the hit shows the message as it was said, without its context
    assert all("\n" not in h.content for h in hits)


def test_message_context_comes_from_the_same_session_across_calls(memory: TdaiMemory) -> None:
    memory.record_messages(
        [{"role": "user", "content": "Remind me: the wifi password is cedar-42"}],
        session_key="s1",
        user_id="u",
    )
    memory.record_messages(
        [{"role": "user", "content": "unrelated small talk"}], session_key="s2", user_id="u"
    )
    memory.record_messages(
        [{"role": "assistant", "content": "Noted, I will remember it."}],
        session_key="s1",
        user_id="u",
    )
    memory.flush()
    hits = memory.search_conversations("wifi password", user_id="u", min_score=0.2)
    assert "Noted, I will remember it." in {h.content for h in hits}
    assert "unrelated small talk" not in {h.content for h in hits}


def test_history_of_another_scopes_memory_is_empty_and_says_why_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with TdaiMemory.open(None, embeddings=None) as memory:
        memory.add_memory("v1", id="m1", user_id="alice")
        memory.add_memory("v2", id="m1", user_id="alice")
        assert len(memory.history("m1", user_id="alice")) == 2
        with caplog.at_level(logging.DEBUG, logger="langchain_tdai_recall"):
            # the same answer as for an id nobody holds: scopes never learn each other's ids
            assert memory.history("m1", user_id="bob") == []
            assert memory.history("m1", user_id="alice", agent_id="planner") == []
            assert memory.history("unknown", user_id="bob") == []
        assert memory.get_memory("m1", user_id="bob") is None
        said = [r for r in caplog.records if r.getMessage().startswith("history('m1')")]
        assert len(said) == 2
        assert all(
            r.levelno == logging.DEBUG and "never held this id" in r.getMessage() for r in said
        )
        assert "'bob'" in said[0].getMessage()


@pytest.mark.parametrize("size", [3, 300])  # one statement, and the path for large batches
def test_messages_chain_their_context_and_skip_known_ids_in_one_call(
    memory: TdaiMemory, size: int
) -> None:
    memory.record_messages(
        [{"id": "seen", "role": "user", "content": "stored before"}], session_key="a", user_id="u"
    )
    a_side = [{"id": f"a{i}", "role": "user", "content": f"text a{i}"} for i in range(size)]
    b_side = [{"id": f"b{i}", "role": "user", "content": f"text b{i}"} for i in range(size)]
    known = [{"id": "seen", "role": "user", "content": "stored before"}]
    kept = memory.record_messages(known + a_side + a_side[:1], session_key="a", user_id="u")
    kept += memory.record_messages(b_side, session_key="b", user_id="u")
    rows = memory._store.export_rows(Scope("u"), "l0", after=0, limit=10_000)
    contexts = {r.record.id: r.context for r in rows}  # type: ignore[union-attr]
    assert kept == 2 * size and len(rows) == 2 * size + 1
    expected = {"seen": ""}
    for side, first in ((a_side, "stored before"), (b_side, "")):
        previous = first
        for message in side:
            expected[message["id"]] = previous
            previous = message["content"]
    assert contexts == expected
