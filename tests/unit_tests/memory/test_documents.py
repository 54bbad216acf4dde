"""Issue 8 #11 (storage): persona and scene files are never served stale nor half-written.

The stable-context cache must see an edit that keeps a file's size and modification time (a
coarse file clock), interrupted writes must not leave temporary files behind, and the store and
the upstream importer parse scene headers with one parser.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.stores.documents import parse_scene_file, render_scene_file
from langchain_tdai_recall.stores.local import _documents
from langchain_tdai_recall.text.scene_header import split_scene_header
from langchain_tdai_recall.types import SceneBlock, SceneInfo
from langchain_tdai_recall.upstream import read_upstream


def _system(mem: TdaiMemory) -> str:
    result = mem.recall("hello there", user_id="u")
    assert result is not None
    return result.append_system_context or ""


def test_same_size_edit_with_an_unchanged_modification_time_is_seen(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.set_persona("likes AAAA", user_id="u")
        persona = next(tmp_path.glob("scopes/u/@shared/persona.md"))
        old = persona.stat()
        # pretend the file was written long ago, so the cache trusts its stat signature
        os.utime(persona, ns=(old.st_atime_ns - 10**12, old.st_mtime_ns - 10**12))
        assert "likes AAAA" in _system(mem)
        assert "likes AAAA" in _system(mem)
        stamp = persona.stat()
        persona.write_text("likes BBBB", encoding="utf-8")  # an editor, in place, same size
        os.utime(persona, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # a coarse clock
        assert persona.stat().st_size == stamp.st_size
        assert persona.stat().st_mtime_ns == stamp.st_mtime_ns
        assert "likes BBBB" in _system(mem)


def test_rewrites_within_one_clock_tick_are_seen(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.upsert_scene("trip", summary="plan one", body="b", heat=5, user_id="u")
        scene = next(tmp_path.glob("scopes/u/@shared/scenes/trip.md"))
        tick = scene.stat().st_mtime_ns
        assert "plan one" in _system(mem)
        mem.upsert_scene("trip", summary="plan two", body="b", heat=5, user_id="u")
        os.utime(scene, ns=(tick, tick))
        assert "plan two" in _system(mem)


def test_an_unchanged_scope_is_served_from_the_cache_without_reading_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_documents, "_RACY_NS", 10_000_000)  # a fine clock: 10 ms ticks
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.set_persona("steady", user_id="u")
        time.sleep(0.05)
        assert "steady" in _system(mem)
        reads: list[str] = []
        original = Path.read_bytes

        def counting(self: Path) -> bytes:
            reads.append(self.name)
            return original(self)

        monkeypatch.setattr(Path, "read_bytes", counting)
        assert "steady" in _system(mem)
        assert reads == []


def test_temporary_files_of_interrupted_writes_are_removed_and_never_read(
    tmp_path: Path,
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.upsert_scene("kept", summary="real scene", body="b", user_id="u")
        mem.set_persona("real persona", user_id="u")
    scenes = next(tmp_path.glob("scopes/u/@shared/scenes"))
    block = SceneBlock(
        info=SceneInfo(name="ghost", summary="half written", heat=9, created="", updated=""),
        body="partial",
    )
    leftovers = [
        scenes / ".tmp-k2j4h5.md",  # an older version's name
        scenes / ".tmp-999999999-abc.md",  # a process that no longer exists
        scenes.parent / ".tmp-999999998-def.md",
    ]
    for path in leftovers:
        path.write_text(render_scene_file(block, "ghost"), encoding="utf-8")
    live = scenes / f".tmp-{os.getpid()}-inflight.md"  # a write in progress right now
    live.write_text("in flight", encoding="utf-8")
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        assert [s.name for s in mem.list_scenes(user_id="u")] == ["kept"]
        assert mem.get_persona(user_id="u") == "real persona"
        assert "half written" not in _system(mem)
    assert not any(p.exists() for p in leftovers)
    assert live.exists()


def test_a_failed_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.upsert_scene("trip", summary="v1", body="b", user_id="u")

        def interrupted(src: str, dst: str) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(_documents.os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            mem.upsert_scene("trip", summary="v2", body="b", user_id="u")
        monkeypatch.undo()
        assert mem.list_scenes(user_id="u")[0].summary == "v1"
    assert not list(tmp_path.rglob(".tmp-*"))


def test_scene_files_round_trip_byte_exact() -> None:
    for body in ("# Plan\nday 1\n", "\nstarts with a blank line", "", "no newline", "a\r\nb"):
        info = SceneInfo(name="n", summary="one\nline", heat=3, created="c", updated="u")
        block, title = parse_scene_file(
            "n", render_scene_file(SceneBlock(info=info, body=body), "T")
        )
        assert block.body == body and title == "T" and block.info.summary == "one line"


def test_one_scene_header_parser_for_the_store_and_the_importer(tmp_path: Path) -> None:
    text = (
        "\r\n  -----META-START-----  \r\ncreated: 2025-05-01T09:00:00Z\r\nsummary: Kyoto in May\r\n"
        "heat: 4\r\n-----META-END-----\r\n\r\n# Kyoto\r\nday one\r\n"
    )
    fields, body, found = split_scene_header(text)
    assert found and fields["summary"] == "Kyoto in May" and body == "# Kyoto\r\nday one\r\n"
    block, _ = parse_scene_file("kyoto", text)
    assert block.info.heat == 4 and block.info.summary == "Kyoto in May"
    data_dir = tmp_path / "upstream"
    (data_dir / "scene_blocks").mkdir(parents=True)
    (data_dir / "scene_blocks" / "kyoto.md").write_text(text, encoding="utf-8", newline="")
    (scene,) = read_upstream(data_dir).scenes
    assert (scene.summary, scene.heat, scene.body) == ("Kyoto in May", 4, "# Kyoto\nday one")
    assert (
        split_scene_header("text before\n-----META-START-----\nheat: 1\n-----META-END-----\n")[2]
        is False
    )
    assert split_scene_header("-----META-START-----\nheat: 1\nno end marker")[2] is False


@pytest.mark.parametrize("user", ["a" * 256, "😀" * 30, "用户" * 60], ids=["ascii", "emoji", "cjk"])
def test_an_id_too_long_for_a_folder_name_gets_a_hashed_folder(tmp_path: Path, user: str) -> None:
    # ext4 and most file systems refuse names over 255 bytes; one such user must not break the
    # store-wide calls of everyone (stats, the CLI) nor the recall of that user
    agent = "🤖" * 30
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.add_memory("likes green tea", user_id="bob")
        mem.add_memory("likes green tea", user_id=user)
        info = mem.upsert_scene("trip", summary="to Kyoto", body="May", user_id=user)
        mem.upsert_scene("work", summary="office", body="desk", user_id=user, agent_id=agent)
        mem.add_memory("works from home", user_id=user, agent_id=agent)
        mem.set_persona("a tea drinker", user_id=user)
        scopes = {(s.user_id, s.agent_id) for s in mem.stats().scopes}
        assert {("bob", None), (user, None), (user, agent)} <= scopes
        assert mem.read_scene(info.name, user_id=user) is not None
        result = mem.recall("green tea", user_id=user)
        assert result is not None and result.error is None
        assert "a tea drinker" in (result.append_system_context or "")
    for folder in (tmp_path / "scopes").rglob("*"):
        assert len(folder.name.encode("utf-8")) <= 255
    assert main(["--store", str(tmp_path), "stats"]) == 0  # the CLI's store-wide view too
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:  # found again after a reopen
        assert mem.get_persona(user_id=user) == "a tea drinker"
        assert [s.name for s in mem.list_scenes(user_id=user, agent_id=agent)] == ["work"]
        assert {(s.user_id, s.agent_id) for s in mem.stats().scopes} == scopes


def test_short_ids_keep_their_readable_folder_names(tmp_path: Path) -> None:
    # stores written before long ids were hashed must find their folders unchanged
    longest = "b" * 255
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        mem.set_persona("p", user_id="ali ce")
        mem.set_persona("p", user_id=longest)
    assert (tmp_path / "scopes" / "ali%20ce" / "@shared" / "persona.md").is_file()
    assert (tmp_path / "scopes" / longest / "@shared" / "persona.md").is_file()


@pytest.mark.parametrize("name", ["😀" * 80, "旅" * 80, "é" * 200], ids=["emoji", "cjk", "accents"])
def test_a_long_scene_name_fits_in_a_file_name(tmp_path: Path, name: str) -> None:
    with TdaiMemory.open(tmp_path, embeddings=None) as mem:
        first = mem.upsert_scene(name, summary="s", body="b", user_id="u")
        second = mem.upsert_scene(name + "x", summary="s", body="b", user_id="u")
        assert len(first.name.encode("utf-8")) <= 200
        assert mem.read_scene(first.name, user_id="u") is not None
        assert mem.read_scene(second.name, user_id="u") is not None
        assert len(mem.list_scenes(user_id="u")) == 2
