"""Splitting a message into the parts it asks about, so recall can search each on its own.

"I need to sort out the dog sitter and the mail hold; what dates am I away for Christmas?" asks
three things; searched as one text, the part with the most words dominates the ranking and the
memory the short part needs ranks low. `split_clauses` cuts a message at sentence ends and
question marks, at `;`, and at the conjunctions that join two requests ("and", "but", "also",
"plus", "as well as"; Chinese "，另外", "还有", "以及", "；", "？"), and keeps the parts that
still say something (at least `MIN_PART_WORDS` words, or `MIN_PART_CJK` Chinese characters);
a statement closing a message after its question is context, not a part.
Deterministic, no model. A message with one such part yields no split (an empty tuple): recall
then searches it once, as before.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_PARTS", "MIN_PART_CJK", "MIN_PART_WORDS", "split_clauses"]

MAX_PARTS: Final = 3
"""Most parts searched separately (the first ones); the rest of the message is one part."""

MIN_PART_WORDS: Final = 3
"""Words a space-separated part needs to be searched on its own."""

MIN_PART_CJK: Final = 4
"""Chinese (CJK) characters a part needs to be searched on its own."""

_CJK: Final = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_SEPARATORS: Final = re.compile(
    r"[;；?？!！。]+"
    r"|[,，]?\s*\b(?:and also|and|but|also|plus|as well as)\b\s*"
    r"|[,，]\s*(?:另外|还有|以及|并且|而且|顺便)"
    r"|(?:另外|还有|以及|顺便问一下)[,，]?",
    re.IGNORECASE,
)
_SENTENCE: Final = re.compile(r"(?<=[?？!！。])\s*|(?<=\.)\s+")
_JOINED: Final = re.compile(r"(?:and|but|also|plus|另外|还有|以及|并且|而且|顺便)", re.IGNORECASE)
_WORD: Final = re.compile(rf"[^\W\d_{_CJK}]+")
_CJK_CHAR: Final = re.compile(rf"[{_CJK}]")


def _says_something(part: str) -> bool:
    return (
        len(_WORD.findall(part)) >= MIN_PART_WORDS or len(_CJK_CHAR.findall(part)) >= MIN_PART_CJK
    )


def _without_trailing_context(text: str) -> str:
    """`text` without a closing statement after a question ("...是多少？客人在问")."""
    sentences = [s for s in _SENTENCE.split(text.strip()) if s.strip()]
    if len(sentences) < 2:
        return text
    last = sentences[-1].strip()
    asked_before = any(s.rstrip().endswith(("?", "？")) for s in sentences[:-1])
    if asked_before and not last.endswith(("?", "？")) and not _JOINED.match(last):
        return " ".join(sentences[:-1])
    return text


def split_clauses(text: str) -> tuple[str, ...]:
    """The parts of `text` worth searching separately; empty when it has fewer than two.

    Parts too short to search on their own ("and you?", "谢谢") are dropped, and so is a
    closing statement after a question, which says why the question is asked rather than
    asking something ("我有驾照吗？想周末租车去郊区"); past `MAX_PARTS` the rest stays joined to
    the last part.
    """
    pieces = [p.strip(" ,，、.") for p in _SEPARATORS.split(_without_trailing_context(text))]
    parts = [p for p in pieces if p and _says_something(p)]
    if len(parts) < 2:
        return ()
    if len(parts) > MAX_PARTS:
        parts = [*parts[: MAX_PARTS - 1], " ".join(parts[MAX_PARTS - 1 :])]
    return tuple(parts)
