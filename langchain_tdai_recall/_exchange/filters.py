"""The one filter language of every explicit search: fields of a JSON object, tested by operators.

`TdaiMemory.search_memories(metadata=...)`, the `tdai_memory_search` tool's `metadata`, the
retriever's `filter` and the LangGraph store's `search(filter=...)` all compile their filter
here, so the same filter means the same thing (and is refused the same way) everywhere.

A filter is a dict from a field name to what its value must be:

- a plain value: equal, in JSON's sense (`True` is not `1`; `1` equals `1.0`; a missing field
  is `None`);
- a dict whose keys all start with `$`: every operator holds. `$eq` and `$ne` test equality
  of the whole value; `$gt`, `$gte`, `$lt` and `$lte` order two numbers or two strings (any
  other pair, a missing field included, does not match); `$in` and `$nin` take a list;
- any other dict: the field is an object holding at least those keys, each matching
  recursively (a partial match, as LangGraph's stores have it);
- a list: the field is a list of the same length whose items match one by one.

Times: a `datetime` or `date` operand, or an ISO-8601 date or date-time text compared with a
stored ISO text, compares as a time range: a date is its whole day, a date-time its instant
(naive = UTC). `$gte`/`$gt` ask the stored time to start at or after the operand's start / after
its end, `$lte`/`$lt` to end at or before the operand's end / before its start, equality that
it lies within the operand (`{"due": "2026-03-01"}` matches `"2026-03-01T09:30:00Z"`).

`compile_value_filter` checks a filter once and returns a test of one object. Anything else is
a `ConfigError` naming the field, the value and the fix, never a filter that matches nothing:
an unknown operator (`$regex`, `$exists`, ...), a dict mixing operators with plain keys, an
operator at the top level (`$or`), a non-list operand of `$in`/`$nin`, a key that is not a
string, an operand that is not JSON (or a time).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from langchain_tdai_recall.errors import ConfigError

__all__ = ["OPERATORS", "ValueTest", "compile_value_filter", "json_equal"]

OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
"""The supported operators."""

ValueTest = Callable[[Mapping[str, Any]], bool]
"""A compiled filter: whether one JSON object matches."""

_Test = Callable[[object], bool]
_Range = tuple[float, float]

_MAX_DEPTH: Final = 32

_ISO: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
    re.ASCII,
)
_SUPPORTED: Final = ", ".join(OPERATORS)


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def json_equal(have: object, want: object) -> bool:
    """JSON equality: `True` is not `1`, numbers compare by value, NaN equals nothing.

    A tuple in the filter is the JSON list it would be written as.
    """
    if isinstance(want, tuple):
        want = list(want)
    if isinstance(have, bool) or isinstance(want, bool):
        return type(have) is type(want) and have == want
    if isinstance(want, float) and math.isnan(want):
        return False
    return have == want


@functools.lru_cache(maxsize=4096)
def _text_range(text: str) -> _Range | None:
    """The time range of an ISO date (its day) or date-time (its instant), or `None`."""
    if not _ISO.fullmatch(text):
        return None
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            start = dt.datetime.combine(day, dt.time.min, dt.UTC).timestamp()
            return start, start + 86_400 - 1e-6
        moment = dt.datetime.fromisoformat(text.replace(" ", "T", 1))
    except (ValueError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    stamp = moment.timestamp()
    return stamp, stamp


def _time_range(value: object) -> _Range | None:
    """The time range of an operand: a `datetime`, a `date` or an ISO text; else `None`."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        stamp = moment.timestamp()
        return stamp, stamp
    if isinstance(value, dt.date):
        return _text_range(value.isoformat())
    if isinstance(value, str):
        return _text_range(value.strip())
    return None


def _stored_range(have: object) -> _Range | None:
    return _text_range(have.strip()) if isinstance(have, str) else None


def _time_order(op: str, bound: _Range) -> _Test:
    low, high = bound

    def test(have: object) -> bool:
        found = _stored_range(have)
        if found is None:
            return False
        start, end = found
        if op == "$gt":
            return start > high
        if op == "$gte":
            return start >= low
        if op == "$lt":
            return end < low
        return end <= high

    return test


def _equal_test(want: object) -> _Test:
    """Equality with one operand: JSON equality, or for a time, lying within it."""
    when = _time_range(want)
    if when is None:
        return lambda have: json_equal(have, want)
    low, high = when
    exact = not isinstance(want, dt.date)  # a stored text equal to an ISO operand matches too

    def test(have: object) -> bool:
        if exact and json_equal(have, want):
            return True
        found = _stored_range(have)
        return found is not None and low <= found[0] and found[1] <= high

    return test


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "$gt":
        return bool(a > b)
    if op == "$gte":
        return bool(a >= b)
    if op == "$lt":
        return bool(a < b)
    return bool(a <= b)


def _ordered(op: str, bound: object) -> _Test:
    numbers = (int, float)
    when = _time_range(bound)
    by_time = _time_order(op, when) if when is not None else None

    def test(have: object) -> bool:
        if by_time is not None and (isinstance(bound, dt.date) or _stored_range(have)):
            return by_time(have)
        if isinstance(have, bool) or isinstance(bound, bool):
            return False
        if isinstance(have, numbers) and isinstance(bound, numbers):
            return _compare(op, float(have), float(bound))
        if isinstance(have, str) and isinstance(bound, str):
            return _compare(op, have, bound)
        return False

    return test


def _check_operand(field: str, where: str, value: object, depth: int) -> None:
    """An operand must be JSON, or a time; raise naming the field otherwise."""
    if depth > _MAX_DEPTH:
        msg = f"{field}{where} is nested more than {_MAX_DEPTH} levels deep; flatten it"
        raise ConfigError(msg)
    if value is None or isinstance(value, str | bool | int | float | dt.date):
        return  # (NaN is allowed: it equals nothing)
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_key(field, where, key)
            _check_operand(field, f"{where}[{key!r}]", item, depth + 1)
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_operand(field, f"{where}[{i}]", item, depth + 1)
        return
    msg = (
        f"{field}{where} is a {type(value).__name__} ({_shown(value)}); a filter compares "
        "JSON values (str, int, float, bool, None, lists and dicts of them) or times "
        "(datetime, date): convert it"
    )
    raise ConfigError(msg)


def _check_key(field: str, where: str, key: object) -> None:
    if not isinstance(key, str):
        msg = (
            f"{field}{where} has the key {_shown(key)} of type {type(key).__name__}; filter "
            f"keys are field names, which are strings: use {str(key)!r}"
        )
        raise ConfigError(msg)


def _operator(field: str, where: str, op: str, operand: object) -> _Test:
    if op not in OPERATORS:
        msg = (
            f"{field}{where} uses the operator {op!r} ({_shown(operand)}), which is not "
            f"supported; the operators are {_SUPPORTED}, or a plain value for equality "
            "(to match words in a text, search with a query instead)"
        )
        raise ConfigError(msg)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple):
            msg = (
                f"{field}{where}[{op!r}] must be a list of values, got {_shown(operand)}; "
                f"write {{{op!r}: [{_shown(operand, 30)}]}}"
            )
            raise ConfigError(msg)
        tests = [_equal_test(w) for w in operand]
        if op == "$in":
            return lambda have: any(t(have) for t in tests)
        return lambda have: not any(t(have) for t in tests)
    if op == "$eq":
        return _equal_test(operand)
    if op == "$ne":
        same = _equal_test(operand)
        return lambda have: not same(have)
    if isinstance(operand, Mapping | list | tuple):
        msg = (
            f"{field}{where}[{op!r}] orders numbers, texts or times, got {_shown(operand)}; "
            "give a number, a text, a datetime or an ISO date"
        )
        raise ConfigError(msg)
    return _ordered(op, operand)


def _matcher(field: str, where: str, want: object) -> _Test:
    """The test of one field's value against what the filter says about it."""
    if isinstance(want, Mapping):
        for key in want:
            _check_key(field, where, key)
        keys = [str(k) for k in want]
        ops = [k for k in keys if k.startswith("$")]
        if ops and len(ops) < len(keys):
            plain = [k for k in keys if not k.startswith("$")]
            msg = (
                f"{field}{where} mixes operators {ops} with plain keys {plain} "
                f"({_shown(want)}); use either operators ({{{ops[0]!r}: ...}}) or a nested "
                f"object pattern ({{{plain[0]!r}: ...}}) for one field, not both"
            )
            raise ConfigError(msg)
        if ops:
            tests = [_operator(field, where, str(op), operand) for op, operand in want.items()]
            return lambda have: all(t(have) for t in tests)
        fields = [(str(k), _matcher(field, f"{where}[{k!r}]", v)) for k, v in want.items()]

        def partial(have: object) -> bool:
            return isinstance(have, Mapping) and all(test(have.get(key)) for key, test in fields)

        return partial
    if isinstance(want, list | tuple):
        items = [_matcher(field, f"{where}[{i}]", v) for i, v in enumerate(want)]

        def same_list(have: object) -> bool:
            return (
                isinstance(have, list | tuple)
                and len(have) == len(items)
                and all(t(h) for t, h in zip(items, have, strict=True))
            )

        return same_list
    return _equal_test(want)


def compile_value_filter(spec: object, *, field: str = "filter") -> ValueTest | None:
    """The test of a filter over a JSON object's fields, or `None` for no filter (`None`, `{}`).

    Args:
        spec: The filter.
        field: The argument's name in error messages (`"filter"`, `"metadata"`).

    Raises:
        ConfigError: If the filter is not a dict, or uses an unknown operator, mixes
            operators with plain keys, or has a malformed operand (the message names the
            field, the value and the fix).
    """
    if spec is None or (isinstance(spec, Mapping) and not spec):
        return None
    if not isinstance(spec, Mapping):
        msg = (
            f"{field} must be a dict from field names to values or operator dicts, got "
            f"{type(spec).__name__} {_shown(spec)}"
        )
        raise ConfigError(msg)
    _check_operand(field, "", spec, 0)
    for key in spec:
        if str(key).startswith("$"):
            msg = (
                f"{field} has the operator {key!r} at its top level ({_shown(spec)}); its keys "
                "are field names: several keys already all have to match, and $in lists the "
                f"values one field may take (operators, per field: {_SUPPORTED})"
            )
            raise ConfigError(msg)
    fields = [(str(k), _matcher(field, f"[{k!r}]", v)) for k, v in spec.items()]

    def matches(value: Mapping[str, Any]) -> bool:
        return all(test(value.get(key)) for key, test in fields)

    return matches
