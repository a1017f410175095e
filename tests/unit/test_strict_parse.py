"""Item parsing with orjson first: every refusal of the precise parser is kept, with the
same correction signal, and every value is the one the precise parser reads (issue 15)."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core.records import SignalCode
from salvagelane.core.strict import Parsed, Unparsable, _parse_precisely, parse_item

# (text, what orjson alone does with it, what parse_item must give: a value or a code)
DIFFERENCES: list[Any] = [
    pytest.param('{"a": 1, "a": 2}', {"a": 2}, SignalCode.DUPLICATE_KEY, id="duplicate-key"),
    pytest.param(
        '{"a": {"b": 1, "b": 1}}', {"a": {"b": 1}}, SignalCode.DUPLICATE_KEY, id="nested-dup"
    ),
    pytest.param(
        '[{"k": ":", "k": 2}]', [{"k": 2}], SignalCode.DUPLICATE_KEY, id="dup-beside-colons"
    ),
    pytest.param('{"a": ":)", "b": "\\":"}', None, {"a": ":)", "b": '":'}, id="colons-no-dup"),
    pytest.param('{"n": 18446744073709551616}', None, {"n": 2**64}, id="int-beyond-64-bits"),
    pytest.param("[-9223372036854775809]", None, [-(2**63) - 1], id="negative-beyond-64"),
    pytest.param("[9223372036854775807]", None, [2**63 - 1], id="int64-max"),
    pytest.param(
        '{"s": "1234567890123456789012"}',
        None,
        {"s": "1234567890123456789012"},
        id="digits-in-string",
    ),
    pytest.param(
        '{"k\\\\": 1, "k\\\\": 2}',
        {"k\\": 2},
        SignalCode.DUPLICATE_KEY,
        id="dup-key-ending-in-backslash",
    ),
    pytest.param(
        '{"a": "\\":\\\\", "a": 1, "b": "\\\\\\":"}',
        {"a": 1, "b": '\\":'},
        SignalCode.DUPLICATE_KEY,
        id="dup-beside-escaped-quotes-and-colons",
    ),
    pytest.param(
        '{"a": "\\":\\\\", "b": "\\\\\\":"}',
        None,
        {"a": '":\\', "b": '\\":'},
        id="escaped-quotes-and-colons-no-dup",
    ),
    pytest.param(
        "[" * 300 + '{"a": 1, "a": 2}' + "]" * 300,
        orjson.loads("[" * 300 + '{"a": 2}' + "]" * 300),
        SignalCode.DUPLICATE_KEY,
        id="dup-deeper-than-orjson-serialises",
    ),
    pytest.param('{"s": "\\u0000"}', {"s": "\x00"}, SignalCode.NUL_CHARACTER, id="nul-escape"),
    pytest.param('{"\\u0000": 1}', {"\x00": 1}, SignalCode.NUL_CHARACTER, id="nul-in-key"),
    pytest.param('{"s": "\\ud800"}', "error", SignalCode.LONE_SURROGATE, id="lone-high-escape"),
    pytest.param('{"s": "\\udc80"}', "error", SignalCode.LONE_SURROGATE, id="lone-low-escape"),
    pytest.param('{"s": "\udcff"}', "error", SignalCode.INVALID_UTF8, id="undecoded-byte"),
    pytest.param('{"x": NaN}', "error", SignalCode.NON_FINITE, id="nan"),
    pytest.param('{"x": -Infinity}', "error", SignalCode.NON_FINITE, id="minus-infinity"),
    pytest.param('{"x": 1e999}', "error", SignalCode.NON_FINITE, id="overflow"),
    pytest.param('{"x": 1,}', "error", SignalCode.SYNTAX, id="trailing-comma"),
    pytest.param('{"x": "a\x01"}', "error", SignalCode.SYNTAX, id="raw-control"),
    pytest.param('{"x": 01}', "error", SignalCode.SYNTAX, id="leading-zero"),
    pytest.param('{"x": 1.0e-400}', None, {"x": 0.0}, id="underflow"),
    pytest.param('{"x": "\x7f\u2028"}', None, {"x": "\x7f\u2028"}, id="del-and-separator"),
    pytest.param('{"x": "\\ud834\\udd1e"}', None, {"x": "\U0001d11e"}, id="surrogate-pair"),
]


@pytest.mark.parametrize(("text", "orjson_reads", "expected"), DIFFERENCES)
def test_parse_item_keeps_every_refusal_and_value(
    text: str, orjson_reads: Any, expected: Any
) -> None:
    if orjson_reads == "error":
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(text)
    elif orjson_reads is not None:
        assert orjson.loads(text) == orjson_reads  # the difference this row is about
    result = parse_item(text, offset=7)
    assert result == _parse_precisely(text, 7)
    if isinstance(expected, SignalCode):
        assert isinstance(result, Unparsable)
        assert result.signal.code == expected
    else:
        assert isinstance(result, Parsed)
        assert result.value == expected
        assert type(result.value) is type(expected)


def test_big_ints_stay_ints() -> None:
    result = parse_item('{"n": 123456789012345678901234567890}')
    assert isinstance(result, Parsed)
    assert result.value == {"n": 123456789012345678901234567890}


def test_negative_zero_is_a_float_as_before() -> None:
    result = parse_item("[-0.0, -0]")
    assert isinstance(result, Parsed)
    assert isinstance(result.value, list)
    assert math.copysign(1, result.value[0]) == -1  # type: ignore[arg-type]
    assert result.value[1] == 0
    assert type(result.value[1]) is int


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=6),
    st.sampled_from([":", '":', "\\", "\x00", "1234567890123456789"]),
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", ":", '"', "a:", ""]), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=_values, duplicate=st.booleans(), indent=st.booleans())
def test_parse_item_agrees_with_the_precise_parse(
    value: Any, duplicate: bool, indent: bool
) -> None:
    import json

    text = json.dumps(value, indent=2 if indent else None, ensure_ascii=False)
    if duplicate and text.startswith("{") and text != "{}":
        text = '{"a": 0, ' + text[1:] if '"a"' in text else text
    assert parse_item(text) == _parse_precisely(text, 0)
