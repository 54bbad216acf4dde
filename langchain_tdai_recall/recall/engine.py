"""The recall engine: one user message in, the two injection blocks out (SPEC §2).

Recall's store work runs on worker threads and the caller waits at most `recall.timeout_ms` for
it, in sync and async use alike; the models it asks (the query embedder, a reranker) are waited
for on the caller's side, never on those threads (`recall.driver`). Past the deadline the caller
gets `None` (nothing is injected) and one WARNING; the late result is discarded. A backend
failure is handled the same way unless `recall.on_error="raise"`, and a failed reranker leaves
the fused order: the package's one failure policy (`_runtime.failure`) decides and logs both.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall._runtime.failure import log_failure, report_failure, report_timeout
from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.recall.driver import ModelCall, RecallSteps, adrive, drive
from langchain_tdai_recall.recall.gate import injected
from langchain_tdai_recall.recall.holds import HeldProfile, ProfileHolds
from langchain_tdai_recall.recall.prompt import (
    detect_language,
    format_memory_line,
    render_prepend_context,
    render_scene_navigation,
    render_system_context,
    truncation_suffix,
)
from langchain_tdai_recall.recall.rerank import Reranked, start_rerank
from langchain_tdai_recall.recall.search import (
    CANDIDATES_PER_RESULT,
    QueryVector,
    RankedHit,
    Searcher,
    SearchOutcome,
)
from langchain_tdai_recall.recall.when import AskedTime, asked_time
from langchain_tdai_recall.stores.base import BaseMemoryStore, Scope
from langchain_tdai_recall.text.budget import apply_budget
from langchain_tdai_recall.text.clauses import split_clauses
from langchain_tdai_recall.text.clean import clean_query, content_text
from langchain_tdai_recall.text.names import capitalised_names
from langchain_tdai_recall.text.tokens import estimate_tokens
from langchain_tdai_recall.types import (
    Language,
    MemoryChannel,
    MemoryRecord,
    RecalledMemory,
    RecallResult,
    RecallStrategy,
    SceneInfo,
)

if TYPE_CHECKING:
    from langchain_tdai_recall._runtime.breaker import StoreBreaker
    from langchain_tdai_recall.stores._index.layer import LayerIndex

__all__ = ["MIN_QUERY_CHARS", "RecallEngine"]

logger = logging.getLogger(__name__)

_NOTHING_INJECTED: Final = "skipping memory injection for this turn"
"""What a failed recall costs the turn (the failure policy's log line says it)."""

MIN_QUERY_CHARS = 2
"""Cleaned text shorter than this many code points skips the L1 search."""

MAX_STANDING_RULES = 50
"""At most this many standing rules (oldest first) go into the system context; the rest are
left to search (with a warning)."""

PROFILE_SCAN = 256
"""Most profile candidates (in profile order) whose lines are measured against the budget."""

PROFILE_BATCH = 32
"""Profile candidates read from the store at a time."""

PROFILE_MISSES = 8
"""After this many candidates in a row that do not fit, the profile is full: stop reading."""

MIN_PROFILE_LINE = 5
"""Below this many estimated tokens of budget left, no further line can fit: stop reading."""


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """What one recall is asked to do, beyond the user's text and scope."""

    system_prompt: str | None = None
    """The app's own system prompt: the turn-invariant language signal of `language="auto"`."""
    tools_guide: bool | tuple[str, ...] = True
    """Whether the caller has the memory tools (the guide is written only then): `True` all,
    or the names of those it has (the guide names only them)."""
    session_key: str | None = None
    """The conversation of the turn: its profile is held (`recall.holds`); `None` holds none."""
    now: dt.datetime | None = None
    """The turn's time, against which "last month" is resolved (default: the clock)."""


@dataclass(frozen=True, slots=True)
class _KeyMemories:
    """What a scope puts in the system context every turn, as chosen, read and rendered once."""

    rules: tuple[MemoryRecord, ...] = ()
    """Standing rules, oldest first."""
    pinned: tuple[MemoryRecord, ...] = ()
    """Memories pinned by priority, highest first."""
    profile: tuple[MemoryRecord, ...] = ()
    """The profile, in profile order."""
    refs: frozenset[int] = frozenset()
    """Row references of the rules and pinned memories (the memory block skips them)."""
    pinned_lines: tuple[str, ...] = ()
    """The pinned memories' lines."""
    profile_lines: tuple[str, ...] = ()
    """The profile's lines."""
    refs_by_id: Mapping[str, int] = field(default_factory=dict)
    """Memory id -> row reference of the rules and pinned memories (with `profile_rows`, what
    finds the scores this turn's search gave the system context's memories)."""
    profile_rows: tuple[tuple[int, str], ...] = ()
    """(row reference, last write time) of the profile's memories."""

    def held(self) -> HeldProfile:
        """The profile as a `HeldProfile` (what a session holds)."""
        return HeldProfile(
            records=self.profile, lines=self.profile_lines, rows=self.profile_rows, pinned=self.refs
        )


_NO_KEY_MEMORIES: Final = _KeyMemories()


class RecallEngine:
    """Builds `RecallResult`s for a store under a configuration."""

    def __init__(
        self,
        store: BaseMemoryStore,
        searcher: Searcher,
        config: TdaiConfig,
        *,
        executor: Executor,
        reranker: Any = None,
        rerank_executor: Executor | None = None,
        breaker: StoreBreaker | None = None,
    ) -> None:
        self.store = store
        self.searcher = searcher
        self.config = config
        self.reranker = reranker
        """Optional `BaseDocumentCompressor` that reorders and selects the candidates."""
        self._executor = executor
        self._rerank_executor = rerank_executor or executor
        self._breaker = breaker
        """Told whether the store work of each recall answered in time (`recall.driver`)."""
        self._tz: dt.tzinfo = config.tzinfo()
        self.holds = ProfileHolds()
        """The profile each live session was first shown (`recall.holds`)."""

    # -- public entry points ------------------------------------------------------------------

    def recall(
        self, user_text: object, scope: Scope, request: RecallRequest | None = None
    ) -> RecallResult | None:
        """Recall for one turn, waiting at most `recall.timeout_ms`."""
        cfg = self.config.recall
        if not cfg.enabled:
            return None
        deadline = time.monotonic() + cfg.timeout_ms / 1000
        try:
            return drive(
                lambda: self._recall(user_text, scope, request or RecallRequest(), deadline),
                executor=self._executor,
                deadline=deadline,
                breaker=self._breaker,
            )
        except TimeoutError:
            report_timeout(cfg.timeout_ms, on_error=cfg.on_error)
        except Exception as exc:
            report_failure(exc, action="recall", on_error=cfg.on_error, degraded=_NOTHING_INJECTED)
        return None

    async def arecall(
        self, user_text: object, scope: Scope, request: RecallRequest | None = None
    ) -> RecallResult | None:
        """Async version of `recall`; the event loop is never blocked."""
        cfg = self.config.recall
        if not cfg.enabled:
            return None
        deadline = time.monotonic() + cfg.timeout_ms / 1000
        try:
            return await adrive(
                lambda: self._recall(user_text, scope, request or RecallRequest(), deadline),
                executor=self._executor,
                deadline=deadline,
                breaker=self._breaker,
            )
        except TimeoutError:
            report_timeout(cfg.timeout_ms, on_error=cfg.on_error)
        except Exception as exc:
            report_failure(exc, action="recall", on_error=cfg.on_error, degraded=_NOTHING_INJECTED)
        return None

    # -- the work -----------------------------------------------------------------------------

    def _languages(self, query: str, request: RecallRequest) -> tuple[Language, Language]:
        """(memory block, system context) languages under `recall.language`."""
        setting = self.config.recall.language
        if setting != "auto":
            return setting, setting
        system: Language = detect_language(request.system_prompt) or "en"
        return detect_language(query) or system, system

    def _pinned(self, scope: Scope, language: Language) -> _KeyMemories:
        """Standing rules (oldest first), memories pinned by priority, and the profile.

        Chosen, read and rendered once per change of the scope's memories (the index's memo):
        a recall between two writes reuses them. The row references of the rules and pinned
        memories are what the memory block then skips (profile memories may still be shown
        there when the request is about them).
        """
        cfg = self.config.recall
        index = self.store.index(scope, "l1")
        if index is None:
            return _NO_KEY_MEMORIES
        threshold = cfg.pin_priority if cfg.pin_priority is not None else 101
        rule_threshold = min(
            threshold,
            cfg.pin_instruction_priority if cfg.pin_instruction_priority is not None else 101,
        )

        def choose() -> _KeyMemories:
            eligible = {"rules": 0, "pinned": 0}
            wanted = _pinned_candidates(
                index,
                index.pinned_rows(rule_threshold),
                threshold=threshold,
                rule_threshold=rule_threshold,
                max_pinned=cfg.max_pinned,
                eligible=eligible,
            )
            for count, limit, what in (
                (eligible["rules"], MAX_STANDING_RULES, "standing rules (priority -1)"),
                (eligible["pinned"], cfg.max_pinned, "memories pinned by priority"),
            ):
                if count > limit:
                    logger.warning(
                        "scope has %d %s; the first %d are pinned, the rest are left to the "
                        "profile and to search",
                        count,
                        what,
                        limit,
                    )
            profile = (
                self._profile(scope, index, set(wanted), cfg.profile_max_tokens, language)
                if cfg.profile_max_tokens is not None
                else []
            )
            records = self.store.memories_by_ref(scope, wanted)
            rules: list[tuple[int, MemoryRecord]] = []
            pinned: list[tuple[int, MemoryRecord]] = []
            for rowid in wanted:
                rec = records.get(rowid)
                if rec is None:
                    continue
                if rec.priority == -1 and rec.type == "instruction":
                    rules.append((rowid, rec))
                elif rec.priority >= (rule_threshold if rec.type == "instruction" else threshold):
                    pinned.append((rowid, rec))
            # ties of write time keep the order written (the row reference), not random ids
            rules.sort(key=lambda item: (item[1].created_at, item[0]))
            pinned.sort(key=lambda item: (-item[1].priority, item[1].created_at, item[0]))
            del rules[MAX_STANDING_RULES:], pinned[cfg.max_pinned :]
            refs = frozenset({rowid for rowid, _ in rules} | {rowid for rowid, _ in pinned})
            pinned_records = tuple(r for _, r in pinned)
            return _KeyMemories(
                rules=tuple(r for _, r in rules),
                pinned=pinned_records,
                # the profile was read and its lines written while measuring them
                profile=tuple(rec for rec, _, _ in profile),
                refs=refs,
                pinned_lines=tuple(
                    format_memory_line(r, tz=self._tz, language=language) for r in pinned_records
                ),
                profile_lines=tuple(line for _, line, _ in profile),
                refs_by_id={rec.id: rowid for rowid, rec in (*rules, *pinned)},
                profile_rows=tuple((rowid, rec.updated_at) for rec, _, rowid in profile),
            )

        return index.memo(
            (
                "key-memories",
                threshold,
                rule_threshold,
                cfg.max_pinned,
                cfg.profile_max_tokens,
                language,
            ),
            choose,
        )

    def _held(
        self, key: _KeyMemories, scope: Scope, language: Language, request: RecallRequest
    ) -> tuple[_KeyMemories, frozenset[int]]:
        """`key` with the profile its session holds, and the profile rows that hold leaves out.

        Without a session, a hold time, or any memory of the scope, `key` as chosen now.
        """
        cfg = self.config.recall
        if (
            request.session_key is None
            or not cfg.profile_hold_seconds
            or cfg.profile_max_tokens is None
            or key is _NO_KEY_MEMORIES
        ):
            return key, frozenset()
        index = self.store.index(scope, "l1")
        if index is None:
            return key, frozenset()

        def still_valid(held: HeldProfile) -> bool:
            hidden = index.excluded()
            for rowid, written in held.rows:
                meta = index.meta.get(rowid)
                if meta is None or meta.recency != written or rowid in hidden:
                    return False
            return True

        fresh = key.held()
        held = self.holds.choose(
            scope,
            request.session_key,
            (language, cfg.profile_max_tokens),
            fresh,
            hold_seconds=cfg.profile_hold_seconds,
            still_valid=still_valid,
        )
        if held is fresh:
            return key, frozenset()
        return (
            replace(key, profile=held.records, profile_lines=held.lines, profile_rows=held.rows),
            fresh.refs - held.refs,
        )

    def _profile(
        self,
        scope: Scope,
        index: LayerIndex,
        taken: set[int],
        budget: int,
        language: Language,
    ) -> list[tuple[MemoryRecord, str, int]]:
        """The profile: memories in profile order, with their lines and row references.

        As far as `budget` reaches: estimated tokens (`text.tokens`), a line costing its
        tokens plus one for its line break.

        Profile order: see `stores._index.profile`. A line that does not fit is skipped and
        later, shorter ones may still fit; reading stops after `PROFILE_MISSES` misses in a
        row, and at most `PROFILE_SCAN` candidates are read.
        """
        order = index.profile_rows(PROFILE_SCAN, taken)
        chosen: list[tuple[MemoryRecord, str, int]] = []
        used = misses = 0
        for start in range(0, len(order), PROFILE_BATCH):
            batch = order[start : start + PROFILE_BATCH]
            records = self.store.memories_by_ref(scope, batch)
            for rowid in batch:
                rec = records.get(rowid)
                if rec is None:
                    continue
                line = format_memory_line(rec, tz=self._tz, language=language)
                cost = estimate_tokens(line) + 1
                if used + cost <= budget:
                    chosen.append((rec, line, rowid))
                    used += cost
                    misses = 0
                else:
                    misses += 1
            if budget - used < MIN_PROFILE_LINE or misses >= PROFILE_MISSES:
                break
        return chosen

    def _rerank(
        self,
        query: str,
        scope: Scope,
        outcome: SearchOutcome,
        pinned_refs: frozenset[int],
        deadline: float,
    ) -> Generator[ModelCall, object, tuple[Reranked | None, str | None]]:
        """The reranker's verdict on the best fused candidates, or why there is none.

        Yields the reranker's call: the recall waits for it outside its worker thread.
        """
        cfg = self.config
        # no relevance floor: judging what the two legs rank low is the reranker's job
        pool = [h for h in outcome.hits if h.rowid not in pinned_refs][
            : cfg.recall.max_results * CANDIDATES_PER_RESULT
        ]
        if not pool:
            return None, None
        records = self.store.memories_by_ref(scope, [h.rowid for h in pool])
        try:
            call = start_rerank(
                self.reranker,
                query,
                pool,
                records,
                executor=self._rerank_executor,
                deadline=deadline,
                budget_s=cfg.recall.timeout_ms / 1000,
            )
            returned = yield ModelCall(call.future, call.timeout_s, call.timeout_error)
            return call.finish(returned), None
        except Exception as exc:  # the reranker must never break recall
            log_failure(exc, action="reranker", degraded="injecting the fused order")
            return None, f"reranker failed: {type(exc).__name__}: {exc}"

    def _query_embedding(
        self, query: str, scope: Scope, deadline: float, timings: dict[str, float]
    ) -> Generator[ModelCall, object, QueryVector]:
        """The query's vector for this recall's search, or why there is none.

        Started only when the search could use it; yields the embedder's call, which the
        recall waits for outside its worker thread. The embedding must come within
        `embedding.query_timeout_ms` of the recall's start, so the store work always keeps the
        rest of the recall budget, however long it took before the embedding started (a cold
        index, a loaded machine). The wait goes into `timings["embed"]`.
        """
        cfg = self.config
        if not self.searcher.wants_query_vector(scope, "l1", cfg.recall.strategy):
            return QueryVector(None, "no memory of the scope had a vector when recall began")
        embed_by = deadline - (cfg.recall.timeout_ms - cfg.embedding.query_timeout_ms) / 1000
        budget_ms = (embed_by - time.monotonic()) * 1000
        started = time.perf_counter()
        call = self.searcher.start_query_embedding(query, timeout_ms=budget_ms)
        if isinstance(call, QueryVector):
            return call
        try:
            raw = yield ModelCall(call.future, call.timeout_s, TimeoutError)
        except TimeoutError:
            return call.timed_out(cfg.embedding.query_timeout_ms)
        except Exception as exc:
            return call.failed(exc)
        finally:
            timings["embed"] = (time.perf_counter() - started) * 1000
        return call.vector(raw)

    def _part_embeddings(
        self,
        query: str,
        parts: tuple[str, ...],
        scope: Scope,
        deadline: float,
        timings: dict[str, float],
    ) -> Generator[ModelCall, object, tuple[QueryVector, list[QueryVector]]]:
        """The vectors of a multi-part message and of its parts, in one embedder call.

        As `_query_embedding`, with the parts (`text.clauses`) embedded in the same call; a
        message of one part (no `parts`) takes `_query_embedding` itself.
        """
        if not parts:
            embedded = yield from self._query_embedding(query, scope, deadline, timings)
            return embedded, []
        cfg = self.config
        none = [QueryVector(None, "no query vector") for _ in parts]
        if not self.searcher.wants_query_vector(scope, "l1", cfg.recall.strategy):
            why = "no memory of the scope had a vector when recall began"
            return QueryVector(None, why), none
        embed_by = deadline - (cfg.recall.timeout_ms - cfg.embedding.query_timeout_ms) / 1000
        budget_ms = (embed_by - time.monotonic()) * 1000
        started = time.perf_counter()
        call = self.searcher.start_query_embeddings([query, *parts], timeout_ms=budget_ms)
        if isinstance(call, QueryVector):
            return call, none
        try:
            raw = yield ModelCall(call.future, call.timeout_s, TimeoutError)
        except TimeoutError:
            return call.timed_out(cfg.embedding.query_timeout_ms), none
        except Exception as exc:
            return call.failed(exc), none
        finally:
            timings["embed"] = (time.perf_counter() - started) * 1000
        vectors = call.vectors(raw, len(parts) + 1)
        return vectors[0], vectors[1:]

    def _lead_blocked(self, text: str, scope: Scope) -> bool:
        """Whether `text` names a capitalised name the scope's memories never mention."""
        names = capitalised_names(text)
        if not names:
            return False
        index = self.store.index(scope, "l1")
        if index is None:
            return True
        return any(
            index.keyword_search(index.tokenizer.query(name), limit=1, allowed=None).found == 0
            for name in names
        )

    def _gate(
        self,
        outcome: SearchOutcome,
        text: str,
        scope: Scope,
        *,
        pinned_refs: frozenset[int],
        held_out: frozenset[int],
    ) -> list[RankedHit]:
        """The hits the gate lets through for one search (the message's, or one part's)."""
        cfg = self.config.recall
        keyword = outcome.strategy == "keyword"
        return injected(
            outcome,
            threshold=cfg.keyword_threshold if keyword else cfg.score_threshold,
            limit=cfg.max_results,
            exclude=pinned_refs,
            held_out=held_out,
            lead_share=cfg.lead_share,
            lead_blocked=not keyword and self._lead_blocked(text, scope),
        )

    def _block(
        self,
        scope: Scope,
        chosen: list[RankedHit],
        *,
        language: Language,
        rerank_scores: dict[int, float],
    ) -> tuple[list[RecalledMemory], list[str], int, int]:
        """The memory block's memories and lines (budgets applied), lines cut, lines dropped."""
        cfg = self.config.recall
        records = self.store.memories_by_ref(scope, [h.rowid for h in chosen])
        hits = [h for h in chosen if h.rowid in records]
        budget = apply_budget(
            [format_memory_line(records[h.rowid], tz=self._tz, language=language) for h in hits],
            per_line=cfg.max_chars_per_memory,
            total=cfg.max_total_recall_chars,
            suffix=truncation_suffix(language),
        )
        memories = []
        for hit, was_cut in zip(hits, budget.truncated, strict=False):
            rec = records[hit.rowid]
            memories.append(
                RecalledMemory(
                    id=rec.id,
                    content=rec.content,
                    score=hit.score,
                    type=rec.type,
                    scene_name=rec.scene_name,
                    keyword_score=hit.keyword_score,
                    embedding_score=hit.embedding_score,
                    rerank_score=rerank_scores.get(hit.rowid),
                    truncated=was_cut,
                )
            )
        return memories, budget.lines, sum(budget.truncated), budget.dropped

    def _system_context(
        self,
        *,
        persona: str | None,
        key: _KeyMemories,
        scenes: Sequence[SceneInfo],
        language: Language,
        request: RecallRequest,
    ) -> str | None:
        """The stable blocks of the system context, written in `language`."""
        tools = self.config.tools
        return render_system_context(
            persona=persona,
            rules=[r.content for r in key.rules],
            pinned=key.pinned_lines,
            profile=key.profile_lines,
            navigation=render_scene_navigation(scenes, language),
            language=language,
            tools_max_calls=(
                tools.max_calls_per_turn if tools.enabled and request.tools_guide else None
            ),
            tools=None if request.tools_guide is True else request.tools_guide or (),
        )

    def _search(
        self,
        query: str,
        scope: Scope,
        request: RecallRequest,
        pinned: int,
        deadline: float,
        *,
        embedded: QueryVector,
    ) -> tuple[SearchOutcome, AskedTime | None]:
        """The L1 search of a turn, with the time the message asks about (`recall.time_aware`)."""
        cfg = self.config.recall
        asked: AskedTime | None = None
        resolving = 0.0
        if cfg.time_aware:
            t_when = time.perf_counter()
            asked = asked_time(query, now=request.now, tz=self._tz)
            resolving = (time.perf_counter() - t_when) * 1000
        outcome = self.searcher.search(
            scope,
            "l1",
            query,
            limit=cfg.max_results + pinned,
            strategy=cfg.strategy,
            deadline=deadline,
            embedded=embedded,
            when=asked.window if asked is not None else None,
        )
        outcome.time_only = asked is not None and asked.only_time
        outcome.time_narrow = asked is not None and asked.narrow
        if cfg.time_aware:
            outcome.timings_ms["when"] = resolving
        return outcome, asked

    def _with_parts(
        self,
        chosen: list[RankedHit],
        parts: list[tuple[str, QueryVector]],
        scope: Scope,
        request: RecallRequest,
        deadline: float,
        *,
        pinned_refs: frozenset[int],
        held_out: frozenset[int],
        timings: dict[str, float],
    ) -> list[RankedHit]:
        """The message's choice, then what each part's own search lets through, to the limit.

        Each part (`text.clauses`) is searched with its own vector and gated on its own (the
        lead rule and the on-topic relaxation work per part); a part adds what the message's
        search did not choose, in the order of the parts.
        """
        if not parts:
            return chosen
        started = time.perf_counter()
        limit = self.config.recall.max_results
        out = list(chosen)
        seen = {h.rowid for h in out}
        for text, vector in parts:
            if len(out) >= limit:
                break
            outcome, _ = self._search(
                text, scope, request, len(pinned_refs), deadline, embedded=vector
            )
            for hit in self._gate(outcome, text, scope, pinned_refs=pinned_refs, held_out=held_out):
                if hit.rowid not in seen and len(out) < limit:
                    out.append(hit)
                    seen.add(hit.rowid)
        timings["parts"] = (time.perf_counter() - started) * 1000
        return out

    def _recall(
        self, user_text: object, scope: Scope, request: RecallRequest, deadline: float
    ) -> RecallSteps:
        """One recall, as store work that yields the model calls it waits for (`recall.driver`)."""
        cfg = self.config.recall
        started = time.perf_counter()
        timings: dict[str, float] = {}
        query = clean_query(content_text(user_text))
        language, system_language = self._languages(query, request)
        strategy: RecallStrategy = "skipped"
        error: str | None = None
        memories: list[RecalledMemory] = []
        lines: list[str] = []
        truncated = dropped = 0
        reranked = False
        pending = 0
        rerank_scores: dict[int, float] = {}
        outcome: SearchOutcome | None = None
        t_pinned = time.perf_counter()
        key, held_out = self._held(
            self._pinned(scope, system_language), scope, system_language, request
        )
        pinned_refs = key.refs
        timings["pinned"] = (time.perf_counter() - t_pinned) * 1000
        asked: AskedTime | None = None
        if len(query) >= MIN_QUERY_CHARS and cfg.max_results > 0:
            parts = split_clauses(query) if cfg.lead_share < 1.0 else ()
            embedded, part_vectors = yield from self._part_embeddings(
                query, parts, scope, deadline, timings
            )
            outcome, asked = self._search(
                query, scope, request, len(pinned_refs), deadline, embedded=embedded
            )
            strategy, error = outcome.strategy, outcome.error
            pending = outcome.pending_vectors
            timings.update(outcome.timings_ms)
            chosen: list[RankedHit] | None = None
            if self.reranker is not None:
                t_rerank = time.perf_counter()
                verdict, rerank_error = yield from self._rerank(
                    query, scope, outcome, pinned_refs, deadline
                )
                timings["rerank"] = (time.perf_counter() - t_rerank) * 1000
                if verdict is not None:
                    chosen, rerank_scores = verdict.hits[: cfg.max_results], verdict.scores
                    reranked = True
                elif rerank_error:
                    error = f"{error}; {rerank_error}" if error else rerank_error
            if chosen is None:
                chosen = self._with_parts(
                    self._gate(outcome, query, scope, pinned_refs=pinned_refs, held_out=held_out),
                    list(zip(parts, part_vectors, strict=True)),
                    scope,
                    request,
                    deadline,
                    pinned_refs=pinned_refs,
                    held_out=held_out,
                    timings=timings,
                )
            memories, lines, truncated, dropped = self._block(
                scope, chosen, language=language, rerank_scores=rerank_scores
            )
        t_docs = time.perf_counter()
        persona, all_scenes = self.store.documents.stable_context(scope)
        scenes = all_scenes[: cfg.max_scenes]
        timings["documents"] = (time.perf_counter() - t_docs) * 1000
        persona_text = persona.strip() if persona else None
        system = self._system_context(
            persona=persona_text,
            key=key,
            scenes=scenes,
            language=system_language,
            request=request,
        )
        timings["total"] = (time.perf_counter() - started) * 1000
        result = RecallResult(
            prepend_context=render_prepend_context(lines, language),
            append_system_context=system,
            memories=tuple(memories),
            persona=persona_text,
            scene_count=len(scenes),
            strategy=strategy,
            timings_ms=timings,
            truncated=truncated,
            dropped=dropped,
            error=error,
            standing_rules=key.rules,
            pinned=key.pinned,
            profile=key.profile,
            reranked=reranked,
            language=language,
            pending_vectors=pending,
            injected=_reached_model(key, memories, outcome),
            time_ranges=(
                tuple((r.first.isoformat(), r.last.isoformat()) for r in asked.ranges)
                if asked
                else ()
            ),
        )
        logger.debug(
            "recall strategy=%s memories=%d rules=%d pinned=%d total=%.1f ms timings=%s",
            strategy,
            len(memories),
            len(key.rules),
            len(key.pinned),
            timings["total"],
            timings,
        )
        return result


def _reached_model(
    key: _KeyMemories, block: Sequence[RecalledMemory], outcome: SearchOutcome | None
) -> tuple[RecalledMemory, ...]:
    """Every memory that reached the model, in reading order, with the scores search gave it.

    The system context's standing rules, pinned memories and profile come first (with this
    turn's search scores where the search scored them, else `None`), then the memory block.
    """
    scored = {h.rowid: h for h in outcome.hits} if outcome is not None else {}
    refs = {
        **key.refs_by_id,
        **{rec.id: ref for rec, (ref, _) in zip(key.profile, key.profile_rows, strict=False)},
    }
    channels: tuple[tuple[MemoryChannel, tuple[MemoryRecord, ...]], ...] = (
        ("standing_rule", key.rules),
        ("pinned", key.pinned),
        ("profile", key.profile),
    )
    system = []
    for channel, records in channels:
        for rec in records:
            hit = scored.get(refs.get(rec.id, -1))
            system.append(
                RecalledMemory(
                    id=rec.id,
                    content=rec.content,
                    score=hit.score if hit is not None else None,
                    type=rec.type,
                    scene_name=rec.scene_name,
                    keyword_score=hit.keyword_score if hit is not None else None,
                    embedding_score=hit.embedding_score if hit is not None else None,
                    channel=channel,
                )
            )
    return (*system, *block)


def _pinned_candidates(
    index: LayerIndex,
    rows: list[tuple[int, int]],
    *,
    threshold: int,
    rule_threshold: int,
    max_pinned: int,
    eligible: dict[str, int],
) -> list[int]:
    """The row references of the records the pinned context injects, and no more.

    The same choice as sorting the records (standing rules by age, at most
    `MAX_STANDING_RULES`; pinned memories by priority, then age, then the order written, at most
    `max_pinned`), made on the index's row fields, so a scope with thousands of high-priority
    memories reads a few records per recall instead of all of them. `eligible` receives how
    many rules and pinned memories there are in all, for the warning.
    """
    rules: list[tuple[str, int]] = []
    candidates: list[tuple[int, str, int]] = []
    for rowid, priority in rows:
        meta = index.meta.get(rowid)
        if meta is None:
            continue
        if priority == -1 and meta.kind == "instruction":
            rules.append((meta.created, rowid))
        elif priority >= (rule_threshold if meta.kind == "instruction" else threshold):
            candidates.append((-priority, meta.created, rowid))
    eligible["rules"], eligible["pinned"] = len(rules), len(candidates)
    rules.sort()
    candidates.sort()
    return [r[-1] for r in rules[:MAX_STANDING_RULES]] + [
        c[-1] for c in candidates[: max(max_pinned, 0)]
    ]
