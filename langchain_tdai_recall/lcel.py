"""Recall for existing chains: `memory.as_runnable()` and `memory.wrap_model(model)`.

`as_runnable()` is a step to put between a prompt and a model:
`prompt | memory.as_runnable() | model`. It takes a `PromptValue`, a list of messages or a
string and returns the messages with the same injection the agent middleware makes: the
persona/scene/tools block appended to the system message, the recalled memories in front of the
latest human message. The scope comes from `config["configurable"]` (`user_id`, `agent_id`,
`session_key`, `thread_id`) at invoke time, else from the options given here.

`wrap_model(model)` is for constructors that call `bind_tools` themselves, such as
`create_tool_calling_agent`: the wrapper's `bind_tools(...)` (and its own `invoke`/`stream`)
run the recall step before every model call.

L0 capture (the conversation memory formation forms memories from) needs the turn's answer,
which only the model call sees. The model `wrap_model` returns therefore records each turn once
it is answered, as the agent middleware does: the latest human message as typed and the answer,
handed to the store's background writer (`capture.enabled`, or `capture=` here). An answer that
asks for tools does not end the turn and is not recorded, so an agent loop records its turn
once, with its final answer. The `as_runnable()` step runs before the model and never sees an
answer, so it records nothing: use `wrap_model`, or call `memory.record_messages` after the
chain.

A thin adapter over `langchain_tdai_recall._turn` (identity, recall under the failure policy,
injection). It imports `langchain_core` only, never `langchain.agents` or `langgraph`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForChainRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.outputs import ChatResult
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field
from typing_extensions import override

from langchain_tdai_recall._turn import (
    MEMORY_TOOL_NAMES,
    ScopeResolver,
    TurnIdentity,
    arun_recall,
    capture_turn,
    inject_messages,
    latest_human_index,
    message_text,
    run_recall,
)
from langchain_tdai_recall.errors import ConfigError

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = ["RecallChatModel", "RecallRunnable", "create_recall_runnable", "wrap_model"]

logger = logging.getLogger(__name__)

RecallInput = PromptValue | str | Sequence[Any]
"""What the recall step accepts: a prompt value, a string (one human message) or messages."""


def _to_messages(value: Any) -> list[BaseMessage]:
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, str):
        return [HumanMessage(content=value)]
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        try:
            return convert_to_messages(value)
        except (ValueError, TypeError, NotImplementedError):  # langchain's words for a bad item
            kinds = sorted({type(item).__name__ for item in value})
            msg = (
                "the recall step takes a list of messages (BaseMessage, (role, text) pairs or "
                f"dicts with role and content), got a list of {', '.join(kinds)}"
            )
            raise ConfigError(msg) from None
    msg = (
        "the recall step takes a PromptValue, a string or a list of messages, "
        f"got {type(value).__name__}"
        + (" (decode bytes to str first)" if isinstance(value, bytes | bytearray) else "")
    )
    raise ConfigError(msg)


class RecallRunnable(Runnable[RecallInput, list[BaseMessage]]):
    """The recall step of an LCEL chain; see `create_recall_runnable`."""

    def __init__(
        self,
        memory: MemoryHost,
        resolver: ScopeResolver,
        *,
        tools_guide: bool | tuple[str, ...] = False,
    ) -> None:
        self.memory = memory
        self.resolver = resolver
        self.tools_guide = tools_guide

    def with_tools_guide(self, tools_guide: bool | tuple[str, ...] = True) -> RecallRunnable:
        """The same step, writing the memory-tools guide into the system context or not."""
        return RecallRunnable(self.memory, self.resolver, tools_guide=tools_guide)

    @property
    @override
    def InputType(self) -> Any:
        return RecallInput

    @property
    @override
    def OutputType(self) -> Any:
        return list[BaseMessage]

    def _plan(
        self, value: object, config: RunnableConfig
    ) -> tuple[list[BaseMessage], TurnIdentity, str, str | None]:
        """(messages, identity, the turn's human text, the app's system prompt text)."""
        messages = _to_messages(value)
        identity = self.resolver.resolve(None, config.get("configurable"))
        index = latest_human_index(messages)
        system = next((m for m in messages if isinstance(m, SystemMessage)), None)
        human = message_text(messages[index] if index is not None else None)
        return messages, identity, human, message_text(system) if system else None

    def _transform(
        self, value: RecallInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> list[BaseMessage]:
        messages, identity, text, system = self._plan(value, config)
        outcome = run_recall(
            self.memory,
            text,
            identity,
            system_prompt=system,
            tools_guide=self.tools_guide,
            config=config,
        )
        return inject_messages(messages, outcome.result)

    async def _atransform(
        self,
        value: RecallInput,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> list[BaseMessage]:
        messages, identity, text, system = self._plan(value, config)
        outcome = await arun_recall(
            self.memory,
            text,
            identity,
            system_prompt=system,
            tools_guide=self.tools_guide,
            config=config,
        )
        return inject_messages(messages, outcome.result)

    @override
    def invoke(
        self, input: RecallInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Return the messages with this turn's recall injected."""
        return self._call_with_config(self._transform, input, config, run_type="chain")

    @override
    async def ainvoke(
        self, input: RecallInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Async version of `invoke`."""
        return await self._acall_with_config(self._atransform, input, config, run_type="chain")


def create_recall_runnable(
    memory: MemoryHost,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    tools_guide: bool = False,
) -> RecallRunnable:
    """Build the recall step behind `TdaiMemory.as_runnable()`.

    Args:
        memory: The store to recall from.
        user_id: User when `configurable` names none.
        agent_id: Agent when `configurable` names none.
        session_key: Session when `configurable` names none.
        require_user_id: Raise `ScopeError` instead of using the default user.
        tools_guide: Write the memory-tools guide into the system context. Off by default: a
            plain chain's model does not have the memory tools (`wrap_model` turns it on when
            they are bound).

    Returns:
        A runnable from a `PromptValue`, messages or a string to the injected messages.

    Example:
        ```python
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

        memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64))
        prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])
        chain = prompt | memory.as_runnable() | FakeToolCallingChatModel(script=["Hi"])
        chain.invoke({"q": "Hello"}, config={"configurable": {"user_id": "alice"}})
        ```
    """
    resolver = ScopeResolver.for_memory(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        session_key=session_key,
        require_user_id=require_user_id,
    )
    return RecallRunnable(memory, resolver, tools_guide=tools_guide)


def _turn_text(value: object) -> str:
    """The text of the turn's human message in a model input (empty when there is none)."""
    try:
        messages = _to_messages(value)
    except (ConfigError, ValueError, TypeError, NotImplementedError):
        return ""
    index = latest_human_index(messages)
    return message_text(messages[index] if index is not None else None)


def _final_text(answer: object) -> str | None:
    """The text of a model answer that ends the turn; `None` when it asks for tools."""
    if not isinstance(answer, AIMessage):
        return None
    if answer.tool_calls or (isinstance(answer, AIMessageChunk) and answer.tool_call_chunks):
        return None
    return message_text(answer)


class _TurnCapture:
    """Records a turn to L0 once the wrapped model answered it (see the module docstring)."""

    def __init__(self, memory: MemoryHost, resolver: ScopeResolver) -> None:
        self.memory = memory
        self.resolver = resolver

    def record(self, value: object, answer: object, config: RunnableConfig | None) -> None:
        """Hand the turn to L0 capture when `answer` ends it; never raises."""
        text = _final_text(answer)
        if text is None:
            return
        try:
            identity = self.resolver.resolve(None, ensure_config(config).get("configurable"))
        except Exception as exc:  # the recall step of this call resolved the same scope
            logger.warning("L0 capture skipped: %s", type(exc).__name__)
            return
        capture_turn(self.memory, identity, human=_turn_text(value), answer=text)


class _CapturedCall(Runnable[Any, Any]):
    """`inner` (the recall step, then the model), then L0 capture of the answer."""

    def __init__(self, inner: Runnable[Any, Any], capture: _TurnCapture) -> None:
        self.inner = inner
        self.capture = capture

    @override
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        out = self.inner.invoke(input, config, **kwargs)
        self.capture.record(input, out, config)
        return out

    @override
    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        out = await self.inner.ainvoke(input, config, **kwargs)
        self.capture.record(input, out, config)
        return out

    @override
    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        final: Any = None
        for chunk in self.inner.stream(input, config, **kwargs):
            final = chunk if final is None else final + chunk
            yield chunk
        self.capture.record(input, final, config)

    @override
    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        final: Any = None
        async for chunk in self.inner.astream(input, config, **kwargs):
            final = chunk if final is None else final + chunk
            yield chunk
        self.capture.record(input, final, config)


class RecallChatModel(BaseChatModel):
    """A chat model that runs the recall step before every call; see `wrap_model`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: BaseChatModel
    """The wrapped chat model."""
    recall: RecallRunnable = Field(exclude=True)
    """The recall step run before every call."""
    capture: bool = Field(default=False, exclude=True)
    """Record each answered turn to L0 (see the module docstring)."""

    def _captured(self, runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
        if not self.capture:
            return runnable
        return _CapturedCall(runnable, _TurnCapture(self.recall.memory, self.recall.resolver))

    def _record(
        self, messages: list[BaseMessage], result: ChatResult, config: RunnableConfig
    ) -> None:
        if self.capture and result.generations:
            capture = _TurnCapture(self.recall.memory, self.recall.resolver)
            capture.record(messages, result.generations[0].message, config)

    @property
    @override
    def _llm_type(self) -> str:
        return "tdai-recall-wrapper"

    @property
    @override
    def _identifying_params(self) -> dict[str, Any]:
        return {"wrapped": self.model._llm_type}

    def _chain(
        self, stop: list[str] | None, kwargs: dict[str, Any]
    ) -> Runnable[RecallInput, BaseMessage]:
        if stop is not None:
            kwargs = {**kwargs, "stop": stop}
        model: Runnable[Any, BaseMessage] = self.model.bind(**kwargs) if kwargs else self.model
        return self._captured(self.recall | model)

    @override
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools to the wrapped model; the result injects recall before every call.

        The memory-tools guide goes into the system context when the memory tools are among
        `tools`.
        """
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        bound = self.model.bind_tools(tools, **kwargs)
        names = {getattr(t, "name", None) for t in tools}
        names |= {t.get("name") for t in tools if isinstance(t, dict)}
        recall = self.recall.with_tools_guide(
            tuple(sorted(str(n) for n in names & MEMORY_TOOL_NAMES)) or False
        )
        return cast("Runnable[LanguageModelInput, AIMessage]", self._captured(recall | bound))

    @override
    def with_structured_output(self, schema: Any, **kwargs: Any) -> Runnable[Any, Any]:
        """Structured output of the wrapped model, with recall injected first."""
        return self.recall | self.model.with_structured_output(schema, **kwargs)

    @override
    def invoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """Call the wrapped model with recall injected."""
        return cast("AIMessage", self._chain(stop, kwargs).invoke(input, config))

    @override
    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """Async version of `invoke`."""
        return cast("AIMessage", await self._chain(stop, kwargs).ainvoke(input, config))

    @override
    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """Stream the wrapped model with recall injected."""
        for chunk in self._chain(stop, kwargs).stream(input, config):
            yield cast("AIMessageChunk", chunk)

    @override
    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """Async version of `stream`."""
        async for chunk in self._chain(stop, kwargs).astream(input, config):
            yield cast("AIMessageChunk", chunk)

    @override
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        config = ensure_config()
        injected = self.recall.invoke(messages, config)
        result = self.model._generate(injected, stop=stop, run_manager=run_manager, **kwargs)
        self._record(messages, result, config)
        return result

    @override
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        config = ensure_config()
        injected = await self.recall.ainvoke(messages, config)
        result = await self.model._agenerate(injected, stop=stop, run_manager=run_manager, **kwargs)
        self._record(messages, result, config)
        return result


def wrap_model(
    memory: MemoryHost,
    model: BaseChatModel,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    capture: bool | None = None,
) -> RecallChatModel:
    """Wrap a chat model so that every call, and every `bind_tools(...)` result, recalls first.

    Each answer that ends a turn (it asks for no tool) records the turn to L0: the latest human
    message as typed and the answer, in the background, like the agent middleware.

    Args:
        memory: The store to recall from.
        model: The chat model to wrap.
        user_id: User when `configurable` names none (executors that pass no config need it).
        agent_id: Agent when `configurable` names none.
        session_key: Session when `configurable` names none.
        require_user_id: Raise `ScopeError` instead of using the default user.
        capture: Record answered turns to L0; `None` follows `capture.enabled`. Pass `False`
            when something else records the turns (`ExecutorMemory` does).

    Returns:
        The wrapped model.

    Raises:
        ConfigError: If `model` is not a chat model.
    """
    if not isinstance(cast("object", model), BaseChatModel):
        msg = f"wrap_model needs a LangChain chat model, got {type(model).__name__}"
        raise ConfigError(msg)
    if capture is not None and not isinstance(cast("object", capture), bool):
        msg = f"capture must be True, False or None, got {capture!r}"
        raise ConfigError(msg)
    recall = create_recall_runnable(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        session_key=session_key,
        require_user_id=require_user_id,
    )
    enabled = memory.config.capture.enabled if capture is None else capture
    return RecallChatModel(model=model, recall=recall, capture=enabled)
