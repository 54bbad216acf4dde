"""Memories as LangChain `Document`s, and a turn's automatic recall as a retriever run.

Two readers share the conversion here: `TdaiRetriever` (a search, `memory.as_retriever()`) and
the automatic recall of every adapter (`_turn.run_recall` / `arun_recall`), which callback
handlers and tracing see as one child run of type `retriever` named `tdai_recall`. That run's
query is the turn's message; its documents are the memories recall injected, the memory block
first (`injected_as="memories"`, with their scores), then the standing rules, the memories
pinned by priority and the user profile of the system context (`standing_rule`, `pinned`,
`profile`: injected whatever the message, with the score this turn's search gave them where it
scored them, else `score=None`). Its start and end times are the recall's.
A recall that failed or timed out ends the run with `on_retriever_error`; the turn goes on.

Privacy (`recall.trace_memory_text`, off by default): the run's documents then carry the
memories' ids, scores, types and channels (`injected_as`) in `metadata` and an empty
`page_content`, so a frontend forwarding `astream_events` does not forward the memory texts
from this run; with the option on, `page_content` is the memory text. (The chat model's own run
still carries the prompt, with the injection in it.) `TdaiRetriever`'s documents, which a caller
asked for, always carry their text.

Nothing here runs, and no `Document` is built, when the run has no callback handler (no
callbacks passed, no tracing configured): recall pays for the run only when someone listens.
Handler failures follow the package's failure policy: logged, never raised into the turn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, Literal

from langchain_core.callbacks import AsyncCallbackManager, CallbackManager
from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, ensure_config

from langchain_tdai_recall.errors import RecallTimeoutError, TdaiRecallError

if TYPE_CHECKING:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )

    from langchain_tdai_recall.config import RecallConfig
    from langchain_tdai_recall.types import (
        MemoryHit,
        MemoryRecord,
        RecalledMemory,
        RecallResult,
        Scope,
    )

__all__ = [
    "RECALL_RUN_NAME",
    "InjectedAs",
    "afinish_recall_run",
    "astart_recall_run",
    "finish_recall_run",
    "hit_document",
    "recall_documents",
    "recall_failure",
    "start_recall_run",
]

logger = logging.getLogger(__name__)

RECALL_RUN_NAME: Final = "tdai_recall"
"""Name of the retriever run of every automatic recall."""

InjectedAs = Literal["memories", "standing_rule", "pinned", "profile"]
"""Where recall put a memory: the memory block, or a part of the system context."""


# -- documents ------------------------------------------------------------------------------------


def _record_metadata(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "type": record.type,
        "scene_name": record.scene_name,
        "priority": record.priority,
        "activity_start_time": record.activity_start_time,
        "activity_end_time": record.activity_end_time,
        "timestamp": record.timestamp,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "user_id": record.user_id,
        "agent_id": record.agent_id,
    }


def hit_document(hit: MemoryHit, scope: Scope) -> Document:
    """A search hit as a `Document`: its text, and its id, scores and record in metadata."""
    if hit.record is not None:
        metadata = _record_metadata(hit.record)
    else:  # a hit always carries its record; keep the fields a hit has anyway
        metadata = {
            "id": hit.id,
            "type": hit.type,
            "scene_name": hit.scene_name,
            "priority": hit.priority,
            "user_id": scope.user_id,
            "agent_id": scope.agent_id,
        }
    metadata["score"] = hit.score
    metadata["keyword_score"] = hit.keyword_score
    metadata["embedding_score"] = hit.embedding_score
    return Document(id=hit.id, page_content=hit.content, metadata=metadata)


def _recalled_document(memory: RecalledMemory, scope: Scope, text: bool) -> Document:
    metadata: dict[str, Any] = {
        "id": memory.id,
        "injected_as": "memories",
        "score": memory.score,
        "keyword_score": memory.keyword_score,
        "embedding_score": memory.embedding_score,
        "rerank_score": memory.rerank_score,
        "type": memory.type,
        "scene_name": memory.scene_name,
        "truncated": memory.truncated,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
    }
    return Document(id=memory.id, page_content=memory.content if text else "", metadata=metadata)


def _system_document(
    record: MemoryRecord, injected_as: InjectedAs, scored: RecalledMemory | None, text: bool
) -> Document:
    metadata = {
        "injected_as": injected_as,
        **_record_metadata(record),
        "score": scored.score if scored is not None else None,
        "keyword_score": scored.keyword_score if scored is not None else None,
        "embedding_score": scored.embedding_score if scored is not None else None,
    }
    return Document(id=record.id, page_content=record.content if text else "", metadata=metadata)


def recall_documents(
    result: RecallResult | None, scope: Scope, *, text: bool = True
) -> list[Document]:
    """The memories a recall injected, as documents (see the module docstring for the order).

    `text=False` leaves every `page_content` empty (`recall.trace_memory_text` off).
    """
    if result is None:
        return []
    documents = [_recalled_document(m, scope, text) for m in result.memories]
    scores: dict[tuple[str, str], RecalledMemory] = {(m.channel, m.id): m for m in result.injected}
    parts: tuple[tuple[InjectedAs, tuple[MemoryRecord, ...]], ...] = (
        ("standing_rule", result.standing_rules),
        ("pinned", result.pinned),
        ("profile", result.profile),
    )
    for injected_as, records in parts:
        documents.extend(
            _system_document(r, injected_as, scores.get((injected_as, r.id)), text) for r in records
        )
    return documents


# -- the retriever run ----------------------------------------------------------------------------


def recall_failure(
    config: RecallConfig, result: RecallResult | None, elapsed_ms: float
) -> BaseException | None:
    """Why a recall injected nothing, when it failed; `None` when it answered or is off.

    Recall swallows its own failures under `on_error="skip"` and answers `None`, as it does when
    `recall.enabled` is off; an enabled recall that answered `None` therefore failed, and it
    timed out when it took `recall.timeout_ms` or more (the WARNING log names the cause).
    """
    if result is not None or not config.enabled:
        return None
    if elapsed_ms >= config.timeout_ms:
        return RecallTimeoutError(config.timeout_ms)
    return TdaiRecallError(
        "recall failed and injected nothing; the WARNING of langchain_tdai_recall.recall.engine "
        "names the exception type"
    )


def _configure(
    manager: type[CallbackManager] | type[AsyncCallbackManager],
    config: RunnableConfig | None,
    scope: Scope,
    session_key: str,
) -> CallbackManager | AsyncCallbackManager | None:
    conf = ensure_config(config)
    configured = manager.configure(
        conf.get("callbacks"),
        None,
        inheritable_tags=conf.get("tags"),
        inheritable_metadata=conf.get("metadata"),
        local_metadata={
            "ls_retriever_name": RECALL_RUN_NAME,
            "user_id": scope.user_id,
            "agent_id": scope.agent_id,
            "session_key": session_key,
        },
    )
    return configured if configured.handlers else None


def _callbacks_failed(exc: Exception) -> None:
    # a handler that raises (raise_error=True) must not end the turn; its message may quote text
    logger.warning("%s callbacks failed: %s", RECALL_RUN_NAME, type(exc).__name__)
    logger.debug("%s callback failure details", RECALL_RUN_NAME, exc_info=exc)


def start_recall_run(
    query: str, scope: Scope, session_key: str, config: RunnableConfig | None = None
) -> CallbackManagerForRetrieverRun | None:
    """Start the `tdai_recall` run under the current run; `None` when nothing listens.

    Args:
        query: The turn's message.
        scope: The scope recall reads.
        session_key: The turn's session (run metadata).
        config: The run's config; `None` reads the current run's (`ensure_config()`).
    """
    try:
        manager = _configure(CallbackManager, config, scope, session_key)
        if not isinstance(manager, CallbackManager):
            return None
        return manager.on_retriever_start(None, query, name=RECALL_RUN_NAME)
    except Exception as exc:
        _callbacks_failed(exc)
        return None


async def astart_recall_run(
    query: str, scope: Scope, session_key: str, config: RunnableConfig | None = None
) -> AsyncCallbackManagerForRetrieverRun | None:
    """Async version of `start_recall_run`."""
    try:
        manager = _configure(AsyncCallbackManager, config, scope, session_key)
        if not isinstance(manager, AsyncCallbackManager):
            return None
        return await manager.on_retriever_start(None, query, name=RECALL_RUN_NAME)
    except Exception as exc:
        _callbacks_failed(exc)
        return None


def finish_recall_run(
    run: CallbackManagerForRetrieverRun | None,
    scope: Scope,
    result: RecallResult | None,
    error: BaseException | None,
    *,
    text: bool = False,
) -> None:
    """End the run: its documents, or `on_retriever_error` when `error` is set; never raises.

    `text`: the documents carry the memory texts (`recall.trace_memory_text`).
    """
    if run is None:
        return
    try:
        if error is not None:
            run.on_retriever_error(error)
        else:
            run.on_retriever_end(recall_documents(result, scope, text=text))
    except Exception as exc:
        _callbacks_failed(exc)


async def afinish_recall_run(
    run: AsyncCallbackManagerForRetrieverRun | None,
    scope: Scope,
    result: RecallResult | None,
    error: BaseException | None,
    *,
    text: bool = False,
) -> None:
    """Async version of `finish_recall_run`."""
    if run is None:
        return
    try:
        if error is not None:
            await run.on_retriever_error(error)
        else:
            await run.on_retriever_end(recall_documents(result, scope, text=text))
    except Exception as exc:
        _callbacks_failed(exc)
