"""Settings of memory formation: `extraction`, `pipeline` and `persona` sections of `TdaiConfig`.

They follow the rules of `langchain_tdai_recall.config`: snake_case fields, the original
plugin's camelCase keys (`everyNConversations`, `l1IdleTimeoutSeconds`, `maxScenes`, ...) load
from dicts and JSON unchanged, every field is bounded, and switching something off takes an
explicit `enabled`. Upstream keys whose job is done differently here are accepted and documented
as such on their field, so every valid upstream configuration loads.

The models live in a module of their own so that formation can grow without touching the recall
settings; `TdaiConfig` has one field per section. The module stands below both `config.py`, which
composes them into `TdaiConfig`, and `formation/`, which reads them, so neither imports the
other's floor; `langchain_tdai_recall.formation.config` is their documented path and hands them on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from langchain_tdai_recall._settings.base import ConfigModel

__all__ = [
    "ExtractionConfig",
    "PersonaConfig",
    "PipelineConfig",
    "StructuredOutputMethod",
]

StructuredOutputMethod = Literal["auto", "function_calling", "json_schema", "json_mode", "prompt"]
"""How the chat model is asked for structured answers.

- `auto`: tool calling when the model supports it, else `prompt`.
- `function_calling`, `json_schema`, `json_mode`: passed to the model's `with_structured_output`;
  `json_mode` also puts the schema (and the word JSON, which OpenAI requires) in the prompt,
  since the provider's JSON mode carries none.
- `prompt`: the schema is described in the prompt and the JSON answer is parsed tolerantly.
"""


class ExtractionConfig(ConfigModel):
    """L0 → L1: extraction windows, limits and consolidation (upstream `extraction.*`)."""

    enabled: bool = True
    """Form memories when a chat model is configured (`extraction_model=` or `model`)."""
    enable_dedup: bool = True
    """Ask the model to consolidate new memories with similar stored ones (add / update /
    merge / delete / skip). Exact duplicates are never stored twice either way."""
    model: str | None = None
    """Chat model for `init_chat_model`, as `provider:model` (or upstream `provider/model`).
    A model object passed to `TdaiMemory.open(extraction_model=...)` takes precedence."""
    max_memories_per_session: int = Field(default=20, ge=1, le=100)
    """Most memories kept from one extraction window; the highest priorities win."""
    window_messages: int = Field(default=20, ge=1, le=500)
    """Most new messages in one extraction window."""
    window_chars: int = Field(default=12_000, ge=500, le=500_000)
    """Most characters of new messages in one window (after each is cut to `message_chars`)."""
    message_chars: int = Field(default=2_000, ge=100, le=100_000)
    """Longer messages are cut to this many characters in the prompt."""
    background_messages: int = Field(default=4, ge=0, le=50)
    """Earlier messages shown before the window as context (never extracted from)."""
    background_chars: int = Field(default=1_500, ge=0, le=50_000)
    """Most characters of background in one prompt."""
    content_max_chars: int = Field(default=400, ge=40, le=10_000)
    """Longer memory texts from the model are cut to this many characters."""
    timeout_seconds: float = Field(default=180.0, gt=0, le=3_600)
    """Bound on one model call; a slower answer counts as a failure and is retried later."""
    candidate_top_k: int = Field(
        default=5,
        ge=1,
        le=50,
        validation_alias=AliasChoices("candidate_top_k", "candidateTopK", "conflictRecallTopK"),
    )
    """Stored memories offered to consolidation per new memory (upstream
    `embedding.conflictRecallTopK` is accepted here as `conflictRecallTopK`)."""
    candidate_floor: float = Field(default=0.4, ge=0.0, le=1.0)
    """Relevance a stored memory needs to be a consolidation candidate: the `score` of the search
    recall uses (0..1; with the default hybrid strategy 0.7 x cosine + 0.3 x keyword coverage,
    keyword coverage alone without an embedder). With no candidate at or above it, a new memory
    is added without a model call. 0.4 offers every reworded duplicate and every update or
    contradiction of our measured pairs (a move from Berlin to Paris scores 0.43) while it
    offers 2 of 15 unrelated facts about the same person (`benchmarks/formation/
    candidate_floor.py`); a missed contradiction leaves two conflicting memories, an extra
    candidate only costs prompt tokens."""
    structured_output: StructuredOutputMethod = "auto"
    """How structured answers are requested (see `StructuredOutputMethod`)."""
    language: Literal["auto", "zh", "en"] = "auto"
    """Language of the prompts and of the memories: `auto` follows the user's messages."""
    allow_standing_rules: bool = True
    """Keep priority -1 (an absolute standing rule) when the user stated it in their own
    message (see "Memory formation" in the docs); `False` stores every extracted -1 as
    priority 90 (`extraction.STANDING_RULE_FALLBACK`), and a rule drawn from steering text at
    most at 20 (`extraction.STEERING_PRIORITY_CAP`) either way."""
    retry_base_seconds: float = Field(default=30.0, gt=0, le=86_400)
    """Wait before retrying a failed window; doubled per consecutive failure."""
    retry_max_seconds: float = Field(default=3_600.0, gt=0, le=604_800)
    """Longest wait between retries. Failed windows are retried forever, never skipped."""
    max_windows_per_run: int = Field(default=50, ge=1, le=10_000)
    """Windows one background run extracts before yielding to other scopes."""


class PipelineConfig(ConfigModel):
    """When formation runs (upstream `pipeline.*`)."""

    enabled: bool = True
    """Form memories in the background (turn counts, idle sessions, work pending at open).
    `False` forms only on `extract()`, `flush()` and `close()`."""
    every_n_conversations: int = Field(default=5, ge=1, le=10_000)
    """Extract after every N captured turns of a session."""
    enable_warmup: bool = True
    """Start new sessions at 1 turn and double after each run (1, 2, 4, … N)."""
    l1_idle_timeout_seconds: float = Field(default=600.0, gt=0, le=604_800)
    """Extract a session's pending turns once it has been quiet this long."""
    l2_delay_after_l1_seconds: float = Field(default=10.0, ge=0, le=86_400)
    """Wait after an extraction before updating scenes, so a burst updates them once."""
    l2_min_interval_seconds: float = Field(default=900.0, ge=0, le=604_800)
    """Shortest time between two scene updates of a scope (a flush does not wait)."""
    l2_max_interval_seconds: float = Field(default=3_600.0, ge=0, le=604_800)
    """Accepted for compatibility. Scenes are updated whenever new memories wait for them,
    so no periodic run is needed."""
    session_active_window_hours: float = Field(default=24.0, gt=0, le=8_760)
    """Sessions quiet this long are dropped from the scheduler's memory; their state stays in
    the store and is reloaded if they speak again."""
    close_timeout_seconds: float = Field(default=10.0, ge=0, le=3_600)
    """How long `close()` waits for pending formation; what is left resumes at the next open."""
    flush_on_close: bool = True
    """Extract pending turns when the store is closed (within `close_timeout_seconds`)."""
    max_concurrent_runs: int = Field(default=2, ge=1, le=64)
    """Scopes formed at the same time in one process (one run per scope, always)."""


class PersonaConfig(ConfigModel):
    """L1 → L2 scenes → L3 persona (upstream `persona.*`)."""

    enabled: bool = True
    """Update scenes and the persona from newly formed memories."""
    trigger_every_n: int = Field(default=50, ge=1, le=100_000)
    """Background runs rewrite the persona after this many memories were written, updated or
    deleted (and whenever none exists yet); explicit runs (`extract()`, `flush()`, `close()`)
    after any such change, so a flushed store's persona reflects its latest memories."""
    max_scenes: int = Field(default=15, ge=1, le=200)
    """Most scene blocks per scope; the code refuses edits that would exceed it. The upstream
    key `maxScenes` also sets `recall.max_scenes` (the scenes listed in the navigation) unless
    that is set."""
    backup_count: int = Field(default=3, ge=0, le=1_000)
    """Accepted for compatibility. A failed update never touches the stored persona, so no
    backup files are needed."""
    scene_backup_count: int = Field(default=10, ge=0, le=1_000)
    """Accepted for compatibility (see `backup_count`)."""
    model: str | None = None
    """Chat model for scenes and persona (`provider:model`); default: the extraction model."""
    scene_max_chars: int = Field(default=1_500, ge=200, le=100_000)
    """Longer scene bodies are cut to this many characters."""
    summary_max_chars: int = Field(default=200, ge=20, le=2_000)
    """Longer scene summaries are cut to this many characters."""
    persona_max_chars: int = Field(default=2_000, ge=200, le=100_000)
    """Longer personas are cut to this many characters."""
    scene_batch: int = Field(default=20, ge=1, le=500)
    """New memories per scene update call."""
    max_new_scenes_per_run: int = Field(default=2, ge=0, le=100)
    """Most scenes one update may create (the rest of its creates are refused)."""
