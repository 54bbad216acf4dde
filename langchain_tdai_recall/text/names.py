"""Capitalised names in an English message ("Einstein", "Lisbon", "Marie Curie").

The injection gate's lead rule (`recall.gate`) does not let a memory lead on a name the user's
memories never mention: "What did Einstein say about time?" is about someone else, and a memory
it resembles only through that name ("User reads physics books") is no answer. Only English
capitalisation is read: a word in capitals that does not start a sentence and is not a common
capitalised word (the pronoun "I", weekdays, months). Chinese has no such signal and yields none.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["capitalised_names"]

_NOT_NAMES: Final = frozenset(
    {
        *("i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "christmas", "easter"),
        *("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
        *("january", "february", "march", "april", "may", "june", "july", "august"),
        *("september", "october", "november", "december"),
    }
)
_TOKEN: Final = re.compile(r"[A-Za-z][A-Za-z'’-]*|[.!?;:\n]")


def capitalised_names(text: str) -> tuple[str, ...]:
    """Capitalised words of `text` that are not at a sentence start, in order, without repeats."""
    names: dict[str, None] = {}
    sentence_start = True
    for token in _TOKEN.findall(text):
        if token in ".!?;:\n":
            sentence_start = True
            continue
        if (
            not sentence_start
            and token[0].isupper()
            and not token.isupper()
            and token.lower() not in _NOT_NAMES
        ):
            names[token.rstrip("'’")] = None
        sentence_start = False
    return tuple(names)
