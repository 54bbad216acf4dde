"""Formation inside the facade: the L0 writer's hook, flush() and close() ordering."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel
from langchain_tdai_recall.types import Scope
from tests.unit_tests.formation.conftest import FAST, OpenMemory, contents, merge, say

BACKGROUND = merge(FAST, {"pipeline": {"enabled": True, "everyNConversations": 5}})


def capture(memory: TdaiMemory, text: str, *, session: str = "s1") -> None:
    """One agent turn as the adapters hand it over (the background L0 writer stores it)."""
    memory._capture_turn(
        [{"role": "user", "content": text}, {"role": "assistant", "content": "OK."}],
        scope=Scope("default_user"),
        session_key=session,
    )


def test_every_stored_turn_notifies_formation_exactly_once(
    open_memory: OpenMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = open_memory(config=BACKGROUND)
    assert memory._formation is not None
    seen: list[tuple[Scope, str]] = []
    notify = memory._formation.notify

    def counting(scope: Scope, session_key: str) -> None:
        seen.append((scope, session_key))
        notify(scope, session_key)

    monkeypatch.setattr(memory._formation, "notify", counting)
    for i in range(3):
        capture(memory, f"captured {i}", session="a")
    say(memory, ["recorded 0", "recorded 1"], session="b")  # two record_messages calls
    memory.record_messages([{"role": "system", "content": "not a turn"}], session_key="b")
    assert memory.flush(timeout=30)
    assert sorted(key for _, key in seen) == ["a", "a", "a", "b", "b"]
    assert {scope for scope, _ in seen} == {Scope("default_user")}


def test_close_writes_captured_turns_before_it_forms_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    memory = TdaiMemory.open(
        path,
        embeddings=HashEmbeddings(dims=64),
        config=merge(FAST, {"pipeline": {"enabled": False}}),
        extraction_model=ScriptedFormationModel(),
    )
    store = memory._store
    put = store.put_messages

    def slow_put(*args: Any, **kwargs: Any) -> int:
        time.sleep(0.2)  # the turn is still queued in the writer when close() starts
        return put(*args, **kwargs)

    monkeypatch.setattr(store, "put_messages", slow_put)
    capture(memory, "I keep bees.")
    memory.close()
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as reopened:
        assert contents(reopened) == ["I keep bees."]  # formed at close, after it was written


def test_flush_reports_a_timeout_and_keeps_the_work(open_memory: OpenMemory) -> None:
    memory = open_memory(ScriptedFormationModel(delay_s=1.0))
    say(memory, ["I keep bees."])
    started = time.monotonic()
    assert memory.flush(timeout=0.2) is False  # the model is slower than the bound
    assert time.monotonic() - started < 0.9
    assert memory.flush(timeout=30) is True
    assert contents(memory) == ["I keep bees."]


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_flush_is_false_while_a_window_failed_and_messages_are_pending(
    open_memory: OpenMemory, timeout: float | None
) -> None:
    failing = {"on": True}

    def extract(window: Any) -> Any:
        if failing["on"]:
            msg = "provider down"
            raise RuntimeError(msg)
        return [
            {"content": m["text"], "type": "persona", "priority": 60, "source_ids": [m["id"]]}
            for m in window.messages
            if m["role"] == "user"
        ]

    memory = open_memory(ScriptedFormationModel(extract=extract))
    say(memory, ["I keep bees."])
    assert memory.flush(timeout=timeout) is False  # the window failed: its messages are pending
    assert contents(memory) == []
    failing["on"] = False
    assert memory.flush(timeout=timeout) is True
    assert contents(memory) == ["I keep bees."]
