"""Configuration: defaults, upstream camelCase keys, validation messages, files."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_tdai_recall import ConfigError, EmbeddingConfig, RecallConfig, TdaiConfig, TdaiMemory
from langchain_tdai_recall.config import _log_once


def test_seed_defaults() -> None:
    cfg = RecallConfig()
    assert (cfg.enabled, cfg.max_results, cfg.score_threshold, cfg.strategy) == (
        True,
        5,
        0.3,
        "hybrid",
    )
    assert (cfg.timeout_ms, cfg.max_chars_per_memory, cfg.max_total_recall_chars) == (5000, 0, 0)
    assert cfg.language == "auto"
    full = TdaiConfig()
    assert full.embedding.query_timeout_ms == 2000
    assert full.tools.max_calls_per_turn == 3
    assert full.store.default_user_id == "default_user"


def test_upstream_camel_case_keys_load_unchanged() -> None:
    cfg = TdaiConfig.from_dict(
        {
            "recall": {
                "maxResults": 8,
                "scoreThreshold": 0.4,
                "timeoutMs": 3000,
                "maxCharsPerMemory": 200,
                "maxTotalRecallChars": 1000,
            },
            "embedding": {"recallTimeoutMs": 500},
        }
    )
    assert cfg.recall.max_results == 8
    assert cfg.recall.score_threshold == 0.4
    assert cfg.recall.max_total_recall_chars == 1000
    assert cfg.embedding.query_timeout_ms == 500
    assert TdaiConfig.from_dict({"recall": {"max_results": 2}}).recall.max_results == 2


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        ({"recall": {"maxResults": -1}}, ["recall.maxResults", "greater than or equal to 0", "-1"]),
        ({"recall": {"maxResults": 51}}, ["recall.maxResults", "less than or equal to 50", "51"]),
        ({"recall": {"scoreThreshold": 1.5}}, ["scoreThreshold", "1.5"]),
        ({"recall": {"strategy": "magic"}}, ["strategy", "'hybrid'", "magic"]),
        ({"recall": {"timeoutMs": -1}}, ["timeoutMs", "-1"]),
        ({"recall": {"maxResult": 3}}, ["recall.maxResult", "unknown key"]),
        (
            {"recall": {"timeoutMs": 1000}, "embedding": {"queryTimeoutMs": 2000}},
            ["query_timeout_ms", "recall.timeout_ms"],
        ),
        ({"recall": {"timeoutMs": 1000}, "embedding": {"query_timeout_ms": 1000}}, ["below"]),
        ({"timezone": 8}, ["timezone", "8"]),
        ({"recall": {"maxResults": 3, "maxResultz": 3}}, ["recall.maxResultz", "unknown key"]),
        ({"embedding": {"provider": "openai", "batchSise": 8}}, ["embedding.batchSise"]),
        ({"extractions": {"enabled": True}}, ["extractions", "unknown key"]),
    ],
)
def test_invalid_values_name_field_value_and_rule(
    data: dict[str, object], needles: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        TdaiConfig.from_dict(data)
    for needle in needles:
        assert needle in str(info.value)


def test_direct_construction_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="max_results"):
        RecallConfig(max_results=99)
    with pytest.raises(ValueError, match="max_results"):  # ConfigError is a ValueError
        RecallConfig(max_results=-1)


def test_config_files_and_coercion(tmp_path: Path) -> None:
    path = tmp_path / "tdai.json"
    path.write_text(json.dumps({"recall": {"maxResults": 3}, "timezone": "+08:00"}), "utf-8")
    assert TdaiConfig.from_file(path).recall.max_results == 3
    with TdaiMemory.open(None, embeddings=None, config=str(path)) as mem:
        assert mem.config.recall.max_results == 3
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", "utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json"):
        TdaiConfig.from_file(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        TdaiConfig.from_file(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="config must be"):
        TdaiConfig.coerce(42)  # type: ignore[arg-type]


def test_round_trip_by_alias() -> None:
    cfg = TdaiConfig.from_dict({"recall": {"maxResults": 7}})
    again = TdaiConfig.from_dict(cfg.to_dict(by_alias=True))
    assert again == cfg
    assert cfg.to_dict(by_alias=True)["recall"]["maxResults"] == 7


def test_schema_is_exportable() -> None:
    schema = TdaiConfig.model_json_schema(by_alias=True)
    assert "recall" in schema["properties"]
    recall = schema["$defs"]["RecallConfig"]["properties"]
    assert recall["maxResults"]["minimum"] == 0
    assert "Top-k" in recall["maxResults"]["description"]


# -- configurations of the original plugin (issue 8 #9) ------------------------------------------


@pytest.fixture
def config_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """INFO records of the config module; once-per-process notes are reset."""
    _log_once.cache_clear()
    with caplog.at_level(logging.INFO, logger="langchain_tdai_recall.config"):
        yield caplog
    _log_once.cache_clear()


def test_short_recall_timeout_loads_with_a_derived_query_timeout() -> None:
    cfg = TdaiConfig.from_dict({"recall": {"timeoutMs": 1000}})
    assert cfg.recall.timeout_ms == 1000
    assert 0 < cfg.embedding.query_timeout_ms < 1000
    assert TdaiConfig.from_dict({"recall": {"timeoutMs": 300}}).embedding.query_timeout_ms < 300
    assert TdaiConfig().embedding.query_timeout_ms == 2000  # default unchanged
    # An explicit value of ours is kept, and checked against the recall timeout.
    explicit = {"recall": {"timeoutMs": 1000}, "embedding": {"queryTimeoutMs": 900}}
    assert TdaiConfig.from_dict(explicit).embedding.query_timeout_ms == 900


def test_derived_query_timeout_is_rederived_after_a_round_trip() -> None:
    dumped = TdaiConfig().to_dict(by_alias=True)
    assert "queryTimeoutMs" not in dumped["embedding"]
    dumped["recall"]["timeoutMs"] = 800
    assert TdaiConfig.from_dict(dumped).embedding.query_timeout_ms < 800
    explicit = TdaiConfig.from_dict({"embedding": {"query_timeout_ms": 1234}})
    assert explicit.to_dict()["embedding"]["query_timeout_ms"] == 1234
    assert TdaiConfig.from_dict(explicit.to_dict()) == explicit


def test_upstream_recall_timeout_key_not_below_the_recall_timeout_loads(
    config_log: pytest.LogCaptureFixture,
) -> None:
    # The original let the whole-recall timeout win over a longer embedding timeout.
    data = {"recall": {"timeoutMs": 5000}, "embedding": {"recallTimeoutMs": 10000}}
    cfg = TdaiConfig.from_dict(data)
    assert cfg.embedding.query_timeout_ms == 2000
    assert any("recallTimeoutMs (10000)" in r.getMessage() for r in config_log.records)
    shorter = {"recall": {"timeoutMs": 5000}, "embedding": {"recallTimeoutMs": 700}}
    assert TdaiConfig.from_dict(shorter).embedding.query_timeout_ms == 700


def test_zero_timeout_and_zero_results_keep_the_original_meaning(
    config_log: pytest.LogCaptureFixture,
) -> None:
    cfg = TdaiConfig.from_dict({"recall": {"timeoutMs": 0}})
    assert cfg.recall.timeout_ms == 0
    assert cfg.recall.enabled is False  # the original injected nothing: every recall timed out
    warnings = [r for r in config_log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "timeout_ms is 0" in warnings[0].getMessage()
    assert "enabled" in warnings[0].getMessage()
    assert RecallConfig(timeout_ms=0).enabled is False
    cfg = TdaiConfig.from_dict({"recall": {"maxResults": 0}})
    assert (cfg.recall.max_results, cfg.recall.enabled) == (0, True)
    assert any("max_results is 0" in r.getMessage() for r in config_log.records)


def test_zero_max_results_injects_persona_but_no_memory_lines() -> None:
    with TdaiMemory.open(None, embeddings=None, config={"recall": {"maxResults": 0}}) as mem:
        mem.add_memory("The user likes window seats", user_id="u")
        mem.set_persona("Frequent flyer.", user_id="u")
        result = mem.recall("which seats do I like", user_id="u")
    assert result is not None
    assert result.prepend_context is None
    assert result.memories == ()
    assert "Frequent flyer." in (result.append_system_context or "")


def test_zero_recall_timeout_injects_nothing() -> None:
    with TdaiMemory.open(None, embeddings=None, config={"recall": {"timeoutMs": 0}}) as mem:
        mem.add_memory("The user likes window seats", user_id="u")
        assert mem.recall("which seats do I like", user_id="u") is None


UPSTREAM_FULL = {
    "recall": {"enabled": True, "maxResults": 5, "scoreThreshold": 0.3, "timeoutMs": 5000},
    "embedding": {
        "provider": "openai_compatible",
        "baseUrl": "https://example.invalid/v1",
        "apiKey": "sk-secret-value",
        "model": "text-embedding-3-small",
        "dimensions": 1536,
        "sendDimensions": True,
        "enabled": True,
        "timeoutMs": 10000,
        "maxInputChars": 5000,
    },
    "capture": {"enabled": True, "excludeAgents": ["bot-*"], "l0l1RetentionDays": 0},
    "extraction": {"enabled": True, "enableDedup": True, "maxMemoriesPerSession": 20},
    "persona": {"triggerEveryN": 50, "maxScenes": 7, "backupCount": 3},
    "pipeline": {"everyNConversations": 5, "enableWarmup": True},
    "bm25": {"enabled": True, "language": "zh"},
    "storeBackend": "sqlite",
    "llm": {"enabled": False, "apiKey": "sk-other-secret"},
    "timezone": "Asia/Shanghai",
}


def test_upstream_sections_without_meaning_load_with_one_info_line(
    config_log: pytest.LogCaptureFixture,
) -> None:
    cfg = TdaiConfig.from_dict(UPSTREAM_FULL)
    assert cfg.embedding.max_input_chars == 5000
    assert cfg.recall.max_scenes == 7  # persona.maxScenes has a meaning here
    # the memory-formation sections are real sections now, not dropped keys
    assert cfg.persona.max_scenes == 7 and cfg.persona.trigger_every_n == 50
    assert cfg.extraction.max_memories_per_session == 20
    assert cfg.pipeline.every_n_conversations == 5
    notes = [r for r in config_log.records if "original plugin" in r.getMessage()]
    assert len(notes) == 1
    assert notes[0].levelno == logging.INFO
    text = notes[0].getMessage()
    ignored = text.split("no effect here: ", 1)[1].split(";", 1)[0].split(", ")
    for key in ("embedding.provider", "embedding.apiKey", "bm25", "llm"):
        assert key in ignored
    assert not {k for k in ignored if k.split(".")[0] in ("extraction", "persona", "pipeline")}
    for record in config_log.records:  # key names only: values may be secrets
        assert "sk-" not in record.getMessage()
    # A section model validated alone accepts its own upstream keys too.
    assert EmbeddingConfig.from_dict({"provider": "none", "batchSize": 8}).batch_size == 8


def test_unknown_timezone_falls_back_to_the_system_zone_with_a_warning(
    config_log: pytest.LogCaptureFixture,
) -> None:
    cfg = TdaiConfig.from_dict({"timezone": "Mars/Olympus"})
    assert cfg.tzinfo() == TdaiConfig().tzinfo()
    (warning,) = [r for r in config_log.records if r.levelno == logging.WARNING]
    assert "Mars/Olympus" in warning.getMessage()
    assert "system" in warning.getMessage()
    assert TdaiConfig.from_dict({"timezone": "+25:00"}).tzinfo() == TdaiConfig().tzinfo()


def test_config_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(UPSTREAM_FULL), encoding="utf-8-sig")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert TdaiConfig.from_file(path).recall.max_scenes == 7
    with TdaiMemory.open(None, embeddings=None, config=path) as mem:
        assert mem.config.timezone == "Asia/Shanghai"
