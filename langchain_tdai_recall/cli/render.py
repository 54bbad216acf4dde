"""Text and JSON output of the commands.

Hit tables, the recall view (shared by `recall` and `demo`), the import summary, and dataclasses
as JSON.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall.text.tags import KEY_MEMORIES_TAG, STANDING_RULES_TAG, USER_PROFILE_TAG

if TYPE_CHECKING:
    from collections.abc import Sequence

    from langchain_tdai_recall.types import ImportReport, MemoryHit, RecallResult

__all__ = [
    "one_line",
    "print_json",
    "recall_json",
    "render_hits",
    "render_import",
    "render_recall",
    "rule",
    "to_jsonable",
]

MAX_SKIPPED_SHOWN: Final = 20
"""Skipped import items listed in text output (all of them with `-v` or `--json`)."""


def to_jsonable(value: object) -> Any:
    """A dataclass (nested in dicts, lists, tuples) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: object) -> None:
    """Print `value` as indented JSON (non-ASCII kept)."""
    print(json.dumps(to_jsonable(value), ensure_ascii=False, indent=2))


def _fmt_score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def one_line(text: str, width: int = 100) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def rule(title: str) -> str:
    """A horizontal rule with a title."""
    return f"── {title} " + "─" * max(3, 72 - len(title))


def render_hits(hits: Sequence[MemoryHit]) -> list[str]:
    """A table of search hits: fused, keyword and vector scores, type, content."""
    if not hits:
        return ["(no matching memories)"]
    lines = [f"{'#':>2}  {'score':>7}  {'keyword':>7}  {'vector':>7}  {'type':<11}  content"]
    for i, h in enumerate(hits, 1):
        tag = h.type + (f"|{h.scene_name}" if h.scene_name else "")
        lines.append(
            f"{i:>2}  {h.score:>7.4f}  {_fmt_score(h.keyword_score):>7}  "
            f"{_fmt_score(h.embedding_score):>7}  {h.type:<11}  "
            f"{one_line(h.content, 70)}" + (f"  [{tag}]" if h.scene_name else "")
        )
    return lines


def render_recall(result: RecallResult | None, *, show_system: bool = True) -> list[str]:
    """The recall view: summary line, scored memories, pinned blocks, injected text."""
    if result is None:
        return ["recall returned nothing (disabled, timed out, or failed; see the log)"]
    timing = result.timings_ms.get("total")
    head = (
        f"strategy={result.strategy}  memories={len(result.memories)}  "
        f"truncated={result.truncated}  dropped={result.dropped}  "
        f"injected={result.injected_chars} chars"
        + (f"  time={timing:.1f} ms" if timing is not None else "")
        + (f"  error={result.error}" if result.error else "")
    )
    lines = [head]
    if result.memories:
        lines.append(f"{'#':>2}  {'score':>7}  {'keyword':>7}  {'vector':>7}  memory")
        for i, m in enumerate(result.memories, 1):
            tag = m.type + (f"|{m.scene_name}" if m.scene_name else "")
            lines.append(
                f"{i:>2}  {m.score:>7.4f}  {_fmt_score(m.keyword_score):>7}  "
                f"{_fmt_score(m.embedding_score):>7}  [{tag}] {one_line(m.content, 60)}"
            )
    pinned = len(result.standing_rules) + len(result.pinned) + len(result.profile)
    if pinned:
        blocks = ", ".join(
            f"<{tag}>"
            for tag, held in (
                (STANDING_RULES_TAG, result.standing_rules),
                (KEY_MEMORIES_TAG, result.pinned),
                (USER_PROFILE_TAG, result.profile),
            )
            if held
        )
        lines.append(
            f"+ {pinned} {'memory' if pinned == 1 else 'memories'} pinned in the system context "
            f"({blocks}): in every turn, whatever the score"
        )
    lines.append(rule("prepend_context (put before the user's message)"))
    if result.prepend_context:
        lines.append(result.prepend_context)
    elif result.strategy == "skipped":
        lines.append("(none: the text is too short to search)")
    elif pinned:
        lines.append(
            f"(none: no memory passed the score threshold for this message; {pinned} "
            f"{'is' if pinned == 1 else 'are'} pinned in the system context)"
        )
    else:
        lines.append("(none: no memory passed the score threshold)")
    if show_system:
        lines.append(rule("append_system_context (appended to the system message)"))
        lines.append(result.append_system_context or "(none)")
    return lines


def recall_json(result: RecallResult | None) -> Any:
    """A recall result as JSON, with its injected size."""
    if result is None:
        return None
    data = to_jsonable(result)
    data["injected_chars"] = result.injected_chars
    return data


def render_import(report: ImportReport, seconds: float, *, verbose: bool) -> list[str]:
    """The summary of an upstream import; skipped items cut short unless `verbose`."""
    lines = [
        f"imported {report.source} in {seconds:.1f} s",
        f"  memories written:  {report.memories}",
        f"  messages written:  {report.messages}",
        f"  scenes written:    {report.scenes}",
        f"  persona written:   {'yes' if report.persona else 'no'}",
        f"  unchanged:         {report.unchanged}",
        f"  skipped:           {len(report.skipped)}",
    ]
    shown = report.skipped if verbose else report.skipped[:MAX_SKIPPED_SHOWN]
    lines.extend(f"    - {item}" for item in shown)
    if len(shown) < len(report.skipped):
        lines.append(f"    … {len(report.skipped) - len(shown)} more (use -v or --json)")
    return lines
