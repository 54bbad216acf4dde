"""A scripted chat model that answers memory-formation calls, for tests, notebooks and users.

`ScriptedFormationModel` recognises which formation call it received (extraction,
consolidation, scenes, persona, and the rating of LangGraph-store items) from the
structured-output tool it was bound to (or, in prompt mode, from the schema named in the
instructions), reads the prompt's data sections back into plain Python values, and answers with
what a Python function returns for them. Defaults make it useful with no script at all: every
user message becomes one memory, consolidation adds, scenes are left alone, the persona lists
the memories it is shown, and every rated memory gets priority 50.

It speaks both ways a real model can: tool calls (when tools are bound and `tool_calling=True`)
or a JSON text reply. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, PrivateAttr
from typing_extensions import override

from langchain_tdai_recall.formation.prompts import parse_section

__all__ = [
    "ConsolidationRequest",
    "FormationCall",
    "FormationWindow",
    "PersonaRequest",
    "RatingRequest",
    "SceneRequest",
    "ScriptedFormationModel",
]

CallKind = Literal["extract", "consolidate", "scenes", "persona", "rate"]

_SCHEMAS: Final[dict[str, CallKind]] = {
    "ExtractionAnswer": "extract",
    "ConsolidationAnswer": "consolidate",
    "SceneAnswer": "scenes",
    "PersonaAnswer": "persona",
    "RatingAnswer": "rate",
}


@dataclass(frozen=True, slots=True)
class FormationWindow:
    """An extraction request as the script sees it."""

    messages: list[dict[str, Any]]
    """New messages: `id` (`m1`, …), `role`, `time`, `text`."""
    background: list[dict[str, Any]]
    """Earlier messages (`b1`, …), never to be extracted from."""
    system: str
    """The system prompt (to check the language or the timezone)."""


@dataclass(frozen=True, slots=True)
class ConsolidationRequest:
    """A consolidation request: stored candidates (`c1`, …) and new memories (`n1`, …)."""

    candidates: list[dict[str, Any]]
    new: list[dict[str, Any]]
    """Each with `candidates`: the aliases offered to it."""


@dataclass(frozen=True, slots=True)
class SceneRequest:
    """A scene request: new memories, scenes with full text, other scenes."""

    memories: list[dict[str, Any]]
    scenes: list[dict[str, Any]]
    others: list[dict[str, Any]]
    system: str


@dataclass(frozen=True, slots=True)
class PersonaRequest:
    """A persona request: the current persona, scenes and memories."""

    current: str
    scenes: list[dict[str, Any]]
    memories: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RatingRequest:
    """A rating request: memories other writers stored (`id` as `r1`, …, and `text`)."""

    memories: list[dict[str, Any]]
    system: str


@dataclass(frozen=True, slots=True)
class FormationCall:
    """One recorded call."""

    kind: CallKind
    system: str
    user: str
    answer: Any = field(repr=False)
    tools: tuple[str, ...] = ()
    """Names of the tools bound for the call (the structured-output schema, if any)."""

    @property
    def prompt_chars(self) -> int:
        """Characters of the system and user prompt."""
        return len(self.system) + len(self.user)


def _default_extract(window: FormationWindow) -> list[dict[str, Any]]:
    return [
        {"content": m["text"], "type": "episodic", "priority": 50, "source_ids": [m["id"]]}
        for m in window.messages
        if m.get("role") == "user"
    ]


def _default_consolidate(request: ConsolidationRequest) -> list[dict[str, Any]]:
    return [{"new_id": n["id"], "action": "add"} for n in request.new]


def _default_scenes(request: SceneRequest) -> list[dict[str, Any]]:
    del request
    return []


def _default_rate(request: RatingRequest) -> list[dict[str, Any]]:
    return [{"id": m["id"], "priority": 50, "type": "episodic"} for m in request.memories]


def _default_persona(request: PersonaRequest) -> dict[str, Any]:
    lines = sorted(f"- {m['text']}" for m in request.memories[:10])
    return {"action": "rewrite", "persona": "# User profile\n\n" + "\n".join(lines)}


class ScriptedFormationModel(BaseChatModel):
    """A chat model that answers formation calls with Python functions (offline, deterministic).

    Each handler receives the request as plain values and returns the answer: a list (the
    memories, decisions or edits) or a dict (the whole answer object). A handler may also
    return a `str` (sent back verbatim as the reply text, for malformed or truncated answers),
    an `AIMessage` (returned as is), or raise (a failing model).

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel

        model = ScriptedFormationModel(
            extract=lambda window: [
                {
                    "content": "The user is vegetarian.",
                    "type": "persona",
                    "priority": 80,
                    "source_ids": [window.messages[0]["id"]],
                }
            ]
        )
        with TdaiMemory.open(None, embeddings=HashEmbeddings(), extraction_model=model) as memory:
            memory.record_messages(
                [{"role": "user", "content": "I don't eat meat."}], session_key="s1"
            )
            memory.extract()
            assert [m.content for m in memory.list_memories()] == ["The user is vegetarian."]
        ```
    """

    __test__ = False

    model_config = ConfigDict(arbitrary_types_allowed=True)

    extract: Callable[[FormationWindow], Any] | None = None
    """Answers extraction calls (default: one memory per user message)."""
    consolidate: Callable[[ConsolidationRequest], Any] | None = None
    """Answers consolidation calls (default: add everything)."""
    scenes: Callable[[SceneRequest], Any] | None = None
    """Answers scene calls (default: no edits)."""
    persona: Callable[[PersonaRequest], Any] | None = None
    """Answers persona calls (default: the memories it is shown, one line each)."""
    rate: Callable[[RatingRequest], Any] | None = None
    """Answers rating calls for LangGraph-store items (default: priority 50, `episodic`)."""
    tool_calling: bool = True
    """Answer through tool calls when tools are bound; `False` answers with JSON text even
    then (as some models do). Without bound tools (prompt mode) it always answers with text."""
    delay_s: float = 0.0
    """Sleep before every answer (for slow-model tests)."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: list[FormationCall] = PrivateAttr(default_factory=list)

    @property
    @override
    def _llm_type(self) -> str:
        return "scripted-formation-model"

    @property
    def calls(self) -> list[FormationCall]:
        """Every call so far, in order."""
        with self._lock:
            return list(self._calls)

    def calls_of(self, kind: CallKind) -> list[FormationCall]:
        """The calls of one kind."""
        return [c for c in self.calls if c.kind == kind]

    def reset(self) -> None:
        """Forget the recorded calls."""
        with self._lock:
            self._calls.clear()

    @override
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (their OpenAI-format schemas are passed to every call)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, **kwargs)

    def _kind(self, system: str, tools: list[dict[str, Any]]) -> tuple[CallKind, str]:
        for tool in tools:
            name = str(tool.get("function", {}).get("name", ""))
            if name in _SCHEMAS:
                return _SCHEMAS[name], name
        for name, kind in _SCHEMAS.items():
            if f"`{name}`" in system:
                return kind, name
        msg = "ScriptedFormationModel received a request that is not a formation call"
        raise ValueError(msg)

    def _answer(self, kind: CallKind, system: str, user: str) -> Any:
        if kind == "extract":
            return (self.extract or _default_extract)(
                FormationWindow(
                    parse_section(user, "new_messages"), parse_section(user, "background"), system
                )
            )
        if kind == "consolidate":
            return (self.consolidate or _default_consolidate)(
                ConsolidationRequest(
                    parse_section(user, "candidates"), parse_section(user, "new_memories")
                )
            )
        if kind == "scenes":
            return (self.scenes or _default_scenes)(
                SceneRequest(
                    parse_section(user, "memories"),
                    parse_section(user, "scenes"),
                    parse_section(user, "other_scenes"),
                    system,
                )
            )
        if kind == "rate":
            return (self.rate or _default_rate)(
                RatingRequest(parse_section(user, "memories"), system)
            )
        current = parse_section(user, "current_persona")
        return (self.persona or _default_persona)(
            PersonaRequest(
                str(current[0]["text"]) if current else "",
                parse_section(user, "scenes"),
                parse_section(user, "memories"),
            )
        )

    @staticmethod
    def _wrap(kind: CallKind, answer: Any) -> Any:
        if isinstance(answer, list):
            key = {
                "extract": "memories",
                "consolidate": "decisions",
                "scenes": "edits",
                "persona": "edits",
                "rate": "ratings",
            }[kind]
            return {key: answer}
        return answer

    @override
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay_s:
            time.sleep(self.delay_s)
        system = next((str(m.content) for m in messages if m.type == "system"), "")
        user = next((str(m.content) for m in reversed(messages) if m.type == "human"), "")
        tools = list(kwargs.get("tools") or [])
        kind, schema = self._kind(system, tools)
        answer = self._wrap(kind, self._answer(kind, system, user))
        names = tuple(str(t.get("function", {}).get("name", "")) for t in tools)
        with self._lock:
            self._calls.append(FormationCall(kind, system, user, answer, names))
        if isinstance(answer, AIMessage):
            message = answer
        elif isinstance(answer, str):
            message = AIMessage(content=answer)
        else:
            text = json.dumps(answer, ensure_ascii=False)
            usage = {
                "input_tokens": (len(system) + len(user)) // 4,
                "output_tokens": len(text) // 4,
                "total_tokens": (len(system) + len(user) + len(text)) // 4,
            }
            if self.tool_calling and kwargs.get("tools"):
                message = AIMessage(
                    content="",
                    tool_calls=[ToolCall(name=schema, args=answer, id=f"call_{len(self._calls)}")],
                    usage_metadata=usage,
                )
            else:
                message = AIMessage(content=text, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])
