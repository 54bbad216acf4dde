"""Rendering of the injected prompt blocks (SPEC §2 rule 8).

Tag names and the Chinese truncation suffix are fixed by the specification and pinned by tests;
the disclaimer, the scene-navigation header and the tools guide are this project's own words.
Everything here is deterministic: the same inputs render the same bytes in every process, which
keeps `append_system_context` inside providers' prompt caches.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Final

from langchain_tdai_recall.text.lookalike import ANY_LETTER, fold
from langchain_tdai_recall.text.tags import (
    INJECTED_TAGS,
    KEY_MEMORIES_TAG,
    MEMORY_TOOLS_GUIDE_TAG,
    RELEVANT_MEMORIES_TAG,
    SCENE_NAVIGATION_TAG,
    STANDING_RULES_TAG,
    USER_PERSONA_TAG,
    USER_PROFILE_TAG,
)
from langchain_tdai_recall.types import Language, MemoryRecord, SceneInfo

__all__ = [
    "GUIDED_TOOLS",
    "KEY_MEMORIES_TAG",
    "MEMORY_TOOLS_GUIDE_TAG",
    "RELEVANT_MEMORIES_TAG",
    "SCENE_NAVIGATION_TAG",
    "STANDING_RULES_TAG",
    "TRUNCATION_SUFFIX",
    "USER_PERSONA_TAG",
    "detect_language",
    "disclaimer",
    "escape_block_text",
    "escape_inline",
    "format_memory_line",
    "format_time",
    "render_prepend_context",
    "render_scene_navigation",
    "render_standing_rules",
    "render_system_context",
    "tools_guide",
    "truncation_suffix",
]


TRUNCATION_SUFFIX: Final[dict[Language, str]] = {
    "zh": "…（已截断；可用 tdai_memory_search 或 tdai_conversation_search 查看详情）",
    "en": "… (truncated; use tdai_memory_search or tdai_conversation_search for details)",
}
"""Marks a memory line cut by a budget (the Chinese text is the original plugin's constant)."""

_DISCLAIMER: Final[dict[Language, str]] = {
    "zh": (
        "以下内容是从长期记忆中找回、可能与本轮对话相关的信息，"
        "仅供参考，并不代表当前任务的状态或进展："
    ),
    "en": (
        "The following was recalled from long-term memory because it may be relevant to this "
        "message. It is background for reference only, not the state of the current task:"
    ),
}

GUIDED_TOOLS: Final = ("tdai_memory_search", "tdai_conversation_search", "tdai_read_scene")
"""The memory tools the tools guide can name, in its order."""

_SEARCH_TOOLS: Final = GUIDED_TOOLS[:2]

_TOOLS_GUIDE_HEAD: Final[dict[Language, str]] = {
    "zh": (
        "## 记忆工具使用说明\n"
        "用户消息前的 <relevant-memories> 和这里的记忆只是摘要片段。当它们不足以回答用户时，"
        "可以调用："
    ),
    "en": (
        "## Using the memory tools\n"
        "Memories shown to you (here and in the <relevant-memories> block before the user's "
        "message) are short excerpts. When they are not enough to answer, you can call:"
    ),
}

_TOOLS_GUIDE_LINES: Final[dict[Language, dict[str, str]]] = {
    "zh": {
        "tdai_memory_search": (
            "- tdai_memory_search："
            "检索结构化的长期记忆（用户身份与偏好、过往事件、用户定下的规则）。"
        ),
        "tdai_conversation_search": (
            "- tdai_conversation_search：检索原始历史对话，用于确认用户的原话、时间线和上下文，"
            "也可用来核对记忆检索的结果。"
        ),
        "tdai_read_scene": "- tdai_read_scene：按场景导航中列出的名称读取某个场景的完整内容。",
    },
    "en": {
        "tdai_memory_search": (
            "- tdai_memory_search: search structured long-term memories (who the user is, their "
            "preferences, past events, rules they set)."
        ),
        "tdai_conversation_search": (
            "- tdai_conversation_search: search the raw past conversation for the user's exact "
            "words, timelines and context, or to double-check a memory."
        ),
        "tdai_read_scene": (
            "- tdai_read_scene: read one scene in full, by a name listed in the scene navigation."
        ),
    },
}

_TOOLS_GUIDE_NOTE_BOTH: Final[dict[Language, str]] = {
    "zh": (
        "注意：tdai_memory_search 与 tdai_conversation_search 每轮合计最多调用 {max_calls} 次。"
        "第一次没有找到时，可以换关键词或换另一个工具再试；达到上限后不要继续检索，"
        "直接根据已知信息回答。"
    ),
    "en": (
        "Note: tdai_memory_search and tdai_conversation_search share a limit of {max_calls} "
        "calls per turn. If a search finds nothing, try other keywords or the other tool; once "
        "the limit is reached, stop searching and answer with what you know."
    ),
}

_TOOLS_GUIDE_NOTE_ONE: Final[dict[Language, str]] = {
    "zh": (
        "注意：{tool} 每轮最多调用 {max_calls} 次。第一次没有找到时，可以换关键词再试；"
        "达到上限后不要继续检索，直接根据已知信息回答。"
    ),
    "en": (
        "Note: {tool} has a limit of {max_calls} calls per turn. If a search finds nothing, try "
        "other keywords; once the limit is reached, stop searching and answer with what you know."
    ),
}

_RULES_HEADER: Final[dict[Language, str]] = {
    "zh": "用户定下的长期规则，每一次回答都要遵守：",
    "en": "Standing instructions from the user. Follow them in every reply:",
}

_KEY_MEMORIES_HEADER: Final[dict[Language, str]] = {
    "zh": "用户最重要的记忆（重要信息和用户定下的规则），每一次回答都要考虑到：",
    "en": "The user's highest-priority memories (important facts and rules they set). Keep them "
    "in mind in every reply:",
}

_PROFILE_HEADER: Final[dict[Language, str]] = {
    "zh": "用户告诉过你的其他个人信息。与当前请求有关时要考虑到，无关时不必提起：",
    "en": "What else the user has told you about themselves. Take it into account where it "
    "bears on the request; do not bring it up otherwise:",
}

_NAV_HEADER: Final[dict[Language, str]] = {
    "zh": "场景记忆索引（按热度排序）。需要某个场景的完整内容时，用 tdai_read_scene 按名称读取：",
    "en": "Scene memory index, most active first. To read a scene in full, call tdai_read_scene "
    "with its name:",
}
_NAV_LABELS: Final[dict[Language, tuple[str, str]]] = {
    "zh": ("热度", "更新于"),
    "en": ("heat", "updated"),
}
_TIME_LABEL: Final[dict[Language, tuple[str, str, str, str]]] = {
    # (label, range separator, "from X" template, "until X" template)
    "zh": ("活动时间", " ~ ", "{}起", "至{}"),
    "en": ("when", " ~ ", "from {}", "until {}"),
}

_PROTECTED_TAGS: Final = (
    *INJECTED_TAGS,
    "system",
    "assistant",
    "user",
    "human",
    "tool",
)
_TEMPLATE_TAGS: Final = (
    "s",  # <s> </s> (Llama, Mistral)
    "sys",  # <<SYS>> <</SYS>> (Llama 2): the inner `<SYS>`
    "bos",
    "eos",
    "start_of_turn",  # Gemma
    "end_of_turn",
    "im_start",  # ChatML without the bars
    "im_end",
    "endoftext",
)
_TEMPLATE_BRACKETS: Final = (
    "inst",  # [INST] [/INST] (Llama 2, Mistral)
    "sys",
    "system_prompt",  # Mistral
    "available_tools",
    "tool_calls",
    "tool_results",
)


def _flex(name: str, *, any_letter: bool) -> str:
    """A pattern for `name` in the folded view of `text.lookalike`.

    Any separator (or none) where it has `-` or `_`, and with `any_letter`, `ANY_LETTER` in place
    of each letter.
    """
    parts: list[str] = []
    for char in name:
        if char in "-_":
            parts.append(f"[^a-z0-9{ANY_LETTER}<>]?")
        elif char.isalpha() and any_letter:
            # `|`, `1` and `0` pass for `l`, `i` and `o` (Unicode's confusables skeleton agrees)
            extra = {"l": "|1", "i": "|1", "o": "0"}.get(char, "")
            parts.append(f"[{char}{extra}{ANY_LETTER}]")
        else:
            parts.append(re.escape(char))
    return "".join(parts)


# These patterns run on the folded view of `text.lookalike` (lower case, look-alike brackets,
# slashes, bars and dashes folded, accents and invisible characters gone, letters of other
# alphabets as `ANY_LETTER`). A block or role tag name matches with look-alike letters; the short
# template names (`s`, `sys`, `bos`, ...) only with Latin letters, so that `⟨ψ|φ⟩` stays as it is.
# Possessive quantifiers keep them linear.
_FLEX_NAMES: Final = "|".join(
    [_flex(name, any_letter=True) for name in _PROTECTED_TAGS]
    + [_flex(name, any_letter=False) for name in _TEMPLATE_TAGS]
)
_TAG_OPEN_RE: Final = re.compile(rf"<(?=\s*+(?:[/\\]\s*+)?(?:{_FLEX_NAMES})\b)")
"""`<` opening or closing a block, role or template tag: becomes `&lt;`."""
_TEMPLATE_TOKEN_RE: Final = re.compile(r"<(?=\|[^|<>\s]{1,64}\|)")
"""`<` of a special token such as `<|im_start|>` or `<|endoftext|>`: becomes `&lt;`."""
_TEMPLATE_BRACKET_RE: Final = re.compile(
    r"\[(?=\s*+(?:[/\\]\s*+)?(?:"
    + "|".join(_flex(name, any_letter=False) for name in _TEMPLATE_BRACKETS)
    + r")\s*+\])"
)
"""`[` of an instruction marker such as `[INST]`: becomes `&#91;`."""
_TAG_CHARS_RE: Final = re.compile("[\U000e0000-\U000e007f]")
"""The invisible TAG characters: they spell ASCII a model may read ("ASCII smuggling")."""
_MARKS: Final = {"<": "&lt;", "[": "&#91;"}
"""What a neutralised opener becomes: nothing that folds back to it."""
_LINE_BREAK_RE: Final = re.compile(r"[\r\n\u2028\u2029\x85\x0b\x0c]+")
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_SPACES_RE: Final = re.compile(r"[ \t]+")
_ISO_DATE_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


_HAN_RE: Final = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD_RE: Final = re.compile(r"[A-Za-z]{2,}")


def detect_language(text: str | None) -> Language | None:
    """`zh` or `en` for text mostly in Chinese or mostly in a Latin script; `None` when unsure.

    Counts Han characters against Latin words (two Han characters weigh about one word), so a
    Chinese sentence with a few English terms is Chinese and an English sentence quoting one
    Chinese name is English. Text with neither (digits, emoji, other scripts) gives `None`.
    """
    if not text:
        return None
    han = len(_HAN_RE.findall(text))
    words = len(_LATIN_WORD_RE.findall(text))
    if han == 0 and words == 0:
        return None
    return "zh" if han >= 2 * words else "en"


def disclaimer(language: Language) -> str:
    """First line of the `<relevant-memories>` block."""
    return _DISCLAIMER[language]


def tools_guide(
    language: Language, max_calls: int = 3, tools: Sequence[str] | None = None
) -> str | None:
    """Body of the `<memory-tools-guide>` block, stating the per-turn cap of the search tools.

    It names the memory tools of `tools` only (`None`: all of `GUIDED_TOOLS`), in a fixed
    order, so the model is never told of a tool it does not have; `None` when none is named.
    The same tools give the same bytes on every turn.
    """
    names = [n for n in GUIDED_TOOLS if tools is None or n in tools]
    if not names:
        return None
    lines = [_TOOLS_GUIDE_HEAD[language], *(_TOOLS_GUIDE_LINES[language][n] for n in names)]
    searches = [n for n in names if n in _SEARCH_TOOLS]
    if len(searches) == len(_SEARCH_TOOLS):
        lines.append(_TOOLS_GUIDE_NOTE_BOTH[language].format(max_calls=max_calls))
    elif searches:
        note = _TOOLS_GUIDE_NOTE_ONE[language]
        lines.append(note.format(tool=searches[0], max_calls=max_calls))
    return "\n".join(lines)


def truncation_suffix(language: Language) -> str:
    """Marker appended to a memory line cut by a budget."""
    return TRUNCATION_SUFFIX[language]


def escape_block_text(text: str) -> str:
    """Escape stored text so it cannot open or close a prompt block, role tag or template marker.

    - `<` before a protected tag name (a block of this package, `system`, `assistant`, `user`,
      `human`, `tool`), optionally after `/` and spaces, becomes `&lt;`; so does `<` of a chat
      template marker (`<|im_start|>`, `<|endoftext|>`, `</s>`, `<<SYS>>`, `<start_of_turn>`,
      ...), and `[` of `[INST]`-style markers becomes `&#91;`.
    - Look-alikes are caught by rule, not by list (see `text.lookalike`): any character whose
      Unicode name or compatibility form makes it a `<`, `/`, `[`, `|` or dash, any case, accents,
      letters of other alphabets in the tag name, invisible characters and combining marks
      anywhere in the tag.
    - Control characters and the invisible TAG characters (U+E0000 to U+E007F) are removed. Line
      breaks are kept (for the persona and scene bodies).

    The result is stable: escaping it again, or folding it, finds nothing more to neutralise.
    Everything else is left exactly as it was. Linear in the length of `text`.
    """
    text = _TAG_CHARS_RE.sub("", _CONTROL_RE.sub("", text))
    if text.isascii() and "<" not in text and "[" not in text:
        return text
    folded, origin = fold(text)
    replace: dict[int, str] = {}
    for pattern in (_TAG_OPEN_RE, _TEMPLATE_TOKEN_RE, _TEMPLATE_BRACKET_RE):
        for m in pattern.finditer(folded):
            replace[origin[m.start()]] = _MARKS[m.group()]
    if not replace:
        return text
    parts: list[str] = []
    position = 0
    for index in sorted(replace):
        parts += (text[position:index], replace[index])
        position = index + 1
    parts.append(text[position:])
    return "".join(parts)


def escape_inline(text: str) -> str:
    """`escape_block_text` plus: every line break becomes a space, so one memory is one line."""
    text = _LINE_BREAK_RE.sub(" ", escape_block_text(text))
    return _SPACES_RE.sub(" ", text).strip()


def format_time(value: str | None, tz: dt.tzinfo) -> str | None:
    """Render a stored time for the prompt, or `None` when it is empty or unparseable.

    A date (`2025-05-01`) stays a date. A date-time is converted to `tz` (a naive one is taken to
    be in `tz` already) and shown as a date when it falls on midnight there, otherwise as ISO 8601
    with seconds and the correct UTC offset.
    """
    if not value:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            return dt.date.fromisoformat(text).isoformat()
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    moment = moment.replace(tzinfo=tz) if moment.tzinfo is None else moment.astimezone(tz)
    if (moment.hour, moment.minute, moment.second, moment.microsecond) == (0, 0, 0, 0):
        return moment.date().isoformat()
    return moment.isoformat(timespec="seconds")


def _time_suffix(record: MemoryRecord, tz: dt.tzinfo, language: Language) -> str:
    label, sep, from_tpl, until_tpl = _TIME_LABEL[language]
    start = format_time(record.activity_start_time, tz)
    end = format_time(record.activity_end_time, tz)
    if start and end:
        when = f"{start}{sep}{end}" if start != end else start
    elif start:
        when = from_tpl.format(start)
    elif end:
        when = until_tpl.format(end)
    else:
        point = format_time(record.timestamp, tz)
        if point is None:
            return ""
        when = point
    return f" ({label}: {when})"


def format_memory_line(record: MemoryRecord, *, tz: dt.tzinfo, language: Language) -> str:
    """One memory line: `- [type] content` or `- [type|scene] content`, plus activity times."""
    scene = escape_inline(record.scene_name).replace("[", "［").replace("]", "］")
    tag = f"{record.type}|{scene}" if scene else record.type
    return f"- [{tag}] {escape_inline(record.content)}{_time_suffix(record, tz, language)}"


def render_prepend_context(lines: Sequence[str], language: Language) -> str | None:
    """The `<relevant-memories>` block, or `None` when there are no lines."""
    if not lines:
        return None
    body = "\n".join(lines)
    return (
        f"<{RELEVANT_MEMORIES_TAG}>\n{disclaimer(language)}\n\n{body}\n</{RELEVANT_MEMORIES_TAG}>"
    )


def _heat_marks(heat: int) -> str:
    for floor, marks in ((1000, 5), (500, 4), (200, 3), (100, 2), (50, 1)):
        if heat >= floor:
            return "🔥" * marks
    return "·"


def render_scene_navigation(scenes: Sequence[SceneInfo], language: Language) -> str | None:
    """Scene names with bucketed heat, highest heat first (ties by name); `None` when empty.

    Heat is shown as a bucket (· or 1-5 flames), and only the date of the last rewrite is shown,
    so the text changes only when a scene is added, removed or rewritten.
    """
    if not scenes:
        return None
    heat_label, updated_label = _NAV_LABELS[language]
    ordered = sorted(scenes, key=lambda s: (-s.heat, s.name))
    lines = [_NAV_HEADER[language]]
    for scene in ordered:
        meta = f"{heat_label} {_heat_marks(scene.heat)}"
        updated = scene.updated[:10]
        if _ISO_DATE_RE.fullmatch(updated):  # a date or nothing: the field is stored text
            meta += f", {updated_label} {updated}"
        summary = escape_inline(scene.summary)
        name = escape_inline(scene.name)
        lines.append(f"- {name} ({meta})" + (f": {summary}" if summary else ""))
    return "\n".join(lines)


def render_standing_rules(rules: Sequence[str], language: Language) -> str | None:
    """The body of the standing-instructions block: a header and one line per rule."""
    lines = [f"- {escape_inline(rule)}" for rule in rules if rule.strip()]
    if not lines:
        return None
    return "\n".join([_RULES_HEADER[language], *lines])


def render_system_context(
    *,
    persona: str | None,
    navigation: str | None,
    language: Language,
    tools_max_calls: int | None,
    rules: Sequence[str] = (),
    pinned: Sequence[str] = (),
    profile: Sequence[str] = (),
    tools: Sequence[str] | None = None,
) -> str | None:
    """Persona, standing rules, key memories, scene navigation and tools guide, blank-line joined.

    `rules` are the texts of the standing rules; `pinned` and `profile` are memory lines (see
    `format_memory_line`) of the memories pinned by priority and of the user's profile.

    The tools guide is included whenever the caller has the tools (`tools_max_calls` is not
    `None`; `tools` names which of them, `None` all), independent of whether this turn
    recalled anything, so the system message does not toggle between turns. `None` when there
    is nothing to add.
    """
    parts = []
    if persona:
        parts.append(f"<{USER_PERSONA_TAG}>\n{escape_block_text(persona)}\n</{USER_PERSONA_TAG}>")
    standing = render_standing_rules(rules, language)
    if standing:
        parts.append(f"<{STANDING_RULES_TAG}>\n{standing}\n</{STANDING_RULES_TAG}>")
    if pinned:
        body = "\n".join([_KEY_MEMORIES_HEADER[language], *pinned])
        parts.append(f"<{KEY_MEMORIES_TAG}>\n{body}\n</{KEY_MEMORIES_TAG}>")
    if profile:
        body = "\n".join([_PROFILE_HEADER[language], *profile])
        parts.append(f"<{USER_PROFILE_TAG}>\n{body}\n</{USER_PROFILE_TAG}>")
    if navigation:
        parts.append(f"<{SCENE_NAVIGATION_TAG}>\n{navigation}\n</{SCENE_NAVIGATION_TAG}>")
    guide = tools_guide(language, tools_max_calls, tools) if tools_max_calls is not None else None
    if guide is not None:
        parts.append(f"<{MEMORY_TOOLS_GUIDE_TAG}>\n{guide}\n</{MEMORY_TOOLS_GUIDE_TAG}>")
    return "\n\n".join(parts) if parts else None
