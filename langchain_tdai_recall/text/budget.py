"""Code-point budgets for injected memory lines (SPEC §2 rule 6).

Python strings index by code point, so every length here is a code-point count: an emoji or a
CJK character counts once, and a cut never splits one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MIN_CUT_CONTENT_CHARS",
    "MIN_PARTIAL_LINE_CHARS",
    "BudgetOutcome",
    "apply_budget",
    "truncate_line",
]

MIN_PARTIAL_LINE_CHARS: Final = 40
"""A line cut by the total budget is kept only if at least this many code points fit."""

MIN_CUT_CONTENT_CHARS: Final = 10
"""A cut line ends with the long truncation suffix only when at least this many code points of
its content (after a `- [type] ` prefix) stay before it; otherwise it ends with `…`, so a line
never shows the suffix without content. A cut line also keeps at least this many code points of
its content (more when they would end in a fragment of markup) even when the limit is smaller,
so a line is never its `- [type|scene] ` head alone."""

_SHORT_MARKER: Final = "…"
_MAX_EXTRA_CHARS: Final = 64
"""How far past its first `MIN_CUT_CONTENT_CHARS` a cut below the limit looks for content."""
_JOINERS: Final = "\u200d\ufe0e\ufe0f"
_LINE_PREFIX_RE: Final = re.compile(r"- \[[^\]\n]*\] ")
"""The `- [type] ` or `- [type|scene] ` head of a memory line."""
_DANGLING_RE: Final = re.compile(
    r"(?:[<\uff1c\ufe64]|&lt;)[\s/|\uff5c]*+[\w:.\-/|\uff5c]*+\Z|&(?:lt?)?\Z"
)
"""An unfinished tag, escaped tag or `&lt;` entity at the end of a cut (`<relev`, `&lt;/sys`,
`&l`): removed, so a cut never leaves a fragment of markup."""


def _cut(line: str, length: int) -> str:
    """The first `length` code points of `line`, without trailing spaces, joiners or markup."""
    head = line[: max(length, 0)].rstrip().rstrip(_JOINERS)
    dangling = _DANGLING_RE.search(head)
    if dangling is not None:
        head = head[: dangling.start()].rstrip().rstrip(_JOINERS)
    return head


def truncate_line(line: str, limit: int, suffix: str) -> str:
    """Cut `line` to at most `limit` code points, marking the cut.

    The marker is `suffix` when the limit leaves room for it and at least
    `MIN_CUT_CONTENT_CHARS` of content, otherwise a single `…`, so a cut line is always
    recognisable and never all marker. A cut never ends in a fragment of a tag or of `&lt;`.
    A line that fits is returned unchanged.

    A limit too small for the line's `- [type|scene] ` head and `MIN_CUT_CONTENT_CHARS` of its
    content is exceeded: the cut keeps them (a line is never its head alone), or returns the
    whole line when it is not much longer.
    """
    if limit <= 0 or len(line) <= limit:
        return line
    prefix = _LINE_PREFIX_RE.match(line)
    content_start = prefix.end() if prefix else 0
    if limit > len(suffix):
        head = _cut(line, limit - len(suffix))
        if len(head) - content_start >= MIN_CUT_CONTENT_CHARS:
            return head + suffix
    head = _cut(line, limit - len(_SHORT_MARKER))
    if len(head) - content_start >= MIN_CUT_CONTENT_CHARS:
        return head + _SHORT_MARKER
    # the limit leaves (almost) no content: keep the head and the first words anyway (looking a
    # bounded way past a fragment of markup; a line that is one long tag keeps the short cut)
    start = content_start + MIN_CUT_CONTENT_CHARS
    for length in range(start, min(len(line), start + _MAX_EXTRA_CHARS)):
        longer = _cut(line, length)
        if len(longer) > content_start:
            return longer + _SHORT_MARKER if len(longer) + len(_SHORT_MARKER) < len(line) else line
    return line if len(line) < start + _MAX_EXTRA_CHARS else head + _SHORT_MARKER


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
        partial = truncate_line(line, remaining, suffix)  # never cut a cut line again
        if remaining >= MIN_PARTIAL_LINE_CHARS and len(partial) <= remaining:
            kept.append(partial)
            cut.append(True)
            return BudgetOutcome(kept, cut, len(lines) - index - 1)
        return BudgetOutcome(kept, cut, len(lines) - index)
    return BudgetOutcome(kept, cut, 0)
