"""A scripted, deterministic chat model with tool calling, for tests, notebooks and users' tests."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr
from typing_extensions import override

__all__ = ["FakeToolCallingChatModel", "ScriptStep"]

ScriptStep: TypeAlias = (
    AIMessage
    | str
    | list[dict[str, Any]]
    | Callable[[list[BaseMessage]], "AIMessage | str | list[dict[str, Any]]"]
)
"""One scripted reply.

- `str`: a final answer with that text.
- `list` of `{"name": ..., "args": {...}}` (optional `"id"`): one message calling those tools,
  in that order (parallel tool calls). Ids default to `call_<n>`, numbered per model.
- `AIMessage`: returned as is.
- a callable: called with the messages the model received (system message first); it returns
  any of the above.
"""

_DEFAULT_REPLY: Final = "OK"


class FakeToolCallingChatModel(BaseChatModel):
    """A chat model that replays a script, supports `bind_tools` and records every request.

    Each call consumes the next `script` step. When the script is exhausted the model answers
    `default_reply` (or raises `IndexError` when it is `None`). Every request is recorded in
    `requests` (the messages as the model saw them, system message first) and the tool names of
    each call in `tool_names`, so tests can assert on exactly what the model was sent. Safe to
    call from several threads; steps are handed out in call order.

    Example:
        ```python
        from langchain_tdai_recall.testing import FakeToolCallingChatModel

        model = FakeToolCallingChatModel(
            script=[[{"name": "tdai_memory_search", "args": {"query": "seat"}}], "Window seat."]
        )
        first = model.invoke("Which seat do I like?")
        assert first.tool_calls[0]["name"] == "tdai_memory_search"
        assert model.invoke("...").content == "Window seat."
        ```
    """

    __test__ = False

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Any] = Field(default_factory=list)
    """The replies, in order (see `ScriptStep`)."""
    default_reply: str | None = _DEFAULT_REPLY
    """Answer once the script is used up; `None` raises `IndexError` instead."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _position: int = PrivateAttr(default=0)
    _ids: Any = PrivateAttr(default_factory=lambda: itertools.count(1))
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _tool_names: list[list[str]] = PrivateAttr(default_factory=list)

    @property
    @override
    def _llm_type(self) -> str:
        return "fake-tool-calling-chat-model"

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """The messages of every call so far, in call order."""
        return list(self._requests)

    @property
    def tool_names(self) -> list[list[str]]:
        """Names of the tools bound for every call so far."""
        return list(self._tool_names)

    def reset(self) -> None:
        """Start the script again and forget the recorded requests."""
        with self._lock:
            self._position = 0
            self._ids = itertools.count(1)
            self._requests.clear()
            self._tool_names.clear()

    @override
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; their OpenAI-format schemas are passed to every call (and recorded)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _next_step(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> Any:
        with self._lock:
            self._requests.append(list(messages))
            self._tool_names.append([t["function"]["name"] for t in tools if "function" in t])
            position = self._position
            self._position += 1
        if position < len(self.script):
            return self.script[position]
        if self.default_reply is None:
            msg = f"FakeToolCallingChatModel script exhausted after {len(self.script)} steps"
            raise IndexError(msg)
        return self.default_reply

    def _to_message(self, step: Any, messages: list[BaseMessage]) -> AIMessage:
        if callable(step) and not isinstance(step, AIMessage):
            step = step(messages)
        if isinstance(step, AIMessage):
            return step
        if isinstance(step, str):
            return AIMessage(content=step)
        if isinstance(step, list):
            calls: list[ToolCall] = []
            for spec in step:
                with self._lock:
                    number = next(self._ids)
                calls.append(
                    ToolCall(
                        name=spec["name"],
                        args=dict(spec.get("args", {})),
                        id=spec.get("id") or f"call_{number}",
                        type="tool_call",
                    )
                )
            return AIMessage(content="", tool_calls=calls)
        msg = f"unsupported script step: {step!r}"
        raise TypeError(msg)

    @override
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        step = self._next_step(messages, list(kwargs.get("tools") or []))
        message = self._to_message(step, messages)
        return ChatResult(generations=[ChatGeneration(message=message)])
