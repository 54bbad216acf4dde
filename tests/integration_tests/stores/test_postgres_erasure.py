"""`forget` on PostgreSQL beyond the conformance part (a real server: see `postgres_server`).

The conformance part `testing/conformance/erasure.py` runs on this backend through
`test_conformance_postgres.py` (every surface read back after `forget`, in this process and in a
new one, other handles, formation runs in another handle). Here: the snapshot files of a
PostgreSQL store's local index cache, which only exist with an explicit `index_cache`, and how
the erased rows leave the server's files (`reclaim`).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import snapshot
from langchain_tdai_recall.stores.postgres import PostgresMemoryStore
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope
from tests.integration_tests.conftest import POSTGRES_URL_ENV


def test_forget_deletes_the_scope_snapshots_of_the_index_cache(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "SNAPSHOT_MIN_ROWS", 2)
    cache = tmp_path / "cache"
    config = {"store": {"index_cache": str(cache)}}
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(), config=config) as memory:
        for user in ("u", "v"):
            memory.add_memories([{"content": f"secret {user} {i}"} for i in range(3)], user_id=user)
            memory.record_messages(
                [{"role": "user", "content": f"secret {user} {i}"} for i in range(3)],
                session_key="s",
                user_id=user,
            )
        assert memory.flush(timeout=60)
        memory.preload(user_id="u")
        memory.preload(user_id="v")
        u_id = memory._store.scope_id(Scope("u"))
        assert len(list(cache.glob(f"*-{u_id}.tdxs"))) == 2

        report = memory.forget(user_id="u")

        assert report.index_snapshots == 2 and report.memories == 3 and report.messages == 3
        assert list(cache.glob(f"*-{u_id}.tdxs")) == []
        assert len(list(cache.glob("*.tdxs"))) == 2  # the other user's
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(), config=config) as memory:
        assert memory.search_memories("secret", user_id="u") == []
        assert len(memory.search_memories("secret", user_id="v")) == 3


# -- the erased rows leave the server's files (issue 26 item 5) ----------------------------------

ERASED_TABLES = (
    "tdai_memories",
    "tdai_messages",
    "tdai_memory_versions",
    "tdai_personas",
    "tdai_scenes",
    "tdai_formation_sessions",
    "tdai_formation_scopes",
    "tdai_formation_scene_queue",
    "tdai_formation_leases",
)
SECRET = "ZebraQuokkaSecret"


def _fill(memory: TdaiMemory) -> None:
    for user in ("alice", "bob"):
        memory.add_memories(
            [{"content": f"{user} {SECRET} memory {i} " + "pad " * (i * 300)} for i in range(6)],
            user_id=user,
        )
        memory.add_memory(f"{user} {SECRET} first", id="x", user_id=user)
        memory.add_memory(f"{user} {SECRET} second", id="x", user_id=user)  # a version
        memory.record_messages(
            [{"role": "user", "content": f"{user} says {SECRET}"}], session_key="s", user_id=user
        )
        memory.set_persona(f"{user} persona {SECRET}", user_id=user)
        memory.upsert_scene("trip", summary="s", body=f"{user} {SECRET}", user_id=user)
    assert memory.flush(timeout=60)


def _stats(conn: psycopg.Connection[Any]) -> dict[str, tuple[object, int, int]]:
    """Per table: last manual vacuum, dead rows, file node."""
    rows = conn.execute(
        "SELECT s.relname, s.last_vacuum, s.n_dead_tup, c.relfilenode "
        "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
        "WHERE s.relname = ANY(%s)",
        (list(ERASED_TABLES),),
    ).fetchall()
    return {str(r[0]): (r[1], int(r[2]), int(r[3])) for r in rows}


def _copies_on_disk(conn: psycopg.Connection[Any], needle: str) -> int | None:
    """Copies of `needle` in the files of the erased tables (heap, TOAST, indexes), or `None`
    when the server's data directory is not on this machine."""
    conn.execute("CHECKPOINT")  # every page written to its file
    root = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
    if not root.is_dir():
        return None
    files = conn.execute(
        "SELECT pg_relation_filepath(c.oid) FROM pg_class c WHERE c.oid IN ("
        "SELECT oid FROM pg_class WHERE relname = ANY(%s) "
        "UNION SELECT reltoastrelid FROM pg_class WHERE relname = ANY(%s) "
        "UNION SELECT indexrelid FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
        "WHERE t.relname = ANY(%s))",
        (list(ERASED_TABLES),) * 3,
    ).fetchall()
    found = 0
    for (name,) in files:
        if name is None:
            continue
        for part in root.glob(f"{name}*"):  # the main fork and its 1 GiB segments
            found += part.read_bytes().count(needle.encode())
    return found


def test_forget_vacuums_the_tables_it_erased_from(postgres_url: str) -> None:
    # issue 26 item 5: the erased rows stayed in the tables' files until autovacuum came by
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings()) as memory:
        _fill(memory)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            before = _stats(conn)
        report = memory.forget(user_id="alice")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            after = _stats(conn)
        for table in ERASED_TABLES:
            assert before[table][0] is None and after[table][0] is not None, table
            assert after[table][1] == 0, f"{table}: {after[table][1]} dead rows left"
        assert report.reclaim == "vacuum" and report.reclaimed == ERASED_TABLES
        assert memory.get_persona(user_id="bob") == f"bob persona {SECRET}"
        assert len(memory.list_memories(user_id="bob")) == 7


def test_forget_with_reclaim_full_leaves_no_copy_in_the_table_files(postgres_url: str) -> None:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings()) as memory:
        _fill(memory)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            before = _stats(conn)
            copies = _copies_on_disk(conn, f"alice {SECRET}")
        report = memory.forget(user_id="alice", all_agents=True, reclaim="full")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            after = _stats(conn)
            left = _copies_on_disk(conn, f"alice {SECRET}")
            kept = _copies_on_disk(conn, f"bob {SECRET}")
        assert report.reclaimed == ERASED_TABLES
        for table in ERASED_TABLES:  # each table was rewritten into a new file
            assert after[table][2] != before[table][2], table
        if os.environ.get(POSTGRES_URL_ENV) is None:  # the throw-away server: files readable
            assert copies is not None and copies > 0
            assert left == 0 and kept is not None and kept > 0
        assert memory.list_memories(user_id="alice") == []
        assert len(memory.list_memories(user_id="bob")) == 7


def test_forget_with_reclaim_none_leaves_it_to_autovacuum(postgres_url: str) -> None:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings()) as memory:
        _fill(memory)
        report = memory.forget(user_id="alice", reclaim="none")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            after = _stats(conn)
    assert report.reclaimed == () and report.memories == 7
    assert all(after[t][0] is None for t in ERASED_TABLES)


def test_a_role_that_may_not_vacuum_still_erases_and_is_told(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"app_{uuid.uuid4().hex[:8]}"
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings()) as memory:
        _fill(memory)  # the tables belong to the connecting superuser
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")  # opening checks the schema
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    store = PostgresMemoryStore(conninfo.make_conninfo(postgres_url, user=role))
    try:
        with (
            caplog.at_level(logging.WARNING),
            TdaiMemory.open(store, embeddings=HashEmbeddings()) as memory,
        ):
            report = memory.forget(user_id="alice")
            assert report.memories == 7 and memory.list_memories(user_id="alice") == []
        assert report.reclaimed == ()
        assert "did not vacuum tdai_memories" in caplog.text
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # and its privileges
            conn.execute(f"DROP ROLE {role}")
