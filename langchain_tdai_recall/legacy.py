"""Memory for the legacy `AgentExecutor` (`langchain-classic`, the `classic` extra).

`AgentExecutor` passes no config to its tools or to the agent's model, so nothing can be resolved
per run: the scope is fixed when the tools are built, and the per-turn budget of the search tools
is an explicit `ToolBudget` that a turn wrapper resets before every turn. One `ExecutorMemory`
serves one conversation (one user); build one per conversation, they are cheap.

Example:
    ```python
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.legacy import ExecutorMemory
    from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

    memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64))
    memory.add_memory("Alice wants to travel to Lisbon", user_id="alice")
    chat_model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": "travel"}}], "Lisbon."]
    )

    session = ExecutorMemory(memory, user_id="alice", session_key="chat-1")
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a helpful assistant."),
            ("human", "{input}"),
            ("placeholder", "{agent_scratchpad}"),
        ]
    )
    agent = create_tool_calling_agent(session.wrap_model(chat_model), session.tools, prompt)
    executor = session.wrap_executor(AgentExecutor(agent=agent, tools=session.tools))
    assert executor.invoke({"input": "Where did I say I wanted to travel?"})["output"] == "Lisbon."
    ```

Use the turn wrapper (`wrap_executor`, or `with session.turn():` plus `record_turn` in loops you
drive yourself): without it nothing resets the search budget, so from the second turn on every
search is refused, and nothing is recorded to L0. The first search call made outside a turn logs
one WARNING saying so.

This module needs nothing from `langchain-classic` itself; the executor is any runnable that takes
and returns a dict. Like the other adapters it holds no turn logic of its own: identity, the
budget and L0 capture come from `langchain_tdai_recall._turn`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from typing_extensions import override

from langchain_tdai_recall._turn import (
    DEFAULT_SESSION_KEY,
    ScopeResolver,
    ToolBudget,
    TurnScopedBudget,
    capture_turn,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.lcel import RecallChatModel, wrap_model
from langchain_tdai_recall.tools import create_memory_tools

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = ["ExecutorMemory", "ExecutorTurn"]

logger = logging.getLogger(__name__)

_TURN_HINT: Final = (
    "wrap the executor with ExecutorMemory.wrap_executor(...), or run each turn inside "
    "`with session.turn():` and call session.record_turn(...)"
)


class ExecutorMemory:
    """Scoped memory tools, a per-turn budget and a turn wrapper for one executor conversation.

    Args:
        memory: The store.
        user_id: The user of this conversation (`None`: the store's default user, on purpose).
        agent_id: The agent, or `None` for the user's shared memory.
        session_key: The conversation, used for L0 capture.
        capture: Record each turn to L0; defaults to `capture.enabled`.

    Raises:
        ConfigError: If an argument is invalid (`ScopeError` for a bad id).
    """

    def __init__(
        self,
        memory: MemoryHost,
        *,
        user_id: str | None,
        agent_id: str | None = None,
        session_key: str = DEFAULT_SESSION_KEY,
        capture: bool | None = None,
    ) -> None:
        if not isinstance(session_key, str) or not session_key:
            msg = f"session_key must be a non-empty string, got {session_key!r}"
            raise ConfigError(msg)
        self.memory: Final = memory
        self.user_id: Final = user_id
        self.agent_id: Final = agent_id
        self.session_key: Final = session_key
        resolver = ScopeResolver.for_memory(
            memory, user_id=user_id, agent_id=agent_id, session_key=session_key
        )
        self._identity = resolver.resolve()
        self.budget: Final = TurnScopedBudget(
            memory.config.tools.max_calls_per_turn, hint=_TURN_HINT
        )
        self.manage_budget: Final = TurnScopedBudget(
            memory.config.tools.max_manage_calls_per_turn, hint=_TURN_HINT
        )
        """The per-turn budget of `tdai_manage_memory` (registered when
        `tools.manage_memory`), reset with the search budget every turn."""
        self.capture: Final = memory.config.capture.enabled if capture is None else capture
        self.tools: Final[list[BaseTool]] = create_memory_tools(
            memory, budget=self.budget, resolver=resolver, manage_budget=self.manage_budget
        )

    def wrap_model(self, model: BaseChatModel) -> RecallChatModel:
        """The chat model with recall in this conversation's scope before every call.

        It records nothing itself: the turn wrapper records each turn (`record_turn`).
        """
        return wrap_model(
            self.memory,
            model,
            user_id=self.user_id,
            agent_id=self.agent_id,
            session_key=self.session_key,
            capture=False,
        )

    @contextmanager
    def turn(self) -> Iterator[ToolBudget]:
        """Run one turn: the search budget (and `manage_budget`) start from zero.

        Yields:
            The search budget, to read `used` and `blocked` afterwards.
        """
        self.budget.open_turn()
        self.manage_budget.open_turn()
        try:
            yield self.budget
        finally:
            self.manage_budget.close_turn()
            self.budget.close_turn()

    def wrap_executor(
        self,
        executor: Runnable[dict[str, Any], dict[str, Any]],
        *,
        input_key: str = "input",
        output_key: str = "output",
    ) -> ExecutorTurn:
        """Wrap an executor so every `invoke` is one turn: budget reset, then L0 capture.

        Args:
            executor: The `AgentExecutor` (any runnable from dict to dict).
            input_key: Input field holding the user's message.
            output_key: Output field holding the final answer.

        Returns:
            A runnable with the executor's input and output.
        """
        if not isinstance(cast("object", executor), Runnable):
            msg = f"wrap_executor needs a runnable, got {type(executor).__name__}"
            raise ConfigError(msg)
        return ExecutorTurn(self, executor, input_key=input_key, output_key=output_key)

    def record_turn(
        self,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        *,
        input_key: str = "input",
        output_key: str = "output",
    ) -> int:
        """Record a finished turn (the user's input and the final answer) to L0.

        The messages are handed to the store's background writer, so this never waits for the
        write; a failure is logged, never raised.

        Returns:
            Messages handed to L0 capture; 0 when capture is off, there was no text, or the
            hand-over failed (logged).
        """
        if not self.capture:
            return 0
        return capture_turn(
            self.memory, self._identity, human=inputs.get(input_key), answer=outputs.get(output_key)
        )

    async def arecord_turn(
        self,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        *,
        input_key: str = "input",
        output_key: str = "output",
    ) -> int:
        """Async version of `record_turn` (capture never blocks, so nothing is awaited)."""
        return self.record_turn(inputs, outputs, input_key=input_key, output_key=output_key)


class ExecutorTurn(Runnable[dict[str, Any], dict[str, Any]]):
    """An executor whose every `invoke` is one memory turn; built by `wrap_executor`."""

    def __init__(
        self,
        session: ExecutorMemory,
        executor: Runnable[dict[str, Any], dict[str, Any]],
        *,
        input_key: str,
        output_key: str,
    ) -> None:
        self.session = session
        self.executor = executor
        self.keys = (input_key, output_key)

    @override
    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Run one turn of the executor."""
        with self.session.turn() as budget:
            outputs = self.executor.invoke(input, config, **kwargs)
        recorded = self.session.record_turn(
            input, outputs, input_key=self.keys[0], output_key=self.keys[1]
        )
        logger.debug(
            "executor turn: %d searches, %d refused, %d L0 messages",
            budget.used,
            budget.blocked,
            recorded,
        )
        return outputs

    @override
    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async version of `invoke`."""
        with self.session.turn() as budget:
            outputs = await self.executor.ainvoke(input, config, **kwargs)
        recorded = await self.session.arecord_turn(
            input, outputs, input_key=self.keys[0], output_key=self.keys[1]
        )
        logger.debug(
            "executor turn: %d searches, %d refused, %d L0 messages",
            budget.used,
            budget.blocked,
            recorded,
        )
        return outputs
