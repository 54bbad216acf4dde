"""Derived, in-memory indexes of one scope and layer, kept in step with SQLite.

A `LayerIndex` holds the keyword postings, the vector index and the few fields ranking needs
(priority, recency, type, scene, session) for one scope's L1 memories or L0 messages. It is built
on first use from the rows in SQLite and then caught up incrementally: before each search it
compares the scope's generation with the one it has seen and applies only the deletions and
writes since.

A large index can also start from a persisted snapshot (`export_state` / `restore`, written and
validated by `stores._index.snapshot`): it is restored at the generation it was taken at and then
caught up the same way, so a snapshot only ever saves work; it never replaces the rows.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.stores._index.extras import (
    ExpiryTable,
    MemoryFilter,
    RowExtras,
    epoch,
    row_extras,
)
from langchain_tdai_recall.stores._index.keyword import KeywordHits, KeywordIndex, KeywordState
from langchain_tdai_recall.stores._index.profile import ProfileHead
from langchain_tdai_recall.stores._index.times import (
    RowTime,
    TimeArrays,
    TimeIndex,
    TimeWindow,
    epochs,
)
from langchain_tdai_recall.stores.records import Layer, MemoryRow, MessageRow
from langchain_tdai_recall.text.tokenize import Query, Tokenizer
from langchain_tdai_recall.types import Scope

if TYPE_CHECKING:
    from langchain_tdai_recall.stores._index.vectors import VectorIndex, VectorState

__all__ = ["LayerIndex", "LayerState", "RowMeta", "RowSource", "row_meta"]

logger = logging.getLogger(__name__)

_EMPTY_IDS: Final = np.empty(0, dtype=np.int64)
_T = TypeVar("_T")

PROFILE_HEAD: Final = 512
"""Rows of an L1 index kept in profile order (recall reads at most a few hundred of them)."""

ROW_CHUNK: Final = 10_000
"""Rows read from the backend per query when an index catches up (a first build reads many)."""
_INDEX_BYTES: Final = 6 * 1024
"""Bytes of an empty `LayerIndex` (its objects, locks and containers), measured."""
_ROW_BYTES: Final = 700
"""Bytes per indexed row outside the keyword and vector parts, measured."""
_EXTRA_BYTES: Final = 300
"""Bytes per row with extras (expiry, metadata, activity times)."""
TRACKED_PRIORITY: Final = 60
"""Memories at or above this priority are listed by `pinned_rows` (the lowest configurable
`recall.pin_priority`)."""


class RowSource(Protocol):
    """Where a `LayerIndex` reads its rows: a backend's records, by scope and generation.

    Every write bumps its scope's generation and stamps the rows it wrote; a deletion leaves a
    tombstone. A generation read first and the rows read after it must include every write up to
    that generation (later ones may show up too: applying a row twice is harmless).
    """

    def generation(self, scope_id: int) -> int:
        """Current generation of a scope (0 before its first write)."""
        ...

    def count(self, layer: Layer, scope_id: int | None = None) -> int:
        """Rows of a scope's layer (a restored index is checked against it)."""
        ...

    def rowids_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row ids of a scope's layer written after `generation`, ascending."""
        ...

    def tombstones_since(self, scope_id: int, layer: Layer, generation: int) -> list[int]:
        """Row references deleted from a scope's layer after `generation`."""
        ...

    def memory_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MemoryRow]:
        """L1 rows of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        ...

    def message_rows_since(
        self, scope_id: int, generation: int, scope: Scope, *, after: int, upto: int
    ) -> list[MessageRow]:
        """L0 rows of a scope written after `generation`, with their vectors.

        Those of references above `after` and up to `upto`, by reference.
        """
        ...


class RowMeta(NamedTuple):
    """Ranking and filtering fields of one indexed row.

    A named tuple rather than a dataclass: a million of them are created when a large scope's
    index is restored, and a tuple is built several times faster (`RowMeta._make`).
    """

    id: str
    """Public id."""
    kind: str
    """Memory type (L1) or role (L0)."""
    group: str
    """Scene name (L1) or session key (L0)."""
    priority: int
    """Priority (L1); 0 for messages."""
    recency: str
    """`updated_at` (L1) or `recorded_at` (L0); ISO strings compare chronologically."""
    created: str
    """`created_at` (L1) or `recorded_at` (L0): the pinned context's tie-break, read here so
    that a recall loads only the records it injects (the same object as `recency` when equal)."""


@dataclass(frozen=True, slots=True)
class LayerState:
    """A `LayerIndex` at one generation, as plain data (see `stores._index.snapshot`)."""

    generation: int
    rowids: npt.NDArray[np.int64]
    metas: list[RowMeta]
    """Ranking fields of each row of `rowids`, in the same order."""
    keyword: KeywordState
    vectors: VectorState | None
    extras: dict[int, RowExtras] = field(default_factory=dict)
    """The sparse fields (expiry, metadata, activity times) of the rows that have them."""


def row_meta(  # noqa: PLR0917 - the fields of a RowMeta, in order
    id_: str, kind: str, group: str, priority: int, recency: str, created: str
) -> RowMeta:
    """A `RowMeta` whose repetitive strings (type or role, scene or session) are shared."""
    return RowMeta(
        id_,
        sys.intern(kind),
        sys.intern(group),
        priority,
        recency,
        recency if created == recency else created,
    )


def _order_key(meta: RowMeta) -> int:
    """Priority, then recency (epoch ms), packed into one int64 that sorts like the tie-break."""
    try:
        moment = dt.datetime.fromisoformat(meta.recency)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        recency_ms = max(int(moment.timestamp() * 1000), 0)
    except ValueError:
        recency_ms = 0
    return (meta.priority + 2) * (1 << 44) + min(recency_ms, (1 << 44) - 1)


def _indexed_text(row: MemoryRow | MessageRow) -> str:
    """The text a row is keyword-indexed from: a message with the end of the one before it."""
    if isinstance(row, MessageRow) and row.context:
        return f"{row.context}\n{row.record.content}"
    return row.record.content


class LayerIndex:
    """Keyword + vector index of one scope's layer. Thread-safe."""

    def __init__(
        self,
        db: RowSource,
        scope_id: int,
        scope: Scope,
        layer: Layer,
        *,
        tokenizer: Tokenizer,
        embedder: str | None,
    ) -> None:
        self.scope_id: Final = scope_id
        self.layer: Final = layer
        self.tokenizer: Final = tokenizer
        self.embedder: Final = embedder
        self._db = db
        self._scope = scope
        self._klock = threading.Lock()
        """Held by keyword and row-field readers, and by writers (with `_vlock`)."""
        self._vlock = threading.Lock()
        """Held by vector readers, and by writers (with `_klock`): the two legs of one search
        can run at the same time, while a refresh excludes both."""
        self._generation = 0
        self._version = 0
        """Bumped whenever this layer's rows change (a refresh for the other layer does not)."""
        self._memos: dict[Hashable, tuple[tuple[int, int], object]] = {}
        self.keyword = KeywordIndex(tokenizer.identity)
        self.vectors: VectorIndex | None = None
        self.meta: dict[int, RowMeta] = {}
        self.high_priority: dict[int, int] = {}
        """L1 rows pinned by priority: instructions with priority -1 (standing rules) and
        memories with priority >= `TRACKED_PRIORITY`, with their priority."""
        self._profile = ProfileHead(PROFILE_HEAD)
        """L1 rows in profile order (see `stores._index.profile`)."""
        self.extras: dict[int, RowExtras] = {}
        """L1 rows with an expiry, metadata or activity times (`stores._index.extras`)."""
        self._hidden: set[int] = set()
        """L1 rows stored but not searchable by query nor recalled."""
        self._expiring: dict[int, float] = {}
        """L1 rows with an expiry (epoch seconds): usually none, so recall pays nothing."""
        self._expiry: tuple[int, ExpiryTable] | None = None
        """The expiry table and the version it was built at."""
        self._excluded: tuple[tuple[int, int], frozenset[int]] = ((0, 0), frozenset())
        """The rows left out of searches, by (version, expired rows) they were found at."""
        self._written: dict[int, float] = {}
        """Write times (epoch seconds) by row, read from `RowMeta.created` when a time lookup
        first needs them (a scope never asked about time pays nothing)."""
        self._times = TimeIndex()
        """The rows' times for time-range lookups (`stores._index.times`)."""

    def refresh(self) -> None:
        """Apply every change written to this scope's layer since the last refresh."""
        current = self._db.generation(self.scope_id)
        if current == self._generation:
            return
        with self._writing():
            if current == self._generation:
                return
            seen = self._generation
            removed = self._db.tombstones_since(self.scope_id, self.layer, seen)
            if removed:
                self._remove(removed)
            # in chunks of row ids: a first build of a large scope never holds every row and its
            # stored vector at once (their peak is what a process keeps as resident memory), and
            # each chunk reads only its own rows
            rowids = self._db.rowids_since(self.scope_id, self.layer, seen)
            for start in range(0, len(rowids), ROW_CHUNK):
                after = rowids[start - 1] if start else -1
                upto = rowids[min(start + ROW_CHUNK, len(rowids)) - 1]
                rows: list[MemoryRow] | list[MessageRow]
                if self.layer == "l1":
                    rows = self._db.memory_rows_since(
                        self.scope_id, seen, self._scope, after=after, upto=upto
                    )
                else:
                    rows = self._db.message_rows_since(
                        self.scope_id, seen, self._scope, after=after, upto=upto
                    )
                self._apply(rows)
            self._generation = current
            if seen == 0:
                logger.info(
                    "indexed %d %s rows of scope %s", len(self.meta), self.layer, self.scope_id
                )

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Exclude every reader: both locks, always in this order."""
        with self._klock, self._vlock:
            yield

    @property
    def generation(self) -> int:
        """The generation this index has caught up to."""
        return self._generation

    def nbytes(self) -> int:
        """Approximate bytes this index holds, for the index cache's budget (O(1)).

        Measured with `tracemalloc` on CPython 3.11 (`benchmarks/perf/many_users.py`): a row's
        fields (`RowMeta`, its strings, its dict slots, recall's memos) take about 700 bytes, an
        empty index about 6 KiB; the keyword and vector parts report their own.
        """
        vectors = self.vectors.nbytes if self.vectors is not None else 0
        return (
            _INDEX_BYTES
            + _ROW_BYTES * len(self.meta)
            + _EXTRA_BYTES * len(self.extras)
            + self.keyword.nbytes
            + vectors
        )

    def _track_priority(self, rowid: int, meta: RowMeta) -> None:
        if self.layer == "l1":
            self._profile.add(rowid, meta, self._active(rowid))
        if self.layer == "l1" and (
            meta.priority >= TRACKED_PRIORITY
            or (meta.priority == -1 and meta.kind == "instruction")
        ):
            self.high_priority[rowid] = meta.priority
        else:
            self.high_priority.pop(rowid, None)

    def export_state(self) -> LayerState:
        """Everything this index holds, at the generation it has caught up to."""
        with self._writing():
            rowids = np.fromiter(self.meta, dtype=np.int64, count=len(self.meta))
            return LayerState(
                generation=self._generation,
                rowids=rowids,
                metas=list(self.meta.values()),
                keyword=self.keyword.export_state(),
                vectors=self.vectors.export_state() if self.vectors is not None else None,
                extras=dict(self.extras),
            )

    def restore(self, state: LayerState) -> None:
        """Adopt a state exported earlier (by this or another process); refresh() catches up.

        Raises:
            ValueError: If the state is inconsistent (the caller then builds from the rows).
        """
        from langchain_tdai_recall.stores._index.vectors import VectorIndex  # noqa: PLC0415

        if state.keyword.tokenizer_identity != self.tokenizer.identity:
            msg = "the keyword index was built by another tokenizer"
            raise ValueError(msg)
        keyword = KeywordIndex.from_state(state.keyword)
        vectors = VectorIndex.from_state(state.vectors) if state.vectors is not None else None
        rowids = state.rowids.tolist()
        if len(rowids) != len(state.metas) or len(keyword) != len(rowids):
            msg = "the row fields and the keyword index disagree"
            raise ValueError(msg)
        if not np.array_equal(np.sort(state.rowids), np.sort(state.keyword.doc_ids)):
            msg = "the row fields and the keyword index hold different rows"
            raise ValueError(msg)
        if state.vectors is not None and not np.isin(state.vectors.ids, state.rowids).all():
            msg = "the vector index holds rows the row fields do not"
            raise ValueError(msg)
        if not set(state.extras) <= set(rowids):
            msg = "the row extras name rows the row fields do not"
            raise ValueError(msg)
        with self._writing():
            self.keyword = keyword
            self.vectors = vectors
            self.meta = dict(zip(rowids, state.metas, strict=True))
            self.extras = dict(state.extras)
            self._written = {}
            self._times.reset()
            self._hidden = {rowid for rowid, e in self.extras.items() if e.hidden}
            self._expiring = {
                rowid: e.expires for rowid, e in self.extras.items() if e.expires is not None
            }
            self._version += 1
            self.high_priority = {}
            if self.layer == "l1":
                self._profile.reset(
                    (rowid, meta, self._active(rowid)) for rowid, meta in self.meta.items()
                )
                self.high_priority = {
                    rowid: meta.priority
                    for rowid, meta in self.meta.items()
                    if meta.priority >= TRACKED_PRIORITY
                    or (meta.priority == -1 and meta.kind == "instruction")
                }
            self._generation = state.generation

    def memo(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """`compute()`, cached until this layer's rows change (not its scope's other layer).

        Recall's pinned context is chosen among all of a scope's high-priority memories; at
        100k memories that takes tens of milliseconds, and it only changes with the L1 rows.
        """
        with self._klock:
            version = self._state_key()
            hit = self._memos.get(key)
        if hit is not None and hit[0] == version:
            return cast("_T", hit[1])
        value = compute()
        with self._klock:
            self._memos[key] = (version, value)
        return value

    # -- expiry and hidden rows (issue 16) ------------------------------------------------------

    def _expiry_table(self) -> ExpiryTable:
        """The expiring rows sorted by expiry, rebuilt after a change of the rows."""
        cached = self._expiry
        if cached is not None and cached[0] == self._version:
            return cached[1]
        table = ExpiryTable(self._expiring)
        self._expiry = (self._version, table)
        return table

    def _state_key(self) -> tuple[int, int]:
        """(version, rows expired now): what recall's memo depends on. Call under `_klock`."""
        if not self._expiring:
            return (self._version, 0)
        return (self._version, self._expiry_table().count(time.time()))

    def excluded(self) -> frozenset[int]:
        """Rows no search or recall may return now: the expired and the hidden ones."""
        with self._klock:
            key = self._state_key()
            if key == self._excluded[0]:
                return self._excluded[1]
            rows = frozenset(self._expiry_table().first(key[1])) | self._hidden
            self._excluded = (key, rows)
            return rows

    # -- time ranges (time-aware recall, issue 22) ---------------------------------------------

    def rows_in_time(self, window: TimeWindow) -> npt.NDArray[np.int64]:
        """L1 rows whose activity time (else write time) overlaps `window`, sorted.

        A persona fact or instruction is matched by its activity time only: when it was
        written says when it was learned, not when anything happened. An event without an
        activity time is matched by its write time when `window.written`.

        Expired and hidden rows are included (searches leave them out). The table is built on
        the first call and kept current after writes (`stores._index.times.TimeIndex`).
        """
        with self._klock:
            return self._times.rows(window, self._row_time, self._time_arrays)

    def _time_arrays(self) -> TimeArrays:
        """Every row's time, built in bulk (the first lookup of a large scope). Under `_klock`."""
        active: dict[int, tuple[float, float]] = {}
        for rowid, extra in self.extras.items():
            if extra.active_from is not None and rowid in self.meta:
                end = extra.active_to if extra.active_to is not None else extra.active_from
                active[rowid] = (extra.active_from, max(end, extra.active_from))
        timed = [
            (rowid, meta.created)
            for rowid, meta in self.meta.items()
            if rowid not in active and (meta.kind == "episodic" or self.layer == "l0")
        ]
        written = epochs([created for _, created in timed])
        n_active = len(active)
        return (
            np.fromiter(itertools.chain(active, (r for r, _ in timed)), np.int64),
            np.concatenate(
                (np.fromiter((a for a, _ in active.values()), float, n_active), written)
            ),
            np.concatenate(
                (np.fromiter((b for _, b in active.values()), float, n_active), written)
            ),
            np.concatenate((np.zeros(n_active, dtype=bool), np.ones(len(timed), dtype=bool))),
        )

    def _row_time(self, rowid: int) -> RowTime | None:
        """A row's time for range lookups, or `None`. Call under `_klock`."""
        meta = self.meta.get(rowid)
        if meta is None:
            return None
        extra = self.extras.get(rowid)
        if extra is not None and extra.active_from is not None:
            end = extra.active_to if extra.active_to is not None else extra.active_from
            return extra.active_from, max(end, extra.active_from), False
        if meta.kind != "episodic" and self.layer == "l1":
            return None
        at = self._written.get(rowid)
        if at is None:
            at = self._written[rowid] = epoch(meta.created) or 0.0
        return at, at, True

    def newest_rows(self, where: MemoryFilter | None) -> list[int]:
        """Rows passing `where` that have not expired, hidden ones included, newest first.

        Order: last write time (newest first), then id. Used to list items without a query.
        """
        allowed = self.allowed(kind=None, group=None, exact_group=False, where=where)
        with self._klock:
            expired = set(self._expiry_table().first(self._state_key()[1]))
            rows = list(self.meta) if allowed is None else allowed.tolist()
            keyed = [
                (self.meta[r].recency, self.meta[r].id, r)
                for r in rows
                if r in self.meta and r not in expired
            ]
        keyed.sort(key=lambda t: t[1])
        keyed.sort(key=lambda t: t[0], reverse=True)
        return [r for _, _, r in keyed]

    def _remove(self, rowids: list[int]) -> None:
        self._version += 1
        self.keyword.remove(rowids)
        if self.vectors is not None:
            self.vectors.remove(np.asarray(rowids, dtype=np.int64))
        for rowid in rowids:
            self.meta.pop(rowid, None)
            self.high_priority.pop(rowid, None)
            self._profile.remove(rowid)
            self.extras.pop(rowid, None)
            self._hidden.discard(rowid)
            self._expiring.pop(rowid, None)
            self._written.pop(rowid, None)
        self._times.changed(rowids)

    def _active(self, rowid: int) -> float | None:
        """The activity time of an L1 row (its end, else its start or timestamp), if any."""
        extras = self.extras.get(rowid)
        if extras is None:
            return None
        return extras.active_to if extras.active_to is not None else extras.active_from

    def _track_extras(self, row: MemoryRow) -> None:
        extras = row_extras(row.record)
        if extras is None:
            self.extras.pop(row.rowid, None)
        else:
            self.extras[row.rowid] = extras
        if extras is not None and extras.hidden:
            self._hidden.add(row.rowid)
        else:
            self._hidden.discard(row.rowid)
        if extras is not None and extras.expires is not None:
            self._expiring[row.rowid] = extras.expires
        else:
            self._expiring.pop(row.rowid, None)

    def _apply(self, rows: list[MemoryRow] | list[MessageRow]) -> None:
        if rows:
            self._version += 1
        with_vec: list[int] = []
        blobs: list[bytes] = []
        without_vec: list[int] = []
        for row in rows:
            if isinstance(row, MemoryRow):
                self._track_extras(row)
                meta = row_meta(
                    row.record.id,
                    row.record.type,
                    row.record.scene_name,
                    row.record.priority,
                    row.record.updated_at,
                    row.record.created_at,
                )
                self._written.pop(row.rowid, None)
            else:
                meta = row_meta(
                    row.record.id,
                    row.record.role,
                    row.record.session_key,
                    0,
                    row.record.recorded_at,
                    row.record.recorded_at,
                )
            self.meta[row.rowid] = meta
            self._track_priority(row.rowid, meta)
            self._times.changed((row.rowid,))
            if self.embedder is not None and row.embedder == self.embedder and row.vector:
                with_vec.append(row.rowid)
                blobs.append(row.vector)
            else:
                without_vec.append(row.rowid)
        tokenize = self.tokenizer.document_tokens
        self.keyword.add_many(
            [row.rowid for row in rows],
            [tokenize(_indexed_text(row)) for row in rows],
            [_order_key(self.meta[row.rowid]) for row in rows],
        )
        if without_vec and self.vectors is not None:
            self.vectors.remove(np.asarray(without_vec, dtype=np.int64))
        if with_vec:
            matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(with_vec), -1)
            if self.vectors is None or (
                len(self.vectors) == 0 and matrix.shape[1] != self.vectors.dim
            ):
                # faiss loads here, on the first vector, not at package import; an emptied
                # index takes the dimension of the vectors that replace the old ones
                from langchain_tdai_recall.stores._index.vectors import VectorIndex  # noqa: PLC0415

                self.vectors = VectorIndex(matrix.shape[1])
            if matrix.shape[1] != self.vectors.dim:
                logger.warning(
                    "skipping %d vectors of dimension %d in an index of dimension %d",
                    len(with_vec),
                    matrix.shape[1],
                    self.vectors.dim,
                )
                return
            self.vectors.add(np.asarray(with_vec, dtype=np.int64), matrix)

    # -- searching (call refresh() first) ------------------------------------------------------

    def allowed(
        self,
        *,
        kind: str | None,
        group: str | None,
        exact_group: bool,
        where: MemoryFilter | None = None,
    ) -> npt.NDArray[np.int64] | None:
        """Row ids passing the filters, or `None` when there are no filters.

        `group` matches the scene name case-insensitively as a substring, or the session key
        exactly when `exact_group`; `where` tests metadata and times (`MemoryFilter`).
        """
        if kind is None and group is None and where is None:
            return None
        needle = (group or "").casefold()
        extras = self.extras
        with self._klock:
            picked = [
                rowid
                for rowid, m in self.meta.items()
                if (kind is None or m.kind == kind)
                and (
                    group is None
                    or (m.group == group if exact_group else needle in m.group.casefold())
                )
                and (where is None or where.matches(m.created, extras.get(rowid), m.kind))
            ]
        return np.asarray(sorted(picked), dtype=np.int64) if picked else _EMPTY_IDS

    def keyword_search(
        self,
        query: Query,
        *,
        limit: int,
        allowed: npt.NDArray[np.int64] | None,
        also: Sequence[int] = (),
    ) -> KeywordHits:
        """The `limit` best keyword candidates, plus the rows in `also`, with their scores."""
        with self._klock:
            mask = self.keyword.slot_mask(allowed) if allowed is not None else None
            return self.keyword.search(query, limit=limit, allowed=mask, also=also)

    def keyword_scores(self, query: Query, rowids: Sequence[int]) -> KeywordHits:
        """Keyword scores of the given rows only (`KeywordIndex.score`)."""
        with self._klock:
            return self.keyword.score(query, rowids)

    def vector_count(self) -> int:
        """Rows that have a vector in the index (the others are pending or being re-embedded)."""
        with self._vlock:
            return len(self.vectors) if self.vectors is not None else 0

    def unembedded_rows(self) -> list[int]:
        """Searchable rows that have no vector of the current embedder yet, in reference order.

        What a search by meaning would miss right after a write: the background upkeep
        (`_embedding.upkeep.VectorUpkeep`) embeds these shortly. Hidden and expired rows are
        left out, since no query search returns them. Usually empty, and then found in O(1).
        """
        excluded = self.excluded()
        with self._writing():
            vectors = self.vectors
            if vectors is not None and len(vectors) >= len(self.meta):
                return []
            return [
                rowid
                for rowid in self.meta
                if rowid not in excluded and (vectors is None or rowid not in vectors)
            ]

    def vector_dim(self) -> int | None:
        """Dimension of the indexed vectors, or `None` before the first vector."""
        with self._vlock:
            return self.vectors.dim if self.vectors is not None and len(self.vectors) else None

    def vector_search(
        self,
        query: npt.NDArray[np.float32],
        *,
        limit: int,
        allowed: npt.NDArray[np.int64] | None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The `limit` rows most similar to `query` (cosine), best first."""
        with self._vlock:
            if self.vectors is None or len(self.vectors) == 0 or query.shape[0] != self.vectors.dim:
                return _EMPTY_IDS, np.empty(0, dtype=np.float32)
            if allowed is not None and allowed.size == 0:
                return _EMPTY_IDS, np.empty(0, dtype=np.float32)
            return self.vectors.search(query, limit, allowed=allowed)

    def vector_scores(
        self, query: npt.NDArray[np.float32], rowids: Sequence[int]
    ) -> dict[int, float]:
        """Exact cosine of `query` with each given row that has a vector."""
        if not rowids:
            return {}
        with self._vlock:
            if self.vectors is None or query.shape[0] != self.vectors.dim:
                return {}
            return self.vectors.scores(query, np.asarray(rowids, dtype=np.int64))

    def profile_rows(self, limit: int, skip: set[int]) -> list[int]:
        """The first `limit` L1 row references in profile order, leaving out `skip`.

        Profile order: priority (highest first), then `persona`, `instruction`, `episodic`,
        then oldest, then id; standing rules (priority -1) are never listed.
        """
        hidden = self.excluded()
        with self._klock:
            return self._profile.first(limit, skip | hidden if hidden else skip)

    def pinned_rows(self, min_priority: int) -> list[tuple[int, int]]:
        """(row id, priority) of the rows pinned into the system context, by row id.

        These are the standing rules (instructions with priority -1) and the memories with
        priority >= `min_priority`.
        """
        hidden = self.excluded()
        with self._klock:
            return sorted(
                (rowid, p)
                for rowid, p in self.high_priority.items()
                if (p == -1 or p >= min_priority) and rowid not in hidden
            )

    def stats(self) -> tuple[int, int]:
        """(rows indexed, rows with vectors)."""
        with self._writing():
            return len(self.meta), (len(self.vectors) if self.vectors is not None else 0)
