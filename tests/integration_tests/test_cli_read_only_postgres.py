"""Reads never rewrite a PostgreSQL store: the CLI's read commands on a real server.

The same promise on the local store, and the helpers shared with it, are in
`tests/unit_tests/test_cli_read_only.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import snapshot as _snapshot
from langchain_tdai_recall.testing import HashEmbeddings
from tests.unit_tests.test_cli_read_only import (
    APP_IDENTITY,
    READ_COMMANDS,
    CountingHash,
    HostedEmbeddings,
    _fill,
    run,
)


def table_checksums(url: str) -> dict[str, str]:
    """md5 of every table of the store's schema, over its rows in a stable order."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            str(row[0])
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            )
        ]
        sums: dict[str, str] = {}
        for table in tables:
            query = sql.SQL(
                "SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')), "
                "count(*) FROM {} AS t"
            ).format(sql.Identifier(table))
            row = conn.execute(query).fetchone()
            assert row is not None
            sums[table] = f"{row[0]}:{row[1]}"
    return sums


@pytest.mark.parametrize("app", ["hosted", "hash32"])
def test_a_read_command_rewrites_no_row_of_a_postgres_store(
    capsys: pytest.CaptureFixture[str], postgres_url: str, app: str
) -> None:
    embedder = HostedEmbeddings() if app == "hosted" else HashEmbeddings(dims=32)
    with TdaiMemory.open(postgres_url, embeddings=embedder) as memory:
        _fill(memory)
    before = table_checksums(postgres_url)
    assert any(n.endswith("memories") and not v.endswith(":0") for n, v in before.items())
    for command in sorted(READ_COMMANDS):
        code, out, err = run(
            capsys, "--store", postgres_url, "--user", "alice", *READ_COMMANDS[command]
        )
        assert code == 0, (command, err)
        assert out
        assert table_checksums(postgres_url) == before, f"'{command}' rewrote rows"
        if command == "search":
            assert (APP_IDENTITY in err) == (app == "hosted")  # the keyword-only note
    other = CountingHash(dims=16)
    with TdaiMemory.open(postgres_url, embeddings=other, read_only=True) as memory:
        assert memory.search_memories("Kyoto train", user_id="alice")
        assert memory.flush(timeout=5)
    assert other.document_calls == 0
    assert table_checksums(postgres_url) == before
    with TdaiMemory.open(postgres_url, embeddings=other) as memory:  # writing: re-embeds
        assert memory.flush(timeout=30)
    assert other.document_calls > 0
    assert table_checksums(postgres_url) != before


def test_a_read_only_postgres_store_never_writes_index_snapshots(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_snapshot, "SNAPSHOT_MIN_ROWS", 5)
    cache = tmp_path / "index-cache"
    config = {"store": {"index_cache": str(cache)}}
    embedder = HashEmbeddings(dims=32)
    with TdaiMemory.open(postgres_url, embeddings=embedder, config=config) as memory:
        _fill(memory)
    assert list(cache.iterdir())  # a writer saves them
    shutil.rmtree(cache)
    with TdaiMemory.open(postgres_url, embeddings=embedder, config=config, read_only=True) as m:
        assert m.search_memories("Kyoto train", user_id="alice")
    assert not cache.exists() or not list(cache.iterdir())
