"""A folded view of text for spotting markup that hides behind look-alike characters.

Stored text must not be able to open or close a prompt block or fake a chat-template marker, and
a model reads `＜relevant-memories＞` (full-width), `<relevant-memories>` with a zero-width space
after `<`, or `＜｜im_start｜＞` much as it reads the ASCII original. `fold` maps text to a view
in which such variants look like the ASCII original (NFKC compatibility forms, lower case, a few
angle-bracket and hyphen look-alikes, invisible characters removed) together with the position
of each folded character in the original text, so a pattern found in the folded view can be
neutralised at the right place of the original, which is otherwise left exactly as it was.
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["OPENER_CHARS", "fold"]

_INVISIBLE: Final = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069"
    "\u206a\u206b\u206c\u206d\u206e\u206f\u3164\ufeff\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
)
"""Characters with no visible form (zero-width spaces and joiners, direction marks, variation
selectors, soft hyphen, fillers): dropped from the folded view."""

_EXTRA: Final = {
    # angle brackets NFKC keeps apart from < and >
    "\u2039": "<",
    "\u203a": ">",
    "\u2329": "<",
    "\u232a": ">",
    "\u27e8": "<",
    "\u27e9": ">",
    "\u276e": "<",
    "\u276f": ">",
    "\u29fc": "<",
    "\u29fd": ">",
    "\u3008": "<",
    "\u3009": ">",
    # hyphens and dashes
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2015": "-",
    "\u2212": "-",
    "\ufe58": "-",
    # vertical bars
    "\u2223": "|",
    "\u01c0": "|",
}
"""Look-alikes that NFKC does not fold."""

OPENER_CHARS: Final = frozenset("<[\uff1c\ufe64\uff3b\u2039\u2329\u27e8\u276e\u29fc\u3008")
"""Characters that fold to `<` or `[`: text without any of them has no marker to neutralise."""


def fold(text: str) -> tuple[str, list[int]]:
    """The folded view of `text` and, per folded character, its index in `text`.

    Runs in linear time; ASCII characters only change case.
    """
    if text.isascii():
        return text.lower(), list(range(len(text)))
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        if char < "\x80":
            folded.append(char.lower())
            origin.append(index)
            continue
        if char in _INVISIBLE:
            continue
        mapped = _EXTRA.get(char) or unicodedata.normalize("NFKC", char).casefold()
        for part in mapped:
            folded.append(_EXTRA.get(part, part))
            origin.append(index)
    return "".join(folded), origin
