"""A deterministic estimate of what a text costs a chat model, in tokens, for any language.

The user profile (`recall.profile_max_tokens`) is budgeted in what it costs the model rather
than in code points: a budget of code points buys about half as many facts written in English as
in Chinese, because an English fact takes about twice the code points of the same fact in
Chinese while costing a model about as many tokens. Real tokenisers differ by model and none is
bundled, so recall uses one documented estimate, the same on every machine and in every process:

- a run of letters (any alphabet but CJK, with `'` and combining marks) counts
  `1 + (length - 1) // LETTERS_PER_EXTRA_TOKEN` tokens: a common word is one token, a long or
  rare word a few (English prose comes out at about 1.2 tokens a word, 4 code points a token);
- a run of digits counts one token per `DIGITS_PER_TOKEN` digits (tokenisers split numbers
  into groups of up to three);
- a CJK ideograph, kana or Hangul syllable counts `CJK_TOKEN_TENTHS / 10` of a token: between
  the tokenisers in use (cl100k_base about 1 per character, o200k_base and Qwen's about 0.7),
  so the same fact written in Chinese and in English costs about the same;
- every other character that is not white space (punctuation, symbols, an emoji) counts one
  token; white space counts nothing (tokenisers fold it into the next word).

The sum is rounded up. It is an estimate, good to within about a fifth of a real tokeniser's
count on ordinary text; it is used for budgets, never billed.
"""

from __future__ import annotations

import itertools
import unicodedata
from typing import Final

__all__ = [
    "CJK_TOKEN_TENTHS",
    "DIGITS_PER_TOKEN",
    "LETTERS_PER_EXTRA_TOKEN",
    "estimate_tokens",
]

LETTERS_PER_EXTRA_TOKEN: Final = 6
"""A run of letters costs one token, plus one for every further this many letters."""

DIGITS_PER_TOKEN: Final = 3
"""Digits per token in a run of digits."""

CJK_TOKEN_TENTHS: Final = 8
"""Tenths of a token per CJK ideograph, kana or Hangul syllable."""

_CJK_RANGES: Final = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3100, 0x31BF),  # bopomofo, Hangul compatibility jamo, kanbun
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def _is_cjk(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def _kind(char: str) -> str:
    """`L` letter (or `'`), `D` digit, `C` CJK, `S` white space or invisible, `P` anything else."""
    if char < "\x80":  # the common case, without a Unicode table look-up
        category = "Ll" if char.isalpha() or char == "'" else "Nd" if char.isdigit() else "Po"
    elif _is_cjk(ord(char)):
        return "C"
    else:
        category = unicodedata.category(char)
    if category[0] in "LM":  # letters and their combining marks
        return "L"
    if category == "Nd":
        return "D"
    return "S" if char.isspace() or category == "Cf" else "P"


def estimate_tokens(text: str) -> int:
    """The estimated token count of `text` (see the module docstring); 0 for empty text."""
    tenths = 0
    for kind, group in itertools.groupby(text, _kind):
        n = sum(1 for _ in group)
        if kind == "L":
            tenths += 10 * (1 + (n - 1) // LETTERS_PER_EXTRA_TOKEN)
        elif kind == "D":
            tenths += 10 * -(-n // DIGITS_PER_TOKEN)
        elif kind == "C":
            tenths += CJK_TOKEN_TENTHS * n
        elif kind == "P":
            tenths += 10 * n
    return -(-tenths // 10)
