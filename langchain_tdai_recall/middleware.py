"""`TdaiRecallMiddleware`: automatic memory recall, memory tools and L0 capture for agents."""

from __future__ import annotations

import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, NotRequired, TypedDict, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ResponseT,
)
from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import ensure_config
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.typing import ContextT
from typing_extensions import override

from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.tools import (
    BUDGET_EXHAUSTED_MESSAGE,
    Scope,
    ScopeResolver,
    blocked_calls,
    create_memory_tools,
    latest_human_index,
    turn_usage,
)
from langchain_tdai_recall.types import RecallResult

if TYPE_CHECKING:
    from langgraph.runtime import Runtime

    from langchain_tdai_recall.memory import TdaiMemory

__all__ = [
    "TURN_EVENT",
    "TdaiRecallMiddleware",
    "TdaiRecallState",
    "TurnEvent",
    "TurnMemory",
    "append_system_context",
    "inject_recall",
    "prepend_human_context",
]

logger = logging.getLogger(__name__)

TURN_EVENT: Final = "tdai_agent_turn"
"""Name of the LangChain custom event emitted after every agent turn."""

_BLANK_LINE: Final = "\n\n"


# -- injection (pure; shared with the LCEL adapter) ---------------------------------------------


def append_system_context(system: SystemMessage | None, text: str) -> SystemMessage:
    """Return `system` with `text` appended as one more text content block.

    Existing blocks, including their `cache_control`, are kept as they are; a string system
    prompt becomes its own first text block. With no system message, one is created.
    """
    block: dict[str, Any] = {"type": "text", "text": text}
    if system is None:
        return SystemMessage(content=[block])
    content = system.content
    blocks: list[str | dict[str, Any]]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}] if content else []
    else:
        blocks = list(content)
    return system.model_copy(update={"content": [*blocks, block]})


def prepend_human_context(message: HumanMessage, text: str) -> HumanMessage:
    """Return `message` with `text` and a blank line in front of what the user typed.

    String content is prefixed; for multimodal content the first text block is prefixed (its
    other keys, such as `cache_control`, are kept) or, when the content does not start with
    text, a new text block is put first.
    """
    prefix = text + _BLANK_LINE
    content = message.content
    new: str | list[str | dict[str, Any]]
    if isinstance(content, str):
        new = prefix + content
    elif content and isinstance(content[0], str):
        new = [prefix + content[0], *content[1:]]
    elif content and isinstance(content[0], dict) and content[0].get("type") == "text":
        first = content[0]
        new = [{**first, "text": prefix + str(first.get("text", ""))}, *content[1:]]
    else:
        new = [{"type": "text", "text": prefix}, *content]
    return message.model_copy(update={"content": new})


def inject_recall(
    system: SystemMessage | None,
    messages: Sequence[BaseMessage],
    result: RecallResult | None,
) -> tuple[SystemMessage | None, list[BaseMessage]]:
    """Apply a recall result to a system message and a conversation, without mutating either.

    Returns:
        The system message (appended to when `append_system_context` is set) and the messages
        (the turn's human message prefixed when `prepend_context` is set).
    """
    out = list(messages)
    if result is None:
        return system, out
    if result.append_system_context:
        system = append_system_context(system, result.append_system_context)
    if result.prepend_context:
        index = latest_human_index(out)
        if index is not None:
            human = out[index]
            if isinstance(human, HumanMessage):
                out[index] = prepend_human_context(human, result.prepend_context)
    return system, out


def message_text(message: BaseMessage | None) -> str:
    """The text parts of a message, as typed (images and other blocks are left out)."""
    if message is None:
        return ""
    content = message.content
    if isinstance(content, str):
        return content
    parts = [
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    ]
    return "\n".join(p for p in parts if p)


# -- recall with the failure policy (shared with the LCEL adapter) --------------------------------


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    """One recall call: its result (or `None`), how long it took, and why it failed if it did."""

    result: RecallResult | None
    elapsed_ms: float
    error: str | None = None


def _recall_failed(memory: TdaiMemory, exc: Exception, started: float) -> RecallOutcome:
    """Apply the failure policy: `ScopeError` and `on_error="raise"` propagate, else degrade."""
    if isinstance(exc, ScopeError) or memory.config.recall.on_error == "raise":
        raise exc
    logger.warning("recall failed, injecting nothing this turn: %s", type(exc).__name__)
    return RecallOutcome(None, (time.perf_counter() - started) * 1000, type(exc).__name__)


def run_recall(memory: TdaiMemory, text: str, scope: Scope) -> RecallOutcome:
    """Recall for one turn; a failure yields an empty outcome unless the policy says raise."""
    started = time.perf_counter()
    try:
        result = memory.recall(
            text, user_id=scope.user_id, agent_id=scope.agent_id, session_key=scope.session_key
        )
    except Exception as exc:  # recall must never break the agent
        return _recall_failed(memory, exc, started)
    return _recall_done(result, started)


async def arun_recall(memory: TdaiMemory, text: str, scope: Scope) -> RecallOutcome:
    """Async version of `run_recall`."""
    started = time.perf_counter()
    try:
        result = await memory.arecall(
            text, user_id=scope.user_id, agent_id=scope.agent_id, session_key=scope.session_key
        )
    except Exception as exc:
        return _recall_failed(memory, exc, started)
    return _recall_done(result, started)


def _recall_done(result: RecallResult | None, started: float) -> RecallOutcome:
    elapsed = (time.perf_counter() - started) * 1000
    if result is not None:
        logger.debug(
            "recall: %d memories, strategy=%s, %d chars injected, %.1f ms",
            len(result.memories),
            result.strategy,
            result.injected_chars,
            elapsed,
        )
    return RecallOutcome(result, elapsed, result.error if result is not None else None)


# -- state and events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnRecall:
    """What the middleware recalled for the current turn. Lives only for one run."""

    key: str
    """Identity of the turn's human message."""
    scope: Scope
    """Scope the recall ran in."""
    outcome: RecallOutcome
    """The recall and its timing."""


class TdaiRecallState(AgentState[ResponseT]):
    """Agent state fields of `TdaiRecallMiddleware`; both are private to the middleware."""

    tdai_turn: NotRequired[Annotated[TurnRecall | None, UntrackedValue, PrivateStateAttr]]
    """This turn's recall: reused by every model call of the turn, never checkpointed."""
    tdai_captured: NotRequired[Annotated[str | None, PrivateStateAttr]]
    """Key of the last human message recorded to L0, so a resumed turn is not recorded twice."""


class TurnMemory(TypedDict):
    """One recalled memory in a `TurnEvent`."""

    content: str
    score: float
    type: str


class TurnEvent(TypedDict):
    """Payload of the `tdai_agent_turn` custom event and of `on_turn` (SPEC §10)."""

    user_id: str
    """User of the scope (the store's default user when none was given)."""
    agent_id: str | None
    """Agent of the scope."""
    session_key: str
    """Session the turn belongs to."""
    memories: list[TurnMemory]
    """Injected L1 memories with their real fused scores, in order."""
    persona_injected: bool
    """Whether a persona was part of the injected system context."""
    strategy: str
    """Strategy recall actually used; `none` when recall was off or failed."""
    recall_ms: float
    """Recall duration."""
    injected_chars: int
    """Characters added to the prompt (both blocks)."""
    tool_calls_used: int
    """Memory search calls that ran this turn."""
    tool_calls_blocked: int
    """Memory search calls refused by the per-turn budget."""
    l0_recorded: int
    """Messages recorded to L0 after the turn."""
    error: str | None
    """Why recall degraded or failed, if it did."""


OnTurn = Callable[[TurnEvent], object]
"""Callback receiving every `TurnEvent`; in async runs it may return an awaitable."""


@dataclass(frozen=True, slots=True)
class _TurnPlan:
    key: str
    scope: Scope
    text: str


@dataclass(frozen=True, slots=True)
class _TurnEnd:
    key: str
    scope: Scope
    human: str
    answer: str
    capture: bool
    recall: RecallOutcome | None
    used: int
    blocked: int


def _turn_key(message: BaseMessage | None) -> str:
    if message is None:
        return ""
    if message.id:
        return f"id:{message.id}"
    digest = hashlib.sha256(message_text(message).encode("utf-8")).hexdigest()[:32]
    return f"text:{digest}"


def _final_answer(messages: Sequence[BaseMessage], start: int) -> str:
    for message in reversed(messages[start:]):
        if isinstance(message, AIMessage):
            return "" if message.tool_calls else message_text(message)
    return ""


# -- the middleware -------------------------------------------------------------------------------


class TdaiRecallMiddleware(AgentMiddleware[TdaiRecallState[ResponseT], ContextT, ResponseT]):
    """Recall long-term memory into every model call of a turn; capture the turn to L0.

    Per turn (one run whose latest human message is new) the middleware recalls once from that
    message, in the scope of the run, and reuses the same result for every model call of the
    turn:

    - `append_system_context` (persona, scene navigation, tools guide) is appended to the system
      message as one more text block; existing blocks and their `cache_control` are kept, and a
      system message is created when there is none. It changes only when the persona or scenes
      change, so provider prompt caches stay warm.
    - `prepend_context` (the recalled memories) goes in front of the turn's human message,
      followed by a blank line.

    The injection is applied with `ModelRequest.override` only: the agent state and checkpoints
    never contain it, and the recall itself is kept in a state field that is never checkpointed
    or returned. The middleware registers `tdai_memory_search`, `tdai_conversation_search` and
    `tdai_read_scene` and enforces their shared per-turn budget in `after_model`: all search
    calls of one model message are decided together, in order, and every refused call gets an
    error `ToolMessage`. After the turn it records the human text (as typed) and the final
    answer to L0 when capture is on, emits the `tdai_agent_turn` custom event and calls
    `on_turn`.

    The tools are registered when `tools.enabled`, with the budget `tools.max_calls_per_turn`
    of the store's config (the tools guide in the system prompt states the same number).

    Scope: `runtime.context` (`user_id`, `agent_id`, `session_key`), else
    `config["configurable"]` (`user_id`, `agent_id`, `session_key`, then `thread_id`), else the
    constructor arguments, else the store's default user.

    Failure policy: recall that fails or times out injects nothing and logs a warning; the agent
    carries on (`recall.on_error="raise"` in the store's config raises instead). A failing L0
    write, event handler or `on_turn` callback is logged and never ends the turn. An invalid
    scope always raises `ScopeError`, because falling back to another scope would mix users.

    Ordering: put this middleware before `AnthropicPromptCachingMiddleware`, so the cache
    breakpoint lands on the appended (stable) block and covers the persona too; its position
    relative to `SummarizationMiddleware` does not matter, as the summary never sees the
    injection.

    Example:
        ```python
        from langchain.agents import create_agent
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

        memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64))
        memory.add_memory("Alice prefers window seats", type="persona", user_id="alice")
        agent = create_agent(
            FakeToolCallingChatModel(script=["Booked a window seat."]),
            middleware=[memory.middleware()],
        )
        agent.invoke(
            {"messages": [{"role": "user", "content": "Book my usual seat"}]},
            context={"user_id": "alice"},
        )
        ```
    """

    state_schema = TdaiRecallState  # type: ignore[assignment]

    def __init__(
        self,
        memory: TdaiMemory,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        capture: bool | None = None,
        on_turn: OnTurn | None = None,
    ) -> None:
        """Create the middleware.

        Args:
            memory: The store to recall from and capture to.
            user_id: User of the scope when the run names none.
            agent_id: Agent of the scope when the run names none.
            session_key: Session when the run names none (default: the thread id, else
                `"default"`).
            require_user_id: Raise `ScopeError` when a run names no user (and none is given
                here) instead of using the store's default user.
            capture: Record each turn to L0; defaults to `capture.enabled`.
            on_turn: Called with the `TurnEvent` of every turn.

        Raises:
            ConfigError: If an argument is invalid (`ScopeError` for a bad id).
        """
        super().__init__()
        if on_turn is not None and not callable(cast("object", on_turn)):
            msg = f"on_turn must be callable, got {type(on_turn).__name__}"
            raise ConfigError(msg)
        config = memory.config
        self.memory: Final = memory
        self._resolver = ScopeResolver(
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
        )
        # The tools and their budget follow the store's config, like the tools guide that recall
        # puts in the system prompt, so the prompt never promises something the tools do not do.
        self.tools = (
            create_memory_tools(memory, resolver=self._resolver) if config.tools.enabled else []
        )
        self.max_calls_per_turn: Final = config.tools.max_calls_per_turn
        self.capture: Final = config.capture.enabled if capture is None else capture
        self.on_turn: Final = on_turn

    # -- before_model: recall once per turn ---------------------------------------------------

    def _plan_turn(self, state: Mapping[str, Any], runtime: Runtime[ContextT]) -> _TurnPlan | None:
        """Decide whether this model call starts a turn; `None` when the turn already recalled."""
        messages: list[BaseMessage] = list(state.get("messages", []))
        index = latest_human_index(messages)
        human = messages[index] if index is not None else None
        key = _turn_key(human)
        turn = state.get("tdai_turn")
        if isinstance(turn, TurnRecall) and turn.key == key:
            return None
        scope = self._resolver.resolve(
            getattr(runtime, "context", None), ensure_config().get("configurable")
        )
        return _TurnPlan(key=key, scope=scope, text=message_text(human))

    @staticmethod
    def _turn_update(plan: _TurnPlan, outcome: RecallOutcome) -> dict[str, Any]:
        return {"tdai_turn": TurnRecall(key=plan.key, scope=plan.scope, outcome=outcome)}

    @override
    def before_model(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Recall for the turn's human message, once per turn."""
        plan = self._plan_turn(state, runtime)
        if plan is None:
            return None
        return self._turn_update(plan, run_recall(self.memory, plan.text, plan.scope))

    @override
    async def abefore_model(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Async version of `before_model`."""
        plan = self._plan_turn(state, runtime)
        if plan is None:
            return None
        return self._turn_update(plan, await arun_recall(self.memory, plan.text, plan.scope))

    # -- wrap_model_call: inject the same bytes into every model call ----------------------------

    @staticmethod
    def _inject(request: ModelRequest[ContextT]) -> ModelRequest[ContextT]:
        turn = request.state.get("tdai_turn")
        if not isinstance(turn, TurnRecall) or turn.outcome.result is None:
            return request
        system, messages = inject_recall(
            request.system_message, request.messages, turn.outcome.result
        )
        overrides: dict[str, Any] = {}
        if system is not request.system_message:
            overrides["system_message"] = system
        if any(a is not b for a, b in zip(messages, request.messages, strict=True)):
            overrides["messages"] = messages
        return request.override(**overrides) if overrides else request

    @override
    def wrap_model_call(
        self,
        request: ModelRequest[ContextT],
        handler: Callable[[ModelRequest[ContextT]], ModelResponse[ResponseT]],
    ) -> ModelCallResult[ResponseT]:
        """Call the model with this turn's recall injected."""
        return handler(self._inject(request))

    @override
    async def awrap_model_call(
        self,
        request: ModelRequest[ContextT],
        handler: Callable[[ModelRequest[ContextT]], Awaitable[ModelResponse[ResponseT]]],
    ) -> ModelCallResult[ResponseT]:
        """Async version of `wrap_model_call`."""
        return await handler(self._inject(request))

    # -- after_model: the per-turn search budget ---------------------------------------------------

    @override
    def after_model(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Refuse the search calls of the latest model message that exceed the turn's budget."""
        if not self.tools:
            return None
        refused = blocked_calls(state.get("messages", []), self.max_calls_per_turn)
        if not refused:
            return None
        logger.info(
            "refusing %d memory search call(s): per-turn budget of %d used up",
            len(refused),
            self.max_calls_per_turn,
        )
        content = BUDGET_EXHAUSTED_MESSAGE.format(limit=self.max_calls_per_turn)
        return {
            "messages": [
                ToolMessage(
                    content=content,
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="error",
                )
                for call in refused
            ]
        }

    @override
    async def aafter_model(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Async version of `after_model` (no I/O, so it delegates)."""
        return self.after_model(state, runtime)

    # -- after_agent: capture and report ---------------------------------------------------------

    def _plan_end(self, state: Mapping[str, Any], runtime: Runtime[ContextT]) -> _TurnEnd:
        messages: list[BaseMessage] = list(state.get("messages", []))
        index = latest_human_index(messages)
        human = messages[index] if index is not None else None
        key = _turn_key(human)
        turn = state.get("tdai_turn")
        if isinstance(turn, TurnRecall) and turn.key == key:
            scope, recall = turn.scope, turn.outcome
        else:
            scope = self._resolver.resolve(
                getattr(runtime, "context", None), ensure_config().get("configurable")
            )
            recall = None
        used, blocked = turn_usage(messages, self.max_calls_per_turn) if self.tools else (0, 0)
        return _TurnEnd(
            key=key,
            scope=scope,
            human=message_text(human),
            answer=_final_answer(messages, index + 1 if index is not None else 0),
            capture=self.capture and human is not None and state.get("tdai_captured") != key,
            recall=recall,
            used=used,
            blocked=blocked,
        )

    @staticmethod
    def _l0_messages(end: _TurnEnd) -> list[dict[str, str]]:
        pairs = (("user", end.human), ("assistant", end.answer))
        return [{"role": role, "content": text} for role, text in pairs if text.strip()]

    def _capture(self, end: _TurnEnd) -> int:
        if not end.capture or not self._l0_messages(end):
            return 0
        try:
            return int(
                self.memory.record_messages(
                    self._l0_messages(end),
                    session_key=end.scope.session_key,
                    user_id=end.scope.user_id,
                    agent_id=end.scope.agent_id,
                )
            )
        except Exception as exc:  # capture must never end the turn
            logger.warning("L0 capture failed: %s", type(exc).__name__)
            return 0

    async def _acapture(self, end: _TurnEnd) -> int:
        if not end.capture or not self._l0_messages(end):
            return 0
        try:
            return int(
                await self.memory.arecord_messages(
                    self._l0_messages(end),
                    session_key=end.scope.session_key,
                    user_id=end.scope.user_id,
                    agent_id=end.scope.agent_id,
                )
            )
        except Exception as exc:
            logger.warning("L0 capture failed: %s", type(exc).__name__)
            return 0

    def _event(self, end: _TurnEnd, recorded: int) -> TurnEvent:
        outcome = end.recall
        result = outcome.result if outcome is not None else None
        return TurnEvent(
            user_id=end.scope.user_id or self.memory.config.store.default_user_id,
            agent_id=end.scope.agent_id,
            session_key=end.scope.session_key,
            memories=[
                TurnMemory(content=m.content, score=m.score, type=m.type)
                for m in (result.memories if result is not None else ())
            ],
            persona_injected=bool(result is not None and result.persona),
            strategy=result.strategy if result is not None else "none",
            recall_ms=round(outcome.elapsed_ms, 3) if outcome is not None else 0.0,
            injected_chars=result.injected_chars if result is not None else 0,
            tool_calls_used=end.used,
            tool_calls_blocked=end.blocked,
            l0_recorded=recorded,
            error=outcome.error if outcome is not None else None,
        )

    def _update(self, end: _TurnEnd) -> dict[str, Any] | None:
        return {"tdai_captured": end.key} if end.capture else None

    @override
    def after_agent(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Record the turn to L0, emit `tdai_agent_turn` and call `on_turn`."""
        end = self._plan_end(state, runtime)
        event = self._event(end, self._capture(end))
        try:
            dispatch_custom_event(TURN_EVENT, event)
        except Exception as exc:  # no parent run, or a failing handler
            logger.debug("could not dispatch %s: %s", TURN_EVENT, exc)
        if self.on_turn is not None:
            try:
                self.on_turn(event)
            except Exception:
                logger.warning("on_turn callback failed", exc_info=True)
        return self._update(end)

    @override
    async def aafter_agent(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Async version of `after_agent`."""
        end = self._plan_end(state, runtime)
        event = self._event(end, await self._acapture(end))
        try:
            await adispatch_custom_event(TURN_EVENT, event)
        except Exception as exc:
            logger.debug("could not dispatch %s: %s", TURN_EVENT, exc)
        if self.on_turn is not None:
            try:
                maybe = self.on_turn(event)
                if inspect.isawaitable(maybe):
                    await maybe
            except Exception:
                logger.warning("on_turn callback failed", exc_info=True)
        return self._update(end)
