"""The end of a turn: L0 capture and the `tdai_agent_turn` report.

`capture_turn` hands the turn's human text and final answer to the store's background writer
(the one capture path of every adapter; the writer then counts the turn for memory formation).
`turn_event` builds the payload, `emit_turn` / `aemit_turn` dispatch it and call `on_turn`;
neither capture nor reporting ever ends a turn (`_runtime.failure`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NotRequired, TypedDict

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event

from langchain_tdai_recall._runtime.failure import report_failure
from langchain_tdai_recall._turn.identity import TurnIdentity
from langchain_tdai_recall._turn.recall import RecallOutcome
from langchain_tdai_recall.types import MemoryChannel

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = [
    "TURN_EVENT",
    "OnTurn",
    "TurnEvent",
    "TurnMemory",
    "aemit_turn",
    "capture_turn",
    "emit_turn",
    "l0_messages",
    "turn_event",
]


logger = logging.getLogger("langchain_tdai_recall._turn")


TURN_EVENT: Final = "tdai_agent_turn"
"""Name of the LangChain custom event emitted after every agent turn."""


# -- L0 capture -----------------------------------------------------------------------------------


def l0_messages(human: object, answer: object) -> list[dict[str, str]]:
    """The L0 messages of a finished turn: the human text as typed and the final answer.

    Non-text and blank values are left out.
    """
    pairs = (("user", human), ("assistant", answer))
    return [
        {"role": role, "content": text}
        for role, text in pairs
        if isinstance(text, str) and text.strip()
    ]


def capture_turn(
    memory: MemoryHost, identity: TurnIdentity, *, human: object, answer: object
) -> int:
    """Hand a finished turn to the store's background writer; the one L0 capture path.

    Never blocks the answer and never raises (a failure is logged, per the failure policy).

    Returns:
        How many messages were handed to capture (0 when there was nothing to record or the
        hand-over failed). The store may still skip some, for example ids it already holds.
    """
    messages = l0_messages(human, answer)
    if not messages:
        return 0
    try:
        memory.capture_turn(messages, scope=identity.scope, session_key=identity.session_key)
    except Exception as exc:  # capture must never end the turn
        report_failure(exc, action="L0 capture")
        return 0
    return len(messages)


# -- the turn report ------------------------------------------------------------------------------


class TurnMemory(TypedDict):
    """One memory that reached the model in a turn, in a `TurnEvent`."""

    id: str
    """Memory id."""
    content: NotRequired[str]
    """The memory text. Always given to `on_turn`; in the `tdai_agent_turn` custom event (which
    `astream_events` and tracing see) only with `recall.trace_memory_text`."""
    score: float | None
    """Relevance to the turn's message in [0, 1] (`RecalledMemory.score`): for the memory block
    what the injection threshold compared; for the system context the score this turn's search
    gave the memory, or `None` when the search did not score it (it is injected every turn)."""
    type: str
    """Memory type."""
    channel: MemoryChannel
    """Where it reached the model: `block` (the memory block before the user's message), or the
    system context's `standing_rule`, `pinned` or `profile`."""


class TurnEvent(TypedDict):
    """Payload of the `tdai_agent_turn` custom event and of `on_turn` (SPEC §10)."""

    user_id: str
    """User of the scope (the store's default user when none was given)."""
    agent_id: str | None
    """Agent of the scope."""
    session_key: str
    """Session the turn belongs to."""
    memories: list[TurnMemory]
    """Every memory that reached the model this turn, with its channel and score, in the order
    the model reads them (`RecallResult.injected`): the system context's standing rules, pinned
    memories and profile, then the memory block, best ranked first."""
    persona_injected: bool
    """Whether a persona was part of the injected system context."""
    strategy: str
    """Strategy recall actually used; `none` when recall was off or failed."""
    pending_vectors: int
    """Memories of the scope whose vectors were not computed yet at recall time (the vector leg
    could not see them; with none computed at all, `strategy` is `keyword`)."""
    pinned: int
    """Memories pinned by priority into the system context this turn (listed in `memories`)."""
    profile: int
    """Memories in the user profile of the system context this turn (listed in `memories`)."""
    recall_ms: float
    """Recall duration."""
    injected_chars: int
    """Characters added to the prompt (both blocks)."""
    tool_calls_used: int
    """Memory search calls that ran this turn."""
    tool_calls_blocked: int
    """Memory search calls refused by the per-turn budget."""
    l0_recorded: int
    """Messages handed to L0 capture after the turn (written in the background)."""
    error: str | None
    """Why recall degraded or failed, if it did."""


def turn_event(
    identity: TurnIdentity,
    recall: RecallOutcome | None,
    *,
    used: int,
    blocked: int,
    recorded: int,
) -> TurnEvent:
    """Build the `tdai_agent_turn` payload of a finished turn."""
    result = recall.result if recall is not None else None
    return TurnEvent(
        user_id=identity.scope.user_id,
        agent_id=identity.scope.agent_id,
        session_key=identity.session_key,
        memories=[
            TurnMemory(id=m.id, content=m.content, score=m.score, type=m.type, channel=m.channel)
            for m in (result.injected if result is not None else ())
        ],
        persona_injected=bool(result is not None and result.persona),
        strategy=result.strategy if result is not None else "none",
        pending_vectors=result.pending_vectors if result is not None else 0,
        pinned=len(result.pinned) if result is not None else 0,
        profile=len(result.profile) if result is not None else 0,
        recall_ms=round(recall.elapsed_ms, 3) if recall is not None else 0.0,
        injected_chars=result.injected_chars if result is not None else 0,
        tool_calls_used=used,
        tool_calls_blocked=blocked,
        l0_recorded=recorded,
        error=recall.error if recall is not None else None,
    )


OnTurn = Callable[[TurnEvent], object]
"""Callback receiving every `TurnEvent`; in async runs it may return an awaitable."""


def _dispatch_failed(exc: Exception) -> None:
    # No parent run (a hook called outside a graph); failing handlers are handled by LangChain.
    logger.debug("could not dispatch %s: %s", TURN_EVENT, type(exc).__name__)


def traced_event(event: TurnEvent, text: bool) -> TurnEvent:
    """The event as the custom event carries it: without the memory texts unless `text`."""
    if text:
        return event
    memories = [
        TurnMemory(id=m["id"], score=m["score"], type=m["type"], channel=m["channel"])
        for m in event["memories"]
    ]
    return {**event, "memories": memories}


def emit_turn(event: TurnEvent, on_turn: OnTurn | None, *, text: bool = False) -> None:
    """Emit the `tdai_agent_turn` custom event and call `on_turn`; never raises.

    The custom event carries the memory texts only when `text` (`recall.trace_memory_text`);
    `on_turn` always receives the whole event.
    """
    try:
        dispatch_custom_event(TURN_EVENT, traced_event(event, text))
    except Exception as exc:
        _dispatch_failed(exc)
    if on_turn is not None:
        try:
            on_turn(event)
        except Exception as exc:  # an observer must never end the turn
            report_failure(exc, action="on_turn callback")


async def aemit_turn(event: TurnEvent, on_turn: OnTurn | None, *, text: bool = False) -> None:
    """Async version of `emit_turn` (`on_turn` may be a coroutine function)."""
    try:
        await adispatch_custom_event(TURN_EVENT, traced_event(event, text))
    except Exception as exc:
        _dispatch_failed(exc)
    if on_turn is not None:
        try:
            maybe = on_turn(event)
            if inspect.isawaitable(maybe):
                await maybe
        except Exception as exc:
            report_failure(exc, action="on_turn callback")
