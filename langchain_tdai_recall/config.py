"""Configuration models.

Python code builds configuration by field name (`RecallConfig(max_results=3)`); dictionaries and
JSON files may also use the camelCase keys of the original TencentDB Agent Memory plugin
(`{"recall": {"maxResults": 3, "scoreThreshold": 0.4}}`). Every field is bounded, and a bad value
raises `ConfigError` naming the field, the value and the allowed range. `0` disables only the two
budget limits, as documented on those fields; everything else is switched off with `enabled`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Final, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.formation.config import ExtractionConfig, PersonaConfig, PipelineConfig
from langchain_tdai_recall.types import Language, OnError, Strategy

__all__ = [
    "CaptureConfig",
    "EmbeddingConfig",
    "RecallConfig",
    "StoreConfig",
    "TdaiConfig",
    "ToolsConfig",
]

DEFAULT_USER_ID: Final = "default_user"
"""User id used when none is given (the upstream plugin's actor id)."""


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(dotted field, what is wrong) pairs; nested models' problems get their full path."""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigError) and inner.problems:
            out += [(".".join(x for x in (loc, sub) if x), text) for sub, text in inner.problems]
        elif err["type"] == "extra_forbidden":
            out.append((loc, f"unknown key (value {err['input']!r}); check the spelling"))
        else:
            out.append((loc, f"{err['msg']} (got {err['input']!r})"))
    return out


def _config_error(exc: ValidationError, *, source: str | None = None) -> ConfigError:
    problems = _problems(exc)
    where = f" in {source}" if source else ""
    text = "; ".join(f"{loc or '(root)'}: {what}" for loc, what in problems)
    error = ConfigError(f"invalid configuration{where}: {text}")
    error.problems = problems
    return error


class _ConfigModel(BaseModel):
    """Frozen, strict-keyed base: snake_case names, camelCase aliases, errors as ConfigError."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from exc

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Validate a dictionary (snake_case or upstream camelCase keys)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _config_error(exc) from exc

    def to_dict(self, *, by_alias: bool = False) -> dict[str, Any]:
        """Plain JSON-compatible dictionary; `by_alias=True` writes camelCase keys."""
        return self.model_dump(mode="json", by_alias=by_alias)


class RecallConfig(_ConfigModel):
    """Automatic recall before each model call (SPEC §2)."""

    enabled: bool = True
    """Run recall at all. `False` makes `recall()` return `None`."""
    max_results: int = Field(default=5, ge=1, le=50)
    """Top-k L1 memories injected per turn."""
    score_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    """Minimum score a memory needs in its leg: cosine similarity for the embedding leg and, unless
    `keyword_score_threshold` is set, normalised keyword relevance for the keyword leg."""
    keyword_score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """Separate minimum for the keyword leg; `None` uses `score_threshold`."""
    strategy: Strategy = "hybrid"
    """`hybrid`, `embedding` or `keyword`."""
    timeout_ms: int = Field(default=5000, ge=1, le=600_000)
    """Bound on the whole recall; past it nothing is injected and one warning is logged."""
    max_chars_per_memory: int = Field(default=0, ge=0, le=1_000_000)
    """Cap on each memory line, in code points; 0 means no limit."""
    max_total_recall_chars: int = Field(default=0, ge=0, le=10_000_000)
    """Cap on all memory lines plus separators, in code points; 0 means no limit."""
    language: Language = "zh"
    """Language of the disclaimer, tools guide and truncation suffix: `zh` or `en`."""
    max_scenes: int = Field(default=15, ge=0, le=200)
    """Most scenes listed in the scene navigation (highest heat first); 0 lists none."""
    on_error: OnError = "skip"
    """`skip`: a timeout or backend failure injects nothing and logs a warning; `raise`: raise."""

    @property
    def keyword_threshold(self) -> float:
        """Effective minimum for the keyword leg."""
        if self.keyword_score_threshold is None:
            return self.score_threshold
        return self.keyword_score_threshold


class EmbeddingConfig(_ConfigModel):
    """How the embedder is called."""

    query_timeout_ms: int = Field(
        default=2000,
        ge=1,
        le=600_000,
        validation_alias=AliasChoices("query_timeout_ms", "queryTimeoutMs", "recallTimeoutMs"),
    )
    """Bound on embedding the query during recall; past it recall uses the keyword leg. Must be
    below `recall.timeout_ms`. Upstream key `recallTimeoutMs` is accepted."""
    batch_size: int = Field(default=64, ge=1, le=4096)
    """Texts per embedding call when adding memories in bulk."""
    max_input_chars: int = Field(default=2000, ge=16, le=100_000)
    """Longer texts are cut to this many code points before embedding."""


class ToolsConfig(_ConfigModel):
    """The agent's memory tools (SPEC §4)."""

    enabled: bool = True
    """Register the tools in the middleware."""
    max_calls_per_turn: int = Field(default=3, ge=1, le=50)
    """Combined cap on `tdai_memory_search` and `tdai_conversation_search` calls per turn."""


class CaptureConfig(_ConfigModel):
    """Recording of each turn's raw messages (L0)."""

    enabled: bool = True
    """Record the human text (as typed) and the final AI answer after each agent turn."""


class StoreConfig(_ConfigModel):
    """Storage and indexing."""

    default_user_id: str = Field(default=DEFAULT_USER_ID, min_length=1, max_length=256)
    """User id used when a call gives none."""
    tokenizer: Literal["bigram", "jieba"] = "bigram"
    """Keyword tokeniser for CJK text: `bigram` (character bigrams, no dependency) or `jieba`
    (word segmentation, needs the `zh` extra). English is word-tokenised either way."""
    synchronous: Literal["normal", "full"] = "normal"
    """SQLite durability: `normal` survives a killed process; `full` also a power cut."""


class TdaiConfig(_ConfigModel):
    """All settings of a `TdaiMemory` store.

    Example:
        ```python
        from langchain_tdai_recall import TdaiConfig

        cfg = TdaiConfig.from_dict({"recall": {"maxResults": 3}, "timezone": "Asia/Shanghai"})
        assert cfg.recall.max_results == 3
        ```
    """

    recall: RecallConfig = Field(default_factory=RecallConfig)
    """Automatic recall."""
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    """Embedder calls."""
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    """Memory tools."""
    capture: CaptureConfig = Field(default_factory=CaptureConfig)
    """L0 capture."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """Storage."""
    extraction: ExtractionConfig = Field(default_factory=ExtractionConfig)
    """Memory formation: extraction and consolidation (upstream `extraction.*`)."""
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    """Memory formation: scheduling (upstream `pipeline.*`)."""
    persona: PersonaConfig = Field(default_factory=PersonaConfig)
    """Memory formation: scenes and persona (upstream `persona.*`)."""
    timezone: str = "system"
    """Zone in which activity times are shown: `system`, an IANA name or `±HH:MM`."""

    @model_validator(mode="after")
    def _check_cross_field(self) -> Self:
        if self.embedding.query_timeout_ms >= self.recall.timeout_ms:
            msg = (
                f"embedding.query_timeout_ms ({self.embedding.query_timeout_ms}) must be below "
                f"recall.timeout_ms ({self.recall.timeout_ms}) so that a slow embedder degrades "
                "to keyword search instead of dropping the whole recall"
            )
            raise ValueError(msg)
        _parse_timezone(self.timezone)  # raises ValueError naming the value
        return self

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Self:
        """Load a JSON file (snake_case or upstream camelCase keys)."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            msg = f"config file {str(p)!r} does not exist"
            raise ConfigError(msg) from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            msg = f"config file {str(p)!r} is not readable JSON: {exc}"
            raise ConfigError(msg) from exc
        if not isinstance(data, dict):
            msg = f"config file {str(p)!r} must hold a JSON object, got {type(data).__name__}"
            raise ConfigError(msg)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _config_error(exc, source=str(p)) from exc

    @classmethod
    def coerce(cls, config: TdaiConfig | dict[str, Any] | str | os.PathLike[str] | None) -> Self:
        """Normalise the accepted forms of `config`: a model, a dict, a JSON path or `None`."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, dict):
            return cls.from_dict(config)
        if isinstance(config, str | os.PathLike):
            return cls.from_file(config)
        msg = (
            f"config must be a TdaiConfig, a dict or a path to a JSON file, "
            f"got {type(config).__name__}"
        )
        raise ConfigError(msg)

    def tzinfo(self) -> ZoneInfo | Any:
        """The `tzinfo` for `timezone` (`None`-free: the system zone when `system`)."""
        return _parse_timezone(self.timezone)


@functools.lru_cache(maxsize=32)
def _parse_timezone(name: str) -> Any:
    """Resolve `system`, an IANA name or a `±HH:MM` offset to a tzinfo.

    Cached per process: tools ask for it on every call, and `system` reads /etc/localtime.
    """
    import datetime as dt  # noqa: PLC0415 - keeps the module namespace small
    import re  # noqa: PLC0415

    if name == "system":
        return _system_timezone()
    m = re.fullmatch(r"([+-])(\d{2}):(\d{2})", name)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours > 23 or minutes > 59:
            msg = f"timezone offset {name!r} is out of range; use -23:59..+23:59"
            raise ValueError(msg)
        delta = dt.timedelta(hours=hours, minutes=minutes)
        return dt.timezone(-delta if m.group(1) == "-" else delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        msg = f"timezone {name!r} is unknown; use 'system', an IANA name or ±HH:MM"
        raise ValueError(msg) from exc


def _system_timezone() -> Any:
    """The process's zone with its DST rules when they can be found, else its current offset."""
    import datetime as dt  # noqa: PLC0415

    tz_env = os.environ.get("TZ", "").lstrip(":")
    if tz_env:
        try:
            return ZoneInfo(tz_env)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ValueError):
        return dt.datetime.now().astimezone().tzinfo
