"""Reading and importing a data directory of the original TencentDB Agent Memory plugin.

Import tests use the shared `memory` fixture, so they run on the in-memory and the directory
store alike.

The fixture directory `tests/fixtures/upstream/data` holds the JSONL, Markdown and JSON files in
the documented layout (UPSTREAM.md §4); `vectors.sql` builds the SQLite database beside them.
Each test works on a fresh copy, so variants (no database, no scene index, ...) are made by
deleting or editing files.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from langchain_tdai_recall import ImportUpstreamError, TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.upstream import read_upstream, strip_scene_navigation

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"

M_NAME = "m_1746086400000_a1b2c3d4"  # persona, Chinese, with source_message_ids
M_TRIP = "m_1746086405000_b2c3d4e5"  # episodic with activity times
M_COFFEE = "m_1746086410000_c3d4e5f6"  # superseded: JSONL only
M_DARK = "m_1746090000000_d4e5f6a7"  # legacy type "preference"
M_RULE = "m_1746090005000_e5f6a7b8"  # legacy type "instruct" in JSONL, no priority
M_SUMMARY = "m_1746090010000_f6a7b8c9"  # unsupported type
M_BLOG = "m_1746090015000_a7b8c9d0"  # no activity times; extraction time only
M_TEA = "m_1746172800000_b8c9d0e1"  # the merge that superseded M_COFFEE
M_BLANK = "m_1746172805000_c9d0e1f2"  # database row with blank content

DB_IDS = [M_NAME, M_TRIP, M_DARK, M_RULE, M_BLOG, M_TEA]


def build_upstream(root: Path, *, database: bool = True) -> Path:
    """Copy the fixture files to `root` and build `vectors.db` from `vectors.sql`."""
    shutil.copytree(FIXTURE / "data", root)
    if database:
        with closing(sqlite3.connect(root / "vectors.db")) as conn:
            conn.executescript((FIXTURE / "vectors.sql").read_text(encoding="utf-8"))
            conn.commit()
    return root


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return build_upstream(tmp_path / "memory-tdai")


# ---------------------------------------------------------------------------------------------
# Reading


def test_database_is_the_source_of_truth(upstream: Path) -> None:
    data = read_upstream(upstream)
    assert data.used_database
    assert [m.id for m in data.memories] == DB_IDS
    by_id = {m.id: m for m in data.memories}

    assert by_id[M_NAME].type == "persona"
    assert by_id[M_NAME].priority == 80
    assert by_id[M_NAME].content == "用户叫王小明，30岁，是一名在杭州工作的软件工程师。"
    assert by_id[M_NAME].scene_name == "我（AI）在和软件工程师闲聊日常"
    assert by_id[M_NAME].session_key == "agent:main:sess-a"
    # source_message_ids are not in SQLite: they come from the JSONL twin.
    assert by_id[M_NAME].source_message_ids == (
        "msg_1746086390000_0a1b2c",
        "msg_1746086395000_3d4e5f",
    )
    assert by_id[M_DARK].type == "persona"  # legacy "preference"
    assert by_id[M_RULE].type == "instruction"

    trip = by_id[M_TRIP]
    assert (trip.activity_start_time, trip.activity_end_time) == ("2025-05-20", "2025-05-27")

    # The extraction time (timestamp_str / timestamps[0]) is never an activity time (G-F3).
    blog = by_id[M_BLOG]
    assert blog.activity_start_time is None
    assert blog.activity_end_time is None
    assert blog.created_at == "2025-05-01T09:00:15.000Z"

    assert data.superseded == 1
    assert M_COFFEE not in by_id
    assert any(M_COFFEE in s and "superseded" in s for s in data.skipped)
    assert any(M_SUMMARY in s and "unsupported type 'summary'" in s for s in data.skipped)
    assert any(M_BLANK in s and "empty content" in s for s in data.skipped)
    assert any("records/2025-05-01.jsonl:4" in s and "malformed" in s for s in data.skipped)
    # A record the database skipped for its type is not also called superseded.
    assert not any(M_SUMMARY in s and "superseded" in s for s in data.skipped)


def test_messages_come_from_the_database(upstream: Path) -> None:
    data = read_upstream(upstream)
    assert [m.id for m in data.messages] == [
        "l0_agent:main:sess-a_1746086400000_0_a1a1a1",
        "l0_agent:main:sess-a_1746086400000_1_b2b2b2",
        "l0_agent:main:sess-a_1746172800000_0_f6f6f6",
        "l0_agent:main:sess-b_1746090000000_0_c3c3c3",
        "l0_agent:main:sess-b_1746090000000_1_d4d4d4",
    ]
    first = data.messages[0]
    assert first.role == "user"
    assert first.session_id == "s1"
    assert first.recorded_at == "2025-05-01T07:59:50.000Z"  # from the epoch-ms timestamp
    assert any("e5e5e5" in s and "empty content" in s for s in data.skipped)


def test_without_database_the_jsonl_files_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = build_upstream(tmp_path / "d", database=False)
    with caplog.at_level(logging.WARNING, logger="langchain_tdai_recall.upstream"):
        data = read_upstream(root)
    assert not data.used_database
    ids = {m.id for m in data.memories}
    # Without the database nothing tells the superseded record apart.
    assert ids == {*DB_IDS, M_COFFEE}
    assert data.superseded == 0
    assert "superseded" in caplog.text
    assert {m.id: m.type for m in data.memories}[M_RULE] == "instruction"  # legacy "instruct"
    assert {m.id: m.priority for m in data.memories}[M_RULE] == 50  # missing priority
    trip = next(m for m in data.memories if m.id == M_TRIP)
    assert trip.type == "episodic"  # legacy "episode"
    assert trip.activity_start_time == "2025-05-20"
    blog = next(m for m in data.memories if m.id == M_BLOG)
    assert blog.activity_start_time is None
    assert blog.created_at == "2025-05-01T09:00:15.000Z"

    assert [m.id for m in data.messages] == [
        "msg_1746086390000_0a1b2c",
        "msg_1746086395000_3d4e5f",
        "msg_1746172790000_1c2d3e",
        "msg_1746089990000_7a8b9c",
        "msg_1746089995000_4f5a6b",
    ]
    assert any("missing role" in s for s in data.skipped)
    assert any("malformed" in s for s in data.skipped)
    assert any(M_SUMMARY in s and "unsupported type" in s for s in data.skipped)


def test_persona_loses_its_navigation(upstream: Path) -> None:
    persona = read_upstream(upstream).persona
    assert persona is not None
    assert persona.startswith("# User Narrative Profile")
    assert persona.endswith("- Prefers dark editor themes.")
    assert "Scene Navigation" not in persona
    assert "scene_blocks/" not in persona


def test_scenes_with_meta_headers_and_index(upstream: Path) -> None:
    data = read_upstream(upstream)
    scenes = {s.name: s for s in data.scenes}
    assert set(scenes) == {"coding-habits", "notes", "京都旅行"}
    kyoto = scenes["京都旅行"]
    assert kyoto.heat == 3
    assert kyoto.summary == "五月下旬京都之行：寺庙、庭园与行程安排"
    assert kyoto.body.startswith("## 京都旅行")
    assert "META" not in kyoto.body
    assert kyoto.updated == "2025-05-02T08:05:00.000Z"
    # No META header: all body, summary and heat from the index.
    assert scenes["notes"].heat == 2
    assert scenes["notes"].summary == "Loose notes"
    assert any("old-scene.md" in s and "[DELETED]" in s for s in data.skipped)
    assert any("empty-scene.md" in s and "empty" in s for s in data.skipped)
    assert any("'ghost'" in s and "missing" in s for s in data.skipped)


def test_missing_scene_index(upstream: Path) -> None:
    (upstream / ".metadata" / "scene_index.json").unlink()
    data = read_upstream(upstream)
    scenes = {s.name: s for s in data.scenes}
    assert set(scenes) == {"coding-habits", "notes", "京都旅行"}
    assert scenes["京都旅行"].heat == 3  # from the META header
    assert scenes["notes"].heat == 0
    assert scenes["notes"].summary == ""
    assert not any("ghost" in s for s in data.skipped)


def test_unreadable_scene_index_is_reported(upstream: Path) -> None:
    (upstream / ".metadata" / "scene_index.json").write_text("{not json", encoding="utf-8")
    data = read_upstream(upstream)
    assert len(data.scenes) == 3
    assert any("scene_index.json" in s and "unreadable" in s for s in data.skipped)


@pytest.mark.parametrize(
    "text",
    [
        "# P\n\nbody\n\n---\n## 🗺️ Scene Navigation (Scene Index)\n### Path: scene_blocks/a.md\n",
        "# P\n\nbody\n---\n\n## 🗺 Scene Navigation\n\n### Path: scene_blocks/a.md",
        "# P\n\nbody\n\n## Scene Navigation (Scene Index)\nSummary: x\n",
        "# P\r\n\r\nbody\r\n---\r\n## 🗺️ Scene Navigation (Scene Index)\r\n",
        "# P\n\nbody\n\n---\n### 场景导航\n- a\n",
        "# P\n\nbody\n\n",
    ],
)
def test_strip_scene_navigation_variants(text: str) -> None:
    assert strip_scene_navigation(text) == "# P\n\nbody"


def test_strip_scene_navigation_keeps_other_rules() -> None:
    text = "# P\n\n---\n\n## Hobbies\n- chess\n\n---\n## 🗺️ Scene Navigation\nx"
    assert strip_scene_navigation(text) == "# P\n\n---\n\n## Hobbies\n- chess"


def test_records_without_id_get_a_stable_id(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "records").mkdir(parents=True)
    line = {"content": "用户喜欢爬山。", "type": "persona", "timestamps": ["2025-01-01T00:00:00Z"]}
    (root / "records" / "2025-01-01.jsonl").write_text(
        json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    first = read_upstream(root).memories
    second = read_upstream(root).memories
    assert len(first) == 1
    assert first[0].id == second[0].id
    assert first[0].id.startswith("m_import_")


def test_invalid_activity_time_is_dropped_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "records").mkdir(parents=True)
    line = {
        "id": "m_1",
        "content": "用户下周要搬家。",
        "type": "episodic",
        "priority": "250",
        "metadata": {"activity_start_time": "下周", "activity_end_time": "2025-06-01 18:00"},
    }
    (root / "records" / "a.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    data = read_upstream(root)
    (mem,) = data.memories
    assert mem.activity_start_time is None
    assert mem.activity_end_time == "2025-06-01T18:00:00"
    assert mem.priority == 100  # clamped
    assert any("activity_start_time '下周'" in s for s in data.skipped)


def test_database_without_l1_table_falls_back_to_jsonl(tmp_path: Path) -> None:
    root = build_upstream(tmp_path / "d", database=False)
    with closing(sqlite3.connect(root / "vectors.db")) as conn:
        conn.execute("CREATE TABLE embedding_meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.commit()
    data = read_upstream(root)
    assert not data.used_database
    assert M_COFFEE in {m.id for m in data.memories}
    assert len(data.messages) == 5


@pytest.mark.parametrize("kind", ["missing", "file", "unrelated", "corrupt-db"])
def test_unreadable_directories_raise(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "file":
        target.write_text("hi", encoding="utf-8")
    elif kind == "unrelated":
        target.mkdir()
        (target / "notes.txt").write_text("hi", encoding="utf-8")
    elif kind == "corrupt-db":
        target.mkdir()
        (target / "vectors.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(ImportUpstreamError) as err:
        read_upstream(target)
    assert str(tmp_path) in str(err.value)


# ---------------------------------------------------------------------------------------------
# Importing


def test_import_writes_every_layer(upstream: Path, memory: TdaiMemory) -> None:
    report = memory.import_upstream(upstream)
    assert report.source == str(upstream)
    assert report.memories == 6
    assert report.messages == 5
    assert report.scenes == 3
    assert report.persona is True
    assert report.unchanged == 0
    assert any("superseded" in s for s in report.skipped)

    assert [r.id for r in memory.list_memories()] == DB_IDS
    trip = memory.get_memory(M_TRIP)
    assert trip is not None
    assert trip.type == "episodic"
    assert (trip.activity_start_time, trip.activity_end_time) == ("2025-05-20", "2025-05-27")
    assert trip.scene_name == "我（AI）在和旅行者规划京都行程"
    blog = memory.get_memory(M_BLOG)
    assert blog is not None
    assert blog.activity_start_time is None
    assert blog.timestamp is None  # the extraction time is not an event time
    assert blog.created_at == "2025-05-01T09:00:15.000Z"
    name = memory.get_memory(M_NAME)
    assert name is not None
    assert name.priority == 80
    assert name.source_message_ids == ("msg_1746086390000_0a1b2c", "msg_1746086395000_3d4e5f")
    assert memory.get_memory(M_COFFEE) is None

    persona = memory.get_persona()
    assert persona is not None
    assert "Scene Navigation" not in persona
    scenes = {s.name: s for s in memory.list_scenes()}
    assert scenes["京都旅行"].heat == 3
    assert scenes["coding-habits"].heat == 5
    block = memory.read_scene("京都旅行")
    assert block is not None
    assert "清水寺" in block.body


def test_imported_memories_are_recalled(upstream: Path, memory: TdaiMemory) -> None:
    memory.import_upstream(upstream)
    result = memory.recall("我想去京都看寺庙，有什么建议？")
    assert result is not None
    assert result.prepend_context is not None
    assert "京都" in result.prepend_context
    assert result.append_system_context is not None
    assert "王小明" in result.append_system_context  # the persona
    assert "京都旅行" in result.append_system_context  # the scene navigation
    hits = memory.search_memories("咖啡")
    assert all(h.id != M_COFFEE for h in hits)
    messages = memory.search_conversations("dark theme VS Code")
    assert messages
    assert messages[0].session_key == "agent:main:sess-b"


def test_reimport_changes_nothing(upstream: Path, memory: TdaiMemory) -> None:
    first = memory.import_upstream(upstream)
    before = memory.stats()
    second = memory.import_upstream(upstream)
    after = memory.stats()
    assert (second.memories, second.messages, second.scenes, second.persona) == (0, 0, 0, False)
    assert second.unchanged == first.memories + first.messages + first.scenes + 1
    assert second.skipped == first.skipped
    assert (after.memories, after.messages, after.scenes) == (
        before.memories,
        before.messages,
        before.scenes,
    )


def test_reimport_updates_a_changed_record(upstream: Path, memory: TdaiMemory) -> None:
    memory.import_upstream(upstream)
    with closing(sqlite3.connect(upstream / "vectors.db")) as conn:
        conn.execute(
            "UPDATE l1_records SET content = ? WHERE record_id = ?",
            ("用户上周把个人博客从 Hexo 迁移到了 Hugo，并换了新主题。", M_BLOG),
        )
        conn.commit()
    report = memory.import_upstream(upstream)
    assert report.memories == 1
    blog = memory.get_memory(M_BLOG)
    assert blog is not None
    assert blog.content.endswith("并换了新主题。")
    assert len(memory.list_memories()) == 6


def test_import_into_a_scope(upstream: Path, memory: TdaiMemory) -> None:
    memory.import_upstream(upstream, user_id="alice", agent_id="travel")
    assert len(memory.list_memories(user_id="alice", agent_id="travel")) == 6
    assert memory.get_persona(user_id="alice", agent_id="travel") is not None
    assert memory.list_memories() == []
    assert memory.list_memories(user_id="alice") == []
    assert memory.get_persona() is None


def test_import_without_database(tmp_path: Path, memory: TdaiMemory) -> None:
    root = build_upstream(tmp_path / "d", database=False)
    report = memory.import_upstream(root)
    assert report.memories == 7
    assert report.messages == 5
    assert memory.get_memory(M_COFFEE) is not None
    assert memory.import_upstream(root).unchanged == 7 + 5 + 3 + 1


def test_durable_store_reimport(upstream: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with TdaiMemory.open(store, embeddings=HashEmbeddings(dims=64)) as mem:
        mem.import_upstream(upstream)
    with TdaiMemory.open(store, embeddings=HashEmbeddings(dims=64)) as mem:
        report = mem.import_upstream(upstream)
        assert (report.memories, report.messages, report.scenes, report.persona) == (
            0,
            0,
            0,
            False,
        )
        assert len(mem.list_memories()) == 6


def test_keyword_only_import(upstream: Path, keyword_memory: TdaiMemory) -> None:
    report = keyword_memory.import_upstream(upstream)
    assert report.memories == 6
    result = keyword_memory.recall("京都 寺庙")
    assert result is not None
    assert result.strategy == "keyword"
    assert result.prepend_context is not None


def test_progress_bars_when_asked(
    upstream: Path, memory: TdaiMemory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory.import_upstream(upstream, show_progress=True)
    assert "messages" in capsys.readouterr().err


async def test_async_import(upstream: Path, memory: TdaiMemory) -> None:
    report = await memory.aimport_upstream(upstream)
    assert report.memories == 6


def test_the_importer_stands_below_the_facade() -> None:
    """The upstream package writes through `ImportTarget`, never importing `memory`.

    `memory.py` imports the importer; an import back (even under `TYPE_CHECKING`) made a circle.
    """
    import ast

    import langchain_tdai_recall.upstream as package

    root = Path(package.__file__).parent
    imported: set[str] = set()
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert not {m for m in imported if m.startswith("langchain_tdai_recall.memory")}
