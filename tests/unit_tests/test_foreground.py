"""Callers before background work on the local store's write lock (issue 26 item 5).

`record_messages` p99 overhead with formation on was +5.6 to +15.8 ms back to back: profiling
showed the caller waiting for the store's write lock while background workers (vector upkeep,
formation) took it again and again in front of it (up to five transactions in one wait).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall._runtime import foreground as _foreground
from langchain_tdai_recall._runtime.foreground import (
    ForegroundFirstLock,
    in_background,
    mark_background,
)


def _background(target: object) -> threading.Thread:
    def run() -> None:
        mark_background()
        target()  # type: ignore[operator]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_background_transactions_stay_out_of_a_callers_run_of_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_foreground, "CALLER_GRACE_S", 0.05)  # margin for a loaded machine
    with TdaiMemory.open(tmp_path / "s", embeddings=None) as memory:
        records = memory._store.records
        starts: list[float] = []
        first = threading.Event()
        stop = threading.Event()

        give_up = time.monotonic() + 3.0  # a plain lock starves the caller until then

        def transactions() -> None:  # a worker writing in a run of 5 ms transactions
            while not stop.is_set() and time.monotonic() < give_up:
                with records._write():  # type: ignore[attr-defined]
                    starts.append(time.monotonic())
                    first.set()
                    time.sleep(0.005)

        worker = _background(transactions)
        assert first.wait(5)
        began = time.monotonic()
        for i in range(20):  # a caller writing turn after turn
            memory.record_messages([{"role": "user", "content": f"turn {i}"}], session_key="s")
        ended = time.monotonic()
        stop.set()
        worker.join(5)
    # with a plain lock the worker took the lock again at once, call after call (thousands of
    # its transactions went first on main), or took turns with the caller
    assert [t for t in starts if began < t < ended] == []
    assert len(starts) >= 2  # and it went on once the caller stopped


def test_the_lock_is_reentrant_and_bounded() -> None:
    lock = ForegroundFirstLock()
    with lock, lock:
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(lock.acquire(timeout=0.05)))
        thread.start()
        thread.join(5)
        assert result == [False]  # timed out: held by this thread
        assert lock.acquire(blocking=False)  # reentrant
        lock.release()
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()


def test_background_threads_are_marked() -> None:
    seen: list[bool] = []
    _background(lambda: seen.append(in_background())).join(5)
    assert seen == [True] and not in_background()


def test_background_work_is_not_starved_by_a_stream_of_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_foreground, "BACKGROUND_MAX_WAIT_S", 0.05)
    lock = ForegroundFirstLock()
    until = time.monotonic() + 1.0

    def caller() -> None:  # two of them: one always waits while the other holds the lock
        while time.monotonic() < until:
            with lock:
                time.sleep(0.005)

    callers = [threading.Thread(target=caller) for _ in range(2)]
    for thread in callers:
        thread.start()
    time.sleep(0.05)
    began = time.monotonic()
    got: list[float] = []
    _background(lambda: (lock.acquire(), got.append(time.monotonic()), lock.release())).join(5)
    for thread in callers:
        thread.join(5)
    assert got and got[0] - began < 0.5  # it stepped aside for 0.05 s, not for the whole stream


def test_a_background_thread_steps_aside_only_while_a_caller_waits() -> None:
    lock = ForegroundFirstLock()
    order: list[str] = []
    lock.acquire()
    worker = _background(lambda: (lock.acquire(), order.append("background"), lock.release()))
    time.sleep(0.02)
    caller = threading.Thread(
        target=lambda: (lock.acquire(), order.append("caller"), lock.release())
    )
    caller.start()
    time.sleep(0.02)
    lock.release()
    caller.join(5)
    worker.join(5)
    assert order == ["caller", "background"]
