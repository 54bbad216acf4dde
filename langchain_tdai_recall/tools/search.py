"""The three search tools: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`.

What the model sees of them lives here: names, descriptions, argument schemas and the result
text. Stored text in results is escaped like the injected prompt blocks, so a memory cannot open
or close a block or a role tag. The two search tools share a per-turn budget (`search_budget`);
`tools/__init__.py` builds them (`create_memory_tools`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Final, Literal

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import InjectedToolArg, ToolException
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import override

from langchain_tdai_recall._exchange.filters import compile_value_filter
from langchain_tdai_recall._exchange.metadata import memory_filter, time_bound
from langchain_tdai_recall._turn import (
    CONVERSATION_SEARCH_TOOL,
    MEMORY_SEARCH_TOOL,
    READ_SCENE_TOOL,
    StateBudget,
    TurnIdentity,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.prompt import escape_block_text, escape_inline, format_time
from langchain_tdai_recall.tools._base import (
    ToolOutput,
    _MemoryToolBase,
    _Steps,
    _StoreCall,
    _ToolInput,
)
from langchain_tdai_recall.types import MemoryHit, MessageHit, SceneBlock, SceneInfo

logger = logging.getLogger("langchain_tdai_recall.tools")

MAX_QUERY_CHARS: Final = 2000
"""Longest `query` the search tools accept, in code points (after trimming). A longer one is
refused with an "Invalid arguments" tool error before any search runs; a search query needs a
few key words, not a document."""

_MAX_LIMIT: Final = 20

_Scalar = str | int | float | bool | None


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
_MEMORY_SEARCH_ALONE: Final = _MEMORY_SEARCH_DESCRIPTION.replace(
    "tdai_memory_search and tdai_conversation_search share a budget of {limit} calls per turn",
    "It has a budget of {limit} calls per turn",
)
"""`tdai_memory_search` chosen without `tdai_conversation_search` (`names=` of the tools)."""
_CONVERSATION_SEARCH_ALONE: Final = _CONVERSATION_SEARCH_DESCRIPTION.replace(
    "Shares a budget of {limit} calls per turn with tdai_memory_search",
    "Has a budget of {limit} calls per turn",
)
"""`tdai_conversation_search` chosen without `tdai_memory_search`."""
_BUDGET_EXHAUSTED_ALONE: Final = (
    "Refused: the memory search budget for this turn is used up ({tool} has a budget of "
    "{{limit}} calls per turn). Do not call this tool again in this turn; answer now with the "
    "information you already have."
)
"""What a search tool chosen alone answers past its budget (`{tool}` filled in when built)."""
_READ_SCENE_DESCRIPTION: Final = (
    "Read one scene block in full: a Markdown summary of a recurring topic or situation in this "
    "user's history. Pass a scene name exactly as listed in the scene navigation of the system "
    "prompt; any other name is refused. Does not count against the search budget."
)


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
    metadata: dict[str, _Scalar | list[_Scalar] | dict[str, _Scalar | list[_Scalar]]] | None = (
        Field(
            default=None,
            description=(
                "Only memories whose metadata matches: each key with this exact value, or with an "
                'operator object such as {"$in": ["a", "b"]}, {"$gte": 3} or {"$ne": "x"} '
                "(operators: $eq $ne $gt $gte $lt $lte $in $nin; ISO dates compare as times)."
            ),
        )
    )
    created_after: str | None = Field(
        default=None,
        description="Only memories saved on or after this date (YYYY-MM-DD or ISO date-time).",
    )
    created_before: str | None = Field(
        default=None,
        description="Only memories saved on or before this date (YYYY-MM-DD or ISO date-time).",
    )
    active_after: str | None = Field(
        default=None,
        description="Only events happening (or ending) on or after this date (YYYY-MM-DD).",
    )
    active_before: str | None = Field(
        default=None,
        description="Only events happening (or starting) on or before this date (YYYY-MM-DD).",
    )

    _check_limit = field_validator("limit", mode="before")(_reject_bool)
    _check_query = field_validator("query", mode="before")(_strip_query)

    @field_validator("metadata", mode="before")
    @classmethod
    def _check_metadata(cls, value: object) -> object:
        # the filter language's own message first (it names the key, the value and the fix),
        # then the shape this schema takes, instead of a list of union errors
        try:
            compile_value_filter(value, field="metadata")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        for key, want in value.items() if isinstance(value, dict) else ():
            if isinstance(want, dict) and any(isinstance(v, dict) for v in want.values()):
                msg = (
                    f"metadata[{key!r}] nests an object ({want!r:.60}); give each key a value, a "
                    'list, or one operator object such as {"$in": [...]}'
                )
                raise ValueError(msg)
        return value

    @field_validator("created_after", "created_before", "active_after", "active_before")
    @classmethod
    def _check_time(cls, value: str | None, info: ValidationInfo) -> str | None:
        try:
            time_bound(str(info.field_name), value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _check_ranges(self) -> MemorySearchInput:
        # a range whose start is after its end is refused like any bad argument, so the
        # model is told to fix it instead of that the tool is unavailable
        try:
            memory_filter(
                created_after=self.created_after,
                created_before=self.created_before,
                active_after=self.active_after,
                active_before=self.active_before,
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self


_FILTER_ARGS: Final = (
    "metadata",
    "created_after",
    "created_before",
    "active_after",
    "active_before",
)
"""The optional filter arguments of `tdai_memory_search` (issue 16)."""


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
                        **{k: args.get(k) for k in _FILTER_ARGS},
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
        **filters: Any,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "type": type, "scene": scene, **filters}
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
        **filters: Any,
    ) -> ToolOutput:
        args = {"query": query, "limit": limit, "type": type, "scene": scene, **filters}
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
