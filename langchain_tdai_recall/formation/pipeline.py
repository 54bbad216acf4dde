"""One formation run of one scope, end to end, exactly once.

A run holds the scope's lease (`store._formation`, across processes) and, for each session with
messages past its cursor, repeats until nothing is left, the run's window budget is spent or a
window fails:

1. read the next window past the cursor (bounded; fewer messages after repeated failures, so a
   window too big for the model's output limit is split instead of failing forever);
2. ask the model for memories (`extraction`), validate them;
3. plan the writes against the scope's memories (`consolidation`), embed their texts (with the
   store's embedder, through `_embedding.upkeep.VectorUpkeep.embed_texts`; a text that could not be
   embedded is stored without a vector and the upkeep embeds it later);
4. commit the writes and move the cursor in one transaction, provided the lease is still ours
   and the cursor has not moved.

A window is never committed past a fact its answer carried and formation did not store. A
failed call, an invalid answer, or one holding junk or an item that cannot be repaired
(`schemas.Read.sound`; the same for the consolidation answer) leaves the cursor where it was and
schedules a retry with exponential backoff (`extraction.retry_base_seconds` …
`retry_max_seconds`); nothing is skipped. An answer with more memories than one window may keep
(`max_memories_per_session`) is asked again for each half of the window, at once, so none is
cut; only a one-message window keeps its most important ones.
After the windows, the new memories are folded into the scenes and, when due, the persona
(`scenes`). Every run ends with a `tdai_extraction` custom event and returns an
`ExtractionReport`; no failure propagates (a turn never sees one).
"""

from __future__ import annotations

import concurrent.futures.thread
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from langchain_core.callbacks import Callbacks, dispatch_custom_event
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.formation._llm import CallResult, StructuredCaller
from langchain_tdai_recall.formation.consolidation import Consolidator
from langchain_tdai_recall.formation.extraction import (
    Validated,
    Window,
    build_window,
    validate_answer,
    window_items,
    window_language,
)
from langchain_tdai_recall.formation.prompts import (
    Lang,
    detect_language,
    extraction_system,
    extraction_user,
)
from langchain_tdai_recall.formation.report import EXTRACTION_EVENT, ExtractionReport, ReportBuilder
from langchain_tdai_recall.formation.scenes import SceneWriter
from langchain_tdai_recall.formation.schemas import (
    ExtractionAnswer,
    InvalidAnswerError,
    read_extraction,
)
from langchain_tdai_recall.recall.search import Searcher
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.formation import (
    BaseFormationState,
    LeaseOwner,
    PendingSession,
    Upsert,
)
from langchain_tdai_recall.types import Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._embedding.upkeep import VectorUpkeep

__all__ = ["FormationEngine", "RunRequest", "RunResult", "ScopeLock", "log_reason", "zone_name"]

logger = logging.getLogger(__name__)

_LEASE_MARGIN_S: Final = 60.0
"""Lease time beyond one model call; the lease is renewed before every call."""

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What one run should do."""

    scope_id: int
    scope: Scope
    sessions: tuple[str, ...] | None = None
    """Only these sessions (`None`: every session with pending messages)."""
    force: bool = False
    """Ignore retry backoff and the scene interval (explicit `extract()` / flush)."""
    reason: str = "manual"
    """Why the run happens (`turns`, `idle`, `flush`, `open`, `close`, `manual`, …)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished run."""

    report: ExtractionReport
    formed_sessions: tuple[str, ...]
    """Sessions with at least one committed window (their warm-up advances)."""
    failed_sessions: tuple[str, ...]
    """Sessions whose window failed (retried after their backoff)."""
    scenes_due_at: float | None
    """When the scene update the run postponed is due (epoch seconds), or `None`."""
    locked: bool = False
    """Another process holds the scope's lease."""


class ScopeLock:
    """A scope's in-process formation lock, dropped by its engine once nobody uses it.

    Taken from `scope_lock`, then `acquire`d once: a failed `acquire` or the `release` after a
    successful one ends that caller's use.
    """

    __slots__ = ("_engine", "_lock", "scope_id", "users")

    def __init__(self, engine: FormationEngine, scope_id: int) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self.scope_id = scope_id
        self.users = 0

    def acquire(self, timeout: float = -1) -> bool:
        """Take the lock within `timeout` seconds (-1: wait as long as it takes)."""
        if self._lock.acquire(timeout=timeout):
            return True
        self._engine._let_go(self)
        return False

    def release(self) -> None:
        """Give the lock back after a successful `acquire`."""
        self._lock.release()
        self._engine._let_go(self)


class FormationEngine:
    """Runs formation for one `TdaiMemory`: the models, the store and the settings."""

    def __init__(
        self,
        *,
        store: BaseMemoryStore,
        searcher: Searcher,
        config: TdaiConfig,
        upkeep: VectorUpkeep | None,
        model: BaseChatModel,
        scene_model: BaseChatModel | None,
        callbacks: Callbacks = None,
    ) -> None:
        self.store = store
        self.config = config
        self.upkeep = upkeep
        self.callbacks = callbacks
        self.records: BaseFormationState = store.formation
        self.owner = LeaseOwner(token=uuid.uuid4().hex)
        ex = config.extraction
        self.caller = StructuredCaller(
            model, method=ex.structured_output, timeout_s=ex.timeout_seconds
        )
        self.scene_caller = StructuredCaller(
            scene_model or model, method=ex.structured_output, timeout_s=ex.timeout_seconds
        )
        self._locks: dict[int, ScopeLock] = {}
        """The locks some caller has asked for and not yet released (dropped when idle)."""
        self._locks_guard = threading.Lock()
        self.tz = config.tzinfo()
        self.timezone_name = zone_name(config.timezone, self.tz)
        self.consolidator = Consolidator(
            store=store,
            searcher=searcher,
            config=ex,
            tz=self.tz,
            timezone_name=self.timezone_name,
            embed=upkeep.embed_texts if upkeep is not None else None,
        )
        self.scenes = SceneWriter(
            store=store, config=config.persona, timezone_name=self.timezone_name
        )
        self.lease_ttl_s = ex.timeout_seconds + _LEASE_MARGIN_S

    # -- entry point ---------------------------------------------------------------------------

    def scope_lock(self, scope_id: int) -> ScopeLock:
        """The in-process lock of a scope (the lease covers other processes).

        Call `acquire` on it next; the lock is forgotten once no caller holds or waits for it,
        so a process serving many users keeps none for idle scopes (issue 23).
        """
        with self._locks_guard:
            lock = self._locks.get(scope_id)
            if lock is None:
                lock = self._locks[scope_id] = ScopeLock(self, scope_id)
            lock.users += 1
            return lock

    def _let_go(self, lock: ScopeLock) -> None:
        with self._locks_guard:
            lock.users -= 1
            if lock.users <= 0 and self._locks.get(lock.scope_id) is lock:
                del self._locks[lock.scope_id]

    def held_scope_locks(self) -> int:
        """Scopes whose lock some caller holds or waits for."""
        with self._locks_guard:
            return len(self._locks)

    def run(
        self,
        request: RunRequest,
        *,
        config: RunnableConfig | None = None,
        progress: Progress | None = None,
        wait_s: float | None = None,
    ) -> RunResult:
        """One run, traced as the runnable `tdai_extraction`; never raises.

        Waits up to `wait_s` (`None`: as long as it takes) for another run of the same scope
        in this process to finish; if it does not, the result is `locked`.
        """
        lock = self.scope_lock(request.scope_id)
        if not lock.acquire(timeout=-1 if wait_s is None else max(wait_s, 0.0)):
            builder = ReportBuilder()
            builder.bump("scopes")
            builder.bump("locked_scopes")
            return RunResult(builder.build(), (), (), None, locked=True)
        try:
            return self._run_traced(request, config, progress)
        finally:
            lock.release()

    def _run_traced(
        self,
        request: RunRequest,
        config: RunnableConfig | None,
        progress: Progress | None,
    ) -> RunResult:
        runnable = RunnableLambda(self._traced, name=EXTRACTION_EVENT)
        run_config: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        if self.callbacks is not None and not run_config.get("callbacks"):
            run_config["callbacks"] = self.callbacks
        run_config.setdefault("run_name", EXTRACTION_EVENT)
        try:
            result: RunResult = runnable.invoke((request, progress), run_config)
        except Exception as exc:  # tracing or a callback failed; the run's work stands
            logger.warning(
                "a formation run of scope #%d failed (%s); details at DEBUG",
                request.scope_id,
                type(exc).__name__,
            )
            logger.debug("formation run of %s failed: %s", request.scope, exc)
            builder = ReportBuilder()
            builder.error(f"{type(exc).__name__}: {exc}")
            return RunResult(builder.build(), (), (), None)
        return result

    def _traced(
        self, args: tuple[RunRequest, Progress | None], config: RunnableConfig
    ) -> RunResult:
        request, progress = args
        result = self._run(request, config, progress)
        report = result.report
        try:
            dispatch_custom_event(
                EXTRACTION_EVENT,
                report.event(
                    user_id=request.scope.user_id,
                    agent_id=request.scope.agent_id,
                    reason=request.reason,
                    sessions_formed=list(result.formed_sessions),
                    sessions_failed=list(result.failed_sessions),
                ),
                config=config,
            )
        except Exception as exc:  # a failing handler must not undo the run
            logger.debug("could not dispatch %s: %s", EXTRACTION_EVENT, exc)
        if report.errors and request.reason == "close" and _python_exiting():
            # A provider client that needs a thread pool cannot run any more; nothing is lost
            logger.info(
                "formation at interpreter exit could not reach the model; %d message(s) of "
                "scope #%d are formed when the store is opened again",
                report.pending_messages,
                request.scope_id,
            )
            logger.debug("formation at exit of %s: %s", request.scope, "; ".join(report.errors))
            return result
        if report.errors:
            logger.warning(
                "formation of scope #%d: %d window(s) failed, %d message(s) pending (%s); "
                "details at DEBUG",
                request.scope_id,
                report.failed_windows,
                report.pending_messages,
                log_reason(report.errors[0]),
            )
            logger.debug("formation of %s failed: %s", request.scope, "; ".join(report.errors))
        logger.info(
            "formation of scope #%d (%s): %d windows, %d messages, decisions %s, %.0f ms",
            request.scope_id,
            request.reason,
            report.windows,
            report.messages,
            report.decisions,
            report.elapsed_ms,
        )
        return result

    # -- one run -------------------------------------------------------------------------------

    def _run(
        self, request: RunRequest, config: RunnableConfig, progress: Progress | None
    ) -> RunResult:
        started = time.perf_counter()
        report = ReportBuilder()
        report.bump("scopes")
        formed: list[str] = []
        failed: list[str] = []
        scenes_due: float | None = None
        if not self.records.acquire(request.scope_id, self.owner, self.lease_ttl_s):
            report.bump("locked_scopes")
            report.bump("elapsed_ms", (time.perf_counter() - started) * 1000)
            return RunResult(report.build(), (), (), None, locked=True)
        try:
            budget = self.config.extraction.max_windows_per_run
            for pending in self._pending(request):
                if not request.force and pending.state.retry_at > time.time():
                    continue  # backing off after a failure
                report.bump("sessions")
                windows, ok = self._session(
                    request,
                    pending.session_key,
                    budget=budget,
                    report=report,
                    config=config,
                    progress=progress,
                )
                budget -= windows
                if windows:
                    formed.append(pending.session_key)
                if not ok:
                    failed.append(pending.session_key)
                if budget <= 0:
                    break
            scenes_due = self._scene_step(request, bool(formed), report, config)
        except Exception as exc:  # the store closed under us, a bug: report, never raise
            logger.warning(
                "formation of scope #%d stopped (%s); details at DEBUG",
                request.scope_id,
                type(exc).__name__,
            )
            logger.debug("formation of %s stopped: %s", request.scope, exc, exc_info=True)
            report.error(f"{type(exc).__name__}: {exc}")
        finally:
            try:
                self.records.release(request.scope_id, self.owner)
            except Exception as exc:  # the store is closed: the lease expires by itself
                logger.debug("could not release the formation lease: %s", exc)
        try:
            left = self._pending(request)
            report.bump("pending_messages", sum(p.messages for p in left))
        except Exception as exc:
            logger.debug("could not count pending messages: %s", exc)
        report.bump("elapsed_ms", (time.perf_counter() - started) * 1000)
        return RunResult(report.build(), tuple(formed), tuple(failed), scenes_due)

    def _pending(self, request: RunRequest) -> list[PendingSession]:
        """The request's sessions with messages past their cursor."""
        if request.sessions is None:
            return self.records.pending(request.scope_id)
        found = (self.records.backlog(request.scope_id, key) for key in request.sessions)
        return [p for p in found if p is not None]

    def _session(
        self,
        request: RunRequest,
        session_key: str,
        *,
        budget: int,
        report: ReportBuilder,
        config: RunnableConfig,
        progress: Progress | None,
    ) -> tuple[int, bool]:
        """Extract windows of one session until done, out of budget, or a failure."""
        ex = self.config.extraction
        done = 0
        split_to: int | None = None  # fewer messages after an answer over the per-window cap
        while done < budget:
            state = self.records.session(request.scope_id, session_key)
            rows = self.records.messages_after(
                request.scope_id, session_key, state.cursor, ex.window_messages
            )
            if not rows:
                return done, True
            shrink = max(state.failures - 1, 0)
            window = build_window(
                rows,
                self.records.messages_up_to(
                    request.scope_id, session_key, state.cursor, ex.background_messages
                ),
                start_cursor=state.cursor,
                config=ex,
                max_messages=min(
                    max(1, ex.window_messages >> min(shrink, 16)), split_to or ex.window_messages
                ),
            )
            if window is None:
                return done, True
            if not self.records.acquire(request.scope_id, self.owner, self.lease_ttl_s):
                report.error("the scope's formation lease was taken over")
                return done, False
            error = self._window(
                request,
                session_key,
                window,
                situation=state.situation,
                report=report,
                config=config,
            )
            if isinstance(error, _Split):
                split_to = max(1, len(window.messages) // 2)
                continue
            split_to = None
            if error is not None:
                report.bump("failed_windows")
                report.error(error)
                failures = self.records.record_failure(
                    request.scope_id,
                    session_key,
                    error=error,
                    retry_at=time.time() + self.backoff(state.failures + 1),
                )
                logger.log(
                    logging.DEBUG if _python_exiting() else logging.INFO,
                    "a formation window of scope #%d failed (%d in a row): %s",
                    request.scope_id,
                    failures,
                    log_reason(error),
                )
                logger.debug(
                    "formation window of %s/%s failed: %s", request.scope, session_key, error
                )
                return done, False
            done += 1
            report.bump("windows")
            report.bump("messages", len(window.messages))
            if progress is not None:
                progress(len(window.messages))
        return done, True

    def backoff(self, failures: int) -> float:
        """Seconds before retry number `failures` (exponential, capped)."""
        ex = self.config.extraction
        return float(min(ex.retry_base_seconds * 2 ** max(failures - 1, 0), ex.retry_max_seconds))

    def _window(
        self,
        request: RunRequest,
        session_key: str,
        window: Window,
        *,
        situation: str,
        report: ReportBuilder,
        config: RunnableConfig,
    ) -> str | _Split | None:
        """Extract, consolidate and commit one window.

        Returns an error, `_SPLIT` when the answer held more memories than one window may keep
        (nothing was written; ask again for fewer messages), or `None` on success.
        """
        ex = self.config.extraction
        lang = window_language(window, ex.language)
        checked = self._extract(window, lang, situation=situation, report=report, config=config)
        if not isinstance(checked, Validated):
            return checked
        plan = self.consolidator.plan(
            request.scope,
            request.scope_id,
            checked.memories,
            session_key=session_key,
            language=lang,
            caller=self.caller,
            run_config=config,
        )
        if plan.call is not None:
            self._count(report, plan.call)
        report.bump("junk", plan.junk)
        report.bump("unrepaired", plan.unrepaired)
        if plan.error is not None:
            return plan.error
        report.bump("repaired", plan.repaired)
        self.consolidator.embed_missing(plan)  # before the transaction: a crash loses nothing
        outcome = self.records.commit(
            request.scope_id,
            owner=self.owner,
            upserts=[
                Upsert(w.record, w.vector, change=w.change, related=w.related, dedupe=w.new)
                for w in plan.writes
            ],
            deletes=plan.deletes,
            actor="extraction",
            embedder=self.store.embedder_id,
            session_key=session_key,
            expected_cursor=window.start_cursor,
            new_cursor=window.end_cursor,
            situation=checked.situation,
            queue_scenes=self.config.persona.enabled,
        )
        if not outcome.ok:
            return f"not committed: {outcome.reason}"
        if self.upkeep is not None and any(w.vector is None for w in plan.writes):
            self.upkeep.wake()
        counts = dict(plan.counts)
        counts["duplicate"] = counts.get("duplicate", 0) + outcome.duplicates
        counts["add"] = max(counts.get("add", 0) - outcome.duplicates, 0)
        report.decide(counts)
        report.bump("invalid_decisions", plan.invalid_decisions)
        report.bump("written", len(outcome.written))
        report.bump("deleted", len(outcome.deleted))
        return None

    def _extract(
        self,
        window: Window,
        lang: Lang,
        *,
        situation: str,
        report: ReportBuilder,
        config: RunnableConfig,
    ) -> Validated | str | _Split:
        """The window's validated memories, or why the window cannot be committed as it is."""
        ex = self.config.extraction
        background, messages = window_items(window, self.tz, message_chars=ex.message_chars)
        system = extraction_system(lang, language=lang, timezone=self.timezone_name)
        user = extraction_user(
            lang,
            timezone=self.timezone_name,
            situation=situation,
            background=background,
            messages=messages,
        )
        call = self.caller.call(ExtractionAnswer, system, user, config=config)
        self._count(report, call)
        report.prompt_chars.append(call.prompt_chars)
        if call.data is None:
            return call.error or "the extraction call failed"
        try:
            read = read_extraction(call.data)
        except InvalidAnswerError as exc:
            return f"invalid extraction answer: {exc}"
        if not read.sound:  # what the model meant is unknown: never commit past it, ask again
            report.bump("junk", len(read.junk))
            report.bump("unrepaired", len(read.unrepaired))
            return read.failure("extraction")
        checked = validate_answer(
            read.answer, window, config=ex, tz=self.tz, previous_situation=situation
        )
        if checked.capped and len(window.messages) > 1:
            report.bump("split_windows")
            return _SPLIT  # more than one window may keep: ask again for each half
        report.bump("extracted", len(checked.memories))
        report.bump("rejected", checked.rejected + checked.capped)
        report.bump("downgraded_rules", checked.downgraded_rules)
        report.bump("repaired", read.repaired)
        report.bump(
            "dropped_fields", read.dropped + checked.fixed_times + checked.dropped_source_ids
        )
        return checked

    @staticmethod
    def _count(report: ReportBuilder, call: CallResult) -> None:
        report.call(call.input_tokens, call.output_tokens)

    # -- scenes and persona --------------------------------------------------------------------

    def _scene_step(
        self,
        request: RunRequest,
        formed_now: bool,
        report: ReportBuilder,
        config: RunnableConfig,
    ) -> float | None:
        """Fold queued memories into scenes and the persona when due; returns a later due time."""
        persona_cfg = self.config.persona
        if not persona_cfg.enabled:
            return None
        state = self.records.scope_state(request.scope_id)
        now = time.time()
        pipe = self.config.pipeline
        seq, memories, queued = self.records.scene_queue(
            request.scope_id, request.scope, persona_cfg.scene_batch
        )
        if queued and not request.force:
            due = max(state.scenes_at + pipe.l2_min_interval_seconds, state.retry_at)
            if formed_now:
                due = max(due, now + pipe.l2_delay_after_l1_seconds)
            if due > now:
                return due
        changed: list[str] = []
        scenes_ok = True
        batches = 0
        while queued and batches < 10:
            batches += 1
            if not self.records.acquire(request.scope_id, self.owner, self.lease_ttl_s):
                report.error("the scope's formation lease was taken over")
                return None
            lang = self._language([m.content for m in memories])
            outcome = self.scenes.update_scenes(
                request.scope, memories, language=lang, caller=self.scene_caller, run_config=config
            )
            if outcome.call is not None:
                self._count(report, outcome.call)
            report.bump("junk", outcome.junk)
            report.bump("unrepaired", outcome.unrepaired)
            if outcome.error is not None:
                scenes_ok = False
                report.error(outcome.error)
                self.records.scenes_failed(
                    request.scope_id,
                    error=outcome.error,
                    retry_at=now + self.backoff(state.failures + 1),
                )
                break
            report.scene(
                created=outcome.created,
                updated=outcome.updated,
                merged=outcome.merged,
                deleted=outcome.deleted,
                refused=outcome.refused,
            )
            changed += outcome.changed_names
            self.records.scenes_done(request.scope_id, seq, owner=self.owner)
            seq, memories, queued = self.records.scene_queue(
                request.scope_id, request.scope, persona_cfg.scene_batch
            )
        if scenes_ok:
            self._persona_step(request, changed, report, config)
        return None

    def _persona_step(
        self,
        request: RunRequest,
        changed: Sequence[str],
        report: ReportBuilder,
        config: RunnableConfig,
    ) -> None:
        store = self.store
        state = self.records.scope_state(request.scope_id)
        has_persona = store.get_persona(request.scope) is not None
        scenes = store.list_scenes(request.scope)
        changed_since = state.memories_since_persona
        # Background runs rewrite it every `trigger_every_n` changed memories; an explicit run
        # (extract, flush, close) whenever any memory was written, updated or deleted since,
        # so after `flush()` the persona never depends on when the background happened to run.
        due = (
            (not has_persona and bool(scenes))
            or changed_since >= self.config.persona.trigger_every_n
            or (request.force and changed_since > 0 and has_persona)
        )
        if not due:
            return
        recent = self.records.recent_memories(request.scope_id, request.scope, 60)
        lang = self._language([m.content for m in recent[:30]] or [s.summary for s in scenes])
        outcome = self.scenes.update_persona(
            request.scope,
            recent[:60],
            changed,
            language=lang,
            caller=self.scene_caller,
            run_config=config,
        )
        if outcome.call is not None:
            self._count(report, outcome.call)
        if outcome.error is not None:
            report.error(outcome.error)  # counters stay: the persona is retried next run
            return
        report.persona_updated |= outcome.written
        self.records.persona_done(request.scope_id)

    def _language(self, texts: Sequence[str]) -> Any:
        configured = self.config.extraction.language
        if configured in ("zh", "en"):
            return configured
        return detect_language(texts)


class _Split:
    """A window's answer held more memories than one window may keep (`_SPLIT`)."""

    __slots__ = ()


_SPLIT: Final = _Split()


def _python_exiting() -> bool:
    """Whether Python has begun to exit: its thread pools refuse new work from then on.

    `concurrent.futures` sets this flag when the interpreter stops its pools, before the exit
    handlers (and so a finalizer closing an unclosed store) run.
    """
    return bool(getattr(concurrent.futures.thread, "_shutdown", False))


_EXC_TYPE_RE: Final = re.compile(
    r"\s*([A-Za-z_][\w.]*(?:Error|Exception|Warning|Timeout|Exit|Interrupt|Iteration))\b"
)


def log_reason(error: str) -> str:
    """A report's error line as logs above DEBUG may carry it (kind and exception type only).

    Never the exception message or text from the model: `model call failed: RuntimeError`.
    """
    head, sep, rest = error.partition(":")
    found = _EXC_TYPE_RE.match(rest) if sep else None
    return f"{head}: {found.group(1)}" if found else head


def zone_name(configured: str, tz: Any) -> str:
    """A readable name of the configured zone for prompts (`Asia/Shanghai`, `+08:00`)."""
    if configured != "system":
        return configured
    key = getattr(tz, "key", None)
    if isinstance(key, str) and key and key != "localtime":
        return key
    import datetime as dt  # noqa: PLC0415

    offset = dt.datetime.now(tz).utcoffset() or dt.timedelta()
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
