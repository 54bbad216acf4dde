"""Configuration: defaults, upstream camelCase keys, validation messages, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_tdai_recall import ConfigError, RecallConfig, TdaiConfig, TdaiMemory


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
        ({"recall": {"maxResults": 0}}, ["recall.maxResults", "greater than or equal to 1", "0"]),
        ({"recall": {"scoreThreshold": 1.5}}, ["scoreThreshold", "1.5"]),
        ({"recall": {"strategy": "magic"}}, ["strategy", "'hybrid'", "magic"]),
        ({"recall": {"timeoutMs": -1}}, ["timeoutMs", "-1"]),
        ({"recall": {"maxResult": 3}}, ["recall.maxResult", "unknown key"]),
        (
            {"recall": {"timeoutMs": 1000}, "embedding": {"queryTimeoutMs": 2000}},
            ["query_timeout_ms", "recall.timeout_ms"],
        ),
        ({"timezone": "Mars/Olympus"}, ["Mars/Olympus", "IANA"]),
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
        RecallConfig(max_results=0)


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
    assert recall["maxResults"]["minimum"] == 1
    assert "Top-k" in recall["maxResults"]["description"]
