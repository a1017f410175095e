"""Normalisation to the anti-corruption list (issue 28, section 4), with ``coerce``.

A table per rule; a table of the same values where the schema also accepts the original,
which must come through untouched; and the refusals of values with two readings, whose
signal says so.
"""

from __future__ import annotations

from typing import Any

import pytest

from salvagelane.core import Reason
from salvagelane.core.coercion import coerce
from salvagelane.core.dates import Ambiguous, read_date, read_date_time
from salvagelane.core.schema import ItemSchema
from tests.support.builders import run

DATE = {"type": "string", "format": "date"}
DATE_TIME = {"type": "string", "format": "date-time"}
HOSTS = {"type": "array", "items": {"type": "string"}}
RFC3339 = "datetime_to_rfc3339"


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("field", "given", "want", "rule"),
    [
        ({"type": "boolean"}, "1", True, "string_to_boolean"),
        ({"type": "boolean"}, "0", False, "string_to_boolean"),
        ({"type": "boolean"}, "On", True, "string_to_boolean"),
        ({"type": "boolean"}, "off", False, "string_to_boolean"),
        ({"type": ["integer", "null"]}, "", None, "string_to_null"),
        (HOSTS, "a.com b.com", ["a.com", "b.com"], "string_to_array"),
        (HOSTS, "a.com, b.com", ["a.com", "b.com"], "string_to_array"),
        (HOSTS, "New York, Paris", ["New York", "Paris"], "string_to_array"),
        (HOSTS, "a.com", ["a.com"], "string_to_array"),
        (DATE, "12 November 2025", "2025-11-12", "date_to_iso8601"),
        (DATE, "November 12, 2025", "2025-11-12", "date_to_iso8601"),
        (DATE, "Wed, 12th Nov 2025", "2025-11-12", "date_to_iso8601"),
        (DATE, "2025/11/12", "2025-11-12", "date_to_iso8601"),
        (DATE, "13/11/2025", "2025-11-13", "date_to_iso8601"),
        (DATE, "11/13/2025", "2025-11-13", "date_to_iso8601"),
        (DATE, "05.05.2025", "2025-05-05", "date_to_iso8601"),
        (DATE_TIME, "2025-11-12 14:30Z", "2025-11-12T14:30:00Z", RFC3339),
        (DATE_TIME, "2025-11-12 14:30:05 +0100", "2025-11-12T14:30:05+01:00", RFC3339),
        (DATE_TIME, "2025-11-12T14:30:05.25 UTC", "2025-11-12T14:30:05.25Z", RFC3339),
    ],
)  # fmt: skip
def test_each_rule_normalises_and_records(
    field: dict[str, Any], given: str, want: Any, rule: str
) -> None:
    data, coercions, refused = coerce({"f": given}, _schema(f=field))
    assert refused is None
    assert data == {"f": want}
    [made] = coercions
    assert (made.path, made.original, made.value, made.rule) == ("$.f", given, want, rule)
    assert ItemSchema.compile(_schema(f=field)).check(data) is None


@pytest.mark.parametrize(
    ("field", "given"),
    [
        ({"type": ["boolean", "string"]}, "1"),
        ({"type": ["null", "string"]}, ""),
        ({"type": ["array", "string"], "items": {"type": "string"}}, "a.com b.com"),
        ({"type": "array", "items": {"type": "integer"}}, "1 2"),  # not an array of strings
        ({"type": "string"}, "12 November 2025"),  # no format asks for ISO 8601
        (DATE, "2025-11-12"),  # already ISO 8601
        (DATE_TIME, "2025-11-12T14:30:00Z"),
        ({"type": ["string", "null"], "format": "date"}, "12 November 2025"),
        (HOSTS, ""),  # [] or [""]: no single reading
        (HOSTS, "a.com,,b.com"),
        (DATE, "31 February 2025"),  # no such day: left for the schema to refuse
        (DATE, "12 Brumaire 2025"),
    ],
)
def test_nothing_is_coerced_where_the_original_is_accepted_or_unreadable(
    field: dict[str, Any], given: str
) -> None:
    data, coercions, refused = coerce({"f": given}, _schema(f=field))
    assert (data, coercions, refused) == ({"f": given}, (), None)


@pytest.mark.parametrize(
    ("field", "given", "why"),
    [
        (DATE, "11/12/2025", "11/12/2025 reads as 2025-11-12 or 2025-12-11"),
        (DATE, "01-02-2025", "01-02-2025 reads as 2025-01-02 or 2025-02-01"),
        (DATE_TIME, "2025-11-12 14:30", "has no time zone"),
    ],
)
def test_a_value_with_two_readings_is_refused_with_a_signal_that_says_so(
    field: dict[str, Any], given: str, why: str
) -> None:
    data, coercions, refused = coerce({"f": given}, _schema(f=field))
    assert data == {"f": given}
    assert coercions == ()
    assert refused is not None
    assert (refused.code, refused.path) == ("ambiguous", "$.f")
    assert why in refused.detail
    item = ItemSchema.compile(_schema(f=field))
    result = run(f'[{{"f": "{given}"}}]', schema=item, coerce=True)
    [held] = result.quarantined
    assert held.reason is Reason.SCHEMA
    assert held.error.code == "ambiguous"
    assert why in held.error.message(held.reason)


def test_coercion_happens_only_with_the_policy() -> None:
    schema = ItemSchema.compile(_schema(f=DATE, b={"type": "boolean"}))
    raw = '[{"f": "12 November 2025", "b": "on"}]'
    assert [q.reason for q in run(raw, schema=schema).quarantined] == [Reason.SCHEMA]
    [item] = run(raw, schema=schema, coerce=True).items
    assert item.data == {"f": "2025-11-12", "b": True}
    assert [c.rule for c in item.coercions] == ["string_to_boolean", "date_to_iso8601"]


def test_the_date_readers_answer_none_for_what_is_no_date() -> None:
    assert read_date("soon") is None
    assert read_date_time("yesterday at noon") is None
    assert isinstance(read_date("02/03/2025"), Ambiguous)
    assert read_date("3 Mar 2025") == "2025-03-03"
