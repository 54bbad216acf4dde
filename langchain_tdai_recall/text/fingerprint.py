"""Content fingerprints: when two memory texts count as the same memory.

Exact duplicates must never pile up (a quick-start run three times must not store the same fact
three times), and must never cost a model call. Two texts are exact duplicates when they are equal
after Unicode NFKC normalisation, case folding, collapsing every run of whitespace and dropping
trailing sentence punctuation. The fingerprint is a short hash of that normal form, stored beside
each L1 row and indexed per scope, so the check is one indexed lookup.

The normal form is deliberately conservative: it never merges texts that differ in a word, a
digit or a negation; near-duplicates are the consolidation model's job.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

__all__ = ["content_fingerprint", "normal_form"]

_SPACE_RE: Final = re.compile(r"\s+")
_TRAILING_PUNCT: Final = ".。!！?？;；,，、…~～ "


def normal_form(text: str) -> str:
    """The text two exact duplicates share: NFKC, case-folded, single spaces, no final stop."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE_RE.sub(" ", folded).strip().rstrip(_TRAILING_PUNCT).strip()


def content_fingerprint(text: str) -> str:
    """A 32-hex-digit fingerprint of `normal_form(text)`."""
    return hashlib.blake2b(normal_form(text).encode("utf-8"), digest_size=16).hexdigest()
