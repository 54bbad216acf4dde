"""The real `ChatOpenAI` and `ChatAnthropic` clients against a local server on 127.0.0.1.

They prove that the request formation sends (structured-output tool, system and user prompt)
is what a provider accepts, and that the provider's tool-call answer is parsed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.cli import main
from langchain_tdai_recall.testing import FormationWindow, HashEmbeddings, ScriptedFormationModel
from tests.integration_tests.formation._llm_server import llm_server
from tests.unit_tests.formation.conftest import FAST

openai = pytest.importorskip("langchain_openai")
anthropic = pytest.importorskip("langchain_anthropic")

# the only network these tests use: the local server on the loopback interface
pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])


def extract(window: FormationWindow) -> Any:
    return {
        "situation": "talking about food",
        "memories": [
            {
                "content": "The user is vegetarian.",
                "type": "persona",
                "priority": 85,
                "source_ids": [window.messages[0]["id"]],
            }
        ],
    }


def say_vegetarian(memory: TdaiMemory) -> None:
    memory.record_messages(
        [
            {"role": "user", "content": "I'm vegetarian, remember that."},
            {"role": "assistant", "content": "Got it."},
        ],
        session_key="s1",
    )


def test_chat_openai_request_and_structured_answer(tmp_path: Path) -> None:
    with llm_server(ScriptedFormationModel(extract=extract)) as server:
        model = openai.ChatOpenAI(
            model="gpt-4o-mini", api_key="test-key", base_url=server.url + "/v1", max_retries=0
        )
        with TdaiMemory.open(
            tmp_path / "s", embeddings=HashEmbeddings(), config=FAST, extraction_model=model
        ) as memory:
            say_vegetarian(memory)
            report = memory.extract()
            assert report.ok, report.errors
            (stored,) = memory.list_memories()
        request = server.requests[0]
    assert stored.content == "The user is vegetarian." and stored.priority == 85
    assert stored.scene_name == "talking about food"
    assert request["model"] == "gpt-4o-mini"
    assert [t["function"]["name"] for t in request["tools"]] == ["ExtractionAnswer"]
    assert request["tool_choice"]["function"]["name"] == "ExtractionAnswer"
    params = request["tools"][0]["function"]["parameters"]
    assert "memories" in params["properties"]
    assert request["messages"][0]["role"] == "system"
    assert "I'm vegetarian, remember that." in request["messages"][1]["content"]
    assert report.input_tokens >= 100 and report.output_tokens >= 20  # usage was read


def test_chat_openai_cut_off_answer_keeps_the_cursor(tmp_path: Path) -> None:
    with llm_server(ScriptedFormationModel(extract=extract)) as server:
        server.truncate_next.append(True)
        model = openai.ChatOpenAI(
            model="gpt-4o-mini", api_key="test-key", base_url=server.url + "/v1", max_retries=0
        )
        with TdaiMemory.open(
            tmp_path / "s", embeddings=HashEmbeddings(), config=FAST, extraction_model=model
        ) as memory:
            say_vegetarian(memory)
            first = memory.extract()
            assert first.failed_windows == 1 and memory.list_memories() == []
            second = memory.extract()
            assert second.ok and len(memory.list_memories()) == 1


def test_chat_anthropic_request_and_structured_answer(tmp_path: Path) -> None:
    with llm_server(ScriptedFormationModel(extract=extract)) as server:
        model = anthropic.ChatAnthropic(
            model="claude-sonnet-4-5", api_key="test-key", base_url=server.url, max_retries=0
        )
        with TdaiMemory.open(
            tmp_path / "s", embeddings=HashEmbeddings(), config=FAST, extraction_model=model
        ) as memory:
            say_vegetarian(memory)
            report = memory.extract()
            assert report.ok, report.errors
            (stored,) = memory.list_memories()
        request = server.requests[0]
    assert stored.content == "The user is vegetarian."
    assert request["_path"].endswith("/v1/messages")
    assert [t["name"] for t in request["tools"]] == ["ExtractionAnswer"]
    assert request["tool_choice"] == {"type": "tool", "name": "ExtractionAnswer"}
    assert "memories" in request["tools"][0]["input_schema"]["properties"]
    assert "long-term memories" in json.dumps(request["system"])
    assert report.input_tokens >= 90


def test_cli_extract_with_an_init_chat_model_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    with TdaiMemory.open(store, embeddings=HashEmbeddings(), config=FAST) as memory:
        say_vegetarian(memory)
    with llm_server(ScriptedFormationModel(extract=extract)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        code = main(
            [
                "extract",
                "--store",
                str(store),
                "--embeddings",
                "hash",
                "--model",
                "openai:gpt-4o-mini",
                "--progress",
            ]
        )
        out, err = capsys.readouterr()
    assert code == 0, err
    assert "memories written:  1" in out and "forming memories" in err
    with TdaiMemory.open(store, embeddings=HashEmbeddings()) as memory:
        assert [m.content for m in memory.list_memories()] == ["The user is vegetarian."]


def test_cli_extract_without_a_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["extract", "--store", ":memory:", "--embeddings", "hash"])
    _, err = capsys.readouterr()
    assert code == 1 and "--model" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("method", ["json_mode", "json_schema"])
def test_chat_openai_json_modes_send_what_openai_accepts(tmp_path: Path, method: str) -> None:
    # issue 18 item 2: json_mode sent response_format json_object with no schema and no
    # message containing "json"; OpenAI answers such a request with HTTP 400
    with llm_server(ScriptedFormationModel(extract=extract)) as server:
        model = openai.ChatOpenAI(
            model="gpt-4o-mini", api_key="test-key", base_url=server.url + "/v1", max_retries=0
        )
        config = {**FAST, "extraction": {**FAST["extraction"], "structuredOutput": method}}
        with TdaiMemory.open(
            tmp_path / "s", embeddings=HashEmbeddings(), config=config, extraction_model=model
        ) as memory:
            say_vegetarian(memory)
            report = memory.extract()
            assert report.ok, report.errors
            (stored,) = memory.list_memories()
        request = server.requests[0]
    assert stored.content == "The user is vegetarian." and stored.priority == 85
    if method == "json_mode":
        assert request["response_format"] == {"type": "json_object"}
        system = request["messages"][0]["content"]
        assert "JSON" in system and '"memories"' in system  # the schema travels in the prompt
    else:
        assert request["response_format"]["type"] == "json_schema"
        assert "memories" in request["response_format"]["json_schema"]["schema"]["properties"]
