"""Issue 18 #14: no raw exception type escapes a public entry point, whatever the input.

Property-based: arbitrary text (lone surrogates, control and format characters, names too long
for a file system, huge values), ids, scene names and configuration values go to the public
calls of a local store; each call either works or raises one of the package's own errors
(`TdaiRecallError`), never a `UnicodeEncodeError`, `OSError`, `RecursionError`,
`NotImplementedError` or `ValueError` of the layers underneath. The cases the adversarial run
found are pinned by name below the properties.
"""

from __future__ import annotations

import contextlib
import json
import operator
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_tdai_recall import ConfigError, TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.config import TdaiConfig
from langchain_tdai_recall.errors import TdaiRecallError

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHARACTER = st.one_of(
    st.characters(), SURROGATES, st.sampled_from("/\\.:\x00\n\u202e\U000e0041")
)
TEXT = st.one_of(
    st.text(ANY_CHARACTER, max_size=40),
    st.sampled_from(
        ["", " ", "..", "../x", "a" * 256, "a" * 300, "😀" * 30, "😀" * 80, "x" * 5000]
    ),
)
VALUE = st.one_of(
    TEXT, st.none(), st.integers(), st.floats(), st.binary(max_size=8), st.lists(TEXT, max_size=2)
)


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdaiMemory]:
    with TdaiMemory.open(tmp_path_factory.mktemp("hostile"), embeddings=None) as mem:
        mem.add_memory("The user likes green tea.", user_id="u")
        mem.upsert_scene("trip", summary="Kyoto", body="May", user_id="u")
        yield mem


def _only_our_errors(call: Callable[[], object]) -> None:
    with contextlib.suppress(TdaiRecallError):
        call()


def _calls(memory: TdaiMemory, text: Any, user: Any) -> list[Callable[[], object]]:
    return [
        lambda: memory.get_memory(text, user_id="u"),
        lambda: memory.delete_memory(text, user_id="nobody"),
        lambda: memory.history(text, user_id="u"),
        lambda: memory.read_scene(text, user_id="u"),
        lambda: memory.delete_scene(text, user_id="nobody"),
        lambda: memory.get_memory("m", user_id=user),
        lambda: memory.list_scenes(user_id="u", agent_id=user),
        lambda: memory.get_persona(user_id=user),
        lambda: memory.set_persona(text, user_id=user),
        lambda: memory.upsert_scene(text, summary=text, body=text, user_id=user),
        lambda: memory.add_memory(text, user_id=user, scene_name=text),
        lambda: memory.add_memory("x", id=text, user_id="u"),
        lambda: memory.list_memories(user_id=user, type=text),
        lambda: memory.search_memories(text, user_id=user, scene=text),
        lambda: memory.search_conversations(text, user_id=user, session_key=text),
        lambda: memory.record_messages(
            [{"role": "user", "content": text}], session_key=text, user_id=user
        ),
        lambda: memory.recall(text, user_id=user),
        lambda: memory.stats(user_id=user),
        lambda: memory.as_runnable(user_id=user).invoke(text),
    ]


USER = st.one_of(st.sampled_from(["u", "alice"]), TEXT, VALUE)


@SETTINGS
@given(text=st.one_of(TEXT, VALUE), user=USER)
def test_public_calls_raise_only_the_packages_errors(
    memory: TdaiMemory, text: Any, user: Any
) -> None:
    for call in _calls(memory, text, user):
        _only_our_errors(call)
    memory.stats()  # one bad call never breaks the store for everyone


HUGE = st.one_of(
    st.builds(pow, st.just(10), st.just(5000)),  # built, so hypothesis never prints it
    st.builds(operator.mul, st.just("z"), st.just(100_000)),
)
NUMBER = st.one_of(VALUE, HUGE, st.floats(allow_nan=True, allow_infinity=True))


@SETTINGS
@given(value=NUMBER)
def test_bad_options_give_a_short_error_naming_the_field(memory: TdaiMemory, value: Any) -> None:
    calls: list[Callable[[], object]] = [
        lambda: memory.search_memories("tea", limit=value, user_id="u"),
        lambda: memory.search_memories("tea", min_score=value, user_id="u"),
        lambda: memory.search_conversations("tea", limit=value, user_id="u"),
        lambda: memory.list_memories(user_id="u", limit=value, offset=value),
        lambda: memory.add_memory("x", priority=value, user_id="nobody"),
        lambda: memory.add_memory("x", activity_start_time=value, user_id="nobody"),
        lambda: memory.add_memory("x", type=value, user_id="nobody"),
        lambda: memory.upsert_scene("s", summary="s", body="b", heat=value, user_id="nobody"),
        lambda: memory.flush(timeout=value),
    ]
    for call in calls:
        try:
            call()
        except TdaiRecallError as exc:
            assert len(str(exc)) < 2_000


CONFIG_KEYS = st.sampled_from(
    ["recall", "maxResults", "strategy", "timeout_ms", "timezone", "language", "embedding"]
)
CONFIG_VALUE = st.recursive(
    st.one_of(
        TEXT,
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        HUGE,
        st.builds(operator.mul, st.just("Q"), st.just(300)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(CONFIG_KEYS, TEXT), inner, max_size=3),
    ),
    max_leaves=8,
)


@SETTINGS
@given(st.dictionaries(st.one_of(CONFIG_KEYS, TEXT), CONFIG_VALUE, max_size=4))
def test_any_config_dict_gives_a_config_or_a_short_config_error(config: dict[str, Any]) -> None:
    try:
        TdaiConfig.coerce(config)
    except ConfigError as exc:
        assert len(str(exc)) < 2_000  # a 100 KB value is quoted, not copied


# -- the cases the adversarial run found ----------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    ["get_memory", "delete_memory", "history", "read_scene", "delete_scene"],
)
def test_a_lone_surrogate_id_or_scene_name_is_our_error_or_found(
    memory: TdaiMemory, call: str
) -> None:
    try:
        result = getattr(memory, call)("trip\ud800", user_id="u")
    except ConfigError as exc:
        assert "surrogate" in str(exc)
    else:
        assert result in (None, False, [])


def test_a_runnable_given_bytes_names_what_it_takes(memory: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match="bytes"):
        memory.as_runnable(user_id="u").invoke(b"hello")  # type: ignore[arg-type]


def test_a_path_with_a_name_too_long_for_the_file_system(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at most 255"):
        TdaiMemory.open(tmp_path / ("x" * 300), embeddings=None)


def test_config_files_nested_too_deep_or_with_huge_numbers(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(ConfigError, match="too deeply"):
        TdaiMemory.open(None, embeddings=None, config=deep)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"recall": {"maxResults": 1}}).replace("1", "9" * 5000))
    with pytest.raises(ConfigError, match=r"huge\.json"):
        TdaiMemory.open(None, embeddings=None, config=huge)


def test_a_config_error_quotes_a_huge_value_short() -> None:
    with pytest.raises(ConfigError) as info:
        TdaiMemory.open(None, embeddings=None, config={"recall": {"strategy": "z" * 100_000}})
    assert "recall.strategy" in str(info.value) and "…" in str(info.value)
    assert len(str(info.value)) < 400


def test_import_jsonl_of_a_binary_file_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "backup.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    code = main(["--store", str(tmp_path / "store"), "import-jsonl", str(binary)])
    err = capsys.readouterr().err
    assert code != 0
    assert "not UTF-8 text" in err and "unexpected" not in err


def test_the_cli_names_a_lone_surrogate_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a command-line argument that is not valid UTF-8 arrives with lone surrogates
    store = str(tmp_path / "store")
    assert main(["--store", store, "add", "hello", "--user", "u"]) == 0
    for command in ("get", "delete"):
        assert main(["--store", store, command, "m\udc80"]) != 0
        err = capsys.readouterr().err
        assert "surrogate" in err and "unexpected" not in err
