"""Configuration models.

Python code builds configuration by field name (`RecallConfig(max_results=3)`); dictionaries and
JSON files may also use the camelCase keys of the original TencentDB Agent Memory plugin
(`{"recall": {"maxResults": 3, "scoreThreshold": 0.4}}`). Every field is bounded, and a bad value
raises `ConfigError` naming the field, the value and the allowed range. `0` disables the two
budget limits; `recall.max_results = 0` and `recall.timeout_ms = 0` keep the original plugin's
effect (documented on those fields); everything else is switched off with `enabled`.

Every valid configuration of the original plugin loads. Its keys that have no effect here (the
embedding provider settings, the `bm25`, `llm`, `report`, ... sections) are
listed in `_UPSTREAM_ONLY_KEYS`: they are accepted and named in one INFO log line, never their
values. A misspelt key of this package is still an error. When a later feature gives one of
those sections a meaning, its entry in that table is replaced by a real field.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AliasChoices, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from langchain_tdai_recall._exchange.records import shown
from langchain_tdai_recall._settings.base import ConfigModel, config_error
from langchain_tdai_recall._settings.formation import (
    ExtractionConfig,
    PersonaConfig,
    PipelineConfig,
)
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import LanguageSetting, OnError, Strategy

__all__ = [
    "CaptureConfig",
    "EmbeddingConfig",
    "RecallConfig",
    "StoreConfig",
    "TdaiConfig",
    "ToolsConfig",
]

logger = logging.getLogger(__name__)

DEFAULT_USER_ID: Final = "default_user"
"""User id used when none is given (the upstream plugin's actor id)."""

DEFAULT_RECALL_TIMEOUT_MS: Final = 5000
"""Default bound on one whole recall."""

_UPSTREAM_ONLY_KEYS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        # top level: sections for other backends, the original's own LLM runner and reporting
        # (`extraction`, `pipeline` and `persona` are memory formation's sections here)
        "": frozenset(
            {
                "bm25",
                "llm",
                "offload",
                "report",
                "storeBackend",
                "tcvdb",
            }
        ),
        # the embedder is a LangChain `Embeddings` object given to `TdaiMemory.open`
        "embedding": frozenset(
            {
                "apiKey",
                "baseUrl",
                "captureTimeoutMs",
                "conflictRecallTopK",
                "dimensions",
                "enabled",
                "model",
                "modelCacheDir",
                "provider",
                "proxyUrl",
                "sendDimensions",
                "timeoutMs",
            }
        ),
        # retention and agent exclusion of the original's capture
        "capture": frozenset(
            {"allowAggressiveCleanup", "cleanTime", "excludeAgents", "l0l1RetentionDays"}
        ),
    }
)
"""Keys of the original plugin's configuration that have no effect here, per section (`""` is the
top level; a key names a whole section there). They are accepted, and one INFO line names them
(never their values, which may hold API keys). This is the one place to edit when a section
gains a meaning: replace its entry here with a field holding a real config model."""

_UPSTREAM_MOVED_KEYS: Final[Mapping[tuple[str, str], tuple[str, str]]] = MappingProxyType(
    {
        # the scene limit also bounds the scene navigation (persona.max_scenes keeps it too)
        ("persona", "maxScenes"): ("recall", "max_scenes"),
        # consolidation candidates per new memory are an extraction setting here
        ("embedding", "conflictRecallTopK"): ("extraction", "candidate_top_k"),
    }
)
"""Original keys whose setting lives in another section here: (section, key) -> (section, field).
Used when the destination is not set explicitly."""


def derive_query_timeout_ms(recall_timeout_ms: int) -> int:
    """The query-embedding bound used when `embedding.query_timeout_ms` is not set.

    Two fifths of the recall timeout (at least 1 ms): the embedding leg gets most of the time it
    could use while keyword search, persona and scenes keep the rest.
    """
    return max(1, recall_timeout_ms * 2 // 5)


class _ConfigModel(ConfigModel):
    """The recall-side sections: the shared base plus the original plugin's keys.

    Keys of the original that have no effect here are dropped (and named in one INFO line), and
    keys that moved are translated, section by section.
    """

    _section: ClassVar[str] = ""
    """Dotted name of this model's section in `TdaiConfig` (`""` for the top level)."""

    @model_validator(mode="before")
    @classmethod
    def _accept_upstream_keys(cls, data: Any) -> Any:
        """Translate the original plugin's keys, drop those with no effect and log them once.

        Nested sections are handled by the outermost model, so one validation logs one line.
        """
        if not isinstance(data, dict):
            return data
        notes: list[str] = []
        data = cls._translate_upstream(data, notes)
        data, ignored = _drop_upstream_only(cls, data, f"{cls._section}." if cls._section else "")
        if ignored:
            notes.insert(
                0,
                "accepted keys of the original plugin that have no effect here: "
                + ", ".join(ignored),
            )
        if notes:
            logger.info("configuration: %s", "; ".join(notes))
        return data

    @classmethod
    def _translate_upstream(cls, data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
        """Hook for original keys that map onto this package's settings; appends log notes."""
        del notes
        return data


DEFAULT_PROFILE_MAX_TOKENS: Final = 600
"""Default `recall.profile_max_tokens`: estimated tokens of memory lines in the user profile,
cached with the system message. On the medium-store development set (5 users with 150-170
memories) it holds 20-25 memories for every user, English or Chinese, at about 590 tokens; the
code-point budget it replaces held 15-17 English memories (about 390 tokens) and 30-37 Chinese
ones (about 1,000 tokens), and let no more needs reach the model (97 and 109 of 141 needs with
priorities at 50 and as rated, against 97 and 106; 91 and 102 at 400 tokens)."""

PROFILE_CHARS_PER_TOKEN: Final = 3.75
"""How the retired `recall.profile_max_chars` reads as a token budget: 1,500 code points were
documented as about 400 tokens of English, so `profile_max_chars = N` loads as
`profile_max_tokens = ceil(N / 3.75)` (1,500 -> 400)."""

DEFAULT_PROFILE_HOLD_SECONDS: Final = 600.0
"""Default `recall.profile_hold_seconds`: formation's idle timeout, past which a provider's
prompt cache has lapsed too."""


class RecallConfig(_ConfigModel):
    """Automatic recall before each model call (SPEC §2)."""

    _section: ClassVar[str] = "recall"

    enabled: bool = True
    """Run recall at all. `False` makes `recall()` return `None`."""
    max_results: int = Field(default=5, ge=0, le=50)
    """Top-k L1 memories injected per turn. 0 injects no memory lines (the original plugin's
    meaning) while the persona and scene navigation are still injected; to switch recall off use
    `enabled`."""
    score_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    """Relevance (0-1, the `score` of a hit) a memory needs to be injected automatically. The
    threshold is halved for messages clearly about the user's memories, lowered for memories
    of priority above 70 and for the best-ranked memories (`lead_share`; see `recall.gate`).
    It gates injection only: the memory tools and `search_memories` return the best hits above
    `tools.min_score`."""
    lead_share: float = Field(default=0.75, ge=0.0, le=1.0)
    """Share of `score_threshold` that the two best-ranked memories of a message (and of each
    part of a multi-part message) need to be injected, when the vector leg found them and the
    message names no name the user's memories never mention (see `recall.gate`): in a store of
    hundreds, what the search ranks first is worth showing a little under the threshold. 1
    turns the rule off."""
    keyword_score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """Threshold used instead of `score_threshold` when recall runs on keywords alone (strategy
    `keyword`, no embedder, or a failed query embedding); `None` uses `score_threshold`."""
    pin_priority: int | None = Field(default=90, ge=60, le=100)
    """Memories of at least this priority (safety facts, medication, hard constraints) are not
    left to search: they go into the system context every turn, like standing rules (priority
    -1 instructions). `None` pins only standing rules."""
    pin_instruction_priority: int | None = Field(default=70, ge=60, le=100)
    """Instructions (rules the user gave the assistant) of at least this priority are pinned
    too: a rule applies to every task it covers, whether or not the task's wording resembles it.
    `None` pins instructions only by `pin_priority`."""
    max_pinned: int = Field(default=10, ge=0, le=100)
    """Most memories pinned by priority (highest priority, then oldest, first); the rest are left
    to the profile and to search."""
    profile_max_tokens: int | None = Field(default=DEFAULT_PROFILE_MAX_TOKENS, ge=25, le=25_000)
    """Budget, in estimated tokens of memory lines (`text.tokens.estimate_tokens`: about four
    code points of English or 1.25 Chinese characters a token), of the user's profile in the
    system context: after the pinned memories, the scope's other memories of priority 30 or more
    in profile order (see `stores._index.profile`) go into the profile as long as their lines
    fit. A user with a handful of memories is thus shown all of them on every turn (a stable,
    cache-friendly cost), however a request is worded; a large scope shows its most important
    stable facts and leaves the rest to search. `None` turns the profile off. The retired key
    `profile_max_chars` (`profileMaxChars`) still loads: N code points are read as
    `ceil(N / 3.75)` tokens (1,500 -> 400), with one INFO line."""
    profile_hold_seconds: float | None = Field(
        default=DEFAULT_PROFILE_HOLD_SECONDS, ge=0, le=604_800
    )
    """How long the profile a session was first shown is kept for that session while it is
    quiet. A recall with a `session_key` (the middleware always has one) shows the profile the
    session started with until the session ends (`end_session()`, or no recall for this long),
    the pinned memories change, or a memory of that profile is deleted or edited; memories added
    meanwhile reach the model through the memory block when a message is about them. So memory
    formation during a conversation does not rewrite the system message (and the provider's
    cached prefix) after every window. `None` or 0 chooses the profile afresh every turn."""
    strategy: Strategy = "hybrid"
    """`hybrid`, `embedding` or `keyword`."""
    timeout_ms: int = Field(default=DEFAULT_RECALL_TIMEOUT_MS, ge=0, le=600_000)
    """Bound on the whole recall; past it nothing is injected and one warning is logged. 0 keeps
    the original plugin's effect, where every recall timed out at once and injected nothing: it
    sets `enabled` to false (with one warning). The memory tools are not affected."""
    max_chars_per_memory: int = Field(default=0, ge=0, le=1_000_000)
    """Cap on each memory line, in code points; 0 means no limit. A cut line always keeps its
    `- [type|scene] ` head and at least 10 code points of its content, even past a smaller cap."""
    max_total_recall_chars: int = Field(default=0, ge=0, le=10_000_000)
    """Cap on all memory lines plus separators, in code points; 0 means no limit."""
    language: LanguageSetting = "auto"
    """Language of the text recall writes into prompts (disclaimer, time labels, tools guide,
    truncation suffix): `auto` (the memory block follows the user's message, the system context
    the app's system prompt, else English), `zh` or `en`. Also accepted at the top level of a
    config (`{"language": "en"}`)."""
    max_scenes: int = Field(default=15, ge=0, le=200)
    """Most scenes listed in the scene navigation (highest heat first); 0 lists none."""
    on_error: OnError = "skip"
    """`skip`: a timeout or backend failure injects nothing and logs a warning; `raise`: raise."""
    time_aware: bool = True
    """Read the time a message asks about ("last month", "in November", "上个月", "2026-11-03")
    and favour the memories whose activity time (else write time) falls in it, in recall and in
    `search_memories` / `tdai_memory_search` when no explicit time filter is given (see
    `text.timeexpr`). Dates are resolved against the turn's time in `timezone`."""
    trace_memory_text: bool = False
    """Put the recalled memories' text into what callbacks and tracing see of a turn: the
    `page_content` of the `tdai_recall` retriever run's documents and each memory's `content` in
    the `tdai_agent_turn` custom event. Off, they carry ids, scores, types and channels only, so
    a frontend that forwards `astream_events` does not forward the user's memories from them
    (the chat model's own run still carries the prompt, injection included); `on_turn`
    callbacks always receive the text."""

    @classmethod
    def _translate_upstream(cls, data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
        data = _retired_profile_chars(data, notes)
        timeout = next((data[k] for k in ("timeout_ms", "timeoutMs") if k in data), None)
        if _is_int(timeout) and timeout == 0 and data.get("enabled", True) is not False:
            _warn_once(
                "recall.timeout_ms is 0: in the original plugin every recall then timed out "
                "and nothing was injected, so recall is switched off (recall.enabled = false); "
                "give a timeout in milliseconds to switch it on"
            )
            data = {**data, "enabled": False}
        return data

    @model_validator(mode="after")
    def _explain_zero_results(self) -> Self:
        if self.max_results == 0 and self.enabled:
            _log_once(
                logging.INFO,
                "recall.max_results is 0: no memory lines are injected; the persona and scene "
                "navigation still are",
            )
        return self

    @property
    def keyword_threshold(self) -> float:
        """Effective minimum for the keyword leg."""
        if self.keyword_score_threshold is None:
            return self.score_threshold
        return self.keyword_score_threshold


def _retired_profile_chars(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Read the retired `profile_max_chars` (code points) as `profile_max_tokens`."""
    old = [k for k in ("profile_max_chars", "profileMaxChars") if k in data]
    if not old:
        return data
    if any(k in data for k in ("profile_max_tokens", "profileMaxTokens")):
        msg = (
            f"recall.{old[0]} and recall.profile_max_tokens both set the profile budget; "
            "keep only profile_max_tokens (estimated tokens; the old key counted code points)"
        )
        raise ConfigError(msg)
    value = data[old[0]]
    rest = {k: v for k, v in data.items() if k not in old}
    if value is None:
        rest["profile_max_tokens"] = None
    elif _is_int(value) and value > 0:
        tokens = math.ceil(value / PROFILE_CHARS_PER_TOKEN)
        rest["profile_max_tokens"] = tokens
        notes.append(
            f"recall.{old[0]}={value} (code points) is read as recall.profile_max_tokens="
            f"{tokens} (estimated tokens; the profile is budgeted in tokens now)"
        )
    else:
        msg = (
            f"recall.{old[0]} must be a positive number of code points or null, got "
            f"{shown(value)}; use recall.profile_max_tokens (estimated tokens) instead"
        )
        raise ConfigError(msg)
    return rest


class EmbeddingConfig(_ConfigModel):
    """How the embedder is called."""

    _section: ClassVar[str] = "embedding"

    query_timeout_ms: int = Field(
        default=derive_query_timeout_ms(DEFAULT_RECALL_TIMEOUT_MS),
        ge=0,
        le=600_000,
        validation_alias=AliasChoices("query_timeout_ms", "queryTimeoutMs", "recallTimeoutMs"),
    )
    """Bound on embedding the query during recall; past it recall uses the keyword leg. When not
    set it is derived from `recall.timeout_ms` (two fifths of it: 2000 for the default 5000), so
    any recall timeout loads. When set it must be below `recall.timeout_ms`. The original key
    `recallTimeoutMs` is accepted; a value of it that is not below the recall timeout is
    replaced by the derived one (logged at INFO), since the original let the recall timeout
    win. 0 times the query embedding out at once, as in the original: recall uses keyword search
    only (with a warning per recall)."""
    batch_size: int = Field(default=64, ge=1, le=4096)
    """Texts per embedding call when adding memories in bulk."""
    max_input_chars: int = Field(default=2000, ge=16, le=100_000)
    """Longer texts are cut to this many code points before embedding."""


class ToolsConfig(_ConfigModel):
    """The agent's memory tools (SPEC §4)."""

    _section: ClassVar[str] = "tools"

    enabled: bool = True
    """Register the tools in the middleware."""
    max_calls_per_turn: int = Field(default=3, ge=1, le=50)
    """Combined cap on `tdai_memory_search` and `tdai_conversation_search` calls per turn."""
    manage_memory: bool = False
    """Also register `tdai_manage_memory`, with which the agent remembers, corrects or forgets
    memories of its own scope (memory formation's consolidation decides how a new memory is
    stored). Off by default."""
    max_manage_calls_per_turn: int = Field(default=3, ge=1, le=50)
    """Cap on `tdai_manage_memory` calls per turn, counted like the search cap but apart from
    it."""
    min_score: float = Field(default=0.03, ge=0.0, le=1.0)
    """Relevance floor of the agent's own searches (the memory tools, `search_memories`,
    `search_conversations`): they return the best-ranked hits the agent asked for above this
    floor, which only drops memories unrelated to the query. Automatic injection uses
    `recall.score_threshold` instead."""


class CaptureConfig(_ConfigModel):
    """Recording of each turn's raw messages (L0)."""

    _section: ClassVar[str] = "capture"

    enabled: bool = True
    """Record the human text (as typed) and the final AI answer after each agent turn."""


class StoreConfig(_ConfigModel):
    """Storage and indexing."""

    _section: ClassVar[str] = "store"

    default_user_id: str = Field(default=DEFAULT_USER_ID, min_length=1, max_length=256)
    """User id used when a call gives none."""
    tokenizer: Literal["bigram", "jieba"] = "bigram"
    """Keyword tokeniser for CJK text: `bigram` (character bigrams, no dependency) or `jieba`
    (word segmentation, needs the `zh` extra). English is word-tokenised either way."""
    synchronous: Literal["normal", "full"] = "normal"
    """SQLite durability: `normal` survives a killed process; `full` also a power cut."""
    timeout_ms: int = Field(default=5000, ge=100, le=600_000)
    """Longest time one call to a database server (PostgreSQL) may take: waiting for a pooled
    connection, the statement, a lock held by another writer, a server that stopped answering.
    Past it the call fails with `StoreError` (recall injects nothing and logs a warning)."""
    pool_size: int = Field(default=8, ge=1, le=100)
    """Most connections one process opens to a database server (PostgreSQL)."""
    index_cache: str | None = "auto"
    """Where persisted snapshots of large scopes' search indexes live, so the first search
    after a restart does not rebuild them: `auto` (a directory store's `index-cache`
    subdirectory; off for PostgreSQL), a directory, or `null` (off). A snapshot is validated
    (checksum, generation, tokenizer and embedder) and rebuilt when it fails."""
    index_cache_mib: float | None = Field(default=512, ge=0, le=1 << 30, allow_inf_nan=False)
    """Budget in MiB of this process's in-memory search indexes (both layers of every scope it
    served): past it the least recently used scopes' indexes are released, and rebuilt from the
    rows (or a snapshot) on their next search; never while a search or write uses them. About
    80 KiB per user with 20 memories, so the default keeps some 6,500 users resident. The most
    recently used scope is always kept, even when it alone is larger than the budget (set it
    above your largest scope: about 200 MiB per 100k memories). `null`: unbounded (memory grows
    with every user served). Also applied to a store object passed to `TdaiMemory.open` when set
    explicitly."""
    default_ttl_seconds: float | None = Field(default=None, gt=0, le=100 * 366 * 86_400)
    """Time to live (seconds) of a memory written by `add_memory` / `add_memories` without
    `expires_at` or `ttl`, counted from that write (an update renews it). `null` (the default):
    memories never expire. It fills only an expiry nobody stated: a JSONL import keeps the
    `expires_at` each line carries, `null` (never) included (a line without the field gets this
    default), and so does a `MemoryRecord` passed to `add_memories`; memories formed from
    conversations do not get it."""
    expiry_sweep_seconds: float = Field(default=60.0, ge=1.0, le=86_400.0)
    """How often the background sweep deletes expired memories (a bounded batch per pass; it
    also runs when the store opens). Expired memories are hidden from every read at once,
    whatever the sweep has done."""


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
    """Zone in which activity times are shown: `system`, an IANA name or `±HH:MM`. An unknown
    zone is used as `system`, with one warning, as the original plugin did."""

    @classmethod
    def _translate_upstream(cls, data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
        data = dict(data)
        for (src_section, src_key), (dst_section, dst_field) in _UPSTREAM_MOVED_KEYS.items():
            source = data.get(src_section)
            if not isinstance(source, dict) or src_key not in source:
                continue
            target = data.get(dst_section, {})
            if isinstance(target, dict) and not {dst_field, to_camel(dst_field)} & target.keys():
                data[dst_section] = {**target, dst_field: source[src_key]}
                notes.append(f"{src_section}.{src_key} is used as {dst_section}.{dst_field}")
        embedding = data.get("embedding")
        if isinstance(embedding, dict) and "recallTimeoutMs" in embedding:
            own = {"query_timeout_ms", "queryTimeoutMs"} & embedding.keys()
            value, limit = embedding["recallTimeoutMs"], _raw_recall_timeout(data.get("recall"))
            if not own and _is_int(value) and value >= limit:
                data["embedding"] = {k: v for k, v in embedding.items() if k != "recallTimeoutMs"}
                notes.append(
                    f"embedding.recallTimeoutMs ({value}) is not below recall.timeout_ms "
                    f"({limit}); the query embedding timeout is derived from recall.timeout_ms"
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def _top_level_language(cls, data: Any) -> Any:
        """Accept `language` at the top level (upstream layout) as `recall.language`."""
        if not isinstance(data, dict) or "language" not in data:
            return data
        data = dict(data)
        language = data.pop("language")
        recall = data.get("recall", {})
        if isinstance(recall, RecallConfig):
            recall = recall.model_dump()
        if isinstance(recall, dict):
            given = recall.get("language")
            if given is not None and given != language:
                msg = (
                    f"language is set twice with different values (top level {shown(language)}, "
                    f"recall.language {shown(given)}); keep one of them"
                )
                raise ValueError(msg)
            data["recall"] = {**recall, "language": language}
        return data

    @model_validator(mode="after")
    def _check_cross_field(self) -> Self:
        embedding = self.embedding
        if "query_timeout_ms" not in embedding.model_fields_set:
            derived = derive_query_timeout_ms(self.recall.timeout_ms)
            if derived != embedding.query_timeout_ms:
                values = {**embedding.__dict__, "query_timeout_ms": derived}
                replaced = EmbeddingConfig.model_construct(embedding.model_fields_set, **values)
                object.__setattr__(self, "embedding", replaced)  # frozen: set once, here
        elif embedding.query_timeout_ms >= self.recall.timeout_ms:
            msg = (
                f"embedding.query_timeout_ms ({embedding.query_timeout_ms}) must be below "
                f"recall.timeout_ms ({self.recall.timeout_ms}) so that a slow embedder degrades "
                "to keyword search instead of dropping the whole recall; leave it unset to "
                "derive it from recall.timeout_ms"
            )
            raise ValueError(msg)
        problem = _resolve_timezone(self.timezone)[1]
        if problem is not None:
            _warn_once(f"{problem}; using the system timezone")
        return self

    def to_dict(self, *, by_alias: bool = False) -> dict[str, Any]:
        """Plain JSON-compatible dictionary; `by_alias=True` writes camelCase keys.

        A derived `embedding.query_timeout_ms` is left out, so that a dumped configuration whose
        `recall.timeout_ms` is edited derives it again.
        """
        data = super().to_dict(by_alias=by_alias)
        if "query_timeout_ms" not in self.embedding.model_fields_set:
            data["embedding"].pop("queryTimeoutMs" if by_alias else "query_timeout_ms", None)
        return data

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Self:
        """Load a JSON file (snake_case or upstream camelCase keys)."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8-sig"))  # tolerate a byte-order mark
        except FileNotFoundError as exc:
            msg = f"config file {str(p)!r} does not exist"
            raise ConfigError(msg) from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            msg = f"config file {str(p)!r} is not readable JSON: {exc}"
            raise ConfigError(msg) from exc
        except RecursionError:
            msg = (
                f"config file {str(p)!r} nests its JSON too deeply to read; a configuration is "
                "at most three levels deep (see TdaiConfig)"
            )
            raise ConfigError(msg) from None
        except ValueError as exc:  # an integer of more than 4300 digits
            msg = (
                f"config file {str(p)!r} holds a value JSON cannot be read as ({exc}); use "
                "numbers within the documented ranges"
            )
            raise ConfigError(msg) from exc
        if not isinstance(data, dict):
            msg = f"config file {str(p)!r} must hold a JSON object, got {type(data).__name__}"
            raise ConfigError(msg)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, source=str(p)) from exc

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
        """The `tzinfo` for `timezone` (the system zone for `system` or an unknown zone)."""
        return _resolve_timezone(self.timezone)[0]


@functools.lru_cache(maxsize=64)
def _log_once(level: int, message: str) -> None:
    """Log a configuration note once per process (one config is validated more than once)."""
    logger.log(level, "configuration: %s", message)


def _warn_once(message: str) -> None:
    _log_once(logging.WARNING, message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _raw_recall_timeout(recall: object) -> int:
    """`recall.timeout_ms` of unvalidated input (the default when absent or not an integer)."""
    if isinstance(recall, RecallConfig):
        return recall.timeout_ms
    if isinstance(recall, dict):
        for key in ("timeout_ms", "timeoutMs"):
            value = recall.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return DEFAULT_RECALL_TIMEOUT_MS


def _drop_upstream_only(
    model: type[_ConfigModel], data: dict[str, Any], prefix: str
) -> tuple[dict[str, Any], list[str]]:
    """`data` without the keys `_UPSTREAM_ONLY_KEYS` lists for `model` and its sections.

    Returns the kept data and the dotted names of the dropped keys.
    """
    drop = _UPSTREAM_ONLY_KEYS.get(model._section, frozenset())
    kept = {k: v for k, v in data.items() if k not in drop}
    dropped = [f"{prefix}{k}" for k in data if k in drop]
    for name, info in model.model_fields.items():
        section = info.annotation
        if not (isinstance(section, type) and issubclass(section, _ConfigModel)):
            continue
        for key in dict.fromkeys((name, info.alias or name)):
            if isinstance(kept.get(key), dict):
                kept[key], more = _drop_upstream_only(section, kept[key], f"{prefix}{key}.")
                dropped += more
    return kept, dropped


@functools.lru_cache(maxsize=32)
def _resolve_timezone(name: str) -> tuple[Any, str | None]:
    """Resolve `system`, an IANA name or a `±HH:MM` offset to a tzinfo.

    Returns the zone and, when `name` is not a known zone, what is wrong with it (the zone is
    then the system zone). Cached per process: tools ask for it on every call, and `system`
    reads /etc/localtime.
    """
    import datetime as dt  # noqa: PLC0415 - keeps the module namespace small
    import re  # noqa: PLC0415

    if name == "system":
        return _system_timezone(), None
    m = re.fullmatch(r"([+-])(\d{2}):(\d{2})", name)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours > 23 or minutes > 59:
            return _resolve_timezone("system")[0], (
                f"timezone offset {shown(name)} is out of range; use -23:59..+23:59"
            )
        delta = dt.timedelta(hours=hours, minutes=minutes)
        return dt.timezone(-delta if m.group(1) == "-" else delta), None
    try:
        return ZoneInfo(name), None
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file
        return _resolve_timezone("system")[0], (
            f"timezone {shown(name)} is unknown; use 'system', an IANA name or ±HH:MM"
        )


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
