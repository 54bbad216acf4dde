"""What the facade asks of formation: start it for an opened store, and form now in the foreground.

`TdaiMemory.open` starts formation when a chat model is configured (the argument, else the
`extraction.model` setting) and the store is writable, and resumes the work found pending in the
store. `TdaiMemory.extract` forms everything pending in one scope (or in every scope) on the
calling thread, with a progress bar over the pending messages. The facade keeps the lifecycle
(the scheduler's slot, `flush`, `close`); the decisions live here, beside the scheduler.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from langchain_tdai_recall._runtime.progress import progress
from langchain_tdai_recall.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig

    from langchain_tdai_recall._embedding.upkeep import VectorUpkeep
    from langchain_tdai_recall.config import TdaiConfig
    from langchain_tdai_recall.formation.report import ExtractionReport
    from langchain_tdai_recall.formation.scheduler import FormationScheduler
    from langchain_tdai_recall.recall.search import Searcher
    from langchain_tdai_recall.stores.base import BaseMemoryStore
    from langchain_tdai_recall.types import Scope

__all__ = ["extract_now", "start_formation"]

logger = logging.getLogger(__name__)


def start_formation(
    *,
    store: BaseMemoryStore,
    searcher: Searcher,
    config: TdaiConfig,
    upkeep: VectorUpkeep | None,
    model: BaseChatModel | str | None,
    callbacks: Callbacks,
) -> FormationScheduler | None:
    """The formation scheduler for a store, or `None` without a chat model or on a read-only store.

    Raises:
        ConfigError: If `model` is given for a read-only store.
    """
    chosen = model if model is not None else config.extraction.model
    if chosen is None or not config.extraction.enabled:
        return None
    if store.read_only:
        if model is not None:
            msg = (
                "extraction_model needs a writable store: memory formation writes memories; "
                "open the store without read_only=True to form memories"
            )
            raise ConfigError(msg)
        logger.info("memory formation is off: this store was opened read-only")
        return None
    # imported only now: the pipeline needs LangChain's chat-model stack (most of a second to
    # import), which a memory without a chat model never loads
    from langchain_tdai_recall.formation._llm import resolve_chat_model  # noqa: PLC0415
    from langchain_tdai_recall.formation.pipeline import FormationEngine  # noqa: PLC0415
    from langchain_tdai_recall.formation.scheduler import FormationScheduler  # noqa: PLC0415

    engine = FormationEngine(
        store=store,
        searcher=searcher,
        config=config,
        upkeep=upkeep,
        model=resolve_chat_model(chosen),
        scene_model=resolve_chat_model(config.persona.model) if config.persona.model else None,
        callbacks=callbacks,
    )
    return FormationScheduler(engine)


def extract_now(
    formation: FormationScheduler,
    scope: Scope,
    *,
    session_key: str | None,
    all_scopes: bool,
    show_progress: bool | None,
    config: RunnableConfig | None,
) -> ExtractionReport:
    """Form what is pending in `scope` (one session when given), or in every scope, right now."""
    records = formation.engine.records
    if all_scopes:
        targets = formation.pending_targets()
    else:
        scope_id = records.scope_id(scope)
        targets = [] if scope_id is None else [(scope_id, scope)]
    key = None if all_scopes else session_key
    total = sum(p.messages for sid, _ in targets for p in records.pending(sid, key))
    with progress(total, desc="forming memories", enabled=show_progress) as bar:
        return formation.extract(targets, session_key=key, config=config, progress=bar.update)
