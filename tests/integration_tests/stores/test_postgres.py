"""PostgreSQL backend behaviour beyond the conformance suite: failures, secrets, concurrency."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.errors import ConfigError, StoreError, StoreWriteError
from langchain_tdai_recall.stores.postgres._connection import redact
from langchain_tdai_recall.stores.postgres._schema import SCHEMA_LOCK
from langchain_tdai_recall.stores.postgres.store import PostgresMemoryStore
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.testing.postgres import TemporaryPostgres
from langchain_tdai_recall.types import Scope

SECRET = "hunter2-s3cret"


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    user, _, host = netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user or 'postgres'}:{password}@{host}"))


@pytest.fixture
def own_server() -> Iterator[TemporaryPostgres]:
    """A server of this test alone (it is stopped, frozen or restarted)."""
    with TemporaryPostgres() as server:
        yield server


def test_nul_characters_are_stored_as_replacement_characters(postgres_url: str) -> None:
    with TdaiMemory.open(postgres_url, embeddings=None) as memory:
        stored = memory.add_memory("tab\tand nul\x00 inside", id="n", user_id="u")
        assert stored.content == "tab\tand nul\x00 inside"  # the record as given
        got = memory.get_memory("n", user_id="u")
        assert got is not None and got.content == "tab\tand nul\ufffd inside"
        assert memory.record_messages(
            [{"role": "user", "content": "nul\x00 message"}], session_key="s", user_id="u"
        )
        assert [h.content for h in memory.search_conversations("message", user_id="u")] == [
            "nul\ufffd message"
        ]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://app:pw@db.example.com:5433/memory",
            "postgresql://app@db.example.com:5433/memory",
        ),
        ("postgres://app@/memory?host=/run/pg&password=pw", "postgres://app@/memory?host=/run/pg"),
        ("host=db user=app password=pw dbname=memory", "postgresql://app@db/memory"),
        ("postgresql://[::1]:5432/memory?sslmode=require", "postgresql://[::1]:5432/memory"),
    ],
)
def test_redacted_urls_keep_only_user_host_port_and_database(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_credentials_never_appear_in_errors_logs_or_output(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = _with_password(postgres_url, SECRET)
    seen: list[str] = []
    with TdaiMemory.open(url, embeddings=HashEmbeddings(dims=16)) as memory:
        memory.add_memory("The user likes tea.", user_id="u")
        memory.recall("tea", user_id="u")
        seen += [repr(memory), memory.location, str(memory.stats().path)]
    missing = _with_password(postgres_url.replace("/tdai_test_", "/no_such_db_"), SECRET)
    with pytest.raises(StoreError) as info:
        TdaiMemory.open(missing, embeddings=None, config={"store": {"timeout_ms": 1000}})
    seen.append(str(info.value))
    empty = urlunsplit(urlsplit(url)._replace(path="/postgres"))  # no store in it
    with pytest.raises(StoreError) as info:
        PostgresMemoryStore(empty, read_only=True)
    seen.append(str(info.value))
    seen += [record.getMessage() for record in caplog.records]
    assert all(SECRET not in text for text in seen)
    assert "no_such_db_" in seen[3]  # the error names the database


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}@[::1/db",  # an IPv6 host without its closing bracket
        f"postgresql://u:{SECRET}@db/memory?no_such_option=1",  # an unknown parameter
        f"host=db password={SECRET} dbname='unterminated",
    ],
)
def test_a_url_libpq_cannot_parse_never_shows_its_password(
    url: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError, match="cannot be parsed") as info:  # fails before connecting
        if "://" in url:
            TdaiMemory.open(url, embeddings=None, config={"store": {"timeout_ms": 1000}})
        else:  # a libpq connection string is only taken by the backend itself
            PostgresMemoryStore(url, timeout_ms=1000)
    chain: list[BaseException] = []
    error: BaseException | None = info.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    seen = [str(e) for e in chain] + [record.getMessage() for record in caplog.records]
    if "://" in url:  # the command line shows the same error
        assert main(["--store", url, "stats"]) != 0
    out = capsys.readouterr()
    seen += [out.out, out.err]
    assert "cannot be parsed" in out.err or "://" not in url
    assert all(SECRET not in text for text in seen), seen


def test_a_read_only_open_of_an_empty_database_says_what_to_do(postgres_url: str) -> None:
    with pytest.raises(StoreError, match="holds no memory store"):
        TdaiMemory.open(postgres_url, embeddings=None, read_only=True)


def test_invalid_backend_options_name_the_field(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="timeout_ms"):
        PostgresMemoryStore(postgres_url, timeout_ms=5)
    with pytest.raises(ConfigError, match="pool_size"):
        PostgresMemoryStore(postgres_url, pool_size=0)
    store = PostgresMemoryStore(postgres_url)
    with pytest.raises(ConfigError, match="read_only"):
        TdaiMemory.open(store, embeddings=None, read_only=True)
    store.close()
    with pytest.raises(ConfigError, match="closed"):
        TdaiMemory.open(store, embeddings=None)


def test_a_user_who_may_not_enable_pgvector_is_told_to_ask_an_administrator(
    postgres_server: str,
) -> None:
    name = f"tdai_novec_{os.getpid()}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        conninfo = make_conninfo(postgres_server, user=name, dbname=name)
        with pytest.raises(StoreError, match="CREATE EXTENSION vector"):
            PostgresMemoryStore(conninfo)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')


def test_first_opens_racing_on_a_fresh_database_enable_pgvector_once(postgres_url: str) -> None:
    """Issue 23: two application servers opening a fresh database at once both start.

    Another opener holds the schema lock while it creates the extension; the store must wait for
    it instead of running its own CREATE EXTENSION, which would fail on the catalog's unique
    index once the other commits (the check for the extension was outside the lock).
    """
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            PostgresMemoryStore(postgres_url).close()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    with psycopg.connect(postgres_url, autocommit=True) as other:
        assert (
            other.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None
        )
        with other.transaction():
            other.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            other.execute("CREATE EXTENSION vector")
            opener = threading.Thread(target=open_store)
            opener.start()
            deadline = time.monotonic() + 20
            with psycopg.connect(postgres_url, autocommit=True) as watch:
                while time.monotonic() < deadline:  # the opener waits on a lock we hold
                    waiting = watch.execute(
                        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                        "WHERE NOT l.granted AND a.datname = current_database()"
                    ).fetchone()
                    if waiting and waiting[0]:
                        break
                    time.sleep(0.02)
                else:
                    pytest.fail("the opener never waited for the other opener's transaction")
        opener.join(30)
    assert not opener.is_alive()
    assert errors == []
    with TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(16)) as memory:
        memory.add_memory("both servers started", id="m", user_id="u")
        assert memory.get_memory("m", user_id="u") is not None


def test_a_frozen_server_degrades_recall_and_bounds_every_call(
    own_server: TemporaryPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"store": {"timeout_ms": 800}, "recall": {"timeout_ms": 2000}}
    with TdaiMemory.open(own_server.url(), embeddings=None, config=config) as memory:
        memory.add_memory("The user sails on weekends.", id="sail", user_id="u")
        assert [h.id for h in memory.search_memories("sails", user_id="u")] == ["sail"]
        pids = own_server.processes()
        assert len(pids) > 1
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert memory.recall("sailing plans", user_id="u") is None
            assert time.monotonic() - started < 2.5
            assert any("recall" in r.getMessage() for r in caplog.records if r.levelno >= 30)
            for call in (
                lambda: memory.search_memories("sails", user_id="u"),
                lambda: memory.add_memory("The user also rows.", user_id="u"),
                lambda: memory.get_persona(user_id="u"),
            ):
                started = time.monotonic()
                with pytest.raises(StoreError, match="PostgreSQL"):
                    call()
                assert time.monotonic() - started < 3.0
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while True:  # the pool replaces the connections that were cut
            try:
                hits = memory.search_memories("sails", user_id="u")
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert [h.id for h in hits] == ["sail"]
        result = memory.recall("sailing plans", user_id="u")
        assert result is not None and "sails" in (result.prepend_context or "")


def test_a_restarted_server_is_used_again_without_an_error(own_server: TemporaryPostgres) -> None:
    with TdaiMemory.open(own_server.url(), embeddings=None) as memory:
        memory.add_memory("The user grows tomatoes.", id="t", user_id="u")
        assert memory.search_memories("tomatoes", user_id="u")
        own_server.restart()
        # every pooled connection was terminated by the restart: none of them is used
        assert memory.get_memory("t", user_id="u") is not None
        memory.add_memory("The user grows basil.", id="b", user_id="u")
        assert {h.id for h in memory.search_memories("grows", user_id="u")} == {"t", "b"}


def test_a_write_waiting_for_another_writers_lock_gives_up_within_the_timeout(
    postgres_url: str,
) -> None:
    config = {"store": {"timeout_ms": 700}}
    with TdaiMemory.open(postgres_url, embeddings=None, config=config) as memory:
        memory.add_memory("first", user_id="u")
        with psycopg.connect(postgres_url) as other:  # a transaction holding the scope's lock
            other.execute("UPDATE tdai_scopes SET generation = generation WHERE user_id = 'u'")
            started = time.monotonic()
            with pytest.raises(StoreWriteError, match="another writer"):
                memory.add_memory("second", user_id="u")
            assert time.monotonic() - started < 2.0
            other.rollback()
        memory.add_memory("third", user_id="u")
        assert [r.content for r in memory.list_memories(user_id="u")] == ["first", "third"]


def test_concurrent_writers_and_readers_of_one_scope_lose_nothing(postgres_url: str) -> None:
    errors: list[BaseException] = []
    with (
        TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=16)) as a,
        TdaiMemory.open(postgres_url, embeddings=HashEmbeddings(dims=16)) as b,
    ):

        def write(memory: TdaiMemory, worker: int) -> None:
            try:
                for i in range(25):
                    memory.add_memory(
                        f"worker {worker} note {i} about gardening",
                        user_id="c",
                        id=f"w{worker}-{i}",
                    )
                    if i % 5 == 4:
                        memory.delete_memory(f"w{worker}-{i - 1}", user_id="c")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def read(memory: TdaiMemory) -> None:
            try:
                for _ in range(40):
                    memory.search_memories("gardening note", limit=20, user_id="c")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(m, w)) for w, m in enumerate([a, b, a, b])]
        threads += [threading.Thread(target=read, args=(m,)) for m in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        expected = {f"w{w}-{i}" for w in range(4) for i in range(25) if i % 5 != 3}
        for memory in (a, b):
            assert {r.id for r in memory.list_memories(user_id="c")} == expected
            index = memory._store.index(Scope("c"), "l1")
            assert index is not None
            assert {m.id for m in index.meta.values()} == expected


def test_without_the_extra_a_url_names_the_install_command() -> None:
    script = (
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if the postgres extra were not installed\n"
        "from langchain_tdai_recall import TdaiMemory\n"
        "from langchain_tdai_recall.errors import MissingDependencyError\n"
        "try:\n"
        "    TdaiMemory.open('postgresql://app@db.invalid/memory', embeddings=None)\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert 'pip install "langchain-tdai-recall[postgres]"' in done.stdout
