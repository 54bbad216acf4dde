"""The typed report of a formation run and the `tdai_extraction` event built from it.

`memory.extract()` / `flush()` return an `ExtractionReport`; every run (including background
ones) emits the `tdai_extraction` LangChain custom event with the same numbers. Neither holds
memory text: counts, decision totals, token usage, timings and error reasons only, so they can
go to tracing and logs at any level.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

__all__ = ["EXTRACTION_EVENT", "ExtractionReport", "ReportBuilder"]

EXTRACTION_EVENT: Final = "tdai_extraction"
"""Name of the LangChain custom event emitted after every formation run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractionReport:
    """What one formation run (or several, combined) did.

    Example:
        ```python
        from langchain_tdai_recall import TdaiMemory
        from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel

        with TdaiMemory.open(
            None, embeddings=HashEmbeddings(), extraction_model=ScriptedFormationModel()
        ) as memory:
            memory.record_messages(
                [{"role": "user", "content": "I am vegetarian."}], session_key="s1"
            )
            report = memory.extract()
            assert report.ok and report.decisions["add"] == 1
        ```
    """

    scopes: int = 0
    """Scopes worked on."""
    sessions: int = 0
    """Sessions whose pending messages were read."""
    windows: int = 0
    """Extraction windows answered validly (the cursor moved past each)."""
    failed_windows: int = 0
    """Windows whose call failed or whose answer was invalid (the cursor stayed; retried)."""
    messages: int = 0
    """L0 messages the cursors moved past."""
    extracted: int = 0
    """Memories the model proposed that passed validation."""
    rejected: int = 0
    """Proposed memories not stored because a one-message window's answer held more than
    `extraction.max_memories_per_session` (the least important; a longer window is split and
    asked again instead, see `split_windows`)."""
    junk: int = 0
    """Items of model answers dropped as junk (not an object, text that is not a non-empty
    string, an unknown type, action or operation); never stored. Their answer was not used:
    its window, batch or scene queue failed and is retried (`failed_windows`, `errors`)."""
    unrepaired: int = 0
    """Items of model answers with a field that cannot be repaired (a priority outside -1..100
    or not a whole number, a text field that is not text); their answer was retried like one
    holding junk."""
    repaired: int = 0
    """Fields of used answers repaired where their meaning is unambiguous (`"80"`, `"Persona"`,
    an id written as a string, a renamed field, an epoch time)."""
    dropped_fields: int = 0
    """Annotations of stored memories left out because they were unusable: activity times that
    are no time (or an end before the start), source ids that name no new message of the
    window, a situation that is not text. The memory itself is stored."""
    split_windows: int = 0
    """Windows whose answer held more memories than `max_memories_per_session`: asked again
    in halves, so that none is cut."""
    downgraded_rules: int = 0
    """Priorities lowered by the prompt-injection rules: a `-1` that did not qualify (kept as
    90), or a memory from steering text (capped at 20, below every pin level and the profile)."""
    decisions: dict[str, int] = field(default_factory=dict)
    """Consolidation totals: `add`, `update`, `merge`, `delete`, `skip`, `duplicate`."""
    invalid_decisions: int = 0
    """Decisions that named unknown memories or targets (fell back to add, or ignored)."""
    written: int = 0
    """Memory rows written (new and updated)."""
    deleted: int = 0
    """Memory rows deleted (contradicted or merged into another)."""
    scenes: dict[str, int] = field(default_factory=dict)
    """Scene edits applied (`created`, `updated`, `merged`, `deleted`) and `refused`."""
    persona_updated: bool = False
    """Whether a persona was written."""
    model_calls: int = 0
    """Chat model calls made."""
    input_tokens: int = 0
    """Prompt tokens reported by the model."""
    output_tokens: int = 0
    """Completion tokens reported by the model."""
    prompt_chars: tuple[int, ...] = ()
    """Characters of each extraction prompt (system + user), in call order."""
    pending_messages: int = 0
    """L0 messages still past a cursor in the scopes worked on (retried later)."""
    locked_scopes: int = 0
    """Scopes skipped because another process was forming them."""
    errors: tuple[str, ...] = ()
    """One line per failure (no memory text)."""
    elapsed_ms: float = 0.0
    """Wall time."""

    @property
    def ok(self) -> bool:
        """Whether nothing failed."""
        return not self.errors and not self.failed_windows

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def event(self, **extra: Any) -> dict[str, Any]:
        """The `tdai_extraction` event payload (plain JSON-compatible data)."""
        data = asdict(self)
        data["prompt_chars"] = list(self.prompt_chars)
        data["errors"] = list(self.errors)
        data["ok"] = self.ok
        data["total_tokens"] = self.total_tokens
        data.update(extra)
        return data

    @classmethod
    def combine(cls, reports: Iterable[ExtractionReport]) -> ExtractionReport:
        """Sum several reports (e.g. one per scope)."""
        builder = ReportBuilder()
        for report in reports:
            builder.add(report)
        return builder.build()


_SUMMED: Final = (
    "scopes",
    "sessions",
    "windows",
    "failed_windows",
    "messages",
    "extracted",
    "rejected",
    "junk",
    "unrepaired",
    "repaired",
    "dropped_fields",
    "split_windows",
    "downgraded_rules",
    "invalid_decisions",
    "written",
    "deleted",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "pending_messages",
    "locked_scopes",
    "elapsed_ms",
)


class ReportBuilder:
    """Mutable accumulator of an `ExtractionReport`."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = dict.fromkeys(_SUMMED, 0)
        self.decisions: dict[str, int] = {}
        self.scenes: dict[str, int] = {}
        self.persona_updated = False
        self.prompt_chars: list[int] = []
        self.errors: list[str] = []

    def bump(self, name: str, value: float = 1) -> None:
        """Add to one counter."""
        self.counts[name] += value

    def decide(self, counts: dict[str, int]) -> None:
        """Add consolidation decision totals."""
        for key, value in counts.items():
            self.decisions[key] = self.decisions.get(key, 0) + value

    def scene(self, **counts: int) -> None:
        """Add scene edit totals."""
        for key, value in counts.items():
            self.scenes[key] = self.scenes.get(key, 0) + value

    def call(self, input_tokens: int, output_tokens: int) -> None:
        """Count one model call."""
        self.counts["model_calls"] += 1
        self.counts["input_tokens"] += input_tokens
        self.counts["output_tokens"] += output_tokens

    def error(self, text: str) -> None:
        """Record one failure line."""
        self.errors.append(" ".join(text.split())[:300])

    def add(self, report: ExtractionReport) -> None:
        """Fold a finished report in."""
        for name in _SUMMED:
            self.counts[name] += getattr(report, name)
        self.decide(report.decisions)
        self.scene(**report.scenes)
        self.persona_updated |= report.persona_updated
        self.prompt_chars += report.prompt_chars
        self.errors += report.errors

    def build(self) -> ExtractionReport:
        """The frozen report."""
        c = self.counts
        return ExtractionReport(
            **{k: int(v) for k, v in c.items() if k != "elapsed_ms"},
            elapsed_ms=round(float(c["elapsed_ms"]), 3),
            decisions=dict(self.decisions),
            scenes=dict(self.scenes),
            persona_updated=self.persona_updated,
            prompt_chars=tuple(self.prompt_chars),
            errors=tuple(self.errors),
        )
