"""Cleaning of the user's text before it is used as a search query (SPEC §2 rule 3)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["INJECTED_TAGS", "clean_query", "content_text", "strip_injected_blocks"]

INJECTED_TAGS: Final = (
    "relevant-memories",
    "user-persona",
    "scene-navigation",
    "memory-tools-guide",
    "standing-instructions",
    "relevant-scenes",
)
"""Blocks this package (or the original plugin) writes into prompts."""

_TAG_ALT = "|".join(re.escape(t) for t in INJECTED_TAGS)
_BLOCK_RE: Final = re.compile(
    rf"<\s*({_TAG_ALT})\b[^>]*>.*?<\s*/\s*\1\s*>\s*", re.IGNORECASE | re.DOTALL
)
_STRAY_TAG_RE: Final = re.compile(rf"<\s*/?\s*(?:{_TAG_ALT})\b[^>]*>", re.IGNORECASE)
_DATA_URI_RE: Final = re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.+-]+)*,[^\s\"')\]>]*")
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


def strip_injected_blocks(text: str) -> str:
    """Remove every block this package injects, with its contents, and any stray tags."""
    text = _BLOCK_RE.sub("", text)
    return _STRAY_TAG_RE.sub("", text)


def clean_query(text: str) -> str:
    """Turn a user's message into a search query.

    Removes injected blocks, `data:` URIs and control characters, then collapses all whitespace
    into single spaces and trims.
    """
    text = strip_injected_blocks(text)
    text = _DATA_URI_RE.sub(" ", text)
    text = _CONTROL_RE.sub(" ", text)
    return _SPACE_RE.sub(" ", text).strip()
