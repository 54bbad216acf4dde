"""Time expressions in a message, resolved to calendar date ranges without a model.

`resolve_time(text, today)` finds the English and Chinese time expressions of a message ("last
month", "in November", "for Christmas", "两周前", "去年五月", "这周末", "2026-11-03", ...) and
resolves them against `today` (the user's local date) into inclusive date ranges. Recall uses the
ranges to favour memories whose activity (else write) time falls in them (`recall.engine`, the
`tdai_memory_search` tool); the resolver itself knows nothing of memories.

Rules (`docs/concepts/injection.md` lists the expressions understood):

- **Calendar units.** Weeks run Monday to Sunday (ISO, as in Chinese usage). "last week" /
  "上周" is the previous calendar week, "this week" the current one, "next week" the following;
  months and years likewise. "the past week / 7 days", "最近三天" are rolling windows ending today.
- **"N units ago".** Days: that day. Weeks, months, years: a window one unit wide centred on that
  moment ("two weeks ago" on 3 December is 16-22 November), because people count such spans
  loosely. "in N days / weeks" and "N天后" are the same window ahead of today, and only with a
  future cue (otherwise "in two weeks" is more often a duration).
- **Expressions without a year** (a month name, "Nov 3", a weekday, a holiday, a season, "the
  weekend"): with a past cue in the message ("did", "was", "ago", "了", "过", ...) the most recent
  occurrence that has started (the current month counts: "what did I buy in December?" on
  3 December is this December; a weekday must be before today); with a future cue ("will",
  "going to", "plan", "am I", "要", "打算", ...) the next occurrence that has not ended; with no
  cue, or with both, both readings. A holiday or season after "for" ("what did I buy for
  Christmas?") reads both ways even with a past cue: the buying is past, the holiday may not be.
- **"next Friday"** is the Friday of next week, read both ways while this week's Friday is still
  ahead (it may mean either). "last Friday" is the most recent Friday before today; "this Friday"
  the Friday of this week. "next weekend" is the weekend of next week.
- **Numeric dates.** ISO (2026-11-03, 2026/11/3) and M/D/YYYY (D/M/YYYY when the first number
  exceeds 12). "11/3" without a year is 3 November (month first, the US and Chinese order) and
  only after a time preposition ("on 11/3") or beside Chinese text ("11/3吃了什么"), so that
  "1/2 cup" and "a score of 10/10" are not dates.
- **Ambiguous words.** "may", "march" and "mar" are months only with a cue: a preposition or
  determiner before them ("in May", "last March"; after "this" not when a verb follows: "this
  may be"), a day or year beside them ("May 5", "March 2025"), or a capital inside a sentence
  ("my March trip"); "May I ask" and "we march" are not dates. Recurring expressions ("every
  Friday", "on Fridays", "每周五", "每个周末") are not ranges. A year alone needs a cue ("in
  2025", "2025年"). Invalid dates (30 February) resolve to nothing.
- **Holidays** (`text.holidays`): Christmas, New Year, Halloween, Valentine's Day, the Fourth of
  July, US Thanksgiving, Easter, Memorial and Labor Day; 春节/过年, 除夕, 元宵, 端午, 中秋 (from
  tables for 2000-2050), 元旦, 五一, 国庆, 清明, 圣诞, 情人节. Seasons are the northern
  meteorological ones (spring = March-May, winter = December-February), and a bare season is
  a time only after a preposition ("in the summer"; "winter coat" is none).
- Two expressions joined by "to", "until", "through", "-", "到", "至" (or "between ... and")
  become one range from the first to the second.

Everything is deterministic and pure: the same text and date always give the same ranges.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from langchain_tdai_recall.text.holidays import HOLIDAYS, Span

__all__ = [
    "DateRange",
    "ResolvedTime",
    "Tense",
    "TimeExpression",
    "detect_tense",
    "is_personal",
    "resolve_time",
]

Tense = Literal["past", "future", "neutral"]

MAX_SCAN_CHARS: Final = 4000
"""Longest text scanned for time expressions (the first and last halves of a longer one)."""


@dataclass(frozen=True, slots=True, order=True)
class DateRange:
    """Inclusive range of local calendar dates."""

    first: dt.date
    last: dt.date

    def __post_init__(self) -> None:
        if self.last < self.first:
            msg = f"DateRange last {self.last} is before first {self.first}"
            raise ValueError(msg)

    @property
    def days(self) -> int:
        """Number of days in the range."""
        return (self.last - self.first).days + 1


@dataclass(frozen=True, slots=True)
class TimeExpression:
    """One time expression of a message and what it resolved to."""

    text: str
    """The expression as written (after NFKC normalisation)."""
    start: int
    """Start offset in the normalised message."""
    end: int
    """End offset in the normalised message."""
    ranges: tuple[DateRange, ...]
    """One range, or two when an expression without a year reads both ways."""


@dataclass(frozen=True, slots=True)
class ResolvedTime:
    """The time a message asks about."""

    expressions: tuple[TimeExpression, ...]
    """The expressions found, in text order."""
    ranges: tuple[DateRange, ...]
    """The union of their ranges: sorted, overlapping and adjacent ranges merged."""
    rest: str
    """The message without its time expressions (and the prepositions that led them)."""
    tense: Tense
    """The message's tense cue (`detect_tense`)."""
    personal: bool
    """Whether the message asks about its writer (`is_personal`): "what did I buy in May?",
    "上个月买了什么？", not "write a poem about last summer" nor "下个月有什么好看的电影？"."""

    @property
    def only_time(self) -> bool:
        """Whether the rest of the message is only question and function words.

        "What did I do ...?", "去哪了": the message asks what happened at that time, nothing
        narrower.
        """
        return all(
            word in _FILLER_EN or (len(word) == 1 and word in _FILLER_ZH)
            for word in _FILLER_SPLIT_RE.findall(self.rest)
        )


# -- vocabulary ---------------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_MONTHS: Final[dict[str, int]] = {
    **{
        word: i
        for i, word in enumerate(
            _words(
                "january february march april may june july august september october "
                "november december"
            ),
            1,
        )
    },
    **{
        w: i
        for i, w in enumerate(_words("jan feb mar apr - jun jul aug sep oct nov dec"), 1)
        if w != "-"
    },
    "sept": 9,
}
_AMBIGUOUS_MONTHS: Final = frozenset({"may", "march", "mar"})
"""Month words that are also common verbs: a month only with a cue beside them."""

_MONTH_CUES: Final = frozenset(
    _words(
        "in of since during last this next early late mid by before after from throughout around "
        "between"
    )
)
"""Words before an ambiguous month word that make it a month ("in May", "last March")."""

_WEEKDAYS: Final[dict[str, int]] = {
    name: i
    for i, name in enumerate(_words("monday tuesday wednesday thursday friday saturday sunday"))
}
_ZH_WEEKDAYS: Final[dict[str, int]] = {**{c: i for i, c in enumerate("一二三四五六日")}, "天": 6}
_EN_NUMBERS: Final[dict[str, int]] = {
    **{w: i for i, w in enumerate(_words("one two three four five six seven eight nine ten"), 1)},
    "eleven": 11,
    "twelve": 12,
    "a": 1,
    "an": 1,
    **dict.fromkeys(("a couple of", "couple of", "a couple"), 2),
}
_ZH_DIGITS: Final[dict[str, int]] = {
    **{c: i for i, c in enumerate("零一二三四五六七八九")},
    "〇": 0,
    "两": 2,
}
_SEASONS: Final[dict[str, int]] = {
    "spring": 3,
    "summer": 6,
    "fall": 9,
    "autumn": 9,
    "winter": 12,
    "春天": 3,
    "春季": 3,
    "夏天": 6,
    "夏季": 6,
    "秋天": 9,
    "秋季": 9,
    "冬天": 12,
    "冬季": 12,
}
"""Season -> first month (northern meteorological seasons; winter runs into the next year)."""


# -- small helpers -----------------------------------------------------------------------------


def _zh_number(text: str) -> int | None:  # noqa: PLR0911 - one return per numeral form
    """A Chinese numeral of 0-99 (一, 十, 十二, 二十三, 两) or a digit-by-digit one (二〇二五)."""
    if not text:
        return None
    if text.isdigit():
        return int(text)
    if all(c in _ZH_DIGITS for c in text):
        if len(text) == 1:
            return _ZH_DIGITS[text]
        return int("".join(str(_ZH_DIGITS[c]) for c in text))
    if "十" in text and text.count("十") == 1:
        tens, _, ones = text.partition("十")
        high = _ZH_DIGITS.get(tens, -1) if tens else 1
        low = _ZH_DIGITS.get(ones, -1) if ones else 0
        if high < 1 or low < 0:
            return None
        return high * 10 + low
    return None


def _number(text: str) -> int | None:
    """An English or Chinese count: digits, "two", "a couple of", "三", "十二"."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text in _EN_NUMBERS:
        return _EN_NUMBERS[text]
    return _zh_number(text)


def _date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _month_range(year: int, month: int) -> DateRange | None:
    if not 1 <= month <= 12 or not dt.MINYEAR < year < dt.MAXYEAR:
        return None
    return DateRange(
        dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1])
    )


def _add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _week_start(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


def _week(today: dt.date, offset: int) -> DateRange:
    monday = _week_start(today) + dt.timedelta(weeks=offset)
    return DateRange(monday, monday + dt.timedelta(days=6))


def _weekend(today: dt.date, offset: int) -> DateRange:
    saturday = _week_start(today) + dt.timedelta(weeks=offset, days=5)
    return DateRange(saturday, saturday + dt.timedelta(days=1))


def _day(day: dt.date) -> DateRange:
    return DateRange(day, day)


def _year_range(year: int) -> DateRange | None:
    if not dt.MINYEAR < year < dt.MAXYEAR:
        return None
    return DateRange(dt.date(year, 1, 1), dt.date(year, 12, 31))


def _season(year: int, first_month: int) -> DateRange | None:
    """The season starting in `first_month` of `year` (winter: December to February)."""
    end_year, end_month = _add_months(year, first_month, 2)
    start = _month_range(year, first_month)
    end = _month_range(end_year, end_month)
    if start is None or end is None:
        return None
    return DateRange(start.first, end.last)


_FILLER_EN: Final = frozenset(
    _words(
        "a about again all am an and any anything are at be been did do does doing done else "
        "ever everything for from get go going got had happen happened happening has have i "
        "i'd i'll i'm i've is it it's just list me my on our planned plans remind schedule "
        "scheduled show so something stuff tell that the there thing things this to up us was "
        "we went were what what's whats when where where's which who with you your can could "
        "would will should please how how's"
    )
)
"""Words that ask about a time without narrowing it ("what did I do ...", "where did I go")."""
_FILLER_ZH: Final = frozenset(
    "我你他她们的了过什么做干嘛啥哪里儿些有吗呢去都是在事情安排发生样怎吧和跟那这个时候段期间还又要会"
)
"""Chinese characters of the same kind ("做了什么", "去哪了", "有什么安排")."""
_FILLER_SPLIT_RE: Final = re.compile(r"[a-z']+|[\u4e00-\u9fff]")


# -- tense -------------------------------------------------------------------------------------

_PAST_RE: Final = re.compile(
    r"\b(?:did|didn't|was|wasn't|were|weren't|had|went|bought|spent|paid|got|made|took|saw|"
    r"met|ate|drank|said|told|happened|visited|ordered|purchased|finished|started|tried|used|"
    r"ago|earlier|previous|previously|used to|have i|has my|have we)\b"
    r"|(?<![为除])了|(?<![不通经])过(?![年敏])|上次|之前|以前|曾经|那时|刚才|已经"
)
_FUTURE_RE: Final = re.compile(
    r"\b(?:will|won't|shall|going to|gonna|plan|plans|planning|planned|upcoming|coming up|"
    r"scheduled|am i|are we|are you|is my|is our|should i|do i need|need to|have to|"
    r"remind me)\b|'ll\b"
    r"|[要将]|打算|计划|准备|安排|下次|即将|会不会|会去|会在"
)


_FIRST_PERSON_RE: Final = re.compile(
    r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|we|we're|we've|we'd|we'll|us|our|ours)\b"
    r"|(?<![帮给让为替教陪])我|咱|俺"
)
_IMPERATIVE_ME_RE: Final = re.compile(
    r"^\W*(?:please\s+)?(?:give|show|tell|help|write|make|send|find|get|let)\s+(?:me|us)\b"
)
"""A request that names its writer only as the one served ("give me a plan for this week")."""


def is_personal(text: str) -> bool:
    """Whether a message asks about its writer's own life, so its time picks their memories.

    A first-person pronoun ("what did I buy", "do we", "my", "我", not "帮我写", nor "give me"
    opening an imperative) or a past-tense cue ("did the doctor say", "买了") marks it; a
    question about the world or a request to write ("explain daylight saving in March",
    "离春节还有几天？") does not.
    """
    lowered = text.lower()
    stripped = _IMPERATIVE_ME_RE.sub("", lowered)
    return _FIRST_PERSON_RE.search(stripped) is not None or _PAST_RE.search(lowered) is not None


def detect_tense(text: str) -> Tense:
    """The message's tense cue: `"past"`, `"future"`, or `"neutral"` (none, or both)."""
    lowered = text.lower()
    past = _PAST_RE.search(lowered) is not None
    future = _FUTURE_RE.search(lowered) is not None
    if past and not future:
        return "past"
    if future and not past:
        return "future"
    return "neutral"


def _occurrences(
    make: Callable[[int], DateRange | None],
    around: int,
    today: dt.date,
    tense: Tense,
    *,
    strict: bool = False,
    reach: int = 8,
) -> tuple[DateRange, ...]:
    """The occurrence(s) of a yearless (or weekless) expression that `tense` refers to.

    `make(k)` builds the `k`-th occurrence (k a year, or a week offset); `around` is the `k` of
    today. Past: the latest occurrence that has started (that has ended before today when
    `strict`); future: the earliest that has not ended (that starts after today when `strict`);
    neutral: both.
    """
    past: DateRange | None = None
    future: DateRange | None = None
    if tense in ("past", "neutral"):
        for k in range(around + 1, around - reach, -1):
            found = make(k)
            if found is not None and (found.last < today if strict else found.first <= today):
                past = found
                break
    if tense in ("future", "neutral"):
        for k in range(around - 1, around + reach):
            found = make(k)
            if found is not None and (found.first > today if strict else found.last >= today):
                future = found
                break
    picked = [r for r in (past, future) if r is not None]
    return tuple(sorted(set(picked)))


# -- patterns ----------------------------------------------------------------------------------

_MONTH_WORD = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
)
_WEEKDAY_WORD = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_EN_COUNT = (
    r"(?:\d{1,3}|a couple of|couple of|a couple|an|a|one|two|three|four|five|six|seven|eight|"
    r"nine|ten|eleven|twelve)"
)
_ZH_NUM = r"(?:\d{1,3}|[零〇一二两三四五六七八九十]{1,3})"
_ZH_MONTH = r"(?:1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])"
_ZH_DAY = (
    r"(?:3[01]|[12]\d|0?[1-9]|三十一?|二十[一二三四五六七八九]?|十[一二三四五六七八九]?|"
    r"[一二三四五六七八九])"
)
_ZH_WEEK = r"(?:周|星期|礼拜)"
_YEAR = r"(?:19|20)\d\d"
_ORD = r"(?:st|nd|rd|th)?"
_HOLIDAY_EN = (
    r"(?:christmas eve|christmas day|christmas|xmas|new year'?s eve|new year'?s day|halloween|"
    r"valentine'?s day|valentine'?s|fourth of july|independence day|thanksgiving|easter|"
    r"memorial day|labor day)"
)
_HOLIDAY_ZH = (
    r"(?:平安夜|圣诞节|圣诞|元旦|情人节|万圣节|五一|劳动节|国庆节|国庆|十一长假|清明节|清明|春节|过年|"
    r"除夕|大年三十|大年初一|元宵节|元宵|端午节|端午|中秋节|中秋)"
)
_SEASON_EN = r"(?:spring|summer|fall|autumn|winter)"
_SEASON_ZH = r"(?:春天|春季|夏天|夏季|秋天|秋季|冬天|冬季)"
_ZH_REL_YEAR: Final[dict[str, int]] = {
    "大前年": -3,
    "前年": -2,
    "去年": -1,
    "今年": 0,
    "明年": 1,
    "后年": 2,
}
_ZH_REL_YEAR_RE = r"(?P<rely>大前年|前年|去年|今年|明年|后年)"


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What a pattern handler may read."""

    today: dt.date
    tense: Tense
    text: str
    """The lower-cased, NFKC-normalised message."""
    cased: str
    """The NFKC-normalised message as written (for capitals)."""


_Handler = Callable[[re.Match[str], _Ctx], tuple[DateRange, ...] | None]


def _g(match: re.Match[str], name: str) -> str | None:
    return match.groupdict().get(name)


def _month_of(word: str) -> int:
    return _MONTHS[word.rstrip(".")]


def _word_before(ctx: _Ctx, start: int) -> str:
    found = re.search(r"([a-z']+)[\s-]*$", ctx.text[max(0, start - 24) : start])
    return found.group(1) if found else ""


def _word_after(ctx: _Ctx, end: int) -> str:
    found = re.match(r"\s*([a-z']+)", ctx.text[end : end + 24])
    return found.group(1) if found else ""


_CONNECTED_RE: Final = re.compile(
    rf"(?:{_MONTH_WORD}|\d{{1,4}}(?:st|nd|rd|th)?)\.?\s*(?:to|and|through|until|till|-|–)\s*$"
)
_MODAL_FOLLOWERS: Final = frozenset(
    _words(
        "be been have not also still never well help take need want get come go make seem sound "
        "work cause affect change look happen mean include contain require find feel try use "
        "ask i you we they he she it"
    )
)
"""Words after "may" that make it the modal verb ("this may be", "it may help")."""


def _month_word_is_month(ctx: _Ctx, word: str, start: int, end: int) -> bool:
    """Whether an ambiguous month word ("may", "march") is a month here."""
    if word.rstrip(".") not in _AMBIGUOUS_MONTHS:
        return True
    before = _word_before(ctx, start)
    if before in {"to", "and", "through", "until", "till"}:
        return _CONNECTED_RE.search(ctx.text[max(0, start - 40) : start]) is not None
    if before == "this":  # "this May" or "this may be"
        return _word_after(ctx, end) not in _MODAL_FOLLOWERS
    if before in _MONTH_CUES:
        return True
    # "my March trip": capitalised inside a sentence (not "May I ..." at its start)
    written = ctx.cased[start:end] if len(ctx.cased) == len(ctx.text) else ""
    return (
        written[:1].isupper()
        and re.search(r"[a-z,]\s+$", ctx.cased[max(0, start - 3) : start]) is not None
        and _word_after(ctx, end) not in _MODAL_FOLLOWERS
    )


def _recurring(ctx: _Ctx, start: int) -> bool:
    """Whether the expression starting at `start` is led by "every" / "each" / "每"."""
    before = ctx.text[max(0, start - 12) : start]
    return re.search(r"(?:\bevery|\beach|每个?|每一个?)\s*(?:other\s+)?$", before) is not None


def _yearless(
    ctx: _Ctx,
    make: Callable[[int], DateRange | None],
    *,
    purpose: bool = False,
) -> tuple[DateRange, ...]:
    tense = "neutral" if purpose and ctx.tense == "past" else ctx.tense
    return _occurrences(make, ctx.today.year, ctx.today, tense)


def _one(found: DateRange | None) -> tuple[DateRange, ...] | None:
    return (found,) if found is not None else None


# handlers: each returns the ranges of one match, or None when the match is not a time after all


def _iso_date(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    day = _date(int(m["y"]), int(m["m"]), int(m["d"]))
    return _one(_day(day) if day is not None else None)


def _slash_date_year(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    a, b, year = int(m["a"]), int(m["b"]), int(m["y"])
    if year < 100:
        year += 2000
    month, day = (b, a) if a > 12 >= b else (a, b)
    found = _date(year, month, day)
    return _one(_day(found) if found is not None else None)


_CJK_CHAR_RE: Final = re.compile(r"[\u4e00-\u9fff]")


def _slash_date(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """M/D without a year: only after a time preposition ("on 11/3") or beside Chinese text."""
    a, b = int(m["a"]), int(m["b"])
    led = _word_before(ctx, m.start()) in {
        "on",
        "by",
        "from",
        "until",
        "till",
        "since",
        "before",
        "after",
        "around",
        "due",
    }
    beside = ctx.text[max(0, m.start() - 1) : m.start()] + ctx.text[m.end() : m.end() + 1]
    if not led and _CJK_CHAR_RE.search(beside) is None:
        return None
    month, day = (b, a) if a > 12 >= b else (a, b)
    if _date(2000, month, day) is None:
        return None
    return _yearless(ctx, lambda y: _day(d) if (d := _date(y, month, day)) else None) or None


def _month_day_year(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    day = _date(int(m["y"]), _month_of(m["mon"]), int(m["d"]))
    return _one(_day(day) if day is not None else None)


def _month_day_span(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month, d1, d2 = _month_of(m["mon"]), int(m["d"]), int(m["d2"])
    if d2 < d1:
        return None

    def make(year: int) -> DateRange | None:
        first, last = _date(year, month, d1), _date(year, month, d2)
        return DateRange(first, last) if first is not None and last is not None else None

    if _g(m, "y"):
        return _one(make(int(m["y"])))
    if make(2000) is None:
        return None
    return _yearless(ctx, make) or None


def _month_day(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month, day = _month_of(m["mon"]), int(m["d"])
    if _date(2000, month, day) is None:
        return None
    return _yearless(ctx, lambda y: _day(d) if (d := _date(y, month, day)) else None) or None


def _zh_full_date(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    year, month, day = _zh_number(m["y"]), _zh_number(m["m"]), _zh_number(m["d"])
    if year is None or month is None or day is None:
        return None
    found = _date(year, month, day)
    return _one(_day(found) if found is not None else None)


def _zh_rel_year(m: re.Match[str], ctx: _Ctx) -> int | None:
    rel = _g(m, "rely")
    return ctx.today.year + _ZH_REL_YEAR[rel] if rel else None


def _zh_month_day(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month, day = _zh_number(m["m"]), _zh_number(m["d"])
    if month is None or day is None or _date(2000, month, day) is None:
        return None
    year = _zh_rel_year(m, ctx)
    if year is not None:
        found = _date(year, month, day)
        return _one(_day(found) if found is not None else None)
    return _yearless(ctx, lambda y: _day(d) if (d := _date(y, month, day)) else None) or None


_PART_OF_MONTH: Final[dict[str, tuple[int, int]]] = {
    **dict.fromkeys(("early", "初", "上旬"), (1, 10)),
    **dict.fromkeys(("mid", "中", "中旬"), (11, 20)),
    **dict.fromkeys(("late", "底", "末", "下旬"), (21, 31)),
}


def _part(found: DateRange | None, part: str | None) -> DateRange | None:
    if found is None or not part:
        return found
    low, high = _PART_OF_MONTH[part]
    last = min(found.first.replace(day=1) + dt.timedelta(days=high - 1), found.last)
    return DateRange(found.first.replace(day=low), last)


def _month_year(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month = _month_of(m["mon"]) if _g(m, "mon") else _zh_number(m["m"] or "")
    if month is None:
        return None
    year = _zh_number(m["y"]) if _g(m, "y") else _zh_rel_year(m, ctx)
    if year is None:
        return None
    return _one(_part(_month_range(year, month), _g(m, "part")))


def _iso_month(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    return _one(_month_range(int(m["y"]), int(m["m"])))


def _rel_month_name(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month, which = _month_of(m["mon"]), m["which"]
    if not _month_word_is_month(ctx, m["mon"], m.start("mon"), m.end()):
        return None
    today = ctx.today
    if which == "this":
        return _one(_month_range(today.year, month))
    if which == "last":
        year = today.year if month < today.month else today.year - 1
    else:
        year = today.year if month > today.month else today.year + 1
    return _one(_month_range(year, month))


def _bare_month(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    word = m["mon"]
    part = _g(m, "part")
    month = _month_of(word) if word[0].isalpha() and word.isascii() else _zh_number(word)
    if month is None or not 1 <= month <= 12:
        return None
    if not part and not _month_word_is_month(ctx, word, m.start(), m.end()):
        return None
    if _recurring(ctx, m.start()):
        return None
    return _yearless(ctx, lambda y: _part(_month_range(y, month), part)) or None


def _zh_bare_month(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    month = _zh_number(m["m"])
    if month is None or not 1 <= month <= 12 or _recurring(ctx, m.start()):
        return None
    part = _g(m, "part")
    return _yearless(ctx, lambda y: _part(_month_range(y, month), part)) or None


def _year_only(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    year = _zh_number(m["y"])
    return _one(_year_range(year)) if year is not None else None


def _decade(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    start = int(m["y"])
    return (DateRange(dt.date(start, 1, 1), dt.date(start + 9, 12, 31)),)


_REL_OFFSET: Final[dict[str, int]] = {
    "this past": -1,
    "this coming": 1,
    **dict.fromkeys(_words("上上 上上个"), -2),
    **dict.fromkeys(_words("last previous 上 上个"), -1),
    **dict.fromkeys(_words("this current 这 这个 本"), 0),
    **dict.fromkeys(_words("next 下 下个"), 1),
    **dict.fromkeys(_words("下下 下下个"), 2),
}


def _rel_unit(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """last/this/next week, month, year (and 上周, 这个月, 下个月, the week before last)."""
    unit = m["unit"]
    offset = -2 if _g(m, "before_last") else _REL_OFFSET[m["which"]]
    today = ctx.today
    if unit in ("week", "周", "星期", "礼拜"):
        return (_week(today, offset),)
    if unit in ("month", "月"):
        month = _month_range(*_add_months(today.year, today.month, offset))
        return _one(_part(month, _g(m, "part")))
    return _one(_year_range(today.year + offset))


def _zh_rel_year_only(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    return _one(_year_range(ctx.today.year + _ZH_REL_YEAR[m["rely"]]))


def _earlier_later(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """earlier/later this week, month, year: the part of it before or after today."""
    unit, today = m["unit"], ctx.today
    whole = (
        _week(today, 0)
        if unit == "week"
        else _month_range(today.year, today.month)
        if unit == "month"
        else _year_range(today.year)
    )
    if whole is None:
        return None
    if m["side"] == "earlier":
        return (DateRange(whole.first, today),)
    return (DateRange(today, whole.last),)


def _rolling(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """The past N days/weeks/months/years (最近三天, 过去两周): N units ending today."""
    count = _number(m["n"]) if _g(m, "n") else 1
    if count is None or count < 1:
        return None
    unit, today = _UNIT_CANON[m["unit"]], ctx.today
    if unit in ("day", "week"):
        after = today - dt.timedelta(days=count * (7 if unit == "week" else 1))
    else:
        year, month = (
            _add_months(today.year, today.month, -count)
            if unit == "month"
            else (today.year - count, today.month)
        )
        if year <= dt.MINYEAR:
            return None
        after = dt.date(year, month, min(today.day, calendar.monthrange(year, month)[1]))
    return (DateRange(after + dt.timedelta(days=1), today),)


_UNIT_CANON: Final[dict[str, str]] = {
    **dict.fromkeys(_words("day 天 日"), "day"),
    **dict.fromkeys(_words("week 周 星期 个星期 礼拜 个礼拜"), "week"),
    **dict.fromkeys(_words("month 个月 月"), "month"),
    **dict.fromkeys(_words("year 年"), "year"),
}


_HALF_WIDTH: Final[dict[str, int]] = {"day": 0, "week": 3, "month": 15, "year": 182}
"""Half the width, in days, of the window centred on "N units ago" (a unit wide)."""
_SMALLER: Final[dict[str, str]] = {"week": "day", "month": "week", "year": "month"}
_UNIT_DAYS: Final[dict[str, float]] = {"day": 1, "week": 7, "month": 30.44, "year": 365.25}


def _around(today: dt.date, unit: str, count: float, sign: int) -> DateRange:
    """A window centred `count` units before (sign -1) or after `today`.

    One unit wide; for half a unit ("半年前", "half a month ago") one smaller unit wide.
    """
    centre = today + dt.timedelta(days=sign * round(_UNIT_DAYS[unit] * count))
    half = _HALF_WIDTH[_SMALLER.get(unit, unit) if count < 1 else unit]
    return DateRange(centre - dt.timedelta(days=half), centre + dt.timedelta(days=half))


def _ago(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """N days/weeks/months/years ago, 三天前, 半年前, and (future) in N days, 三天后."""
    raw = m["n"]
    count: float | None = 0.5 if raw in ("半", "half a") else _number(raw)
    if count is None or count <= 0 or count > 400:
        return None
    unit = _UNIT_CANON[m["unit"]]
    sign = -1 if m["dir"] in ("ago", "前", "之前", "以前", "back") else 1
    if sign > 0 and m["dir"] == "in" and ctx.tense != "future":
        return None  # "in two weeks" is a duration unless the message looks ahead
    if unit == "day" and count != int(count):
        return None
    return (_around(ctx.today, unit, count, sign),)


_DAY_WORDS: Final[dict[str, int]] = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    **dict.fromkeys(("today", "tonight", "this morning", "this afternoon", "this evening"), 0),
    **dict.fromkeys(("yesterday", "last night"), -1),
    "tomorrow": 1,
    **dict.fromkeys(_words("今天 今日 今早 今晚 今儿 今天早上 今天晚上"), 0),
    **dict.fromkeys(_words("昨天 昨日 昨晚 昨儿"), -1),
    **dict.fromkeys(_words("前天 前日"), -2),
    "大前天": -3,
    **dict.fromkeys(_words("明天 明日 明早 明晚"), 1),
    "后天": 2,
    "大后天": 3,
}


def _day_word(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    return (_day(ctx.today + dt.timedelta(days=_DAY_WORDS[m["w"]])),)


def _rel_weekend(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    which = m["which"]
    offset = -2 if _g(m, "before_last") else _REL_OFFSET[which]
    if which == "this coming":
        offset = 1 if ctx.today.weekday() >= 5 else 0
    return (_weekend(ctx.today, offset),)


def _bare_weekend(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    if _recurring(ctx, m.start()):
        return None
    today = ctx.today
    return _occurrences(lambda k: _weekend(today, k), 0, today, ctx.tense) or None


def _weekday_in_week(today: dt.date, weekday: int, offset: int) -> DateRange:
    return _day(_week_start(today) + dt.timedelta(weeks=offset, days=weekday))


def _rel_weekday(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    """last/this/next Friday, Friday of last week, 上周五, 这周三, 下星期一."""
    day = m["wd"]
    weekday = _WEEKDAYS[day] if day in _WEEKDAYS else _ZH_WEEKDAYS[day]
    which = m["which"]
    today = ctx.today
    if which in ("last", "previous", "this past") and not _g(m, "week"):
        back = (today.weekday() - weekday) % 7 or 7
        return (_day(today - dt.timedelta(days=back)),)
    if which == "this coming":
        ahead = (weekday - today.weekday()) % 7 or 7
        return (_day(today + dt.timedelta(days=ahead)),)
    offset = _REL_OFFSET[which]
    if which == "next" and not _g(m, "week") and weekday > today.weekday():
        # "next Friday" on a Monday: this week's Friday or next week's
        return (_weekday_in_week(today, weekday, 0), _weekday_in_week(today, weekday, 1))
    return (_weekday_in_week(today, weekday, offset),)


def _bare_weekday(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    if _recurring(ctx, m.start()):
        return None
    day = m["wd"]
    weekday = _WEEKDAYS[day] if day in _WEEKDAYS else _ZH_WEEKDAYS[day]
    today = ctx.today
    return (
        _occurrences(
            lambda k: _weekday_in_week(today, weekday, k), 0, today, ctx.tense, strict=True
        )
        or None
    )


def _holiday(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    name = m["h"]
    span = HOLIDAYS.get(name) or HOLIDAYS.get(name.replace("'", ""))
    if span is None:
        return None

    def make(year: int, span: Callable[[int], Span | None] = span) -> DateRange | None:
        found = span(year)
        return DateRange(*found) if found is not None else None

    if _g(m, "y"):
        year = _zh_number(m["y"])
        return _one(make(year)) if year is not None else None
    rel = _g(m, "rely")
    if rel:
        return _one(make(ctx.today.year + _ZH_REL_YEAR[rel]))
    which = _g(m, "which")
    if which:
        tense: Tense = "past" if _REL_OFFSET[which] < 0 else "future"
        if _REL_OFFSET[which] == 0:
            return _one(make(ctx.today.year))
        return _occurrences(make, ctx.today.year, ctx.today, tense, strict=True) or None
    purpose = _word_before(ctx, m.start()) in {"for", "over"}
    return _yearless(ctx, make, purpose=purpose) or None


def _season_match(m: re.Match[str], ctx: _Ctx) -> tuple[DateRange, ...] | None:
    first_month = _SEASONS[m["s"]]

    def make(year: int) -> DateRange | None:
        return _season(year, first_month)

    today = ctx.today
    if _g(m, "y"):
        return _one(make(int(m["y"])))
    rel = _g(m, "rely")
    if rel:
        return _one(make(today.year + _ZH_REL_YEAR[rel]))
    which = _g(m, "which")
    if which:
        offset = _REL_OFFSET[which]
        if offset == 0:
            current = _occurrences(make, today.year, today, "past")
            now = [r for r in current if r.first <= today <= r.last]
            return tuple(now) or _yearless(ctx, make) or None
        tense: Tense = "past" if offset < 0 else "future"
        return _occurrences(make, today.year, today, tense, strict=True) or None
    # a bare season is a time only after a preposition: "in the summer", not "summer dress",
    # "winter coat", "autumn leaves" (nor 冬天的衣服: Chinese seasons need a year before them)
    lead = _SEASON_LEAD_RE.search(ctx.text[max(0, m.start() - 24) : m.start()])
    if lead is None:
        return None
    return _yearless(ctx, make, purpose=lead.group(1) in {"for", "over"}) or None


_SEASON_LEAD_RE: Final = re.compile(
    r"\b(in|during|over|through|throughout|since|for|until|till|before|after|by)\s+(?:the\s+)?$"
)


_WB = r"(?<![a-z0-9])"
"""Start of an English word or number (no letter or digit before it)."""
_WE = r"(?![a-z0-9])"
"""End of an English word or number."""
_NB = r"(?<!\d)"
_NE = r"(?!\d)"
_D = r"(?P<d>3[01]|[12]\d|0?[1-9])"
_WHICH_ZH = r"(?P<which>上上个|上上|上个|上|这个|这|本|下个|下下|下)"
_NOT_AFTER_WEEK = r"(?![一二三四五六日天末围边到全期年岁])"
_NOT_AFTER_MONTH = r"(?![初中底末份球亮光饼])"
_MONEY = (
    r"(?!\s*(?:dollars|bucks|usd|eur|rmb|yuan|元|块|km|miles|steps|words|people|calories|items))"
)

_PATTERN_TABLE: Final[tuple[tuple[str, _Handler], ...]] = (
    # full dates
    (rf"{_NB}(?P<y>{_YEAR})[-/.](?P<m>1[0-2]|0?[1-9])[-/.]{_D}{_NE}", _iso_date),
    (
        rf"(?P<y>{_YEAR}|[零〇一二三四五六七八九]{{4}})\s*年\s*(?P<m>{_ZH_MONTH})\s*月\s*"
        rf"(?P<d>{_ZH_DAY})\s*[日号]",
        _zh_full_date,
    ),
    (rf"{_NB}(?P<a>\d{{1,2}})/(?P<b>\d{{1,2}})/(?P<y>{_YEAR}|\d\d){_NE}", _slash_date_year),
    (rf"{_WB}(?P<mon>{_MONTH_WORD})\.?\s+{_D}{_ORD},?\s+(?P<y>{_YEAR}){_NE}", _month_day_year),
    (
        rf"{_WB}(?:the\s+)?{_D}{_ORD}\s+(?:of\s+)?(?P<mon>{_MONTH_WORD})\.?,?\s+(?P<y>{_YEAR}){_NE}",
        _month_day_year,
    ),
    (
        rf"{_WB}(?P<mon>{_MONTH_WORD})\.?\s+{_D}{_ORD}\s*(?:-|–|—|to|until|through)\s*"
        rf"(?P<d2>3[01]|[12]\d|0?[1-9]){_ORD}{_WE}(?:,?\s+(?P<y>{_YEAR}){_NE})?",
        _month_day_span,
    ),
    (rf"{_WB}(?P<mon>{_MONTH_WORD})\.?\s+{_D}{_ORD}{_WE}(?!\s*(?:am|pm|:|%))", _month_day),
    (rf"{_WB}(?:the\s+)?{_D}{_ORD}\s+(?:of\s+)?(?P<mon>{_MONTH_WORD}){_WE}", _month_day),
    (rf"{_ZH_REL_YEAR_RE}?(?P<m>{_ZH_MONTH})\s*月\s*(?P<d>{_ZH_DAY})\s*[日号]", _zh_month_day),
    # months of a given year
    (
        rf"{_NB}(?P<y>{_YEAR}|[零〇一二三四五六七八九]{{4}})\s*年\s*(?P<m>{_ZH_MONTH})\s*月份?"
        rf"(?P<part>初|上旬|中旬|下旬|底|末)?",
        _month_year,
    ),
    (
        rf"{_ZH_REL_YEAR_RE}\s*的?\s*(?P<m>{_ZH_MONTH})\s*月份?(?P<part>初|上旬|中旬|下旬|底|末)?",
        _month_year,
    ),
    (
        rf"{_WB}(?:(?P<part>early|mid|late)[\s-]+)?(?P<mon>{_MONTH_WORD})\.?,?\s+(?:of\s+)?"
        rf"(?P<y>{_YEAR}){_NE}",
        _month_year,
    ),
    (rf"{_NB}(?P<y>{_YEAR})-(?P<m>1[0-2]|0[1-9]){_NE}", _iso_month),
    (rf"{_WB}(?P<which>last|this|next)\s+(?P<mon>{_MONTH_WORD}){_WE}", _rel_month_name),
    # holidays and seasons
    (rf"(?:{_NB}(?P<y>{_YEAR})\s*年\s*的?|{_ZH_REL_YEAR_RE}\s*的?)?(?P<h>{_HOLIDAY_ZH})", _holiday),
    (
        rf"{_WB}(?:(?P<which>last|this|next)\s+)?(?P<h>{_HOLIDAY_EN}){_WE}"
        rf"(?:\s+(?P<y>{_YEAR}){_NE})?",
        _holiday,
    ),
    (
        rf"(?:{_NB}(?P<y>{_YEAR})\s*年\s*的?|{_ZH_REL_YEAR_RE}\s*的?)?(?P<s>{_SEASON_ZH})",
        _season_match,
    ),
    (
        rf"{_WB}(?:(?P<which>last|this|next)\s+)?(?P<s>{_SEASON_EN}){_WE}"
        rf"(?:\s+(?:of\s+)?(?P<y>{_YEAR}){_NE})?",
        _season_match,
    ),
    # counted spans: before the day words, so that 三天前 is not read as 前天
    (
        rf"{_WB}(?:the\s+|in\s+the\s+|over\s+the\s+|during\s+the\s+)?(?:past|last)\s+"
        rf"(?P<n>{_EN_COUNT})\s+(?P<unit>day|week|month|year)s?{_WE}",
        _rolling,
    ),
    (rf"{_WB}(?:the\s+)?past\s+(?P<unit>week|month|year){_WE}(?P<n>)", _rolling),
    (
        rf"(?:最近|过去|近)的?(?P<n>{_ZH_NUM})(?P<unit>天|日|个星期|星期|周|个礼拜|礼拜|个月|年)",
        _rolling,
    ),
    (
        rf"{_WB}(?P<n>{_EN_COUNT}|half a)\s+(?P<unit>day|week|month|year)s?\s+"
        rf"(?P<dir>ago|back){_WE}",
        _ago,
    ),
    (
        rf"{_WB}(?P<dir>in)\s+(?P<n>{_EN_COUNT}|half a)\s+(?P<unit>day|week|month|year)s?{_WE}",
        _ago,
    ),
    (
        rf"{_WB}(?P<n>{_EN_COUNT})\s+(?P<unit>day|week|month|year)s?\s+(?P<dir>from now){_WE}",
        _ago,
    ),
    (
        rf"{_NB}(?P<n>{_ZH_NUM}|半)(?P<unit>天|日|个星期|星期|周|个礼拜|礼拜|个月|年)"
        rf"(?P<dir>之前|以前|前|之后|以后|后)",
        _ago,
    ),
    (rf"{_WB}(?P<side>earlier|later)\s+this\s+(?P<unit>week|month|year){_WE}", _earlier_later),
    # days
    (
        r"(?P<w>大前天|大后天|今天早上|今天晚上|今天|今日|今早|今晚|今儿|昨天|昨日|昨晚|昨儿|前天|前日|"
        r"明天|明日|明早|明晚|后天)",
        _day_word,
    ),
    (
        rf"{_WB}(?P<w>the day before yesterday|the day after tomorrow|today|tonight|"
        rf"this morning|this afternoon|this evening|yesterday|last night|tomorrow){_WE}",
        _day_word,
    ),
    # weekends and weekdays
    (rf"{_WB}(?:the\s+)?(?P<before_last>weekend before last){_WE}(?P<which>)", _rel_weekend),
    (
        rf"{_WB}(?P<which>this past|this coming|last|previous|this|next)\s+weekend{_WE}",
        _rel_weekend,
    ),
    (rf"{_WHICH_ZH}{_ZH_WEEK}末", _rel_weekend),
    (
        rf"{_WB}(?P<wd>{_WEEKDAY_WORD})\s+(?:of\s+)?(?P<which>last|this|next)\s+(?P<week>week){_WE}",
        _rel_weekday,
    ),
    (
        rf"{_WB}(?P<which>this past|this coming|last|previous|this|next)\s+"
        rf"(?P<wd>{_WEEKDAY_WORD}){_WE}",
        _rel_weekday,
    ),
    (rf"{_WHICH_ZH}(?P<week>{_ZH_WEEK})(?P<wd>[一二三四五六日天])", _rel_weekday),
    # weeks, months, years relative to today
    (
        rf"{_WB}(?:the\s+)?(?P<unit>week|month|year)\s+(?P<before_last>before last){_WE}"
        rf"(?P<which>)",
        _rel_unit,
    ),
    (
        rf"{_WB}(?P<which>last|previous|this|current|next)\s+(?P<unit>week|month|year){_WE}",
        _rel_unit,
    ),
    (rf"{_WHICH_ZH}(?P<unit>周|星期|礼拜){_NOT_AFTER_WEEK}", _rel_unit),
    (rf"{_WHICH_ZH}(?P<unit>月)月?(?P<part>初|中|底|末)", _rel_unit),
    (rf"{_WHICH_ZH}(?P<unit>月){_NOT_AFTER_MONTH}", _rel_unit),
    (r"(?P<rely>大前年|前年|去年|今年|明年|后年)", _zh_rel_year_only),
    # expressions without a year: the message's tense decides which occurrence
    (rf"{_WB}(?P<wd>{_WEEKDAY_WORD}){_WE}", _bare_weekday),
    (
        rf"(?<![上下这本每个几一二两三四五六七八九十\d]){_ZH_WEEK}(?P<wd>[一二三四五六日天])",
        _bare_weekday,
    ),
    (rf"{_WB}(?:the\s+)?weekend{_WE}", _bare_weekend),
    (rf"(?<![上下这本每个]){_ZH_WEEK}末", _bare_weekend),
    (rf"{_WB}(?:(?P<part>early|mid|late)[\s-]+)?(?P<mon>{_MONTH_WORD})\.?{_WE}", _bare_month),
    (
        rf"(?<![\d年个每几])(?P<m>{_ZH_MONTH})\s*月份?(?P<part>初|上旬|中旬|下旬|底|末)?{_NOT_AFTER_MONTH}",
        _zh_bare_month,
    ),
    (rf"{_NB}(?P<y>{_YEAR}|[零〇一二三四五六七八九]{{4}})\s*年(?![代级])", _year_only),
    (
        rf"{_WB}(?:in|of|during|since|from|throughout|until|till|before|after|by)\s+"
        rf"(?:the\s+year\s+)?(?P<y>{_YEAR}){_NE}{_MONEY}",
        _year_only,
    ),
    (rf"{_WB}(?:the\s+)?(?P<y>(?:19|20)\d0)'?s{_WE}", _decade),
    (rf"{_NB}(?P<a>1[0-2]|0?[1-9])/(?P<b>3[01]|[12]\d|0?[1-9]){_NE}(?!/)", _slash_date),
)
"""(pattern, handler), most specific first: a span taken by one is not read again by another."""

_CJK_RE: Final = re.compile(r"[\u4e00-\u9fff]")


def _script(pattern: str) -> str:
    """What a message needs for `pattern` to match: CJK text, an English word, or anything."""
    if pattern.startswith(_WB):
        return "en"
    return "zh" if _CJK_RE.search(pattern) else "any"


_PATTERNS: Final = tuple((re.compile(p), h, _script(p)) for p, h in _PATTERN_TABLE)

_TRIGGER_WORDS: Final = frozenset(
    [
        *_MONTHS,
        *_WEEKDAYS,
        *_SEASONS,
        *_words(
            "today tonight yesterday tomorrow morning afternoon evening night day days week weeks "
            "weekend month months year years ago christmas xmas eve new halloween valentine "
            "valentine's valentines fourth independence thanksgiving easter memorial labor"
        ),
    ]
)
"""English words without which (and without a digit) a message has no English time expression."""
_TRIGGER_RE: Final = re.compile(r"\d|[a-z][a-z']*|[天日周月年号季节夕宵午秋旦庆明诞]|五一|十一")


def _scripts(norm: str) -> frozenset[str]:
    """Which patterns can match `norm` (see `_script`); empty when none can."""
    found: set[str] = set()
    for token in _TRIGGER_RE.findall(norm):
        if token.isdigit() or token in _TRIGGER_WORDS:
            found.update(("en", "any"))
        elif not token.isascii():
            found.update(("zh", "any"))
    return frozenset(found)


_CONNECTOR_RE: Final = re.compile(
    r"\s*(?:-|–|—|~|to|until|till|through|thru|and|到|至|～)\s*(?:the\s+)?"
)
_LEAD_RE: Final = re.compile(
    r"(?:\b(?:in|on|at|during|for|over|since|from|by|of|around|between|about|within|until|till)"
    r"|在|于|从)\s*$"
)


def _normalise(text: str) -> str:
    """The message as scanned: NFKC, curly apostrophes straightened, at most `MAX_SCAN_CHARS`."""
    if len(text) > MAX_SCAN_CHARS:
        half = MAX_SCAN_CHARS // 2
        text = f"{text[:half]} {text[-half:]}"
    return unicodedata.normalize("NFKC", text).replace("’", "'")


def _merge(ranges: Iterable[DateRange]) -> tuple[DateRange, ...]:
    merged: list[DateRange] = []
    for r in sorted(ranges):
        if merged and r.first <= merged[-1].last + dt.timedelta(days=1):
            if r.last > merged[-1].last:
                merged[-1] = DateRange(merged[-1].first, r.last)
        else:
            merged.append(r)
    return tuple(merged)


def _join(left: TimeExpression, right: TimeExpression, text: str) -> TimeExpression | None:
    """One expression for "X to Y" / "between X and Y" / "从X到Y", or `None`."""
    between = text[left.end : right.start]
    found = _CONNECTOR_RE.fullmatch(between)
    if found is None:
        return None
    if found.group(0).strip() == "and" and not re.search(r"\bbetween\s*$", text[: left.start]):
        return None
    pairs: list[DateRange] = []
    for a in left.ranges:
        later = [b for b in right.ranges if b.last >= a.first]
        if later:
            b = min(later, key=lambda r: r.last)
            pairs.append(DateRange(a.first, max(a.last, b.last)))
    if not pairs:
        return None
    return TimeExpression(text[left.start : right.end], left.start, right.end, _merge(pairs))


def _since_today(expr: TimeExpression, text: str, today: dt.date) -> TimeExpression:
    """An expression after "since" / "自从": from its start to today."""
    if not re.search(r"(?:\bsince|自从|自)\s*$", text[max(0, expr.start - 8) : expr.start]):
        return expr
    started = [r for r in expr.ranges if r.first <= today]
    if not started:
        return expr
    return TimeExpression(expr.text, expr.start, expr.end, (DateRange(max(started).first, today),))


def _rest(text: str, expressions: Iterable[TimeExpression]) -> str:
    pieces: list[str] = []
    at = 0
    for expr in expressions:
        before = text[at : expr.start]
        lead = _LEAD_RE.search(before)
        pieces.append(before[: lead.start()] if lead else before)
        at = expr.end
    pieces.append(text[at:])
    return " ".join(" ".join(pieces).split())


def resolve_time(text: str, today: dt.date) -> ResolvedTime | None:
    """The time ranges a message refers to, resolved against `today`, or `None` if none.

    Args:
        text: The user's message (any language; English and Chinese expressions are understood).
        today: The user's current local date (in the configured timezone).

    Returns:
        The expressions, their merged ranges and the message without them; `None` when the
        message has no time expression that resolves.
    """
    cased = _normalise(text)
    norm = cased.lower()
    scripts = _scripts(norm)
    if not scripts:
        return None
    ctx = _Ctx(today=today, tense=detect_tense(norm), text=norm, cased=cased)
    taken: list[tuple[int, int]] = []
    found: list[TimeExpression] = []
    for pattern, handler, script in _PATTERNS:
        if script not in scripts:
            continue
        for match in pattern.finditer(norm):
            start, end = match.span()
            if start == end or any(start < e and s < end for s, e in taken):
                continue
            ranges = handler(match, ctx)
            taken.append((start, end))  # a refused match still claims its words ("May I")
            if ranges:
                found.append(TimeExpression(match.group(0), start, end, _merge(ranges)))
    if not found:
        return None
    found.sort(key=lambda e: e.start)
    joined: list[tuple[TimeExpression, bool]] = []
    for expr in found:
        if joined:
            both = _join(joined[-1][0], expr, norm)
            if both is not None:
                joined[-1] = (both, True)
                continue
        joined.append((expr, False))
    final = tuple(e if was_joined else _since_today(e, norm, today) for e, was_joined in joined)
    return ResolvedTime(
        expressions=final,
        ranges=_merge(r for e in final for r in e.ranges),
        rest=_rest(norm, final),
        tense=ctx.tense,
        personal=is_personal(norm),
    )
