"""VectorIndex: exact scores, ordering, replacement, removal, filters and the PQ path."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index import vectors as _vectors
from langchain_tdai_recall.stores._index.vectors import VectorIndex


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute(
    ids: np.ndarray, vecs: np.ndarray, q: np.ndarray, k: int
) -> tuple[list[int], list[float]]:
    """Reference: float64 inner products rounded to float32, score desc then id asc."""
    scores = (vecs.astype(np.float64) @ q.astype(np.float64)).astype(np.float32)
    order = np.lexsort((ids, -scores))[:k]
    return ids[order].tolist(), scores[order].tolist()


@pytest.fixture
def small_pq(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the PQ path kick in at 600 vectors so it can be tested in milliseconds."""
    monkeypatch.setattr(_vectors, "EXACT_MAX_VECTORS", 600)
    monkeypatch.setattr(_vectors, "_PQ_DROP_BELOW", 300)
    monkeypatch.setattr(_vectors, "_TRAIN_SAMPLE", 512)
    monkeypatch.setattr(_vectors, "_EXACT_SUBSET_MAX", 600)
    monkeypatch.setattr(_vectors, "_DICT_LOOKUP_MAX", 100)


def test_scores_are_exact_inner_products() -> None:
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 300, 24)
    ids = np.arange(1000, 1300, dtype=np.int64)
    index = VectorIndex(24)
    index.add(ids, vecs)
    for q in _unit(rng, 10, 24):
        got_ids, got_scores = index.search(q, 7)
        want_ids, want_scores = _brute(ids, vecs, q, 7)
        assert got_ids.dtype == np.int64
        assert got_scores.dtype == np.float32
        assert got_ids.tolist() == want_ids
        assert got_scores.tolist() == want_scores


def test_ties_are_broken_by_id_ascending() -> None:
    v = np.array([[0.6, 0.8, 0.0]], dtype=np.float32)
    w = np.array([[0.0, 0.0, 1.0]], dtype=np.float32)
    index = VectorIndex(3)
    index.add(np.array([9, 3, 5, 4]), np.vstack([v, v, w, v]))
    ids, scores = index.search(np.array([0.6, 0.8, 0.0], dtype=np.float32), 4)
    assert ids.tolist() == [3, 4, 9, 5]
    assert scores[0] == scores[1] == scores[2]
    ids, _ = index.search(np.array([0.6, 0.8, 0.0], dtype=np.float32), 2)
    assert ids.tolist() == [3, 4]


def test_readd_replaces_vector() -> None:
    index = VectorIndex(2)
    index.add(np.array([1, 2]), np.array([[1, 0], [0, 1]], dtype=np.float32))
    index.add(np.array([1]), np.array([[0, 1]], dtype=np.float32))
    assert len(index) == 2
    ids, scores = index.search(np.array([1, 0], dtype=np.float32), 5)
    assert ids.tolist() == [1, 2]
    assert scores.tolist() == [0.0, 0.0]
    ids, scores = index.search(np.array([0, 1], dtype=np.float32), 1)
    assert ids.tolist() == [1]
    assert scores.tolist() == [1.0]


def test_duplicate_ids_in_one_batch_keep_the_last() -> None:
    index = VectorIndex(2)
    index.add(np.array([4, 4, 5]), np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32))
    assert len(index) == 2
    ids, scores = index.search(np.array([0, 1], dtype=np.float32), 1)
    assert ids.tolist() == [4]
    assert scores.tolist() == [1.0]


def test_remove_ignores_unknown_ids_and_keeps_the_rest_searchable() -> None:
    rng = np.random.default_rng(1)
    vecs = _unit(rng, 50, 8)
    ids = np.arange(50, dtype=np.int64) * 3
    index = VectorIndex(8)
    index.add(ids, vecs)
    gone = [0, 3, 147, 60, 999, 3]
    index.remove(gone)
    index.remove([])
    index.remove(np.array([12345]))
    keep = ~np.isin(ids, gone)
    assert len(index) == int(keep.sum())
    assert 3 not in index
    assert 6 in index
    for q in _unit(rng, 5, 8):
        got, scores = index.search(q, 100)
        want, want_scores = _brute(ids[keep], vecs[keep], q, 100)
        assert got.tolist() == want
        assert scores.tolist() == want_scores


def test_remove_everything_then_add_again() -> None:
    index = VectorIndex(2)
    index.add(np.array([1, 2]), np.array([[1, 0], [0, 1]], dtype=np.float32))
    index.remove(np.array([2, 1]))
    assert len(index) == 0
    assert index.search(np.array([1, 0], dtype=np.float32), 3)[0].size == 0
    index.add(np.array([2]), np.array([[1, 0]], dtype=np.float32))
    assert index.search(np.array([1, 0], dtype=np.float32), 3)[0].tolist() == [2]


def test_allowed_restricts_candidates() -> None:
    rng = np.random.default_rng(2)
    vecs = _unit(rng, 40, 6)
    ids = np.arange(40, dtype=np.int64) + 100
    index = VectorIndex(6)
    index.add(ids, vecs)
    q = _unit(rng, 1, 6)[0]
    allowed = np.array([139, 101, 120, 120, 7777], dtype=np.int64)
    got, scores = index.search(q, 10, allowed=allowed)
    mask = np.isin(ids, allowed)
    want, want_scores = _brute(ids[mask], vecs[mask], q, 10)
    assert got.tolist() == want
    assert scores.tolist() == want_scores
    assert index.search(q, 10, allowed=np.array([], dtype=np.int64))[0].size == 0
    assert index.search(q, 10, allowed=np.array([5, 6]))[0].size == 0


def test_k_and_empty_edge_cases() -> None:
    index = VectorIndex(4)
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    for k in (0, 1, 10):
        ids, scores = index.search(q, k)
        assert ids.shape == (0,)
        assert scores.shape == (0,)
    index.add(np.array([1, 2, 3]), np.eye(4, dtype=np.float32)[:3])
    assert index.search(q, 0)[0].size == 0
    ids, _ = index.search(q, 50)
    assert ids.tolist() == [1, 2, 3]
    index.add(np.empty(0, dtype=np.int64), np.empty((0, 4), dtype=np.float32))
    assert len(index) == 3


def test_invalid_input_is_rejected() -> None:
    with pytest.raises(ConfigError, match="dim"):
        VectorIndex(0)
    index = VectorIndex(4)
    with pytest.raises(ConfigError, match="shape"):
        index.add(np.array([1, 2]), np.ones((2, 3), dtype=np.float32))
    with pytest.raises(ConfigError, match="shape"):
        index.add(np.array([1]), np.ones((2, 4), dtype=np.float32))
    with pytest.raises(ConfigError, match="finite"):
        index.add(np.array([1]), np.full((1, 4), np.nan, dtype=np.float32))
    with pytest.raises(ConfigError, match="shape"):
        index.search(np.ones(3, dtype=np.float32), 1)
    with pytest.raises(ConfigError, match="k must"):
        index.search(np.ones(4, dtype=np.float32), -1)
    assert len(index) == 0


def test_search_leaves_the_callers_openmp_setting_alone() -> None:
    index = VectorIndex(4)
    index.add(np.arange(10), _unit(np.random.default_rng(3), 10, 4))
    before = faiss.omp_get_max_threads()
    index.search(np.array([1, 0, 0, 0], dtype=np.float32), 3)
    assert faiss.omp_get_max_threads() == before


def test_random_operations_agree_with_brute_force() -> None:
    rng = np.random.default_rng(4)
    dim = 12
    index = VectorIndex(dim)
    ref: dict[int, np.ndarray] = {}
    for _ in range(40):
        op = rng.integers(3)
        if op < 2:
            new_ids = rng.integers(0, 200, size=int(rng.integers(1, 20)))
            vecs = _unit(rng, new_ids.size, dim)
            index.add(new_ids, vecs)
            for i, v in zip(new_ids.tolist(), vecs, strict=True):
                ref[i] = v
        else:
            gone = rng.integers(0, 200, size=int(rng.integers(1, 10)))
            index.remove(gone)
            for i in gone.tolist():
                ref.pop(i, None)
        assert len(index) == len(ref)
        if not ref:
            continue
        ids = np.array(sorted(ref), dtype=np.int64)
        vecs = np.stack([ref[i] for i in ids.tolist()])
        q = _unit(rng, 1, dim)[0]
        got, scores = index.search(q, 8)
        assert (got.tolist(), scores.tolist()) == _brute(ids, vecs, q, 8)
        allowed = rng.choice(ids, size=min(5, ids.size), replace=False)
        got, _ = index.search(q, 3, allowed=allowed)
        mask = np.isin(ids, allowed)
        assert got.tolist() == _brute(ids[mask], vecs[mask], q, 3)[0]


@pytest.mark.usefixtures("small_pq")
def test_pq_path_scores_exactly_and_finds_near_duplicates() -> None:
    rng = np.random.default_rng(5)
    dim = 16
    vecs = _unit(rng, 2000, dim)
    ids = np.arange(2000, dtype=np.int64) * 7
    index = VectorIndex(dim)
    index.add(ids[:1000], vecs[:1000])
    index.add(ids[1000:], vecs[1000:])
    assert index._pq is not None
    stored = vecs.astype(np.float16).astype(np.float32)  # rows are float16 with a quantiser
    hits = 0
    for i in rng.choice(2000, 30, replace=False).tolist():
        got, scores = index.search(vecs[i], 10)
        want, _ = _brute(ids, vecs, vecs[i], 10)
        assert got[0] == ids[i]
        assert scores[0] == pytest.approx(1.0, abs=2e-3)
        exact = dict(zip(*_brute(ids, stored, vecs[i], 2000), strict=True))
        assert [exact[j] for j in got.tolist()] == scores.tolist()
        assert list(scores) == sorted(scores, reverse=True)
        hits += len(set(got.tolist()) & set(want))
    assert hits / 300 >= 0.9


@pytest.mark.usefixtures("small_pq")
def test_pq_path_replace_remove_and_filter() -> None:
    rng = np.random.default_rng(6)
    dim = 16
    vecs = _unit(rng, 1500, dim)
    ids = np.arange(1500, dtype=np.int64)
    index = VectorIndex(dim)
    index.add(ids, vecs)
    assert index._pq is not None
    # replace: the new vector of id 10 is found by its own query
    new = _unit(rng, 1, dim)
    index.add(np.array([10]), new)
    vecs[10] = new[0]
    got, scores = index.search(new[0], 1)
    assert got.tolist() == [10]
    assert scores[0] == pytest.approx(1.0, abs=2e-3)  # float16 rows
    # remove from the middle: moved rows keep their codes and ids (and a filter's cached
    # id -> row view, built here, is invalidated)
    assert index.search(new[0], 1, allowed=ids)[0].tolist() == [10]
    gone = rng.choice(1500, 400, replace=False)
    index.remove(gone)
    keep = np.setdiff1d(ids, gone)
    assert len(index) == keep.size
    assert index._pq is not None
    for i in rng.choice(keep, 20, replace=False).tolist():
        got, _ = index.search(vecs[i], 5)
        assert got[0] == i
        assert not set(got.tolist()) & set(gone.tolist())
    # a filter wider than the exact limit goes through the PQ path, a narrow one is exact;
    # unknown and removed ids in a filter are ignored
    wide = np.concatenate([keep[:700], gone[:50], [10**12, -5]])
    got, _ = index.search(vecs[wide[3]], 5, allowed=wide)
    assert got[0] == wide[3]
    assert set(got.tolist()) <= set(keep[:700].tolist())
    stored = vecs.astype(np.float16).astype(np.float32)  # rows are float16 with a quantiser
    medium = keep[:300]  # more than the dict lookup limit, below the subset limit: exact
    got, scores = index.search(vecs[0], 5, allowed=medium[::-1])
    assert (got.tolist(), scores.tolist()) == _brute(medium, stored[medium], vecs[0], 5)
    narrow = keep[:20]
    got, scores = index.search(vecs[0], 5, allowed=narrow)
    assert (got.tolist(), scores.tolist()) == _brute(narrow, stored[narrow], vecs[0], 5)
    # shrinking below the drop threshold returns to the exact path (and to float32 rows)
    index.remove(keep[:900])
    assert index._pq is None
    assert index._rows.dtype == np.float32
    rest = keep[900:]
    got, scores = index.search(vecs[rest[0]], 5)
    assert (got.tolist(), scores.tolist()) == _brute(rest, stored[rest], vecs[rest[0]], 5)
