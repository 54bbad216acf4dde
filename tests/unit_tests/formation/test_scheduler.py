"""Background scheduling: warm-up, every N turns, idle, flush, close, open, never blocking."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.formation.prompts import parse_section
from langchain_tdai_recall.testing import FormationWindow, HashEmbeddings, ScriptedFormationModel
from tests.unit_tests.formation.conftest import FAST, OpenMemory, contents, merge, say, wait_idle

BACKGROUND: dict[str, Any] = {
    "pipeline": {"enabled": True, "everyNConversations": 5, "l1IdleTimeoutSeconds": 3600}
}


def extract_windows(model: ScriptedFormationModel) -> list[int]:
    """New user messages per extraction call."""
    return [
        sum(1 for m in parse_section(c.user, "new_messages") if m["role"] == "user")
        for c in model.calls_of("extract")
    ]


def test_warm_up_runs_after_turns_1_3_7_then_every_5(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel()
    memory = open_memory(model, BACKGROUND)
    runs_after: list[int] = []
    for turn in range(1, 18):
        before = len(model.calls_of("extract"))
        say(memory, [f"fact {turn}"])
        wait_idle(memory)
        if len(model.calls_of("extract")) > before:
            runs_after.append(turn)
    assert runs_after == [1, 3, 7, 12, 17]
    assert extract_windows(model) == [1, 2, 4, 5, 5]
    assert len(contents(memory)) == 17


def test_without_warm_up_every_n_turns(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel()
    cfg = merge(BACKGROUND, {"pipeline": {"enableWarmup": False, "everyNConversations": 3}})
    memory = open_memory(model, cfg)
    for turn in range(7):
        say(memory, [f"fact {turn}"])
        wait_idle(memory)
    assert extract_windows(model) == [3, 3]


def test_sessions_count_their_own_turns(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel()
    cfg = merge(BACKGROUND, {"pipeline": {"enableWarmup": False, "everyNConversations": 2}})
    memory = open_memory(model, cfg)
    say(memory, ["a1"], session="a")
    say(memory, ["b1"], session="b")
    wait_idle(memory)
    assert model.calls_of("extract") == []
    say(memory, ["a2"], session="a")
    wait_idle(memory)
    assert contents(memory) == ["a1", "a2"]


def test_idle_sessions_are_formed_after_the_timeout(open_memory: OpenMemory) -> None:
    cfg = merge(
        BACKGROUND,
        {
            "pipeline": {
                "enableWarmup": False,
                "everyNConversations": 10,
                "l1IdleTimeoutSeconds": 0.3,
            }
        },
    )
    memory = open_memory(config=cfg)
    say(memory, ["I like chess.", "I live in Lyon."])
    wait_idle(memory)
    assert contents(memory) == []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(contents(memory)) < 2:
        time.sleep(0.05)
    assert contents(memory) == ["I like chess.", "I live in Lyon."]


def test_G_X3_flush_and_close_form_sub_threshold_turns(tmp_path: Path) -> None:
    cfg = merge(FAST, merge(BACKGROUND, {"pipeline": {"enableWarmup": False}}))
    path = tmp_path / "store"
    model = ScriptedFormationModel()
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=cfg, extraction_model=model
    ) as memory:
        say(memory, ["I like chess."])
        assert memory.flush(timeout=30)
        assert len(model.calls_of("extract")) == 1 and contents(memory) == ["I like chess."]
        say(memory, ["I live in Lyon."])  # below the threshold, then the store closes
    with TdaiMemory.open(path, embeddings=HashEmbeddings(), config=cfg) as reopened:
        assert contents(reopened) == ["I like chess.", "I live in Lyon."]


def test_end_session_forms_it_now(open_memory: OpenMemory) -> None:
    cfg = merge(BACKGROUND, {"pipeline": {"enableWarmup": False}})
    memory = open_memory(config=cfg)
    say(memory, ["I like chess."], session="chat-1")
    wait_idle(memory)
    assert contents(memory) == []
    memory.end_session("chat-1")
    wait_idle(memory)
    assert contents(memory) == ["I like chess."]


def test_G_X5_pending_work_is_resumed_when_the_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "store"
    off = merge(FAST, {"pipeline": {"flushOnClose": False}})
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=off, extraction_model=ScriptedFormationModel()
    ) as memory:
        say(memory, ["I like chess.", "I live in Lyon."])  # never formed: no trigger, no flush
    model = ScriptedFormationModel()
    cfg = merge(FAST, BACKGROUND)
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=cfg, extraction_model=model
    ) as m:
        wait_idle(m)
        assert contents(m) == ["I like chess.", "I live in Lyon."]  # without any new turn


def test_G_X4_turns_arriving_during_a_run_are_not_swallowed(open_memory: OpenMemory) -> None:
    gate = threading.Event()
    started = threading.Event()

    def slow(window: FormationWindow) -> Any:
        started.set()
        gate.wait(5)
        return [
            {"content": m["text"], "type": "persona", "priority": 50}
            for m in window.messages
            if m["role"] == "user"
        ]

    model = ScriptedFormationModel(extract=slow)
    cfg = merge(BACKGROUND, {"pipeline": {"enableWarmup": False, "everyNConversations": 2}})
    memory = open_memory(model, cfg)
    say(memory, ["t1", "t2"])
    assert started.wait(5)
    say(memory, ["t3", "t4"])  # reaches the threshold while the first run is busy
    gate.set()
    wait_idle(memory)
    assert contents(memory) == ["t1", "t2", "t3", "t4"]


def test_a_turn_stored_while_its_session_is_counted_is_not_lost(
    open_memory: OpenMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = merge(BACKGROUND, {"pipeline": {"enableWarmup": False, "everyNConversations": 2}})
    memory = open_memory(ScriptedFormationModel(), cfg)
    assert memory._formation is not None
    records = memory._formation.engine.records
    count = records.backlog
    pending = ["t2"]

    def backlog(scope_id: int, key: str) -> Any:
        found = count(scope_id, key)
        while pending:  # the next turn lands right after the count, before it is stamped
            say(memory, [pending.pop()])
        return found

    monkeypatch.setattr(records, "backlog", backlog)
    say(memory, ["t1"])  # the first notification counts the session from the store
    wait_idle(memory)
    assert contents(memory) == ["t1", "t2"]  # two turns reach the threshold of 2


def test_a_turn_never_waits_for_a_slow_model(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel(delay_s=1.0)
    memory = open_memory(model, merge(BACKGROUND, {"pipeline": {"enableWarmup": True}}))
    started = time.perf_counter()
    for turn in range(5):
        say(memory, [f"fact {turn}"])
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5  # five turns, while a 1 s model call runs in the background
    wait_idle(memory, timeout=20)
    assert len(contents(memory)) == 5


def test_failures_are_logged_retried_and_never_raised_into_a_turn(
    open_memory: OpenMemory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall")
    state = {"calls": 0}

    def flaky(window: FormationWindow) -> Any:
        state["calls"] += 1
        if state["calls"] <= 2:
            msg = "provider outage"
            raise RuntimeError(msg)
        return [
            {"content": m["text"], "type": "persona", "priority": 50}
            for m in window.messages
            if m["role"] == "user"
        ]

    memory = open_memory(ScriptedFormationModel(extract=flaky), BACKGROUND)
    say(memory, ["I like chess."])  # the turn succeeds although formation fails behind it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not contents(memory):
        time.sleep(0.05)
    assert contents(memory) == ["I like chess."]
    assert state["calls"] == 3
    assert "provider outage" in caplog.text  # at DEBUG only (test_formation_logs_carry_...)


def test_G_X20_an_empty_capture_is_not_a_turn(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel()
    memory = open_memory(model, BACKGROUND)
    for _ in range(5):
        assert memory.record_messages([{"role": "user", "content": "   "}], session_key="s1") == 0
        memory.record_messages([{"role": "system", "content": "x"}], session_key="s1")
    wait_idle(memory)
    assert model.calls_of("extract") == []
    say(memory, ["a real turn"])
    wait_idle(memory)
    assert contents(memory) == ["a real turn"]  # the first real turn is turn 1 of the warm-up


def test_G_X19_evicted_or_restarted_sessions_keep_their_warm_up(tmp_path: Path) -> None:
    path = tmp_path / "store"
    cfg = merge(FAST, BACKGROUND)
    model = ScriptedFormationModel()
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=cfg, extraction_model=model
    ) as m:
        for turn in ("t1", "t2", "t3"):  # warm-up runs after 1 and 3: the threshold is now 4
            say(m, [turn])
            wait_idle(m)
        scope_id = m._store.formation.scope_id(m.scope())
        assert scope_id is not None
        assert m._store.formation.session(scope_id, "s1").warmup == 4
    model2 = ScriptedFormationModel()
    with TdaiMemory.open(
        path, embeddings=HashEmbeddings(), config=cfg, extraction_model=model2
    ) as m:
        for turn in range(3):
            say(m, [f"u{turn}"])
            wait_idle(m)
        assert model2.calls_of("extract") == []  # upstream restarted the warm-up at 1
        say(m, ["u3"])
        wait_idle(m)
        assert extract_windows(model2) == [4]


def test_background_disabled_forms_only_on_request(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel()
    memory = open_memory(model)  # FAST switches the background off
    say(memory, [f"t{i}" for i in range(8)])
    wait_idle(memory)
    assert model.calls_of("extract") == []
    assert memory.flush(timeout=30)
    assert len(model.calls_of("extract")) == 1


def test_formation_logs_carry_no_exception_message_and_no_user_id_above_debug(
    open_memory: OpenMemory, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 18 item 7: warnings carried the exception text and the user id
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall")

    def failing(window: FormationWindow) -> Any:
        msg = "quota exceeded for account acct-7731"
        raise RuntimeError(msg)

    memory = open_memory(ScriptedFormationModel(extract=failing))
    say(memory, ["I like chess."], user_id="user-4412")
    report = memory.extract(user_id="user-4412")
    assert report.failed_windows == 1
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert any(r.levelno == logging.WARNING and "RuntimeError" in r.getMessage() for r in loud)
    for record in loud:
        text = record.getMessage() + str(record.exc_info or "")
        assert "acct-7731" not in text and "user-4412" not in text, text
        assert "I like chess" not in text
    debug = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert "acct-7731" in debug  # the details are there for whoever turns DEBUG on
