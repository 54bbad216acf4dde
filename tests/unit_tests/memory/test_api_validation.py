"""Issue 8 #8 and #13: every public call validates its input and checks the store's state.

Bad input raises `ConfigError` naming the field, the value and the fix, before anything is
written; text that cannot be stored as UTF-8 (lone surrogates) is kept with U+FFFD; after
`close()` every call raises `StoreClosedError`; URLs are refused instead of becoming folders.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import (
    ConfigError,
    ScopeError,
    StoreClosedError,
    StoreError,
    TdaiMemory,
)
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope

# -- lone surrogates ----------------------------------------------------------------------------


def test_lone_surrogates_are_kept_as_replacement_characters(memory: TdaiMemory) -> None:
    rec = memory.add_memory("likes \ud83d tea", scene_name="drinks \udc00", user_id="u")
    assert rec.content == "likes \ufffd tea" and rec.scene_name == "drinks \ufffd"
    stored = memory.get_memory(rec.id, user_id="u")
    assert stored is not None and stored.content == "likes \ufffd tea"
    kept = memory.record_messages(
        [{"role": "user", "content": "half an emoji \ud83d here"}],
        session_key="s\udc00",
        user_id="u",
    )
    assert kept == 1
    hit = memory.search_conversations("half an emoji", user_id="u")[0]
    assert hit.content == "half an emoji \ufffd here" and hit.session_key == "s\ufffd"
    memory.set_persona("persona \ud800", user_id="u")
    assert memory.get_persona(user_id="u") == "persona \ufffd"
    memory.upsert_scene("trip \ud800", summary="sum \ud800", body="body \ud800", user_id="u")
    block = memory.read_scene(memory.list_scenes(user_id="u")[0].name, user_id="u")
    assert block is not None and block.body == "body \ufffd"
    assert memory.search_memories("tea \ud83d", user_id="u")[0].id == rec.id
    result = memory.recall("tea \ud83d please", user_id="u")
    assert result is not None


def test_lone_surrogates_in_ids_are_refused_not_merged(memory: TdaiMemory) -> None:
    with pytest.raises(ScopeError, match="user_id"):
        memory.add_memory("x", user_id="alice\ud800")
    with pytest.raises(ConfigError, match="id"):
        memory.add_memory("x", id="m\udfff", user_id="u")


# -- shapes and types ---------------------------------------------------------------------------


@pytest.mark.parametrize("records", [None, 42, "one memory", {"content": "x"}])
def test_add_memories_needs_a_list_of_records(memory: TdaiMemory, records: object) -> None:
    with pytest.raises(ConfigError, match="records must be a list"):
        memory.add_memories(records, user_id="u")  # type: ignore[arg-type]


def test_add_memories_names_the_bad_record(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match=r"record 1: a memory must be a MemoryRecord or a dict"):
        memory.add_memories([{"content": "fine"}, None], user_id="u")  # type: ignore[list-item]
    assert memory.list_memories(user_id="u") == []


@pytest.mark.parametrize("messages", [None, 7, "hello", {"role": "user", "content": "x"}, [3]])
def test_record_messages_needs_a_list_of_messages(memory: TdaiMemory, messages: object) -> None:
    with pytest.raises(ConfigError, match="messages must be"):
        memory.record_messages(messages, session_key="s", user_id="u")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 10**20}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": "3"}, "offset"),
        ({"offset": 2**64}, "offset"),
    ],
)
def test_list_memories_validates_limit_and_offset(
    memory: TdaiMemory, kwargs: dict[str, Any], field: str
) -> None:
    memory.add_memory("x", user_id="u")
    with pytest.raises(ConfigError, match=field):
        memory.list_memories(user_id="u", **kwargs)


@pytest.mark.parametrize("limit", [10**20, "5", 0, None, True])
def test_search_limits_are_validated(memory: TdaiMemory, limit: object) -> None:
    for search in (memory.search_memories, memory.search_conversations):
        with pytest.raises(ConfigError, match="limit"):
            search("anything", limit=limit, user_id="u")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1e20, -5, float("nan"), float("inf"), "yesterday", True])
def test_message_times_are_validated(memory: TdaiMemory, value: object) -> None:
    with pytest.raises(ConfigError, match="recorded_at"):
        memory.record_messages(
            [{"role": "user", "content": "hi", "recorded_at": value}], session_key="s", user_id="u"
        )


def test_message_times_accept_iso_text_epoch_ms_and_datetimes(memory: TdaiMemory) -> None:
    moment = dt.datetime(2025, 5, 1, 8, 0, tzinfo=dt.UTC)
    memory.record_messages(
        [
            {
                "id": "a",
                "role": "user",
                "content": "alpha words",
                "recorded_at": "2025-05-01T08:00:00Z",
            },
            {"id": "b", "role": "user", "content": "beta words", "timestamp": 1746086400000},
            {"id": "c", "role": "user", "content": "gamma words", "recorded_at": moment},
        ],
        session_key="s",
        user_id="u",
    )
    got = {h.id: h.recorded_at for h in memory.search_conversations("words", limit=5, user_id="u")}
    assert got == {
        "a": "2025-05-01T08:00:00Z",
        "b": "2025-05-01T08:00:00.000Z",
        "c": "2025-05-01T08:00:00+00:00",
    }


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"activity_start_time": "2025-05-03", "activity_end_time": "2025-05-01"},
            "activity_start_time '2025-05-03' is after activity_end_time '2025-05-01'",
        ),
        (
            {
                "activity_start_time": "2025-05-01T12:00:00+00:00",
                "activity_end_time": "2025-05-01T10:00:00+00:00",
            },
            "is after",
        ),
        ({"timestamp": "13/45/2025"}, "timestamp"),
        ({"activity_end_time": 1714550400}, "activity_end_time"),
    ],
)
def test_activity_times_are_validated(
    memory: TdaiMemory, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        memory.add_memory("event", user_id="u", **kwargs)
    assert memory.list_memories(user_id="u") == []


def test_activity_on_one_day_may_start_at_a_time_and_end_that_day(memory: TdaiMemory) -> None:
    rec = memory.add_memory(
        "talk", activity_start_time="2025-05-01T10:00", activity_end_time="2025-05-01", user_id="u"
    )
    assert rec.activity_end_time == "2025-05-01"


@pytest.mark.parametrize("created_at", ["garbage", "2025-13-01", [2025, 5, 1], float("nan")])
def test_garbage_creation_times_are_refused(memory: TdaiMemory, created_at: object) -> None:
    with pytest.raises(ConfigError, match="created_at"):
        memory.add_memories([{"content": "x", "created_at": created_at}], user_id="u")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.get_memory(123, user_id="u"),
        lambda m: m.delete_memory(None, user_id="u"),
        lambda m: m.read_scene(5, user_id="u"),
        lambda m: m.delete_scene(["a"], user_id="u"),
        lambda m: m.search_memories(42, user_id="u"),
        lambda m: m.search_memories("x", scene=3, user_id="u"),
        lambda m: m.search_conversations("x", session_key=1, user_id="u"),
        lambda m: m.upsert_scene("s", summary="x", body="y", heat=-1, user_id="u"),
        lambda m: m.upsert_scene("s", summary="x", body="y", heat=10**20, user_id="u"),
        lambda m: m.record_messages([], session_key=None, user_id="u"),
        lambda m: m.add_memories([], show_progress="yes", user_id="u"),
        lambda m: m.recall("x", session_key=3, user_id="u"),
        lambda m: m.import_upstream(123, user_id="u"),
        lambda m: m.close(timeout=-1),
    ],
)
def test_wrong_argument_types_raise_config_error(
    memory: TdaiMemory, call: Callable[[TdaiMemory], object]
) -> None:
    with pytest.raises(ConfigError):
        call(memory)


# -- open() -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [123, b"/tmp/x", 4.5, ["dir"]])
def test_open_refuses_a_path_that_is_not_a_path(path: object) -> None:
    with pytest.raises(ConfigError, match="path"):
        TdaiMemory.open(path, embeddings=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["", "   "])
def test_open_refuses_an_empty_path_instead_of_using_the_current_directory(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="None for an in-memory store"):
        TdaiMemory.open(path, embeddings=None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["sqlite:///tmp/x.db", "https://example.com/memory"])
def test_urls_are_refused_instead_of_becoming_local_folders(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="postgresql://"):
        TdaiMemory.open(url, embeddings=None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls_open_the_database_not_a_local_folder(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL URL is a database: an unreachable one fails with its password hidden."""
    monkeypatch.chdir(tmp_path)
    url = f"{scheme}://tdai:s3cret@/memory?host={tmp_path / 'no-server'}"
    with pytest.raises(StoreError) as info:
        TdaiMemory.open(url, embeddings=None, config={"store": {"timeout_ms": 500}})
    message = str(info.value)
    assert "s3cret" not in message
    assert "PostgreSQL" in message and "tdai@" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"read_only": "yes"}, "read_only"),
        ({"close_timeout": -1}, "close_timeout"),
        ({"close_timeout": float("inf")}, "close_timeout"),
        ({"show_progress": 1}, "show_progress"),
    ],
)
def test_open_validates_its_options(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        TdaiMemory.open(None, embeddings=None, **kwargs)


def test_read_only_needs_a_directory() -> None:
    with pytest.raises(ConfigError, match="read_only"):
        TdaiMemory.open(None, embeddings=None, read_only=True)


# -- lifecycle ----------------------------------------------------------------------------------

_SYNC_CALLS: list[tuple[str, Callable[[TdaiMemory], object]]] = [
    ("set_persona", lambda m: m.set_persona("late", user_id="u")),
    ("get_persona", lambda m: m.get_persona(user_id="u")),
    ("add_memory", lambda m: m.add_memory("late", user_id="u")),
    ("add_memories", lambda m: m.add_memories([{"content": "late"}], user_id="u")),
    ("get_memory", lambda m: m.get_memory("a", user_id="u")),
    ("delete_memory", lambda m: m.delete_memory("a", user_id="u")),
    ("list_memories", lambda m: m.list_memories(user_id="u")),
    (
        "record_messages",
        lambda m: m.record_messages([{"role": "user", "content": "x"}], session_key="s"),
    ),
    ("upsert_scene", lambda m: m.upsert_scene("s", summary="x", body="y", user_id="u")),
    ("list_scenes", lambda m: m.list_scenes(user_id="u")),
    ("read_scene", lambda m: m.read_scene("s", user_id="u")),
    ("delete_scene", lambda m: m.delete_scene("s", user_id="u")),
    ("recall", lambda m: m.recall("anything at all", user_id="u")),
    ("search_memories", lambda m: m.search_memories("x", user_id="u")),
    ("search_conversations", lambda m: m.search_conversations("x", user_id="u")),
    ("stats", lambda m: m.stats()),
    ("scoped stats", lambda m: m.stats(user_id="u")),
    ("preload", lambda m: m.preload(user_id="u")),
    ("reindex", lambda m: m.reindex()),
    ("flush", lambda m: m.flush()),
    ("scope", lambda m: m.scope("u")),
    ("middleware", lambda m: m.middleware()),
    ("tools", lambda m: m.tools()),
    ("as_runnable", lambda m: m.as_runnable()),
    ("import_upstream", lambda m: m.import_upstream(os.devnull, user_id="u")),
]


@pytest.mark.parametrize(("name", "call"), _SYNC_CALLS, ids=[n for n, _ in _SYNC_CALLS])
def test_every_call_after_close_raises_store_closed_error(
    store_kind: str, tmp_path: Path, name: str, call: Callable[[TdaiMemory], object]
) -> None:
    path = None if store_kind == "memory" else tmp_path / "store"
    mem = TdaiMemory.open(path, embeddings=HashEmbeddings(32))
    mem.set_persona("before", user_id="u")
    mem.close()
    with pytest.raises(StoreClosedError, match="closed"):
        call(mem)
    if path is not None:
        with TdaiMemory.open(path, embeddings=None) as again:
            assert again.get_persona(user_id="u") == "before"
            assert again.list_memories(user_id="u") == []


_ASYNC_CALLS: list[tuple[str, Callable[[TdaiMemory], Any]]] = [
    ("aset_persona", lambda m: m.aset_persona("late", user_id="u")),
    ("aadd_memory", lambda m: m.aadd_memory("late", user_id="u")),
    ("aadd_memories", lambda m: m.aadd_memories(None, user_id="u")),
    ("arecall", lambda m: m.arecall("anything", user_id="u")),
    ("asearch_memories", lambda m: m.asearch_memories("x", user_id="u")),
    ("arecord_messages", lambda m: m.arecord_messages(None, session_key="s")),
    ("astats", lambda m: m.astats()),
    ("aflush", lambda m: m.aflush()),
]


@pytest.mark.parametrize(("name", "call"), _ASYNC_CALLS, ids=[n for n, _ in _ASYNC_CALLS])
async def test_async_calls_after_close_raise_store_closed_error(
    name: str, call: Callable[[TdaiMemory], Any]
) -> None:
    mem = TdaiMemory.open(None, embeddings=None)
    await mem.aclose()
    assert mem.closed
    with pytest.raises(StoreClosedError):
        await call(mem)


def test_capture_after_close_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    mem = TdaiMemory.open(None, embeddings=None)
    mem.close()
    mem._capture_turn([{"role": "user", "content": "x"}], scope=Scope("u"), session_key="s")
    assert any("after close()" in r.getMessage() for r in caplog.records)
