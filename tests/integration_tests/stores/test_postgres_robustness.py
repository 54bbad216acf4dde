"""PostgreSQL named by a libpq key=value string, and lone surrogates kept repaired there."""

from __future__ import annotations

import psycopg
import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.testing import HashEmbeddings


def _key_value(url: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    return " ".join(f"{k}={v}" for k, v in info.items() if v)


def test_a_libpq_string_opens_postgresql(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conninfo = _key_value(postgres_url)
    with TdaiMemory.open(conninfo, embeddings=HashEmbeddings(dims=16)) as memory:
        assert memory.location.startswith("postgresql://")
        memory.add_memory("Alice likes green tea.", user_id="alice")
    assert main(["--store", conninfo, "--user", "alice", "list"]) == 0
    assert "Alice likes green tea." in capsys.readouterr().out


def test_lone_surrogates_never_reach_postgresql(postgres_url: str) -> None:
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=16)) as memory:
        memory.add_memory("tea\ud800", metadata={"a": "\udc00"}, session_key="s\ud800")
        memory.record_messages([{"role": "user", "content": "hi\ud800"}], session_key="k\ud800")
        memory.as_store().put(("memories", "default_user"), "k", {"content": "v\ud800"})
        assert [h.content for h in memory.search_memories("tea\ud800")][:1] == ["tea\ufffd"]
        assert [h.content for h in memory.search_conversations("hi\ud800")] == ["hi\ufffd"]
        assert memory.flush(timeout=30)
        stored = {r.content: r for r in memory.list_memories()}
        assert set(stored) == {"tea\ufffd", "v\ufffd"}
        assert stored["tea\ufffd"].metadata == {"a": "\ufffd"}
