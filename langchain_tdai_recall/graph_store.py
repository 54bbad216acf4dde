"""`TdaiStore`: a `TdaiMemory` as a LangGraph `BaseStore` (`memory.as_store()`).

LangGraph gives tools and nodes a store (`runtime.store`, `create_agent(..., store=...)`,
LangMem's memory tools); this adapter lets that store be the memory that recall reads. It
behaves like LangGraph's own stores; where it differs, it says so below.

**Namespaces.** A store has one namespace *template* (`_graph.namespaces`): literals and the
placeholders `"{user_id}"` (required, once) and `"{agent_id}"` (optional). The default,
`("memories", "{user_id}")`, is LangMem's; `("{user_id}",)` makes the first element the user,
as a generic LangGraph store. An item may live in any namespace that starts like the template
(literals equal, ids at the placeholders) and goes on as deep as the application likes:
`("memories", "alice")`, `("memories", "alice", "work")` and `("memories", "alice", "work",
"2026")` are three namespaces of user `alice`'s memory (shared memory: `agent_id=None`, or the
store's fixed `agent_id`). Every element is part of the item's identity: a search or listing
under a prefix sees only the items under it. A namespace that does not start like the template
is refused with `NamespaceError` (a `ScopeError` and LangGraph's `InvalidNamespaceError`), and
so are LangGraph's invalid labels (empty, `.`, NUL).

A search prefix that stops above the user (or agent) element spans users: it is refused with
`NamespaceError` unless the store was made for administration with `cross_scope=True`, which
then searches every scope. `list_namespaces` lists what is stored, in every scope (it names the
users, not their memories).

**Items are memories** of the scope their namespace names, so automatic recall injects them
(`_graph.items` says how they are kept). The value is kept whole (in the memory's metadata, so
the 16 KiB metadata bound applies); the memory's text, which search and recall use, is taken
from the value: its `index` fields (the store's `index={"fields": [...]}` or the put's
`index=[...]`, LangGraph path syntax), else its `"content"` string, or the string at
`content.content` (what LangMem's `create_memory_store_manager` writes), else its JSON.
`index=False`, or a value with no text at its fields, stores an item that `get` and searches
return but that no query ranks and no recall sees. Memories written through `TdaiMemory`
itself are items of the template's namespace, valued `{"content": ..., "type": ...}` plus their
metadata. `created_at` / `updated_at` are the memory's; an update's `updated_at` is later than
the one it replaces. A value's `type` and `priority` (top level, or inside its `content` object)
become the memory's (`value_rating`); with a formation model, an item without a priority is
rated in the background (`formation.rating`).

**Search** follows `BaseStore`: without a query, items come newest first; a `query` ranks every
item under the prefix that passes the filter (`_graph.ranking`): by cosine similarity with the
query (the score LangGraph's stores return; the best of an item's indexed texts when it has
several), or by keyword coverage when there is no query vector; items no query ranks follow
with score `None`. `limit` and `offset` page through that one order. Read-your-writes: a query
search first embeds the items of its scope written before it that the background upkeep has
not embedded yet (bounded by `embedding.query_timeout_ms`). `filter` matches the value's fields
(`_exchange.filters`: equality, `$eq $ne $gt $gte $lt $lte $in $nin`, partial nested
objects). The `dims`, `embed` and `distance_type` of an index config are not used: the memory's
own embedder embeds every text, and scores are cosines.

**TTL** follows LangGraph's `TTLConfig`: `default_ttl` minutes for puts without a `ttl`, and
`refresh_on_read` (default `True`) renews an item's expiry when a get or search returns it. The
expiry is the memory's `expires_at`: expired items are never returned nor recalled, and the
memory's background sweep deletes them every `store.expiry_sweep_seconds`, or every
`sweep_interval_minutes` when that is shorter (`as_store` shortens the memory's sweep; a
read-only memory has none).

`batch` checks every operation before running any, then runs them in order (a get after a put
of the same item sees it); `abatch` runs `batch` on a worker thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
import numpy.typing as npt
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from langchain_tdai_recall._exchange.filters import ValueTest, compile_value_filter
from langchain_tdai_recall._exchange.metadata import check_metadata, expiry_after, is_expired
from langchain_tdai_recall._exchange.records import check_id, now_iso
from langchain_tdai_recall._graph.items import (
    FieldVectors,
    derived_id,
    filter_view,
    item_key,
    item_namespace,
    item_part,
    item_value,
)
from langchain_tdai_recall._graph.namespaces import (
    DEFAULT_NAMESPACE,
    NamespaceError,
    NamespaceTemplate,
    check_labels,
    condition_matches,
)
from langchain_tdai_recall._graph.ranking import rank_rows
from langchain_tdai_recall.errors import ConfigError, TdaiRecallError
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.types import MEMORY_TYPES, MemoryRecord, MemoryType, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import StoreHost
    from langchain_tdai_recall.recall.hits import HitSearch
    from langchain_tdai_recall.stores._index.layer import LayerIndex

__all__ = ["DEFAULT_NAMESPACE", "NamespaceError", "NamespaceTemplate", "TdaiStore"]

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32] | None]
"""Embeds texts now, bounded by the embedding timeout; `None` when it could not."""


_NEWEST: Final = "tdai_store:newest"
"""The memo key of a scope's rows in newest-first order (`LayerIndex.memo`)."""

_WRITE_LOCKS: weakref.WeakKeyDictionary[BaseMemoryStore, threading.Lock] = (
    weakref.WeakKeyDictionary()
)
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(store: BaseMemoryStore) -> threading.Lock:
    """The lock every `TdaiStore` of one memory store takes to find and write an item."""
    with _WRITE_LOCKS_GUARD:
        lock = _WRITE_LOCKS.get(store)
        if lock is None:
            lock = _WRITE_LOCKS[store] = threading.Lock()
        return lock


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return dt.datetime.fromtimestamp(0, dt.UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def value_rating(value: Mapping[str, Any]) -> dict[str, Any]:
    """The memory `type` and `priority` a store value gives, validated (absent keys: none).

    Read from the value's top level, else from its `content` when that is an object (what
    LangMem's tools write for a custom schema: `{"content": {"content": ..., "type": ...,
    "priority": ...}}`).

    Raises:
        ConfigError: For a type that is not a memory type or a priority outside 0-100.
    """
    inner = value.get("content")
    out: dict[str, Any] = {}
    for key in ("type", "priority"):
        if key in value:
            out[key] = value[key]
        elif isinstance(inner, Mapping) and key in inner:
            out[key] = inner[key]
    kind = out.get("type")
    if kind is not None and kind not in MEMORY_TYPES:
        msg = (
            f"a store value's type must be one of {list(MEMORY_TYPES)} (or absent), "
            f"got {kind!r:.40}"
        )
        raise ConfigError(msg)
    if "type" in out and kind is None:
        del out["type"]
    priority = out.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 100
    ):
        msg = (
            f"a store value's priority must be an integer 0-100 (or absent), got "
            f"{priority!r:.40}; standing rules (-1) are written with add_memory"
        )
        raise ConfigError(msg)
    if "priority" in out and priority is None:
        del out["priority"]
    return out


def _check_minutes(name: str, value: object, *, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        msg = f"{name} must be a positive number of minutes or None, got {value!r:.60}"
        raise ConfigError(msg)
    return float(value)


class TdaiStore(BaseStore):
    """A LangGraph `BaseStore` over a `TdaiMemory` (build it with `memory.as_store()`).

    See the module docstring for how namespaces, values, search, filters and TTL map onto the
    memory. Every operation runs in the scope its namespace names and sees only that scope,
    except a search or listing that spans scopes (see `cross_scope`).

    It depends on the facade only through `_turn.host.StoreHost` (public methods); `as_store` hands
    it the memory's store, its ranked search, and the embedding calls by name.

    Args:
        memory: The memory the items live in (recall reads them).
        store: That memory's store (reads, expiry renewal, scopes, namespaces).
        hits: That memory's search (the query vector).
        fresh: Embeds a scope's rows still without a vector (read-your-writes); `None` when
            the memory cannot (no embedder, read-only).
        embed: Embeds the indexed texts of an item that has several; `None` without one.
        namespace: The namespace template (default `("memories", "{user_id}")`).
        agent_id: The agent of every item when the template has no `"{agent_id}"` (default:
            the user's shared memory).
        index: LangGraph's index config; only `fields` is used.
        ttl: LangGraph's `TTLConfig` (`default_ttl` in minutes, `refresh_on_read`,
            `sweep_interval_minutes`).
        memory_type: Type of new memories written by puts whose value gives none.
        rate: Queues a stored memory for a background rating (`formation.rating`): set when
            the memory has a formation model; items whose value gives no priority are rated.
        cross_scope: Let a search whose prefix stops above the user element search every
            scope (an administrative store; never give one to an agent).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        memory: StoreHost,
        *,
        store: BaseMemoryStore,
        hits: HitSearch,
        fresh: Callable[[Scope], None] | None = None,
        embed: Embed | None = None,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        memory_type: MemoryType = "episodic",
        rate: Callable[[Scope, str], None] | None = None,
        cross_scope: bool = False,
    ) -> None:
        self.memory = memory
        self._rate = rate
        self.store = store
        self.hits = hits
        self._fresh = fresh
        self._embed = embed
        self.template = NamespaceTemplate(namespace, agent_id=agent_id)
        if index is not None and not isinstance(cast("object", index), Mapping):
            msg = f"index must be a LangGraph IndexConfig dict or None, got {index!r:.60}"
            raise ConfigError(msg)
        fields = index.get("fields") if index is not None else None
        if fields is not None and (
            not isinstance(fields, list | tuple) or not all(isinstance(f, str) for f in fields)
        ):
            msg = f"index['fields'] must be a list of field paths, got {fields!r:.60}"
            raise ConfigError(msg)
        self.index_config = index
        self._fields: list[str] | None = list(fields) if fields is not None else None
        if ttl is not None and not isinstance(cast("object", ttl), Mapping):
            msg = f"ttl must be a LangGraph TTLConfig dict or None, got {ttl!r:.60}"
            raise ConfigError(msg)
        _check_minutes("ttl['default_ttl']", (ttl or {}).get("default_ttl"))
        sweep = _check_minutes(
            "ttl['sweep_interval_minutes']", (ttl or {}).get("sweep_interval_minutes")
        )
        self.sweep_seconds: float | None = sweep * 60 if sweep is not None else None
        """The longest wait between expiry sweeps this store asks for (`as_store` applies it)."""
        self.ttl_config = ttl
        if memory_type not in MEMORY_TYPES:
            msg = f"memory_type must be one of {list(MEMORY_TYPES)}, got {memory_type!r}"
            raise ConfigError(msg)
        self.memory_type: MemoryType = memory_type
        if not isinstance(cast("object", cross_scope), bool):
            msg = f"cross_scope must be True or False, got {cross_scope!r:.60}"
            raise ConfigError(msg)
        self.cross_scope = cross_scope
        self._write_lock = _write_lock(store)
        """Finding an item's memory id and writing it are one step for the memory's stores."""

    def __repr__(self) -> str:
        return f"TdaiStore({self.memory!r}, namespace={self.template!r})"

    # -- batch --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Check every operation, then run them in order; one result per operation.

        Raises:
            NamespaceError: If an operation's namespace breaks LangGraph's label rules or does
                not fit the template; nothing of the batch has run then.
            ConfigError: For another invalid operation (also before anything runs).
        """
        ops = list(ops)
        for op in ops:
            self._check(op)
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async version of `batch` (on a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _check(self, op: object) -> None:
        if isinstance(op, GetOp | PutOp):
            self.template.scope(check_labels(op.namespace, "namespace"))
            key = self._key(op.key)
            if isinstance(op, PutOp):
                self._check_put(op)
                if op.value is not None:  # what the put writes is checked too: a batch is whole
                    _item_metadata(None, self._part(op, tuple(op.namespace), key)[0], None)
        elif isinstance(op, SearchOp):
            self._scope_of_prefix(check_labels(op.namespace_prefix, "namespace prefix"))
            for name, value in (("limit", op.limit), ("offset", op.offset)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    msg = f"{name} must be a non-negative integer, got {value!r}"
                    raise ConfigError(msg)
            compile_value_filter(op.filter)
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                path: object = condition.path
                check_labels((path,) if isinstance(path, str) else path, "listing path")
        else:
            msg = f"unknown store operation {type(op).__name__}"
            raise ConfigError(msg)

    @staticmethod
    def _check_put(op: PutOp) -> None:
        value: object = op.value
        if value is not None and not isinstance(value, Mapping):
            msg = f"a store value must be a dict, got {type(op.value).__name__} {op.value!r:.60}"
            raise ConfigError(msg)
        index: object = op.index
        if index is not None and index is not False and not isinstance(index, list | tuple):
            msg = f"index must be False, a list of field paths or None, got {op.index!r:.60}"
            raise ConfigError(msg)
        _check_minutes("ttl", op.ttl)
        if isinstance(value, Mapping):
            value_rating(value)

    def _run(self, op: object) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        assert isinstance(op, ListNamespacesOp)
        return self._list_namespaces(op)

    # -- items --------------------------------------------------------------------------------

    def _key(self, key: object) -> str:
        try:
            return check_id("key", key)
        except TdaiRecallError as exc:
            msg = f"{exc} (a store key is kept as the memory id)"
            raise ConfigError(msg) from None

    def _locate(
        self, scope: Scope, namespace: tuple[str, ...], key: str
    ) -> tuple[MemoryRecord | None, str | None, MemoryRecord | None]:
        """Where item (namespace, key) lives: (its record, else a free id and what is there).

        The free id is the key when no live memory holds it, else the derived id; the record
        found there is an expired one (to be replaced) or `None`.
        """
        free: tuple[str, MemoryRecord | None] | None = None
        for memory_id in (key, derived_id(namespace, key)):
            raw = self.store.get_memory(scope, memory_id)
            live = raw if raw is not None and not is_expired(raw) else None
            if live is not None and self._is_item(live, scope, namespace, key):
                return live, None, None
            if live is None and free is None:
                free = (memory_id, raw)
        if free is None:
            return None, None, None
        return None, free[0], free[1]

    def _is_item(
        self, rec: MemoryRecord, scope: Scope, namespace: tuple[str, ...], key: str
    ) -> bool:
        return (
            item_key(rec) == key and item_namespace(rec.metadata, self.template, scope) == namespace
        )

    def _item(self, record: MemoryRecord, namespace: tuple[str, ...]) -> Item:
        return Item(
            value=item_value(record),
            key=item_key(record),
            namespace=namespace,
            created_at=_moment(record.created_at),
            updated_at=_moment(record.updated_at),
        )

    def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        scope = self.template.scope(namespace)
        self.memory.check_open()
        record, _, _ = self._locate(scope, namespace, self._key(op.key))
        if record is None:
            return None
        if op.refresh_ttl:
            record = self._refresh(scope, [record])[0]
        return self._item(record, namespace)

    def _texts(self, value: Mapping[str, Any], index: object) -> tuple[str, bool, list[str]]:
        """The memory text of a value, whether no query ranks it, and its indexed texts."""
        whole = json.dumps(value, ensure_ascii=False, sort_keys=True)
        if index is False:
            return whole, True, []
        fields = list(index) if isinstance(index, list | tuple) else self._fields
        if fields is None:
            content = value.get("content")
            if isinstance(content, Mapping):  # LangMem's memory manager nests its text
                content = content.get("content")
            text = content if isinstance(content, str) and content.strip() else whole
            return text, False, [text]
        texts = [t for path in fields for t in get_text_at_path(value, path) if t.strip()]
        return ("\n".join(texts), False, texts) if texts else (whole, True, [])

    def _field_vectors(self, key: str, texts: list[str]) -> dict[str, Any] | None:
        """The vectors of an item's indexed texts when it has several (else, or failing: None)."""
        embedder = self.store.embedder_id
        if len(texts) < 2 or self._embed is None or embedder is None:
            return None
        matrix = self._embed(texts)
        if matrix is None or len(matrix) != len(texts) or not matrix.any(axis=1).all():
            logger.warning(
                "store key %r: its %d indexed texts could not be embedded in time; a query "
                "scores it by its texts joined until it is written again",
                key,
                len(texts),
            )
            return None
        return FieldVectors(embedder, matrix).to_json()

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        scope = self.template.scope(namespace)
        key = self._key(op.key)
        self.memory.check_open()
        if op.value is None:
            with self._write_lock:
                record, _, _ = self._locate(scope, namespace, key)
                if record is not None:
                    self.memory.delete_memory(
                        record.id, user_id=scope.user_id, agent_id=scope.agent_id
                    )
            return
        ttl = _check_minutes("ttl", op.ttl)
        part, text, hidden, texts, rating, rate = self._part(op, namespace, key)
        vectors = None if hidden else self._field_vectors(key, texts)
        with self._write_lock:
            existing, free_id, stale = self._locate(scope, namespace, key)
            if existing is None and free_id is None:
                msg = (
                    f"store key {key!r} in {namespace!r}: both memory ids it may use are held "
                    "by other items of this user; use another key"
                )
                raise ConfigError(msg)
            metadata = _item_metadata(existing, part, vectors)
            if existing is None and stale is not None:  # an expired item is gone: start afresh
                self.store.delete_memories(scope, [stale.id])
            memory_id = existing.id if existing is not None else str(free_id)
            fields: dict[str, Any] = {
                "id": memory_id,
                "content": text,
                "metadata": metadata,
                "type": self.memory_type,
            }
            if ttl is not None:  # else no `expires_at`: the memory's `default_ttl_seconds` applies
                fields["expires_at"] = expiry_after(ttl * 60)
            written = {**_updated(existing, fields), **rating}  # what the value says wins
            self.memory.add_memories([written], user_id=scope.user_id, agent_id=scope.agent_id)
        if rate and self._rate is not None:
            self._rate(scope, memory_id)

    def _part(
        self, op: PutOp, namespace: tuple[str, ...], key: str
    ) -> tuple[dict[str, Any], str, bool, list[str], dict[str, Any], bool]:
        """A put's part of the metadata, its text, hidden flag, indexed texts, rating, to-rate."""
        try:
            value = check_metadata(op.value, field="value")
        except ConfigError as exc:
            msg = f"the value of store key {key!r} cannot be kept: {exc}"
            raise ConfigError(msg) from None
        ttl = _check_minutes("ttl", op.ttl)
        text, hidden, texts = self._texts(value, op.index)
        rating = value_rating(value)
        part: dict[str, Any] = {"value": value, "ns": list(namespace), "key": key}
        if hidden:
            part["index"] = False
        if ttl is not None:
            part["ttl"] = ttl
        rate = self._rate is not None and "priority" not in rating and not hidden
        if rate:  # `formation.rating` gives it a priority (and a type) in the background
            part["rating"] = "pending-priority" if "type" in rating else "pending"
        return part, text, hidden, texts, rating, rate

    def _refresh(self, scope: Scope, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Renew the expiry of the items that have a TTL (their write time stays)."""
        self.memory.check_open()
        if self.memory.read_only:
            return list(records)
        expiring = [rec for rec in records if _ttl_of(rec) is not None]
        renewed: dict[str, MemoryRecord] = {}
        if expiring:
            with self._write_lock:
                for rec in expiring:
                    # a put since the read wrote a new version with its own expiry: keep it
                    current = self.store.get_memory(scope, rec.id)
                    if current is None or current.updated_at != rec.updated_at:
                        continue
                    ttl = _ttl_of(current)
                    if ttl is not None:
                        renewed[rec.id] = replace(current, expires_at=expiry_after(ttl * 60))
                if renewed:
                    # Only the expiry changes: the row keeps its text, so its vector (or its
                    # place in the vector upkeep's queue) stays; the write is checked as usual.
                    self.store.put_memories(scope, list(renewed.values()))
        return [renewed.get(rec.id, rec) for rec in records]

    # -- search -------------------------------------------------------------------------------

    def _scope_of_prefix(self, prefix: tuple[str, ...]) -> Scope | None:
        """The one scope a search prefix names; `None` for a search of every scope.

        Raises:
            NamespaceError: If the prefix does not fit the template, or stops above the user
                element of a store that is not `cross_scope`.
        """
        scope = self.template.prefix_scope(prefix)
        if scope is None and not self.cross_scope:
            msg = (
                f"the search prefix {prefix!r} stops above the user of this store's namespace "
                f"template {self.template!r}, so it would search every user's memory; name one "
                f"user, e.g. {self.template.example()[: self.template.scope_depth]!r}, or make "
                "an administrative store with memory.as_store(cross_scope=True)"
            )
            raise NamespaceError(msg)
        return scope

    def _candidates(
        self, index: LayerIndex, scope: Scope, prefix: tuple[str, ...], test: ValueTest | None
    ) -> list[int]:
        """The unexpired rows of `scope` under `prefix` that pass the filter, newest first.

        One pass over the scope's rows in their newest-first order (kept by the index until
        its rows change); each distinct stored namespace is checked once per search.
        """
        order = index.memo(_NEWEST, lambda: index.newest_rows(None))
        depth = len(prefix)
        template = self.template
        base = template.base(scope)
        known: dict[tuple[str, ...] | None, bool] = {
            None: base is not None and base[:depth] == prefix
        }
        extras = index.extras
        meta = index.meta
        rows: list[int] = []
        for rowid in order:
            row = extras.get(rowid)
            metadata = row.metadata if row is not None else None
            part = metadata.get(HIDDEN_KEY) if metadata else None
            names = part.get("ns") if isinstance(part, dict) else None
            try:  # a malformed list is judged (as keeping none) once, like any other
                seen = tuple(names) if isinstance(names, list) else None
                inside = known.get(seen)
            except TypeError:
                seen, inside = None, known[None]
            if inside is None:
                namespace = item_namespace(metadata, template, scope)
                inside = known[seen] = namespace is not None and namespace[:depth] == prefix
            if not inside:
                continue
            if test is not None:
                kind = meta[rowid].kind if rowid in meta else ""
                if not test(filter_view(metadata, kind)):
                    continue
            rows.append(rowid)
        return rows

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        test = compile_value_filter(op.filter)
        self.memory.check_open()
        one = self._scope_of_prefix(prefix)
        scopes = [one] if one is not None else self.store.scopes()
        query = op.query if isinstance(op.query, str) and op.query.strip() else None
        if op.limit == 0:
            return []
        vector: npt.NDArray[np.float32] | None = None
        text = ""
        if query is not None:
            if self._fresh is not None:
                for scope in scopes:
                    self._fresh(scope)
            vector, text = self.hits.query_vector(query)
        merged = len(scopes) > 1
        wanted = op.offset + op.limit  # what one scope can contribute to the page
        # (sort key across scopes, scope, rowid, score) of the candidates, in order
        found: list[tuple[tuple[Any, ...], Scope, int, float | None]] = []
        for scope in scopes:
            index = self.store.index(scope, "l1")
            if index is None:
                continue
            rows = self._candidates(index, scope, prefix, test)
            if query is None:
                ranked: list[tuple[int, float | None]] = [(r, None) for r in rows[:wanted]]
            else:
                ranked = rank_rows(
                    index,
                    rows,
                    query_vector=vector,
                    query_text=text or query,
                    embedder=self.store.embedder_id,
                    limit=wanted,
                )
            for rowid, score in ranked:
                key: tuple[Any, ...] = ()
                if merged:  # by score, then newest first, as within one scope
                    meta = index.meta[rowid]
                    rank = 0.0 if score is None else -score
                    key = (score is None, rank, _descending(meta.recency), meta.id)
                found.append((key, scope, rowid, score))
        if merged:
            found.sort(key=lambda entry: entry[0])
        page = found[op.offset : op.offset + op.limit]
        return self._search_items(page, op.refresh_ttl)

    def _search_items(
        self, page: list[tuple[tuple[Any, ...], Scope, int, float | None]], refresh: bool
    ) -> list[SearchItem]:
        by_scope: dict[Scope, list[int]] = {}
        for _, scope, rowid, _ in page:
            by_scope.setdefault(scope, []).append(rowid)
        records: dict[tuple[Scope, int], MemoryRecord] = {}
        for scope, rowids in by_scope.items():
            read = self.store.memories_by_ref(scope, rowids)
            kept = list(read.values())
            if refresh:
                kept = self._refresh(scope, kept)
            fresh_by_id = {rec.id: rec for rec in kept}
            for rowid, rec in read.items():
                records[scope, rowid] = fresh_by_id.get(rec.id, rec)
        out: list[SearchItem] = []
        for _, scope, rowid, score in page:
            found = records.get((scope, rowid))
            namespace = item_namespace(found.metadata, self.template, scope) if found else None
            if found is None or namespace is None:  # deleted or rewritten since it was ranked
                continue
            out.append(
                SearchItem(
                    namespace=namespace,
                    key=item_key(found),
                    value=item_value(found),
                    created_at=_moment(found.created_at),
                    updated_at=_moment(found.updated_at),
                    score=score,
                )
            )
        return out

    # -- listing ------------------------------------------------------------------------------

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        self.memory.check_open()
        conditions = tuple(op.match_conditions or ())
        pinned = None
        for condition in conditions:
            path = condition.path
            if condition.match_type == "prefix" and isinstance(path, tuple | list):
                pinned = pinned or self.template.pinned_scope(tuple(path))
        scopes = [pinned] if pinned is not None else self.store.scopes()
        found: set[tuple[str, ...]] = set()
        for scope in scopes:
            for raw in self.store.item_namespaces(scope):
                namespace = self._listed(raw, scope)
                if namespace is None:
                    continue
                if all(condition_matches(c, namespace) for c in conditions):
                    found.add(namespace[: op.max_depth] if op.max_depth else namespace)
        listed = sorted(found)
        return listed[op.offset : op.offset + op.limit]

    def _listed(self, raw: str | None, scope: Scope) -> tuple[str, ...] | None:
        if raw is None:
            return self.template.base(scope)
        try:
            names = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            return None
        namespace = tuple(names)
        return namespace if self.template.owns(namespace, scope) else None


def _item_metadata(
    existing: MemoryRecord | None, part: dict[str, Any], vectors: dict[str, Any] | None
) -> dict[str, Any]:
    """The metadata a put writes: the memory's own keys, and the store's part.

    Raises:
        ConfigError: If the value does not fit the metadata bound (16 KiB as JSON).
    """
    key = part["key"]
    base = {k: v for k, v in (existing.metadata if existing else {}).items() if k != HIDDEN_KEY}
    try:
        metadata = check_metadata({**base, HIDDEN_KEY: part})
    except ConfigError as exc:
        msg = f"the value of store key {key!r} cannot be kept: {exc}"
        raise ConfigError(msg) from None
    if vectors is None:
        return metadata
    try:
        return check_metadata({**base, HIDDEN_KEY: {**part, "vectors": vectors}})
    except ConfigError:
        logger.warning(
            "store key %r: the vectors of its indexed texts do not fit in the metadata bound; "
            "a query scores it by its texts joined",
            key,
        )
        return metadata


def _ttl_of(record: MemoryRecord) -> float | None:
    """The time-to-live (minutes) an item was put with, or `None`."""
    part = item_part(record.metadata)
    ttl = part.get("ttl") if part is not None else None
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0:
        return float(ttl)
    return None


def _updated(existing: MemoryRecord | None, fields: dict[str, Any]) -> dict[str, Any]:
    """The memory a put writes: an update keeps what the memory knew besides its text."""
    if existing is None:
        return fields
    _after(existing.updated_at)
    return {
        **fields,
        "type": existing.type,
        "scene_name": existing.scene_name,
        "priority": existing.priority,
        "activity_start_time": existing.activity_start_time,
        "activity_end_time": existing.activity_end_time,
        "timestamp": existing.timestamp,
        "session_key": existing.session_key,
        "source_message_ids": existing.source_message_ids,
    }


def _descending(iso: str) -> float:
    """A write time as a sort key that puts the newest first."""
    return -_moment(iso).timestamp()


def _after(previous: str) -> None:
    """Wait (a millisecond at most, usually not at all) until `now_iso()` is past `previous`.

    Stored times have millisecond resolution; an update in the same millisecond as the write it
    replaces would not look newer.
    """
    deadline = time.monotonic() + 0.005
    while now_iso() <= previous and time.monotonic() < deadline:
        time.sleep(0.0002)
