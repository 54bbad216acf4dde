"""A small scope's packed keyword postings (issue 23) search exactly like per-token lists."""

from __future__ import annotations

import random

import numpy as np
import pytest

from langchain_tdai_recall.stores._index.keyword import KeywordIndex
from langchain_tdai_recall.text.tokenize import get_tokenizer

from ._words import hit_fields, phrase

_QUERIES = ["piano", "花生 过敏", "Lyon trip morning", "海边的蛋糕", "unknown words", "dog"]


def _same(packed: KeywordIndex, plain: KeywordIndex, ids: list[int]) -> None:
    tokenizer = get_tokenizer("bigram")
    for q in _QUERIES:
        query = tokenizer.query(q)
        assert hit_fields(packed.search(query, limit=10)) == hit_fields(
            plain.search(query, limit=10)
        )
        assert hit_fields(packed.score(query, ids[:50])) == hit_fields(plain.score(query, ids[:50]))
    a, b = packed.export_state(), plain.export_state()
    assert a.tokens == b.tokens
    for field in ("posting_starts", "slots", "weights", "doc_ids"):  # term order may differ
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize("seed", [0, 1])
def test_packed_postings_search_like_per_token_lists(seed: int) -> None:
    tokenizer = get_tokenizer("bigram")
    rng = random.Random(seed)
    texts = [phrase(rng, 1, 5) for _ in range(400)]
    tokens = [tokenizer.document_tokens(t) for t in texts]
    ids = list(range(400))
    packed = KeywordIndex(tokenizer.identity)
    plain = KeywordIndex(tokenizer.identity)
    packed.add_many(ids[:40], tokens[:40])  # a small first batch: packed
    for i in ids[:40]:
        plain.add(i, tokens[i])  # one by one: per-token lists only
    assert packed._lists == {}
    assert packed.nbytes < plain.nbytes
    _same(packed, plain, ids)
    packed.add_many(ids[40:60], tokens[40:60])  # appended after the packed postings
    for i in ids[40:60]:
        plain.add(i, tokens[i])
    _same(packed, plain, ids)
    for i in ids[60:400]:  # appended far past the packed ones: unpacked
        packed.add(i, tokens[i])
        plain.add(i, tokens[i])
    packed.add_many([5, 7], [tokens[300], tokens[301]])  # replaced documents
    plain.add_many([5, 7], [tokens[300], tokens[301]])
    _same(packed, plain, ids)
    gone = rng.sample(ids, 200)  # past the compaction threshold
    packed.remove(gone)
    plain.remove(gone)
    _same(packed, plain, [i for i in ids if i not in set(gone)])


def test_a_restored_packed_index_equals_the_original() -> None:
    tokenizer = get_tokenizer("bigram")
    rng = random.Random(3)
    texts = [phrase(rng, 1, 5) for _ in range(30)]
    index = KeywordIndex(tokenizer.identity)
    index.add_many(list(range(30)), [tokenizer.document_tokens(t) for t in texts])
    restored = KeywordIndex.from_state(index.export_state())
    _same(restored, index, list(range(30)))
