"""Persisted index snapshots: used when valid, rebuilt (with a log line) when not.

PostgreSQL's index-cache test is in `tests/integration_tests/stores/test_postgres_snapshots.py`.
"""

from __future__ import annotations

import logging
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import snapshot as _snapshot
from langchain_tdai_recall.stores._index import vectors as _vectors
from langchain_tdai_recall.stores._index.keyword import KeywordIndex
from langchain_tdai_recall.stores.local.store import INDEX_CACHE_DIRNAME
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.text.tokenize import get_tokenizer

from ._words import phrase

USER = "snap-user"
QUERIES = ["coffee in the morning", "trip to Lyon", "花生 过敏", "meeting notes", "guitar"]
Hits = list[list[tuple[str, float]]]


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshot from 50 rows, and take the quantised vector path from 200 vectors."""
    monkeypatch.setattr(_snapshot, "SNAPSHOT_MIN_ROWS", 50)
    monkeypatch.setattr(_vectors, "EXACT_MAX_VECTORS", 200)
    monkeypatch.setattr(_vectors, "_PQ_DROP_BELOW", 100)
    monkeypatch.setattr(_vectors, "_TRAIN_SAMPLE", 150)


def _records(n: int, seed: int = 0) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for i in range(n):
        words = phrase(rng, 3, 8)
        out.append(
            {
                "id": f"m{i}",
                "content": f"{words} {i}",
                "type": rng.choice(["persona", "episodic", "instruction"]),
                "priority": rng.choice([-1, 20, 50, 70, 90]),
                "scene_name": rng.choice(["", "travel", "food"]),
            }
        )
    return out


def _open(where: object, **config: object) -> TdaiMemory:
    return TdaiMemory.open(
        where,  # type: ignore[arg-type]
        embeddings=HashEmbeddings(dims=32),
        config={"store": config} if config else None,
    )


def _fill(memory: TdaiMemory, n: int = 400) -> None:
    memory.add_memories(_records(n), user_id=USER, show_progress=False)
    for i in range(0, n, 37):
        memory.delete_memory(f"m{i}", user_id=USER)
    memory.flush()


def _hits(memory: TdaiMemory) -> Hits:
    out = []
    for q in QUERIES:
        out.append([(h.id, h.score) for h in memory.search_memories(q, limit=8, user_id=USER)])
        out.append(
            [
                (h.id, h.score)
                for h in memory.search_memories(q, limit=5, type="persona", user_id=USER)
            ]
        )
    return out


def _snapshots(store: Path) -> list[Path]:
    return sorted((store / INDEX_CACHE_DIRNAME).glob("*.tdxs"))


def _fresh_hits(store: Path) -> Hits:
    with _open(store, index_cache=None) as memory:
        return _hits(memory)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with _open(path) as memory:
        _fill(memory)
        _hits(memory)  # builds the indexes; closing saves their snapshots
    return path


def test_close_writes_a_snapshot_and_a_restart_uses_it(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (snap,) = _snapshots(store)
    assert snap.name.endswith("-l1-1.tdxs")
    expected = _fresh_hits(store)
    assert any(expected)
    with caplog.at_level(logging.INFO, "langchain_tdai_recall"), _open(store) as memory:
        assert _hits(memory) == expected
        # the restored index catches up with writes made after the snapshot
        memory.add_memory("zanzibar quartz guitar", id="new", user_id=USER)
        memory.delete_memory("m1", user_id=USER)
        memory.flush()
        found = {h.id for h in memory.search_memories("zanzibar quartz", user_id=USER)}
        assert "new" in found
        assert "m1" not in {h.id for h in memory.search_memories("m1 1", user_id=USER)}
        after = _hits(memory)
    assert "restored" in caplog.text
    assert "ignoring the index snapshot" not in caplog.text
    assert after == _fresh_hits(store)


def test_the_snapshot_keeps_quantised_vectors_and_pins(store: Path) -> None:
    with _open(store) as memory:
        index = memory._store.index(memory.scope(USER, None), "l1")
        assert index is not None and index.vectors is not None
        assert index.vectors._pq is not None  # restored, not retrained
        assert index.vectors._rows.dtype == np.float16
        pinned = index.pinned_rows(60)
    with _open(store, index_cache=None) as memory:
        fresh = memory._store.index(memory.scope(USER, None), "l1")
        assert fresh is not None
        assert pinned == fresh.pinned_rows(60)
        assert pinned


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


def _flip_body(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10
    path.write_bytes(bytes(data))


def _flip_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b'"generation": ') + len(b'"generation": ')
    data[at] = ord("9") if data[at] != ord("9") else ord("8")
    path.write_bytes(bytes(data))


def _not_a_snapshot(path: Path) -> None:
    path.write_bytes(b"\x80\x04pickle?" * 10)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate, "truncated"),
        (_flip_body, "checksum"),
        (_flip_header, "checksum"),
        (_not_a_snapshot, "not an index snapshot"),
    ],
    ids=["truncated", "bit-flip-body", "bit-flip-header", "foreign-file"],
)
def test_a_damaged_snapshot_is_rebuilt_with_a_log_line(
    store: Path,
    damage: Callable[[Path], None],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = _fresh_hits(store)
    (snap,) = _snapshots(store)
    damage(snap)
    with caplog.at_level(logging.WARNING, "langchain_tdai_recall"), _open(store) as memory:
        assert _hits(memory) == expected
    assert "ignoring the index snapshot" in caplog.text
    assert reason in caplog.text
    # closing replaced it with a good one
    with caplog.at_level(logging.INFO, "langchain_tdai_recall"), _open(store) as memory:
        caplog.clear()
        assert _hits(memory) == expected
    assert "restored" in caplog.text


def test_a_snapshot_ahead_of_the_store_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store restored from a backup: the snapshot describes writes the store no longer has."""
    path = tmp_path / "store"
    with _open(path) as memory:
        _fill(memory, 300)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup)
    with _open(path) as memory:
        memory.add_memories(_records(60, seed=9), user_id=USER, show_progress=False)
        memory.delete_memory("m5", user_id=USER)
        memory.flush()
        _hits(memory)
    (snap,) = _snapshots(path)
    shutil.rmtree(backup / INDEX_CACHE_DIRNAME, ignore_errors=True)
    (backup / INDEX_CACHE_DIRNAME).mkdir()
    shutil.copy(snap, backup / INDEX_CACHE_DIRNAME / snap.name)
    expected = _fresh_hits(backup)
    with caplog.at_level(logging.WARNING, "langchain_tdai_recall"), _open(backup) as memory:
        assert _hits(memory) == expected
    assert "ahead of the store" in caplog.text


def test_a_snapshot_of_another_embedder_or_tokenizer_is_rebuilt(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = _fresh_hits(store)
    (snap,) = _snapshots(store)
    with caplog.at_level(logging.WARNING, "langchain_tdai_recall"):
        with TdaiMemory.open(store, embeddings=HashEmbeddings(dims=48)) as memory:
            memory.flush()  # another embedder: re-embeds, and must not use the old vectors
            other = _hits(memory)
        assert "another store, scope, tokenizer or embedder" in caplog.text
        assert other != expected
        with TdaiMemory.open(store, embeddings=None) as memory:
            caplog.clear()
            memory.search_memories("coffee", user_id=USER)
        assert "another store, scope, tokenizer or embedder" in caplog.text
    assert snap.exists()


def test_a_snapshot_of_another_store_fails_the_row_count_check(
    tmp_path: Path, store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "other"
    with _open(other) as memory:  # same scope id, more writes (a higher generation), other rows
        for start in range(0, 300, 10):
            memory.add_memories(_records(300)[start : start + 10], user_id=USER)
        memory.flush()
    (cache := other / INDEX_CACHE_DIRNAME).mkdir(exist_ok=True)
    (snap,) = _snapshots(store)
    shutil.copy(snap, cache / snap.name)
    expected = _fresh_hits(other)
    with caplog.at_level(logging.WARNING, "langchain_tdai_recall"), _open(other) as memory:
        assert _hits(memory) == expected
    assert "rows where the store has" in caplog.text


def test_index_cache_off_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with _open(path, index_cache=None) as memory:
        _fill(memory, 200)
        _hits(memory)
    assert not (path / INDEX_CACHE_DIRNAME).exists()


def test_small_scopes_are_not_snapshotted(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with _open(path) as memory:
        _fill(memory, 30)
        _hits(memory)
    assert _snapshots(path) == []


def test_keyword_state_round_trip_after_random_edits() -> None:
    tokenizer = get_tokenizer("bigram")
    rng = random.Random(3)
    index = KeywordIndex(tokenizer.identity)
    docs: dict[int, str] = {}
    for step in range(2000):
        doc_id = rng.randrange(300)
        if rng.random() < 0.35 and docs:
            gone = rng.sample(sorted(docs), min(len(docs), rng.randint(1, 5)))
            index.remove(gone)
            for d in gone:
                docs.pop(d)
            continue
        text = phrase(rng, 1, 6)
        docs[doc_id] = text
        if step % 3:
            index.add(doc_id, tokenizer.document_tokens(text), doc_id)
        else:
            index.add_many([doc_id], [tokenizer.document_tokens(text)], [doc_id])
    fresh = KeywordIndex(tokenizer.identity)
    ids = sorted(docs)
    fresh.add_many(ids, [tokenizer.document_tokens(docs[i]) for i in ids], ids)
    restored = KeywordIndex.from_state(index.export_state())
    assert len(restored) == len(fresh) == len(docs)
    for q in [*QUERIES, "coffee", "Paris dog cat"]:
        query = tokenizer.query(q)
        want = fresh.search(query, limit=20)
        for got in (index.search(query, limit=20), restored.search(query, limit=20)):
            assert got.ids.tolist() == want.ids.tolist()
            assert np.allclose(got.bm25, want.bm25, rtol=1e-6)
            assert got.coverage.tolist() == want.coverage.tolist()
            assert got.scope_coverage == want.scope_coverage


def test_snapshots_can_be_saved_without_closing(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with _open(path) as memory:
        _fill(memory, 200)
        _hits(memory)
        assert memory._store.save_index_snapshots() == 1
        assert len(_snapshots(path)) == 1
        assert memory._store.save_index_snapshots() == 0  # unchanged since
        memory.add_memory("one more", user_id=USER)
        _hits(memory)
        assert memory._store.save_index_snapshots() == 1


def test_preload_writes_the_snapshot_so_a_killed_process_still_leaves_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    with _open(path, index_cache=None) as memory:  # rows only, no snapshot
        _fill(memory, 200)
    assert _snapshots(path) == []
    memory = _open(path)
    memory.preload(user_id=USER)
    assert len(_snapshots(path)) == 1  # written by preload, before any close()
    expected = _hits(memory)
    # the process "dies": no close(), so nothing more is written; the next one restores
    with caplog.at_level(logging.INFO, "langchain_tdai_recall"), _open(path) as again:
        assert _hits(again) == expected
    assert "restored" in caplog.text
    memory.close()


def test_a_slow_restore_does_not_hold_up_other_scopes(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = threading.Event()
    original = _snapshot.SnapshotCache.restore

    def slow(self: _snapshot.SnapshotCache, index: object, source: object) -> bool:
        if getattr(index, "scope_id", None) == 1:
            entered.set()
            release.wait(10)
        return original(self, index, source)  # type: ignore[arg-type]

    monkeypatch.setattr(_snapshot.SnapshotCache, "restore", slow)
    with _open(store) as memory:
        memory.add_memory("another user's note about tea", user_id="other")
        first = threading.Thread(target=lambda: memory.search_memories("coffee", user_id=USER))
        first.start()
        assert entered.wait(10)
        started = time.monotonic()
        hits = memory.search_memories("tea", user_id="other")
        assert time.monotonic() - started < 5  # not behind the restore of scope 1
        assert [h.content for h in hits] == ["another user's note about tea"]
        assert first.is_alive()
        release.set()
        first.join(10)
        assert not first.is_alive()
