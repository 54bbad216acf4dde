"""Optional reranking of recall's candidates by any LangChain `BaseDocumentCompressor`.

A cross-encoder (`CrossEncoderReranker`), a hosted reranker (`CohereRerank`, `FlashrankRerank`)
or an LLM (`LLMListwiseRerank`) judges relevance better than two similarity legs, at a cost. With
a reranker, recall hands it the best-ranked fused candidates (`CANDIDATES_PER_RESULT ×
max_results` of them, however low their relevance) as `Document`s and injects what it returns,
in its order: a document compressor returns the documents it keeps, so its selection replaces
the relevance threshold. That is how a memory the legs rank low ("allergic to peanuts" for "can
I have a Snickers bar?") gets in. A returned document's `metadata["relevance_score"]`, when the
compressor sets one, is reported on the recalled memory.

The call runs on a worker thread and gets what is left of the recall budget but two fifths of it
(`RESERVE_SHARE`, kept for the memory block and the system context); recall waits for it on the
caller's side (`recall.driver`), never on a recall worker thread. When it fails, times
out or returns nothing usable, recall injects the fused order through the normal threshold and
reports why in `RecallResult.error`, with one warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.documents import Document

from langchain_tdai_recall.recall.search import RankedHit
from langchain_tdai_recall.types import MemoryRecord

__all__ = ["REF_KEY", "RESERVE_SHARE", "RerankCall", "Reranked", "start_rerank"]

logger = logging.getLogger(__name__)

REF_KEY: Final = "tdai_ref"
"""Metadata key carrying a candidate's row reference through the compressor."""

RESERVE_SHARE: Final = 0.4
"""Share of the recall budget kept back for the store work after reranking (reading the memory
block's records, the persona and scenes): a reranker that does not answer costs the turn its
reranking, never the memories or the persona. The same share the query embedding leaves the store
work by default (`embedding.query_timeout_ms` is two fifths of `recall.timeout_ms`): on a loaded
machine a burst of concurrent recalls whose reranker timed out at once needs it."""

_MIN_RESERVE_S: Final = 0.05
"""The least kept back, however short the recall budget."""


@dataclass(frozen=True, slots=True)
class Reranked:
    """The reranker's verdict: the hits it kept, in its order, with its scores."""

    hits: list[RankedHit]
    """Kept candidates, best first."""
    scores: dict[int, float]
    """Row reference -> the compressor's `relevance_score`, when it gave one."""


@dataclass(frozen=True, slots=True)
class RerankCall:
    """A running `compress_documents` call: recall waits for it outside its worker thread."""

    future: Future[Any]
    """The call on the reranker's thread."""
    timeout_s: float
    """How long the caller may wait for it: what is left of the recall budget."""
    candidates: dict[int, RankedHit]
    """Row reference -> the candidate handed to the reranker."""

    def timeout_error(self) -> TimeoutError:
        """The error of a reranker that did not answer in time (cancelled if not started)."""
        self.future.cancel()
        msg = f"the reranker exceeded the {self.timeout_s * 1000:.0f} ms left of the recall budget"
        return TimeoutError(msg)

    def finish(self, returned: object) -> Reranked:
        """The verdict from what `compress_documents` returned.

        Raises:
            ValueError: If it returned no document that is one of the candidates.
        """
        kept: list[RankedHit] = []
        scores: dict[int, float] = {}
        documents = returned if isinstance(returned, Sequence) else ()
        for doc in documents:
            ref = getattr(doc, "metadata", {}).get(REF_KEY)
            hit = self.candidates.get(ref) if isinstance(ref, int) else None
            if hit is None or hit in kept:
                continue
            kept.append(hit)
            score = doc.metadata.get("relevance_score")
            if isinstance(score, int | float) and not isinstance(score, bool):
                scores[hit.rowid] = float(score)
        if self.candidates and not kept and documents:
            msg = "the reranker returned none of the candidates it was given"
            raise ValueError(msg)
        return Reranked(kept, scores)


def start_rerank(
    reranker: Any,
    query: str,
    candidates: Sequence[RankedHit],
    records: dict[int, MemoryRecord],
    *,
    executor: Executor,
    deadline: float,
    budget_s: float,
) -> RerankCall:
    """Start `reranker.compress_documents` on the candidates without waiting for it.

    It may take what is left before `deadline` (`time.monotonic()`) but `RESERVE_SHARE` of the
    recall's `budget_s`.

    Raises:
        TimeoutError: If no time is left for the reranker.
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
    remaining = deadline - time.monotonic() - max(RESERVE_SHARE * budget_s, _MIN_RESERVE_S)
    if remaining <= 0:
        msg = "no time left for the reranker"
        raise TimeoutError(msg)
    return RerankCall(executor.submit(reranker.compress_documents, docs, query), remaining, by_ref)
