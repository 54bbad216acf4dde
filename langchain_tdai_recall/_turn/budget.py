"""The per-turn budgets of the capped memory tools, and the tools' names and refusals.

The two search tools share one cap; the optional `tdai_manage_memory` has its own, counted the
same way. `StateBudget` decides from the conversation (inside a graph), `ToolBudget` is an
explicit counter (executors), `TurnScopedBudget` one a turn wrapper opens and closes, and
`RunBudgets` one budget per parent run (anything else).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from typing_extensions import override

from langchain_tdai_recall._turn.message import latest_human_index, turn_key
from langchain_tdai_recall._turn.recall import TurnCache
from langchain_tdai_recall.errors import ConfigError

__all__ = [
    "BUDGET_EXHAUSTED_MESSAGE",
    "CAPPED_TOOL_NAMES",
    "CONVERSATION_SEARCH_TOOL",
    "MANAGE_BUDGET_EXHAUSTED_MESSAGE",
    "MANAGE_MEMORY_TOOL",
    "MEMORY_SEARCH_TOOL",
    "MEMORY_TOOL_NAMES",
    "READ_SCENE_TOOL",
    "TOOL_FAILED_MESSAGE",
    "TOOL_NAMES",
    "ArgsCheck",
    "RunBudgets",
    "StateBudget",
    "ToolBudget",
    "TurnScopedBudget",
    "check_tool_names",
    "check_tools_guide",
]


logger = logging.getLogger("langchain_tdai_recall._turn")


MEMORY_SEARCH_TOOL: Final = "tdai_memory_search"
CONVERSATION_SEARCH_TOOL: Final = "tdai_conversation_search"
READ_SCENE_TOOL: Final = "tdai_read_scene"
MANAGE_MEMORY_TOOL: Final = "tdai_manage_memory"
"""The optional agent-writable memory tool (`tools.manage`); capped on its own."""
CAPPED_TOOL_NAMES: Final = frozenset({MEMORY_SEARCH_TOOL, CONVERSATION_SEARCH_TOOL})
MEMORY_TOOL_NAMES: Final = frozenset({*CAPPED_TOOL_NAMES, READ_SCENE_TOOL})
"""The tools the memory-tools guide describes."""
"""The tools that share the per-turn budget."""

TOOL_NAMES: Final = (
    MEMORY_SEARCH_TOOL,
    CONVERSATION_SEARCH_TOOL,
    READ_SCENE_TOOL,
    MANAGE_MEMORY_TOOL,
)
"""Every memory tool, in the order `create_memory_tools` returns them."""


def check_tool_names(
    value: object, *, field: str = "names", accepts: str = "a list of memory tool names"
) -> tuple[str, ...]:
    """A choice of memory tools (a list of their names) in `TOOL_NAMES` order.

    Raises:
        ConfigError: If it is not a list, tuple or set of names, or names another tool.
    """
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
        msg = (
            f"{field} must be {accepts} (from {list(TOOL_NAMES)}), got "
            f"{type(value).__name__} {value!r:.60}"
        )
        raise ConfigError(msg)
    unknown = [n for n in value if n not in TOOL_NAMES]
    if unknown:
        msg = (
            f"{field} names {unknown!r:.80}, which are not memory tools of this package; choose "
            f"among {list(TOOL_NAMES)} (LangMem's or your own tools go to create_agent(tools=...) "
            "as they are)"
        )
        raise ConfigError(msg)
    return tuple(n for n in TOOL_NAMES if n in value)


def check_tools_guide(value: object) -> bool | tuple[str, ...]:
    """`recall(tools_guide=...)`: `True`/`False`, or the names of the memory tools the model has.

    Raises:
        ConfigError: For anything else.
    """
    if isinstance(value, bool):
        return value
    return check_tool_names(
        value, field="tools_guide", accepts="True, False or a list of memory tool names"
    )


BUDGET_EXHAUSTED_MESSAGE: Final = (
    "Refused: the memory search budget for this turn is used up (tdai_memory_search and "
    "tdai_conversation_search share a budget of {limit} calls per turn). Do not call these tools "
    "again in this turn; answer now with the information you already have."
)
"""For the model (an error `ToolMessage`): a search call over the turn's budget."""

MANAGE_BUDGET_EXHAUSTED_MESSAGE: Final = (
    "Refused: the memory change limit for this turn is reached (tdai_manage_memory runs at "
    "most {limit} times per turn). Do not call it again in this turn; continue without changing "
    "memory, you can do it in a later turn."
)
"""For the model (an error `ToolMessage`): a `tdai_manage_memory` call over the turn's cap."""

TOOL_FAILED_MESSAGE: Final = (
    "{tool} is unavailable right now ({error}). Do not retry it in this turn; answer with the "
    "information you already have."
)
"""For the model (an error `ToolMessage`): the store failed; `error` is a type name only."""


# -- the per-turn search budget -------------------------------------------------------------------

ArgsCheck = Callable[[str, object], Mapping[str, object] | None]
"""Validates a capped tool call's arguments (tool name, raw arguments): the normalised
arguments, or `None` when they fail validation (such a call never runs, so it costs nothing)."""


class StateBudget:
    """The per-turn cap decided from the conversation itself (inside a LangGraph agent).

    It counts the calls of the tools named `names` (by default the two search tools, which
    share one cap). The capped calls the model made since the turn's human message are
    numbered in the order of the AI messages and of their `tool_calls`, leaving out calls whose
    arguments fail validation; call number `k` runs only when `k < limit`. A call is found by
    its id, name and normalised arguments, so duplicate, empty or missing ids still get their
    own position. The verdicts are a pure function of the conversation, the same however the
    tool node schedules parallel calls; only calls that are identical in id, name and arguments
    and straddle the limit are told apart by arrival (they would return the same anyway).
    """

    def __init__(
        self, limit: int, check: ArgsCheck, *, names: frozenset[str] = CAPPED_TOOL_NAMES
    ) -> None:
        self.limit: Final = limit
        self.names: Final = names
        self._check = check
        self._ties = TurnCache[int]()
        self._counted = TurnCache[list[tuple[ToolCall, Mapping[str, object]]]]()
        self._lock = threading.Lock()

    def calls(self, messages: Sequence[BaseMessage]) -> list[tuple[ToolCall, Mapping[str, object]]]:
        """The turn's counted calls, in order, with their normalised arguments.

        Every parallel call of a message asks this again, so the result is memoised by what it
        depends on: the turn's human message and its AI messages with tool calls (validating
        every call for every call would be quadratic).
        """
        start = latest_human_index(messages)
        turn = messages[(start + 1 if start is not None else 0) :]
        ai = [m for m in turn if isinstance(m, AIMessage) and m.tool_calls]
        human = messages[start] if start is not None else None
        key = (turn_key(human), tuple((m.id, repr(m.tool_calls)) for m in ai))
        cached = self._counted.get(key)
        if cached is not None:
            return cached
        counted: list[tuple[ToolCall, Mapping[str, object]]] = []
        for message in ai:
            for call in message.tool_calls:
                if call["name"] not in self.names:
                    continue
                args = self._check(call["name"], call.get("args"))
                if args is not None:
                    counted.append((call, args))
        self._counted.put(key, counted)
        return counted

    def usage(self, messages: Sequence[BaseMessage]) -> tuple[int, int]:
        """(calls that ran, calls refused) in the current turn."""
        requested = len(self.calls(messages))
        used = min(requested, self.limit)
        return used, requested - used

    def positions(
        self,
        messages: Sequence[BaseMessage],
        *,
        name: str,
        call_id: str | None,
        args: Mapping[str, object] | None = None,
    ) -> list[int]:
        """Positions of the turn's counted calls with this name and id (and arguments, if given)."""
        return [
            position
            for position, (call, normalised) in enumerate(self.calls(messages))
            if call["name"] == name
            and call.get("id") == call_id
            and (args is None or dict(normalised) == dict(args))
        ]

    def grant(
        self,
        messages: Sequence[BaseMessage],
        *,
        name: str,
        call_id: str | None,
        args: Mapping[str, object],
        thread: object = None,
    ) -> bool | None:
        """Whether this call may run; `None` when the conversation does not contain it.

        Args:
            messages: The agent state's messages.
            name: The tool's name.
            call_id: The id of the tool call being served (may be empty or `None`).
            args: The call's normalised arguments.
            thread: Identifies the conversation (the thread id), to tell identical calls apart.
        """
        matches = self.positions(messages, name=name, call_id=call_id, args=args)
        if not matches:
            matches = self.positions(messages, name=name, call_id=call_id)[:1]
        if not matches:
            return None
        allowed = sum(position < self.limit for position in matches)
        if allowed in (0, len(matches)):
            return allowed > 0
        index = latest_human_index(messages)
        human = messages[index] if index is not None else None
        arguments = json.dumps(dict(args), sort_keys=True, default=str)
        key = (repr(thread), turn_key(human), name, call_id, arguments)
        with self._lock:
            granted = self._ties.get(key) or 0
            self._ties.put(key, granted + 1)
        return granted < allowed


class ToolBudget:
    """An explicit per-turn budget shared by the search tools of one conversation.

    Use it where tools get no graph state, as with the legacy `AgentExecutor`: build the tools
    with `budget=...` and call `reset()` at the start of every turn (the turn wrapper in
    `langchain_tdai_recall.legacy` does). Calls are granted first come, first served; exactly
    `limit` are granted per turn whatever the concurrency. Thread-safe.

    Example:
        ```python
        from langchain_tdai_recall.tools import ToolBudget

        budget = ToolBudget(3)
        assert [budget.try_acquire() for _ in range(4)] == [True, True, True, False]
        budget.reset()
        assert budget.used == 0
        ```
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(cast("object", limit), int) or limit < 1:
            msg = f"ToolBudget limit must be an integer >= 1, got {limit!r}"
            raise ConfigError(msg)
        self.limit: Final = limit
        self._lock = threading.Lock()
        self._used = 0
        self._blocked = 0

    @property
    def used(self) -> int:
        """Calls granted since the last reset."""
        return self._used

    @property
    def blocked(self) -> int:
        """Calls refused since the last reset."""
        return self._blocked

    def try_acquire(self) -> bool:
        """Grant one call if the budget allows it."""
        with self._lock:
            if self._used < self.limit:
                self._used += 1
                return True
            self._blocked += 1
            return False

    def reset(self) -> None:
        """Start a new turn."""
        with self._lock:
            self._used = 0
            self._blocked = 0


_OUTSIDE_TURN_WARNED = threading.Event()
"""Set once the "tools used outside a turn" warning was logged (once per process)."""


class TurnScopedBudget(ToolBudget):
    """A `ToolBudget` whose turns are opened and closed by a turn wrapper (`ExecutorMemory`).

    A search call while no turn is open means the wrapper is not in use: nothing resets the
    budget (later turns get refused) and nothing records the turn to L0. That logs one WARNING
    per process, with what to do instead.
    """

    def __init__(self, limit: int, *, hint: str) -> None:
        super().__init__(limit)
        self._hint = hint
        self._open_turns = 0

    def open_turn(self) -> None:
        """Start a turn: the budget starts from zero."""
        self.reset()
        with self._lock:
            self._open_turns += 1

    def close_turn(self) -> None:
        """End a turn opened by `open_turn`."""
        with self._lock:
            self._open_turns = max(0, self._open_turns - 1)

    @override
    def try_acquire(self) -> bool:
        """Grant one call if the budget allows it; warn (once) when no turn is open."""
        if not self._open_turns and not _OUTSIDE_TURN_WARNED.is_set():
            _OUTSIDE_TURN_WARNED.set()
            logger.warning(
                "memory search tool called outside a turn: its per-turn budget is never reset "
                "(later turns get refused) and nothing is recorded to L0; %s",
                self._hint,
            )
        return super().try_acquire()


class RunBudgets:
    """Budgets keyed by the parent run of a tool call, for callers with no graph state.

    An `AgentExecutor` run is the parent of every tool run it makes, so one executor `invoke`
    gets one budget. Bounded: the oldest runs are forgotten first.
    """

    def __init__(self, limit: int) -> None:
        self.limit: Final = limit
        self._lock = threading.Lock()
        self._counts = TurnCache[int]()

    def try_acquire(self, run_id: uuid.UUID) -> bool:
        """Grant one call of run `run_id` if its budget allows it."""
        with self._lock:
            count = self._counts.get(run_id) or 0
            self._counts.put(run_id, count + 1)
            return count < self.limit
