"""`MemoryManager`: the writes that `tdai_manage_memory` asks for, through formation's path.

The tool itself (schema, budget, description) stands beside the other memory tools in
`langchain_tdai_recall.tools.manage`; this module holds the domain side it calls, so every
agent-made write goes through the same consolidation and the same one-commit-per-call as
background formation:

- `remember`: the text is stored as a new memory at once (exact duplicates are not stored
  again); when a chat model is configured and similar memories exist, it is consolidated with
  them in the background (add / update / merge / delete / skip), never inside the turn, so a
  slow model cannot hold the turn; `memory.flush()` waits for it.
- `correct`: with a `memory_id`, that memory of the caller's scope is rewritten (same id,
  original creation time, the old version kept in `memory.history(id)`); without one, the text
  is consolidated like `remember`, so the model can decide it updates an existing memory.
- `forget`: with a `memory_id`, that memory is deleted (its last version kept in the history);
  without one, the single memory matching the text above `extraction.candidate_floor` is
  deleted, or the tool lists the candidates with their ids and asks to call again with one.

The agent cannot mint an absolute standing rule (`priority` is 0..100 in the tool), and text
that talks to the memory system or carries role or chat-template markers is capped below every
pin level, as in extraction. Rows are written without waiting for the embedder: candidates are
searched like a recall query (its embedding bounded by `embedding.query_timeout_ms`) and the
vector upkeep embeds the rows afterwards. Answers the model should read are `ToolException`s.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from langchain_core.tools import ToolException

from langchain_tdai_recall._runtime.foreground import mark_background
from langchain_tdai_recall.formation.consolidation import Consolidator, Plan
from langchain_tdai_recall.formation.extraction import NewMemory, steering_cap, steers
from langchain_tdai_recall.formation.prompts import detect_language
from langchain_tdai_recall.stores.formation import Upsert
from langchain_tdai_recall.types import Change, MemoryRecord, MemoryType, Scope, iso_utc

if TYPE_CHECKING:
    from langchain_tdai_recall.config import TdaiConfig
    from langchain_tdai_recall.formation._llm import StructuredCaller
    from langchain_tdai_recall.recall.search import Searcher
    from langchain_tdai_recall.stores.base import BaseMemoryStore

__all__ = ["MemoryManager", "ToolOutput"]

logger = logging.getLogger(__name__)

ToolOutput = tuple[str, dict[str, Any]]
"""The model's text and the structured artifact of one `tdai_manage_memory` call."""


def _now() -> str:
    return iso_utc()


class MemoryManager:
    """The writes of `tdai_manage_memory`, through consolidation and one commit per call.

    Built by `TdaiMemory` from its parts (`TdaiMemory.memory_manager`).

    Args:
        store: The store written to.
        searcher: The search recall uses (candidates, `forget` by description).
        config: The store's settings.
        caller: The formation model's caller, when a chat model is configured (background
            consolidation asks it); `None` adds without asking.
        wake_upkeep: Tells the vector upkeep rows were written.
    """

    def __init__(
        self,
        *,
        store: BaseMemoryStore,
        searcher: Searcher,
        config: TdaiConfig,
        caller: StructuredCaller | None,
        wake_upkeep: Callable[[], None],
    ) -> None:
        from langchain_tdai_recall.formation.pipeline import zone_name  # noqa: PLC0415

        self.store = store
        self.config = config
        self.caller = caller
        self.wake_upkeep = wake_upkeep
        self.records = store.formation
        self.searcher = searcher
        tz = config.tzinfo()
        self.consolidator = Consolidator(
            store=store,
            searcher=searcher,
            config=config.extraction,
            tz=tz,
            timezone_name=zone_name(config.timezone, tz),
            embed=None,  # during a turn: never wait for the embedder beyond a query's bound
        )
        self._later = _Worker(self.consolidate_stored)

    def run(self, scope: Scope, session: str, args: Mapping[str, Any]) -> ToolOutput:
        """Apply one validated tool call in `scope` (`session` is recorded on new memories)."""
        action = str(args["action"])
        kind = cast("MemoryType", args["type"])
        priority = int(args["priority"])
        content = cast("str | None", args.get("content"))
        memory_id = cast("str | None", args.get("memory_id"))
        if action == "remember":
            return self.remember(scope, session, content, kind=kind, priority=priority)
        if action == "correct":
            return self.correct(scope, session, content, memory_id, kind=kind, priority=priority)
        return self.forget(scope, content, memory_id)

    # -- actions ------------------------------------------------------------------------------

    def remember(
        self, scope: Scope, session: str, content: str | None, *, kind: MemoryType, priority: int
    ) -> ToolOutput:
        """Store one new memory now; consolidate it with similar ones in the background.

        Exact duplicates are refused at once. The formation model is never called inside the
        turn: when similar memories exist and a model is configured, the stored memory is
        consolidated with them afterwards (`flush()` waits for it).
        """
        plan = self._plan(scope, session, _text(content, "remember"), kind, priority)
        upserts = [
            Upsert(w.record, w.vector, change=w.change, related=w.related, dedupe=w.new)
            for w in plan.writes
        ]
        written, deleted = self._commit(scope, upserts, plan.deletes)
        if not written and not deleted:
            return "This is already remembered; nothing changed.", {"written": [], "deleted": []}
        if plan.candidates and self.caller is not None and self.config.extraction.enable_dedup:
            for record in written:
                self._later.put((scope, session, record.id))
        lines = [f"Remembered (id {r.id}): {r.content}" for r in written]
        lines += [f"Removed (id {i}) as outdated." for i in deleted]
        return "\n".join(lines), {"written": [r.id for r in written], "deleted": deleted}

    # -- background consolidation -------------------------------------------------------------

    def flush(self, deadline: float | None) -> bool:
        """Wait for the background consolidations queued so far.

        Returns `False` when `deadline` (a `time.monotonic()` value) came first.
        """
        return self._later.wait(deadline)

    def close(self, timeout: float) -> None:
        """Finish the queued consolidations for at most `timeout` seconds, then stop.

        What is left stays stored as it was written (only not consolidated).
        """
        self._later.stop(timeout)

    def consolidate_stored(self, scope: Scope, session: str, memory_id: str) -> None:
        """Consolidate one memory the tool stored with the scope's similar memories."""
        record = self.store.get_memory(scope, memory_id)
        if record is None or self.caller is None:
            return  # already forgotten or changed away
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        steered = steers(record.content)
        new = NewMemory(
            content=record.content,
            type=record.type,
            priority=record.priority,
            situation=record.scene_name,
            activity_start_time=record.activity_start_time,
            activity_end_time=record.activity_end_time,
            source_ids=record.source_message_ids,
            steered=steered,
        )
        plan = self.consolidator.plan(
            scope,
            scope_id,
            [new],
            session_key=session,
            language=detect_language([record.content]),
            caller=self.caller,
            stored=record,
        )
        if plan.error is not None:
            logger.info("a memory the agent stored stays unconsolidated (the model failed)")
            logger.debug("consolidating %s failed: %s", memory_id, plan.error)
            return
        kept = any(w.record.id == memory_id for w in plan.writes)
        writes = [w for w in plan.writes if w.record.id != memory_id]  # it is stored already
        deletes = list(plan.deletes)
        if not kept:  # folded into a stored memory (update, merge) or already said (skip)
            survivors = tuple(w.record.id for w in writes if not w.new)
            deletes.append((memory_id, "merged" if survivors else "delete", survivors[:1]))
        if not writes and not deletes:
            return
        self._commit(
            scope,
            [
                Upsert(w.record, w.vector, change=w.change, related=w.related, dedupe=w.new)
                for w in writes
            ],
            deletes,
        )

    def correct(
        self,
        scope: Scope,
        session: str,
        content: str | None,
        memory_id: str | None,
        *,
        kind: MemoryType,
        priority: int,
    ) -> ToolOutput:
        """Rewrite one memory by id (or consolidate the text like `remember`)."""
        text = _text(content, "correct")
        if not memory_id:
            return self.remember(scope, session, text, kind=kind, priority=priority)
        old = self.store.get_memory(scope, memory_id)
        if old is None:
            msg = f"There is no memory {memory_id!r} for this user. Check the id."
            raise ToolException(msg)
        record = replace(
            old,
            content=text[: self.config.extraction.content_max_chars],
            type=kind,
            priority=_corrected_priority(old.priority, priority, text),
            updated_at=_now(),
        )
        self._commit(scope, [Upsert(record, None)], [])
        return f"Corrected (id {memory_id}): {record.content}", {
            "written": [memory_id],
            "deleted": [],
        }

    def forget(self, scope: Scope, content: str | None, memory_id: str | None) -> ToolOutput:
        """Delete one memory by id, or the single memory matching a description."""
        if not memory_id:
            text = _text(content, "forget")
            floor = self.config.extraction.candidate_floor
            outcome = self.searcher.search(
                scope, "l1", text, limit=5, strategy=self.config.recall.strategy
            )
            hits = outcome.top(5, floor)
            rows = self.store.memories_by_ref(scope, [h.rowid for h in hits])
            found = [rows[h.rowid] for h in hits if h.rowid in rows]
            if not found:
                return "No stored memory matches that; nothing was forgotten.", {"deleted": []}
            if len(found) > 1:
                listing = "\n".join(f"- {r.id}: {r.content}" for r in found)
                return (
                    "Several memories match. Call again with the memory_id to forget:\n" + listing,
                    {"candidates": [r.id for r in found], "deleted": []},
                )
            memory_id = found[0].id
        _, deleted = self._commit(scope, [], [(memory_id, "delete", ())])
        if not deleted:
            msg = f"There is no memory {memory_id!r} for this user. Check the id."
            raise ToolException(msg)
        return f"Forgotten (id {memory_id}).", {"deleted": [memory_id]}

    # -- helpers ------------------------------------------------------------------------------

    def _plan(self, scope: Scope, session: str, text: str, kind: MemoryType, priority: int) -> Plan:
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        steered = steers(text)
        new = NewMemory(
            content=text[: self.config.extraction.content_max_chars],
            type=kind,
            priority=steering_cap(priority) if steered else priority,
            situation="",
            activity_start_time=None,
            activity_end_time=None,
            source_ids=(),
            steered=steered,
        )
        return self.consolidator.plan(
            scope,
            scope_id,
            [new],
            session_key=session,
            language=detect_language([text]),
            caller=None,  # never the model inside a turn: see `remember`
        )

    def _commit(
        self,
        scope: Scope,
        upserts: Sequence[Upsert],
        deletes: Sequence[tuple[str, Change, tuple[str, ...]]],
    ) -> tuple[list[MemoryRecord], list[str]]:
        """Write in one transaction (with history); returns (rows written, ids deleted)."""
        if self.store.read_only:
            msg = "this memory store was opened read-only; memories cannot be changed"
            raise ToolException(msg)
        scope_id = self.records.scope_id(scope, create=True)
        assert scope_id is not None
        outcome = self.records.commit(
            scope_id,
            owner=None,
            upserts=upserts,
            deletes=deletes,
            actor="tool",
            embedder=self.store.embedder_id,
            queue_scenes=self.config.persona.enabled,
        )
        if outcome.written:
            self.wake_upkeep()
        return list(outcome.written), list(outcome.deleted)


_IDLE_EXIT_S: Final = 30.0
"""A background consolidation thread idle this long ends (the next write starts one)."""


class _Worker:
    """One daemon thread that runs queued calls in order; `wait` returns when all are done."""

    def __init__(self, run: Callable[[Scope, str, str], None]) -> None:
        self._run = run
        self._items: queue.SimpleQueue[tuple[Scope, str, str] | None] = queue.SimpleQueue()
        self._open = 0
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def put(self, item: tuple[Scope, str, str]) -> None:
        with self._done:
            if self._stopped:
                return
            self._open += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="tdai-manage-memory", daemon=True
                )
                self._thread.start()
        self._items.put(item)

    def wait(self, deadline: float | None) -> bool:
        with self._done:
            while self._open:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done.wait(0.05 if left is None else min(left, 0.05))
            return True

    def stop(self, timeout: float) -> None:
        self.wait(time.monotonic() + timeout)
        with self._done:
            self._stopped = True
        self._items.put(None)

    def _loop(self) -> None:
        mark_background()
        while True:
            try:
                item = self._items.get(timeout=_IDLE_EXIT_S)
            except queue.Empty:
                with self._done:
                    if self._open == 0:  # idle: end the thread; `put` starts a new one
                        self._thread = None
                        return
                continue
            if item is None:
                return
            try:
                self._run(*item)
            except Exception as exc:  # the store closed, a bug: the memory stays as stored
                logger.info(
                    "background consolidation of a stored memory failed (%s)", type(exc).__name__
                )
                logger.debug("background consolidation failed", exc_info=True)
            finally:
                with self._done:
                    self._open -= 1
                    self._done.notify_all()


def _corrected_priority(old: int, given: int, text: str) -> int:
    """A corrected memory's priority: a standing rule stays one, steering text is capped."""
    priority = -1 if old == -1 else given
    return steering_cap(priority) if steers(text) else priority


def _text(content: str | None, action: str) -> str:
    text = " ".join((content or "").split())
    if not text:
        msg = f"action={action!r} needs `content`: the memory as one sentence."
        raise ToolException(msg)
    return text
