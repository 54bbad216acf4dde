"""Cleaning of the user's text before it is used as a search query (SPEC §2 rule 3).

Every step here runs in time linear in the length of its input, whatever the input: the tag
patterns use possessive quantifiers (nothing to backtrack into), and the blocks this package
injects are paired by one forward scan over the tags instead of a regex that searches ahead for
a closing tag from every opening one (which took quadratic time on text such as
`"<relevant-memories>x" * n`). On top of that the text a query is built from is bounded: see
`MAX_CLEAN_INPUT_CHARS` and `MAX_QUERY_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from langchain_tdai_recall.text.tags import INJECTED_TAGS

__all__ = [
    "INJECTED_TAGS",
    "MAX_CLEAN_INPUT_CHARS",
    "MAX_QUERY_CHARS",
    "clean_query",
    "content_text",
    "strip_injected_blocks",
]


MAX_QUERY_CHARS: Final = 2000
"""Longest search query, in code points. A longer cleaned message keeps its first and its last
`MAX_QUERY_CHARS // 2` code points, joined by a space: a long message is usually a pasted text
plus the actual request, and the request comes either before it ("summarise this: ...") or after
it ("... what do you think?"), so both ends are kept and the middle is dropped. 2000 matches the
default `embedding.max_input_chars`, so the embedder sees the whole query, and it bounds the
keyword query to a few hundred words."""

MAX_CLEAN_INPUT_CHARS: Final = 100_000
"""Longest text that is cleaned, in code points. Longer input keeps its first and last
`MAX_CLEAN_INPUT_CHARS // 2` code points before cleaning (the query keeps only its ends anyway),
so the cost of one recall does not grow with the size of a pasted file. Only query building is
bounded this way; stored conversation text is cleaned whole."""

_TAG_ALT = "|".join(re.escape(t) for t in INJECTED_TAGS)
# One tag of an injected block: `<name ...>` or `</name>`, any case, spaces allowed. Possessive
# quantifiers and `[^<>]` (a tag never contains another `<`) keep every match attempt short, and
# no attempt can start inside another match, so one `finditer` finds every tag in linear time.
_TAG_RE: Final = re.compile(
    rf"<\s*+(?P<close>/\s*+)?(?P<name>{_TAG_ALT})\b(?P<rest>[^<>]*+)>", re.IGNORECASE
)
_DATA_URI_RE: Final = re.compile(r"data:[\w.+-]++/[\w.+-]++(?:;[\w=.+-]++)*+,[^\s\"')\]>]*+")
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\ufeff]")
_SPACE_RE: Final = re.compile(r"\s+")


def content_text(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a content-block list.

    Non-text blocks (images, audio, tool calls) are ignored; text blocks are joined by newlines.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, bytes | Mapping):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return ""


def _block_spans(text: str) -> list[tuple[int, int]]:
    """Spans of complete injected blocks, left to right, as a non-greedy regex would pair them.

    An opening tag pairs with the first closing tag of the same name after it (a closing tag
    has nothing but spaces after its name); the span runs to the end of that closing tag plus
    any whitespace after it, and scanning resumes there. An opening tag with no closing tag
    after it is left alone (it is removed later as a stray tag). Each tag name keeps a cursor
    into its closing tags that only moves forward, so the pairing is linear.
    """
    opens: list[tuple[int, int, str]] = []
    closes: dict[str, list[tuple[int, int]]] = {}
    for m in _TAG_RE.finditer(text):
        name = m.group("name").lower()
        if m.group("close") is None:
            opens.append((m.start(), m.end(), name))
        elif not m.group("rest").strip():
            closes.setdefault(name, []).append((m.start(), m.end()))
    if not opens or not closes:
        return []
    cursor = dict.fromkeys(closes, 0)
    spans: list[tuple[int, int]] = []
    resume = 0
    for start, end, name in opens:
        if start < resume or name not in closes:
            continue
        candidates, i = closes[name], cursor[name]
        while i < len(candidates) and candidates[i][0] < end:
            i += 1
        cursor[name] = i
        if i == len(candidates):
            continue
        stop = candidates[i][1]
        while stop < len(text) and text[stop].isspace():
            stop += 1
        spans.append((start, stop))
        resume = stop
    return spans


def strip_injected_blocks(text: str) -> str:
    """Remove every block this package injects, with its contents, and any stray tags.

    Runs in linear time on any input.
    """
    spans = _block_spans(text)
    if spans:
        kept: list[str] = []
        position = 0
        for start, stop in spans:
            kept.append(text[position:start])
            position = stop
        kept.append(text[position:])
        text = "".join(kept)
    return _TAG_RE.sub("", text)


def _ends(text: str, limit: int) -> str:
    """`text` when it fits in `limit` code points, else its first and last halves."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} {text[len(text) - (limit - half) + 1 :]}"


def clean_query(text: str) -> str:
    """Turn a user's message into a search query.

    Removes injected blocks, `data:` URIs and control characters, then collapses all whitespace
    into single spaces and trims. The input is bounded to `MAX_CLEAN_INPUT_CHARS` and the query
    to `MAX_QUERY_CHARS` code points, keeping both ends of a longer text.
    """
    text = strip_injected_blocks(_ends(text, MAX_CLEAN_INPUT_CHARS))
    text = _DATA_URI_RE.sub(" ", text)
    text = _CONTROL_RE.sub(" ", text)
    return _ends(_SPACE_RE.sub(" ", text).strip(), MAX_QUERY_CHARS).strip()
