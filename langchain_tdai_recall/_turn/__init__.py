"""One agent turn: everything the LangChain adapters share, written once.

A turn is one user message and everything the agent does until it answers. The adapters
(`middleware.py` for `create_agent`, `tools/`, `lcel.py` for chains and `wrap_model`,
`legacy.py` for `AgentExecutor`) only translate their framework's hooks into the steps below, so
sync and async paths, and one adapter and another, cannot drift apart:

1. **Identity** (`ScopeResolver` -> `TurnIdentity`): whose memory the turn reads and writes.
2. **The turn's message** (`latest_human_index`, `message_text`, `turn_key`): the last human
   message that is not a summary, as typed.
3. **Recall** (`run_recall` / `arun_recall` -> `RecallOutcome`) and **injection**
   (`inject_recall`, `inject_messages`): the same bytes for every model call of the turn,
   reused through a per-run `TurnCache`, never written to agent state. Callback handlers see
   every recall as a child retriever run named `tdai_recall` (`_turn.run`).
4. **The per-turn budgets** of the capped tools: the two search tools share one cap, the
   optional `tdai_manage_memory` (memory formation) has its own, counted the same way.
   `StateBudget` decides from the conversation (inside a graph), `ToolBudget` is an explicit
   counter (executors), `RunBudgets` one budget per parent run (anything else).
5. **L0 capture** (`capture_turn`): the turn's human text and final answer, handed to the store's
   background writer; the one path every adapter uses. The writer calls
   `TdaiMemory._after_capture` once the turn is stored, which counts it for memory formation.
6. **Reporting** (`turn_event` -> `TurnEvent`): the `tdai_agent_turn` payload.

Failures follow the package's one failure policy (`_runtime.failure.report_failure`,
re-exported here): a bad scope always raises; a failed recall or tool call never ends a turn unless
`recall.on_error="raise"`, and capture and reporting never do; warnings name the failing step
and the exception type, never its message. This package imports `langchain_core` only (no
`langchain.agents`, no `langgraph`), so the chain adapters stay light.

Modules, in the order of a turn: `identity` (1), `message` (2 and injection), `recall` (3, and the
per-run `TurnCache`), `budget` (4, with the tools' names and refusals), `report` (5 and 6). This
face re-exports every name, so the adapters import from `langchain_tdai_recall._turn` alone.
"""

from __future__ import annotations

from langchain_tdai_recall._runtime.failure import report_failure
from langchain_tdai_recall._turn.budget import (
    BUDGET_EXHAUSTED_MESSAGE,
    CAPPED_TOOL_NAMES,
    CONVERSATION_SEARCH_TOOL,
    MANAGE_BUDGET_EXHAUSTED_MESSAGE,
    MANAGE_MEMORY_TOOL,
    MEMORY_SEARCH_TOOL,
    MEMORY_TOOL_NAMES,
    READ_SCENE_TOOL,
    TOOL_FAILED_MESSAGE,
    TOOL_NAMES,
    ArgsCheck,
    RunBudgets,
    StateBudget,
    ToolBudget,
    TurnScopedBudget,
    check_tool_names,
    check_tools_guide,
)
from langchain_tdai_recall._turn.identity import (
    DEFAULT_SESSION_KEY,
    ScopeResolver,
    ScopeSource,
    TurnIdentity,
)
from langchain_tdai_recall._turn.message import (
    append_system_context,
    final_answer,
    inject_messages,
    inject_recall,
    is_summary_message,
    latest_human_index,
    message_text,
    prepend_human_context,
    turn_key,
)
from langchain_tdai_recall._turn.recall import (
    RecallOutcome,
    TurnCache,
    TurnRecall,
    arun_recall,
    run_recall,
)
from langchain_tdai_recall._turn.report import (
    TURN_EVENT,
    OnTurn,
    TurnEvent,
    TurnMemory,
    aemit_turn,
    capture_turn,
    emit_turn,
    l0_messages,
    turn_event,
)

__all__ = [
    "BUDGET_EXHAUSTED_MESSAGE",
    "CAPPED_TOOL_NAMES",
    "CONVERSATION_SEARCH_TOOL",
    "DEFAULT_SESSION_KEY",
    "MANAGE_BUDGET_EXHAUSTED_MESSAGE",
    "MANAGE_MEMORY_TOOL",
    "MEMORY_SEARCH_TOOL",
    "MEMORY_TOOL_NAMES",
    "READ_SCENE_TOOL",
    "TOOL_FAILED_MESSAGE",
    "TOOL_NAMES",
    "TURN_EVENT",
    "ArgsCheck",
    "OnTurn",
    "RecallOutcome",
    "RunBudgets",
    "ScopeResolver",
    "ScopeSource",
    "StateBudget",
    "ToolBudget",
    "TurnCache",
    "TurnEvent",
    "TurnIdentity",
    "TurnMemory",
    "TurnRecall",
    "TurnScopedBudget",
    "aemit_turn",
    "append_system_context",
    "arun_recall",
    "capture_turn",
    "check_tool_names",
    "check_tools_guide",
    "emit_turn",
    "final_answer",
    "inject_messages",
    "inject_recall",
    "is_summary_message",
    "l0_messages",
    "latest_human_index",
    "message_text",
    "prepend_human_context",
    "report_failure",
    "run_recall",
    "turn_event",
    "turn_key",
]
