"""When formation runs: turn counts with warm-up, idle timers, session end, flush, close, open.

A stored turn calls `notify` (through `TdaiMemory._after_capture`, on the background L0 writer's
thread for the turns the agent adapters capture), which only puts an item on a queue: neither a
turn nor the writer ever waits for a database read, a lock or a model (measured in
`benchmarks/formation`). One daemon thread owns every decision:

- **Turns.** Each session counts its captured turns; at the threshold its scope gets a run. The
  threshold warms up 1, 2, 4, … up to `pipeline.every_n_conversations`, doubling after each
  successful run; the warm-up value lives in the store, so a restart or an evicted session
  continues where it was (G-X19). An empty capture is not a turn (G-X20): `notify` is only
  called when a message was stored.
- **Idle.** A session with counted turns below the threshold runs once it has been quiet for
  `pipeline.l1_idle_timeout_seconds`; the timer is re-armed whenever turns are pending.
- **After a run.** Turns that arrived while it ran are recounted from the store (messages past
  the new cursor), so none are swallowed (G-X4); failed sessions are retried when their backoff
  expires; a postponed scene update gets its own timer.
- **Open.** Pending work found in the store is resumed in the background (G-X5): sessions with
  messages past their cursor and scopes with memories waiting for their scenes.
- **Flush / close / session end.** `flush()` and `close()` extract everything pending *from the
  store*, not from a buffer (G-X3); `end_session()` runs one session now.

Runs go to at most `pipeline.max_concurrent_runs` daemon threads, one run per scope at a time
(in this process by a lock, across processes by the lease in the store).
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from langchain_core.runnables import RunnableConfig

from langchain_tdai_recall._runtime.foreground import mark_background
from langchain_tdai_recall.formation.pipeline import FormationEngine, RunRequest, RunResult
from langchain_tdai_recall.formation.report import ExtractionReport, ReportBuilder
from langchain_tdai_recall.types import Scope

__all__ = ["FormationScheduler"]

logger = logging.getLogger(__name__)

_GC_EVERY: Final = 256
"""Events between two evictions of long-quiet sessions from the scheduler's memory."""
_LOCK_RETRY_S: Final = 30.0
"""When another process holds a scope's lease, try again after this long."""

Key = tuple[int, str]
TimerKind = Literal["idle", "retry", "scenes", "lease"]


@dataclass(slots=True)
class _Session:
    scope: Scope
    turns: int = 0
    warmup: int = 1
    last_active: float = 0.0
    retry_at: float = 0.0
    counted_at: float = 0.0
    """Taken just before `turns` was last counted from the store: a notification younger than
    it is counted on top (a turn may be counted twice, which only starts a run early; a turn
    stored while the count ran is never missed)."""


@dataclass(slots=True)
class _Job:
    scope: Scope
    sessions: set[str] | None = field(default_factory=set)
    """Sessions to extract; `None` means all pending ones."""
    reason: str = "turns"


def _complete(report: ExtractionReport) -> bool:
    """Whether a flush left nothing pending and nothing failed."""
    return report.ok and not report.pending_messages and not report.locked_scopes


class FormationScheduler:
    """Schedules formation runs for one `TdaiMemory` (see the module docstring)."""

    def __init__(self, engine: FormationEngine) -> None:
        self.engine = engine
        self.config = engine.config
        self._background = engine.config.pipeline.enabled
        self._scope_id = engine.records.scope_id
        self._inbox: queue.SimpleQueue[tuple[object, ...]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._sessions: dict[Key, _Session] = {}
        self._timers: list[tuple[float, int, TimerKind, int, str]] = []
        self._timer_seq = 0
        self._queued: dict[int, _Job] = {}
        self._running: dict[int, threading.Thread] = {}
        self._events = 0
        self._in_flight = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="tdai-formation", daemon=True)
        self._thread.start()

    # -- called from any thread ---------------------------------------------------------------

    def notify(self, scope: Scope, session_key: str) -> None:
        """One captured turn of a session (cheap: one queue put)."""
        if self._background:
            self._put(("turn", scope, session_key, time.time()))

    def end_session(self, scope: Scope, session_key: str) -> None:
        """Extract this session's pending turns now, in the background."""
        if self._background:
            self._put(("end", scope, session_key))

    def resume(self) -> None:
        """Schedule the work pending in the store now (called once, at open).

        Only messages stored before this call count: turns captured afterwards follow the
        usual thresholds.
        """
        if self._background:
            self._put(("scan", self.engine.records.high_water()))

    def extract(
        self,
        targets: list[tuple[int, Scope]],
        *,
        session_key: str | None = None,
        reason: str = "manual",
        config: RunnableConfig | None = None,
        progress: Callable[[int], None] | None = None,
        deadline: float | None = None,
    ) -> ExtractionReport:
        """Run formation now, in the calling thread, for each `(scope_id, scope)` target.

        Retry backoff and the scene interval are ignored. Waits for a background run of the
        same scope to finish first (up to `deadline`, a `time.monotonic()` value).
        """
        builder = ReportBuilder()
        budget = self.config.extraction.max_windows_per_run
        for scope_id, scope in targets:
            request = RunRequest(
                scope_id=scope_id,
                scope=scope,
                sessions=(session_key,) if session_key is not None else None,
                force=True,
                reason=reason,
            )
            left_before = 0
            while True:  # a run stops after `max_windows_per_run` windows: go on until done
                wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                result = self.engine.run(request, config=config, progress=progress, wait_s=wait)
                builder.bump("pending_messages", -left_before)  # only the last run's count
                builder.add(result.report)
                left_before = result.report.pending_messages
                self._put(("done", scope_id, result, False))
                report = result.report
                more = report.windows >= budget and not report.failed_windows
                if not more or result.locked or report.errors:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
        report = builder.build()
        if report.scopes > len(targets):  # several runs of one scope: count the scope once
            report = dataclasses.replace(report, scopes=len(targets))
        return report

    def _put(self, item: tuple[object, ...]) -> None:
        with self._idle:
            self._in_flight += 1
        self._inbox.put(item)

    def pending_targets(self) -> list[tuple[int, Scope]]:
        """Every scope with messages past a cursor or memories waiting for their scenes."""
        records = self.engine.records
        found: dict[int, Scope] = {}
        for p in records.pending():
            found.setdefault(p.scope_id, Scope(p.user_id, p.agent_id))
        if self.config.persona.enabled:
            for scope_id, user, agent in records.scopes_with_scene_work():
                found.setdefault(scope_id, Scope(user, agent))
        return sorted(found.items())

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no run is queued or running and the inbox is empty (for tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while True:
                if not (self._running or self._queued or self._in_flight):
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(0.05 if left is None else min(left, 0.05))

    def flush(self, deadline: float | None) -> bool:
        """Form everything pending now; `True` only when nothing is left and nothing failed.

        `False` when `deadline` (`time.monotonic()`) came first, a window or a scene update
        failed (it is retried after its backoff), or messages are still past a cursor. With a
        deadline the runs go on a daemon thread, so the caller never waits past it for a model
        call in flight; what is not done stays pending (a run that finishes later still
        commits its windows).
        """
        if deadline is None:
            return _complete(self.extract(self.pending_targets(), reason="flush"))
        box: list[ExtractionReport] = []

        def run() -> None:
            try:
                box.append(self.extract(self.pending_targets(), reason="flush", deadline=deadline))
            except Exception as exc:  # the store may be closing: the work stays pending
                logger.debug("flush stopped: %s", exc)

        worker = threading.Thread(target=run, name="tdai-formation-flush", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0.0))
        if worker.is_alive() or not box:
            return False
        return _complete(box[0])

    def close(self, timeout: float) -> ExtractionReport | None:
        """Stop scheduling; with `pipeline.flush_on_close`, extract what is pending first.

        Returns the flush report, or `None` when nothing was flushed or the flush did not
        finish in `timeout` seconds (what is left resumes at the next open).
        """
        self._stop.set()
        self._inbox.put(("stop",))  # not counted in flight: nothing waits for it
        self._thread.join(timeout=min(timeout, 5.0) if timeout else 0.1)
        if not self.config.pipeline.flush_on_close or timeout <= 0:
            return None
        box: list[ExtractionReport] = []
        deadline = time.monotonic() + timeout

        def flush() -> None:
            try:
                box.append(self.extract(self.pending_targets(), reason="close", deadline=deadline))
            except Exception as exc:  # the store may be closing: what is left resumes later
                logger.debug("flush at close stopped: %s", exc)

        worker = threading.Thread(target=flush, name="tdai-formation-close", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0.0))
        if worker.is_alive():
            logger.warning(
                "memory formation did not finish within pipeline.close_timeout_seconds=%g; "
                "the remaining work resumes when the store is opened again",
                timeout,
            )
            return None
        return box[0] if box else None

    # -- the scheduler thread -----------------------------------------------------------------

    def _loop(self) -> None:
        mark_background()
        while True:
            timeout = None
            if self._timers:
                timeout = max(self._timers[0][0] - time.time(), 0.0)
            try:
                item = self._inbox.get(timeout=timeout if timeout is not None else 1.0)
            except queue.Empty:
                item = None
            if item is not None and item[0] == "stop":
                return
            try:
                if item is not None:
                    self._handle(item)
                self._fire_timers()
                self._dispatch()
            except Exception as exc:  # never let the scheduler die; the store keeps the work
                logger.warning(
                    "formation scheduler error (%s); details at DEBUG", type(exc).__name__
                )
                logger.debug("formation scheduler error", exc_info=True)
            with self._idle:
                if item is not None:
                    self._in_flight -= 1
                self._idle.notify_all()

    def _handle(self, item: tuple[object, ...]) -> None:
        kind = item[0]
        self._events += 1
        if self._events % _GC_EVERY == 0:
            self._evict()
        if kind == "turn":
            scope, key, at = item[1], item[2], item[3]
            assert isinstance(scope, Scope) and isinstance(key, str) and isinstance(at, float)
            self._turn(scope, key, at)
        elif kind == "end":
            scope, key = item[1], item[2]
            assert isinstance(scope, Scope) and isinstance(key, str)
            sid = self._scope_id(scope)
            if sid is not None:
                self._enqueue(sid, scope, key, "session_end")
        elif kind == "scan":
            mark = item[1]
            assert isinstance(mark, int)
            self._scan(mark)
        elif kind == "forget":
            self._forget(item[1], item[2])
        elif kind == "done":
            done_id, result, background = item[1], item[2], item[3]
            assert isinstance(done_id, int) and isinstance(result, RunResult)
            if background:
                self._running.pop(done_id, None)
            self._finished(done_id, result)

    def _session(self, scope_id: int, scope: Scope, key: str) -> _Session:
        state = self._sessions.get((scope_id, key))
        if state is None:
            # The count covers the turns stored when it is read; a turn whose notification is
            # younger than `counted` is counted again, never lost (so `counted` comes first).
            counted = time.time()
            stored = self.engine.records.session(scope_id, key)
            backlog = self.engine.records.backlog(scope_id, key)
            state = _Session(
                scope=scope,
                turns=backlog.user_turns if backlog else 0,
                warmup=stored.warmup,
                retry_at=stored.retry_at,
                counted_at=counted,
            )
            self._sessions[(scope_id, key)] = state
        return state

    def _threshold(self, state: _Session) -> int:
        pipe = self.config.pipeline
        n = pipe.every_n_conversations
        if pipe.enable_warmup and state.warmup > 0:
            return min(state.warmup, n)
        return n

    def _turn(self, scope: Scope, key: str, at: float) -> None:
        scope_id = self._scope_id(scope)
        if scope_id is None:
            return
        state = self._session(scope_id, scope, key)
        if at > state.counted_at:  # else the turn was already counted from the store
            state.turns += 1
        state.last_active = at
        self._consider(scope_id, key, state, reason="turns")

    def _consider(self, scope_id: int, key: str, state: _Session, *, reason: str) -> None:
        """Queue the session when its turns reach the threshold; else keep its idle timer."""
        if state.turns <= 0:
            return
        now = time.time()
        if state.retry_at > now:
            self._arm(state.retry_at, "retry", scope_id, key)
        elif state.turns >= self._threshold(state):
            self._enqueue(scope_id, state.scope, key, reason)
        else:
            since = state.last_active or now
            self._arm(since + self.config.pipeline.l1_idle_timeout_seconds, "idle", scope_id, key)

    def _enqueue(self, scope_id: int, scope: Scope, key: str | None, reason: str) -> None:
        job = self._queued.get(scope_id)
        if job is None:
            job = self._queued[scope_id] = _Job(scope=scope, reason=reason)
        if key is None:
            job.sessions = None
        elif job.sessions is not None:
            job.sessions.add(key)

    def _arm(self, due: float, kind: TimerKind, scope_id: int, key: str = "") -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (due, self._timer_seq, kind, scope_id, key))

    def _fire_timers(self) -> None:
        now = time.time()
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, scope_id, key = heapq.heappop(self._timers)
            if kind in ("scenes", "lease"):
                scope = self._scope_of(scope_id)
                if scope is None:
                    continue
                if kind == "lease":  # another process held the scope: try all of it again
                    self._enqueue(scope_id, scope, None, "retry")
                elif scope_id not in self._queued:  # scenes only: no session to extract
                    self._queued[scope_id] = _Job(scope=scope, reason="scenes")
                continue
            state = self._sessions.get((scope_id, key))
            if state is None or state.turns <= 0:
                continue
            if kind == "idle":
                quiet = now - state.last_active
                if quiet + 1e-3 >= self.config.pipeline.l1_idle_timeout_seconds:
                    self._enqueue(scope_id, state.scope, key, "idle")
            elif state.retry_at <= now:
                self._enqueue(scope_id, state.scope, key, "retry")

    def _scope_of(self, scope_id: int) -> Scope | None:
        for (sid, _), state in self._sessions.items():
            if sid == scope_id:
                return state.scope
        for sid, scope in self.pending_targets():
            if sid == scope_id:
                return scope
        return None

    def _dispatch(self) -> None:
        limit = self.config.pipeline.max_concurrent_runs
        for scope_id in list(self._queued):
            if len(self._running) >= limit:
                return
            if scope_id in self._running:
                continue
            job = self._queued.pop(scope_id)
            request = RunRequest(
                scope_id=scope_id,
                scope=job.scope,
                sessions=tuple(sorted(job.sessions)) if job.sessions is not None else None,
                reason=job.reason,
            )
            worker = threading.Thread(
                target=self._work, args=(request,), name="tdai-formation-run", daemon=True
            )
            self._running[scope_id] = worker
            worker.start()

    def _work(self, request: RunRequest) -> None:
        mark_background()
        try:
            result = self.engine.run(request, wait_s=0.0)
        except Exception as exc:  # engine.run does not raise; belt and braces
            builder = ReportBuilder()
            builder.error(f"{type(exc).__name__}: {exc}")
            result = RunResult(builder.build(), (), (), None)
        self._put(("done", request.scope_id, result, True))

    def _finished(self, scope_id: int, result: RunResult) -> None:
        now = time.time()
        records = self.engine.records
        if result.locked:
            self._arm(now + _LOCK_RETRY_S, "lease", scope_id)
        n = self.config.pipeline.every_n_conversations
        for key in result.formed_sessions:
            state = self._sessions.get((scope_id, key))
            stored = records.session(scope_id, key)
            warmup = stored.warmup
            if self.config.pipeline.enable_warmup and warmup > 0:
                warmup = 0 if warmup * 2 >= n else warmup * 2
                records.set_warmup(scope_id, key, warmup)
            if state is not None:
                state.warmup = warmup
        if result.scenes_due_at is not None:
            self._arm(result.scenes_due_at, "scenes", scope_id)
        for (sid, key), state in list(self._sessions.items()):
            if sid != scope_id:
                continue
            counted = time.time()  # before the count: see `_session`
            backlog = records.backlog(scope_id, key)
            state.turns = backlog.user_turns if backlog else 0
            state.retry_at = backlog.state.retry_at if backlog else 0.0
            state.counted_at = counted
            self._consider(scope_id, key, state, reason="turns")

    def _scan(self, mark: int) -> None:
        records = self.engine.records
        now = time.time()
        for p in records.pending(up_to=mark):
            scope = Scope(p.user_id, p.agent_id)
            state = self._session(p.scope_id, scope, p.session_key)
            state.last_active = state.last_active or now
            if p.state.retry_at > now:
                self._arm(p.state.retry_at, "retry", p.scope_id, p.session_key)
            else:
                self._enqueue(p.scope_id, scope, p.session_key, "open")
        if self.config.persona.enabled:
            for scope_id, user, agent in records.scopes_with_scene_work():
                if scope_id not in self._queued:
                    self._queued[scope_id] = _Job(scope=Scope(user, agent), reason="open")

    def _evict(self) -> None:
        horizon = time.time() - self.config.pipeline.session_active_window_hours * 3600
        for key, state in list(self._sessions.items()):
            if state.last_active < horizon and state.turns <= 0:
                del self._sessions[key]

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def forget_scope(self, scope_id: int, timeout: float | None) -> bool:
        """Drop what was counted, queued or timed for a scope that `TdaiMemory.forget` erased.

        Returns once the scheduler thread has handled every item queued before this one (so a
        finished run's bookkeeping is done), or `False` after `timeout` seconds.
        """
        done = threading.Event()
        self._put(("forget", scope_id, done))
        return done.wait(timeout)

    def _forget(self, scope_id: object, done: object) -> None:
        assert isinstance(scope_id, int) and isinstance(done, threading.Event)
        self._queued.pop(scope_id, None)
        for key in [k for k in self._sessions if k[0] == scope_id]:
            del self._sessions[key]
        self._timers = [t for t in self._timers if t[3] != scope_id]
        heapq.heapify(self._timers)
        done.set()
