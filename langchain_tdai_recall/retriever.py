"""`TdaiRetriever`: the store's L1 memories as a LangChain retriever (`memory.as_retriever()`).

A retriever drops the memory into places that take one: a RAG chain
(`{"context": retriever | format_docs, ...} | prompt | model`), an `EnsembleRetriever`, a
`create_retriever_tool`. It searches exactly like `TdaiMemory.search_memories` and the
`tdai_memory_search` tool (same ranking, same strategy `recall.strategy`), and returns one
`Document` per memory, best ranked first: `page_content` is the memory text, `id` the memory
id, and `metadata` holds `id`, `score` (relevance in 0..1), `keyword_score`,
`embedding_score`, `type`, `scene_name`, `priority`, the activity times (`activity_start_time`,
`activity_end_time`, `timestamp`), the write times (`created_at`, `updated_at`), `user_id` and
`agent_id`.

Filters, like `search_memories`: `filter` is the one filter language of every explicit search
(`_exchange.filters`: plain values for equality, `$eq $ne $gt $gte $lt $lte $in $nin`, times as
ranges) over the memories' metadata, and `created_after`, `created_before`, `active_after` and
`active_before` bound the write and activity times. Each is an option of the retriever and a
keyword of `invoke` for one call (`retriever.invoke("trip", filter={"source": {"$in": [...]}})`);
an unsupported operator, or an `invoke` keyword the retriever does not know, is a
`ConfigError`, never an empty result.

Read-your-writes: every memory written before a call is searched with its vector. Vectors are
computed in the background after a write; a call first embeds those of its scope still missing
(`TdaiMemory.search_memories(wait_for_vectors=True)`), bounded by `embedding.query_timeout_ms`.

Scope, like the other adapters: `config["configurable"]` (`user_id`, `agent_id`) at invoke time,
else the retriever's own `user_id` / `agent_id`, else the store's default user.

It imports `langchain_core` only.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import ConfigDict, PrivateAttr
from typing_extensions import override

from langchain_tdai_recall._exchange.filters import compile_value_filter
from langchain_tdai_recall._exchange.metadata import memory_filter
from langchain_tdai_recall._turn import ScopeResolver
from langchain_tdai_recall._turn.host import MemoryHost
from langchain_tdai_recall._turn.run import hit_document
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import Scope

__all__ = ["SearchType", "TdaiRetriever"]

SearchType = Literal["similarity", "similarity_score_threshold"]
"""How the retriever picks its documents (LangChain's vector-store vocabulary).

- `similarity`: the best `k` memories whose relevance reaches the store's low floor
  `tools.min_score`, like the `tdai_memory_search` tool.
- `similarity_score_threshold`: the best `k` memories whose relevance reaches `score_threshold`.

Either way the ranking is the store's hybrid search (`recall.strategy`): keyword coverage and
embedding similarity fused, as for automatic recall.
"""

_SEARCH_TYPES: tuple[SearchType, ...] = ("similarity", "similarity_score_threshold")
_MAX_K = 100

_SCOPE_KWARG = "_tdai_scope"
"""Private `invoke` keyword carrying the scope resolved from the call's config."""

_FILTERS: tuple[str, ...] = (
    "filter",
    "created_after",
    "created_before",
    "active_after",
    "active_before",
)
"""The filter options, which `invoke` also takes for one call."""

_INVOKE_KWARGS = frozenset(("k", *_FILTERS, "run_id", "verbose", _SCOPE_KWARG))
"""What `invoke` accepts besides the query and config (`run_id`, `verbose`: LangChain's own)."""


def _check_invoke_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - _INVOKE_KWARGS)
    if unknown:
        msg = (
            f"TdaiRetriever.invoke got the unknown keyword(s) {unknown}; it takes k, "
            f"{', '.join(_FILTERS)} (filter: a metadata filter such as "
            '{"source": {"$in": ["email", "chat"]}})'
        )
        raise ConfigError(msg)


def _check_k(value: object, *, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_K:
        msg = f"{where} must be an integer in 1..{_MAX_K}, got {value!r:.60}"
        raise ConfigError(msg)
    return value


class TdaiRetriever(BaseRetriever):
    """A LangChain retriever over one store's L1 memories; see the module docstring.

    Build it with `memory.as_retriever(...)` (or `TdaiRetriever(memory=memory, ...)`).

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import HashEmbeddings

        memory = TdaiMemory.open(embeddings=HashEmbeddings(dims=64))
        memory.add_memory("Alice prefers window seats", type="persona", user_id="alice")
        retriever = memory.as_retriever(user_id="alice", k=3)
        docs = retriever.invoke("which seat?")
        assert docs[0].page_content == "Alice prefers window seats"
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    memory: MemoryHost
    """The store searched."""
    k: int = 5
    """Most documents per call, 1..100; `invoke(query, k=...)` overrides it for one call."""
    search_type: SearchType = "similarity"
    """`similarity` or `similarity_score_threshold` (see `SearchType`)."""
    score_threshold: float | None = None
    """Relevance floor in 0..1, required by (and only used with) `similarity_score_threshold`."""
    user_id: str | None = None
    """User when the call's `configurable` names none; `None` uses the store's default user."""
    agent_id: str | None = None
    """Agent when the call's `configurable` names none."""
    require_user_id: bool = False
    """Raise `ScopeError` when no user is named anywhere, instead of using the default user."""
    filter: dict[str, Any] | None = None
    """Metadata filter of every call (the filter language of `search_memories`)."""
    created_after: Any = None
    """Only memories first written at or after this (a datetime, a date or ISO text)."""
    created_before: Any = None
    """Only memories first written at or before this (a date: its end)."""
    active_after: Any = None
    """Only memories whose activity ends at or after this."""
    active_before: Any = None
    """Only memories whose activity starts at or before this."""

    _resolver: ScopeResolver = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        """Validate the options (`ConfigError` / `ScopeError` naming the field), then build.

        Raises:
            ConfigError: If an option is invalid (`ScopeError` for a bad id).
        """
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:
            msg = (
                f"unknown TdaiRetriever option(s) {unknown}; the options are memory, k, "
                "search_type, score_threshold, user_id, agent_id, require_user_id, filter, "
                "created_after, created_before, active_after, active_before, name, tags and "
                "metadata (run metadata; filter on memory metadata with filter=)"
            )
            raise ConfigError(msg)
        memory = data.get("memory")
        if not isinstance(memory, MemoryHost):
            msg = f"memory must be a TdaiMemory, got {type(memory).__name__}"
            raise ConfigError(msg)
        _check_k(data.get("k", 5), where="k")
        search_type = data.get("search_type", "similarity")
        if search_type not in _SEARCH_TYPES:
            msg = f"search_type must be one of {list(_SEARCH_TYPES)}, got {search_type!r:.60}"
            raise ConfigError(msg)
        threshold = data.get("score_threshold")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0 <= threshold <= 1
        ):
            msg = f"score_threshold must be a number in 0..1 or None, got {threshold!r:.60}"
            raise ConfigError(msg)
        if search_type == "similarity_score_threshold" and threshold is None:
            msg = (
                "search_type='similarity_score_threshold' needs score_threshold (a relevance "
                "in 0..1); pass score_threshold=0.3, for example, or use search_type='similarity'"
            )
            raise ConfigError(msg)
        compile_value_filter(data.get("filter"), field="filter")
        memory_filter(**{k: data.get(k) for k in _FILTERS if k != "filter"})
        require = data.get("require_user_id", False)
        if not isinstance(require, bool):
            msg = f"require_user_id must be True or False, got {require!r:.60}"
            raise ConfigError(msg)
        resolver = ScopeResolver.for_memory(
            memory,
            user_id=data.get("user_id"),
            agent_id=data.get("agent_id"),
            require_user_id=require,
        )
        super().__init__(**data)
        self._resolver = resolver

    def _scope(self, config: RunnableConfig | None) -> Scope:
        return self._resolver.resolve(None, ensure_config(config).get("configurable")).scope

    def _floor(self) -> float | None:
        return self.score_threshold if self.search_type == "similarity_score_threshold" else None

    @override
    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """The memories most relevant to `input`, best ranked first.

        Args:
            input: The query.
            config: The run's config; `configurable` may name `user_id` and `agent_id`.
            **kwargs: For this call: `k`, the most documents; `filter`, `created_after`,
                `created_before`, `active_after`, `active_before` (replacing the
                retriever's own).

        Raises:
            ConfigError: If an argument is invalid or unknown (`ScopeError` for a bad or
                missing user id).
        """
        _check_invoke_kwargs(kwargs)
        kwargs[_SCOPE_KWARG] = self._scope(config)
        return super().invoke(input, config, **kwargs)

    @override
    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async version of `invoke`."""
        _check_invoke_kwargs(kwargs)
        kwargs[_SCOPE_KWARG] = self._scope(config)
        return await super().ainvoke(input, config, **kwargs)

    def _search_args(self, k: object, kwargs: dict[str, Any]) -> tuple[int, Scope, dict[str, Any]]:
        limit = self.k if k is None else _check_k(k, where="k")
        scope = kwargs.get(_SCOPE_KWARG)
        chosen = {name: kwargs.get(name, getattr(self, name)) for name in _FILTERS}
        compile_value_filter(chosen["filter"], field="filter")  # named as the caller wrote it
        filters = {"metadata": chosen.pop("filter"), **chosen}
        return limit, scope if isinstance(scope, Scope) else self._scope(None), filters

    @override
    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        limit, scope, filters = self._search_args(k, kwargs)
        hits = self.memory.search_memories(
            query,
            limit=limit,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            min_score=self._floor(),
            wait_for_vectors=True,
            **filters,
        )
        return [hit_document(hit, scope) for hit in hits]

    @override
    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        limit, scope, filters = self._search_args(k, kwargs)
        hits = await self.memory.asearch_memories(
            query,
            limit=limit,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            min_score=self._floor(),
            wait_for_vectors=True,
            **filters,
        )
        return [hit_document(hit, scope) for hit in hits]
