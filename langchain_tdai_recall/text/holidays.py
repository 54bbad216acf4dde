"""Holidays as date ranges of a given year: fixed dates, computed ones and lunar festivals.

`text.timeexpr` reads "for Christmas", "over Thanksgiving", "春节", "国庆" through `HOLIDAYS`: each
name maps to a function of the year that returns the holiday's inclusive (first, last) dates, or
`None` outside the years it knows (the lunar festivals: 2000-2050).

Ranges: Christmas 24-26 December, Thanksgiving (US) Thursday to Sunday, Easter Good Friday to
Easter Monday, Memorial and Labor Day the Saturday to the Monday; 春节 from New Year's Eve to the
7th day, 五一 1-5 May, 国庆 1-7 October, 清明 4-6 April; the others one day.
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Callable
from typing import Final

__all__ = ["HOLIDAYS", "LUNAR_YEARS", "Span"]

Span = tuple[dt.date, dt.date]
"""Inclusive (first, last) dates."""


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Lunar festivals by Gregorian date, 2000-2050 (MMDD of the 1st day of the 1st month, the 5th of
# the 5th and the 15th of the 8th): published calendar facts, checked against a lunar-calendar
# library when written.
_LUNAR_FIRST_YEAR: Final = 2000
LUNAR_YEARS: Final = range(2000, 2051)
"""Years the lunar festivals are known for."""
_SPRING_FESTIVAL: Final = _words(
    "0205 0124 0212 0201 0122 0209 0129 0218 0207 0126 0214 0203 0123 0210 0131 0219 0208 "
    "0128 0216 0205 0125 0212 0201 0122 0210 0129 0217 0206 0126 0213 0203 0123 0211 0131 "
    "0219 0208 0128 0215 0204 0124 0212 0201 0122 0210 0130 0217 0206 0126 0214 0202 0123"
)
_DRAGON_BOAT: Final = _words(
    "0606 0625 0615 0604 0622 0611 0531 0619 0608 0528 0616 0606 0623 0612 0602 0620 0609 "
    "0530 0618 0607 0625 0614 0603 0622 0610 0531 0619 0609 0528 0616 0605 0624 0612 0601 "
    "0620 0610 0530 0618 0607 0527 0614 0603 0622 0611 0531 0619 0608 0529 0615 0604 0623"
)
_MID_AUTUMN: Final = _words(
    "0912 1001 0921 0911 0928 0918 1006 0925 0914 1003 0922 0912 0930 0919 0908 0927 0915 "
    "1004 0924 0913 1001 0921 0910 0929 0917 1006 0925 0915 1003 0922 0912 1001 0919 0908 "
    "0927 0916 1004 0924 0913 1002 0920 0910 0928 0917 1005 0925 0915 1004 0922 0911 0930"
)


def _date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _span(first: dt.date, days: int) -> Span:
    return first, first + dt.timedelta(days=days - 1)


def _easter(year: int) -> dt.date:
    """Gregorian Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = b // 4, b % 4
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = c // 4, c % 4
    ell = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * ell) // 451
    month = (h + ell - 7 * m + 114) // 31
    day = (h + ell - 7 * m + 114) % 31 + 1
    return dt.date(year, month, day)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> dt.date:
    """The `n`-th (1-based; -1 = last) `weekday` of a month."""
    if n > 0:
        first = dt.date(year, month, 1)
        return first + dt.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
    last = dt.date(year, month, calendar.monthrange(year, month)[1])
    return last - dt.timedelta(days=(last.weekday() - weekday) % 7)


def _lunar(table: tuple[str, ...], year: int) -> dt.date | None:
    index = year - _LUNAR_FIRST_YEAR
    if not 0 <= index < len(table):
        return None
    mmdd = table[index]
    return dt.date(year, int(mmdd[:2]), int(mmdd[2:]))


def _fixed(month: int, day: int, days: int = 1) -> Callable[[int], Span | None]:
    def make(year: int) -> Span | None:
        first = _date(year, month, day)
        return _span(first, days) if first is not None else None

    return make


def _spring_festival(year: int) -> Span | None:
    new_year = _lunar(_SPRING_FESTIVAL, year)
    if new_year is None:
        return None
    return new_year - dt.timedelta(days=1), new_year + dt.timedelta(days=6)


def _lunar_day(table: tuple[str, ...], offset: int = 0) -> Callable[[int], Span | None]:
    def make(year: int) -> Span | None:
        day = _lunar(table, year)
        return _span(day + dt.timedelta(days=offset), 1) if day is not None else None

    return make


def _thanksgiving(year: int) -> Span | None:
    return _span(_nth_weekday(year, 11, 3, 4), 4)


def _easter_range(year: int) -> Span | None:
    sunday = _easter(year)
    return sunday - dt.timedelta(days=2), sunday + dt.timedelta(days=1)


def _monday_weekend(year: int, month: int, n: int) -> Span:
    monday = _nth_weekday(year, month, 0, n)
    return monday - dt.timedelta(days=2), monday


HOLIDAYS: Final[dict[str, Callable[[int], Span | None]]] = {
    "christmas eve": _fixed(12, 24),
    "christmas day": _fixed(12, 25),
    "christmas": _fixed(12, 24, 3),
    "xmas": _fixed(12, 24, 3),
    "new year's eve": _fixed(12, 31),
    "new years eve": _fixed(12, 31),
    "new year's day": _fixed(1, 1),
    "new years day": _fixed(1, 1),
    "halloween": _fixed(10, 31),
    "valentine's day": _fixed(2, 14),
    "valentines day": _fixed(2, 14),
    "valentine's": _fixed(2, 14),
    "fourth of july": _fixed(7, 4),
    "independence day": _fixed(7, 4),
    "thanksgiving": _thanksgiving,
    "easter": _easter_range,
    "memorial day": lambda y: _monday_weekend(y, 5, -1),
    "labor day": lambda y: _monday_weekend(y, 9, 1),
    "平安夜": _fixed(12, 24),
    "圣诞节": _fixed(12, 24, 3),
    "圣诞": _fixed(12, 24, 3),
    "元旦": _fixed(1, 1),
    "情人节": _fixed(2, 14),
    "万圣节": _fixed(10, 31),
    "五一": _fixed(5, 1, 5),
    "劳动节": _fixed(5, 1, 5),
    "国庆节": _fixed(10, 1, 7),
    "国庆": _fixed(10, 1, 7),
    "十一长假": _fixed(10, 1, 7),
    "清明节": _fixed(4, 4, 3),
    "清明": _fixed(4, 4, 3),
    "春节": _spring_festival,
    "过年": _spring_festival,
    "除夕": _lunar_day(_SPRING_FESTIVAL, -1),
    "大年三十": _lunar_day(_SPRING_FESTIVAL, -1),
    "大年初一": _lunar_day(_SPRING_FESTIVAL),
    "元宵节": _lunar_day(_SPRING_FESTIVAL, 14),
    "元宵": _lunar_day(_SPRING_FESTIVAL, 14),
    "端午节": _lunar_day(_DRAGON_BOAT),
    "端午": _lunar_day(_DRAGON_BOAT),
    "中秋节": _lunar_day(_MID_AUTUMN),
    "中秋": _lunar_day(_MID_AUTUMN),
}
"""Holiday name -> its range in a given year (`None` outside the tables)."""
