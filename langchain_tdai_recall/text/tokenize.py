"""Keyword tokenisation (SPEC §3).

Space-separated scripts become lower-cased, NFKC-normalised word tokens with a small stop-word
list and a light suffix stemmer. CJK text (Chinese, Japanese kana, Korean Hangul) becomes
overlapping character bigrams plus single characters by default, which needs no dependency and
matches short queries such as "咖啡" inside "咖啡店"; with `tokenizer="jieba"` it is segmented into
words instead. A tokeniser has an `identity`; an index built by one tokeniser is never queried
with another.

User query syntax (quotes, `OR`, `*`, `-`, `:`) is plain text here: punctuation separates
tokens and nothing is an operator.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from langchain_tdai_recall.errors import MissingDependencyError

__all__ = ["Query", "QueryUnit", "Tokenizer", "get_tokenizer"]

TOKENIZER_VERSION: Final = 1

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # compatibility ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002fa1f"  # extensions B..F, compatibility supplement
)
_RUN_RE: Final = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*)")

_EN_STOP: Final = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves also did does doesn't don't i'm i've it's let's that's there's
    what's would've ever yet us
    """.split()  # noqa: SIM905 - a word list reads better as text
)
"""Function words that carry no topic; short and conservative so names and nouns always count."""

_CJK_STOP: Final = frozenset(
    "的了在是我有和就不人都一也很到说要去你会着看好这他她它们那吗吧呢啊呀哦嗯个么呗嘛"
)
"""Single CJK characters too common to be keywords on their own (still used inside bigrams)."""

TokenKind = Literal["word", "cjk2", "cjk1"]


@dataclass(frozen=True, slots=True)
class QueryUnit:
    """One unit of meaning in a query: an English word or a CJK character (or segmented word).

    A memory containing `base` covers the unit with strength `base_strength`; one that also
    contains any of the `boosts` covers it fully. For a CJK character the base is the bare
    character (weak evidence, 0.25) and the boosts are the two bigrams it is part of; every
    memory containing such a bigram also contains the character, which the index relies on.
    """

    weight: float
    """Share of the query: 1 for a word, 0.5 for a CJK character (two make about one word)."""
    base: str
    """Token whose presence covers the unit with `base_strength`."""
    base_strength: float = 1.0
    """Coverage from `base` alone."""
    boosts: tuple[str, ...] = ()
    """Tokens that raise the coverage to 1."""


@dataclass(frozen=True, slots=True)
class Query:
    """A tokenised query: the tokens to rank by and the units to measure coverage with."""

    tokens: tuple[str, ...]
    """Distinct tokens, first-seen order (BM25 ranking)."""
    units: tuple[QueryUnit, ...]
    """Units of meaning (keyword relevance = weighted share of covered units)."""


def _stem(word: str) -> str:
    """Light, deterministic English suffix stripping (plural, -ing, -ed); keeps short words."""
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith(("'s", "’s")):
        word = word[:-2]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
                stem = stem[:-1]  # running -> run, planned -> plan
            return stem
    return word


@functools.lru_cache(maxsize=1 << 16)
def _word_token(run: str) -> str | None:
    """The index token of one word run, or `None` for a stop word (cached: words repeat)."""
    word = run.lower().replace("’", "'")
    if word in _EN_STOP:
        return None
    word = word.split("'")[0] if "'" in word else word
    if not word or word in _EN_STOP:
        return None
    return _stem(word)


def _words(run: str) -> list[tuple[str, TokenKind]]:
    tok = _word_token(run)
    return [] if tok is None else [(tok, "word")]


def _cjk_bigrams(run: str) -> list[tuple[str, TokenKind]]:
    out: list[tuple[str, TokenKind]] = []
    for ch in run:
        if ch not in _CJK_STOP:
            out.append((ch, "cjk1"))
    for i in range(len(run) - 1):
        pair = run[i : i + 2]
        if not (pair[0] in _CJK_STOP and pair[1] in _CJK_STOP):
            out.append((pair, "cjk2"))
    return out


def _cjk_doc_tokens(run: str) -> list[str]:
    """Non-stop characters, then every bigram that is not two stop characters."""
    stop = _CJK_STOP
    out = [ch for ch in run if ch not in stop]
    out += [
        run[i : i + 2] for i in range(len(run) - 1) if run[i] not in stop or run[i + 1] not in stop
    ]
    return out


class Tokenizer:
    """Turns text into keyword tokens; the same instance tokenises documents and queries."""

    def __init__(self, identity: str, cjk: Callable[[str], list[tuple[str, TokenKind]]]) -> None:
        self.identity: Final = identity
        """Stable name of this tokeniser and its version."""
        self._cjk = cjk

    def _raw(self, text: str) -> list[tuple[str, TokenKind]]:
        text = unicodedata.normalize("NFKC", text)
        out: list[tuple[str, TokenKind]] = []
        for match in _RUN_RE.finditer(text):
            cjk_run, word_run = match.groups()
            out.extend(self._cjk(cjk_run) if cjk_run else _words(word_run))
        return out

    def document_tokens(self, text: str) -> list[str]:
        """Tokens of a stored text, with repeats (term frequency matters for ranking)."""
        out: list[str] = []
        cjk = self._cjk
        for cjk_run, word_run in _RUN_RE.findall(unicodedata.normalize("NFKC", text)):
            if word_run:
                tok = _word_token(word_run)
                if tok is not None:
                    out.append(tok)
            elif cjk is _cjk_bigrams:
                out.extend(_cjk_doc_tokens(cjk_run))
            else:
                out.extend(tok for tok, _ in cjk(cjk_run))
        return out

    def query(self, text: str) -> Query:
        """Tokenise a query into ranking tokens and coverage units."""
        text = unicodedata.normalize("NFKC", text)
        units: list[QueryUnit] = []
        for match in _RUN_RE.finditer(text):
            cjk_run, word_run = match.groups()
            if word_run:
                units.extend(QueryUnit(1.0, tok) for tok, _ in _words(word_run))
            else:
                units.extend(self._cjk_units(cjk_run))
        seen: dict[str, None] = {}
        for unit in units:
            seen.setdefault(unit.base)
            for tok in unit.boosts:
                seen.setdefault(tok)
        return Query(tuple(seen), tuple(units))

    def _cjk_units(self, run: str) -> list[QueryUnit]:
        if self._cjk is not _cjk_bigrams:
            # segmented words: each word is a unit, covered by the word itself
            return [QueryUnit(0.5 * min(len(tok), 2), tok) for tok, _ in self._cjk(run)]
        if len(run) == 1:
            return [] if run in _CJK_STOP else [QueryUnit(0.5, run)]
        units = []
        for i, ch in enumerate(run):
            if ch in _CJK_STOP:
                continue
            boosts = tuple(run[j : j + 2] for j in (i - 1, i) if 0 <= j < len(run) - 1)
            units.append(QueryUnit(0.5, ch, 0.25, boosts))
        return units

    def __repr__(self) -> str:
        return f"Tokenizer({self.identity!r})"


def _jieba_segmenter() -> Callable[[str], list[tuple[str, TokenKind]]]:
    try:
        import jieba  # noqa: PLC0415 - optional dependency, imported on demand
    except ImportError as exc:
        raise MissingDependencyError("jieba", extra="zh") from exc  # noqa: EM101
    jieba.setLogLevel(60)

    def segment(run: str) -> list[tuple[str, TokenKind]]:
        out: list[tuple[str, TokenKind]] = []
        for word in jieba.cut_for_search(run, HMM=True):
            if len(word) == 1:
                if word not in _CJK_STOP:
                    out.append((word, "cjk1"))
            else:
                out.append((word, "cjk2"))
        return out

    return segment


_CACHE: dict[str, Tokenizer] = {}


def get_tokenizer(name: str = "bigram") -> Tokenizer:
    """The shared tokeniser called `name` (`bigram` needs no dependency; `jieba` needs `zh`)."""
    if name not in _CACHE:
        if name == "bigram":
            _CACHE[name] = Tokenizer(f"bigram-v{TOKENIZER_VERSION}", _cjk_bigrams)
        elif name == "jieba":
            _CACHE[name] = Tokenizer(f"jieba-v{TOKENIZER_VERSION}", _jieba_segmenter())
        else:
            from langchain_tdai_recall.errors import ConfigError  # noqa: PLC0415

            msg = f"store.tokenizer must be 'bigram' or 'jieba', got {name!r}"
            raise ConfigError(msg)
    return _CACHE[name]
