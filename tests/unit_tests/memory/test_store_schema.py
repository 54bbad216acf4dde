"""Stores written by the previous schema open, migrate, and have their vectors renewed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores.local._schema import DB_FILENAME
from langchain_tdai_recall.stores.local._schema import MIGRATIONS as _MIGRATIONS
from langchain_tdai_recall.testing import HashEmbeddings


def _schema_one_store(path: Path) -> None:
    """A store as the first schema wrote it: one memory with an old embedder's vector."""
    path.mkdir()
    conn = sqlite3.connect(path / DB_FILENAME, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(f"BEGIN; {_MIGRATIONS[0]}; PRAGMA user_version=1; COMMIT;")
    conn.execute("INSERT INTO scopes (user_id, agent_id, generation) VALUES ('u', '', 1)")
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    conn.execute(
        "INSERT INTO memories (scope_id, id, content, type, created_at, updated_at, generation, "
        "embedder, vector) VALUES (1, 'm1', 'old memory about sailing', 'persona', "
        "'2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z', 1, 'old-embedder', ?)",
        (vector.tobytes(),),
    )
    conn.close()


def test_a_schema_one_store_is_migrated_and_reembedded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _schema_one_store(store)
    with TdaiMemory.open(store, embeddings=None, read_only=True) as reader:
        assert [m.id for m in reader.list_memories(user_id="u")] == ["m1"]  # read as it is
    with TdaiMemory.open(store, embeddings=HashEmbeddings(32)) as mem:
        assert mem.flush(timeout=30)
        assert mem.stats().pending_vectors == 0 and mem.stats().dimensions == 32
        hits = mem.search_memories("sailing memory", user_id="u")
        assert [h.id for h in hits] == ["m1"] and hits[0].embedding_score is not None
    conn = sqlite3.connect(store / DB_FILENAME)
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert version == len(_MIGRATIONS)
    assert {"memories_unembedded", "messages_unembedded"} <= indexes


def test_messages_of_an_older_schema_get_their_context_and_a_new_vector(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _schema_one_store(store)
    conn = sqlite3.connect(store / DB_FILENAME, isolation_level=None)
    vector = (np.ones(32, dtype=np.float32) / np.sqrt(32)).tobytes()
    for rowid, (role, text) in enumerate(
        [("user", "Which hotel in Kyoto?"), ("assistant", "The Ryokan Sakura.")], start=1
    ):
        conn.execute(
            "INSERT INTO messages (scope_id, id, role, content, session_key, recorded_at, "
            "generation, embedder, vector) VALUES (1, ?, ?, ?, 'trip', '2025-01-01T00:00:00Z', "
            "1, 'hash-embeddings-v1-32', ?)",
            (f"m{rowid}", role, text, vector),
        )
    conn.close()
    with TdaiMemory.open(store, embeddings=None, read_only=True) as reader:  # no migration
        assert [h.content for h in reader.search_conversations("Ryokan", user_id="u")] == [
            "The Ryokan Sakura."
        ]
    with TdaiMemory.open(store, embeddings=HashEmbeddings(32)) as mem:
        assert mem.flush(timeout=30)
        hits = mem.search_conversations("hotel Kyoto", user_id="u", min_score=0.2)
        assert "The Ryokan Sakura." in {h.content for h in hits}
    conn = sqlite3.connect(store / DB_FILENAME)
    rows = conn.execute(
        "SELECT id, context, vector IS NOT NULL FROM messages ORDER BY id"
    ).fetchall()
    conn.close()
    # the answer's context is the question before it; its old vector was replaced
    assert rows == [("m1", "", 1), ("m2", "Which hotel in Kyoto?", 1)]
