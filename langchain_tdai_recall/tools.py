"""Memory tools for agents: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`.

The two search tools share a per-turn budget (`tools.max_calls_per_turn`, default 3) that is
enforced in code, including when the model asks for several calls in one message. Inside a
LangGraph agent the decision is a pure function of the conversation: the search calls the model
made since the turn's human message are numbered in the order of the AI messages and of their
`tool_calls`, and call number `k` runs only when `k < limit`. Parallel calls therefore get the
same verdicts however the tool node schedules them, and no shared counter is involved. Outside a
graph (for example the legacy `AgentExecutor`), an explicit `ToolBudget` that the caller resets
every turn decides instead, or, without one, a budget per parent run.

Every refused call still answers with an error `ToolMessage` (`BUDGET_EXHAUSTED_MESSAGE`) telling
the model to answer with what it has. Names, descriptions and schemas are constants, so the tool
list the model sees is byte-stable across turns.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, ValidationError, field_validator
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import override

from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.types import MemoryHit, MessageHit, SceneBlock, SceneInfo

if TYPE_CHECKING:
    from langchain_tdai_recall.memory import TdaiMemory

__all__ = [
    "BUDGET_EXHAUSTED_MESSAGE",
    "CAPPED_TOOL_NAMES",
    "CONVERSATION_SEARCH_TOOL",
    "MEMORY_SEARCH_TOOL",
    "READ_SCENE_TOOL",
    "ConversationSearchInput",
    "MemorySearchInput",
    "ReadSceneInput",
    "Scope",
    "ScopeResolver",
    "ToolBudget",
    "blocked_calls",
    "call_position",
    "capped_calls_in_turn",
    "create_memory_tools",
    "is_summary_message",
    "latest_human_index",
    "turn_usage",
]

logger = logging.getLogger(__name__)

MEMORY_SEARCH_TOOL: Final = "tdai_memory_search"
CONVERSATION_SEARCH_TOOL: Final = "tdai_conversation_search"
READ_SCENE_TOOL: Final = "tdai_read_scene"
CAPPED_TOOL_NAMES: Final = frozenset({MEMORY_SEARCH_TOOL, CONVERSATION_SEARCH_TOOL})
"""The tools that share the per-turn budget."""

DEFAULT_SESSION_KEY: Final = "default"
"""Session key used when neither the run nor the caller names one."""

_SUMMARY_SOURCE: Final = "summarization"
"""`additional_kwargs["lc_source"]` of the summary message `SummarizationMiddleware` writes."""

_MAX_LIMIT: Final = 20
_RUN_BUDGETS_KEPT: Final = 512

BUDGET_EXHAUSTED_MESSAGE: Final = (
    "Refused: the memory search budget for this turn is used up (tdai_memory_search and "
    "tdai_conversation_search share a budget of {limit} calls per turn). Do not call these tools "
    "again in this turn; answer now with the information you already have."
)
"""Sent to the model (as an error `ToolMessage`) for every search call over the budget."""

_SEARCH_FAILED_MESSAGE: Final = (
    "{tool} is unavailable right now ({error}). Do not retry it in this turn; answer with the "
    "information you already have."
)
"""Sent to the model when the store fails; the error is a type name, never memory text."""

_INVALID_ARGUMENTS_MESSAGE: Final = "Invalid arguments for {tool}: {problems}. Fix them and retry."
"""Sent to the model when its arguments fail validation."""

_MEMORY_SEARCH_DESCRIPTION: Final = (
    "Search this user's long-term memory: who they are and what they prefer (persona), things "
    "that happened (episodic) and standing rules they gave you (instruction). Use it when the "
    "answer depends on something the user told you in an earlier conversation and the memories "
    "already in the prompt do not cover it. Results are ranked by relevance; each shows its "
    "type, scene, priority and score. tdai_memory_search and tdai_conversation_search share a "
    "budget of {limit} calls per turn; calls beyond it are refused."
)
_CONVERSATION_SEARCH_DESCRIPTION: Final = (
    "Search the raw messages of this user's past conversations, for exact wording, details that "
    "never became a memory, or what was said in a given session. Returns single messages ranked "
    "by relevance, each with its role, session and time. Shares a budget of {limit} calls per turn "
    "with tdai_memory_search; calls beyond it are refused."
)
_READ_SCENE_DESCRIPTION: Final = (
    "Read one scene block in full: a Markdown summary of a recurring topic or situation in this "
    "user's history. Pass a scene name exactly as listed in the scene navigation of the system "
    "prompt; any other name is refused. Does not count against the search budget."
)


# -- schemas -------------------------------------------------------------------------------------

_RuntimeField = Annotated[SkipValidation[Any], InjectedToolArg, SkipJsonSchema()]
"""Slot through which LangGraph's tool node injects `ToolRuntime` (matched by the name
`runtime`). It is hidden from the model-facing schema and never validated or serialised."""


class _ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runtime: _RuntimeField = Field(default=None, exclude=True)


def _reject_bool(value: Any) -> Any:
    if isinstance(value, bool):
        msg = "must be an integer, not a boolean"
        raise ValueError(msg)
    return value


def _strip_query(value: Any) -> Any:
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            msg = "must not be empty"
            raise ValueError(msg)
        return stripped
    return value


class MemorySearchInput(_ToolInput):
    """Arguments of `tdai_memory_search`."""

    query: str = Field(
        min_length=1,
        description="What to look for, in natural language; keywords work too.",
    )
    limit: int = Field(
        default=5,
        ge=1,
        le=_MAX_LIMIT,
        description="Maximum number of results: an integer from 1 to 20.",
    )
    type: Literal["persona", "episodic", "instruction"] | None = Field(
        default=None,
        description=(
            "Only memories of this type: persona (identity, preferences), episodic (events, "
            "activities) or instruction (rules the user set)."
        ),
    )
    scene: str | None = Field(
        default=None,
        description="Only memories whose scene name contains this text.",
    )

    _check_limit = field_validator("limit", mode="before")(_reject_bool)
    _check_query = field_validator("query", mode="before")(_strip_query)


class ConversationSearchInput(_ToolInput):
    """Arguments of `tdai_conversation_search`."""

    query: str = Field(
        min_length=1,
        description="What to look for in past messages, in natural language; keywords work too.",
    )
    limit: int = Field(
        default=5,
        ge=1,
        le=_MAX_LIMIT,
        description="Maximum number of messages: an integer from 1 to 20.",
    )
    session_key: str | None = Field(
        default=None,
        description="Only messages from this conversation session.",
    )

    _check_limit = field_validator("limit", mode="before")(_reject_bool)
    _check_query = field_validator("query", mode="before")(_strip_query)


class ReadSceneInput(_ToolInput):
    """Arguments of `tdai_read_scene`."""

    name: str = Field(
        min_length=1,
        description="Scene name, exactly as shown in the scene navigation.",
    )


# -- identity ------------------------------------------------------------------------------------

ScopeSource = Literal["context", "configurable", "constructor", "default"]
"""Where the user id of a scope came from."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The memory scope of one call, and where its user id came from."""

    user_id: str | None
    """User id; `None` means the store's default user."""
    agent_id: str | None
    """Agent id; `None` is the user's shared memory."""
    session_key: str
    """Conversation the turn belongs to (used by recall and L0 capture)."""
    source: ScopeSource
    """`context`, `configurable`, `constructor` or `default`."""


def _lookup(container: Any, key: str) -> Any:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return container.get(key)
    return getattr(container, key, None)


def _check_id(value: Any, *, field: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        msg = (
            f"{field} from {source} must be a non-empty string, got {value!r}; pass the id of "
            "the end user (or leave it out to use the store's default user)"
        )
        raise ScopeError(msg)
    return value


class ScopeResolver:
    """Resolves the memory scope of a call: run context, then `configurable`, then defaults.

    Order for each of `user_id` and `agent_id`: `runtime.context`, `config["configurable"]`,
    the constructor argument, the store's default. A fallback to the default user after other
    calls carried a user id logs one WARNING (a multi-user deployment that forgot to pass one);
    `require_user_id=True` turns a missing user id into a `ScopeError` instead. Invalid ids
    always raise `ScopeError`: a scope is never silently replaced by another one.
    """

    def __init__(
        self,
        *,
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
        self.user_id: Final = user_id
        self.agent_id: Final = agent_id
        self.session_key: Final = session_key
        self.require_user_id: Final = require_user_id
        self._seen_request_user = False
        self._warned = False

    def resolve(self, context: Any = None, configurable: Mapping[str, Any] | None = None) -> Scope:
        """Resolve the scope for one call.

        Args:
            context: `runtime.context` (a mapping, a dataclass or any object), or `None`.
            configurable: `config["configurable"]`, or `None`.

        Returns:
            The scope.

        Raises:
            ScopeError: If an id is not a non-empty string, or no user id was found and
                `require_user_id` is set.
        """
        conf = configurable or {}
        user_id: str | None = None
        source: ScopeSource = "default"
        for candidate, where in (
            (_lookup(context, "user_id"), "context"),
            (conf.get("user_id"), "configurable"),
        ):
            if candidate is not None:
                user_id = _check_id(candidate, field="user_id", source=f"runtime {where}")
                source = "context" if where == "context" else "configurable"
                break
        if user_id is not None:
            self._seen_request_user = True
        elif self.user_id is not None:
            user_id, source = self.user_id, "constructor"
        elif self.require_user_id:
            msg = (
                "no user_id for this call: pass it in the run context "
                "(context={'user_id': ...}), in config['configurable']['user_id'], or to the "
                "constructor; require_user_id=True forbids falling back to the default user"
            )
            raise ScopeError(msg)
        elif self._seen_request_user and not self._warned:
            self._warned = True
            logger.warning(
                "a call without user_id fell back to the default user although other calls "
                "passed one; pass user_id in the run context or configurable, or set "
                "require_user_id=True to make this an error"
            )

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
        return Scope(user_id=user_id, agent_id=agent_id, session_key=session_key, source=source)


# -- the per-turn budget -------------------------------------------------------------------------


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


def capped_calls_in_turn(messages: Sequence[BaseMessage]) -> list[ToolCall]:
    """The search calls (both capped tools) the model made in the current turn, in order.

    Order is the order of the AI messages, then of `tool_calls` within each: exactly the order
    in which the budget is granted.
    """
    start = latest_human_index(messages)
    calls: list[ToolCall] = []
    for message in messages[(start + 1 if start is not None else 0) :]:
        if isinstance(message, AIMessage):
            calls.extend(c for c in message.tool_calls if c["name"] in CAPPED_TOOL_NAMES)
    return calls


def call_position(messages: Sequence[BaseMessage], tool_call_id: str) -> int | None:
    """Position of a search call among the turn's search calls, or `None` if it is not there."""
    for position, call in enumerate(capped_calls_in_turn(messages)):
        if call.get("id") == tool_call_id:
            return position
    return None


def blocked_calls(messages: Sequence[BaseMessage], limit: int) -> list[ToolCall]:
    """Search calls of the latest AI message that the budget refuses, decided together.

    Calls that already have a `ToolMessage` (answered by another middleware) are left alone.
    """
    last_ai = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None
    )
    if last_ai is None:
        return []
    ai = messages[last_ai]
    assert isinstance(ai, AIMessage)
    answered = {m.tool_call_id for m in messages[last_ai + 1 :] if isinstance(m, ToolMessage)}
    latest = [c for c in ai.tool_calls if c["name"] in CAPPED_TOOL_NAMES]
    first = len(capped_calls_in_turn(messages[: last_ai + 1])) - len(latest)
    return [
        call
        for position, call in enumerate(latest, start=first)
        if position >= limit and call.get("id") not in answered
    ]


def turn_usage(messages: Sequence[BaseMessage], limit: int) -> tuple[int, int]:
    """(search calls run, search calls refused) in the current turn."""
    requested = len(capped_calls_in_turn(messages))
    used = min(requested, limit)
    return used, requested - used


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
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
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


class _RunBudgets:
    """Budgets keyed by the parent run of a tool call, for callers with no graph state.

    An `AgentExecutor` run is the parent of every tool run it makes, so one executor `invoke`
    gets one budget. Bounded: the oldest runs are forgotten first.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._counts: OrderedDict[uuid.UUID, int] = OrderedDict()

    def try_acquire(self, run_id: uuid.UUID) -> bool:
        with self._lock:
            count = self._counts.pop(run_id, 0)
            self._counts[run_id] = count + 1
            while len(self._counts) > _RUN_BUDGETS_KEPT:
                self._counts.popitem(last=False)
            return count < self.limit


# -- rendering -----------------------------------------------------------------------------------


def _indent(text: str) -> str:
    return "\n".join("   " + line if line else "" for line in text.splitlines() or [""])


def _format_time(value: str, tz: Any) -> str:
    if not value:
        return "unknown time"
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(tz).isoformat(timespec="seconds")


def render_memory_hits(query: str, hits: Sequence[MemoryHit]) -> str:
    """Model-facing text of a `tdai_memory_search` result."""
    del query  # the model knows what it asked; repeating it costs tokens
    if not hits:
        return "No matching memories found."
    noun = "memory" if len(hits) == 1 else "memories"
    lines = [f"Found {len(hits)} matching {noun}:"]
    for i, hit in enumerate(hits, 1):
        meta: list[str] = [hit.type]
        if hit.scene_name:
            meta.append(f"scene: {hit.scene_name}")
        meta.append("global instruction" if hit.priority < 0 else f"priority {hit.priority}")
        meta.append(f"score {hit.score:.3f}")
        lines.append(f"{i}. [{' | '.join(meta)}]")
        lines.append(_indent(hit.content))
    return "\n".join(lines)


def render_message_hits(hits: Sequence[MessageHit], tz: Any) -> str:
    """Model-facing text of a `tdai_conversation_search` result."""
    if not hits:
        return "No matching conversation messages found."
    noun = "message" if len(hits) == 1 else "messages"
    lines = [f"Found {len(hits)} matching {noun}:"]
    for i, hit in enumerate(hits, 1):
        when = _format_time(hit.recorded_at, tz)
        lines.append(
            f"{i}. [{hit.role} | session: {hit.session_key} | {when} | score {hit.score:.3f}]"
        )
        lines.append(_indent(hit.content))
    return "\n".join(lines)


def render_scene(block: SceneBlock) -> str:
    """Model-facing text of a `tdai_read_scene` result."""
    info = block.info
    return (
        f"Scene: {info.name} (heat {info.heat}, updated {info.updated})\n"
        f"Summary: {info.summary}\n\n{block.body}"
    )


def _memory_artifact(hits: Sequence[MemoryHit]) -> list[dict[str, Any]]:
    return [
        {
            "id": h.id,
            "content": h.content,
            "type": h.type,
            "scene_name": h.scene_name,
            "priority": h.priority,
            "score": h.score,
            "keyword_score": h.keyword_score,
            "embedding_score": h.embedding_score,
        }
        for h in hits
    ]


def _message_artifact(hits: Sequence[MessageHit]) -> list[dict[str, Any]]:
    return [
        {
            "id": h.id,
            "role": h.role,
            "content": h.content,
            "session_key": h.session_key,
            "recorded_at": h.recorded_at,
            "score": h.score,
            "keyword_score": h.keyword_score,
            "embedding_score": h.embedding_score,
        }
        for h in hits
    ]


def _scene_artifact(block: SceneBlock) -> dict[str, Any]:
    info = block.info
    return {
        "name": info.name,
        "summary": info.summary,
        "heat": info.heat,
        "created": info.created,
        "updated": info.updated,
        "body": block.body,
    }


def _format_validation_error(tool: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return _INVALID_ARGUMENTS_MESSAGE.format(tool=tool, problems=problems)


# -- the tools -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    """What a tool needs to know about the call it is serving."""

    scope: Scope
    allowed: bool


class _MemoryToolBase(BaseTool):
    """Shared plumbing: scope resolution, the budget and failure translation."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True

    memory: Any = Field(exclude=True)
    """The `TdaiMemory` the tool reads."""
    resolver: ScopeResolver = Field(exclude=True)
    """Identity resolution shared with the middleware."""
    budget: ToolBudget | None = Field(default=None, exclude=True)
    """Explicit per-turn budget (legacy executors); `None` derives it from graph state."""
    max_calls_per_turn: int = Field(default=3, exclude=True)
    """Per-turn cap of the two search tools together."""
    run_budgets: _RunBudgets | None = Field(default=None, exclude=True)
    """Budgets per parent run, used without graph state and without `budget`."""

    capped: bool = Field(default=False, exclude=True)

    def _prepare(
        self,
        runtime: Any,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
    ) -> _Call:
        """Resolve the scope and decide the budget. Pure apart from the budget counters."""
        context = getattr(runtime, "context", None) if runtime is not None else None
        config: RunnableConfig = (
            runtime.config
            if runtime is not None and getattr(runtime, "config", None)
            else ensure_config()
        )
        scope = self.resolver.resolve(context, config.get("configurable"))
        return _Call(scope=scope, allowed=self._grant(runtime, run_manager))

    def _grant(
        self,
        runtime: Any,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
    ) -> bool:
        if not self.capped:
            return True
        if self.budget is not None:
            return self.budget.try_acquire()
        state = getattr(runtime, "state", None) if runtime is not None else None
        tool_call_id = getattr(runtime, "tool_call_id", None) if runtime is not None else None
        messages = _lookup(state, "messages") if state is not None else None
        if isinstance(messages, list) and tool_call_id:
            position = call_position(messages, tool_call_id)
            if position is not None:
                return position < self.max_calls_per_turn
        parent = run_manager.parent_run_id if run_manager is not None else None
        if parent is None or self.run_budgets is None:
            return True  # a standalone call is a turn of its own
        return self.run_budgets.try_acquire(parent)

    def _refuse(self) -> ToolException:
        logger.info("%s refused: per-turn budget of %d used up", self.name, self._limit())
        return ToolException(BUDGET_EXHAUSTED_MESSAGE.format(limit=self._limit()))

    def _limit(self) -> int:
        return self.budget.limit if self.budget is not None else self.max_calls_per_turn

    def _failed(self, exc: Exception) -> ToolException:
        if isinstance(exc, ScopeError):
            raise exc
        logger.warning("%s failed: %s", self.name, type(exc).__name__)
        return ToolException(
            _SEARCH_FAILED_MESSAGE.format(tool=self.name, error=type(exc).__name__)
        )


def _validation_handler(tool: str) -> Callable[[ValidationError], str]:
    def handle(exc: ValidationError) -> str:
        return _format_validation_error(tool, exc)

    return handle


class _MemorySearchTool(_MemoryToolBase):
    name: str = MEMORY_SEARCH_TOOL
    args_schema: type[BaseModel] = MemorySearchInput
    capped: bool = Field(default=True, exclude=True)

    def _search(self, call: _Call, query: str, limit: int, type_: Any, scene: Any) -> Any:
        scope = call.scope
        return self.memory.search_memories(
            query,
            limit=limit,
            type=type_,
            scene=scene,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
        )

    async def _asearch(self, call: _Call, query: str, limit: int, type_: Any, scene: Any) -> Any:
        scope = call.scope
        return await self.memory.asearch_memories(
            query,
            limit=limit,
            type=type_,
            scene=scene,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
        )

    def _finish(self, query: str, hits: list[MemoryHit]) -> tuple[str, list[dict[str, Any]]]:
        logger.debug("%s %r -> %d hits", self.name, query, len(hits))
        return render_memory_hits(query, hits), _memory_artifact(hits)

    @override
    def _run(
        self,
        query: str,
        limit: int = 5,
        type: str | None = None,
        scene: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        call = self._prepare(runtime, run_manager)
        if not call.allowed:
            raise self._refuse()
        try:
            hits = self._search(call, query, limit, type, scene)
        except Exception as exc:  # the store failing must not end the agent
            raise self._failed(exc) from exc
        return self._finish(query, list(hits))

    @override
    async def _arun(
        self,
        query: str,
        limit: int = 5,
        type: str | None = None,
        scene: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        call = self._prepare(runtime, run_manager)
        if not call.allowed:
            raise self._refuse()
        try:
            hits = await self._asearch(call, query, limit, type, scene)
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._finish(query, list(hits))


class _ConversationSearchTool(_MemoryToolBase):
    name: str = CONVERSATION_SEARCH_TOOL
    args_schema: type[BaseModel] = ConversationSearchInput
    capped: bool = Field(default=True, exclude=True)

    def _finish(self, query: str, hits: list[MessageHit]) -> tuple[str, list[dict[str, Any]]]:
        logger.debug("%s %r -> %d hits", self.name, query, len(hits))
        return render_message_hits(hits, self.memory.config.tzinfo()), _message_artifact(hits)

    @override
    def _run(
        self,
        query: str,
        limit: int = 5,
        session_key: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        call = self._prepare(runtime, run_manager)
        if not call.allowed:
            raise self._refuse()
        try:
            hits = self.memory.search_conversations(
                query,
                limit=limit,
                session_key=session_key,
                user_id=call.scope.user_id,
                agent_id=call.scope.agent_id,
            )
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._finish(query, list(hits))

    @override
    async def _arun(
        self,
        query: str,
        limit: int = 5,
        session_key: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        call = self._prepare(runtime, run_manager)
        if not call.allowed:
            raise self._refuse()
        try:
            hits = await self.memory.asearch_conversations(
                query,
                limit=limit,
                session_key=session_key,
                user_id=call.scope.user_id,
                agent_id=call.scope.agent_id,
            )
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._finish(query, list(hits))


def _unknown_scene(name: str, scenes: Iterable[SceneInfo]) -> ToolException:
    names = sorted(s.name for s in scenes)
    listing = ", ".join(names) if names else "none"
    msg = (
        f"There is no scene named {name!r} for this user. Use a name exactly as listed in the "
        f"scene navigation. Available scenes: {listing}."
    )
    return ToolException(msg)


class _ReadSceneTool(_MemoryToolBase):
    name: str = READ_SCENE_TOOL
    args_schema: type[BaseModel] = ReadSceneInput

    def _pick(self, name: str, scenes: Sequence[SceneInfo]) -> str:
        """The scope's scene whose name equals `name` (whitespace-trimmed), else refuse."""
        wanted = name.strip()
        for scene in scenes:
            if scene.name == wanted:
                return scene.name
        raise _unknown_scene(wanted, scenes)

    def _finish(self, name: str, block: SceneBlock | None) -> tuple[str, dict[str, Any]]:
        if block is None:  # deleted between listing and reading
            raise _unknown_scene(name, [])
        logger.debug("%s %r -> %d chars", self.name, name, len(block.body))
        return render_scene(block), _scene_artifact(block)

    @override
    def _run(
        self,
        name: str,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, dict[str, Any]]:
        scope = self._prepare(runtime, run_manager).scope
        try:
            scenes = self.memory.list_scenes(user_id=scope.user_id, agent_id=scope.agent_id)
            picked = self._pick(name, scenes)
            block = self.memory.read_scene(picked, user_id=scope.user_id, agent_id=scope.agent_id)
        except ToolException:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._finish(picked, block)

    @override
    async def _arun(
        self,
        name: str,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, dict[str, Any]]:
        scope = self._prepare(runtime, run_manager).scope
        try:
            scenes = await self.memory.alist_scenes(user_id=scope.user_id, agent_id=scope.agent_id)
            picked = self._pick(name, scenes)
            block = await self.memory.aread_scene(
                picked, user_id=scope.user_id, agent_id=scope.agent_id
            )
        except ToolException:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._finish(picked, block)


def create_memory_tools(
    memory: TdaiMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    budget: ToolBudget | None = None,
    resolver: ScopeResolver | None = None,
) -> list[BaseTool]:
    """Build `tdai_memory_search`, `tdai_conversation_search` and `tdai_read_scene`.

    The tools read the caller's scope only. The scope comes from `runtime.context`, then
    `config["configurable"]` (`user_id`, `agent_id`), then `user_id`/`agent_id` given here, then
    the store's default user. Give `user_id` here for executors that pass no config to tools.

    Args:
        memory: The store to search.
        user_id: User of the scope when the run names none.
        agent_id: Agent of the scope when the run names none.
        session_key: Session used when the run names none (only reported, never searched).
        require_user_id: Raise `ScopeError` instead of falling back to the default user.
        budget: An explicit `ToolBudget` that the caller resets each turn (its `limit` is the
            cap). Without it, the cap is `tools.max_calls_per_turn` of the store's config, and
            the budget is derived from the graph state (agents) or kept per parent run.
        resolver: Share identity resolution with a middleware (internal; overrides the
            identity arguments).

    Returns:
        The three tools, always in this order.

    Raises:
        ConfigError: If an argument is invalid.

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import HashEmbeddings

        memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64))
        memory.add_memory("Prefers window seats", type="persona", user_id="alice")
        search, conversations, read_scene = memory.tools(user_id="alice")
        print(search.invoke({"query": "seat preference"}))
        ```
    """
    if budget is not None and not isinstance(cast("object", budget), ToolBudget):
        msg = f"budget must be a ToolBudget, got {type(budget).__name__}"
        raise ConfigError(msg)
    limit = memory.config.tools.max_calls_per_turn if budget is None else budget.limit
    scopes = resolver or ScopeResolver(
        user_id=user_id,
        agent_id=agent_id,
        session_key=session_key,
        require_user_id=require_user_id,
    )
    shared: dict[str, Any] = {
        "memory": memory,
        "resolver": scopes,
        "budget": budget,
        "max_calls_per_turn": limit,
        "run_budgets": _RunBudgets(limit),
    }
    return [
        _MemorySearchTool(
            description=_MEMORY_SEARCH_DESCRIPTION.format(limit=limit),
            handle_validation_error=_validation_handler(MEMORY_SEARCH_TOOL),
            **shared,
        ),
        _ConversationSearchTool(
            description=_CONVERSATION_SEARCH_DESCRIPTION.format(limit=limit),
            handle_validation_error=_validation_handler(CONVERSATION_SEARCH_TOOL),
            **shared,
        ),
        _ReadSceneTool(
            description=_READ_SCENE_DESCRIPTION,
            handle_validation_error=_validation_handler(READ_SCENE_TOOL),
            **shared,
        ),
    ]
