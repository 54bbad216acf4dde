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

This module needs nothing from `langchain-classic` itself; the executor is any runnable that takes
and returns a dict.
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

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.lcel import RecallChatModel, wrap_model
from langchain_tdai_recall.tools import DEFAULT_SESSION_KEY, ToolBudget, create_memory_tools

if TYPE_CHECKING:
    from langchain_tdai_recall.memory import TdaiMemory

__all__ = ["ExecutorMemory", "ExecutorTurn"]

logger = logging.getLogger(__name__)


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
        memory: TdaiMemory,
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
        self.budget: Final = ToolBudget(memory.config.tools.max_calls_per_turn)
        self.capture: Final = memory.config.capture.enabled if capture is None else capture
        self.tools: Final[list[BaseTool]] = create_memory_tools(
            memory,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            budget=self.budget,
        )

    def wrap_model(self, model: BaseChatModel) -> RecallChatModel:
        """The chat model with recall in this conversation's scope before every call."""
        return wrap_model(
            self.memory,
            model,
            user_id=self.user_id,
            agent_id=self.agent_id,
            session_key=self.session_key,
        )

    @contextmanager
    def turn(self) -> Iterator[ToolBudget]:
        """Run one turn: the search budget starts from zero.

        Yields:
            The budget, to read `used` and `blocked` afterwards.
        """
        self.budget.reset()
        yield self.budget

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

    @staticmethod
    def _l0(
        inputs: dict[str, Any], outputs: dict[str, Any], keys: tuple[str, str]
    ) -> list[dict[str, str]]:
        human, answer = inputs.get(keys[0]), outputs.get(keys[1])
        pairs = (("user", human), ("assistant", answer))
        return [
            {"role": role, "content": text}
            for role, text in pairs
            if isinstance(text, str) and text.strip()
        ]

    def record_turn(
        self,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        *,
        input_key: str = "input",
        output_key: str = "output",
    ) -> int:
        """Record a finished turn (the user's input and the final answer) to L0.

        Returns:
            Messages recorded; 0 when capture is off or the write failed (logged).
        """
        messages = self._l0(inputs, outputs, (input_key, output_key))
        if not self.capture or not messages:
            return 0
        try:
            return int(
                self.memory.record_messages(
                    messages,
                    session_key=self.session_key,
                    user_id=self.user_id,
                    agent_id=self.agent_id,
                )
            )
        except Exception as exc:  # capture must never fail the turn
            logger.warning("L0 capture failed: %s", type(exc).__name__)
            return 0

    async def arecord_turn(
        self,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        *,
        input_key: str = "input",
        output_key: str = "output",
    ) -> int:
        """Async version of `record_turn`."""
        messages = self._l0(inputs, outputs, (input_key, output_key))
        if not self.capture or not messages:
            return 0
        try:
            return int(
                await self.memory.arecord_messages(
                    messages,
                    session_key=self.session_key,
                    user_id=self.user_id,
                    agent_id=self.agent_id,
                )
            )
        except Exception as exc:
            logger.warning("L0 capture failed: %s", type(exc).__name__)
            return 0


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
