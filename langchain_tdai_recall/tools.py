"""Memory tools for agents: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`.

A thin adapter over `langchain_tdai_recall._turn`: scope resolution, the per-turn budget of the
two search tools and the failure policy live there. This module holds what the model sees (names,
descriptions, argument schemas, result text) and bridges LangChain's `BaseTool` to the store.

The two search tools share a per-turn budget (`tools.max_calls_per_turn`, default 3) that is
enforced in code, including when the model asks for several calls in one message. Inside a
LangGraph agent the decision is a pure function of the conversation (`_turn.StateBudget`): the
search calls with valid arguments since the turn's human message are numbered in call order, and
call number `k` runs only when `k < limit`, whatever their ids. Outside a graph (for example the
legacy `AgentExecutor`), an explicit `ToolBudget` that the caller resets every turn decides
instead, or, without one, a budget per parent run.

Every refused call still answers with an error `ToolMessage` (`BUDGET_EXHAUSTED_MESSAGE`) telling
the model to answer with what it has. Names, descriptions and schemas are constants, so the tool
list the model sees is byte-stable across turns. Stored text in results is escaped like the
injected prompt blocks, so a memory cannot open or close a block or a role tag.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import ToolCall
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, ValidationError, field_validator
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import override

from langchain_tdai_recall._breaker import StoreBreaker
from langchain_tdai_recall._turn import (
    BUDGET_EXHAUSTED_MESSAGE,
    CAPPED_TOOL_NAMES,
    CONVERSATION_SEARCH_TOOL,
    MANAGE_MEMORY_TOOL,
    MEMORY_SEARCH_TOOL,
    READ_SCENE_TOOL,
    TOOL_FAILED_MESSAGE,
    RunBudgets,
    ScopeResolver,
    StateBudget,
    ToolBudget,
    TurnIdentity,
    report_failure,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.prompt import escape_block_text, escape_inline, format_time
from langchain_tdai_recall.types import MemoryHit, MessageHit, SceneBlock, SceneInfo

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig as _Config

    from langchain_tdai_recall.memory import TdaiMemory

__all__ = [
    "BUDGET_EXHAUSTED_MESSAGE",
    "CAPPED_TOOL_NAMES",
    "CONVERSATION_SEARCH_TOOL",
    "MAX_QUERY_CHARS",
    "MEMORY_SEARCH_TOOL",
    "READ_SCENE_TOOL",
    "ConversationSearchInput",
    "MemorySearchInput",
    "ReadSceneInput",
    "ToolBudget",
    "create_memory_tools",
    "search_budget",
]

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS: Final = 2000
"""Longest `query` the search tools accept, in code points (after trimming). A longer one is
refused with an "Invalid arguments" tool error before any search runs; a search query needs a
few key words, not a document."""

_MAX_LIMIT: Final = 20

_INVALID_ARGUMENTS_MESSAGE: Final = "Invalid arguments for {tool}: {problems}. Fix them and retry."
"""For the model (an error `ToolMessage`): its arguments failed validation."""

_MEMORY_SEARCH_DESCRIPTION: Final = (
    "Search this user's long-term memory: who they are and what they prefer (persona), things "
    "that happened (episodic) and standing rules they gave you (instruction). Use it when the "
    "answer depends on something the user told you in an earlier conversation and the memories "
    "already in the prompt do not cover it. Results are ranked by relevance; each shows its "
    "type, scene, priority and relevance (0-1). tdai_memory_search and "
    "tdai_conversation_search share a budget of {limit} calls per turn; calls beyond it are "
    "refused."
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


def _reject_bool(value: object) -> object:
    if isinstance(value, bool):
        msg = "must be an integer, not a boolean"
        raise ValueError(msg)
    return value


def _strip_query(value: object) -> object:
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            msg = "must not be empty"
            raise ValueError(msg)
        if len(stripped) > MAX_QUERY_CHARS:
            msg = (
                f"is {len(stripped)} characters long, the maximum is {MAX_QUERY_CHARS}; "
                "search with a few key words instead"
            )
            raise ValueError(msg)
        return stripped
    return value


class MemorySearchInput(_ToolInput):
    """Arguments of `tdai_memory_search`."""

    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
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
        max_length=MAX_QUERY_CHARS,
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


_CAPPED_SCHEMAS: Final[Mapping[str, type[_ToolInput]]] = {
    MEMORY_SEARCH_TOOL: MemorySearchInput,
    CONVERSATION_SEARCH_TOOL: ConversationSearchInput,
}


def _checked_args(name: str, args: object) -> Mapping[str, object] | None:
    """The normalised arguments of a capped call, or `None` when they fail validation."""
    schema = _CAPPED_SCHEMAS.get(name)
    if schema is None or not isinstance(args, Mapping):
        return None
    try:
        return schema.model_validate(args).model_dump()
    except ValidationError:
        return None


def search_budget(limit: int) -> StateBudget:
    """The graph-state budget of the two search tools, with their argument validation."""
    return StateBudget(limit, _checked_args)


def _format_validation_error(tool: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return _INVALID_ARGUMENTS_MESSAGE.format(tool=tool, problems=problems)


def _validation_handler(tool: str) -> Callable[[ValidationError], str]:
    def handle(exc: ValidationError) -> str:
        return _format_validation_error(tool, exc)

    return handle


# -- rendering (what the model reads; stored text escaped like the injected blocks) ---------------


def _indent(text: str) -> str:
    return "\n".join("   " + line if line else "" for line in text.splitlines() or [""])


def _format_time(value: str, tz: dt.tzinfo) -> str:
    """A message time as the prompt shows times (`recall.prompt.format_time`), or a fallback."""
    if not value:
        return "unknown time"
    return format_time(value, tz) or escape_inline(value)


def render_memory_hits(hits: Sequence[MemoryHit]) -> str:
    """Model-facing text of a `tdai_memory_search` result."""
    if not hits:
        return "No matching memories found."
    noun = "memory" if len(hits) == 1 else "memories"
    lines = [f"Found {len(hits)} {noun}, best first (relevance 0-1: how well each matches):"]
    for i, hit in enumerate(hits, 1):
        meta: list[str] = [hit.type]
        if hit.scene_name:
            meta.append(f"scene: {escape_inline(hit.scene_name)}")
        meta.append("global instruction" if hit.priority < 0 else f"priority {hit.priority}")
        meta.append(f"relevance {hit.score:.2f}")
        lines.append(f"{i}. [{' | '.join(meta)}]")
        lines.append(_indent(escape_block_text(hit.content)))
    return "\n".join(lines)


def render_message_hits(hits: Sequence[MessageHit], tz: dt.tzinfo) -> str:
    """Model-facing text of a `tdai_conversation_search` result."""
    if not hits:
        return "No matching conversation messages found."
    noun = "message" if len(hits) == 1 else "messages"
    lines = [f"Found {len(hits)} {noun}, best first (relevance 0-1: how well each matches):"]
    for i, hit in enumerate(hits, 1):
        when = _format_time(hit.recorded_at, tz)
        session = escape_inline(hit.session_key)
        lines.append(f"{i}. [{hit.role} | session: {session} | {when} | relevance {hit.score:.2f}]")
        lines.append(_indent(escape_block_text(hit.content)))
    return "\n".join(lines)


def render_scene(block: SceneBlock) -> str:
    """Model-facing text of a `tdai_read_scene` result."""
    info = block.info
    return (
        f"Scene: {escape_inline(info.name)} (heat {info.heat}, "
        f"updated {escape_inline(info.updated)})\n"
        f"Summary: {escape_inline(info.summary)}\n\n{escape_block_text(block.body)}"
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


def _unknown_scene(name: str, scenes: Iterable[SceneInfo]) -> ToolException:
    names = sorted(escape_inline(s.name) for s in scenes)
    listing = ", ".join(names) if names else "none"
    msg = (
        f"There is no scene named {escape_inline(name)!r} for this user. Use a name exactly as "
        f"listed in the scene navigation. Available scenes: {listing}."
    )
    return ToolException(msg)


# -- the tools -----------------------------------------------------------------------------------

ToolOutput = tuple[str, Any]
"""Text for the model and the structured artifact."""


@dataclass(frozen=True, slots=True)
class _StoreCall:
    """One `TdaiMemory` call a tool body asks for; the async driver awaits its `a*` twin."""

    method: str
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)


_Steps = Generator[_StoreCall, Any, ToolOutput]
"""A tool body: yields the store calls it needs, receives their results, returns its output."""


def _with_call_id(value: str | dict[str, Any] | ToolCall) -> str | dict[str, Any] | ToolCall:
    """A tool call whose id is `None` gets `""`, so LangChain still answers with a `ToolMessage`."""
    if isinstance(value, dict) and value.get("type") == "tool_call" and value.get("id") is None:
        return {**value, "id": ""}
    return value


class _MemoryToolBase(BaseTool):
    """Shared plumbing: identity, the budget, the failure policy and the sync/async drivers.

    Each tool writes its body once, as `_steps`; `_run` and `_arun` only choose the driver.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True

    memory: Any = Field(exclude=True)
    """The `TdaiMemory` the tool reads."""
    resolver: ScopeResolver = Field(exclude=True)
    """Identity resolution shared with the middleware."""
    budget: ToolBudget | None = Field(default=None, exclude=True)
    """Explicit per-turn budget (legacy executors); `None` derives it from graph state."""
    state_budget: StateBudget = Field(exclude=True)
    """The budget decided from the conversation (inside a graph)."""
    run_budgets: RunBudgets = Field(exclude=True)
    """Budgets per parent run, used without graph state and without `budget`."""
    capped: bool = Field(default=False, exclude=True)
    budget_message: str = Field(default=BUDGET_EXHAUSTED_MESSAGE, exclude=True)
    """What a call refused by the budget answers (`{limit}` is filled in)."""

    def _steps(self, identity: TurnIdentity, args: Mapping[str, Any]) -> _Steps:
        raise NotImplementedError

    # -- deciding -------------------------------------------------------------------------------

    def _start(
        self,
        args: Mapping[str, Any],
        runtime: object,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
    ) -> _Steps:
        """Resolve the identity, apply the budget, and return the body ready to drive."""
        config = cast("_Config | None", getattr(runtime, "config", None)) or ensure_config()
        identity = self.resolver.resolve(
            getattr(runtime, "context", None), config.get("configurable")
        )
        if self.capped and not self._grant(args, runtime, run_manager, config):
            logger.info("%s refused: per-turn budget of %d used up", self.name, self._limit())
            raise ToolException(self.budget_message.format(limit=self._limit()))
        return self._steps(identity, args)

    def _grant(
        self,
        args: Mapping[str, Any],
        runtime: object,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
        config: RunnableConfig,
    ) -> bool:
        if self.budget is not None:
            return self.budget.try_acquire()
        state = getattr(runtime, "state", None)
        messages = (
            cast("Mapping[str, object]", state).get("messages")
            if isinstance(state, Mapping)
            else getattr(state, "messages", None)
        )
        if isinstance(messages, list):
            verdict = self.state_budget.grant(
                messages,
                name=self.name,
                call_id=getattr(runtime, "tool_call_id", None),
                args=args,
                thread=(config.get("configurable") or {}).get("thread_id"),
            )
            if verdict is not None:
                return verdict
        parent = run_manager.parent_run_id if run_manager is not None else None
        if parent is None:
            return True  # a standalone call is a turn of its own
        return self.run_budgets.try_acquire(parent)

    def _limit(self) -> int:
        return self.budget.limit if self.budget is not None else self.state_budget.limit

    # -- driving the body -----------------------------------------------------------------------

    def _failed(self, exc: Exception) -> ToolException:
        report_failure(exc, action=self.name, on_error=self.memory.config.recall.on_error)
        return ToolException(TOOL_FAILED_MESSAGE.format(tool=self.name, error=type(exc).__name__))

    def _breaker(self) -> StoreBreaker | None:
        """The memory's store breaker; a call while it is open fails at once."""
        breaker = getattr(self.memory, "_store_breaker", None)
        if not isinstance(breaker, StoreBreaker):
            return None
        if breaker.remaining() > 0:
            logger.info("%s skipped: the memory store did not answer in time", self.name)
            raise ToolException(
                TOOL_FAILED_MESSAGE.format(
                    tool=self.name,
                    error=f"the memory store did not answer within {breaker.waited():.0f} s",
                )
            )
        return breaker

    def _drive(self, steps: _Steps) -> ToolOutput:
        try:
            request = next(steps)
            while True:
                method = getattr(self.memory, request.method)
                breaker = self._breaker()
                started = time.monotonic()
                try:
                    reply = method(*request.args, **request.kwargs)
                except Exception as exc:  # the store failing must not end the agent
                    if breaker is not None:
                        breaker.record(started=started, answered=False)
                    raise self._failed(exc) from exc
                if breaker is not None:
                    breaker.record(started=started, answered=True)
                request = steps.send(reply)
        except StopIteration as done:
            return cast("ToolOutput", done.value)

    async def _adrive(self, steps: _Steps) -> ToolOutput:
        try:
            request = next(steps)
            while True:
                method = getattr(self.memory, "a" + request.method)
                breaker = self._breaker()
                started = time.monotonic()
                try:
                    reply = await method(*request.args, **request.kwargs)
                except Exception as exc:
                    if breaker is not None:
                        breaker.record(started=started, answered=False)
                    raise self._failed(exc) from exc
                if breaker is not None:
                    breaker.record(started=started, answered=True)
                request = steps.send(reply)
        except StopIteration as done:
            return cast("ToolOutput", done.value)

    @override
    def invoke(
        self,
        input: str | dict[str, Any] | ToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the tool (a tool call without an id is answered with a `ToolMessage` too)."""
        return super().invoke(_with_call_id(input), config, **kwargs)

    @override
    async def ainvoke(
        self,
        input: str | dict[str, Any] | ToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        """Async version of `invoke`."""
        return await super().ainvoke(_with_call_id(input), config, **kwargs)


class _MemorySearchTool(_MemoryToolBase):
    name: str = MEMORY_SEARCH_TOOL
    args_schema: type[BaseModel] = MemorySearchInput
    capped: bool = Field(default=True, exclude=True)

    @override
    def _steps(self, identity: TurnIdentity, args: Mapping[str, Any]) -> _Steps:
        hits: list[MemoryHit] = list(
            (
                yield _StoreCall(
                    "search_memories",
                    (args["query"],),
                    {
                        "limit": args["limit"],
                        "type": args["type"],
                        "scene": args["scene"],
                        "user_id": identity.scope.user_id,
                        "agent_id": identity.scope.agent_id,
                    },
                )
            )
        )
        logger.debug("%s %r -> %d hits", self.name, args["query"], len(hits))
        return render_memory_hits(hits), _memory_artifact(hits)

    @override
    def _run(
        self,
        query: str,
        limit: int = 5,
        type: str | None = None,
        scene: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "type": type, "scene": scene}
        return self._drive(self._start(args, runtime, run_manager))

    @override
    async def _arun(
        self,
        query: str,
        limit: int = 5,
        type: str | None = None,
        scene: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "type": type, "scene": scene}
        return await self._adrive(self._start(args, runtime, run_manager))


class _ConversationSearchTool(_MemoryToolBase):
    name: str = CONVERSATION_SEARCH_TOOL
    args_schema: type[BaseModel] = ConversationSearchInput
    capped: bool = Field(default=True, exclude=True)

    @override
    def _steps(self, identity: TurnIdentity, args: Mapping[str, Any]) -> _Steps:
        hits: list[MessageHit] = list(
            (
                yield _StoreCall(
                    "search_conversations",
                    (args["query"],),
                    {
                        "limit": args["limit"],
                        "session_key": args["session_key"],
                        "user_id": identity.scope.user_id,
                        "agent_id": identity.scope.agent_id,
                    },
                )
            )
        )
        logger.debug("%s %r -> %d hits", self.name, args["query"], len(hits))
        text = render_message_hits(hits, self.memory.config.tzinfo())
        return text, _message_artifact(hits)

    @override
    def _run(
        self,
        query: str,
        limit: int = 5,
        session_key: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "session_key": session_key}
        return self._drive(self._start(args, runtime, run_manager))

    @override
    async def _arun(
        self,
        query: str,
        limit: int = 5,
        session_key: str | None = None,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "session_key": session_key}
        return await self._adrive(self._start(args, runtime, run_manager))


class _ReadSceneTool(_MemoryToolBase):
    name: str = READ_SCENE_TOOL
    args_schema: type[BaseModel] = ReadSceneInput

    @override
    def _steps(self, identity: TurnIdentity, args: Mapping[str, Any]) -> _Steps:
        owner = {"user_id": identity.scope.user_id, "agent_id": identity.scope.agent_id}
        scenes: list[SceneInfo] = list((yield _StoreCall("list_scenes", (), owner)))
        wanted = str(args["name"]).strip()
        picked = next((s.name for s in scenes if s.name == wanted), None)
        if picked is None:  # only the scope's own scenes, by exact name: no paths, no `..`
            raise _unknown_scene(wanted, scenes)
        block: SceneBlock | None = yield _StoreCall("read_scene", (picked,), owner)
        if block is None:  # deleted between listing and reading
            raise _unknown_scene(picked, [])
        logger.debug("%s %r -> %d chars", self.name, picked, len(block.body))
        return render_scene(block), _scene_artifact(block)

    @override
    def _run(
        self,
        name: str,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        return self._drive(self._start({"name": name}, runtime, run_manager))

    @override
    async def _arun(
        self,
        name: str,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        return await self._adrive(self._start({"name": name}, runtime, run_manager))


def create_memory_tools(
    memory: TdaiMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    budget: ToolBudget | None = None,
    resolver: ScopeResolver | None = None,
    manage_budget: ToolBudget | None = None,
) -> list[BaseTool]:
    """Build `tdai_memory_search`, `tdai_conversation_search` and `tdai_read_scene`.

    With `tools.manage_memory` set in the store's config, the optional agent-writable
    `tdai_manage_memory` (memory formation, `langchain_tdai_recall.formation.tool`) comes
    fourth; its calls have their own per-turn cap, `tools.max_manage_calls_per_turn`.

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
        manage_budget: Like `budget`, for `tdai_manage_memory` (when it is registered).

    Returns:
        The three tools, always in this order, then `tdai_manage_memory` when enabled.

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
    for field_name, given in (("budget", budget), ("manage_budget", manage_budget)):
        if given is not None and not isinstance(cast("object", given), ToolBudget):
            msg = f"{field_name} must be a ToolBudget, got {type(given).__name__}"
            raise ConfigError(msg)
    limit = memory.config.tools.max_calls_per_turn if budget is None else budget.limit
    scopes = resolver or ScopeResolver.for_memory(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        session_key=session_key,
        require_user_id=require_user_id,
    )
    shared: dict[str, Any] = {
        "memory": memory,
        "resolver": scopes,
        "budget": budget,
        "state_budget": search_budget(limit),
        "run_budgets": RunBudgets(limit),
    }
    tools: list[BaseTool] = [
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
    if memory.config.tools.manage_memory:
        from langchain_tdai_recall.formation.tool import build_manage_tool  # noqa: PLC0415

        tools.append(
            build_manage_tool(
                memory,
                resolver=scopes,
                budget=manage_budget,
                validation_handler=_validation_handler(MANAGE_MEMORY_TOOL),
            )
        )
    return tools
