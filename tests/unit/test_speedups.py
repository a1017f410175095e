"""The compiled scan loops give the Python loops' answers (docs/adr/0015).

``core/_speedups.c`` only accelerates: every scan, strict parse and document
verdict must be the same with the compiled loops and with the reference Python
ones (``speedups.use_python``). The properties run both on the same inputs the
salvage properties use: mutated reports, arbitrary text, and nested reports with
quote damage.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.core import Guardrails, SalvagePolicy, ScanResult, salvage, scan, speedups
from salvagelane.core.scanner import ItemsPath
from salvagelane.core.strict import Parsed, Unparsable, is_strict_document, parse_item
from tests.support.nested_reports import damaged_reports
from tests.unit.test_properties import (
    FAST,
    GENERIC_SCHEMA,
    _mutate,
    arbitrary_text,
    edits,
    guardrails,
    items_paths,
    reference_strict,
    reports,
    strict_candidates,
)

needs_compiled = pytest.mark.skipif(
    not speedups.COMPILED, reason="the compiled scan loops were not built"
)
pytestmark = needs_compiled


def test_the_compiled_loops_are_built_where_required() -> None:
    # CI builds them (.ci/run sets this): a silent fallback would hide a broken build.
    if os.environ.get("SALVAGELANE_REQUIRE_SPEEDUPS") == "1":
        assert speedups.COMPILED


def test_the_flags_mean_the_same_in_c_and_in_python() -> None:
    from salvagelane.core import _speedups

    for name in ("STRICT_GRAMMAR", "DUPLICATE_KEY", "KEYS_UNPROVEN", "NEEDS_CHECK"):
        assert getattr(_speedups, name) == getattr(speedups, name)


def _both_scans(text: str, items_path: ItemsPath) -> tuple[ScanResult, ScanResult]:
    compiled = scan(text, items_path)
    with speedups.use_python():
        reference = scan(text, items_path)
    # Steps differ where a deep container takes one compiled step instead of the loop's
    # many; the bound on them is asserted by the scan properties.
    return replace(compiled, steps=0), replace(reference, steps=0)


def _same_parse(text: str) -> None:
    compiled = parse_item(text, offset=7)
    with speedups.use_python():
        reference = parse_item(text, offset=7)
    assert type(compiled) is type(reference)
    if isinstance(compiled, Parsed):
        assert isinstance(reference, Parsed)
        # json.dumps tells 1 from 1.0 and True from 1, which == does not.
        assert json.dumps(compiled.value) == json.dumps(reference.value)
    else:
        assert isinstance(compiled, Unparsable)
        assert isinstance(reference, Unparsable)
        assert compiled.signal == reference.signal


@FAST
@given(report=reports(), mutations=st.none() | edits, items_path=items_paths)
def test_scan_is_the_same_on_reports_and_mutated_reports(
    report: object, mutations: list[tuple[str, int, str]] | None, items_path: ItemsPath
) -> None:
    text = report.text  # type: ignore[attr-defined]
    if mutations is not None:
        text = _mutate(text, mutations)
    compiled, reference = _both_scans(text, report.items_path)  # type: ignore[attr-defined]
    assert compiled == reference
    compiled, reference = _both_scans(text, items_path)
    assert compiled == reference


@FAST
@given(raw=arbitrary_text, items_path=items_paths)
def test_scan_is_the_same_on_arbitrary_text(raw: str, items_path: ItemsPath) -> None:
    compiled, reference = _both_scans(raw, items_path)
    assert compiled == reference


@FAST
@given(case=damaged_reports(max_damaged=3))
def test_scan_is_the_same_on_nested_reports_with_quote_damage(case: tuple) -> None:  # type: ignore[type-arg]
    report, text, _ = case
    compiled, reference = _both_scans(text, report.items_path)
    assert compiled == reference


@FAST
@given(report=reports(), mutations=st.none() | edits, limits=guardrails)
def test_salvage_is_the_same(
    report: object, mutations: list[tuple[str, int, str]] | None, limits: Guardrails
) -> None:
    # Compiled, a valid report is parsed once for all its items; in Python, item by item.
    text = report.text  # type: ignore[attr-defined]
    if mutations is not None:
        text = _mutate(text, mutations)
    policy = SalvagePolicy(
        items_path=report.items_path,  # type: ignore[attr-defined]
        item_schema=GENERIC_SCHEMA,
        guardrails=limits,
    )
    compiled = salvage(text, policy)
    with speedups.use_python():
        reference = salvage(text, policy)
    assert json.dumps(compiled.to_json(), sort_keys=True) == json.dumps(
        reference.to_json(), sort_keys=True
    )


@FAST
@given(report=reports(decorate=False), mutations=st.none() | edits)
def test_item_parse_is_the_same(
    report: object, mutations: list[tuple[str, int, str]] | None
) -> None:
    for span in report.spans:  # type: ignore[attr-defined]
        text = span.text(report.text)  # type: ignore[attr-defined]
        _same_parse(text if mutations is None else _mutate(text, mutations))


@FAST
@given(text=strict_candidates | arbitrary_text, mutations=st.none() | edits)
def test_check_strict_never_contradicts_the_reference(
    text: str, mutations: list[tuple[str, int, str]] | None
) -> None:
    if mutations is not None:
        text = _mutate(text, mutations)
    flags = speedups.check_strict(text, 0, len(text))
    expected = reference_strict(text)
    if expected:
        assert flags & speedups.STRICT_GRAMMAR
        assert not flags & speedups.DUPLICATE_KEY
    if flags == speedups.STRICT_GRAMMAR:  # proven: nothing left for a caller to check
        assert expected
    if not flags or flags & speedups.DUPLICATE_KEY:
        assert not expected
    with speedups.use_python():
        assert is_strict_document(text) == expected
    assert is_strict_document(text) == expected
    _same_parse(text)


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        pytest.param('{"a": 1, "b": [true, null, -0.5e3]}', 1, id="plain"),
        pytest.param('{"a": 1, "a": 2}', 1 | 2, id="duplicate"),
        pytest.param('{"a": {"a": 1}, "b": {"a": 2}}', 1, id="same-key-other-objects"),
        pytest.param('{"a": 1, "\\u0061": 2}', 1 | 4, id="escaped-key"),
        pytest.param('{"a": "\\u0000"}', 1 | 8, id="nul-escape"),
        pytest.param('{"a": "\\ud83d"}', 1 | 8, id="surrogate-escape"),
        pytest.param('{"a": "\ud83d"}', 1 | 8, id="raw-surrogate"),
        pytest.param('{"a": 1234567890123456789}', 1 | 8, id="19-digit-integer"),
        pytest.param('{"a": 123456789012345678}', 1, id="18-digit-integer"),
        pytest.param('{"a": 1234567890123456789.5}', 1, id="19-digit-float"),
        pytest.param("{" + ",".join(f'"k{i}": {i}' for i in range(65)) + "}", 1 | 4, id="65-keys"),
        pytest.param("{" + ",".join(f'"k{i}": {i}' for i in range(64)) + "}", 1, id="64-keys"),
        pytest.param('{"a": 1,}', 0, id="trailing-comma"),
        pytest.param('{"a": NaN}', 0, id="nan"),
        pytest.param('{"a": 01}', 0, id="leading-zero"),
        pytest.param('{"a": "x\ny"}', 0, id="raw-newline"),
        pytest.param('{"a": "\\x"}', 0, id="bad-escape"),
        pytest.param('{"a": 1} {', 0, id="extra-data"),
        pytest.param(' \n[1, "é", "\U0001f600"]\t', 1, id="wide-characters-and-whitespace"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_check_strict_flags(text: str, flags: int) -> None:
    assert speedups.check_strict(text, 0, len(text)) == flags


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('{"a": [1, {"b": "}"}]} tail', (22, 3), id="closed"),
        pytest.param('{"a": [1, {"b": "}"}] tail', None, id="unclosed"),
        pytest.param('{"a": [1}', None, id="mismatched"),
        pytest.param('{"a": "b\nc"}', None, id="raw-newline-in-string"),
        pytest.param('{"é": "\U0001f600", "k": [[[[1]]]]}', (26, 5), id="wide-and-deep"),
        pytest.param("{NaN junk 'x' ;}", (16, 1), id="junk-between-strings-is-not-read"),
    ],
)
def test_match_container(text: str, expected: tuple[int, int] | None) -> None:
    assert speedups.match_container(text, 0, len(text)) == expected


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        # The signature {"id": inside the second item's string: the run stops before it.
        pytest.param(
            '[{"id": 1}, {"id": 2, "a": "x{ "id":"}, {"id": 3}]', 1, id="signature-in-string"
        ),
        pytest.param('[{"id": 1}, {"id": 2, "s": {"id": 9}}, {"id": 3}]', 1, id="nested-signature"),
        pytest.param('[{"id": 1}, {"id": 2}, , {"id": 3}]', 2, id="double-comma"),
        pytest.param('[{"id": 1}, {"id": 2}]', 2, id="all"),
        pytest.param('[{"id": 1} {"id": 2}]', 1, id="missing-comma"),
        pytest.param('[\n  {"id": "é"},\n  {"id": "\U0001f600"}\n]', 2, id="wide-laid-out"),
    ],
)
def test_item_run_stops_where_the_loop_must_decide(text: str, taken: int) -> None:
    assert speedups.item_run is not None
    spans, _, _, _ = speedups.item_run(text, 1, '"id"', -1, -1, 3)
    assert len(spans) == 3 * taken
    compiled, reference = _both_scans(text, ())
    assert compiled == reference


# A string's usual characters are skipped sixteen bytes at a time (SSE2, one- and
# two-byte text): every character string_end stops at must stop it at any position in
# such a block, and a text whose widest character is one, two or four bytes must read
# the same. Each case puts one such character at each offset of a long string.
_FILLERS = ["a", "\u00e9", "\u2014", "\U0001f600"]  # one-byte, one-byte, two-byte, four-byte
_STOPS = ['"', "\\", "\\n", "\\u0041", "\\ud83d\\ude00", "\\u0000", "\n", "\x1f", "\ud83d"]


@pytest.mark.parametrize("filler", _FILLERS)
@pytest.mark.parametrize("stop", _STOPS)
def test_every_stop_character_is_found_at_every_offset(filler: str, stop: str) -> None:
    for offset in range(40):
        body = filler * offset + stop + filler * (40 - offset)
        for text in (f'{{"k": "{body}"}}', f'["{body}", "x"]', f'{{"k": ["{body}"]}}'):
            flags = speedups.check_strict(text, 0, len(text))
            expected = reference_strict(text)
            if flags == speedups.STRICT_GRAMMAR:
                assert expected, (filler, stop, offset, text)
            if expected:
                assert flags & speedups.STRICT_GRAMMAR, (filler, stop, offset, text)
            if flags and stop in ("\\u0000", "\ud83d", "\\ud83d\\ude00"):
                assert flags & speedups.NEEDS_CHECK, (filler, stop, offset, text)
            with speedups.use_python():
                reference_end = speedups.match_container(text, 0, len(text))
            compiled_end = speedups.match_container(text, 0, len(text))
            if reference_end is not None:  # the Python loops answer to depth three
                assert compiled_end == reference_end, (filler, stop, offset, text)
            compiled, reference = _both_scans(text, ("k",))
            assert compiled == reference, (filler, stop, offset, text)
