"""Optional reranking of recall's candidates by any LangChain `BaseDocumentCompressor`.

A cross-encoder (`CrossEncoderReranker`), a hosted reranker (`CohereRerank`, `FlashrankRerank`)
or an LLM (`LLMListwiseRerank`) judges relevance better than two similarity legs, at a cost. With
a reranker, recall hands it the best-ranked fused candidates (`CANDIDATES_PER_RESULT ×
max_results` of them, however low their relevance) as `Document`s and injects what it returns,
in its order: a document compressor returns the documents it keeps, so its selection replaces
the relevance threshold. That is how a memory the legs rank low ("allergic to peanuts" for "can
I have a Snickers bar?") gets in. A returned document's `metadata["relevance_score"]`, when the
compressor sets one, is reported on the recalled memory.

The call runs on a worker thread and gets what is left of the recall budget. When it fails, times
out or returns nothing usable, recall injects the fused order through the normal threshold and
reports why in `RecallResult.error`, with one warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.documents import Document

from langchain_tdai_recall.recall.search import RankedHit
from langchain_tdai_recall.types import MemoryRecord

__all__ = ["REF_KEY", "Reranked", "rerank"]

logger = logging.getLogger(__name__)

REF_KEY: Final = "tdai_ref"
"""Metadata key carrying a candidate's row reference through the compressor."""

_RESERVE_S: Final = 0.05
"""Part of the recall budget kept back for loading the persona and scenes after reranking."""


@dataclass(frozen=True, slots=True)
class Reranked:
    """The reranker's verdict: the hits it kept, in its order, with its scores."""

    hits: list[RankedHit]
    """Kept candidates, best first."""
    scores: dict[int, float]
    """Row reference -> the compressor's `relevance_score`, when it gave one."""


def rerank(
    reranker: Any,
    query: str,
    candidates: Sequence[RankedHit],
    records: dict[int, MemoryRecord],
    *,
    executor: Executor,
    deadline: float,
) -> Reranked:
    """Run `reranker.compress_documents` on the candidates within the time left.

    Raises:
        TimeoutError: If the reranker did not answer before `deadline`.
        ValueError: If it returned no document that is one of the candidates.
        Exception: Whatever the reranker raised.
    """
    by_ref = {h.rowid: h for h in candidates if h.rowid in records}
    docs = [
        Document(
            page_content=records[ref].content,
            metadata={
                REF_KEY: ref,
                "id": records[ref].id,
                "type": records[ref].type,
                "score": hit.score,
            },
        )
        for ref, hit in by_ref.items()
    ]
    remaining = deadline - time.monotonic() - _RESERVE_S
    if remaining <= 0:
        msg = "no time left for the reranker"
        raise TimeoutError(msg)
    future = executor.submit(reranker.compress_documents, docs, query)
    try:
        returned = future.result(timeout=remaining)
    except FutureTimeout as exc:
        future.cancel()
        msg = f"the reranker exceeded the {remaining * 1000:.0f} ms left of the recall budget"
        raise TimeoutError(msg) from exc
    kept: list[RankedHit] = []
    scores: dict[int, float] = {}
    for doc in returned or ():
        ref = getattr(doc, "metadata", {}).get(REF_KEY)
        hit = by_ref.get(ref) if isinstance(ref, int) else None
        if hit is None or hit in kept:
            continue
        kept.append(hit)
        score = doc.metadata.get("relevance_score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            scores[hit.rowid] = float(score)
    if docs and not kept and returned:
        msg = "the reranker returned none of the candidates it was given"
        raise ValueError(msg)
    return Reranked(kept, scores)
