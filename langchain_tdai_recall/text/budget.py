"""Code-point budgets for injected memory lines (SPEC §2 rule 6).

Python strings index by code point, so every length here is a code-point count: an emoji or a
CJK character counts once, and a cut never splits one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MIN_PARTIAL_LINE_CHARS", "BudgetOutcome", "apply_budget", "truncate_line"]

MIN_PARTIAL_LINE_CHARS: Final = 40
"""A line cut by the total budget is kept only if at least this many code points fit."""

_SHORT_MARKER: Final = "…"
_JOINERS: Final = "\u200d\ufe0e\ufe0f"


def truncate_line(line: str, limit: int, suffix: str) -> str:
    """Cut `line` to at most `limit` code points, marking the cut.

    The marker is `suffix` when the limit leaves room for it and some text, otherwise a single
    `…`, so a cut line is always recognisable. A line that fits is returned unchanged.
    """
    if limit <= 0 or len(line) <= limit:
        return line
    marker = suffix if limit > len(suffix) else _SHORT_MARKER
    head = line[: max(limit - len(marker), 0)].rstrip().rstrip(_JOINERS)
    return head + marker


@dataclass(frozen=True, slots=True)
class BudgetOutcome:
    """Lines that survived the budget, in order."""

    lines: list[str]
    """Kept lines (possibly cut)."""
    truncated: list[bool]
    """Per kept line: whether it was cut."""
    dropped: int
    """Lines discarded by the total budget."""


def apply_budget(lines: list[str], *, per_line: int, total: int, suffix: str) -> BudgetOutcome:
    """Apply the per-line and total limits to ranked lines; 0 disables a limit.

    Lines are taken in order. Each is first cut to `per_line`. Against `total` (which counts the
    lines plus one separator between consecutive lines), a line that does not fit is kept, cut to
    the remaining room, only when at least `MIN_PARTIAL_LINE_CHARS` code points remain; either way
    every later line is dropped.
    """
    kept: list[str] = []
    cut: list[bool] = []
    used = 0
    for index, line in enumerate(lines):
        candidate = truncate_line(line, per_line, suffix) if per_line > 0 else line
        was_cut = candidate != line
        if total <= 0:
            kept.append(candidate)
            cut.append(was_cut)
            continue
        separator = 1 if kept else 0
        remaining = total - used - separator
        if len(candidate) <= remaining:
            kept.append(candidate)
            cut.append(was_cut)
            used += separator + len(candidate)
            continue
        if remaining >= MIN_PARTIAL_LINE_CHARS:
            kept.append(truncate_line(candidate, remaining, suffix))
            cut.append(True)
            return BudgetOutcome(kept, cut, len(lines) - index - 1)
        return BudgetOutcome(kept, cut, len(lines) - index)
    return BudgetOutcome(kept, cut, 0)
