"""The order of a LangGraph store query search: every item ranked, as LangGraph's stores do.

A query ranks every candidate item (those under the prefix that pass the filter), not a
candidate pool, so `limit` and `offset` page through one fixed order and no floor drops a weak
match:

- with a query vector, an item's score is the cosine similarity of the query with its vector
  (the memory's own, or the best of its indexed texts' `FieldVectors`), the number LangGraph's
  stores return;
- without one (no embedder, or the query embedding failed), its keyword coverage (0..1), so the
  search still works on words;
- items with no vector (`index=False`, no indexed text, or an embedding still missing after the
  read-your-writes wait) are never scored: they follow the scored ones, newest first, with score
  `None`, as in LangGraph's `InMemoryStore`.

Ties keep the candidates' order (newest first, then id), so the order is total and stable from
call to call.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall._graph.items import FieldVectors
from langchain_tdai_recall.stores._index.extras import HIDDEN_KEY
from langchain_tdai_recall.stores._index.layer import LayerIndex

__all__ = ["rank_rows"]

_KINDS: Final = "tdai_store:kinds"
"""The memo key of a scope's hidden rows and rows with field vectors (`LayerIndex.memo`)."""


def _kinds(index: LayerIndex) -> tuple[frozenset[int], tuple[int, ...]]:
    """The rows no query ranks, and the rows whose indexed texts have their own vectors."""
    hidden: set[int] = set()
    with_fields: list[int] = []
    for rowid, extras in list(index.extras.items()):
        if extras.hidden:
            hidden.add(rowid)
            continue
        part = extras.metadata.get(HIDDEN_KEY) if extras.metadata else None
        if isinstance(part, dict) and "vectors" in part:
            with_fields.append(rowid)
    return frozenset(hidden), tuple(with_fields)


def rank_rows(
    index: LayerIndex,
    rows: Sequence[int],
    *,
    query_vector: npt.NDArray[np.float32] | None,
    query_text: str,
    embedder: str | None,
    limit: int,
) -> list[tuple[int, float | None]]:
    """The first `limit` of `rows` (candidates, newest first) in query order, with scores."""
    place = {rowid: i for i, rowid in enumerate(rows)}
    extras = index.extras
    hidden, with_fields = index.memo(_KINDS, lambda: _kinds(index))
    pool = [r for r in rows if r not in hidden] if hidden else list(rows)
    multi = [r for r in with_fields if r in place]
    scores: dict[int, float] = {}
    if query_vector is not None:
        dims = int(query_vector.shape[0])
        if index.vector_dim() == dims:
            scores = index.vector_scores(query_vector, pool)
        for rowid in multi:
            e = extras.get(rowid)
            fields = FieldVectors.read(e.metadata, embedder) if e is not None else None
            if fields is not None and fields.matrix.shape[1] == dims:
                scores[rowid] = float(np.max(fields.matrix @ query_vector))
    elif pool:
        found = index.keyword_scores(index.tokenizer.query(query_text), pool)
        scores = dict.fromkeys(pool, 0.0)
        scores.update(zip(found.ids.tolist(), found.coverage.tolist(), strict=True))
    ranked: list[tuple[int, float | None]] = []
    if scores:
        ids = np.fromiter(scores, dtype=np.int64, count=len(scores))
        values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
        places = np.fromiter((place[r] for r in scores), dtype=np.int64, count=len(scores))
        order = np.lexsort((places, -values))[:limit]  # best first; ties stay newest first
        ranked = [(int(ids[i]), float(values[i])) for i in order]
    if len(ranked) < limit:
        rest = (r for r in rows if r not in scores)
        ranked += [(r, None) for r in itertools.islice(rest, limit - len(ranked))]
    return ranked
