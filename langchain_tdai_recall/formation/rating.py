"""Rating what other writers store: priorities for LangGraph-store items, in the background.

Memory formation gives every memory it extracts a priority (health and safety 90-100, identity,
family, diet and core preferences 70-89, ordinary facts 50-69), and recall leans on it: high
priorities are pinned into the system context, the profile takes the most important first. Items
written through `memory.as_store()` (LangMem's manage tool and memory manager, an app's own
`store.put`) carry no priority unless their value has one, and would all sit at 50. When the
memory has a formation model, `Rater` rates them like extraction would:

- `TdaiStore` marks an item it stores without a `priority` in its value as waiting for a
  rating (`metadata["tdai_store"]["rating"] == "pending"`) and queues it here; the write itself
  never waits.
- A daemon thread takes up to `BATCH` waiting items of one scope (gathered for
  `GATHER_SECONDS` after the first, so a burst of writes costs one call), asks the model once
  (`RatingAnswer`, with extraction's priority scale and prompt conventions: aliased ids, JSON
  lines, the memories as data), validates each rating (a known id, a priority 0-100, a memory
  type; text that talks to the memory system is capped like extraction caps it), and writes the
  priority and type with the memory's text and write time unchanged (its vector stays). An item
  rewritten meanwhile is rated in its new form; one deleted meanwhile is skipped.
- A failed call, or a memory the answer left unrated, is retried after
  `extraction.retry_base_seconds`, doubled per failure up to `extraction.retry_max_seconds`,
  never dropped while the process runs. `memory.flush()` waits for the ratings due now and says
  `False` while some wait for a retry; `report()` counts what was rated and what failed.
  Waiting marks survive a restart, but the queue does not: items still marked then keep their
  priority of 50 until they are written again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from langchain_tdai_recall.formation.extraction import steering_cap, steers
from langchain_tdai_recall.formation.prompts import detect_language, rating_system, rating_user
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY

if TYPE_CHECKING:
    from langchain_tdai_recall.config import TdaiConfig
    from langchain_tdai_recall.formation._llm import StructuredCaller
    from langchain_tdai_recall.stores.base import BaseMemoryStore
    from langchain_tdai_recall.types import MemoryRecord, Scope

__all__ = [
    "BATCH",
    "GATHER_SECONDS",
    "PENDING",
    "PENDING_PRIORITY",
    "Rater",
    "RatingAnswer",
    "RatingReport",
    "waits_for_rating",
]

logger = logging.getLogger(__name__)

_warned = threading.Event()
"""Set once a failed rating was logged as a WARNING in this process (later ones: DEBUG)."""


def _log_failure(count: int, error: str) -> None:
    """A failed rating call: a WARNING once per process, DEBUG after (`rating_report()` counts)."""
    if _warned.is_set():
        logger.debug("rating %d stored memories failed (%s); retrying later", count, error)
        return
    _warned.set()
    logger.warning(
        "rating %d stored memories failed (%s); retrying later (further failures are logged "
        "at DEBUG; memory.rating_report() counts them)",
        count,
        error,
    )


BATCH: Final = 20
"""Most memories rated by one model call."""

GATHER_SECONDS: Final = 0.5
"""A scope's first waiting memory is rated this long after it was stored, so that a burst of
writes (an import, a memory manager's batch) is rated in one call; `flush()` does not wait."""

PENDING: Final = "pending"
"""`metadata["tdai_store"]["rating"]` of an item waiting for its priority and type."""

PENDING_PRIORITY: Final = "pending-priority"
"""`metadata["tdai_store"]["rating"]` of an item whose value gave a type: only its priority is
rated."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Rating(_Wire):
    """The rating of one memory."""

    id: str = Field(description="The id of the memory, as given (e.g. 'r3').")
    priority: int = Field(
        description="Importance 0-100 (90+ health and safety, 70-89 identity, family, diet, "
        "language, mobility and core preferences, 50-69 ordinary, below 50 minor)."
    )
    type: Literal["persona", "episodic", "instruction"] = Field(
        description="persona: lasting facts about the user. episodic: events with a time. "
        "instruction: lasting rules the user set for the assistant."
    )


class RatingAnswer(_Wire):
    """Priorities and types of the memories shown."""

    ratings: list[Rating] = Field(description="One rating per memory.")


@dataclass(slots=True)
class RatingReport:
    """What the rater did since the memory was opened."""

    rated: int = 0
    """Memories given a priority and type."""
    failed_calls: int = 0
    """Model calls that failed or answered nothing usable (each retried)."""
    waiting: int = 0
    """Memories queued now (due, or waiting for a retry)."""
    last_error: str | None = None
    """Why the last failed call failed."""


def waits_for_rating(metadata: Mapping[str, Any] | None) -> bool:
    """Whether a memory's metadata marks it as waiting for a rating."""
    part = metadata.get(HIDDEN_KEY) if metadata is not None else None
    return isinstance(part, Mapping) and part.get("rating") in (PENDING, PENDING_PRIORITY)


def _keeps_type(metadata: Mapping[str, Any]) -> bool:
    return bool(metadata[HIDDEN_KEY].get("rating") == PENDING_PRIORITY)


def _without_mark(metadata: Mapping[str, Any]) -> dict[str, Any]:
    part = dict(metadata[HIDDEN_KEY])
    part.pop("rating", None)
    return {**metadata, HIDDEN_KEY: part}


class Rater:
    """Rates waiting store items in the background (see the module docstring)."""

    def __init__(
        self, *, store: BaseMemoryStore, caller: StructuredCaller, config: TdaiConfig
    ) -> None:
        self.store = store
        self.caller = caller
        self.config = config
        self._cond = threading.Condition()
        self._waiting: dict[Scope, dict[str, int]] = {}
        """Memory ids waiting per scope, with their failures so far."""
        self._due: dict[Scope, float] = {}
        """When each scope's waiting memories may be tried next (`time.monotonic()`)."""
        self._busy = 0
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._report = RatingReport()

    # -- the writer's side --------------------------------------------------------------------

    def enqueue(self, scope: Scope, memory_id: str) -> None:
        """Queue one stored memory for rating (never blocks on the model)."""
        with self._cond:
            if self._stopped:
                return
            self._waiting.setdefault(scope, {}).setdefault(memory_id, 0)
            self._due.setdefault(scope, time.monotonic() + GATHER_SECONDS)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tdai-rating", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def report(self) -> RatingReport:
        """A copy of the counts so far."""
        with self._cond:
            waiting = sum(len(ids) for ids in self._waiting.values())
            return replace(self._report, waiting=waiting)

    def flush(self, deadline: float | None) -> bool:
        """Wait until no rating is due or running; `False` when some wait for a retry.

        `deadline` is a `time.monotonic()` value; `False` also when it came first.
        """
        with self._cond:
            now = time.monotonic()
            for scope, ids in self._waiting.items():  # never tried: no need to gather longer
                if scope in self._due and not any(ids.values()):
                    self._due[scope] = min(self._due[scope], now)
            self._cond.notify_all()
            while self._busy or any(due <= time.monotonic() for due in self._due.values()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
            return not self._waiting

    def close(self, timeout: float) -> None:
        """Rate what is due for at most `timeout` seconds, then stop."""
        self.flush(time.monotonic() + timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    # -- the worker ---------------------------------------------------------------------------

    def _next(self) -> tuple[Scope, list[str]] | None:
        """The scope due first and its waiting ids (taken), or `None` after `close`."""
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                due = [(at, i, s) for i, (s, at) in enumerate(self._due.items()) if at <= now]
                if due:
                    _, _, scope = min(due)
                    del self._due[scope]
                    ids = list(self._waiting.get(scope, {}))[:BATCH]
                    self._busy += 1
                    return scope, ids
                later = min(self._due.values(), default=None)
                self._cond.wait(None if later is None else max(later - now, 0.01))
            return None

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            scope, ids = job
            try:
                rated, error = self._rate(scope, ids)
            except Exception as exc:  # the store closed, a bug: retried like a failed call
                rated, error = set(), f"{type(exc).__name__}: {exc}"
                logger.debug("rating failed", exc_info=True)
            self._settle(scope, ids, rated, error)

    def _settle(self, scope: Scope, ids: list[str], rated: set[str], error: str | None) -> None:
        cfg = self.config.extraction
        with self._cond:
            waiting = self._waiting.get(scope, {})
            failures = 0
            for memory_id in ids:
                if memory_id in rated or memory_id not in waiting:
                    waiting.pop(memory_id, None)
                    continue
                waiting[memory_id] += 1
                failures = max(failures, waiting[memory_id])
            self._report.rated += len(rated)
            if error is not None:
                self._report.failed_calls += 1
                self._report.last_error = error
                _log_failure(len(ids), error)
            if waiting:
                wait = 0.0
                if failures:
                    wait = min(cfg.retry_base_seconds * 2 ** (failures - 1), cfg.retry_max_seconds)
                self._due[scope] = min(self._due.get(scope, float("inf")), time.monotonic() + wait)
            else:
                self._waiting.pop(scope, None)
            self._busy -= 1
            self._cond.notify_all()

    def _rate(self, scope: Scope, ids: list[str]) -> tuple[set[str], str | None]:
        """Rate one batch; returns the ids settled (rated, gone or no longer waiting)."""
        settled: set[str] = set()
        records: dict[str, MemoryRecord] = {}
        for memory_id in ids:
            record = self.store.get_memory(scope, memory_id)
            if record is None or not waits_for_rating(record.metadata):
                settled.add(memory_id)  # deleted, or rewritten with a priority of its own
            else:
                records[memory_id] = record
        if not records:
            return settled, None
        aliases = {f"r{i}": memory_id for i, memory_id in enumerate(records, 1)}
        texts = [records[m].content for m in aliases.values()]
        lang = detect_language(texts)
        call = self.caller.call(
            RatingAnswer,
            rating_system(lang),
            rating_user([{"id": a, "text": records[m].content} for a, m in aliases.items()]),
        )
        if call.data is None:
            return settled, call.error
        try:
            answer = RatingAnswer.model_validate(call.data)
        except ValueError as exc:
            return settled, f"invalid rating answer: {str(exc)[:200]}"
        updates: list[MemoryRecord] = []
        current = {m: self.store.get_memory(scope, m) for m in records}  # rewritten meanwhile?
        for rating in answer.ratings:
            target = aliases.get(rating.id.strip())
            if target is None or target in settled or not 0 <= rating.priority <= 100:
                continue  # an unknown id or an out-of-range priority: that memory waits
            record = records[target]
            if current[target] != record:
                continue  # rewritten or deleted since it was read: rated in its new form
            priority = steering_cap(rating.priority) if steers(record.content) else rating.priority
            updates.append(
                replace(
                    record,
                    priority=priority,
                    type=record.type if _keeps_type(record.metadata) else rating.type,
                    metadata=_without_mark(record.metadata),
                )
            )
            settled.add(target)
        if updates:
            # only the priority and type change: the text, write time and vector stay
            self.store.put_memories(scope, updates)
            logger.info("rated %d stored memories", len(updates))
        missing = len(records) - len(updates)
        return settled, (f"the answer left {missing} memories unrated" if missing else None)
