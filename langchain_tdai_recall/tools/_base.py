"""The memory tools' shared plumbing: identity, budget, failure policy and the two drivers.

Every memory tool (`tools.search`, `tools.manage`) is a `_MemoryToolBase`: it writes its body
once, as a generator of the store calls it needs (`_Steps`), and the sync and async drivers here
run it against the `MemoryHost` the tool serves (the async driver awaits each call's `a*` twin).
Identity resolution, the per-turn budgets and `report_failure` come from `_turn`; this module only
bridges them to LangChain's `BaseTool`, so a refused or failing call answers with an error
`ToolMessage` instead of ending the agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import ToolCall
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, ValidationError
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import override

from langchain_tdai_recall._runtime.breaker import StoreBreaker
from langchain_tdai_recall._turn import (
    BUDGET_EXHAUSTED_MESSAGE,
    TOOL_FAILED_MESSAGE,
    RunBudgets,
    ScopeResolver,
    StateBudget,
    ToolBudget,
    TurnIdentity,
    report_failure,
)

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig as _Config

logger = logging.getLogger("langchain_tdai_recall.tools")

_INVALID_ARGUMENTS_MESSAGE: Final = "Invalid arguments for {tool}: {problems}. Fix them and retry."
"""For the model (an error `ToolMessage`): its arguments failed validation."""

_RuntimeField = Annotated[SkipValidation[Any], InjectedToolArg, SkipJsonSchema()]
"""Slot through which LangGraph's tool node injects `ToolRuntime` (matched by the name
`runtime`). It is hidden from the model-facing schema and never validated or serialised."""


class _ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runtime: _RuntimeField = Field(default=None, exclude=True)


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


# -- the tools -----------------------------------------------------------------------------------

ToolOutput = tuple[str, Any]
"""Text for the model and the structured artifact."""


@dataclass(frozen=True, slots=True)
class _StoreCall:
    """One `MemoryHost` call a tool body asks for; the async driver awaits its `a*` twin."""

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
    """The `MemoryHost` (a `TdaiMemory`) the tool reads."""
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
        breaker = getattr(self.memory, "store_breaker", None)
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
