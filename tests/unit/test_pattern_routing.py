"""Item schemas with a ``pattern`` (issue 28, section 6): jsonschema-rs decides where its
reading of the pattern is never wider than Python's re, and the reference everywhere else.

The JSON Schema Test Suite's pattern and ecmascript-regex tests hold the same
(tests/integration/test_json_schema_suite.py); here, a table of the constructs and a
differential property over generated strings, that jsonschema-rs's "valid" is always
the reference's, so that the layer's verdict is the reference's.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core.schema import ItemSchema
from salvagelane.core.schema_routing import compile_fast, format_checker, pattern_reads_alike

READ_ALIKE = [
    "^INC-[0-9]{4}$",
    "^[a-z0-9-]+$",
    "^[A-Z]{2,3}-[0-9]+$",
    "^(foo|bar)+$",
    "^https?://[^ /]+/",
    "a.b",
    "^[^a-z]*$",
    "^(?:ws|job)-[a-z0-9]{1,8}$",
    "^\\.[a-z]+\\$$",
    "^é+[à-ü]?$",
    "(a)?b{2,}c*?",
    "^$",
]
READ_TWO_WAYS = [
    "^[A-Z]{2,3}-\\d+$",
    "\\w+",
    "^\\s*$",
    "\\bword\\b",
    "^[a-z]{,3}$",
    "(?i)abc",
    "(?=a)b",
    "(?<name>a)",
    "^\\p{L}+$",
    "[a--b]",
    "a\\1",
    "\\u0041",
    "x{2",
]


@pytest.mark.parametrize("pattern", READ_ALIKE)
def test_patterns_read_alike_are_decided_by_jsonschema_rs(pattern: str) -> None:
    assert pattern_reads_alike(pattern)
    compiled = ItemSchema.compile({"type": "string", "pattern": pattern})
    assert compiled.reference_only == ""
    assert compiled.fast is not None


@pytest.mark.parametrize("pattern", READ_TWO_WAYS)
def test_patterns_read_two_ways_are_the_reference_s(pattern: str) -> None:
    assert not pattern_reads_alike(pattern)
    try:
        compiled = ItemSchema.compile({"type": "string", "pattern": pattern})
    except Exception:  # a pattern Python cannot compile is refused at load time
        return
    assert compiled.fast is None
    assert f"pattern {pattern!r} uses a construct" in compiled.reference_only


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"pattern": "^a$"}},
        {"oneOf": [{"pattern": "^a$"}, {"pattern": "^b"}]},
        {"if": {"pattern": "^a$"}, "then": {"maxLength": 1}},
        {"properties": {"x": {"pattern": "^a$"}}, "unevaluatedProperties": False},
    ],
)
def test_a_pattern_where_stricter_could_mean_more_lenient_is_the_reference_s(
    schema: dict[str, Any],
) -> None:
    compiled = ItemSchema.compile(schema)
    assert compiled.fast is None
    assert "could make the schema more lenient" in compiled.reference_only


_TEXT = st.text(
    st.sampled_from(list("abcxyzABCINC-0123456789 ./:é\n\r\t\u2028\u00a0٣_$")), max_size=12
)


@st.composite
def pattern_and_text(draw: st.DrawFn) -> tuple[str, str]:
    pattern = draw(st.sampled_from(READ_ALIKE))
    matching = st.from_regex(pattern)
    text = draw(st.one_of(_TEXT, matching, matching.map(lambda s: s + "\n")))
    return pattern, text


@settings(max_examples=500, deadline=None)
@given(case=pattern_and_text())
def test_jsonschema_rs_never_accepts_what_the_reference_refuses(case: tuple[str, str]) -> None:
    pattern, text = case
    schema = {"type": "string", "pattern": pattern}
    fast = compile_fast(schema).is_valid(text)
    reference = jsonschema.Draft202012Validator(schema, format_checker=format_checker())
    if fast:
        assert reference.is_valid(text), (pattern, text)
    # The layer's verdict is the reference's, whichever decided.
    layer = ItemSchema.compile(schema).check(text) is None
    assert layer == reference.is_valid(text), (pattern, text)
