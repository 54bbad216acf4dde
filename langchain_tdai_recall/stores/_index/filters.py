"""The value filter language of explicit searches: fields of a JSON object, tested by operators.

A filter is a dict from a field name to what its value must be:

- a plain value: equal, in JSON's sense (`True` is not `1`; `1` equals `1.0`);
- a dict whose keys all start with `$`: every operator holds. `$eq` and `$ne` test equality
  of the whole value; `$gt`, `$gte`, `$lt` and `$lte` order two numbers or two strings (any
  other pair, a missing field included, does not match); `$in` and `$nin` take a list;
- any other dict: the field is an object holding at least those keys, each matching
  recursively (a partial match, as LangGraph's stores have it);
- a list: the field is a list of the same length whose items match one by one.

`compile_value_filter` checks a filter once (an unknown operator is a `ConfigError` naming the
field, the operator and the supported ones) and returns a test of one object. It is the store's
filter (`graph_store.TdaiStore.search(filter=...)`) and is meant to be the one filter language of
every explicit search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from langchain_tdai_recall.errors import ConfigError

__all__ = ["OPERATORS", "ValueTest", "compile_value_filter", "json_equal"]

OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
"""The supported operators."""

ValueTest = Callable[[Mapping[str, Any]], bool]
"""A compiled filter: whether one JSON object matches."""

_Test = Callable[[object], bool]


def json_equal(have: object, want: object) -> bool:
    """JSON equality: `True` is not `1`, numbers compare by value, NaN equals nothing."""
    if isinstance(have, bool) or isinstance(want, bool):
        return type(have) is type(want) and have == want
    if isinstance(want, float) and math.isnan(want):
        return False
    return have == want


def _ordered(op: str, bound: object) -> _Test:
    numbers = (int, float)

    def test(have: object) -> bool:
        if isinstance(have, bool) or isinstance(bound, bool):
            return False
        if isinstance(have, numbers) and isinstance(bound, numbers):
            a: Any = float(have)
            b: Any = float(bound)
        elif isinstance(have, str) and isinstance(bound, str):
            a, b = have, bound
        else:
            return False
        if op == "$gt":
            return bool(a > b)
        if op == "$gte":
            return bool(a >= b)
        if op == "$lt":
            return bool(a < b)
        return bool(a <= b)

    return test


def _operator(where: str, op: str, operand: object) -> _Test:
    if op not in OPERATORS:
        msg = (
            f"filter{where} uses the operator {op!r}; supported: {', '.join(OPERATORS)} "
            "(or a plain value for equality)"
        )
        raise ConfigError(msg)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple):
            msg = f"filter{where}[{op!r}] must be a list of values, got {operand!r:.60}"
            raise ConfigError(msg)
        choices = list(operand)
        if op == "$in":
            return lambda have: any(json_equal(have, w) for w in choices)
        return lambda have: not any(json_equal(have, w) for w in choices)
    if op == "$eq":
        return lambda have: json_equal(have, operand)
    if op == "$ne":
        return lambda have: not json_equal(have, operand)
    return _ordered(op, operand)


def _matcher(where: str, want: object) -> _Test:
    """The test of one field's value against what the filter says about it."""
    if isinstance(want, Mapping):
        keys = [str(k) for k in want]
        if want and all(k.startswith("$") for k in keys):
            tests = [_operator(where, str(op), operand) for op, operand in want.items()]
            return lambda have: all(t(have) for t in tests)
        fields = [(str(k), _matcher(f"{where}[{k!r}]", v)) for k, v in want.items()]

        def partial(have: object) -> bool:
            return isinstance(have, Mapping) and all(test(have.get(key)) for key, test in fields)

        return partial
    if isinstance(want, list | tuple):
        items = [_matcher(f"{where}[{i}]", v) for i, v in enumerate(want)]

        def same_list(have: object) -> bool:
            return (
                isinstance(have, list | tuple)
                and len(have) == len(items)
                and all(t(h) for t, h in zip(items, have, strict=True))
            )

        return same_list
    return lambda have: json_equal(have, want)


def compile_value_filter(spec: object) -> ValueTest | None:
    """The test of a filter over a JSON object's fields, or `None` for no filter (`None`, `{}`).

    Raises:
        ConfigError: If the filter is not a dict, or uses an unknown operator or a malformed
            operand (the message names the field).
    """
    if spec is None or (isinstance(spec, Mapping) and not spec):
        return None
    if not isinstance(spec, Mapping):
        msg = f"filter must be a dict of value fields, got {type(spec).__name__} {spec!r:.60}"
        raise ConfigError(msg)
    fields = [(str(k), _matcher(f"[{k!r}]", v)) for k, v in spec.items()]

    def matches(value: Mapping[str, Any]) -> bool:
        return all(test(value.get(key)) for key, test in fields)

    return matches
