"""`tdai_manage_memory`: an optional tool with which the agent remembers, corrects or forgets.

LangMem's `manage_memory` equivalent, off by default: nothing registers it unless the
application builds it with `create_manage_memory_tool(memory)` and gives it to its agent. Every
write goes through the same path as background formation:

- `remember`: the text is a new memory; exact duplicates are not stored again and, when a chat
  model is configured, similar memories are consolidated with it (add / update / merge / skip).
- `correct`: with a `memory_id`, that memory of the caller's scope is rewritten (same id,
  original creation time, the old version kept in `memory.history(id)`); without one, the text
  is consolidated like `remember`, so the model can decide it updates an existing memory.
- `forget`: with a `memory_id`, that memory is deleted (its last version kept in the history);
  without one, the single memory matching the text above the candidate floor is deleted, or the
  tool lists the candidates with their ids and asks to call again with one.

The scope comes from the run (`runtime.context`, then `config["configurable"]`), then the
arguments given here, as for the search tools; no call can reach another scope. The agent
cannot mint an absolute standing rule (`priority` is 0..100 here).

Budget seam (for the turn logic that owns the per-turn cap): the tool's name is
`MANAGE_MEMORY_TOOL`, so a turn budget can count it with the search tools; and a `budget` object
with `try_acquire() -> bool` (such as `tools.ToolBudget`) given here is charged one unit per
call, a refused call answering with `BUDGET_MESSAGE`.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Protocol

from langchain_core.callbacks import CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_tdai_recall.formation.consolidation import Consolidator, Plan
from langchain_tdai_recall.formation.extraction import NewMemory
from langchain_tdai_recall.formation.prompts import detect_language
from langchain_tdai_recall.store._formation import FormationRecords, Upsert
from langchain_tdai_recall.types import MemoryRecord, MemoryType, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall.formation._llm import StructuredCaller
    from langchain_tdai_recall.memory import TdaiMemory

__all__ = [
    "BUDGET_MESSAGE",
    "MANAGE_MEMORY_TOOL",
    "ManageMemoryInput",
    "create_manage_memory_tool",
]

logger = logging.getLogger(__name__)

MANAGE_MEMORY_TOOL: Final = "tdai_manage_memory"
"""Name of the agent-writable memory tool (for the per-turn tool budget)."""

BUDGET_MESSAGE: Final = (
    "Memory tool limit reached for this turn. Continue without changing memory; you can do it "
    "in a later turn."
)
"""Tool result (for the model) when the per-turn budget refuses a call."""

_DESCRIPTION: Final = (
    "Change the long-term memory about the user. action='remember' stores a lasting fact, "
    "preference or rule the user wants you to keep (content: one self-contained sentence). "
    "action='correct' fixes a stored memory (content: the corrected sentence; memory_id when "
    "you know it). action='forget' removes a memory the user wants gone (memory_id, or "
    "content describing it). Use it only when the user asks you to remember, correct or forget "
    "something, or states a lasting fact or preference."
)


class ManageMemoryInput(BaseModel):
    """Arguments of `tdai_manage_memory`."""

    model_config = ConfigDict(extra="forbid")

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


class Budget(Protocol):
    """What the tool needs from a per-turn budget."""

    def try_acquire(self) -> bool:
        """Take one call; `False` when the turn's budget is used up."""
        ...


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _ManageMemoryTool(BaseTool):
    name: str = MANAGE_MEMORY_TOOL
    description: str = _DESCRIPTION
    args_schema: type[BaseModel] = ManageMemoryInput
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True
    handle_validation_error: bool | str = (
        "Invalid arguments: action is remember, correct or forget; content is one sentence; "
        "priority is 0-100."
    )

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any = Field(exclude=True)
    resolver: Any = Field(exclude=True)
    budget: Any = Field(default=None, exclude=True)

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
    ) -> tuple[str, dict[str, Any]]:
        context = getattr(runtime, "context", None) if runtime is not None else None
        config: RunnableConfig = (
            runtime.config
            if runtime is not None and getattr(runtime, "config", None)
            else ensure_config()
        )
        scope = self.resolver.resolve(context, config.get("configurable"))
        if self.budget is not None and not self.budget.try_acquire():
            raise ToolException(BUDGET_MESSAGE)
        writer = _Writer(self.memory, (scope.user_id, scope.agent_id), scope.session_key or "")
        try:
            if action == "remember":
                return writer.remember(content, type, priority)  # type: ignore[arg-type]
            if action == "correct":
                return writer.correct(content, memory_id, type, priority)  # type: ignore[arg-type]
            return writer.forget(content, memory_id)
        except ToolException:
            raise
        except Exception as exc:  # a store failure must not end the agent
            name = exc.__class__.__name__  # `type` is an argument here
            logger.warning("%s failed: %s", MANAGE_MEMORY_TOOL, name)
            msg = f"The memory could not be changed ({name}). Continue without it."
            raise ToolException(msg) from exc


class _Writer:
    """One tool call's writes, through consolidation and one commit."""

    def __init__(self, memory: TdaiMemory, scope: tuple[str | None, str | None], session: str):
        self.memory = memory
        self.scope = memory.scope(scope[0], scope[1])
        self.session = session
        store = memory._store  # the store's internals: formation writes like the pipeline
        self.records = FormationRecords(store.db)
        self.scope_id = store.scope_id(self.scope, create=True)
        formation = memory._formation
        self.caller: StructuredCaller | None = None
        if formation is not None:
            self.consolidator = formation.engine.consolidator
            self.caller = formation.engine.caller
        else:
            from langchain_tdai_recall.formation.pipeline import _zone_name  # noqa: PLC0415

            tz = memory.config.tzinfo()
            self.consolidator = Consolidator(
                db=store.db,
                searcher=memory._searcher,
                config=memory.config.extraction,
                tz=tz,
                timezone_name=_zone_name(memory.config.timezone, tz),
                embed=memory._embed_texts,
            )

    def _text(self, content: str | None, action: str) -> str:
        text = " ".join((content or "").split())
        if not text:
            msg = f"action={action!r} needs `content`: the memory as one sentence."
            raise ToolException(msg)
        return text

    def _plan(self, text: str, kind: MemoryType, priority: int) -> Plan:
        assert self.scope_id is not None
        new = NewMemory(
            content=text[: self.memory.config.extraction.content_max_chars],
            type=kind,
            priority=priority,
            situation="",
            activity_start_time=None,
            activity_end_time=None,
            source_ids=(),
        )
        return self.consolidator.plan(
            Scope(*self.scope),
            self.scope_id,
            [new],
            session_key=self.session,
            language=detect_language([text]),
            caller=self.caller,
        )

    def _commit(self, plan: Plan) -> tuple[list[MemoryRecord], list[str]]:
        assert self.scope_id is not None
        missing = [w for w in plan.writes if w.vector is None]
        if missing:
            vectors = self.memory._embed_texts([w.record.content for w in missing])
            if vectors is not None:
                for write, vector in zip(missing, vectors, strict=True):
                    write.vector = vector
        outcome = self.records.commit(
            self.scope_id,
            owner=None,
            upserts=[
                Upsert(w.record, w.vector, change=w.change, related=w.related, dedupe=w.new)
                for w in plan.writes
            ],
            deletes=plan.deletes,
            actor="tool",
            embedder=self.memory._store.embedder_id,
            queue_scenes=self.memory.config.persona.enabled,
        )
        return list(outcome.written), list(outcome.deleted)

    def remember(
        self, content: str | None, kind: MemoryType, priority: int
    ) -> tuple[str, dict[str, Any]]:
        plan = self._plan(self._text(content, "remember"), kind, priority)
        if plan.error is not None:
            msg = f"The memory could not be stored now ({plan.error})."
            raise ToolException(msg)
        written, deleted = self._commit(plan)
        if not written and not deleted:
            return "This is already remembered; nothing changed.", {"written": [], "deleted": []}
        lines = [f"Remembered (id {r.id}): {r.content}" for r in written]
        lines += [f"Removed (id {i}) as outdated." for i in deleted]
        return "\n".join(lines), {"written": [r.id for r in written], "deleted": deleted}

    def correct(
        self, content: str | None, memory_id: str | None, kind: MemoryType, priority: int
    ) -> tuple[str, dict[str, Any]]:
        text = self._text(content, "correct")
        if not memory_id:
            return self.remember(text, kind, priority)
        assert self.scope_id is not None
        old = self.memory.get_memory(memory_id, user_id=self.scope[0], agent_id=self.scope[1])
        if old is None:
            msg = f"There is no memory {memory_id!r} for this user. Check the id."
            raise ToolException(msg)
        from dataclasses import replace  # noqa: PLC0415

        record = replace(
            old,
            content=text[: self.memory.config.extraction.content_max_chars],
            type=kind,
            priority=-1 if old.priority == -1 else priority,
            updated_at=_now(),
        )
        vectors = self.memory._embed_texts([record.content])
        self.records.commit(
            self.scope_id,
            owner=None,
            upserts=[Upsert(record, vectors[0] if vectors is not None else None)],
            deletes=[],
            actor="tool",
            embedder=self.memory._store.embedder_id,
            queue_scenes=self.memory.config.persona.enabled,
        )
        return f"Corrected (id {memory_id}): {record.content}", {
            "written": [memory_id],
            "deleted": [],
        }

    def forget(self, content: str | None, memory_id: str | None) -> tuple[str, dict[str, Any]]:
        assert self.scope_id is not None
        if not memory_id:
            text = self._text(content, "forget")
            floor = self.memory.config.extraction.candidate_floor
            outcome = self.consolidator.searcher.search(
                self.scope,
                "l1",
                text,
                limit=5,
                strategy="hybrid",
                keyword_threshold=floor,
                embedding_threshold=floor,
            )
            rows = self.memory._store.db.memories_by_rowid(
                [h.rowid for h in outcome.hits], self.scope
            )
            found = [rows[h.rowid] for h in outcome.hits if h.rowid in rows]
            if not found:
                return "No stored memory matches that; nothing was forgotten.", {"deleted": []}
            if len(found) > 1:
                listing = "\n".join(f"- {r.id}: {r.content}" for r in found)
                return (
                    "Several memories match. Call again with the memory_id to forget:\n" + listing,
                    {"candidates": [r.id for r in found], "deleted": []},
                )
            memory_id = found[0].id
        deleted = self.records.db.delete_memories(
            self.scope_id, [memory_id], actor="tool", at=_now()
        )
        if not deleted:
            msg = f"There is no memory {memory_id!r} for this user. Check the id."
            raise ToolException(msg)
        return f"Forgotten (id {memory_id}).", {"deleted": [memory_id]}


def create_manage_memory_tool(
    memory: TdaiMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    require_user_id: bool = False,
    budget: Budget | None = None,
) -> BaseTool:
    """Build the optional `tdai_manage_memory` tool (see the module docstring).

    Args:
        memory: The store to write.
        user_id: User of the scope when the run names none.
        agent_id: Agent of the scope when the run names none.
        require_user_id: Raise `ScopeError` instead of falling back to the default user.
        budget: A per-turn budget charged one unit per call (`try_acquire() -> bool`).

    Returns:
        The tool.

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.formation.tool import create_manage_memory_tool
        from langchain_tdai_recall.testing import HashEmbeddings

        with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
            tool = create_manage_memory_tool(memory, user_id="alice")
            tool.invoke({"action": "remember", "content": "Alice is allergic to peanuts."})
            assert memory.list_memories(user_id="alice")[0].content.startswith("Alice")
        ```
    """
    from langchain_tdai_recall.tools import ScopeResolver  # noqa: PLC0415 - shared identity

    resolver = ScopeResolver(user_id=user_id, agent_id=agent_id, require_user_id=require_user_id)
    return _ManageMemoryTool(memory=memory, resolver=resolver, budget=budget)
