"""The value filter language (`stores._index.filters`): what each form matches and refuses."""

from __future__ import annotations

import pytest

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.stores._index.filters import compile_value_filter

VALUE = {
    "kind": "hobby",
    "n": 3,
    "ratio": 0.5,
    "flag": True,
    "tags": ["a", "b"],
    "user": {"name": "Alice", "age": 40, "langs": ["fr", "en"]},
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"kind": "hobby"}, True),
        ({"kind": "food"}, False),
        ({"n": 3.0}, True),  # numbers compare by value
        ({"flag": 1}, False),  # True is not 1
        ({"n": True}, False),
        ({"missing": None}, True),  # a missing field is null
        ({"n": {"$gt": 2, "$lte": 3}}, True),
        ({"n": {"$gt": 3}}, False),
        ({"n": {"$gte": 3}, "ratio": {"$lt": 1}}, True),
        ({"kind": {"$gt": "a"}}, True),  # strings order too
        ({"kind": {"$gt": 1}}, False),  # a string and a number do not order
        ({"missing": {"$lt": 10}}, False),
        ({"flag": {"$gt": 0}}, False),  # booleans do not order
        ({"n": {"$lt": float("inf")}}, True),
        ({"n": {"$eq": float("nan")}}, False),  # NaN equals nothing
        ({"kind": {"$ne": "food"}}, True),
        ({"missing": {"$ne": "x"}}, True),
        ({"kind": {"$in": ["food", "hobby"]}}, True),
        ({"kind": {"$nin": ["food", "hobby"]}}, False),
        ({"tags": ["a", "b"]}, True),  # lists item by item
        ({"tags": ["b", "a"]}, False),
        ({"tags": ["a"]}, False),
        ({"user": {"name": "Alice"}}, True),  # nested objects partially
        ({"user": {"name": "Alice", "age": {"$gt": 30}}}, True),
        ({"user": {"langs": ["fr", "en"]}}, True),
        ({"user": {"name": "Bob"}}, False),
        ({"kind": {"name": "x"}}, False),  # an object pattern needs an object
        ({"user": {"$eq": {"name": "Alice"}}}, False),  # $eq is whole-value equality
        ({"tags": {"$eq": ["a", "b"]}}, True),
    ],
)
def test_what_a_filter_matches(spec: dict[str, object], expected: bool) -> None:
    test = compile_value_filter(spec)
    assert test is not None
    assert test(VALUE) is expected


def test_no_filter_is_none() -> None:
    assert compile_value_filter(None) is None
    assert compile_value_filter({}) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": {"$regex": "h.*"}}, r"filter\['kind'\] uses the operator '\$regex'"),
        ({"user": {"name": {"$like": "A%"}}}, r"filter\['user'\]\['name'\] uses the operator"),
        ({"kind": {"$in": "hobby"}}, r"filter\['kind'\]\['\$in'\] must be a list"),
        (["kind"], "filter must be a dict"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(spec: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_value_filter(spec)
