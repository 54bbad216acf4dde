"""Consolidation: new memories against the scope's stored ones → validated writes.

For each window's new memories, before anything is written:

1. **Exact duplicates** (same fingerprint, `text.fingerprint`) of a stored memory or of an
   earlier memory of the same batch are dropped without a model call.
2. **Candidates** come from the same scope only, through the search recall uses
   (`recall.search.Searcher`): the best `candidate_top_k` stored memories whose relevance
   (`RankedHit.score`, 0..1: 0.7 · cosine + 0.3 · keyword coverage) reaches `candidate_floor`,
   plus earlier memories of the same batch that reach it too (G-X8). The new memories' own
   vectors, computed once per batch for their rows, are the query vectors; without them (no
   embedder, or the embedder failed) the keyword leg alone decides. A memory with no
   candidate is added without asking the model; a batch with none costs no call.
3. **One decision call** per batch: add / update / merge / delete / skip for every new memory.
4. **Validation** (G-X9): targets must be candidates of that memory; a decision for an unknown
   memory is ignored; a missing or unknown decision means add; update with several targets is a
   merge; update, merge or delete without a valid target is an add; a skip without candidates
   is an add. Merged priorities stay in 0..100, and -1 survives only if an input had it (a
   merge cannot mint an absolute rule); a merge with steering text (`extraction.steers`) is
   capped at `STEERING_PRIORITY_CAP`. Merged activity times must parse and are the earliest
   start and latest end of the inputs when the model gives none (compared as instants, G-X11).
5. **Stable identity** (G-X10): an update keeps the target's id and creation time; a merge keeps
   the oldest target's id and creation time and records the absorbed ids as `merged` versions;
   situation label, session and sources are carried over, not replaced.

The result is a `Plan`: rows to write and ids to delete. The pipeline embeds the plan's texts and
then applies it in one transaction with the cursor move (`store._formation.commit`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from langchain_core.runnables import RunnableConfig

from langchain_tdai_recall.formation._llm import CallResult, StructuredCaller
from langchain_tdai_recall.formation.config import ExtractionConfig
from langchain_tdai_recall.formation.extraction import (
    NewMemory,
    parse_activity_time,
    steering_cap,
    steers,
)
from langchain_tdai_recall.formation.prompts import Lang, consolidation_system, consolidation_user
from langchain_tdai_recall.formation.schemas import (
    ConsolidationAnswer,
    Decision,
    InvalidAnswerError,
    read_consolidation,
)
from langchain_tdai_recall.recall.search import EMBEDDING_WEIGHT, Searcher
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.text.fingerprint import content_fingerprint
from langchain_tdai_recall.text.tokenize import Query
from langchain_tdai_recall.types import Change, MemoryRecord, Scope, Strategy, iso_utc

__all__ = ["DECISIONS", "Consolidator", "Plan", "PlannedWrite", "relevance"]

logger = logging.getLogger(__name__)

DECISIONS: Final = ("add", "update", "merge", "delete", "skip", "duplicate")
"""Decision totals reported per run; `duplicate` = exact duplicates dropped before the model."""

_SOURCE_LIMIT: Final = 50
_ELLIPSIS: Final = "…"

Embed = Callable[[list[str]], "npt.NDArray[np.float32] | None"]
"""Embeds texts with the store's embedder: L2-normalised rows, all zero where unusable, or
`None` when the embedder failed (`_embedding.upkeep.VectorUpkeep.embed_texts`)."""


@dataclass(slots=True)
class PlannedWrite:
    """One row the plan writes."""

    record: MemoryRecord
    vector: npt.NDArray[np.float32] | None
    """Known embedding of `record.content`, or `None` (embedded before the commit when an
    embedder is at hand, else later by the vector upkeep)."""
    change: Change = "update"
    related: tuple[str, ...] = ()
    new: bool = True
    """A new memory (checked again for exact duplicates at commit) rather than a stored one."""


@dataclass(slots=True)
class Plan:
    """What consolidation decided for one batch."""

    writes: list[PlannedWrite] = field(default_factory=list)
    deletes: list[tuple[str, Change, tuple[str, ...]]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DECISIONS, 0))
    invalid_decisions: int = 0
    """Decisions that named unknown memories or targets and fell back to add (or were ignored)."""
    call: CallResult | None = None
    """The decision call, when one was made."""
    error: str | None = None
    """Set when the decision call failed: the batch must not be written."""
    candidates: bool = False
    """Whether any stored or earlier memory was similar enough to be offered as a candidate."""


@dataclass(slots=True)
class _Slot:
    record: MemoryRecord
    vector: npt.NDArray[np.float32] | None
    new: bool
    change: Change = "update"
    related: list[str] = field(default_factory=list)
    alive: bool = True
    changed: bool = False


@dataclass(slots=True)
class _Batch:
    """The new memories of one plan, their candidates, and the stored memories they claim."""

    fresh: Sequence[NewMemory]
    new_slots: list[_Slot]
    stored: dict[str, MemoryRecord]
    offered: list[list[str]]
    existing: dict[str, _Slot] = field(default_factory=dict)
    """Stored id → its slot, once a decision targets it."""
    gone: set[str] = field(default_factory=set)
    """Stored ids deleted by an earlier decision of this batch."""

    def target(self, alias: str, i: int) -> _Slot | None:
        """The slot a decision for new memory `i` may target as `alias`, or `None`."""
        if alias not in self.offered[i]:
            return None
        if alias.startswith("n"):
            j = int(alias[1:]) - 1
            slot = self.new_slots[j]
            return slot if slot.alive and j < i else None
        record = self.stored[alias]
        if record.id in self.gone:
            return None
        slot = self.existing.setdefault(record.id, _Slot(record, None, False))
        return slot if slot.alive else None


@dataclass(frozen=True, slots=True)
class _Fold:
    targets: list[_Slot]
    memory: NewMemory
    mine: _Slot
    decision: Decision | None
    action: str
    now: str


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + _ELLIPSIS


def _now() -> str:
    return iso_utc()


class Consolidator:
    """Plans the writes of one batch of new memories in one scope."""

    def __init__(
        self,
        *,
        store: BaseMemoryStore,
        searcher: Searcher,
        config: ExtractionConfig,
        tz: Any,
        timezone_name: str,
        embed: Embed | None,
    ) -> None:
        """Plan writes in `store`.

        `embed` embeds the new memories of a batch (background formation); without it
        (the agent's memory tool, during a turn) candidates are searched like a recall query,
        with the query embedding bounded by `embedding.query_timeout_ms`, and the rows are
        written without vectors for the upkeep to fill.
        """
        self.store = store
        self.searcher = searcher
        self.config = config
        self.tz = tz
        self.timezone_name = timezone_name
        self.embed = embed

    # -- public --------------------------------------------------------------------------------

    def plan(
        self,
        scope: Scope,
        scope_id: int,
        new: Sequence[NewMemory],
        *,
        session_key: str,
        language: Lang,
        caller: StructuredCaller | None,
        run_config: RunnableConfig | None = None,
        stored: MemoryRecord | None = None,
    ) -> Plan:
        """Decide what to write for `new` (see the module docstring).

        `stored`: the one new memory is already stored as this record (the memory tool stores
        first and consolidates in the background): it is neither its own duplicate nor its own
        candidate, and the plan's rows for it carry its id and creation time.
        """
        key = (scope.user_id, scope.agent_id)
        plan = Plan()
        now = _now()
        fresh = (
            list(new) if stored is not None else self._drop_exact_duplicates(scope_id, new, plan)
        )
        if not fresh:
            return plan
        vectors = self.embed([m.content for m in fresh]) if self.embed is not None else None
        slots = [
            _Slot(self._new_record(m, key, session_key, now), _row(vectors, i), True)
            for i, m in enumerate(fresh)
        ]
        if stored is not None:
            slots[0].record = replace(slots[0].record, id=stored.id, created_at=stored.created_at)
        candidates, offered = self._candidates(
            scope, fresh, vectors, exclude=stored.id if stored is not None else None
        )
        asks = self.config.enable_dedup and caller is not None
        if not asks or not any(offered):
            plan.counts["add"] += len(slots)
            plan.writes = [PlannedWrite(s.record, s.vector) for s in slots]
            plan.candidates = any(offered)
            return plan
        plan.candidates = True
        assert caller is not None
        call = caller.call(
            ConsolidationAnswer,
            consolidation_system(language, language=language, timezone=self.timezone_name),
            consolidation_user(
                candidates=[self._candidate_item(a, r) for a, r in candidates.items()],
                new=[self._new_item(f"n{i + 1}", m, offered[i]) for i, m in enumerate(fresh)],
            ),
            config=run_config,
        )
        plan.call = call
        if call.data is None:
            plan.error = call.error or "the consolidation call failed"
            return plan
        try:
            decisions = read_consolidation(call.data).answer.decisions
        except InvalidAnswerError as exc:
            plan.error = f"invalid consolidation answer: {exc}"
            return plan
        self._apply(plan, _Batch(fresh, slots, candidates, offered), decisions, now)
        return plan

    # -- steps ---------------------------------------------------------------------------------

    def _drop_exact_duplicates(
        self, scope_id: int, new: Sequence[NewMemory], plan: Plan
    ) -> list[NewMemory]:
        known = self.store.formation.existing_duplicates(scope_id, [m.content for m in new])
        seen: set[str] = set()
        fresh: list[NewMemory] = []
        for memory in new:
            key = content_fingerprint(memory.content)
            if key in known or key in seen:
                plan.counts["duplicate"] += 1
                continue
            seen.add(key)
            fresh.append(memory)
        return fresh

    def _new_record(
        self, m: NewMemory, scope: tuple[str, str | None], session_key: str, now: str
    ) -> MemoryRecord:
        return MemoryRecord(
            id=f"m_{uuid.uuid4().hex}",
            content=m.content,
            type=m.type,
            scene_name=m.situation,
            priority=m.priority,
            activity_start_time=m.activity_start_time,
            activity_end_time=m.activity_end_time,
            user_id=scope[0],
            agent_id=scope[1],
            session_key=session_key,
            source_message_ids=m.source_ids,
            created_at=now,
            updated_at=now,
        )

    def embed_missing(self, plan: Plan) -> None:
        """Embed the texts of the plan's writes that have no vector yet (before the commit)."""
        missing = [w for w in plan.writes if w.vector is None]
        if not missing or self.embed is None:
            return
        vectors = self.embed([w.record.content for w in missing])
        if vectors is not None:
            for write, vector in zip(missing, vectors, strict=True):
                write.vector = _usable(vector)

    def _candidates(
        self,
        scope: Scope,
        fresh: Sequence[NewMemory],
        vectors: npt.NDArray[np.float32] | None,
        *,
        exclude: str | None = None,
    ) -> tuple[dict[str, MemoryRecord], list[list[str]]]:
        """(alias → stored candidate, per new memory the aliases offered to it).

        A stored memory is offered when its relevance to the new memory (the search's `score`)
        reaches `candidate_floor`, best first, at most `candidate_top_k`; an earlier memory of
        the batch when its relevance, computed the same way, does.
        """
        floor = self.config.candidate_floor
        top_k = self.config.candidate_top_k
        stored: dict[str, MemoryRecord] = {}
        alias_of: dict[str, str] = {}
        offered: list[list[str]] = []
        ranked: list[list[int]] = []
        for i, memory in enumerate(fresh):
            vector = _usable(_row(vectors, i))
            strategy: Strategy
            query_vector: npt.NDArray[np.float32] | None
            if self.embed is None:  # a query like recall's: embedded within its timeout
                strategy, query_vector = "hybrid", None
            elif vector is not None:
                strategy, query_vector = "hybrid", vector
            else:  # the batch could not be embedded: do not ask the embedder once per memory
                strategy, query_vector = "keyword", None
            outcome = self.searcher.search(
                scope,
                "l1",
                memory.content,
                limit=top_k + (exclude is not None),  # the excluded memory finds itself
                strategy=strategy,
                query_vector=query_vector,
            )
            ranked.append([h.rowid for h in outcome.top(top_k + (exclude is not None), floor)])
        refs = sorted({r for rows in ranked for r in rows})
        records = self.store.memories_by_ref(scope, refs) if refs else {}
        tokenizer = self.store.tokenizer
        for i, memory in enumerate(fresh):
            mine: list[str] = []
            for rowid in ranked[i]:
                record = records.get(rowid)
                if record is None or record.id == exclude or len(mine) >= top_k:
                    continue
                if record.id not in alias_of:
                    alias_of[record.id] = f"c{len(alias_of) + 1}"
                    stored[alias_of[record.id]] = record
                mine.append(alias_of[record.id])
            if i:  # earlier memories of this batch (G-X8)
                query = tokenizer.query(memory.content)
                mine += [
                    f"n{j + 1}"
                    for j in range(i)
                    if relevance(
                        query,
                        tokenizer.document_tokens(fresh[j].content),
                        _row(vectors, i),
                        _row(vectors, j),
                    )
                    >= floor
                ]
            offered.append(mine)
        return stored, offered

    def _time_text(self, start: str | None, end: str | None) -> str:
        if start and end:
            return f"{start} .. {end}"
        return start or end or ""

    def _candidate_item(self, alias: str, record: MemoryRecord) -> dict[str, object]:
        item: dict[str, object] = {
            "id": alias,
            "type": record.type,
            "priority": record.priority,
            "text": record.content,
        }
        when = self._time_text(record.activity_start_time, record.activity_end_time)
        if when or record.timestamp:
            item["time"] = when or record.timestamp
        if record.scene_name:
            item["situation"] = record.scene_name
        item["stored"] = record.created_at[:10]
        return item

    def _new_item(self, alias: str, m: NewMemory, offered: list[str]) -> dict[str, object]:
        item: dict[str, object] = {
            "id": alias,
            "type": m.type,
            "priority": m.priority,
            "text": m.content,
        }
        when = self._time_text(m.activity_start_time, m.activity_end_time)
        if when:
            item["time"] = when
        if m.situation:
            item["situation"] = m.situation
        item["candidates"] = offered
        return item

    # -- applying decisions ----------------------------------------------------------------------

    def _apply(
        self,
        plan: Plan,
        batch: _Batch,
        decisions: Sequence[Decision],
        now: str,
    ) -> None:
        by_new: dict[int, Decision] = {}
        for d in decisions:
            key = d.new_id.strip()
            index = int(key[1:]) - 1 if key[:1] == "n" and key[1:].isdigit() else -1
            if not 0 <= index < len(batch.fresh) or index in by_new:
                plan.invalid_decisions += 1
                continue
            by_new[index] = d
        added: list[_Slot] = []
        for i, memory in enumerate(batch.fresh):
            mine = batch.new_slots[i]
            decision = by_new.get(i)
            action, targets = self._validated(plan, batch, i, decision)
            plan.counts[action] += 1
            if action == "skip":
                mine.alive = False
            elif action in ("add", "delete"):
                for t in targets:  # delete: the contradicted memories go, the new one is added
                    t.alive = False
                    batch.gone.add(t.record.id)
                    plan.deletes.append((t.record.id, "delete", (mine.record.id,)))
                added.append(mine)
            else:
                mine.alive = False
                self._combine(plan, _Fold(targets, memory, mine, decision, action, now))
        plan.writes += [PlannedWrite(s.record, s.vector) for s in added if s.alive]
        plan.writes += [
            PlannedWrite(s.record, None, change=s.change, related=tuple(s.related), new=False)
            for s in batch.existing.values()
            if s.alive and s.changed
        ]

    @staticmethod
    def _validated(
        plan: Plan, batch: _Batch, i: int, decision: Decision | None
    ) -> tuple[str, list[_Slot]]:
        """The action actually taken for new memory `i`, and its valid target slots."""
        action = decision.action if decision is not None else "add"
        targets: list[_Slot] = []
        for alias in dict.fromkeys(t.strip() for t in (decision.target_ids if decision else [])):
            slot = batch.target(alias, i)
            if slot is None:
                plan.invalid_decisions += 1
            elif slot is not batch.new_slots[i] and slot not in targets:
                targets.append(slot)
        if action == "skip" and not batch.offered[i]:
            plan.invalid_decisions += 1
            return "add", []
        if action == "delete":
            targets = [t for t in targets if not t.new]  # only stored memories can be deleted
        if action in ("update", "merge", "delete") and not targets:
            return "add", []
        if action == "update" and len(targets) > 1:
            return "merge", targets
        if action in ("add", "skip"):
            return action, []
        return action, targets

    def _combine(self, plan: Plan, fold: _Fold) -> None:
        """Fold the new memory (and for a merge, the other targets) into the surviving target."""
        targets, memory, mine, decision = fold.targets, fold.memory, fold.mine, fold.decision
        stored_targets = sorted(
            (t for t in targets if not t.new), key=lambda t: t.record.created_at
        )
        survivor = stored_targets[0] if stored_targets else targets[0]
        others = [t for t in targets if t is not survivor]
        inputs = [survivor.record, *(t.record for t in others), mine.record]
        content = (decision.content or "").strip() if decision is not None else ""
        if not content and fold.action == "update":
            content = memory.content  # the correction replaces the old text
        elif not content:  # a merge without a combined text: keep every input's text
            glue = "；" if _is_cjk(memory.content) else " "
            content = glue.join(dict.fromkeys(r.content for r in inputs))
        content = _cut(content, self.config.content_max_chars)
        kind = decision.type if decision is not None and decision.type else survivor.record.type
        given = decision.priority if decision is not None else None
        if any(r.priority == -1 for r in inputs):
            priority = -1  # a standing rule stays one; a merge never mints one
        elif given is not None and given != -1:
            priority = min(max(given, 0), 100)
        else:
            priority = max(r.priority for r in inputs)
        if memory.steered or steers(content):  # steering text is never pinned, whatever merged
            priority = steering_cap(priority)
        start, end = self._times(decision, inputs)
        sources = tuple(dict.fromkeys(s for r in inputs for s in r.source_message_ids))
        survivor.record = replace(
            survivor.record,
            content=content,
            type=kind,
            priority=priority,
            scene_name=survivor.record.scene_name or mine.record.scene_name,
            activity_start_time=start,
            activity_end_time=end,
            source_message_ids=sources[:_SOURCE_LIMIT],
            updated_at=fold.now,
        )
        survivor.vector = None
        survivor.changed = True
        if fold.action == "merge" or others:
            survivor.change = "merge"
        for other in others:
            other.alive = False
            if not other.new:
                survivor.related.append(other.record.id)
                plan.deletes.append((other.record.id, "merged", (survivor.record.id,)))

    def _times(
        self, decision: Decision | None, inputs: Sequence[MemoryRecord]
    ) -> tuple[str | None, str | None]:
        start = parse_activity_time(decision.activity_start, self.tz) if decision else None
        end = parse_activity_time(decision.activity_end, self.tz, end=True) if decision else None
        if start is None:
            parsed = [parse_activity_time(r.activity_start_time, self.tz) for r in inputs]
            known = [p for p in parsed if p is not None]
            start = min(known, key=lambda p: p[1]) if known else None
        if end is None:
            parsed = [parse_activity_time(r.activity_end_time, self.tz, end=True) for r in inputs]
            known = [p for p in parsed if p is not None]
            end = max(known, key=lambda p: p[1]) if known else None
        if start is not None and end is not None and end[1] < start[1]:
            end = None
        return (start[0] if start else None), (end[0] if end else None)


def _row(vectors: npt.NDArray[np.float32] | None, i: int) -> npt.NDArray[np.float32] | None:
    return None if vectors is None else vectors[i]


def _usable(vector: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32] | None:
    """`vector`, or `None` when it is all zeros (the embedder's answer was unusable)."""
    return vector if vector is not None and bool(np.any(vector)) else None


def relevance(
    query: Query,
    document: Sequence[str],
    query_vector: npt.NDArray[np.float32] | None,
    document_vector: npt.NDArray[np.float32] | None,
) -> float:
    """The search's relevance (`recall.search`) of one document to a query.

    The weighted share of the query's units the document covers, mixed with the cosine when
    both have vectors.
    """
    tokens = set(document)
    total = sum(u.weight for u in query.units)
    covered = sum(
        u.weight * (1.0 if any(b in tokens for b in u.boosts) else u.base_strength)
        for u in query.units
        if u.base in tokens or any(b in tokens for b in u.boosts)
    )
    coverage = min(covered / total, 1.0) if total > 0 else 0.0
    q, d = _usable(query_vector), _usable(document_vector)
    if q is None or d is None:
        return coverage
    cosine = max(float(q @ d), 0.0)
    return EMBEDDING_WEIGHT * cosine + (1 - EMBEDDING_WEIGHT) * coverage


def _is_cjk(text: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" for ch in text)
