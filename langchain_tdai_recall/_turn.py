"""One agent turn: everything the LangChain adapters share, written once.

A turn is one user message and everything the agent does until it answers. The adapters
(`middleware.py` for `create_agent`, `tools/`, `lcel.py` for chains and `wrap_model`,
`legacy.py` for `AgentExecutor`) only translate their framework's hooks into the steps below, so
sync and async paths, and one adapter and another, cannot drift apart:

1. **Identity** (`ScopeResolver` -> `TurnIdentity`): whose memory the turn reads and writes.
2. **The turn's message** (`latest_human_index`, `message_text`, `turn_key`): the last human
   message that is not a summary, as typed.
3. **Recall** (`run_recall` / `arun_recall` -> `RecallOutcome`) and **injection**
   (`inject_recall`, `inject_messages`): the same bytes for every model call of the turn,
   reused through a per-run `TurnCache`, never written to agent state. Callback handlers see
   every recall as a child retriever run named `tdai_recall` (`_recall_run`).
4. **The per-turn budgets** of the capped tools: the two search tools share one cap, the
   optional `tdai_manage_memory` (memory formation) has its own, counted the same way.
   `StateBudget` decides from the conversation (inside a graph), `ToolBudget` is an explicit
   counter (executors), `RunBudgets` one budget per parent run (anything else).
5. **L0 capture** (`capture_turn`): the turn's human text and final answer, handed to the store's
   background writer; the one path every adapter uses. The writer calls
   `TdaiMemory._after_capture` once the turn is stored, which counts it for memory formation.
6. **Reporting** (`turn_event` -> `TurnEvent`): the `tdai_agent_turn` payload.

Failure policy (the only one; `report_failure` applies it):

| what fails | `recall.on_error="skip"` (default) | `recall.on_error="raise"` |
|---|---|---|
| an invalid scope (`ScopeError`) | raises: a scope is never replaced by another | raises |
| recall (error or timeout) | injects nothing, one WARNING, the turn goes on | raises |
| a memory tool's store call | error `ToolMessage` telling the model to answer, WARNING | raises |
| L0 capture, `on_turn`, event handlers | WARNING, the turn goes on | same: never raises |

Warnings name the failing step and the exception type, never its message, which may quote memory
text. This module imports `langchain_core` only (no `langchain.agents`, no `langgraph`), so the
chain adapters stay light.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypedDict, TypeVar, cast

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall
from langchain_core.runnables import RunnableConfig
from typing_extensions import override

from langchain_tdai_recall._recall_run import (
    afinish_recall_run,
    astart_recall_run,
    finish_recall_run,
    recall_failure,
    start_recall_run,
)
from langchain_tdai_recall._records import check_id
from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.types import OnError, RecallResult, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._host import MemoryHost

__all__ = [
    "BUDGET_EXHAUSTED_MESSAGE",
    "CAPPED_TOOL_NAMES",
    "CONVERSATION_SEARCH_TOOL",
    "DEFAULT_SESSION_KEY",
    "MANAGE_BUDGET_EXHAUSTED_MESSAGE",
    "MANAGE_MEMORY_TOOL",
    "MEMORY_SEARCH_TOOL",
    "MEMORY_TOOL_NAMES",
    "READ_SCENE_TOOL",
    "TOOL_FAILED_MESSAGE",
    "TURN_EVENT",
    "ArgsCheck",
    "OnTurn",
    "RecallOutcome",
    "RunBudgets",
    "ScopeResolver",
    "ScopeSource",
    "StateBudget",
    "ToolBudget",
    "TurnCache",
    "TurnEvent",
    "TurnIdentity",
    "TurnMemory",
    "TurnRecall",
    "TurnScopedBudget",
    "aemit_turn",
    "append_system_context",
    "arun_recall",
    "capture_turn",
    "emit_turn",
    "final_answer",
    "inject_messages",
    "inject_recall",
    "is_summary_message",
    "l0_messages",
    "latest_human_index",
    "message_text",
    "prepend_human_context",
    "report_failure",
    "run_recall",
    "turn_event",
    "turn_key",
]

logger = logging.getLogger(__name__)

TURN_EVENT: Final = "tdai_agent_turn"
"""Name of the LangChain custom event emitted after every agent turn."""

DEFAULT_SESSION_KEY: Final = "default"
"""Session key used when neither the run nor the caller names one."""

MEMORY_SEARCH_TOOL: Final = "tdai_memory_search"
CONVERSATION_SEARCH_TOOL: Final = "tdai_conversation_search"
READ_SCENE_TOOL: Final = "tdai_read_scene"
MANAGE_MEMORY_TOOL: Final = "tdai_manage_memory"
"""The optional agent-writable memory tool (`tools.manage`); capped on its own."""
CAPPED_TOOL_NAMES: Final = frozenset({MEMORY_SEARCH_TOOL, CONVERSATION_SEARCH_TOOL})
MEMORY_TOOL_NAMES: Final = frozenset({*CAPPED_TOOL_NAMES, READ_SCENE_TOOL})
"""The tools the memory-tools guide describes."""
"""The tools that share the per-turn budget."""

BUDGET_EXHAUSTED_MESSAGE: Final = (
    "Refused: the memory search budget for this turn is used up (tdai_memory_search and "
    "tdai_conversation_search share a budget of {limit} calls per turn). Do not call these tools "
    "again in this turn; answer now with the information you already have."
)
"""For the model (an error `ToolMessage`): a search call over the turn's budget."""

MANAGE_BUDGET_EXHAUSTED_MESSAGE: Final = (
    "Refused: the memory change limit for this turn is reached (tdai_manage_memory runs at "
    "most {limit} times per turn). Do not call it again in this turn; continue without changing "
    "memory, you can do it in a later turn."
)
"""For the model (an error `ToolMessage`): a `tdai_manage_memory` call over the turn's cap."""

TOOL_FAILED_MESSAGE: Final = (
    "{tool} is unavailable right now ({error}). Do not retry it in this turn; answer with the "
    "information you already have."
)
"""For the model (an error `ToolMessage`): the store failed; `error` is a type name only."""

_SUMMARY_SOURCE: Final = "summarization"
"""`additional_kwargs["lc_source"]` of the summary message `SummarizationMiddleware` writes."""

_BLANK_LINE: Final = "\n\n"
_KEPT_ENTRIES: Final = 512
"""Bound of every per-run map here: the oldest runs are forgotten first."""

T = TypeVar("T")


# -- the failure policy ---------------------------------------------------------------------------


def report_failure(exc: Exception, *, action: str, on_error: OnError = "skip") -> None:
    """Apply the failure policy to `exc`, raised by `action`; return when the turn may go on.

    Args:
        exc: The failure.
        action: What failed, for the log line (for example `"recall"`).
        on_error: `"raise"` re-raises `exc`; `"skip"` logs one WARNING with the exception type.

    Raises:
        ScopeError: Always, when `exc` is one: falling back to another scope would mix users.
        Exception: `exc` itself, when `on_error="raise"`.
    """
    if isinstance(exc, ScopeError) or on_error == "raise":
        raise exc
    logger.warning("%s failed: %s", action, type(exc).__name__)
    logger.debug("%s failure details", action, exc_info=exc)


# -- identity -------------------------------------------------------------------------------------

ScopeSource = Literal["context", "configurable", "constructor", "default"]
"""Where the user id of a scope came from."""


@dataclass(frozen=True, slots=True)
class TurnIdentity:
    """Whose turn this is: the memory scope, the conversation, and where the user id came from."""

    scope: Scope
    """User (always resolved; the store's default user when the run names none) and agent."""
    session_key: str
    """Conversation the turn belongs to (used by recall and L0 capture)."""
    source: ScopeSource
    """`context`, `configurable`, `constructor` or `default`."""


def _lookup(container: object, key: str) -> object:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return cast("Mapping[str, object]", container).get(key)
    return getattr(container, key, None)


def _check_id(value: object, *, field: str, source: str) -> str:
    """`check_id` (the one id rule of the package), naming where a bad id came from."""
    try:
        return check_id(field, value)
    except ScopeError as exc:
        msg = (
            f"{exc} (from {source}); pass the id of the end user, or leave it out to use the "
            "store's default user"
        )
        raise ScopeError(msg) from exc


class ScopeResolver:
    """Resolves the identity of a call: run context, then `configurable`, then defaults.

    Order for each of `user_id` and `agent_id`: `runtime.context`, `config["configurable"]`,
    the constructor argument, the store's default. The session is `session_key` from the
    context or `configurable`, then `thread_id`, then the constructor's, then `"default"`. The
    first fallback to the default user logs one WARNING (a multi-user deployment that forgot to
    pass a user id would mix its users' memories; a single-user app names its user in the
    constructor); `require_user_id=True` turns a missing user id into a `ScopeError` instead.
    Invalid ids always raise `ScopeError`.
    """

    def __init__(
        self,
        *,
        default_user_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
    ) -> None:
        if user_id is not None:
            _check_id(user_id, field="user_id", source="the constructor")
        if agent_id is not None:
            _check_id(agent_id, field="agent_id", source="the constructor")
        if session_key is not None and not isinstance(cast("object", session_key), str):
            msg = f"session_key must be a string, got {session_key!r}"
            raise ConfigError(msg)
        self.default_user_id: Final = default_user_id
        self.user_id: Final = user_id
        self.agent_id: Final = agent_id
        self.session_key: Final = session_key
        self.require_user_id: Final = require_user_id
        self._seen_request_user = False
        self._warned = False

    @classmethod
    def for_memory(
        cls,
        memory: MemoryHost,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
    ) -> ScopeResolver:
        """A resolver whose default user is the store's `store.default_user_id`."""
        return cls(
            default_user_id=memory.config.store.default_user_id,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
        )

    def resolve(
        self, context: object = None, configurable: Mapping[str, Any] | None = None
    ) -> TurnIdentity:
        """Resolve the identity of one call.

        Args:
            context: `runtime.context` (a mapping, a dataclass or any object), or `None`.
            configurable: `config["configurable"]`, or `None`.

        Returns:
            The identity.

        Raises:
            ScopeError: If an id is not a non-empty string, or no user id was found and
                `require_user_id` is set.
        """
        conf: Mapping[str, Any] = configurable or {}
        user_id, source = self._user(context, conf)
        agent_id = self.agent_id
        for candidate, where in (
            (_lookup(context, "agent_id"), "context"),
            (conf.get("agent_id"), "configurable"),
        ):
            if candidate is not None:
                agent_id = _check_id(candidate, field="agent_id", source=f"runtime {where}")
                break
        session_key = self.session_key or DEFAULT_SESSION_KEY
        for candidate in (
            _lookup(context, "session_key"),
            conf.get("session_key"),
            conf.get("thread_id"),
        ):
            if isinstance(candidate, str | int | uuid.UUID) and str(candidate):
                session_key = str(candidate)
                break
        return TurnIdentity(
            scope=Scope(user_id=user_id, agent_id=agent_id), session_key=session_key, source=source
        )

    def _user(self, context: object, conf: Mapping[str, Any]) -> tuple[str, ScopeSource]:
        for candidate, where in (
            (_lookup(context, "user_id"), "context"),
            (conf.get("user_id"), "configurable"),
        ):
            if candidate is not None:
                self._seen_request_user = True
                user = _check_id(candidate, field="user_id", source=f"runtime {where}")
                return user, "context" if where == "context" else "configurable"
        if self.user_id is not None:
            return self.user_id, "constructor"
        if self.require_user_id:
            msg = (
                "no user_id for this call: pass it in the run context "
                "(context={'user_id': ...}), in config['configurable']['user_id'], or to the "
                "constructor; require_user_id=True forbids falling back to the default user"
            )
            raise ScopeError(msg)
        if not self._warned:
            self._warned = True
            logger.warning(
                "a call without user_id uses the store's default user (store.default_user_id)%s; "
                "calls without one all share its memory. Pass user_id in the run context or "
                "configurable, or to the constructor (memory.middleware(user_id=...)) for a "
                "single-user app; require_user_id=True makes this an error. Logged once.",
                " although other calls passed one" if self._seen_request_user else "",
            )
        return self.default_user_id, "default"


# -- the turn's message ---------------------------------------------------------------------------


def is_summary_message(message: BaseMessage) -> bool:
    """Whether `message` is the summary `SummarizationMiddleware` put in place of old messages."""
    return message.additional_kwargs.get("lc_source") == _SUMMARY_SOURCE


def latest_human_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the turn's human message: the last `HumanMessage` that is not a summary."""
    fallback: int | None = None
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, HumanMessage):
            if not is_summary_message(message):
                return i
            if fallback is None:
                fallback = i
    return fallback


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


def turn_key(message: BaseMessage | None) -> str:
    """Identity of a turn's human message: its id (when it has one) and a digest of its text."""
    if message is None:
        return ""
    digest = hashlib.sha256(message_text(message).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{message.id or ''}:{digest[:32]}"


def final_answer(messages: Sequence[BaseMessage], start: int) -> str:
    """Text of the turn's final answer: the last AI message from `start` on, if it asks no tool."""
    for message in reversed(messages[start:]):
        if isinstance(message, AIMessage):
            return "" if message.tool_calls else message_text(message)
    return ""


# -- injection (pure) -----------------------------------------------------------------------------


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


def inject_messages(
    messages: Sequence[BaseMessage], result: RecallResult | None
) -> list[BaseMessage]:
    """`inject_recall` on a full message list whose system message, if any, is one of them."""
    messages = list(messages)
    index = next((i for i, m in enumerate(messages) if isinstance(m, SystemMessage)), None)
    system = cast("SystemMessage", messages[index]) if index is not None else None
    rest = [m for i, m in enumerate(messages) if i != index]
    new_system, new_rest = inject_recall(system, rest, result)
    if new_system is None:
        return new_rest
    position = index if index is not None else 0
    return [*new_rest[:position], new_system, *new_rest[position:]]


# -- recall ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    """One recall call: its result (or `None`), how long it took, and why it failed if it did."""

    result: RecallResult | None
    elapsed_ms: float
    error: str | None = None


def _recall_failed(memory: MemoryHost, exc: Exception, started: float) -> RecallOutcome:
    report_failure(exc, action="recall", on_error=memory.config.recall.on_error)
    return RecallOutcome(None, (time.perf_counter() - started) * 1000, type(exc).__name__)


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


def run_recall(
    memory: MemoryHost,
    text: str,
    identity: TurnIdentity,
    *,
    system_prompt: str | None = None,
    tools_guide: bool = True,
    config: RunnableConfig | None = None,
) -> RecallOutcome:
    """Recall for one turn under the failure policy (a failure injects nothing).

    `system_prompt` is the app's own system prompt (the language signal of the system context);
    `tools_guide` says whether the model has the memory tools. Callback handlers of the run
    (`config`, else the current run's) see the recall as a child retriever run named
    `tdai_recall` with the injected memories as documents (`langchain_tdai_recall._recall_run`).
    """
    scope = identity.scope
    run = start_recall_run(text, scope, identity.session_key, config)
    started = time.perf_counter()
    try:
        result = memory.recall(
            text,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=identity.session_key,
            system_prompt=system_prompt,
            tools_guide=tools_guide,
        )
    except Exception as exc:  # recall must never break the agent (unless told to)
        finish_recall_run(run, scope, None, exc)
        return _recall_failed(memory, exc, started)
    outcome = _recall_done(result, started)
    if run is not None:
        failure = recall_failure(memory.config.recall, result, outcome.elapsed_ms)
        finish_recall_run(run, scope, result, failure)
    return outcome


async def arun_recall(
    memory: MemoryHost,
    text: str,
    identity: TurnIdentity,
    *,
    system_prompt: str | None = None,
    tools_guide: bool = True,
    config: RunnableConfig | None = None,
) -> RecallOutcome:
    """Async version of `run_recall`."""
    scope = identity.scope
    run = await astart_recall_run(text, scope, identity.session_key, config)
    started = time.perf_counter()
    try:
        result = await memory.arecall(
            text,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_key=identity.session_key,
            system_prompt=system_prompt,
            tools_guide=tools_guide,
        )
    except Exception as exc:
        await afinish_recall_run(run, scope, None, exc)
        return _recall_failed(memory, exc, started)
    outcome = _recall_done(result, started)
    if run is not None:
        failure = recall_failure(memory.config.recall, result, outcome.elapsed_ms)
        await afinish_recall_run(run, scope, result, failure)
    return outcome


@dataclass(frozen=True, slots=True)
class TurnRecall:
    """What was recalled for one turn, kept for the turn's model calls and its report."""

    identity: TurnIdentity
    """Identity the recall ran under."""
    outcome: RecallOutcome
    """The recall and its timing."""


class TurnCache(Generic[T]):
    """Per-run values keyed by turn, kept outside the agent state (so never streamed).

    Bounded: a run that never finished (an exception, an interrupt never resumed) is forgotten
    once `maxsize` newer turns arrived. Thread-safe.
    """

    def __init__(self, maxsize: int = _KEPT_ENTRIES) -> None:
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable) -> T | None:
        """The value of `key`, or `None`."""
        with self._lock:
            return self._values.get(key)

    def put(self, key: Hashable, value: T) -> None:
        """Remember `value` for `key` (the newest entry)."""
        with self._lock:
            self._values.pop(key, None)
            self._values[key] = value
            while len(self._values) > self._maxsize:
                self._values.popitem(last=False)

    def pop(self, key: Hashable) -> T | None:
        """Remove and return the value of `key`, or `None`."""
        with self._lock:
            return self._values.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


# -- the per-turn search budget -------------------------------------------------------------------

ArgsCheck = Callable[[str, object], Mapping[str, object] | None]
"""Validates a capped tool call's arguments (tool name, raw arguments): the normalised
arguments, or `None` when they fail validation (such a call never runs, so it costs nothing)."""


class StateBudget:
    """The per-turn cap decided from the conversation itself (inside a LangGraph agent).

    It counts the calls of the tools named `names` (by default the two search tools, which
    share one cap). The capped calls the model made since the turn's human message are
    numbered in the order of the AI messages and of their `tool_calls`, leaving out calls whose
    arguments fail validation; call number `k` runs only when `k < limit`. A call is found by
    its id, name and normalised arguments, so duplicate, empty or missing ids still get their
    own position. The verdicts are a pure function of the conversation, the same however the
    tool node schedules parallel calls; only calls that are identical in id, name and arguments
    and straddle the limit are told apart by arrival (they would return the same anyway).
    """

    def __init__(
        self, limit: int, check: ArgsCheck, *, names: frozenset[str] = CAPPED_TOOL_NAMES
    ) -> None:
        self.limit: Final = limit
        self.names: Final = names
        self._check = check
        self._ties = TurnCache[int]()
        self._counted = TurnCache[list[tuple[ToolCall, Mapping[str, object]]]]()
        self._lock = threading.Lock()

    def calls(self, messages: Sequence[BaseMessage]) -> list[tuple[ToolCall, Mapping[str, object]]]:
        """The turn's counted calls, in order, with their normalised arguments.

        Every parallel call of a message asks this again, so the result is memoised by what it
        depends on: the turn's human message and its AI messages with tool calls (validating
        every call for every call would be quadratic).
        """
        start = latest_human_index(messages)
        turn = messages[(start + 1 if start is not None else 0) :]
        ai = [m for m in turn if isinstance(m, AIMessage) and m.tool_calls]
        human = messages[start] if start is not None else None
        key = (turn_key(human), tuple((m.id, repr(m.tool_calls)) for m in ai))
        cached = self._counted.get(key)
        if cached is not None:
            return cached
        counted: list[tuple[ToolCall, Mapping[str, object]]] = []
        for message in ai:
            for call in message.tool_calls:
                if call["name"] not in self.names:
                    continue
                args = self._check(call["name"], call.get("args"))
                if args is not None:
                    counted.append((call, args))
        self._counted.put(key, counted)
        return counted

    def usage(self, messages: Sequence[BaseMessage]) -> tuple[int, int]:
        """(calls that ran, calls refused) in the current turn."""
        requested = len(self.calls(messages))
        used = min(requested, self.limit)
        return used, requested - used

    def positions(
        self,
        messages: Sequence[BaseMessage],
        *,
        name: str,
        call_id: str | None,
        args: Mapping[str, object] | None = None,
    ) -> list[int]:
        """Positions of the turn's counted calls with this name and id (and arguments, if given)."""
        return [
            position
            for position, (call, normalised) in enumerate(self.calls(messages))
            if call["name"] == name
            and call.get("id") == call_id
            and (args is None or dict(normalised) == dict(args))
        ]

    def grant(
        self,
        messages: Sequence[BaseMessage],
        *,
        name: str,
        call_id: str | None,
        args: Mapping[str, object],
        thread: object = None,
    ) -> bool | None:
        """Whether this call may run; `None` when the conversation does not contain it.

        Args:
            messages: The agent state's messages.
            name: The tool's name.
            call_id: The id of the tool call being served (may be empty or `None`).
            args: The call's normalised arguments.
            thread: Identifies the conversation (the thread id), to tell identical calls apart.
        """
        matches = self.positions(messages, name=name, call_id=call_id, args=args)
        if not matches:
            matches = self.positions(messages, name=name, call_id=call_id)[:1]
        if not matches:
            return None
        allowed = sum(position < self.limit for position in matches)
        if allowed in (0, len(matches)):
            return allowed > 0
        index = latest_human_index(messages)
        human = messages[index] if index is not None else None
        arguments = json.dumps(dict(args), sort_keys=True, default=str)
        key = (repr(thread), turn_key(human), name, call_id, arguments)
        with self._lock:
            granted = self._ties.get(key) or 0
            self._ties.put(key, granted + 1)
        return granted < allowed


class ToolBudget:
    """An explicit per-turn budget shared by the search tools of one conversation.

    Use it where tools get no graph state, as with the legacy `AgentExecutor`: build the tools
    with `budget=...` and call `reset()` at the start of every turn (the turn wrapper in
    `langchain_tdai_recall.legacy` does). Calls are granted first come, first served; exactly
    `limit` are granted per turn whatever the concurrency. Thread-safe.

    Example:
        ```python
        from langchain_tdai_recall.tools import ToolBudget

        budget = ToolBudget(3)
        assert [budget.try_acquire() for _ in range(4)] == [True, True, True, False]
        budget.reset()
        assert budget.used == 0
        ```
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(cast("object", limit), int) or limit < 1:
            msg = f"ToolBudget limit must be an integer >= 1, got {limit!r}"
            raise ConfigError(msg)
        self.limit: Final = limit
        self._lock = threading.Lock()
        self._used = 0
        self._blocked = 0

    @property
    def used(self) -> int:
        """Calls granted since the last reset."""
        return self._used

    @property
    def blocked(self) -> int:
        """Calls refused since the last reset."""
        return self._blocked

    def try_acquire(self) -> bool:
        """Grant one call if the budget allows it."""
        with self._lock:
            if self._used < self.limit:
                self._used += 1
                return True
            self._blocked += 1
            return False

    def reset(self) -> None:
        """Start a new turn."""
        with self._lock:
            self._used = 0
            self._blocked = 0


_OUTSIDE_TURN_WARNED = threading.Event()
"""Set once the "tools used outside a turn" warning was logged (once per process)."""


class TurnScopedBudget(ToolBudget):
    """A `ToolBudget` whose turns are opened and closed by a turn wrapper (`ExecutorMemory`).

    A search call while no turn is open means the wrapper is not in use: nothing resets the
    budget (later turns get refused) and nothing records the turn to L0. That logs one WARNING
    per process, with what to do instead.
    """

    def __init__(self, limit: int, *, hint: str) -> None:
        super().__init__(limit)
        self._hint = hint
        self._open_turns = 0

    def open_turn(self) -> None:
        """Start a turn: the budget starts from zero."""
        self.reset()
        with self._lock:
            self._open_turns += 1

    def close_turn(self) -> None:
        """End a turn opened by `open_turn`."""
        with self._lock:
            self._open_turns = max(0, self._open_turns - 1)

    @override
    def try_acquire(self) -> bool:
        """Grant one call if the budget allows it; warn (once) when no turn is open."""
        if not self._open_turns and not _OUTSIDE_TURN_WARNED.is_set():
            _OUTSIDE_TURN_WARNED.set()
            logger.warning(
                "memory search tool called outside a turn: its per-turn budget is never reset "
                "(later turns get refused) and nothing is recorded to L0; %s",
                self._hint,
            )
        return super().try_acquire()


class RunBudgets:
    """Budgets keyed by the parent run of a tool call, for callers with no graph state.

    An `AgentExecutor` run is the parent of every tool run it makes, so one executor `invoke`
    gets one budget. Bounded: the oldest runs are forgotten first.
    """

    def __init__(self, limit: int) -> None:
        self.limit: Final = limit
        self._lock = threading.Lock()
        self._counts = TurnCache[int]()

    def try_acquire(self, run_id: uuid.UUID) -> bool:
        """Grant one call of run `run_id` if its budget allows it."""
        with self._lock:
            count = self._counts.get(run_id) or 0
            self._counts.put(run_id, count + 1)
            return count < self.limit


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
    """One recalled memory in a `TurnEvent`."""

    content: str
    """The memory text."""
    score: float
    """Relevance in [0, 1] (`RecalledMemory.score`): what the injection threshold compared."""
    type: str
    """Memory type."""


class TurnEvent(TypedDict):
    """Payload of the `tdai_agent_turn` custom event and of `on_turn` (SPEC §10)."""

    user_id: str
    """User of the scope (the store's default user when none was given)."""
    agent_id: str | None
    """Agent of the scope."""
    session_key: str
    """Session the turn belongs to."""
    memories: list[TurnMemory]
    """Memories injected in the memory block, best ranked first, with their relevance (memories
    pinned into the system context are not repeated here)."""
    persona_injected: bool
    """Whether a persona was part of the injected system context."""
    strategy: str
    """Strategy recall actually used; `none` when recall was off or failed."""
    pending_vectors: int
    """Memories of the scope whose vectors were not computed yet at recall time (the vector leg
    could not see them; with none computed at all, `strategy` is `keyword`)."""
    pinned: int
    """Memories pinned by priority into the system context this turn."""
    profile: int
    """Memories in the user profile of the system context this turn."""
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
            TurnMemory(content=m.content, score=m.score, type=m.type)
            for m in (result.memories if result is not None else ())
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


def emit_turn(event: TurnEvent, on_turn: OnTurn | None) -> None:
    """Emit the `tdai_agent_turn` custom event and call `on_turn`; never raises."""
    try:
        dispatch_custom_event(TURN_EVENT, event)
    except Exception as exc:
        _dispatch_failed(exc)
    if on_turn is not None:
        try:
            on_turn(event)
        except Exception as exc:  # an observer must never end the turn
            report_failure(exc, action="on_turn callback")


async def aemit_turn(event: TurnEvent, on_turn: OnTurn | None) -> None:
    """Async version of `emit_turn` (`on_turn` may be a coroutine function)."""
    try:
        await adispatch_custom_event(TURN_EVENT, event)
    except Exception as exc:
        _dispatch_failed(exc)
    if on_turn is not None:
        try:
            maybe = on_turn(event)
            if inspect.isawaitable(maybe):
                await maybe
        except Exception as exc:
            report_failure(exc, action="on_turn callback")
