"""`TdaiStore`: a `TdaiMemory` as a LangGraph `BaseStore` (`memory.as_store()`).

LangGraph gives tools and nodes a store (`runtime.store`, `create_agent(..., store=...)`,
LangMem's memory tools); this adapter lets that store be the memory that recall reads.

**Namespaces are scopes.** A store has one namespace *template*, a tuple whose elements are
literals or the placeholders `"{user_id}"` (required, once) and `"{agent_id}"` (optional). The
default, `("memories", "{user_id}")`, is the namespace of LangMem's examples: the item
`(("memories", "alice"), "k1")` is the memory `k1` of user `alice` (shared memory:
`agent_id=None`, or the store's fixed `agent_id`). A namespace that does not fit the template
(another length, another literal) is refused with `ScopeError`; it is never merged into some
other scope. Searches and listings need a prefix that names the user, and see that scope only.

**Items are memories.** The key is the memory id; the value is kept whole in the memory's
metadata (`metadata["tdai_store"]["value"]`, so the 16 KiB metadata bound applies), and the
memory's text, which hybrid search and automatic recall use, is taken from the value: its
`index` fields (the store's `index={"fields": [...]}` or the put's `index=[...]`, LangGraph path
syntax), else its `"content"` string, or the string at `content.content` (the value
`{"kind": "Memory", "content": {"content": ...}}` LangMem's `create_memory_store_manager`
writes), else its JSON. `index=False` stores an item that `get` and a search without a query
return, but that no query search and no recall sees. Memories
written through `TdaiMemory` itself are items too, valued `{"content": ..., "type": ...}`
plus their metadata. `created_at` / `updated_at` are the memory's.

**Search**: a `query` runs the hybrid search of `search_memories` (scores in 0..1; the best
100 hits are reachable through `offset`); without one, items come newest first. `filter`
matches the value's top-level keys: equality, or an operator dict with `$eq`, `$ne`, `$gt`,
`$gte`, `$lt`, `$lte`, `$in`, `$nin`.

**TTL** follows LangGraph's `TTLConfig`: `default_ttl` minutes for puts without a `ttl`, and
`refresh_on_read` (default `True`) renews an item's expiry when a get or search returns it. The
expiry is the memory's `expires_at`: expired items are never returned nor recalled, and the
memory's background sweep deletes them every `store.expiry_sweep_seconds`, or every
`sweep_interval_minutes` when that is shorter (`as_store` shortens the memory's sweep; a
read-only memory has none).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from langchain_tdai_recall._exchange.metadata import check_metadata, expiry_after
from langchain_tdai_recall._exchange.records import check_id
from langchain_tdai_recall.errors import ConfigError, ScopeError, TdaiRecallError
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY, MemoryFilter
from langchain_tdai_recall.types import MEMORY_TYPES, MemoryRecord, MemoryType, Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import StoreHost
    from langchain_tdai_recall.recall.hits import HitSearch
    from langchain_tdai_recall.stores.base import BaseMemoryStore

__all__ = ["DEFAULT_NAMESPACE", "NamespaceTemplate", "TdaiStore"]

USER: Final = "{user_id}"
AGENT: Final = "{agent_id}"
DEFAULT_NAMESPACE: Final = ("memories", USER)
"""The default namespace template, as in LangMem's examples."""

MAX_QUERY_HITS: Final = 100
"""Most hits a query search ranks (`offset + limit` beyond it returns fewer items)."""

_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"})


class NamespaceTemplate:
    """Which element of a namespace is the user (and the agent); see the module docstring.

    Raises:
        ConfigError: If the template is not a non-empty tuple of strings with `"{user_id}"`
            exactly once and `"{agent_id}"` at most once (and then no fixed `agent_id`).
    """

    def __init__(self, template: Sequence[str], *, agent_id: str | None = None) -> None:
        parts = tuple(template) if isinstance(template, list | tuple) else None
        if (
            not parts
            or not all(isinstance(p, str) and p for p in parts)
            or parts.count(USER) != 1
            or parts.count(AGENT) > 1
        ):
            msg = (
                f"namespace must be a tuple of non-empty strings naming '{USER}' once (and "
                f"'{AGENT}' at most once), e.g. ('memories', '{USER}'); got {template!r:.80}"
            )
            raise ConfigError(msg)
        if AGENT in parts and agent_id is not None:
            msg = (
                f"agent_id={agent_id!r} and a namespace with '{AGENT}' both name the agent; "
                "pass only one"
            )
            raise ConfigError(msg)
        if agent_id is not None:
            check_id("agent_id", agent_id)
        self.parts: Final = parts
        self.agent_id: Final = agent_id
        self._user = parts.index(USER)
        self._agent = parts.index(AGENT) if AGENT in parts else None

    def __repr__(self) -> str:
        return repr(self.parts)

    def _outside(self, namespace: tuple[str, ...], what: str) -> ScopeError:
        msg = (
            f"the {what} {namespace!r} does not fit this store's namespace template "
            f"{self.parts!r}; use a namespace of that form (memory.as_store(namespace=...) "
            "sets the template)"
        )
        return ScopeError(msg)

    def _literals_match(self, namespace: tuple[str, ...]) -> bool:
        return all(
            p in (USER, AGENT) or p == n for p, n in zip(self.parts, namespace, strict=False)
        )

    def scope(self, namespace: tuple[str, ...]) -> Scope:
        """The scope of an item's namespace.

        Raises:
            ScopeError: If the namespace does not fit the template.
        """
        namespace = tuple(namespace)
        if len(namespace) != len(self.parts) or not self._literals_match(namespace):
            raise self._outside(namespace, "namespace")
        return self._scope_from(namespace)

    def scope_of_prefix(self, prefix: tuple[str, ...]) -> Scope:
        """The scope a search prefix names (it must reach the user and agent elements).

        Raises:
            ScopeError: If the prefix does not fit the template or stops before the user (a
                search never spans several scopes).
        """
        prefix = tuple(prefix)
        if len(prefix) > len(self.parts) or not self._literals_match(prefix):
            raise self._outside(prefix, "namespace prefix")
        needed = max(self._user, self._agent if self._agent is not None else -1) + 1
        if len(prefix) < needed:
            msg = (
                f"a search must name the user (and agent) of one scope: the namespace prefix "
                f"{prefix!r} stops before them in the template {self.parts!r}; pass e.g. "
                f"{self.parts[:needed]!r} with the ids filled in"
            )
            raise ScopeError(msg)
        return self._scope_from(prefix)

    def _scope_from(self, prefix: tuple[str, ...]) -> Scope:
        user = check_id("user_id", prefix[self._user])
        agent = prefix[self._agent] if self._agent is not None else self.agent_id
        return Scope(user, check_id("agent_id", agent) if agent is not None else None)

    def namespace(self, scope: Scope) -> tuple[str, ...] | None:
        """The namespace of a scope's items, or `None` when the template cannot express it."""
        if self._agent is None and scope.agent_id != self.agent_id:
            return None
        if self._agent is not None and scope.agent_id is None:
            return None
        out = list(self.parts)
        out[self._user] = scope.user_id
        if self._agent is not None:
            out[self._agent] = str(scope.agent_id)
        return tuple(out)


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return dt.datetime.fromtimestamp(0, dt.UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _store_part(record_metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    part = record_metadata.get(HIDDEN_KEY) if record_metadata is not None else None
    return part if isinstance(part, Mapping) else None


def item_value(record: MemoryRecord) -> dict[str, Any]:
    """The store value of a memory: what a put stored, else its content, type and metadata."""
    part = _store_part(record.metadata)
    if part is not None and isinstance(part.get("value"), Mapping):
        return dict(part["value"])
    extra = {k: v for k, v in record.metadata.items() if k != HIDDEN_KEY}
    return {**extra, "content": record.content, "type": record.type}


def _filter_view(metadata: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """What a filter sees of a row without reading it: the stored value, else type + metadata."""
    part = _store_part(metadata)
    if part is not None and isinstance(part.get("value"), Mapping):
        value: Mapping[str, Any] = part["value"]
        return value
    extra = {k: v for k, v in (metadata or {}).items() if k != HIDDEN_KEY}
    return {**extra, "type": kind}


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _ordered(op: str, have: object, want: object) -> bool:
    numbers = (int, float)
    if isinstance(have, bool) or isinstance(want, bool):
        return False
    if not (
        (isinstance(have, numbers) and isinstance(want, numbers))
        or (isinstance(have, str) and isinstance(want, str))
    ):
        return False
    a, b = have, want
    if op == "$gt":
        return a > b  # type: ignore[operator]
    if op == "$gte":
        return a >= b  # type: ignore[operator]
    if op == "$lt":
        return a < b  # type: ignore[operator]
    return a <= b  # type: ignore[operator]


def _test(op: str, have: object, want: object) -> bool:
    if op == "$eq":
        return _same(have, want)
    if op == "$ne":
        return not _same(have, want)
    if op == "$in":
        return any(_same(have, w) for w in want)  # type: ignore[attr-defined]
    if op == "$nin":
        return not any(_same(have, w) for w in want)  # type: ignore[attr-defined]
    return _ordered(op, have, want)


def compile_filter(
    spec: object,
) -> Callable[[Mapping[str, Any] | None, str], bool] | None:
    """A row test for a LangGraph `filter` over item values, or `None` for no filter.

    Raises:
        ConfigError: For a filter that is not a dict, or an unknown operator.
    """
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        msg = f"filter must be a dict of value fields, got {type(spec).__name__} {spec!r:.60}"
        raise ConfigError(msg)
    tests: list[tuple[str, str, object]] = []
    for key, want in spec.items():
        if isinstance(want, Mapping) and want and all(str(k).startswith("$") for k in want):
            for op, operand in want.items():
                if op not in _OPERATORS:
                    msg = (
                        f"filter[{key!r}] uses the operator {op!r}; supported: "
                        f"{', '.join(sorted(_OPERATORS))} (or a plain value for equality)"
                    )
                    raise ConfigError(msg)
                if op in ("$in", "$nin") and not isinstance(operand, list | tuple):
                    msg = f"filter[{key!r}][{op!r}] must be a list, got {operand!r:.60}"
                    raise ConfigError(msg)
                tests.append((str(key), op, operand))
        else:
            tests.append((str(key), "$eq", want))

    def matches(metadata: Mapping[str, Any] | None, kind: str) -> bool:
        view = _filter_view(metadata, kind)
        return all(_test(op, view.get(key), want) for key, op, want in tests)

    return matches


def _condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p in ("*", n) for p, n in zip(path, part, strict=True)) if path else True


class TdaiStore(BaseStore):
    """A LangGraph `BaseStore` over a `TdaiMemory` (build it with `memory.as_store()`).

    See the module docstring for how namespaces, values, search, filters and TTL map onto the
    memory. Every operation runs in one scope and sees only that scope.

    It depends on the facade only through `_turn.host.StoreHost` (public methods); `as_store` hands
    it the memory's store and ranked search by name.

    Args:
        memory: The memory the items live in (recall reads them).
        store: That memory's store (raw reads, expiry renewal, scopes, the newest-first order).
        hits: That memory's ranked search (query searches).
        namespace: The namespace template (default `("memories", "{user_id}")`).
        agent_id: The agent of every item when the template has no `"{agent_id}"` (default:
            the user's shared memory).
        index: LangGraph's index config; only `fields` is used (the memory's own embedder
            embeds the text; `dims` and `embed` are ignored).
        ttl: LangGraph's `TTLConfig` (`default_ttl` in minutes, `refresh_on_read`,
            `sweep_interval_minutes`).
        memory_type: Type of new memories written by puts.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        memory: StoreHost,
        *,
        store: BaseMemoryStore,
        hits: HitSearch,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        memory_type: MemoryType = "episodic",
    ) -> None:
        self.memory = memory
        self.store = store
        self.hits = hits
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
        default_ttl = (ttl or {}).get("default_ttl")
        if default_ttl is not None and (
            isinstance(default_ttl, bool)
            or not isinstance(default_ttl, int | float)
            or default_ttl <= 0
        ):
            msg = f"ttl['default_ttl'] must be a positive number of minutes, got {default_ttl!r}"
            raise ConfigError(msg)
        sweep = (ttl or {}).get("sweep_interval_minutes")
        if sweep is not None and (
            isinstance(sweep, bool) or not isinstance(sweep, int | float) or sweep <= 0
        ):
            msg = (
                "ttl['sweep_interval_minutes'] must be a positive number of minutes or None, "
                f"got {sweep!r}"
            )
            raise ConfigError(msg)
        self.sweep_seconds: float | None = float(sweep) * 60 if sweep is not None else None
        """The longest wait between expiry sweeps this store asks for (`as_store` applies it)."""
        self.ttl_config = ttl
        if memory_type not in MEMORY_TYPES:
            msg = f"memory_type must be one of {list(MEMORY_TYPES)}, got {memory_type!r}"
            raise ConfigError(msg)
        self.memory_type: MemoryType = memory_type

    def __repr__(self) -> str:
        return f"TdaiStore({self.memory!r}, namespace={self.template!r})"

    # -- batch --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; one result per operation."""
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async version of `batch` (on a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: object) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        msg = f"unknown store operation {type(op).__name__}"
        raise ConfigError(msg)

    # -- items --------------------------------------------------------------------------------

    def _key(self, key: object) -> str:
        try:
            return check_id("key", key)
        except TdaiRecallError as exc:
            msg = f"{exc} (a store key is the memory id)"
            raise ConfigError(msg) from None

    def _item(self, record: MemoryRecord, namespace: tuple[str, ...]) -> Item:
        return Item(
            value=item_value(record),
            key=record.id,
            namespace=namespace,
            created_at=_moment(record.created_at),
            updated_at=_moment(record.updated_at),
        )

    def _get(self, op: GetOp) -> Item | None:
        scope = self.template.scope(op.namespace)
        key = self._key(op.key)
        record = self.memory.get_memory(key, user_id=scope.user_id, agent_id=scope.agent_id)
        if record is None:
            return None
        if op.refresh_ttl:
            record = self._refresh(scope, [record])[0]
        return self._item(record, tuple(op.namespace))

    def _text(self, value: Mapping[str, Any], index: object) -> tuple[str, bool]:
        """The memory text of a value and whether the item is hidden from query search."""
        whole = json.dumps(value, ensure_ascii=False, sort_keys=True)
        if index is False:
            return whole, True
        fields = list(index) if isinstance(index, list | tuple) else self._fields
        if fields is None:
            content = value.get("content")
            if isinstance(content, Mapping):  # LangMem's memory manager nests its text
                content = content.get("content")
            text = content if isinstance(content, str) and content.strip() else whole
            return text, False
        texts = [t for path in fields for t in get_text_at_path(value, path) if t.strip()]
        return ("\n".join(texts), False) if texts else (whole, True)

    def _put(self, op: PutOp) -> None:
        scope = self.template.scope(op.namespace)
        key = self._key(op.key)
        if op.value is None:
            self.memory.delete_memory(key, user_id=scope.user_id, agent_id=scope.agent_id)
            return
        value: object = op.value
        if not isinstance(value, Mapping):
            msg = f"a store value must be a dict, got {type(op.value).__name__} {op.value!r:.60}"
            raise ConfigError(msg)
        index: object = op.index
        if index is not None and index is not False and not isinstance(index, list):
            msg = f"index must be False, a list of field paths or None, got {op.index!r:.60}"
            raise ConfigError(msg)
        text, hidden = self._text(op.value, op.index)
        ttl = op.ttl
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0
        ):
            msg = f"ttl must be a positive number of minutes or None, got {ttl!r}"
            raise ConfigError(msg)
        existing = self.store.get_memory(scope, key)
        part: dict[str, Any] = {"value": dict(op.value)}
        if hidden:
            part["index"] = False
        if ttl is not None:
            part["ttl"] = ttl
        base = {k: v for k, v in (existing.metadata if existing else {}).items() if k != HIDDEN_KEY}
        try:
            metadata = check_metadata({**base, HIDDEN_KEY: part})
        except ConfigError as exc:
            msg = f"the value of store key {key!r} cannot be kept: {exc}"
            raise ConfigError(msg) from None
        record: dict[str, Any] = {
            "id": key,
            "content": text,
            "metadata": metadata,
            "type": self.memory_type,
        }
        if ttl is not None:  # else no `expires_at` key: the memory's `default_ttl_seconds` applies
            record["expires_at"] = expiry_after(ttl * 60)
        if existing is not None:  # an update keeps what the memory knew besides its text
            record.update(
                type=existing.type,
                scene_name=existing.scene_name,
                priority=existing.priority,
                activity_start_time=existing.activity_start_time,
                activity_end_time=existing.activity_end_time,
                timestamp=existing.timestamp,
                session_key=existing.session_key,
                source_message_ids=existing.source_message_ids,
            )
        self.memory.add_memories([record], user_id=scope.user_id, agent_id=scope.agent_id)

    def _refresh(self, scope: Scope, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Renew the expiry of the items that have a TTL (their write time stays)."""
        self.memory.check_open()
        if self.memory.read_only:
            return list(records)
        renewed: dict[str, MemoryRecord] = {}
        for rec in records:
            part = _store_part(rec.metadata)
            ttl = part.get("ttl") if part is not None else None
            if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0:
                renewed[rec.id] = replace(rec, expires_at=expiry_after(float(ttl) * 60))
        if renewed:
            # Only the expiry changes: the row keeps its text, so its vector (or its place in
            # the vector upkeep's queue) stays; the write is checked like any other.
            self.store.put_memories(scope, list(renewed.values()))
        return [renewed.get(rec.id, rec) for rec in records]

    # -- search and listing ------------------------------------------------------------------

    def _search(self, op: SearchOp) -> list[SearchItem]:
        scope = self.template.scope_of_prefix(op.namespace_prefix)
        for name, value in (("limit", op.limit), ("offset", op.offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"{name} must be a non-negative integer, got {value!r}"
                raise ConfigError(msg)
        test = compile_filter(op.filter)
        where = MemoryFilter(where=test) if test is not None else None
        namespace = self.template.namespace(scope)
        assert namespace is not None
        self.memory.check_open()
        store = self.store
        scores: dict[int, float | None] = {}
        if op.query is not None and str(op.query).strip():
            wanted = min(op.offset + op.limit, MAX_QUERY_HITS)
            if op.limit == 0 or op.offset >= wanted:
                return []
            hits = self.hits.ranked_memories(scope, op.query, limit=wanted, where=where)
            for hit in hits[op.offset : op.offset + op.limit]:
                scores[hit.rowid] = hit.score
        else:
            index = store.index(scope, "l1")
            rows = index.newest_rows(where) if index is not None else []
            for rowid in rows[op.offset : op.offset + op.limit]:
                scores[rowid] = None
        records = store.memories_by_ref(scope, list(scores))
        found = [records[r] for r in scores if r in records]
        if op.refresh_ttl:
            found = self._refresh(scope, found)
        by_id = {rec.id: rec for rec in found}
        out: list[SearchItem] = []
        for rowid, score in scores.items():
            rec = records.get(rowid)
            if rec is None:
                continue
            rec = by_id.get(rec.id, rec)
            out.append(
                SearchItem(
                    namespace=namespace,
                    key=rec.id,
                    value=item_value(rec),
                    created_at=_moment(rec.created_at),
                    updated_at=_moment(rec.updated_at),
                    score=score,
                )
            )
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        self.memory.check_open()
        store = self.store
        found: set[tuple[str, ...]] = set()
        for scope in store.scopes():
            namespace = self.template.namespace(scope)
            if namespace is None or store.scope_stats(scope).memories == 0:
                continue
            if not all(_condition_matches(c, namespace) for c in op.match_conditions or ()):
                continue
            if op.max_depth is not None:
                namespace = namespace[: op.max_depth]
            found.add(namespace)
        listed = sorted(found)
        return listed[op.offset : op.offset + op.limit]
