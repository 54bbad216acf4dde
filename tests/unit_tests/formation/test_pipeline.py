"""Extraction runs end to end: cursors, windows, failures, atomic commits, leases."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.testing import FormationWindow, ScriptedFormationModel
from tests.unit_tests.formation.conftest import OpenMemory, contents, say


def cursor(memory: TdaiMemory, session: str = "s1", user_id: str | None = None) -> int:
    scope_id = memory._store.formation.scope_id(memory.scope(user_id))
    assert scope_id is not None
    return memory._store.formation.session(scope_id, session).cursor


def pending(memory: TdaiMemory) -> int:
    return sum(p.messages for p in memory._store.formation.pending())


def test_extract_forms_memories_and_moves_the_cursor(open_memory: OpenMemory) -> None:
    memory = open_memory()
    say(memory, ["I am vegetarian.", "My daughter is called Mia."])
    report = memory.extract()
    assert report.ok and report.windows == 1 and report.messages == 4
    assert contents(memory) == ["I am vegetarian.", "My daughter is called Mia."]
    assert cursor(memory) > 0 and pending(memory) == 0
    stored = memory.list_memories()[0]
    assert stored.session_key == "s1" and len(stored.source_message_ids) == 1
    assert memory.extract().windows == 0  # nothing left: no call at all


def test_extract_without_a_model_is_a_clear_error() -> None:
    with TdaiMemory.open(None, embeddings=None) as memory:
        with pytest.raises(ConfigError, match="extraction_model"):
            memory.extract()
        memory.record_messages([{"role": "user", "content": "hi"}], session_key="s1")
        assert memory.flush(timeout=30)  # nothing to form without a model
        assert memory.list_memories() == []


def _fail_once(kind: str) -> Any:
    """An extract handler whose first answer is bad in the given way, then correct."""
    state = {"calls": 0}

    def extract(window: FormationWindow) -> Any:
        state["calls"] += 1
        if state["calls"] == 1:
            if kind == "malformed":
                return "Sure, here are the memories: {memories: [oops"
            if kind == "truncated":
                return '{"memories": [{"content": "The user is vegetar'
            if kind == "empty":
                return ""
            if kind == "cut_off":
                return AIMessage(
                    content='{"memories": []}', response_metadata={"finish_reason": "length"}
                )
            if kind == "failing":
                msg = "503 Service Unavailable"
                raise RuntimeError(msg)
            if kind == "slow":
                time.sleep(1.5)
        return [
            {"content": m["text"], "type": "persona", "priority": 60, "source_ids": [m["id"]]}
            for m in window.messages
            if m["role"] == "user"
        ]

    return extract


@pytest.mark.parametrize("kind", ["malformed", "truncated", "empty", "cut_off", "failing", "slow"])
def test_G_X1_a_bad_answer_leaves_the_cursor_and_is_retried(
    open_memory: OpenMemory, kind: str
) -> None:
    model = ScriptedFormationModel(extract=_fail_once(kind), tool_calling=False)
    memory = open_memory(model, {"extraction": {"timeoutSeconds": 0.5}})
    say(memory, ["I am vegetarian."])
    first = memory.extract()
    assert first.failed_windows == 1 and not first.ok and first.errors
    assert cursor(memory) == 0 and pending(memory) == 2  # nothing consumed, nothing written
    assert contents(memory) == []
    second = memory.extract()  # explicit: the retry backoff does not apply
    assert second.ok and second.windows == 1
    assert contents(memory) == ["I am vegetarian."]
    assert pending(memory) == 0


def test_explicit_nothing_to_remember_moves_the_cursor(open_memory: OpenMemory) -> None:
    memory = open_memory(ScriptedFormationModel(extract=lambda w: []))
    say(memory, ["hi", "thanks"])
    report = memory.extract()
    assert report.ok and report.windows == 1 and report.extracted == 0
    assert pending(memory) == 0 and contents(memory) == []


def test_G_X2_every_message_past_the_cursor_is_extracted_in_windows(
    open_memory: OpenMemory,
) -> None:
    model = ScriptedFormationModel()
    memory = open_memory(model, {"extraction": {"windowMessages": 7, "maxWindowsPerRun": 100}})
    texts = [f"Fact number {i} about the user." for i in range(60)]
    say(memory, texts)
    report = memory.extract()
    assert report.ok and report.messages == 120 and report.windows == 18  # ceil(120 / 7)
    assert contents(memory) == sorted(texts)
    assert all(len(c.user.split('"id":"m')) - 1 <= 7 for c in model.calls_of("extract"))


def test_runs_stop_at_their_window_budget_and_extract_goes_on(open_memory: OpenMemory) -> None:
    memory = open_memory(config={"extraction": {"windowMessages": 2, "maxWindowsPerRun": 3}})
    say(memory, [f"fact {i}" for i in range(10)])
    scope_id = memory._store.formation.scope_id(memory.scope())
    assert scope_id is not None
    engine = memory._formation.engine  # type: ignore[union-attr]
    from langchain_tdai_recall.formation.pipeline import RunRequest

    scope = memory.scope()
    one = engine.run(RunRequest(scope_id=scope_id, scope=scope, force=True))
    assert one.report.windows == 3 and one.report.pending_messages == 14  # a run is bounded
    report = memory.extract()  # explicit extraction runs until nothing is left
    assert report.windows == 7 and report.pending_messages == 0 and report.scopes == 1
    assert len(contents(memory)) == 10


def test_G_X12_prompts_are_bounded_by_the_configured_caps(open_memory: OpenMemory) -> None:
    from langchain_tdai_recall.formation.prompts import parse_section

    model = ScriptedFormationModel(extract=lambda w: [])
    cfg = {"extraction": {"windowChars": 3000, "messageChars": 500, "backgroundChars": 600}}
    memory = open_memory(model, cfg)
    say(memory, ["word " * 5000, "short", "x" * 2000, *(c * 900 for c in "abcdefg")])
    report = memory.extract()
    assert report.ok and report.windows >= 2
    for call in model.calls_of("extract"):
        texts = [str(m["text"]) for m in parse_section(call.user, "new_messages")]
        background = [str(m["text"]) for m in parse_section(call.user, "background")]
        assert all(len(t) <= 500 for t in texts + background)
        assert len(texts) == 1 or sum(len(t) for t in texts) <= 3000
        assert sum(len(t) for t in background) <= 600
    # per-message JSON overhead (id, role, time, quotes) is under 100 characters
    system = len(model.calls_of("extract")[0].system)
    assert max(report.prompt_chars) <= system + 3000 + 600 + 100 * 24 + 200


def test_failed_windows_are_split_so_one_bad_window_cannot_block_forever(
    open_memory: OpenMemory,
) -> None:
    sizes: list[int] = []

    def extract(window: FormationWindow) -> Any:
        sizes.append(len(window.messages))
        if len(window.messages) > 2:
            msg = "output limit"
            raise RuntimeError(msg)
        return []

    memory = open_memory(
        ScriptedFormationModel(extract=extract), {"extraction": {"windowMessages": 8}}
    )
    say(memory, [f"t{i}" for i in range(4)])
    for _ in range(20):
        if pending(memory) == 0:
            break
        memory.extract()
    assert pending(memory) == 0
    assert sizes[:4] == [8, 8, 4, 2]  # halved after each further failure


def test_G_X7_a_crash_inside_the_commit_writes_nothing(
    open_memory: OpenMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = open_memory()
    memory.add_memory("The user lives in Berlin.")
    say(memory, ["I moved to Paris.", "I like jazz."])
    db = memory._store._db
    original = db.write_memory_row
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            msg = "disk full"
            raise OSError(msg)
        return original(*args, **kwargs)

    monkeypatch.setattr(db, "write_memory_row", failing)
    report = memory.extract()
    assert not report.ok and "disk full" in " ".join(report.errors)
    assert contents(memory) == ["The user lives in Berlin."]  # the first write rolled back
    assert cursor(memory) == 0
    monkeypatch.setattr(db, "write_memory_row", original)
    assert memory.extract().ok
    assert contents(memory) == ["I like jazz.", "I moved to Paris.", "The user lives in Berlin."]


def test_G_X6_messages_recorded_during_a_run_are_not_skipped(open_memory: OpenMemory) -> None:
    holder: dict[str, TdaiMemory] = {}
    state = {"first": True}

    def extract(window: FormationWindow) -> Any:
        if state["first"]:  # a turn is captured while the model thinks
            state["first"] = False
            say(holder["m"], ["I also play the cello."])
        return [
            {"content": m["text"], "type": "persona", "priority": 50, "source_ids": [m["id"]]}
            for m in window.messages
            if m["role"] == "user"
        ]

    memory = open_memory(ScriptedFormationModel(extract=extract))
    holder["m"] = memory
    say(memory, ["I play the piano."])
    memory.extract()
    assert contents(memory) == ["I also play the cello.", "I play the piano."]
    assert pending(memory) == 0


def test_a_commit_after_the_cursor_moved_is_refused(open_memory: OpenMemory) -> None:
    memory = open_memory()
    say(memory, ["one"])
    scope_id = memory._store.formation.scope_id(memory.scope())
    assert scope_id is not None
    records = memory._store.formation
    memory.extract()
    outcome = records.commit(
        scope_id,
        owner=None,
        upserts=[],
        deletes=[],
        actor="extraction",
        embedder=None,
        session_key="s1",
        expected_cursor=0,  # stale: another run already moved it
        new_cursor=99,
    )
    assert not outcome.ok and "cursor moved" in outcome.reason
    assert cursor(memory) == 2


def test_G_X18_only_one_run_per_scope_even_across_stores_sharing_a_directory(
    tmp_path: Any,
) -> None:
    from langchain_tdai_recall.testing import HashEmbeddings
    from tests.unit_tests.formation.conftest import FAST

    gate = threading.Event()
    calls: list[int] = []

    def slow(window: FormationWindow) -> Any:
        calls.append(len(window.messages))
        gate.wait(5)
        return [{"content": m["text"], "type": "persona", "priority": 50} for m in window.messages]

    model = ScriptedFormationModel(extract=slow)
    path = tmp_path / "shared"
    a = TdaiMemory.open(path, embeddings=HashEmbeddings(), config=FAST, extraction_model=model)
    b = TdaiMemory.open(path, embeddings=HashEmbeddings(), config=FAST, extraction_model=model)
    try:
        say(a, ["alpha"], answer="")
        reports: list[Any] = []
        worker = threading.Thread(target=lambda: reports.append(a.extract()))
        worker.start()
        for _ in range(100):
            if calls:
                break
            time.sleep(0.02)
        locked = b.extract()  # the other "process" holds the scope's lease
        assert locked.locked_scopes == 1 and locked.windows == 0
        gate.set()
        worker.join(10)
        assert reports[0].windows == 1
        assert calls == [1]
        assert contents(b) == ["alpha"]
    finally:
        gate.set()
        a.close()
        b.close()


def test_runs_are_traced_with_token_usage(open_memory: OpenMemory) -> None:
    memory = open_memory()
    say(memory, ["I am vegetarian."])
    report = memory.extract()
    assert report.model_calls >= 1 and report.input_tokens > 0 and report.output_tokens > 0
    assert report.total_tokens == report.input_tokens + report.output_tokens


def test_scope_locks_are_dropped_when_idle(open_memory: OpenMemory) -> None:
    """A process serving many users keeps no formation lock for a scope nobody runs (issue 23)."""
    memory = open_memory()
    engine = memory._formation.engine  # type: ignore[union-attr]
    for user in range(20):
        say(memory, [f"fact {user}"], user_id=f"u{user}")
    memory.extract()
    assert engine.held_scope_locks() == 0
    held = engine.scope_lock(7)
    assert held.acquire(timeout=0)
    waiting = engine.scope_lock(7)
    assert waiting is held  # the same lock while a caller holds it
    assert not waiting.acquire(timeout=0)
    assert engine.held_scope_locks() == 1
    held.release()
    assert engine.held_scope_locks() == 0
