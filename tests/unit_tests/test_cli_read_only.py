"""Reads never rewrite a store: the CLI's read commands on a store another embedder built.

The store remembers its embedder through its rows (each vector is tagged with the identity of
the embedder that made it). The read commands open the store read-only and search with that
embedder when it can be rebuilt offline, else by keyword only; nothing is re-embedded and no
byte of the database changes. Re-embedding happens with `tdai-recall reindex`, or when an
application opens the store for writing with another embedder.

About the SQLite companion files: a read-only connection to a WAL database needs the WAL's
shared-memory index, so when no process has the store open SQLite creates `memory.sqlite3-shm`
and an empty `memory.sqlite3-wal` next to the database (and, being read-only, cannot remove them
on close). They hold no data: the tests below require every file that existed before to be
byte-identical afterwards, and allow only those two companions to appear, with an empty WAL.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from contextlib import closing
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.embeddings import embedder_from_identity, embedder_identity
from langchain_tdai_recall.stores._index import snapshot as _snapshot
from langchain_tdai_recall.stores.local._schema import DB_FILENAME
from langchain_tdai_recall.stores.local.store import MemoryStore
from langchain_tdai_recall.testing import HashEmbeddings

APP_IDENTITY = "acme.embeddings.HostedEmbeddings:acme-embed-2"
COMPANIONS = {f"{DB_FILENAME}-shm", f"{DB_FILENAME}-wal"}


class HostedEmbeddings(HashEmbeddings):
    """Stands in for an application's hosted embedder: nothing offline can rebuild it."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__(dims=48)
        self.identity = APP_IDENTITY
        self.document_calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return super().embed_documents(texts)


class CountingHash(HashEmbeddings):
    """The test hash embedder, counting the calls that embed stored rows."""

    __test__ = False

    def __init__(self, dims: int) -> None:
        super().__init__(dims=dims)
        self.document_calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return super().embed_documents(texts)


def _fill(memory: TdaiMemory) -> None:
    memory.add_memories(
        [{"id": f"m{i}", "content": f"Trip number {i} went to Kyoto by train."} for i in range(12)],
        user_id="alice",
    )
    memory.add_memory("Alice is allergic to peanuts.", type="persona", id="nuts", user_id="alice")
    memory.record_messages(
        [
            {"role": "user", "content": "I booked the train to Kyoto."},
            {"role": "assistant", "content": "Have a good trip to Kyoto!"},
        ],
        session_key="s1",
        user_id="alice",
    )
    memory.set_persona("# Alice\n- allergic to peanuts", user_id="alice")
    memory.upsert_scene("travel", summary="Trips", body="Alice travels by train.", user_id="alice")
    assert memory.flush(timeout=30)
    memory.search_memories("Kyoto train", user_id="alice")  # builds the index: a snapshot


def _build(path: Path, embeddings: HashEmbeddings) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_snapshot, "SNAPSHOT_MIN_ROWS", 5)  # small enough to snapshot this store
        with TdaiMemory.open(path, embeddings=embeddings) as memory:
            _fill(memory)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stores built by an application: with a hosted embedder, and with the hash embedder."""
    root = tmp_path_factory.mktemp("templates")
    _build(root / "hosted", HostedEmbeddings())
    _build(root / "hash32", HashEmbeddings(dims=32))
    return {"hosted": root / "hosted", "hash32": root / "hash32"}


@pytest.fixture(params=["hosted", "hash32"])
def built(request: pytest.FixtureRequest, templates: dict[str, Path], tmp_path: Path) -> Path:
    """A fresh copy of a store built with an embedder other than the CLI's default."""
    path = tmp_path / "store"
    shutil.copytree(templates[str(request.param)], path)
    return path


def file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root` (database, WAL, documents, index snapshots)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def assert_unchanged(root: Path, before: dict[str, str]) -> None:
    after = file_hashes(root)
    changed = sorted(name for name, digest in before.items() if after.get(name) != digest)
    assert not changed, f"a read changed {changed}"
    added = set(after) - set(before)
    assert added <= COMPANIONS, f"a read created {sorted(added - COMPANIONS)}"
    wal = root / f"{DB_FILENAME}-wal"
    if f"{DB_FILENAME}-wal" in added:
        assert wal.stat().st_size == 0, "a read wrote to the WAL"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


READ_COMMANDS = {
    "search": ["search", "Kyoto train"],
    "search-messages": ["search", "Kyoto", "--messages"],
    "recall": ["recall", "Where did I go by train?"],
    "list": ["list"],
    "get": ["get", "nuts"],
    "stats": ["stats"],
    "stats-scope": ["stats", "--user", "alice"],
    "export": ["export", "--persona", "--scenes"],
}


def test_the_template_stores_hold_every_kind_of_file(
    templates: dict[str, Path], tmp_path: Path
) -> None:
    for name, template in templates.items():
        names = set(file_hashes(template))
        assert DB_FILENAME in names and not names & COMPANIONS  # closed cleanly
        assert any(n.startswith("index-cache/") for n in names), names  # a snapshot
        assert any(n.endswith("persona.md") for n in names), names
        assert any(n.endswith("travel.md") for n in names), names
        path = tmp_path / name  # opening the template itself would add the companion files
        shutil.copytree(template, path)
        with closing(MemoryStore(path, read_only=True)) as store:
            recorded = store.recorded_embedder()
        assert recorded is not None and recorded.vectors == 15  # 13 memories + 2 messages


@pytest.mark.parametrize("command", sorted(READ_COMMANDS))
@pytest.mark.parametrize("json_output", [False, True])
def test_a_read_command_changes_no_byte_of_a_store_built_with_another_embedder(
    capsys: pytest.CaptureFixture[str], built: Path, command: str, json_output: bool
) -> None:
    before = file_hashes(built)
    extra = ["--json"] if json_output else []
    code, out, err = run(
        capsys, "--store", str(built), "--user", "alice", *READ_COMMANDS[command], *extra
    )
    assert code == 0, err
    assert out
    assert_unchanged(built, before)


@pytest.mark.parametrize("command", ["search", "recall", "list", "stats"])
def test_an_explicit_embedder_on_a_read_still_changes_nothing(
    capsys: pytest.CaptureFixture[str], built: Path, command: str
) -> None:
    before = file_hashes(built)
    argv = ["--store", str(built), "--user", "alice", "--embeddings", "hash"]
    code, _, err = run(capsys, *argv, *READ_COMMANDS[command])
    assert code == 0, err
    assert_unchanged(built, before)
    if command in ("search", "recall"):  # the vectors are another embedder's: say so
        assert err.count("\n") == 1 and "reindex --embeddings hash" in err


@pytest.mark.parametrize("command", ["search", "recall", "list", "stats", "export"])
def test_a_read_while_the_application_writes_changes_neither_database_nor_wal(
    capsys: pytest.CaptureFixture[str], built: Path, command: str
) -> None:
    """With the store open in an application, the WAL holds its recent writes: a read must
    neither checkpoint it into the database nor add to it. (The `-shm` file is SQLite's
    shared-memory index, where every reader takes its locks; it is not compared here.)"""
    with closing(MemoryStore(built, read_only=True)) as store:
        recorded = store.recorded_embedder()
    assert recorded is not None
    app_embedder = embedder_from_identity(recorded.identity) or HostedEmbeddings()
    with TdaiMemory.open(built, embeddings=app_embedder) as app:
        app.add_memory("Alice moved to Osaka.", id="osaka", user_id="alice")
        assert app.flush(timeout=30)
        before = {k: v for k, v in file_hashes(built).items() if not k.endswith("-shm")}
        assert (built / f"{DB_FILENAME}-wal").stat().st_size > 0
        code, out, err = run(
            capsys, "--store", str(built), "--user", "alice", *READ_COMMANDS[command]
        )
        assert code == 0, err
        after = {k: v for k, v in file_hashes(built).items() if not k.endswith("-shm")}
        assert after == before
        if command == "list":
            assert "osaka" in out  # the read saw the application's latest write


def test_an_export_to_a_file_changes_nothing_in_the_store(
    capsys: pytest.CaptureFixture[str], built: Path, tmp_path: Path
) -> None:
    before = file_hashes(built)
    target = tmp_path / "backup.jsonl"
    code, _, err = run(capsys, "--store", str(built), "export", "-o", str(target))
    assert code == 0, err
    assert target.read_text(encoding="utf-8").count("\n") == 14  # header + 13 memories
    assert_unchanged(built, before)


def test_a_store_of_a_hosted_embedder_is_searched_by_keyword_with_one_note(
    capsys: pytest.CaptureFixture[str], templates: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    shutil.copytree(templates["hosted"], path)
    argv = ["--store", str(path), "--user", "alice"]
    code, out, err = run(capsys, *argv, "search", "Kyoto train", "--json")
    assert code == 0
    hits = json.loads(out)
    assert hits and all(h["embedding_score"] is None for h in hits)
    assert err.count("\n") == 1
    assert APP_IDENTITY in err and "TdaiMemory.open" in err and "keyword" in err
    code, _, err = run(capsys, *argv, "-q", "search", "Kyoto train")
    assert code == 0 and err == ""  # -q: errors only
    code, out, err = run(capsys, *argv, "stats")
    assert code == 0 and APP_IDENTITY in out and "keyword-only" in out
    code, _, err = run(capsys, *argv, "list")
    assert code == 0 and err == ""  # nothing to fall back from


def test_a_store_of_an_offline_embedder_is_searched_with_it(
    capsys: pytest.CaptureFixture[str], templates: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    shutil.copytree(templates["hash32"], path)
    code, out, err = run(
        capsys, "--store", str(path), "--user", "alice", "search", "Kyoto", "--json"
    )
    assert code == 0 and err == ""
    hits = json.loads(out)
    assert hits and any(h["embedding_score"] is not None for h in hits)  # the vector leg ran
    code, out, _ = run(capsys, "--store", str(path), "stats", "--json")
    stats = json.loads(out)
    assert stats["embedder"] == "hash-embeddings-v1-32"
    assert stats["dimensions"] == 32 and stats["pending_vectors"] == 0


def test_writing_commands_keep_the_store_embedder(
    capsys: pytest.CaptureFixture[str], built: Path
) -> None:
    """`add` and `delete` without --embeddings write with the store's embedder, or none."""
    with closing(MemoryStore(built, read_only=True)) as store:
        recorded = store.recorded_embedder()
    assert recorded is not None
    argv = ["--store", str(built), "--user", "alice"]
    assert run(capsys, *argv, "add", "Alice likes green tea.", "--id", "tea")[0] == 0
    assert run(capsys, *argv, "delete", "m0", "-y")[0] == 0
    with closing(MemoryStore(built, read_only=True)) as store:
        embedders = store.vector_embedders()
    offline = recorded.identity != APP_IDENTITY
    assert [e.identity for e in embedders] == [recorded.identity]  # nothing re-embedded
    assert embedders[0].vectors == recorded.vectors - 1 + (1 if offline else 0)


def test_reindex_is_the_explicit_way_to_re_embed(
    capsys: pytest.CaptureFixture[str], templates: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    shutil.copytree(templates["hosted"], path)
    argv = ["--store", str(path)]
    code, _, err = run(capsys, *argv, "reindex")
    assert code == 1 and err.count("\n") == 1
    assert APP_IDENTITY in err and "--embeddings" in err
    code, out, err = run(
        capsys, *argv, "reindex", "--embeddings", "hash", "--json", "--no-progress"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report == {"embedded": 15, "pending": 0, "embedder": "hash-embeddings-v1-64"}
    with closing(MemoryStore(path, read_only=True)) as store:
        assert [(e.identity, e.vectors) for e in store.vector_embedders()] == [
            ("hash-embeddings-v1-64", 15)
        ]
    code, out, _ = run(capsys, *argv, "reindex", "--json", "--no-progress")  # its own: no work
    assert code == 0 and json.loads(out)["embedded"] == 0


# -- the Python API -----------------------------------------------------------------------------


def test_a_read_only_open_with_another_embedder_never_re_embeds(built: Path) -> None:
    before = file_hashes(built)
    other = CountingHash(dims=16)
    with TdaiMemory.open(built, embeddings=other, read_only=True) as memory:
        assert memory.search_memories("Kyoto train", user_id="alice")
        assert memory.recall("Where did I go by train?", user_id="alice") is not None
        assert memory.stats().memories == 13
        assert memory.flush(timeout=5)
        assert memory.reindex() == 0
    assert other.document_calls == 0
    assert_unchanged(built, before)


def test_opening_for_writing_with_another_embedder_still_re_embeds(built: Path) -> None:
    other = CountingHash(dims=16)
    with TdaiMemory.open(built, embeddings=other) as memory:
        assert memory.flush(timeout=30)
    assert other.document_calls > 0
    with closing(MemoryStore(built, read_only=True)) as store:
        assert [(e.identity, e.vectors) for e in store.vector_embedders()] == [
            ("hash-embeddings-v1-16", 15)
        ]


# -- rebuilding an embedder from its identity ----------------------------------------------------


def test_embedder_from_identity() -> None:
    rebuilt = embedder_from_identity("hash-embeddings-v1-32", 32)
    assert isinstance(rebuilt, HashEmbeddings) and rebuilt.dims == 32
    assert embedder_from_identity("hash-embeddings-v1-32", 64) is None  # another dimension
    assert embedder_from_identity(APP_IDENTITY, 48) is None
    assert embedder_from_identity("langchain_openai.embeddings.base.OpenAIEmbeddings:m") is None
    assert embedder_from_identity("hash-embeddings-v1-0") is None
    assert embedder_from_identity("hash-embeddings-v1-1") is None  # HashEmbeddings needs 2+
    assert embedder_from_identity("tdai-default/unknown-model/x==1/calib-v1") is None


def test_embedder_from_identity_rebuilds_the_bundled_embedder() -> None:
    from langchain_tdai_recall.embeddings import DefaultEmbeddings

    for calibrate in (True, False):
        identity = DefaultEmbeddings(calibrate=calibrate).identity
        rebuilt = embedder_from_identity(identity, 384)
        assert isinstance(rebuilt, DefaultEmbeddings) and not rebuilt.loaded
        assert embedder_identity(rebuilt) == identity
    version = DefaultEmbeddings().identity.split("==")[1].split("/")[0]
    older = DefaultEmbeddings().identity.replace(f"=={version}/", "==0.0.1/")
    assert embedder_from_identity(older) is None  # another package version: other vectors
