"""A folded view of text for spotting markup that hides behind look-alike characters.

Stored text must not be able to open or close a prompt block or fake a chat-template marker, and
a model reads `＜relevant-memories＞` (full-width), `<relevant-memories>` with a zero-width space
after `<`, `ᐸsystem>` (a Canadian syllabic), `<rеlevаnt-memories>` (two Cyrillic letters) or
`＜｜im_start｜＞` much as it reads the ASCII original. `fold` maps text to a view in which such
variants look like the ASCII original, together with the position of each folded character in
the original text, so a pattern found in the folded view can be neutralised at the right place
of the original, which is otherwise left exactly as it was.

The view is decided by rules on Unicode properties rather than by a list of known tricks (a list
is never complete):

- compatibility forms fold as NFKC does (full-width, small forms, mathematical letters), then
  accents are dropped (NFKD without combining marks) and case is folded;
- invisible characters (format characters such as zero-width spaces, direction marks and the
  TAG characters, combining marks, variation selectors, fillers) are dropped;
- punctuation folds by what its Unicode name says it is: anything named less-than, left-pointing
  or a left angle, chevron or arrowhead is `<` (and the right-hand ones `>`), a solidus, slash or
  rising diagonal is `/`, a left square, lenticular or tortoise-shell bracket is `[`, a vertical
  line or bar is `|`, a dash is `-`. The few look-alikes whose names say nothing of their shape
  (Unicode's confusables of `<`, `>` and `/`, such as the Canadian syllabics PA and PO) are added
  by hand;
- a letter or letter-like symbol that is still not ASCII becomes `ANY_LETTER` (Greek, Cyrillic,
  Armenian, Cherokee, IPA, ℮, ...), which tag patterns accept in place of any letter: the
  question is whether a tag name *could be read as* a protected one, and answering it by a table
  of homoglyphs would miss the next homoglyph. Only ideographs and syllables (Han, kana, Hangul,
  Bopomofo, Yi), which look like no Latin letter, keep their own form.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Final

__all__ = ["ANY_LETTER", "fold"]

ANY_LETTER: Final = "\u00aa"
"""Stands in the folded view for a letter that may look like any Latin letter. (U+00AA itself
folds to `a` by NFKC, so it never appears in the view for another reason; it is a word
character, so `\\b` works around it.)"""

_INVISIBLE: Final = frozenset(
    "\u115f\u1160\u17b4\u17b5\u180e\u2800\u3164\uffa0"
    # drawn as nothing (Hangul fillers, Khmer inherent vowels, Mongolian separator, braille blank)
)
"""Blank or invisible characters that are neither format characters nor combining marks."""

_DROPPED_CATEGORIES: Final = frozenset({"Cf", "Mn", "Me", "Mc"})
"""Format characters (zero-width, direction marks, TAG characters, soft hyphen) and combining
marks: nothing a model reads as part of a tag."""

_CONFUSABLE: Final = {
    # Unicode's confusables of <, > and / whose names do not describe the shape
    "\u1438": "<",  # CANADIAN SYLLABICS PA
    "\u16b2": "<",  # RUNIC LETTER KAUNA
    "\U0001d236": "<",  # GREEK INSTRUMENTAL NOTATION SYMBOL-40
    "\u1433": ">",  # CANADIAN SYLLABICS PO
    "\U00016f3f": ">",  # MIAO LETTER ARCHAIC ZZA
    "\U0001d237": ">",  # GREEK INSTRUMENTAL NOTATION SYMBOL-42
    "\u1735": "/",  # PHILIPPINE SINGLE PUNCTUATION
    "\u2041": "/",  # CARET INSERTION POINT
    "\u2cc6": "/",  # COPTIC CAPITAL LETTER OLD COPTIC ESH
    "\u3033": "/",  # VERTICAL KANA REPEAT MARK UPPER HALF
    "\u30ce": "/",  # KATAKANA LETTER NO
    "\u31d3": "/",  # CJK STROKE SP
    "\u4e3f": "/",  # CJK UNIFIED IDEOGRAPH-4E3F
    "\u2f03": "/",  # KANGXI RADICAL SLASH
    "\U0001d23a": "/",  # GREEK INSTRUMENTAL NOTATION SYMBOL-47
    "\u01c0": "|",  # LATIN LETTER DENTAL CLICK (also an `l`: tag patterns take `|` for `l`)
    "\u2223": "|",  # DIVIDES
}

_UNLIKE_LATIN: Final = (
    "CJK",
    "IDEOGRAPHIC",
    "KANGXI",
    "HIRAGANA",
    "KATAKANA",
    "HALFWIDTH KATAKANA",
    "HANGUL",
    "HALFWIDTH HANGUL",
    "BOPOMOFO",
    "YI ",
)
"""Scripts (first words of a character's Unicode name) of ideographs and syllables, none of which
looks like a Latin letter: the only letters that keep their own form in the folded view."""
_LETTER_LIKE: Final = ("L", "N", "So", "Sk")
"""Categories that can pass for a letter: letters, digits (the Lao zero), symbols (℮)."""


_BRACKETS: Final = ("ANGLE", "CHEVRON", "ARROWHEAD", "POINTING")
_SQUARE: Final = ("SQUARE BRACKET", "LENTICULAR", "TORTOISE SHELL")
_SHAPES: Final = (
    # words of which the name has one, the side it must name (if any), the shape
    (("LESS-THAN",), None, "<"),
    (("GREATER-THAN",), None, ">"),
    (_BRACKETS, "LEFT", "<"),
    (_BRACKETS, "RIGHT", ">"),
    (_SQUARE, "LEFT", "["),
    (_SQUARE, "RIGHT", "]"),
    (("REVERSE SOLIDUS", "BACKSLASH", "FALLING DIAGONAL"), None, "\\"),
    (("SOLIDUS", "SLASH", "RISING DIAGONAL", "UPPER RIGHT TO LOWER LEFT"), None, "/"),
    (("VERTICAL LINE", "VERTICAL BAR", "LIGHT VERTICAL", "HEAVY VERTICAL"), None, "|"),
    (("HYPHEN", "MINUS SIGN"), None, "-"),
)
"""What a punctuation character or symbol looks like, by the words of its Unicode name."""


def _by_name(name: str) -> str | None:
    """The ASCII punctuation a character's Unicode name says it looks like, if any."""
    left, right = "LEFT" in name, "RIGHT" in name
    side = "LEFT" if left and not right else "RIGHT" if right and not left else None
    for words, needed, shape in _SHAPES:
        if (needed is None or needed == side) and any(word in name for word in words):
            return shape
    return None


@functools.lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    """The folded form of one non-ASCII character (possibly empty, possibly several)."""
    if char in _INVISIBLE:
        return ""
    if char in _CONFUSABLE:
        return _CONFUSABLE[char]
    category = unicodedata.category(char)
    if category in _DROPPED_CATEGORIES:
        return ""
    name = unicodedata.name(char, "")
    if category.startswith(("P", "S")):
        shape = _by_name(name)
        if shape is not None:
            return shape
        if category == "Pd":
            return "-"
    compat = unicodedata.normalize("NFKC", char).casefold()
    bare = "".join(
        c
        for c in unicodedata.normalize("NFKD", compat)
        if unicodedata.category(c) not in _DROPPED_CATEGORIES
    )
    out: list[str] = []
    for part in bare:
        if part.isascii():
            out.append(part)
        elif part != char:
            out.append(_fold_char(part))
        elif unicodedata.category(part).startswith(_LETTER_LIKE) and not name.startswith(
            _UNLIKE_LATIN
        ):
            out.append(ANY_LETTER)
        else:
            out.append(part)
    return "".join(out)


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
        for part in _fold_char(char):
            folded.append(part)
            origin.append(index)
    return "".join(folded), origin
