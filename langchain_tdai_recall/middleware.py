"""`TdaiRecallMiddleware`: automatic memory recall, memory tools and L0 capture for agents.

A thin adapter from LangChain's agent hooks to `langchain_tdai_recall._turn`, where identity,
recall, injection, the search budget, capture and the turn report are written once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ResponseT,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import ensure_config
from langgraph.typing import ContextT
from typing_extensions import override

from langchain_tdai_recall._turn import (
    TURN_EVENT,
    OnTurn,
    ScopeResolver,
    TurnCache,
    TurnEvent,
    TurnIdentity,
    TurnMemory,
    TurnRecall,
    aemit_turn,
    append_system_context,
    arun_recall,
    capture_turn,
    check_tool_names,
    emit_turn,
    final_answer,
    inject_recall,
    latest_human_index,
    message_text,
    prepend_human_context,
    run_recall,
    turn_event,
    turn_key,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.tools import create_memory_tools, search_budget

if TYPE_CHECKING:
    from langgraph.runtime import Runtime

    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = [
    "TURN_EVENT",
    "OnTurn",
    "TdaiRecallMiddleware",
    "TdaiRecallState",
    "TurnEvent",
    "TurnMemory",
    "append_system_context",
    "inject_recall",
    "prepend_human_context",
]

logger = logging.getLogger(__name__)


class TdaiRecallState(AgentState[ResponseT]):
    """Agent state field of `TdaiRecallMiddleware` (private: not in the agent's input/output).

    The turn's recall itself is never part of the state, so it never reaches a checkpoint, a
    `stream_mode="updates"`/`"values"` chunk or an `on_chain_*` event.
    """

    tdai_captured: NotRequired[Annotated[str | None, PrivateStateAttr]]
    """Key of the last human message recorded to L0, so a resumed turn is not recorded twice."""


@dataclass(frozen=True, slots=True)
class _Turn:
    """Where the current turn stands, computed from the state and the run (no I/O)."""

    messages: list[BaseMessage]
    human: BaseMessage | None
    start: int
    """Index of the first message after the turn's human message."""
    human_key: str
    identity: TurnIdentity
    cache_key: Hashable


def _binds_tools(model: object) -> bool:
    """Whether the model implements `bind_tools` (the base chat model only raises)."""
    method = getattr(type(model), "bind_tools", None)
    return method is not None and method is not BaseChatModel.bind_tools


def _no_bind_tools_message(model: object) -> str:
    """For the developer: the model cannot take the memory tools, and the two ways out."""
    return (
        f"{type(model).__name__} does not implement bind_tools, so it cannot be given the memory "
        "tools that memory.middleware() registers; use memory.middleware(tools=False) to recall "
        "without the tools, or a chat model that supports tool calling (in tests: "
        "langchain_tdai_recall.testing.FakeToolCallingChatModel)"
    )


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

    The injection is applied with `ModelRequest.override` only, and the recall is kept in a
    per-run cache inside the middleware, keyed by thread, identity and turn: the agent state,
    checkpoints, streamed chunks and `on_chain_*` events never contain it. The middleware
    registers `tdai_memory_search`, `tdai_conversation_search` and `tdai_read_scene`; the tools
    enforce their shared per-turn budget by the position of each call in the turn, so every
    refused call gets an error `ToolMessage` in call order. After the turn it hands the human
    text (as typed) and the final answer to L0 capture when capture is on (in the background:
    the answer is never delayed), emits the `tdai_agent_turn` custom event and calls `on_turn`.

    The tools are registered when `tools.enabled` in the store's config, with the budget
    `tools.max_calls_per_turn` (the tools guide in the system prompt states the same number). A
    model without `bind_tools` (such as `GenericFakeChatModel`) cannot be given them: pass
    `tools=False`, which registers no tools and writes no tools guide; with the tools on, such a
    model gets a `ConfigError` naming that fix on its first call.

    Scope: `runtime.context` (`user_id`, `agent_id`, `session_key`), else
    `config["configurable"]` (`user_id`, `agent_id`, `session_key`, then `thread_id`), else the
    constructor arguments, else the store's default user.

    Failure policy (the package's one policy, see `langchain_tdai_recall._turn`): recall that
    fails or times out injects nothing and logs a warning; the agent carries on
    (`recall.on_error="raise"` in the store's config raises instead). A failing L0 capture,
    event handler or `on_turn` callback is logged and never ends the turn. An invalid scope
    always raises `ScopeError`, because falling back to another scope would mix users.

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
        memory: MemoryHost,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
        capture: bool | None = None,
        on_turn: OnTurn | None = None,
        tools: bool | Sequence[str] = True,
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
            tools: `False` registers no memory tools and writes no tools guide, for a model
                without `bind_tools`; `True` registers them when `tools.enabled`; a list of
                tool names registers only those (beside LangMem's tools, for example
                `["tdai_conversation_search", "tdai_read_scene"]`), and the tools guide
                names only them.

        Raises:
            ConfigError: If an argument is invalid (`ScopeError` for a bad id).
        """
        super().__init__()
        if on_turn is not None and not callable(cast("object", on_turn)):
            msg = f"on_turn must be callable, got {type(on_turn).__name__}"
            raise ConfigError(msg)
        names = (
            None
            if tools is True
            else ()
            if tools is False
            else check_tool_names(
                tools, field="tools", accepts="True, False or a list of memory tool names"
            )
        )
        config = memory.config
        self.memory: Final = memory
        self._resolver = ScopeResolver.for_memory(
            memory,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
        )
        # The tools and their budget follow the store's config, like the tools guide that recall
        # puts in the system prompt, so the prompt never promises something the tools do not do.
        enabled = names != () and config.tools.enabled
        self.tools = (
            create_memory_tools(memory, resolver=self._resolver, names=names) if enabled else []
        )
        self._guide: bool | tuple[str, ...] = tuple(t.name for t in self.tools) or False
        self.max_calls_per_turn: Final = config.tools.max_calls_per_turn
        self.capture: Final = config.capture.enabled if capture is None else capture
        self.on_turn: Final = on_turn
        self._budget = search_budget(self.max_calls_per_turn)
        self._recalls = TurnCache[TurnRecall]()

    def _locate(self, state: Mapping[str, Any], runtime: object) -> _Turn:
        messages: list[BaseMessage] = list(state.get("messages", []))
        index = latest_human_index(messages)
        human = messages[index] if index is not None else None
        configurable = ensure_config().get("configurable") or {}
        identity = self._resolver.resolve(getattr(runtime, "context", None), configurable)
        key = turn_key(human)
        return _Turn(
            messages=messages,
            human=human,
            start=index + 1 if index is not None else 0,
            human_key=key,
            identity=identity,
            cache_key=(repr(configurable.get("thread_id")), identity, key),
        )

    # -- wrap_model_call: recall once per turn, inject the same bytes into every model call -----

    def _cached(self, request: ModelRequest[ContextT]) -> tuple[_Turn, TurnRecall | None]:
        if self.tools and not _binds_tools(request.model):
            raise ConfigError(_no_bind_tools_message(request.model))
        turn = self._locate(request.state, request.runtime)
        return turn, self._recalls.get(turn.cache_key)

    def _recall(self, request: ModelRequest[ContextT]) -> TurnRecall:
        """This turn's recall: made on the turn's first model call, reused by the others."""
        turn, recall = self._cached(request)
        if recall is None:
            outcome = run_recall(
                self.memory,
                message_text(turn.human),
                turn.identity,
                system_prompt=message_text(request.system_message),
                tools_guide=self._guide,
            )
            recall = TurnRecall(turn.identity, outcome)
            self._recalls.put(turn.cache_key, recall)
        return recall

    async def _arecall(self, request: ModelRequest[ContextT]) -> TurnRecall:
        turn, recall = self._cached(request)
        if recall is None:
            outcome = await arun_recall(
                self.memory,
                message_text(turn.human),
                turn.identity,
                system_prompt=message_text(request.system_message),
                tools_guide=self._guide,
            )
            recall = TurnRecall(turn.identity, outcome)
            self._recalls.put(turn.cache_key, recall)
        return recall

    @staticmethod
    def _inject(request: ModelRequest[ContextT], recall: TurnRecall) -> ModelRequest[ContextT]:
        if recall.outcome.result is None:
            return request
        system, messages = inject_recall(
            request.system_message, request.messages, recall.outcome.result
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
        """Call the model with this turn's recall injected (recalling on the turn's first call)."""
        return handler(self._inject(request, self._recall(request)))

    @override
    async def awrap_model_call(
        self,
        request: ModelRequest[ContextT],
        handler: Callable[[ModelRequest[ContextT]], Awaitable[ModelResponse[ResponseT]]],
    ) -> ModelCallResult[ResponseT]:
        """Async version of `wrap_model_call`."""
        return await handler(self._inject(request, await self._arecall(request)))

    # -- after_agent: capture and report ---------------------------------------------------------

    def _finish(self, state: Mapping[str, Any], runtime: object) -> tuple[TurnEvent, bool, str]:
        """Capture the finished turn and build its report: (event, captured, turn key)."""
        turn = self._locate(state, runtime)
        recall = self._recalls.pop(turn.cache_key)
        used, blocked = self._budget.usage(turn.messages) if self.tools else (0, 0)
        captured = (
            self.capture and turn.human is not None and state.get("tdai_captured") != turn.human_key
        )
        recorded = (
            capture_turn(
                self.memory,
                turn.identity,
                human=message_text(turn.human),
                answer=final_answer(turn.messages, turn.start),
            )
            if captured
            else 0
        )
        event = turn_event(
            turn.identity,
            recall.outcome if recall is not None else None,
            used=used,
            blocked=blocked,
            recorded=recorded,
        )
        return event, captured, turn.human_key

    @override
    def after_agent(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Hand the turn to L0 capture, emit `tdai_agent_turn` and call `on_turn`."""
        event, captured, key = self._finish(state, runtime)
        emit_turn(event, self.on_turn, text=self.memory.config.recall.trace_memory_text)
        return {"tdai_captured": key} if captured else None

    @override
    async def aafter_agent(
        self, state: TdaiRecallState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, Any] | None:
        """Async version of `after_agent`."""
        event, captured, key = self._finish(state, runtime)
        await aemit_turn(event, self.on_turn, text=self.memory.config.recall.trace_memory_text)
        return {"tdai_captured": key} if captured else None
