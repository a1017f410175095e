"""Tables for the operator-only repair of truncated items and for boundary coercion."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from salvagelane.core.coercion import coerce
from salvagelane.core.records import Coercion, Reason
from salvagelane.core.repair import repair_truncated
from tests.support.builders import VALID_TRIAGE_ITEM, accepted_data, run, triage_item, triage_schema

# ------------------------------------------------------------------------- repair_truncated

REPAIR_CASES = [
    # a cut inside a value string: the string is closed, the brackets too
    pytest.param('{"a":"hel', {"a": "hel"}, id="value-string-closed"),
    pytest.param('{"a":1,"b":"x y', {"a": 1, "b": "x y"}, id="second-value-string-closed"),
    pytest.param('{"a":"x\\"y', {"a": 'x"y'}, id="string-with-escaped-quote-closed"),
    pytest.param('{"a":"x\\u00e9y', {"a": "x\u00e9y"}, id="string-after-complete-escape"),
    pytest.param('{"a":"x\\/', {"a": "x/"}, id="string-after-escaped-solidus"),
    pytest.param('{"a":"x\\n', {"a": "x\n"}, id="string-after-escaped-newline"),
    pytest.param('{"a":"x\\\\', {"a": "x\\"}, id="string-after-escaped-backslash"),
    pytest.param('{"a":"x\\\\u12', {"a": "x\\u12"}, id="string-escaped-backslash-then-u12"),
    # a cut inside an escape: the half-written escape is dropped
    pytest.param('{"a":"x\\', {"a": "x"}, id="inside-escape-backslash"),
    pytest.param('{"a":"x\\u', {"a": "x"}, id="inside-escape-u"),
    pytest.param('{"a":"x\\u12', {"a": "x"}, id="inside-escape-u12"),
    pytest.param('{"a":"x\\u00e', {"a": "x"}, id="inside-escape-u00e"),
    pytest.param('{"a":"x\\\\\\', {"a": "x\\"}, id="escaped-backslash-then-half-escape"),
    # a cut in a key, or after it: cut back to the last complete member
    pytest.param('{"a":1,"ke', {"a": 1}, id="inside-key"),
    pytest.param('{"a":1,"key"', {"a": 1}, id="after-key"),
    pytest.param('{"a":1,"key":', {"a": 1}, id="after-colon"),
    pytest.param('{"a":1,"key": ', {"a": 1}, id="after-colon-space"),
    pytest.param('{"a":1,', {"a": 1}, id="after-comma"),
    pytest.param('{"', {}, id="inside-first-key"),
    pytest.param("{", {}, id="after-open-brace"),
    # a cut in a number: the number is dropped (it may have had more digits)
    pytest.param('{"a":1,"n":12', {"a": 1}, id="number-digits"),
    pytest.param('{"a":1,"n":-', {"a": 1}, id="number-minus"),
    pytest.param('{"a":1,"n":1.5e1', {"a": 1}, id="number-exponent-digits"),
    pytest.param('{"a":1,"n":12.', {"a": 1}, id="number-after-dot"),
    pytest.param('{"a":1,"n":1e', {"a": 1}, id="number-after-e"),
    pytest.param('{"a":1,"n":1.5e-', {"a": 1}, id="number-after-exponent-sign"),
    pytest.param('{"a":1,"n":12 ', {"a": 1, "n": 12}, id="number-ended-by-whitespace-kept"),
    pytest.param('{"a":1,"n":12,', {"a": 1, "n": 12}, id="number-ended-by-comma-kept"),
    # a cut in a literal
    pytest.param('{"a":1,"t":tr', {"a": 1}, id="inside-literal"),
    pytest.param('{"a":1,"t":true', {"a": 1, "t": True}, id="complete-literal"),
    # nested arrays and objects
    pytest.param('{"a":[1,[2,3', {"a": [1, [2]]}, id="nested-arrays-number-dropped"),
    pytest.param('{"a":[1,[2,"x', {"a": [1, [2, "x"]]}, id="nested-arrays-string-closed"),
    pytest.param('{"a":{"b":{"c":"d', {"a": {"b": {"c": "d"}}}, id="nested-objects-string"),
    pytest.param('{"a":{"b":{"c":', {"a": {"b": {}}}, id="nested-objects-after-colon"),
    pytest.param('{"a":[', {"a": []}, id="empty-array-opened"),
    pytest.param('{"a":[1,2]', {"a": [1, 2]}, id="closed-array-open-object"),
    pytest.param('{"a":[{"b":1},{"c":"d', {"a": [{"b": 1}, {"c": "d"}]}, id="objects-in-array"),
    pytest.param(
        '{"a":[{"b":"c"}],"d":{"e":[1,{"f":"g',
        {"a": [{"b": "c"}], "d": {"e": [1, {"f": "g"}]}},
        id="deeply-mixed",
    ),
    pytest.param("[1,2", [1], id="array-item"),
    pytest.param('[{"a":1},{"b":', [{"a": 1}, {}], id="array-of-objects"),
]


@pytest.mark.parametrize(("text", "expected"), REPAIR_CASES)
def test_repair_truncated(text: str, expected: Any) -> None:
    repaired = repair_truncated(text)
    assert repaired == expected
    assert type(repaired) is type(expected)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param('{"a":1}', id="complete-object-was-not-cut"),
        pytest.param("[1]", id="complete-array-was-not-cut"),
        pytest.param('"abc', id="bare-string"),
        pytest.param("12", id="bare-number"),
        pytest.param('{"a" 1', id="damaged-before-the-cut"),
        pytest.param('{"a":1,"a":"c', id="duplicate-key-in-repair"),
        pytest.param('{"a":"x\\ud800"', id="lone-surrogate-in-repair"),
        pytest.param('{"a":1]', id="mismatched-closer"),
    ],
)
def test_repair_truncated_gives_none(text: str) -> None:
    assert repair_truncated(text) is None


# ------------------------------------------------------------------------------ coercion

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "z": {"type": "null"},
        "s": {"type": "string"},
        "si": {"type": ["string", "integer"]},
        "ni": {"type": ["integer", "null"]},
        "arr": {"type": "array", "items": {"type": "integer"}},
        "w": {"type": "object", "properties": {"score": {"type": "number"}}},
        "r": {"$ref": "#/$defs/count"},
        "rr": {"$ref": "#/$defs/alias"},
        "refs": {"type": "array", "items": {"$ref": "#/$defs/flag"}},
        "e": {"enum": [1, 2]},
        "any": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    },
    "$defs": {
        "count": {"type": "integer"},
        "alias": {"$ref": "#/$defs/count"},
        "flag": {"type": "boolean"},
    },
}


def c(path: str, original: Any, value: Any, rule: str) -> Coercion:
    return Coercion(path=path, original=original, value=value, rule=rule)


COERCION_CASES = [
    pytest.param(
        {"i": "5"}, {"i": 5}, [c("$.i", "5", 5, "string_to_integer")], id="int-from-string"
    ),
    pytest.param(
        {"i": " -5 "},
        {"i": -5},
        [c("$.i", " -5 ", -5, "string_to_integer")],
        id="int-padded-negative",
    ),
    pytest.param({"i": "5x"}, {"i": "5x"}, [], id="int-not-from-5x"),
    pytest.param({"i": "2.5"}, {"i": "2.5"}, [], id="int-not-from-fraction"),
    pytest.param({"i": ""}, {"i": ""}, [], id="int-not-from-empty"),
    pytest.param({"i": 5}, {"i": 5}, [], id="int-already-int"),
    pytest.param(
        {"n": "2.5"}, {"n": 2.5}, [c("$.n", "2.5", 2.5, "string_to_number")], id="number-fraction"
    ),
    pytest.param(
        {"n": "5"}, {"n": 5}, [c("$.n", "5", 5, "string_to_number")], id="number-integral"
    ),
    pytest.param(
        {"n": "1e3"}, {"n": 1000.0}, [c("$.n", "1e3", 1000.0, "string_to_number")], id="number-exp"
    ),
    pytest.param({"n": "5x"}, {"n": "5x"}, [], id="number-not-from-5x"),
    pytest.param({"n": "nan"}, {"n": "nan"}, [], id="number-not-from-nan"),
    pytest.param({"n": "Infinity"}, {"n": "Infinity"}, [], id="number-not-from-infinity"),
    pytest.param({"n": "1e999"}, {"n": "1e999"}, [], id="number-not-overflowing"),
    pytest.param({"b": "yes"}, {"b": True}, [c("$.b", "yes", True, "string_to_boolean")], id="yes"),
    pytest.param(
        {"b": "true"}, {"b": True}, [c("$.b", "true", True, "string_to_boolean")], id="true"
    ),
    pytest.param({"b": "no"}, {"b": False}, [c("$.b", "no", False, "string_to_boolean")], id="no"),
    pytest.param(
        {"b": "false"}, {"b": False}, [c("$.b", "false", False, "string_to_boolean")], id="false"
    ),
    pytest.param({"b": "1"}, {"b": True}, [c("$.b", "1", True, "string_to_boolean")], id="1"),
    pytest.param(
        {"b": "off"}, {"b": False}, [c("$.b", "off", False, "string_to_boolean")], id="off"
    ),
    pytest.param({"b": "maybe"}, {"b": "maybe"}, [], id="boolean-not-from-maybe"),
    pytest.param({"z": "n/a"}, {"z": None}, [c("$.z", "n/a", None, "string_to_null")], id="n/a"),
    pytest.param({"z": "null"}, {"z": None}, [c("$.z", "null", None, "string_to_null")], id="null"),
    pytest.param({"z": "none"}, {"z": None}, [c("$.z", "none", None, "string_to_null")], id="none"),
    pytest.param({"z": ""}, {"z": None}, [c("$.z", "", None, "string_to_null")], id="empty"),
    pytest.param({"s": "5"}, {"s": "5"}, [], id="string-type-never-coerced"),
    pytest.param({"s": "true"}, {"s": "true"}, [], id="string-type-keeps-true"),
    pytest.param({"si": "5"}, {"si": "5"}, [], id="type-list-including-string"),
    pytest.param(
        {"ni": "n/a"},
        {"ni": None},
        [c("$.ni", "n/a", None, "string_to_null")],
        id="nullable-int-null",
    ),
    pytest.param(
        {"ni": "7"}, {"ni": 7}, [c("$.ni", "7", 7, "string_to_integer")], id="nullable-int-number"
    ),
    pytest.param({"e": "1"}, {"e": "1"}, [], id="enum-without-type"),
    pytest.param({"any": "1"}, {"any": "1"}, [], id="any-of-is-a-choice"),
    pytest.param(
        {"arr": ["1", 2, "x"]},
        {"arr": [1, 2, "x"]},
        [c("$.arr[0]", "1", 1, "string_to_integer")],
        id="array-items",
    ),
    pytest.param(
        {"w": {"score": "3.5"}},
        {"w": {"score": 3.5}},
        [c("$.w.score", "3.5", 3.5, "string_to_number")],
        id="nested-object",
    ),
    pytest.param(
        {"r": "4"}, {"r": 4}, [c("$.r", "4", 4, "string_to_integer")], id="local-ref-defs"
    ),
    pytest.param({"rr": "4"}, {"rr": 4}, [c("$.rr", "4", 4, "string_to_integer")], id="ref-chain"),
    pytest.param(
        {"refs": ["yes", "no"]},
        {"refs": [True, False]},
        [
            c("$.refs[0]", "yes", True, "string_to_boolean"),
            c("$.refs[1]", "no", False, "string_to_boolean"),
        ],
        id="array-items-via-ref",
    ),
    pytest.param({"unknown": "5"}, {"unknown": "5"}, [], id="property-not-in-schema"),
    pytest.param(
        {"i": "1", "n": "2", "b": "yes"},
        {"i": 1, "n": 2, "b": True},
        [
            c("$.b", "yes", True, "string_to_boolean"),
            c("$.i", "1", 1, "string_to_integer"),
            c("$.n", "2", 2, "string_to_number"),
        ],
        id="several-recorded-by-path",
    ),
]


@pytest.mark.parametrize(("data", "expected", "coercions"), COERCION_CASES)
def test_coerce(data: dict[str, Any], expected: dict[str, Any], coercions: list[Coercion]) -> None:
    value, made, refused = coerce(copy.deepcopy(data), SCHEMA)
    assert refused is None
    assert value == expected
    # the types matter: 5 is not "5", True is not "true"
    assert json.dumps(value, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert list(made) == coercions


# ------------------------------------------------------------- coercion inside salvage


@pytest.mark.parametrize(
    ("item", "coerce_on", "accepted", "coercions", "reason"),
    [
        pytest.param(
            triage_item(wsjf={"score": "3.5"}),
            True,
            triage_item(wsjf={"score": 3.5}),
            [("$.wsjf.score", "3.5", 3.5, "string_to_number")],
            None,
            id="nested-wsjf-score",
        ),
        pytest.param(
            triage_item(rank="5", confidence="0.5"),
            True,
            triage_item(rank=5, confidence=0.5),
            [
                ("$.confidence", "0.5", 0.5, "string_to_number"),
                ("$.rank", "5", 5, "string_to_integer"),
            ],
            None,
            id="rank-and-confidence",
        ),
        pytest.param(
            triage_item(wsjf={"score": "3.5"}),
            False,
            None,
            [],
            Reason.SCHEMA,
            id="off-by-default",
        ),
        pytest.param(
            triage_item(wsjf={"score": "high"}),
            True,
            None,
            [],
            Reason.SCHEMA,
            id="not-a-number-stays-invalid",
        ),
        pytest.param(
            triage_item(rank="5x"),
            True,
            None,
            [],
            Reason.SCHEMA,
            id="5x-not-coerced",
        ),
        pytest.param(
            triage_item(candidate="5"),
            True,
            triage_item(candidate="5"),
            [],
            None,
            id="string-field-untouched",
        ),
    ],
)
def test_coercion_in_salvage(
    item: dict[str, Any],
    coerce_on: bool,
    accepted: dict[str, Any] | None,
    coercions: list[tuple[str, Any, Any, str]],
    reason: Reason | None,
) -> None:
    raw = json.dumps([VALID_TRIAGE_ITEM, item])
    result = run(raw, (), schema=triage_schema(), coerce=coerce_on)
    if accepted is None:
        assert accepted_data(result) == [VALID_TRIAGE_ITEM]
        assert [(q.index, q.reason) for q in result.quarantined] == [(1, reason)]
        return
    assert accepted_data(result) == [VALID_TRIAGE_ITEM, accepted]
    assert result.items[0].coercions == ()
    made = result.items[1].coercions
    assert [(m.path, m.original, m.value, m.rule) for m in made] == coercions
    assert result.to_json()["items"][1]["coercions"] == [
        {"path": p, "from": o, "to": v, "rule": r} for p, o, v, r in coercions
    ]
    # the span still covers the original text: the coercion is on record, not hidden
    span = result.items[1].span
    assert json.loads(raw[span.start : span.end]) == item


def test_coercion_never_applies_without_schema() -> None:
    result = run('[{"rank":"5"}]', (), coerce=True)
    assert accepted_data(result) == [{"rank": "5"}]
    assert result.items[0].coercions == ()
