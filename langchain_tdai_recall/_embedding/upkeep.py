"""Batch embedding of stored rows, and the upkeep that keeps every row's vector current.

Writes never wait for an embedder. `add_memory`, `add_memories`, `record_messages` and the turn
capture store rows without a vector, so they are durable and keyword-searchable at once, and
`VectorUpkeep` (one daemon thread per writable store) embeds them afterwards in batches:

- The to-do list is the database itself: rows whose vector is missing, or (in the first pass
  after opening) was made by another embedder. Nothing else is recorded, so the work resumes
  after a crash or a restart, and a row whose text changes is simply embedded again.
- A changed embedder is recognised by its identity (`embeddings.embedder_identity`) and, when
  the identity did not change, by probing the dimension of its vectors once after opening: the
  old vectors are dropped from search and re-embedded, with one WARNING and progress at INFO
  (`stats().pending_vectors` counts what is left).
- A vector that is not finite, is all zeros or has the wrong dimension counts as a failed
  embedding: the row stays pending and is retried later with exponential backoff (up to an
  hour per row). A failing or timed-out embedder call is retried with backoff too (up to five
  minutes), with one WARNING per failure streak; nothing is ever stored as a zero vector.
- `flush()` waits for a pass over the pending rows, `reindex()` runs one on the caller's thread
  with a progress bar, and `stop()` gives the worker a bounded time to finish before a store
  closes. The worker is a daemon thread: process exit never waits for a hung embedder.
- Searches that promise read-your-writes (the LangGraph store, the retriever) do not wait for
  the worker: `embed_scope_now` embeds the few rows of their scope still without a vector on
  the caller's behalf, and `embed_now` embeds texts a writer needs at once; both are bounded by
  a timeout (the embedder runs on a worker thread, so a hung one costs the caller only that).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall._runtime.foreground import mark_background
from langchain_tdai_recall._runtime.progress import Progress, progress
from langchain_tdai_recall._runtime.threads import DaemonExecutor
from langchain_tdai_recall.errors import EmbeddingError, StoreClosedError, StoreError
from langchain_tdai_recall.stores.base import LAYERS, BaseMemoryStore, PendingVector
from langchain_tdai_recall.stores.records import Layer
from langchain_tdai_recall.types import Scope

__all__ = ["VectorUpkeep", "check_vectors"]

logger = logging.getLogger(__name__)

PROBE_TEXT: Final = "dimension probe"
"""Text embedded once after opening to learn the embedder's current vector dimension."""
POLL_SECONDS: Final = 300.0
"""The worker looks for pending rows at least this often, even when nothing woke it."""
MAX_CALL_BACKOFF_SECONDS: Final = 300.0
"""Longest pause after failed embedder calls."""
MAX_ROW_BACKOFF_SECONDS: Final = 3600.0
"""Longest pause before a row whose vector came back unusable is tried again."""
PROGRESS_SECONDS: Final = 10.0
"""Interval of the INFO progress lines of a long re-embedding."""
LONG_BACKLOG: Final = 1000
"""Pending rows from which a pass reports its progress."""


def check_vectors(
    raw: object, count: int, dimension: int | None
) -> tuple[npt.NDArray[np.float32], list[bool]]:
    """Validate and L2-normalise an embedder's answer for `count` texts.

    Args:
        raw: What `embed_documents` returned.
        count: Number of texts sent.
        dimension: Expected dimension, or `None` to take the most common one in the answer.

    Returns:
        (matrix of shape (count, d) with zero rows where unusable, per-row usable flags). A row
        is unusable when it is not a flat numeric vector, has another dimension, is not finite
        or is all zeros.

    Raises:
        EmbeddingError: If the answer is not a list of `count` vectors.
    """
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence | np.ndarray):
        msg = f"the embedder returned {type(raw).__name__} instead of a list of vectors"
        raise EmbeddingError(msg)
    if len(raw) != count:
        msg = f"the embedder returned {len(raw)} vectors for {count} texts"
        raise EmbeddingError(msg)
    rows: list[npt.NDArray[np.float32] | None] = []
    for item in raw:
        try:
            vec = np.asarray(item, dtype=np.float32)
        except (TypeError, ValueError):
            rows.append(None)
            continue
        rows.append(vec if vec.ndim == 1 and vec.size > 0 else None)
    sizes = Counter(v.size for v in rows if v is not None)
    dim = dimension if dimension is not None else (sizes.most_common(1)[0][0] if sizes else 1)
    matrix = np.zeros((count, dim), dtype=np.float32)
    ok = [False] * count
    for i, row in enumerate(rows):
        if row is None or row.size != dim or not np.isfinite(row).all():
            continue
        norm = float(np.linalg.norm(row.astype(np.float64)))
        if norm == 0.0 or not math.isfinite(norm):
            continue
        matrix[i] = (row.astype(np.float64) / norm).astype(np.float32)
        ok[i] = True
    return matrix, ok


@dataclass(slots=True)
class _Tally:
    """Progress of one pass."""

    total: int
    report: bool
    done: int = 0
    last_report: float = field(default_factory=time.monotonic)


class VectorUpkeep:
    """Fills in and renews the vectors of a store's rows on one background daemon thread.

    Args:
        store: A writable store with an embedder identity.
        embeddings: The embedder whose identity the store records.
        batch_size: Texts per embedder call.
        max_input_chars: Texts are cut to this many code points before embedding.
        show_progress: `True` draws a progress bar for long background passes; otherwise
            progress is logged at INFO.
    """

    def __init__(
        self,
        store: BaseMemoryStore,
        embeddings: Embeddings,
        *,
        batch_size: int,
        max_input_chars: int,
        show_progress: bool | None = None,
    ) -> None:
        self._store = store
        self._emb = embeddings
        self._batch = batch_size
        self._max_chars = max_input_chars
        self._show_progress = show_progress is True
        self._cond = threading.Condition()
        self._wake = True  # the first pass runs at once
        self._stopping = False
        self._stop_at = math.inf
        self._force = False
        self._started = 0
        self._done = 0
        self._batch_lock = threading.RLock()
        self._row_retry: dict[tuple[Layer, int], tuple[float, int]] = {}
        self._failures = 0
        self._resume_at = 0.0
        self._dimension: int | None = None
        self._probed = False
        self._swept = False
        self._foreign: int | None = None
        """Rows whose vector another embedder made, counted once by the first pass."""
        self._warned_foreign = False
        self._warned_bad = False
        self._thread = threading.Thread(target=self._run, name="tdai-vectors", daemon=True)
        self._now_pool = DaemonExecutor(1, name="tdai-embed-now")
        self._now_lock = threading.Lock()
        """Taken by the callers of `embed_now` and `embed_scope_now`, one at a time."""
        self._now_running: Future[object] | None = None
        """The last foreground embedder call, while it may still run."""

    # -- control ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    def wake(self) -> None:
        """Tell the worker that rows were written."""
        with self._cond:
            self._wake = True
            self._cond.notify_all()

    def flush(self, timeout: float | None = None, *, show_progress: bool | None = False) -> bool:
        """Wait for a pass over every pending row that starts after this call.

        Rows waiting for a retry are tried again at once. Returns `False` if `timeout` (seconds)
        passed first or the worker has stopped. With a backlog of at least `LONG_BACKLOG` rows
        the wait is logged at INFO with its counts, and `show_progress` (`None`: on a terminal)
        draws a progress bar of it, unless the worker draws its own.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._started + 1
            self._force = self._wake = True
            self._cond.notify_all()
        waiting = self._waiting_bar(show_progress)
        try:
            while True:
                with self._cond:
                    if self._done >= target:
                        break
                    if not self._thread.is_alive():
                        return False
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
                if waiting is not None:
                    self._advance(*waiting)
        finally:
            if waiting is not None:
                waiting[1].close()
                logger.info(
                    "flush: %d of %d rows embedded, %d pending",
                    waiting[1].count,
                    waiting[0],
                    max(waiting[0] - waiting[1].count, 0),
                )
        return True

    def _pending(self) -> int | None:
        """Rows waiting for a vector, or `None` when the store cannot say (closing)."""
        try:
            return self._count(stale=not self._swept)
        except StoreError:
            return None

    def _count(self, *, stale: bool) -> int:
        """Rows a pass has to embed.

        After the first pass (`stale=False`) only rows without any vector are counted, which a
        partial index serves; counting rows whose vector another embedder made scans every
        row (seconds on millions of rows, on a connection recall shares), so that is done once
        per opening, by the first pass, and remembered.
        """
        missing = self._store.count_missing_vectors()
        if not stale:
            return missing
        if self._foreign is None:
            self._foreign = self._store.count_foreign_vectors()
        return missing + self._foreign

    def _waiting_bar(self, show_progress: bool | None) -> tuple[int, Progress[int]] | None:
        """(backlog, bar) for a flush that waits on a long backlog; `None` for a short one."""
        total = self._pending()
        if total is None or total < LONG_BACKLOG:
            return None
        logger.info("flush: waiting for %d rows to be embedded", total)
        enabled = False if self._show_progress else show_progress  # the worker draws its own
        return total, progress(total, desc="embedding", unit="rows", enabled=enabled)

    def _advance(self, total: int, bar: Progress[int]) -> None:
        pending = self._pending()
        if pending is not None:
            done = min(max(total - pending, 0), total)
            if done > bar.count:
                bar.update(done - bar.count)

    def stop(self, timeout: float) -> bool:
        """Let the worker embed pending rows for at most `timeout` seconds, then end it.

        Returns whether the worker ended in time; a worker stuck in an embedder call is left
        behind (it is a daemon thread and never delays exit).
        """
        with self._cond:
            self._stopping = True
            self._stop_at = time.monotonic() + max(timeout, 0.0)
            self._cond.notify_all()
        self._now_pool.shutdown(wait=False)
        if self._thread.is_alive():
            self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()

    def reindex(self, *, show_progress: bool | None) -> int:
        """Embed every pending row now, on the caller's thread; returns how many were embedded.

        Includes rows whose vector another embedder made. Stops early (returning what was done)
        when the embedder fails; the rest stays pending for the background worker.
        """
        with self._batch_lock:
            if not self._probed and not self._probe():
                return 0
            total = self._store.pending_vector_count()
        if not total:
            return 0
        with progress(total, desc="embedding", unit="rows", enabled=show_progress) as bar:
            done, _ = self._pass(stale=True, forced=True, bar=bar)
        return done

    def embed_texts(self, texts: Sequence[str]) -> npt.NDArray[np.float32] | None:
        """Embed `texts` now, on the caller's thread (a background caller: memory formation).

        For writers that need the vectors before they write (formation searches the scope with
        them, then stores them with its rows in one transaction). Returns L2-normalised rows,
        all zero where the embedder's answer was unusable (such a row must not be stored: the
        upkeep embeds it later), or `None` when the embedder failed; never raises.
        """
        if not texts:
            return np.zeros((0, self._dimension or 1), dtype=np.float32)
        parts: list[npt.NDArray[np.float32]] = []
        try:
            for start in range(0, len(texts), self._batch):
                chunk = [t[: self._max_chars] for t in texts[start : start + self._batch]]
                matrix, _ = check_vectors(
                    self._emb.embed_documents(chunk), len(chunk), self._dimension
                )
                if parts and matrix.shape[1] != parts[0].shape[1]:
                    msg = "the embedder changed its dimension between two batches"
                    raise EmbeddingError(msg)
                parts.append(matrix)
        except Exception as exc:
            logger.warning(
                "embedding %d new memories failed (%s); they are stored and embedded later",
                len(texts),
                type(exc).__name__,
            )
            return None
        return np.vstack(parts)

    # -- on a caller's behalf ------------------------------------------------------------------

    def embed_now(self, texts: Sequence[str], timeout: float) -> npt.NDArray[np.float32] | None:
        """Embed `texts` within `timeout` seconds, for a caller that waits for them.

        Returns L2-normalised rows, all zero where the embedder's answer was unusable, or `None`
        when the embedder failed, timed out, is backing off after failures, or is still busy
        with an earlier such call that timed out (a hung embedder is not queued behind). Never
        raises.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        if not self._now_lock.acquire(timeout=max(timeout, 0.0)):
            return None
        try:
            parts: list[npt.NDArray[np.float32]] = []
            for start in range(0, len(texts), self._batch):
                chunk = [t[: self._max_chars] for t in texts[start : start + self._batch]]
                got = self._embed_within(chunk, deadline)
                if got is None or (parts and got[0].shape[1] != parts[0].shape[1]):
                    return None
                parts.append(got[0])
        finally:
            self._now_lock.release()
        return np.vstack(parts) if parts else np.zeros((0, self._dimension or 1), np.float32)

    def embed_scope_now(self, scope: Scope, timeout: float) -> int:
        """Embed the L1 rows of `scope` still without a vector, within `timeout` seconds.

        For read-your-writes: a search by meaning first embeds the rows written before it that
        the worker has not reached yet (`LayerIndex.unembedded_rows`). Batch by batch until the
        timeout; what is left stays with the worker. Callers take turns, so rows one of them
        embedded are not embedded again by the next. Returns how many rows got their vector.
        Never raises.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        if not self._now_lock.acquire(timeout=max(timeout, 0.0)):
            return 0
        try:
            index = self._store.index(scope, "l1")
            rows = index.unembedded_rows() if index is not None else []
            records = self._store.memories_by_ref(scope, rows) if rows else {}
            pending = [PendingVector(ref, rec.content) for ref, rec in records.items()]
            done = 0
            for start in range(0, len(pending), self._batch):
                batch = pending[start : start + self._batch]
                got = self._embed_within([p.text[: self._max_chars] for p in batch], deadline)
                if got is None:
                    break
                matrix, ok = got
                good = [i for i, usable in enumerate(ok) if usable]
                if good:
                    done += self._store.set_vectors("l1", [batch[i] for i in good], matrix[good])
        except StoreError as exc:
            logger.debug("embedding rows for a search failed: %s", exc)
            return 0
        finally:
            self._now_lock.release()
        return done

    def _embed_within(
        self, texts: list[str], deadline: float
    ) -> tuple[npt.NDArray[np.float32], list[bool]] | None:
        """One embedder call on the foreground worker, bounded by `deadline` (monotonic)."""
        left = deadline - time.monotonic()
        running = self._now_running
        if left <= 0 or (running is not None and not running.done()):
            return None
        if self._failures and time.monotonic() < self._resume_at:
            return None
        try:
            future: Future[object] = self._now_pool.submit(self._emb.embed_documents, texts)
        except RuntimeError:  # stopped: the store is closing
            return None
        self._now_running = future
        try:
            raw = future.result(timeout=left)
            got = check_vectors(raw, len(texts), self._dimension)
        except FutureTimeout:
            logger.debug("embedding %d texts for a waiting caller passed its bound", len(texts))
            return None
        except Exception as exc:
            self._call_failed(len(texts), exc)
            return None
        self._call_succeeded()
        return got

    # -- the worker ---------------------------------------------------------------------------

    def _past_deadline(self) -> bool:
        return self._stopping and time.monotonic() >= self._stop_at

    def _next_wait(self) -> float:
        now = time.monotonic()
        wait = POLL_SECONDS
        if self._failures:
            wait = min(wait, max(self._resume_at - now, 0.05))
        if self._row_retry:
            earliest = min(t for t, _ in self._row_retry.values())
            wait = min(wait, max(earliest - now, 0.05))
        return wait

    def _run(self) -> None:
        mark_background()
        while True:
            with self._cond:
                while not self._wake and not self._stopping:
                    if not self._cond.wait(self._next_wait()):
                        break  # periodic pass: retries due, or rows from elsewhere
                if self._past_deadline():
                    return
                self._wake = False
                self._started += 1
                number = self._started
                forced = self._force or self._stopping
                self._force = False
                stopping = self._stopping
            try:
                self._pass(stale=not self._swept, forced=forced, bar=None)
            except StoreClosedError:
                return
            except Exception as exc:
                self._failures += 1
                self._resume_at = time.monotonic() + min(
                    2.0 ** (self._failures - 1), MAX_CALL_BACKOFF_SECONDS
                )
                logger.warning(
                    "vector upkeep failed (%s: %s); retrying later", type(exc).__name__, exc
                )
            finally:
                with self._cond:
                    self._done = number
                    self._cond.notify_all()
            if stopping:
                return

    def _pass(self, *, stale: bool, forced: bool, bar: Progress[int] | None) -> tuple[int, bool]:
        """Embed pending rows of both layers; returns (rows embedded, whether it finished)."""
        with self._batch_lock:
            if not self._probed and not self._probe():
                return 0, False
            if stale:
                self._foreign = None  # counted afresh by this sweep
                self._warn_foreign()
                # nothing made by another embedder: list rows without a vector only (a partial
                # index), not every row of the table
                stale = bool(self._foreign)
                if not stale:
                    self._swept = True
            total = self._count(stale=stale) if bar is None else 0
        own_bar = None
        if bar is None and total >= LONG_BACKLOG and self._show_progress:
            own_bar = bar = progress(total, desc="embedding", unit="rows", enabled=True)
        tally = _Tally(total=total, report=total >= LONG_BACKLOG)
        try:
            for layer in LAYERS:
                if not self._embed_layer(layer, stale=stale, forced=forced, bar=bar, tally=tally):
                    return tally.done, False
        finally:
            if own_bar is not None:
                own_bar.close()
        if stale:
            self._swept = True
        if tally.report:
            logger.info("embedding stored rows: finished, %d embedded", tally.done)
        return tally.done, True

    def _warn_foreign(self) -> None:
        if self._foreign is None:
            self._foreign = self._store.count_foreign_vectors()
        foreign = self._foreign
        if self._warned_foreign:
            return
        if foreign:
            self._warned_foreign = True
            logger.warning(
                "this store's vectors were made by another embedder; re-embedding %d memories "
                "and messages with %s in the background (vector search covers each row once it "
                "is re-embedded; stats().pending_vectors shows what is left)",
                foreign,
                self._store.embedder_id,
            )

    def _embed_layer(
        self,
        layer: Layer,
        *,
        stale: bool,
        forced: bool,
        bar: Progress[int] | None,
        tally: _Tally,
    ) -> bool:
        """Embed a layer's pending rows batch by batch; `False` when stopped or failed."""
        after = 0
        while True:
            if self._past_deadline() or (not forced and time.monotonic() < self._resume_at):
                return False
            with self._batch_lock:
                rows = self._store.pending_vectors(
                    layer, after=after, limit=self._batch, stale=stale
                )
                if not rows:
                    return True
                after = rows[-1].ref
                now = time.monotonic()
                todo = [
                    r
                    for r in rows
                    if forced or self._row_retry.get((layer, r.ref), (0.0, 0))[0] <= now
                ]
                embedded = self._embed(layer, todo) if todo else 0
            if embedded is None:
                return False
            tally.done += embedded
            if bar is not None:
                bar.update(len(todo))
            if tally.report and time.monotonic() - tally.last_report >= PROGRESS_SECONDS:
                tally.last_report = time.monotonic()
                logger.info("embedding stored rows: %d of %d done", tally.done, tally.total)

    def _probe(self) -> bool:
        """Learn the embedder's dimension once; reset stored vectors of another dimension."""
        stored = self._store.vector_dimension()
        if stored is None:
            self._probed = True
            return True
        try:
            matrix, ok = check_vectors(self._emb.embed_documents([PROBE_TEXT]), 1, None)
            if not ok[0]:
                msg = "the embedder returned an unusable vector (not finite, or all zeros)"
                raise EmbeddingError(msg)
        except Exception as exc:
            self._call_failed(1, exc)
            return False
        dimension = int(matrix.shape[1])
        self._dimension = dimension
        self._probed = True
        if dimension != stored:
            reset = self._store.drop_vectors_of_other_dimension(dimension)
            logger.warning(
                "the embedder %s now returns %d-dimensional vectors, but %d stored vectors it "
                "made earlier have %d dimensions (its settings or endpoint changed); re-embedding "
                "them in the background",
                self._store.embedder_id,
                dimension,
                reset,
                stored,
            )
        return True

    def _embed(self, layer: Layer, rows: Sequence[PendingVector]) -> int | None:
        """Embed and store one batch; `None` when the embedder call failed."""
        try:
            raw = self._emb.embed_documents([r.text[: self._max_chars] for r in rows])
            matrix, ok = check_vectors(raw, len(rows), self._dimension)
        except Exception as exc:
            self._call_failed(len(rows), exc)
            return None
        good = [i for i, usable in enumerate(ok) if usable]
        bad = [r for r, usable in zip(rows, ok, strict=True) if not usable]
        if bad:
            self._rows_failed(layer, bad)
        if not good and self._dimension is not None:
            self._maybe_changed_dimension(raw)
        stored = 0
        if good:
            for i in good:
                self._row_retry.pop((layer, rows[i].ref), None)
            try:
                stored = self._store.set_vectors(layer, [rows[i] for i in good], matrix[good])
            except StoreClosedError:
                raise
            except StoreError as exc:
                self._call_failed(len(good), exc)
                return None
            if self._dimension is None:
                self._dimension = int(matrix.shape[1])
        self._call_succeeded()
        return stored

    def _maybe_changed_dimension(self, raw: object) -> None:
        """Re-probe when a whole batch came back in another (consistent) dimension."""
        try:
            sizes = {len(v) for v in raw}  # type: ignore[attr-defined]
        except TypeError:
            return
        if len(sizes) == 1 and self._dimension not in sizes:
            self._probed = False
            self._dimension = None

    # -- failures -----------------------------------------------------------------------------

    def _call_failed(self, count: int, exc: Exception) -> None:
        self._failures += 1
        pause = min(2.0 ** (self._failures - 1), MAX_CALL_BACKOFF_SECONDS)
        self._resume_at = time.monotonic() + pause
        log = logger.warning if self._failures == 1 else logger.debug
        log(
            "embedding %d stored texts failed (%s: %s); they stay keyword-searchable and are "
            "retried in %.0f s",
            count,
            type(exc).__name__,
            exc,
            pause,
        )

    def _call_succeeded(self) -> None:
        if self._failures:
            logger.info("the embedder works again after %d failed calls", self._failures)
        self._failures = 0
        self._resume_at = 0.0

    def _rows_failed(self, layer: Layer, rows: Sequence[PendingVector]) -> None:
        now = time.monotonic()
        for row in rows:
            _, tries = self._row_retry.get((layer, row.ref), (0.0, 0))
            pause = min(30.0 * 2.0**tries, MAX_ROW_BACKOFF_SECONDS)
            self._row_retry[(layer, row.ref)] = (now + pause, tries + 1)
        log = logger.debug if self._warned_bad else logger.warning
        self._warned_bad = True
        log(
            "the embedder returned %d unusable vectors (not finite, all zeros or of another "
            "dimension); those rows stay keyword-searchable and are retried later",
            len(rows),
        )
