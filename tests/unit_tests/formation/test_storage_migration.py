"""Migration 4 (memory formation's tables) on a store made before it, and read-only opens."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores.local._schema import DB_FILENAME
from langchain_tdai_recall.testing import HashEmbeddings

_FORMATION_TABLES = (
    "memory_versions",
    "formation_sessions",
    "formation_scopes",
    "formation_scene_queue",
    "formation_leases",
)


def _as_schema_3(path: Path) -> None:
    """Turn a store back into what main's schema 3 wrote (before memory formation)."""
    conn = sqlite3.connect(path / DB_FILENAME)
    try:
        # schema 5 (issue 16): memory metadata and expiry
        conn.execute("DROP INDEX memories_expiry")
        conn.execute("ALTER TABLE memories DROP COLUMN expires_at")
        conn.execute("ALTER TABLE memories DROP COLUMN metadata")
        conn.execute("DROP INDEX memories_scope_content_key")
        conn.execute("ALTER TABLE memories DROP COLUMN content_key")
        for table in _FORMATION_TABLES:
            conn.execute(f"DROP TABLE {table}")
        conn.execute("PRAGMA user_version=3")
        conn.commit()
    finally:
        conn.close()


def test_an_older_store_is_fingerprinted_when_it_migrates(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as memory:
        old = memory.add_memory("The user is vegetarian.", type="persona")
    _as_schema_3(path)
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64), read_only=True) as reader:
        (version,) = reader.history(old.id)  # no history table yet: just the current row
        assert version.current and version.record.content == "The user is vegetarian."
    with TdaiMemory.open(path, embeddings=HashEmbeddings(dims=64)) as memory:
        again = memory.add_memory("the user is VEGETARIAN", type="persona")
        assert again.id == old.id  # rows stored before the migration got their fingerprint
        memory.add_memory("The user is vegan.", id=old.id, type="persona")
        assert [v.record.content for v in memory.history(old.id)] == [
            "The user is vegetarian.",
            "The user is vegan.",
        ]
    conn = sqlite3.connect(path / DB_FILENAME)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (5,)
    finally:
        conn.close()
