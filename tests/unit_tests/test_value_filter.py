"""The value filter language (`_exchange.filters`): what each form matches and refuses."""

from __future__ import annotations

import datetime as dt

import pytest

from langchain_tdai_recall._exchange.filters import compile_value_filter
from langchain_tdai_recall.errors import ConfigError

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
        ({"tags": {"$eq": ("a", "b")}}, True),  # a tuple is the list it would be in JSON
        ({"tags": {"$in": [("a", "b")]}}, True),
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


# -- issue 24 item 4: one language for every explicit search --------------------------------

TIMED = {"due": "2026-03-01T09:30:00Z", "day": "2026-03-02", "text": "2026-03-01 notes"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"day": "2026-03-02"}, True),
        ({"due": "2026-03-01"}, True),  # an instant lies within its day
        ({"due": {"$eq": "2026-03-01T10:30:00+01:00"}}, True),  # the same instant
        ({"due": {"$lt": "2026-03-01T10:30:00+01:00"}}, False),  # as text it would be True
        ({"due": {"$gte": "2026-03-01T10:00:00+01:00"}}, True),  # as text it would be False
        ({"due": {"$gt": "2026-03-01"}}, False),  # not after the day's end
        ({"day": {"$gt": "2026-03-01"}}, True),
        ({"day": {"$lte": "2026-03-02T00:00:00Z"}}, False),  # the day ends after it
        ({"due": {"$lt": dt.date(2026, 3, 2)}}, True),
        ({"due": {"$gte": dt.datetime(2026, 3, 1, 9, 30)}}, True),  # naive = UTC
        ({"due": dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)}, True),
        ({"due": {"$ne": dt.date(2026, 3, 1)}}, False),
        ({"day": {"$in": [dt.date(2026, 3, 1), dt.date(2026, 3, 2)]}}, True),
        ({"text": {"$gt": dt.date(2026, 1, 1)}}, False),  # not a time: a time does not order it
        ({"text": {"$gt": "2026-01-01"}}, True),  # texts still order as texts
        ({"missing": {"$gt": dt.date(2026, 1, 1)}}, False),
    ],
)
def test_times_compare_as_ranges(spec: dict[str, object], expected: bool) -> None:
    test = compile_value_filter(spec)
    assert test is not None
    assert test(TIMED) is expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": {"$gt": 1, "name": "x"}}, r"filter\['kind'\] mixes operators \['\$gt'\] with"),
        ({"$or": [{"kind": "a"}]}, r"filter has the operator '\$or' at its top level"),
        ({"kind": {"$exists": True}}, r"'\$exists' \(True\), which is not supported"),
        ({"n": {"$gt": {"a": 1}}}, r"filter\['n'\]\['\$gt'\] orders numbers"),
        ({1: "x"}, r"has the key 1 of type int; .* use '1'"),
        ({"n": {"$eq": object()}}, r"filter\['n'\]\['\$eq'\] is a object"),
    ],
)
def test_every_unsupported_form_is_an_error(spec: dict[object, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_value_filter(spec)


def test_the_field_name_is_the_callers() -> None:
    with pytest.raises(ConfigError, match=r"^metadata\['source'\] uses the operator '\$regex'"):
        compile_value_filter({"source": {"$regex": "^e"}}, field="metadata")
