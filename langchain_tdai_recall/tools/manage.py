"""`tdai_manage_memory`: an optional tool with which the agent remembers, corrects or forgets.

LangMem's `manage_memory` equivalent, off by default: `tools.manage_memory = true` registers it
with the other memory tools (`memory.tools()`, the middleware, `ExecutorMemory`), and
`create_manage_memory_tool(memory)` builds it alone. What each action does, and the write path
shared with background formation, is `formation.manager.MemoryManager`'s; this module holds
what the model sees (name, description, schema) and the tool around the manager.

The tool is built on the memory tools' base (`tools._base`), so identity, the failure policy and
the per-turn budget are the ones of `_turn`: the scope comes from the run
(`runtime.context`, then `config["configurable"]`), then the arguments given here, and no call
can reach another scope; its calls are counted per turn like the search tools', against their
own cap `tools.max_manage_calls_per_turn` (the search cap is unchanged), and a refused call is
answered with an error `ToolMessage`. The agent cannot mint an absolute standing rule
(`priority` is 0..100 here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from pydantic import BaseModel, Field, ValidationError
from typing_extensions import override

from langchain_tdai_recall._turn import (
    MANAGE_BUDGET_EXHAUSTED_MESSAGE,
    MANAGE_MEMORY_TOOL,
    RunBudgets,
    ScopeResolver,
    StateBudget,
    ToolBudget,
    TurnIdentity,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.tools._base import (
    _MemoryToolBase,
    _Steps,
    _ToolInput,
    _validation_handler,
)

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = [
    "MANAGE_MEMORY_TOOL",
    "ManageMemoryInput",
    "ManageMemoryTool",
    "create_manage_memory_tool",
    "manage_budget",
]

_DESCRIPTION: Final = (
    "Change the long-term memory about the user. action='remember' stores a lasting fact, "
    "preference or rule the user wants you to keep (content: one self-contained sentence). "
    "action='correct' fixes a stored memory (content: the corrected sentence; memory_id when "
    "you know it). action='forget' removes a memory the user wants gone (memory_id, or "
    "content describing it). Use it only when the user asks you to remember, correct or forget "
    "something, or states a lasting fact or preference. At most {limit} calls per turn."
)

ToolOutput = tuple[str, dict[str, Any]]


class ManageMemoryInput(_ToolInput):
    """Arguments of `tdai_manage_memory`."""

    action: Literal["remember", "correct", "forget"] = Field(
        description="remember, correct or forget."
    )
    content: str | None = Field(
        default=None,
        max_length=2000,
        description="The memory as one self-contained sentence (remember, correct), or a "
        "description of the memory to forget.",
    )
    memory_id: str | None = Field(
        default=None,
        max_length=256,
        description="Id of the memory to correct or forget, as returned by this tool.",
    )
    type: Literal["persona", "episodic", "instruction"] = Field(
        default="persona",
        description="persona: a fact or preference; episodic: an event; instruction: a rule "
        "for you.",
    )
    priority: int = Field(default=60, ge=0, le=100, description="Importance, 0-100.")


def _checked_args(name: str, args: object) -> Mapping[str, object] | None:
    """The normalised arguments of a `tdai_manage_memory` call, or `None` when invalid."""
    if name != MANAGE_MEMORY_TOOL or not isinstance(args, Mapping):
        return None
    try:
        return ManageMemoryInput.model_validate(args).model_dump(exclude={"runtime"})
    except ValidationError:
        return None


def manage_budget(limit: int) -> StateBudget:
    """The graph-state budget of `tdai_manage_memory` (its own cap, counted like the searches)."""
    return StateBudget(limit, _checked_args, names=frozenset({MANAGE_MEMORY_TOOL}))


class ManageMemoryTool(_MemoryToolBase):
    """`tdai_manage_memory`; see the module docstring."""

    name: str = MANAGE_MEMORY_TOOL
    args_schema: type[BaseModel] = ManageMemoryInput
    capped: bool = Field(default=True, exclude=True)
    budget_message: str = Field(default=MANAGE_BUDGET_EXHAUSTED_MESSAGE, exclude=True)
    manager: Any = Field(exclude=True)
    """The `MemoryManager` that applies the calls."""

    @override
    def _steps(self, identity: TurnIdentity, args: Mapping[str, Any]) -> _Steps:
        try:
            output: ToolOutput = self.manager.run(identity.scope, identity.session_key, args)
        except ToolException:
            raise
        except Exception as exc:  # the store failing must not end the agent
            raise self._failed(exc) from exc
        yield from ()  # no store calls to hand out: the body runs on the first step
        return output

    @override
    def _run(
        self,
        action: str,
        content: str | None = None,
        memory_id: str | None = None,
        type: str = "persona",
        priority: int = 60,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {
            "action": action,
            "content": content,
            "memory_id": memory_id,
            "type": type,
            "priority": priority,
        }
        return cast("ToolOutput", self._drive(self._start(args, runtime, run_manager)))

    @override
    async def _arun(
        self,
        action: str,
        content: str | None = None,
        memory_id: str | None = None,
        type: str = "persona",
        priority: int = 60,
        runtime: Annotated[Any, InjectedToolArg] = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> ToolOutput:
        args = {
            "action": action,
            "content": content,
            "memory_id": memory_id,
            "type": type,
            "priority": priority,
        }
        steps = self._start(args, runtime, run_manager)  # identity and budget on the loop
        # consolidation may call the chat model and writes to SQLite: not on the event loop
        return cast("ToolOutput", await asyncio.to_thread(self._drive, steps))


def build_manage_tool(
    memory: MemoryHost,
    *,
    resolver: ScopeResolver,
    budget: ToolBudget | None,
    validation_handler: Callable[[ValidationError], str],
) -> BaseTool:
    """The tool as `tools.create_memory_tools` registers it (shared resolver)."""
    limit = memory.config.tools.max_manage_calls_per_turn if budget is None else budget.limit
    return ManageMemoryTool(
        description=_DESCRIPTION.format(limit=limit),
        handle_validation_error=validation_handler,
        memory=memory,
        manager=memory.memory_manager(),
        resolver=resolver,
        budget=budget,
        state_budget=manage_budget(limit),
        run_budgets=RunBudgets(limit),
    )


def create_manage_memory_tool(
    memory: MemoryHost,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    budget: ToolBudget | None = None,
) -> BaseTool:
    """Build the optional `tdai_manage_memory` tool alone (see the module docstring).

    `tools.manage_memory = true` registers it with the other memory tools instead.

    Args:
        memory: The store to write.
        user_id: User of the scope when the run names none.
        agent_id: Agent of the scope when the run names none.
        session_key: Session when the run names none (recorded on new memories).
        require_user_id: Raise `ScopeError` instead of falling back to the default user.
        budget: An explicit per-turn `ToolBudget` that the caller resets each turn (its
            `limit` is the cap); without it the cap is `tools.max_manage_calls_per_turn`,
            derived from the graph state inside an agent or kept per parent run elsewhere.

    Returns:
        The tool.

    Raises:
        ConfigError: If an argument is invalid (`ScopeError` for a bad id).

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.tools import create_manage_memory_tool
        from langchain_tdai_recall.testing import HashEmbeddings

        with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
            tool = create_manage_memory_tool(memory, user_id="alice")
            tool.invoke({"action": "remember", "content": "Alice is allergic to peanuts."})
            assert memory.list_memories(user_id="alice")[0].content.startswith("Alice")
        ```
    """
    memory.check_open()
    if budget is not None and not isinstance(cast("object", budget), ToolBudget):
        msg = f"budget must be a ToolBudget, got {type(budget).__name__}"
        raise ConfigError(msg)
    resolver = ScopeResolver.for_memory(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        session_key=session_key,
        require_user_id=require_user_id,
    )
    return build_manage_tool(
        memory,
        resolver=resolver,
        budget=budget,
        validation_handler=_validation_handler(MANAGE_MEMORY_TOOL),
    )
