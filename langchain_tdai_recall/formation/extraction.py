"""L0 → L1 extraction: one bounded window of a session's messages → validated new memories.

A window is the next run of a session's L0 messages past its cursor (the L0 row id, a unique
monotonic key), capped both in messages and in characters, with a few earlier messages as
background. Messages are shown to the model under short aliases (`m1`, `m2`, …; background
`b1`, …) so that the ids it cites can be checked exactly.

Everything the prompt asks for is enforced here again, because a model's answer is only a
proposal (upstream gaps G-X2, G-X9, G-X11, G-X12, G-X20):

- content is stripped, non-empty and cut to `content_max_chars`;
- priority is clamped to 0..100; `-1` (an absolute standing rule) survives only under the rule
  of `standing_rule_allowed` below, otherwise it becomes `STANDING_RULE_FALLBACK`;
- a memory drawn from text that talks to the memory system or carries role or chat-template
  markers (`steers`) gets at most `STEERING_PRIORITY_CAP`, never `-1`: it is never pinned into
  the system prompt;
- source ids must be aliases of *this window's* new messages (background and unknown ids are
  dropped), and are stored as the real L0 ids;
- activity times must parse as ISO 8601; they are rewritten in the configured timezone (a date
  stays a date), and an end before the start is dropped;
- at most `max_memories_per_session` memories per window, the highest priorities kept.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_tdai_recall.formation.config import ExtractionConfig
from langchain_tdai_recall.formation.prompts import Lang, detect_language
from langchain_tdai_recall.formation.schemas import ExtractionAnswer, MemoryDraft
from langchain_tdai_recall.stores.formation import L0Message
from langchain_tdai_recall.text.lookalike import fold
from langchain_tdai_recall.types import MemoryType

__all__ = [
    "STANDING_RULE_FALLBACK",
    "STEERING_PRIORITY_CAP",
    "L0Message",
    "NewMemory",
    "Validated",
    "Window",
    "build_window",
    "parse_activity_time",
    "standing_rule_allowed",
    "steering_cap",
    "steers",
    "validate_answer",
]

STANDING_RULE_FALLBACK: Final = 90
"""Priority given to a `-1` rule that does not pass `standing_rule_allowed` for a reason other
than steering (the assistant's words, no cited message, not an instruction, or
`allow_standing_rules=False`): an important instruction the user can see and correct, but not
an absolute one."""

STEERING_PRIORITY_CAP: Final = 20
"""Highest priority of a memory drawn from steering text (`steers`): a minor memory, left to
search. Every pin level (`recall.pin_priority`, `recall.pin_instruction_priority`) is at least
60 and the user profile takes memories of priority 30 or more (`stores._index.profile`), so such a
memory never reaches the system prompt unless a message is about it, and is never a `-1`
rule."""

_SITUATION_CHARS: Final = 80
_ELLIPSIS: Final = "…"
_SOURCE_LIMIT: Final = 50

_STEERING_RE: Final = re.compile(
    r"standing rule|absolute rule|global rule|system prompt|system message|developer message|"
    r"(?:ignore|disregard) (?:all |any |the |your )?(?:previous |above |prior |earlier )?"
    r"(?:instructions?|rules|prompts?|directions|guidelines|system)|"
    r"jailbreak|memory system|priorit\w*\W{0,3}(?:of|to|=|:|is|at)?\W{0,3}-?\d|"
    r"<\s*/?\s*(?:system|assistant|user|developer|instruction|tool)\b|\[\s*system\s*\]|"
    r"^\s*(?:#{1,4}\s*)?(?:system|assistant|developer)\s*:|"
    r"<\|[^|<>\n]{0,40}\|>|\b(?:im_start|im_end|endoftext|eot_id|start_header_id)\b|"
    r"\[\s*/?\s*inst\s*\]|<<\s*/?\s*sys\s*>>|<\s*/?\s*(?:start|end)_of_turn\s*>|"
    r"优先级\s*[:：为是]?\s*-?\d|最高优先|系统提示|系统消息|忽略(?:之前|以上|前面|上面)[^。\n]{0,6}(?:指令|规则|提示|设定|要求)|绝对规则|全局规则|"
    r"提取器|记忆系统",
    re.IGNORECASE | re.MULTILINE,
)
"""Text that talks to the memory system rather than stating the user's own rule (standing or
absolute rules, system prompts, "ignore previous", a priority with a number, in English and
Chinese), and role or chat-template markers (`<system>`, `<|im_start|>`, `[INST]`, `<<SYS>>`,
`<start_of_turn>`, `SYSTEM:` at a line start); matched on the text and on its look-alike fold
(`text.lookalike`)."""

_RULE_WORDS_RE: Final = re.compile(
    r"priorit|disregard|ignore (?:all |any |the )?(?:previous|above|prior)|extractor|extraction|"
    r"(?<![\w.])-1(?![\w.])|优先级|忽略(?:之前|以上|前面|上面)",
    re.IGNORECASE,
)
"""Words that alone do not make text steering ("priority" in ordinary speech, a tooth
extraction, "ignore the previous message") but are enough to refuse it an absolute `-1`."""


def steers(text: str) -> bool:
    """Whether `text` talks to the memory system or carries role or chat-template markers."""
    return bool(_STEERING_RE.search(text) or _STEERING_RE.search(fold(text)[0]))


def steering_cap(priority: int) -> int:
    """`priority` lowered to `STEERING_PRIORITY_CAP` (a `-1` too)."""
    return STEERING_PRIORITY_CAP if priority == -1 else min(priority, STEERING_PRIORITY_CAP)


@dataclass(frozen=True, slots=True)
class Window:
    """A bounded run of new messages past a cursor, plus background."""

    messages: tuple[L0Message, ...]
    """New messages, oldest first (never empty)."""
    background: tuple[L0Message, ...]
    """Earlier messages shown for context, oldest first."""
    start_cursor: int
    """The cursor before this window."""

    @property
    def end_cursor(self) -> int:
        """The cursor after this window: its last message's row id."""
        return self.messages[-1].rowid

    @property
    def aliases(self) -> dict[str, L0Message]:
        """`m1`, `m2`, … → new message."""
        return {f"m{i}": m for i, m in enumerate(self.messages, 1)}


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A validated memory candidate from one window."""

    content: str
    type: MemoryType
    priority: int
    situation: str
    activity_start_time: str | None
    activity_end_time: str | None
    source_ids: tuple[str, ...]
    steered: bool = False
    """Drawn from steering text (`steers`): its priority stays at most
    `STEERING_PRIORITY_CAP`, also when consolidation merges it."""


@dataclass(slots=True)
class Validated:
    """The memories kept from one answer and what validation changed."""

    memories: list[NewMemory] = field(default_factory=list)
    situation: str = ""
    rejected: int = 0
    """Items dropped (empty content)."""
    capped: int = 0
    """Items beyond `max_memories_per_session` (lowest priorities)."""
    downgraded_rules: int = 0
    """`-1` priorities that did not pass `standing_rule_allowed`, and priorities lowered to
    `STEERING_PRIORITY_CAP` because the memory comes from steering text."""
    dropped_source_ids: int = 0
    """Cited ids that were not new messages of the window."""
    fixed_times: int = 0
    """Activity times dropped (unparseable, or an end before the start)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + _ELLIPSIS


def build_window(
    new_rows: Sequence[L0Message],
    background_rows: Sequence[L0Message],
    *,
    start_cursor: int,
    config: ExtractionConfig,
    max_messages: int | None = None,
) -> Window | None:
    """The window over `new_rows` (oldest first, all past `start_cursor`); `None` if empty.

    At most `max_messages` (default `window_messages`) messages and `window_chars` characters
    (counting each message cut to `message_chars`); the first message is always included.
    Background: the last `background_messages` of `background_rows` within
    `background_chars`.
    """
    limit = min(max_messages or config.window_messages, config.window_messages)
    picked: list[L0Message] = []
    used = 0
    for row in new_rows[:limit]:
        size = min(len(row.content), config.message_chars)
        if picked and used + size > config.window_chars:
            break
        picked.append(row)
        used += size
    if not picked:
        return None
    background: list[L0Message] = []
    budget = config.background_chars
    for row in reversed(
        background_rows[-config.background_messages :] if config.background_messages else []
    ):
        size = min(len(row.content), config.message_chars)
        if size > budget:
            break
        background.insert(0, row)
        budget -= size
    return Window(tuple(picked), tuple(background), start_cursor)


def _local_time(recorded_at: str, tz: Any) -> str:
    try:
        moment = dt.datetime.fromisoformat(recorded_at)
    except ValueError:
        return recorded_at
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(tz).isoformat(timespec="minutes")


def window_items(
    window: Window, tz: Any, *, message_chars: int
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The prompt items of a window: background (`b1`…) and new messages (`m1`…)."""

    def item(alias: str, m: L0Message, limit: int) -> dict[str, object]:
        return {
            "id": alias,
            "role": m.role,
            "time": _local_time(m.recorded_at, tz),
            "text": _cut(m.content, limit),
        }

    background = [
        item(f"b{i}", m, min(message_chars, 500)) for i, m in enumerate(window.background, 1)
    ]
    new = [item(alias, m, message_chars) for alias, m in window.aliases.items()]
    return background, new


def window_language(window: Window, configured: str) -> Lang:
    """The language memories are written in: configured, else the user's messages."""
    if configured in ("zh", "en"):
        return configured  # type: ignore[return-value]
    users = [m.content for m in (*window.background, *window.messages) if m.role == "user"]
    return detect_language(users or [m.content for m in window.messages])


def parse_activity_time(
    value: object, tz: Any, *, end: bool = False
) -> tuple[str, dt.datetime] | None:
    """An ISO date or date-time in the configured zone, with the instant used to order it.

    A date stays a date (`2025-05-01`); a date-time without an offset is read in `tz`, one with
    an offset is converted to `tz`. For an end time a date means the end of that day. Anything
    else is `None`.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            day = dt.date.fromisoformat(text)
        except ValueError:
            return None
        moment = dt.datetime.combine(day, dt.time.max if end else dt.time.min, tzinfo=tz)
        return day.isoformat(), moment
    try:
        moment = dt.datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        return None
    moment = moment.replace(tzinfo=tz) if moment.tzinfo is None else moment.astimezone(tz)
    spec = "minutes" if moment.second == 0 and moment.microsecond == 0 else "seconds"
    return moment.isoformat(timespec=spec), moment


def standing_rule_allowed(draft_type: str, sources: Iterable[L0Message]) -> bool:
    """Whether an extracted `-1` priority (an absolute standing rule) may be kept.

    The rule (G-X20): user text alone must not be able to mint an absolute rule by talking to
    the memory system. A `-1` is kept only when

    1. the memory is an `instruction`;
    2. it cites at least one new message, and every cited message is the user's own (never the
       assistant's, never background); and
    3. none of the cited messages talks about priorities, rules, system prompts, "ignore the
       above", role or chat-template markers or the memory system itself (`_STEERING_RE` and
       `_RULE_WORDS_RE`, English and Chinese).

    A rule stated in plain words ("never call me by my surname", "以后都用中文回答") passes.
    A `-1` that fails 1, 2 or the rule words becomes an important instruction
    (`STANDING_RULE_FALLBACK`) the user can see and correct; one drawn from steering text
    (`steers`) is capped at `STEERING_PRIORITY_CAP` by `validate_answer` instead, so it is
    never pinned into the system prompt.
    """
    cited = list(sources)
    if draft_type != "instruction" or not cited:
        return False
    return all(
        m.role == "user" and not steers(m.content) and not _RULE_WORDS_RE.search(m.content)
        for m in cited
    )


def validate_answer(
    answer: ExtractionAnswer,
    window: Window,
    *,
    config: ExtractionConfig,
    tz: Any,
    previous_situation: str,
) -> Validated:
    """Apply every limit of the module docstring to one extraction answer."""
    out = Validated()
    aliases = window.aliases
    by_id = {m.id: m for m in window.messages}
    situation = _cut(" ".join(answer.situation.split()), _SITUATION_CHARS)
    out.situation = situation or previous_situation
    kept: list[tuple[int, NewMemory]] = []
    for order, draft in enumerate(answer.memories):
        memory = _validate_one(draft, aliases, by_id, window.messages, out, config=config, tz=tz)
        if memory is not None:
            kept.append((order, memory))
    limit = config.max_memories_per_session
    if len(kept) > limit:
        # keep the most important (-1 first), in their original order
        ranked = sorted(
            kept, key=lambda p: (-(101 if p[1].priority == -1 else p[1].priority), p[0])
        )
        keep_orders = {order for order, _ in ranked[:limit]}
        out.capped = len(kept) - limit
        kept = [p for p in kept if p[0] in keep_orders]
    out.memories = [m for _, m in kept]
    return out


def _validate_one(
    draft: MemoryDraft,
    aliases: dict[str, L0Message],
    by_id: dict[str, L0Message],
    window_messages: Sequence[L0Message],
    out: Validated,
    *,
    config: ExtractionConfig,
    tz: Any,
) -> NewMemory | None:
    content = draft.content.strip()
    if not content:
        out.rejected += 1
        return None
    content = _cut(content, config.content_max_chars)
    sources: list[L0Message] = []
    for ref in draft.source_ids:
        key = str(ref).strip().strip("[]")
        if key.isdigit():  # `3` for `m3`
            key = f"m{int(key)}"
        message = aliases.get(key) or by_id.get(key)
        if message is None:
            out.dropped_source_ids += 1
        elif message not in sources:
            sources.append(message)
    priority = draft.priority if draft.priority == -1 else min(max(draft.priority, 0), 100)
    # a memory citing nothing is judged by every new message of the window
    steered = steers(content) or any(steers(m.content) for m in sources or window_messages)
    if steered:
        if steering_cap(priority) != priority:
            priority = steering_cap(priority)
            out.downgraded_rules += 1
    elif priority == -1 and not (
        config.allow_standing_rules and standing_rule_allowed(draft.type, sources)
    ):
        priority = STANDING_RULE_FALLBACK
        out.downgraded_rules += 1
    start = parse_activity_time(draft.activity_start, tz)
    end = parse_activity_time(draft.activity_end, tz, end=True)
    if (draft.activity_start and start is None) or (draft.activity_end and end is None):
        out.fixed_times += 1
    if start is not None and end is not None and end[1] < start[1]:
        end = None
        out.fixed_times += 1
    situation = _cut(" ".join(draft.situation.split()), _SITUATION_CHARS) or out.situation
    return NewMemory(
        content=content,
        type=draft.type,
        priority=priority,
        situation=situation,
        activity_start_time=start[0] if start else None,
        activity_end_time=end[0] if end else None,
        source_ids=tuple(m.id for m in sources[:_SOURCE_LIMIT]),
        steered=steered,
    )
