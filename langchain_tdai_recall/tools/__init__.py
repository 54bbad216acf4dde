"""Memory tools for agents: `tdai_memory_search`, `tdai_conversation_search`, `tdai_read_scene`.

With `tools.manage_memory` set, the optional `tdai_manage_memory` comes fourth. A thin adapter
over `langchain_tdai_recall._turn`: scope resolution, the per-turn budgets and the failure policy
live there. The package holds what the model sees (names, descriptions, argument schemas, result
text) and bridges LangChain's `BaseTool` to the memory (`_turn.host.MemoryHost`): `_base` the shared
plumbing and drivers, `search` the three search tools, `manage` the memory tool. This module
builds them (`create_memory_tools`) and keeps every name importable from here.

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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.tools import BaseTool

from langchain_tdai_recall._turn import (
    BUDGET_EXHAUSTED_MESSAGE,
    CAPPED_TOOL_NAMES,
    CONVERSATION_SEARCH_TOOL,
    MANAGE_MEMORY_TOOL,
    MEMORY_SEARCH_TOOL,
    READ_SCENE_TOOL,
    TOOL_NAMES,
    RunBudgets,
    ScopeResolver,
    ToolBudget,
    check_tool_names,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.tools._base import _validation_handler
from langchain_tdai_recall.tools.manage import (
    ManageMemoryInput as ManageMemoryInput,
)
from langchain_tdai_recall.tools.manage import (
    build_manage_tool,
)
from langchain_tdai_recall.tools.manage import (
    create_manage_memory_tool as create_manage_memory_tool,
)
from langchain_tdai_recall.tools.manage import (
    manage_budget as manage_budget,
)
from langchain_tdai_recall.tools.search import (
    _BUDGET_EXHAUSTED_ALONE,
    _CONVERSATION_SEARCH_ALONE,
    _CONVERSATION_SEARCH_DESCRIPTION,
    _MEMORY_SEARCH_ALONE,
    _MEMORY_SEARCH_DESCRIPTION,
    _READ_SCENE_DESCRIPTION,
    MAX_QUERY_CHARS,
    ConversationSearchInput,
    MemorySearchInput,
    ReadSceneInput,
    _ConversationSearchTool,
    _MemorySearchTool,
    _ReadSceneTool,
    search_budget,
)
from langchain_tdai_recall.tools.search import (
    render_memory_hits as render_memory_hits,
)
from langchain_tdai_recall.tools.search import (
    render_message_hits as render_message_hits,
)
from langchain_tdai_recall.tools.search import (
    render_scene as render_scene,
)

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost


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


def _alone(name: str, both: bool) -> dict[str, str]:
    """The budget refusal of a search tool chosen without the other one (it names only it)."""
    return {} if both else {"budget_message": _BUDGET_EXHAUSTED_ALONE.format(tool=name)}


def create_memory_tools(
    memory: MemoryHost,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_key: str | None = None,
    require_user_id: bool = False,
    budget: ToolBudget | None = None,
    resolver: ScopeResolver | None = None,
    manage_budget: ToolBudget | None = None,
    names: Sequence[str] | None = None,
) -> list[BaseTool]:
    """Build `tdai_memory_search`, `tdai_conversation_search` and `tdai_read_scene`.

    With `tools.manage_memory` set in the store's config, the optional agent-writable
    `tdai_manage_memory` (`tools.manage`, writing through formation's `MemoryManager`) comes
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
        names: Only these tools (a list of their names; `None`: all of them), for an agent
            that has other memory tools already, such as LangMem's: with
            `["tdai_conversation_search", "tdai_read_scene"]` the model keeps one tool that
            searches memories. `tdai_manage_memory` needs `tools.manage_memory`. A search tool
            chosen without the other says it has the budget alone.

    Returns:
        The three tools, always in this order, then `tdai_manage_memory` when enabled (only
        those of `names`, in this order).

    Raises:
        ConfigError: If an argument is invalid (a name that is not one of these tools).

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
    chosen = TOOL_NAMES if names is None else check_tool_names(names, field="names")
    if MANAGE_MEMORY_TOOL in chosen and names is not None and not memory.config.tools.manage_memory:
        msg = (
            f"names includes {MANAGE_MEMORY_TOOL!r}, which needs tools.manage_memory: set "
            "TdaiConfig(tools={'manage_memory': True}), or leave it out of names"
        )
        raise ConfigError(msg)
    both = MEMORY_SEARCH_TOOL in chosen and CONVERSATION_SEARCH_TOOL in chosen
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
    tools: list[BaseTool] = []
    searches: tuple[tuple[str, type[BaseTool], str, str], ...] = (
        (MEMORY_SEARCH_TOOL, _MemorySearchTool, _MEMORY_SEARCH_DESCRIPTION, _MEMORY_SEARCH_ALONE),
        (
            CONVERSATION_SEARCH_TOOL,
            _ConversationSearchTool,
            _CONVERSATION_SEARCH_DESCRIPTION,
            _CONVERSATION_SEARCH_ALONE,
        ),
    )
    for name, tool_class, beside_other, alone in searches:
        if name in chosen:
            tools.append(
                tool_class(
                    description=(beside_other if both else alone).format(limit=limit),
                    handle_validation_error=_validation_handler(name),
                    **_alone(name, both),
                    **shared,
                )
            )
    if READ_SCENE_TOOL in chosen:
        tools.append(
            _ReadSceneTool(
                description=_READ_SCENE_DESCRIPTION,
                handle_validation_error=_validation_handler(READ_SCENE_TOOL),
                **shared,
            )
        )
    if memory.config.tools.manage_memory and MANAGE_MEMORY_TOOL in chosen:
        tools.append(
            build_manage_tool(
                memory,
                resolver=scopes,
                budget=manage_budget,
                validation_handler=_validation_handler(MANAGE_MEMORY_TOOL),
            )
        )
    return tools
