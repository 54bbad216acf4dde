"""Issue 8 #2: a slow or dead embedder never holds up a write, a captured turn, close or exit.

Writes are durable and keyword-searchable when they return; vectors follow on a background
thread that resumes after a restart. Captured turns go through one background writer per store
that retries while another process holds the write lock.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import StoreWriteError, TdaiMemory
from langchain_tdai_recall.testing import FailingEmbeddings, HashEmbeddings
from langchain_tdai_recall.types import Scope

from ._fakes import FAST_QUERY, HangingEmbeddings


def _run_bounded(func: object, seconds: float) -> bool:
    """Run `func` on a daemon thread; whether it finished within `seconds`."""
    thread = threading.Thread(target=func, daemon=True)  # type: ignore[arg-type]
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_writes_are_acknowledged_without_waiting_for_a_hung_embedder(tmp_path: Path) -> None:
    release = threading.Event()
    try:
        mem = TdaiMemory.open(tmp_path, embeddings=HangingEmbeddings(release), config=FAST_QUERY)

        def writes() -> None:
            mem.add_memory("allergic to peanuts", id="m1", user_id="u")
            mem.add_memories([{"content": "likes oolong tea", "id": "m2"}], user_id="u")
            mem.record_messages(
                [{"role": "user", "content": "book a flight to Osaka"}],
                session_key="s",
                user_id="u",
            )

        assert _run_bounded(writes, 3.0), "a write waited for the hung embedder"
        # durable and keyword-searchable at once, while the embedder still hangs
        assert [h.id for h in mem.search_memories("peanuts allergy", user_id="u")] == ["m1"]
        assert mem.search_conversations("Osaka flight", user_id="u")[0].role == "user"
        assert mem.stats(user_id="u").pending_vectors == 3
        started = time.monotonic()
        mem.close(timeout=0.5)
        assert time.monotonic() - started < 2.0, "close() waited for the hung embedder"
    finally:
        release.set()
    with TdaiMemory.open(tmp_path, embeddings=None) as again:
        assert {m.id for m in again.list_memories(user_id="u")} == {"m1", "m2"}


def test_vectors_are_filled_in_the_background_and_resume_after_a_restart(tmp_path: Path) -> None:
    broken = FailingEmbeddings(HashEmbeddings(32), documents=True)
    with TdaiMemory.open(tmp_path, embeddings=broken, close_timeout=0.2) as mem:
        mem.add_memories(
            [{"content": f"garden note {i} about roses"} for i in range(5)], user_id="u"
        )
        assert mem.stats().pending_vectors == 5  # the rows are the to-do list
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        assert mem.flush(timeout=30)
        assert mem.stats().pending_vectors == 0
        hits = mem.search_memories("garden note 3 about roses", user_id="u")
        assert hits and hits[0].embedding_score is not None


_EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.testing import HashEmbeddings
    from langchain_core.embeddings import Embeddings

    class Dead(Embeddings):
        identity = "dead-endpoint"
        def embed_documents(self, texts):
            time.sleep(120)
        def embed_query(self, text):
            time.sleep(120)

    cfg = {"embedding": {"queryTimeoutMs": 100}, "recall": {"timeoutMs": 500}}
    mem = TdaiMemory.open(sys.argv[1], embeddings=Dead(), config=cfg)
    mem.add_memory("allergic to peanuts", user_id="u")
    mem.recall("can I eat peanuts?", user_id="u")
    mem.search_memories("peanuts", user_id="u")
    print(time.time(), flush=True)  # then exit without close(): the exit hook closes it
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process handling")
def test_process_exit_does_not_wait_for_a_hung_embedder(tmp_path: Path) -> None:
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    exited = time.time()
    assert done.returncode == 0, done.stderr
    finished_work = float(done.stdout.strip())
    assert finished_work - started < 30, "the writes or the recall waited for the embedder"
    # at exit, close() waits at most its default bound (5 s), never for the hung embedder
    assert exited - finished_work < 5 + 3


_LOCK_SCRIPT = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
    print("released", flush=True)
    """
)


def _hold_write_lock(store: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_SCRIPT, str(store / "memory.sqlite3"), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_captured_turn_survives_a_write_lock_held_by_another_process(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        mem.add_memory("warm-up so the database exists", user_id="u")
        holder = _hold_write_lock(tmp_path, 2.5)
        try:
            started = time.monotonic()
            mem._capture_turn(
                [
                    {"role": "user", "content": "which hotel in Kyoto?"},
                    {"role": "assistant", "content": "Stay near Shijo Kawaramachi."},
                ],
                scope=Scope("u"),
                session_key="trip",
            )
            assert time.monotonic() - started < 0.2  # handed off, not written inline
            # searches keep working while the writer waits for the lock
            assert mem.search_memories("warm-up database", user_id="u")
            assert mem.flush(timeout=30)
        finally:
            holder.wait(timeout=30)
            assert holder.stdout is not None
            holder.stdout.close()
        hits = mem.search_conversations("Kyoto hotel", user_id="u", session_key="trip")
        assert [h.role for h in hits][:1] == ["user"]
        assert {h.content for h in mem.search_conversations("Shijo", user_id="u")} == {
            "Stay near Shijo Kawaramachi."
        }


def test_a_write_that_meets_a_held_lock_raises_store_write_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.add_memory("first", id="a", user_id="u")
        holder = _hold_write_lock(tmp_path, 3.0)
        try:
            writer = mem._store._db._writer
            assert writer is not None
            writer.execute("PRAGMA busy_timeout=200")  # instead of waiting the full 10 s
            with pytest.raises(StoreWriteError, match="locked by another process") as info:
                mem.add_memory("second", id="b", user_id="u")
            assert "memory.sqlite3" in str(info.value)
        finally:
            holder.wait(timeout=30)
            assert holder.stdout is not None
            holder.stdout.close()
        assert [m.id for m in mem.list_memories(user_id="u")] == ["a"]
        mem.add_memory("second", id="b", user_id="u")  # works once the lock is gone
        assert [m.id for m in mem.list_memories(user_id="u")] == ["a", "b"]


def test_close_gives_up_on_a_locked_database_within_its_bound_and_says_how_much(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mem = TdaiMemory.open(tmp_path, embeddings=None)
    mem.add_memory("exists", user_id="u")
    holder = _hold_write_lock(tmp_path, 6.0)
    try:
        mem._capture_turn(
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            scope=Scope("u"),
            session_key="s",
        )
        caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
        started = time.monotonic()
        mem.close(timeout=0.5)
        assert time.monotonic() - started < 2.5
        lost = [r.getMessage() for r in caplog.records if "not yet written" in r.getMessage()]
        assert len(lost) == 1 and "1 captured turns (2 messages)" in lost[0]
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


def test_after_capture_hook_runs_once_per_stored_turn(tmp_path: Path) -> None:
    calls: list[tuple[Scope, str, int]] = []
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:

        def hook(scope: Scope, session_key: str) -> None:
            found = mem.search_conversations(
                "turn question", limit=20, user_id=scope.user_id, agent_id=scope.agent_id
            )
            stored = len(found)
            calls.append((scope, session_key, stored))

        mem._after_capture = hook  # type: ignore[method-assign]
        for n, key in enumerate(["s1", "s2"], 1):
            mem._capture_turn(
                [{"role": "user", "content": f"turn {n} question"}],
                scope=Scope("u", "agent"),
                session_key=key,
            )
        assert mem.flush(timeout=30)
    assert calls == [(Scope("u", "agent"), "s1", 1), (Scope("u", "agent"), "s2", 2)]


def test_capture_turn_never_raises_and_drops_nothing_it_accepted(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32)) as mem:
        mem._capture_turn(
            [
                {"role": "user", "content": "emoji \ud83d and a lone surrogate"},
                {"role": "system", "content": "not conversation memory"},
                {"role": "assistant", "content": "<relevant-memories>x</relevant-memories>ok"},
            ],
            scope=Scope("u"),
            session_key="s",
        )
        mem._capture_turn(
            [{"role": "user", "content": "bad scope"}], scope=Scope(""), session_key="s"
        )
        mem._capture_turn(None, scope=Scope("u"), session_key="s")  # type: ignore[arg-type]
        assert mem.flush(timeout=30)
        hits = mem.search_conversations("lone surrogate", user_id="u")
        assert hits[0].content == "emoji \ufffd and a lone surrogate"
        # the assistant line follows it, so it is found through its context too
        assert {h.content for h in hits} <= {"emoji \ufffd and a lone surrogate", "ok"}
        assert mem.stats(user_id="u").messages == 2  # the user and the cleaned assistant line
    # after close it is still silent
    mem._capture_turn([{"role": "user", "content": "late"}], scope=Scope("u"), session_key="s")


def test_close_flushes_captured_turns(tmp_path: Path) -> None:
    mem = TdaiMemory.open(tmp_path, embeddings=None)
    for i in range(20):
        mem._capture_turn(
            [{"role": "user", "content": f"message number {i}"}], scope=Scope("u"), session_key="s"
        )
    mem.close()
    with TdaiMemory.open(tmp_path, embeddings=None) as again:
        assert again.stats(user_id="u").messages == 20


def test_an_unclosed_memory_is_shut_down_when_collected(tmp_path: Path) -> None:
    import gc

    def background() -> set[threading.Thread]:
        names = ("tdai-vectors", "tdai-l0-writer")
        return {t for t in threading.enumerate() if t.name in names}

    before = background()
    mem = TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(32))
    mem._capture_turn(
        [{"role": "user", "content": "kept anyway"}], scope=Scope("u"), session_key="s"
    )
    assert len(background() - before) == 2
    del mem
    gc.collect()
    deadline = time.monotonic() + 10
    while background() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not background() - before
    with TdaiMemory.open(tmp_path, embeddings=None) as again:
        assert again.search_conversations("kept anyway", user_id="u")
