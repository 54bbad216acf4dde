"""The one failure policy (`_runtime.failure`): what is raised, what degrades, what is logged."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall._runtime.failure import log_failure, report_failure, report_timeout
from langchain_tdai_recall._turn import TurnIdentity, capture_turn
from langchain_tdai_recall.errors import RecallTimeoutError, ScopeError
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope

_SECRET = "/stores/users/alice-private/persona.md"
_POLICY_LOGGER = "langchain_tdai_recall._runtime.failure"


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]


def test_a_skipped_failure_names_the_step_and_type_and_keeps_the_message_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall")
    report_failure(OSError(_SECRET), action="L0 capture")
    report_failure(OSError(_SECRET), action="recall", degraded="skipping memory injection")
    assert _loud(caplog) == [
        "L0 capture failed: OSError",
        "recall failed (OSError); skipping memory injection",
    ]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 2
    assert all(_SECRET in r.getMessage() and r.exc_info for r in debug)


def test_raise_and_scope_errors_are_raised_and_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall")
    with pytest.raises(OSError, match="disk"):
        report_failure(OSError("disk"), action="recall", on_error="raise")
    with pytest.raises(ScopeError):
        report_failure(ScopeError("bad user"), action="recall", on_error="skip")
    with pytest.raises(RecallTimeoutError):
        report_timeout(250, on_error="raise")
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


def test_steps_that_never_raise_only_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="langchain_tdai_recall")
    log_failure(ScopeError(_SECRET), action="reranker", degraded="injecting the fused order")
    assert _loud(caplog) == ["reranker failed (ScopeError); injecting the fused order"]


def test_the_engine_and_the_turn_log_through_the_one_policy(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A recall failure (the engine) and a capture failure (the turn) come from one logger."""
    caplog.set_level(logging.DEBUG, logger="langchain_tdai_recall")
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=32)) as mem:
        mem.add_memory("The user is allergic to peanuts.", user_id="alice")

        def broken_persona(scope: object) -> None:
            raise OSError(_SECRET)

        monkeypatch.setattr(mem._store.documents, "get_persona", broken_persona)
        assert mem.recall("peanut cake?", user_id="alice") is None

        def broken_capture(
            messages: Sequence[Mapping[str, str]], *, scope: Scope, session_key: str
        ) -> None:
            raise OSError(_SECRET)

        monkeypatch.setattr(mem, "capture_turn", broken_capture)
        identity = TurnIdentity(Scope("alice"), "s1", "constructor")
        assert capture_turn(mem, identity, human="hi", answer="hello") == 0
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    by_policy = [r.getMessage() for r in warned if r.name == _POLICY_LOGGER]
    assert by_policy == [
        "recall failed (OSError); skipping memory injection for this turn",
        "L0 capture failed: OSError",
    ]
    assert not any(_SECRET in r.getMessage() for r in warned)
    assert sum(_SECRET in r.getMessage() for r in caplog.records) == 2  # both at DEBUG
