"""The keyword index's sparse scoring (large scopes, rare query tokens) equals the dense one."""

from __future__ import annotations

import random

import numpy as np
import pytest

from langchain_tdai_recall.stores._index import keyword as _keyword
from langchain_tdai_recall.stores._index.keyword import KeywordIndex
from langchain_tdai_recall.text.tokenize import get_tokenizer

from ._words import hit_fields, phrase


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_and_dense_scoring_agree(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = get_tokenizer("bigram")
    rng = random.Random(seed)
    index = KeywordIndex(tokenizer.identity)
    ids = list(range(3000))
    texts = [phrase(rng, 1, 5) for _ in ids]
    index.add_many(ids, [tokenizer.document_tokens(t) for t in texts], [i % 7 for i in ids])
    index.remove(rng.sample(ids, 40))  # dead slots, below the compaction threshold
    allowed = index.slot_mask(np.asarray(rng.sample(ids, 1500), dtype=np.int64))
    queries = ["piano", "花生 过敏", "Lyon trip morning", "海边的蛋糕", "unknown words", "dog"]
    for q in queries:
        query = tokenizer.query(q)
        also = rng.sample(ids, 30)
        results = []
        for sparse in (False, True):
            monkeypatch.setattr(_keyword, "_SPARSE_MIN_SLOTS", 0 if sparse else 10**9)
            monkeypatch.setattr(_keyword, "_SPARSE_SHARE", 0 if sparse else 4)
            results.append(
                [
                    hit_fields(index.search(query, limit=12, also=also)),
                    hit_fields(index.search(query, limit=5, allowed=allowed, also=also)),
                    hit_fields(index.search(query, limit=0, also=also[:3])),
                ]
            )
        assert results[0] == results[1]
        assert results[0][0][4] > 0 or q == "unknown words"
    # the scratch of the sparse path is left clean for the next query
    assert index._position is not None and (index._position == -1).all()
