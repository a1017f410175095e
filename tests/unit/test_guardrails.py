"""Guardrail tables: one minimal case per reason, their order, signals, status and counts."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from salvagelane.core.guardrails import Guardrails
from salvagelane.core.records import Reason, SalvageResult, Status
from salvagelane.errors import ConfigurationError
from tests.support.builders import (
    accepted_data,
    assert_partition,
    assert_spans_reparse,
    quarantine_reasons,
    run,
    triage_item,
    triage_schema,
)

R = Reason
OK_LIST = {"candidate": frozenset({"ok"})}


def _items(*items: Any) -> str:
    return json.dumps(list(items), separators=(",", ":"))


def _triage_raw(*items: dict[str, Any]) -> str:
    return "[" + ",".join(json.dumps(item) for item in items) + "]"


@dataclass(frozen=True)
class GuardCase:
    raw: str
    accepted: list[Any]
    quarantined: list[tuple[int | None, Reason]]
    code: str  # CorrectionSignal.code of the first quarantined item
    limits: dict[str, Any] = field(default_factory=dict)
    triage: bool = False  # validate against the daily-triage item schema


def gcase(
    id_: str,
    raw: str,
    accepted: list[Any],
    quarantined: list[tuple[int | None, Reason]],
    code: str,
    **kw: Any,
) -> Any:
    limits = {k: kw.pop(k) for k in list(kw) if k not in ("triage",)}
    return pytest.param(GuardCase(raw, accepted, quarantined, code, limits, **kw), id=id_)


def _run_case(c: GuardCase) -> SalvageResult:
    return run(c.raw, (), schema=triage_schema() if c.triage else None, **c.limits)


VALID = triage_item()
REASON_CASES = [
    # oversize: the whole output, before anything is scanned
    gcase("oversize", '[{"a":1}]', [], [(None, R.OVERSIZE)], "oversize", max_bytes=8),
    gcase(
        "oversize-counts-utf8-bytes",
        '["\u00e9\u00e9"]',
        [],
        [(None, R.OVERSIZE)],
        "oversize",
        max_bytes=7,
    ),
    # too_deep: containers counted on the raw span, the item object is 1
    gcase(
        "too-deep-object-in-object",
        '[{"a":{"b":1}},{"a":1}]',
        [{"a": 1}],
        [(0, R.TOO_DEEP)],
        "too_deep",
        max_depth=1,
    ),
    gcase(
        "too-deep-arrays-count",
        '[{"a":[[1]]},{"a":[1]}]',
        [{"a": [1]}],
        [(0, R.TOO_DEEP)],
        "too_deep",
        max_depth=2,
    ),
    # too_long: strings (decoded), keys and numbers
    gcase(
        "too-long-string",
        '[{"a":"abcdef"},{"a":"abcde"}]',
        [{"a": "abcde"}],
        [(0, R.TOO_LONG)],
        "too_long",
        max_string_length=5,
    ),
    gcase(
        "too-long-number",
        '[{"a":1234567},{"a":12345}]',
        [{"a": 12345}],
        [(0, R.TOO_LONG)],
        "too_long",
        max_string_length=5,
    ),
    gcase(
        "too-long-key",
        '[{"abcdefgh":1},{"abcde":1}]',
        [{"abcde": 1}],
        [(0, R.TOO_LONG)],
        "too_long",
        max_string_length=5,
    ),
    # truncated: the span ends before the item closes
    gcase("truncated", '[{"a":1},{"a":"cut of', [{"a": 1}], [(1, R.TRUNCATED)], "truncated"),
    # malformed: the strict parse (or damage the scanner stepped over)
    gcase("malformed-dropped-colon", '[{"a" 1},{"a":2}]', [{"a": 2}], [(0, R.MALFORMED)], "syntax"),
    gcase("malformed-nan", '[{"a":NaN},{"a":2}]', [{"a": 2}], [(0, R.MALFORMED)], "non_finite"),
    gcase(
        "malformed-infinity",
        '[{"a":Infinity},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "non_finite",
    ),
    gcase(
        "malformed-minus-infinity",
        '[{"a":-Infinity},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "non_finite",
    ),
    gcase(
        "malformed-overflow-to-infinity",
        '[{"a":1e999},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "non_finite",
    ),
    gcase(
        "malformed-duplicate-key-with-allow-list",
        '[{"candidate": "ok", "candidate": "evil"},{"candidate":"ok"}]',
        [{"candidate": "ok"}],
        [(0, R.MALFORMED)],
        "duplicate_key",
        allow_lists=OK_LIST,
    ),
    gcase(
        "malformed-lone-high-surrogate",
        '[{"a":"\\ud800"},{"a":"\\ud83d\\ude00"}]',
        [{"a": "\U0001f600"}],
        [(0, R.MALFORMED)],
        "lone_surrogate",
    ),
    gcase(
        "malformed-lone-low-surrogate",
        '[{"a":"x\\udc00"},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "lone_surrogate",
    ),
    gcase(
        "malformed-reversed-surrogate-pair",
        '[{"a":"\\ude00\\ud83d"},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "lone_surrogate",
    ),
    gcase(
        "malformed-nul-escape-in-value",
        '[{"a":"x\\u0000y"},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "nul_character",
    ),
    gcase(
        "malformed-nul-escape-in-key",
        '[{"\\u0000":1},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "nul_character",
    ),
    gcase(
        "malformed-trailing-comma-in-item",
        '[{"a":1,},{"a":2}]',
        [{"a": 2}],
        [(0, R.MALFORMED)],
        "syntax",
    ),
    gcase("malformed-leading-zero", '[{"a":01},{"a":2}]', [{"a": 2}], [(0, R.MALFORMED)], "syntax"),
    gcase(
        "malformed-single-quotes", "[{'a':1},{\"a\":2}]", [{"a": 2}], [(0, R.MALFORMED)], "syntax"
    ),
    gcase(
        "malformed-stray-text",
        '[{"a":1}, oops, {"a":2}]',
        [{"a": 1}, {"a": 2}],
        [(1, R.MALFORMED)],
        "stray_text",
    ),
    # not_object: the item parsed but is not an object
    gcase("not-object-string", '["s",{"a":1}]', [{"a": 1}], [(0, R.NOT_OBJECT)], "not_object"),
    gcase("not-object-number", '[5,{"a":1}]', [{"a": 1}], [(0, R.NOT_OBJECT)], "not_object"),
    gcase("not-object-array", '[[1],{"a":1}]', [{"a": 1}], [(0, R.NOT_OBJECT)], "not_object"),
    gcase("not-object-null", '[null,{"a":1}]', [{"a": 1}], [(0, R.NOT_OBJECT)], "not_object"),
    # schema
    gcase(
        "schema-type",
        _triage_raw(triage_item(wsjf={"score": "high"}), VALID),
        [VALID],
        [(0, R.SCHEMA)],
        "type",
        triage=True,
    ),
    gcase(
        "schema-required",
        _triage_raw({k: v for k, v in VALID.items() if k != "why"}, VALID),
        [VALID],
        [(0, R.SCHEMA)],
        "required",
        triage=True,
    ),
    gcase(
        "schema-enum",
        _triage_raw(triage_item(action="panic"), VALID),
        [VALID],
        [(0, R.SCHEMA)],
        "enum",
        triage=True,
    ),
    # allow_list
    gcase(
        "allow-list",
        '[{"candidate":"evil"},{"candidate":"ok"}]',
        [{"candidate": "ok"}],
        [(0, R.ALLOW_LIST)],
        "not_allowed",
        allow_lists=OK_LIST,
    ),
    gcase(
        "allow-list-array-element",
        '[{"candidate":["ok","evil"]},{"candidate":["ok"]}]',
        [{"candidate": ["ok"]}],
        [(0, R.ALLOW_LIST)],
        "not_allowed",
        allow_lists=OK_LIST,
    ),
    gcase(
        "allow-list-non-string",
        '[{"candidate":1},{"candidate":"ok"}]',
        [{"candidate": "ok"}],
        [(0, R.ALLOW_LIST)],
        "not_allowed",
        allow_lists=OK_LIST,
    ),
    gcase(
        "allow-list-nested-field",
        '[{"w":{"id":"evil"}},{"w":{"id":"ok"}}]',
        [{"w": {"id": "ok"}}],
        [(0, R.ALLOW_LIST)],
        "not_allowed",
        allow_lists={"w.id": frozenset({"ok"})},
    ),
    # over_limit
    gcase(
        "over-limit",
        '[{"rank":3},{"rank":1},{"rank":2}]',
        [{"rank": 1}, {"rank": 2}],
        [(0, R.OVER_LIMIT)],
        "over_limit",
        max_items=2,
        rank_key="rank",
    ),
]


@pytest.mark.parametrize("c", REASON_CASES)
def test_each_reason(c: GuardCase) -> None:
    result = _run_case(c)
    assert accepted_data(result) == c.accepted
    assert quarantine_reasons(result) == c.quarantined
    assert result.quarantined[0].error.code == c.code
    assert_spans_reparse(c.raw, result)
    assert_partition(result)


@pytest.mark.parametrize(
    ("raw", "limits"),
    [
        pytest.param('[{"a":1}]', {"max_bytes": 9}, id="bytes-at-cap"),
        pytest.param('[{"a":"\u00e9"}]', {"max_bytes": 12}, id="utf8-bytes-at-cap"),
        pytest.param('[{"a":{"b":1}}]', {"max_depth": 2}, id="depth-at-limit"),
        pytest.param('[{"a":"abcde"}]', {"max_string_length": 5}, id="string-at-limit"),
        pytest.param('[{"a":12345}]', {"max_string_length": 5}, id="number-at-limit"),
        pytest.param(
            '[{"a":"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"}]',
            {"max_string_length": 5},
            id="escapes-measured-decoded",
        ),
        pytest.param('[{"a":"\\ud83d\\ude00"}]', {}, id="surrogate-pair-is-fine"),
        pytest.param('[{"candidate":"ok","other":"evil"}]', {"allow_lists": OK_LIST}, id="allowed"),
        pytest.param('[{"other":"evil"}]', {"allow_lists": OK_LIST}, id="allow-list-field-absent"),
    ],
)
def test_limits_are_inclusive_and_nothing_is_quarantined(raw: str, limits: dict[str, Any]) -> None:
    result = run(raw, (), **limits)
    assert result.quarantined == ()
    assert len(result.items) == 1
    assert result.status is Status.OK


# ----------------------------------------------------------------------- first failure wins

FIRST_FAILURE_CASES = [
    gcase(
        "too-deep-beats-malformed",
        '[{"a":{"b":NaN}}]',
        [],
        [(0, R.TOO_DEEP)],
        "too_deep",
        max_depth=1,
    ),
    gcase(
        "too-deep-beats-too-long",
        '[{"a":{"b":"abcdefgh"}}]',
        [],
        [(0, R.TOO_DEEP)],
        "too_deep",
        max_depth=1,
        max_string_length=5,
    ),
    gcase(
        "too-deep-beats-truncated", '[{"a":{"b":"cu', [], [(0, R.TOO_DEEP)], "too_deep", max_depth=1
    ),
    gcase(
        "too-long-beats-truncated",
        '[{"a":"abcdefgh","b":"cu',
        [],
        [(0, R.TOO_LONG)],
        "too_long",
        max_string_length=5,
    ),
    gcase(
        "too-long-beats-malformed",
        '[{"a":"abcdefgh","b":NaN}]',
        [],
        [(0, R.TOO_LONG)],
        "too_long",
        max_string_length=5,
    ),
    gcase("truncated-beats-malformed", '[{"a":NaN,"b":"cu', [], [(0, R.TRUNCATED)], "truncated"),
    gcase("malformed-beats-not-object", "[[NaN]]", [], [(0, R.MALFORMED)], "non_finite"),
    gcase(
        "not-object-beats-schema", '["high"]', [], [(0, R.NOT_OBJECT)], "not_object", triage=True
    ),
    gcase(
        "schema-beats-allow-list",
        _triage_raw(triage_item(candidate=5)),
        [],
        [(0, R.SCHEMA)],
        "type",
        triage=True,
        allow_lists={"candidate": frozenset({"billing-migration"})},
    ),
    gcase(
        "malformed-duplicate-beats-allow-list-either-order",
        '[{"candidate": "evil", "candidate": "ok"}]',
        [],
        [(0, R.MALFORMED)],
        "duplicate_key",
        allow_lists=OK_LIST,
    ),
    gcase(
        "duplicate-key-nested",
        '[{"w": {"id": "ok", "id": "evil"}}]',
        [],
        [(0, R.MALFORMED)],
        "duplicate_key",
        allow_lists={"w.id": frozenset({"ok"})},
    ),
    gcase(
        "duplicate-key-spelled-with-escape",
        '[{"candidate": "ok", "c\\u0061ndidate": "evil"}]',
        [],
        [(0, R.MALFORMED)],
        "duplicate_key",
        allow_lists=OK_LIST,
    ),
    gcase(
        "allow-list-beats-over-limit",
        '[{"candidate":"evil"},{"candidate":"ok"},{"candidate":"ok","n":2}]',
        [{"candidate": "ok"}],
        [(0, R.ALLOW_LIST), (2, R.OVER_LIMIT)],
        "not_allowed",
        allow_lists=OK_LIST,
        max_items=1,
    ),
]


@pytest.mark.parametrize("c", FIRST_FAILURE_CASES)
def test_first_failure_wins(c: GuardCase) -> None:
    result = _run_case(c)
    assert accepted_data(result) == c.accepted
    assert quarantine_reasons(result) == c.quarantined
    assert result.quarantined[0].error.code == c.code
    # a duplicate key never lets either value through
    assert all(item.data.get("candidate") != "evil" for item in result.items)


# ------------------------------------------------------------------------ correction signals


@pytest.mark.parametrize(
    ("raw", "limits", "triage", "signal"),
    [
        pytest.param(
            '[{"a":1}]',
            {"max_bytes": 8},
            False,
            ("oversize", "$", "at most 8 bytes of output", "at least 9 bytes"),
            id="oversize",
        ),
        pytest.param(
            '["\u00e9\u00e9"]',
            {"max_bytes": 7},
            False,
            ("oversize", "$", "at most 7 bytes of output", "8 bytes"),
            id="oversize-exact-utf8",
        ),
        pytest.param(
            '[{"a":{"b":1}}]',
            {"max_depth": 1},
            False,
            ("too_deep", "$", "at most 1 nested containers", "2 nested containers"),
            id="too-deep",
        ),
        pytest.param(
            '[{"a":"abcdef"}]',
            {"max_string_length": 5},
            False,
            ("too_long", "$", "strings and numbers of at most 5 characters", "6 characters"),
            id="too-long",
        ),
        pytest.param(
            '[{"a":"cut',
            {},
            False,
            ("truncated", "$", "a complete item", "output that ends inside the item"),
            id="truncated",
        ),
        pytest.param(
            '[{"a" 1}]',
            {},
            False,
            ("syntax", "$", "':' after the key", '"1}"'),
            id="malformed-dropped-colon",
        ),
        pytest.param(
            '[{"a":NaN}]',
            {},
            False,
            ("non_finite", "$", "a finite JSON number", "NaN"),
            id="malformed-nan",
        ),
        pytest.param(
            '[{"candidate": "ok", "candidate": "evil"}]',
            {"allow_lists": OK_LIST},
            False,
            ("duplicate_key", "$", "unique keys", '"candidate" twice'),
            id="malformed-duplicate-key",
        ),
        pytest.param(
            '[{"a":"\\ud800"}]',
            {},
            False,
            ("lone_surrogate", "$.a", "a string of valid Unicode", "lone surrogate U+D800"),
            id="malformed-lone-surrogate",
        ),
        # Issue 13: a byte that was not UTF-8 (decoded with surrogateescape, as the CLI
        # and the store read output) read "lone surrogate U+DCE9".
        pytest.param(
            '[{"a":"caf\udce9"}]',
            {},
            False,
            ("invalid_utf8", "$.a", "a string of valid UTF-8", "byte 0xE9 at offset 10"),
            id="malformed-invalid-utf8-byte",
        ),
        pytest.param(
            '[{"a":["ok",{"caf\udcff":1}],"b":"\udce9"}]',
            {},
            False,
            (
                "invalid_utf8",
                '$.a[1]["caf\\udcff"]',
                "a key of valid UTF-8",
                "byte 0xFF at offset 17",
            ),
            id="malformed-invalid-utf8-byte-first-in-document-order",
        ),
        pytest.param(
            '[{"a":\udce9}]',
            {},
            False,
            ("syntax", "$", "a JSON value", "byte 0xE9, not valid UTF-8"),
            id="malformed-invalid-utf8-byte-outside-a-string",
        ),
        pytest.param(
            '[{"a":"\\udce9"}]',
            {},
            False,
            ("lone_surrogate", "$.a", "a string of valid Unicode", "lone surrogate U+DCE9"),
            id="malformed-escaped-surrogate-is-not-a-byte",
        ),
        pytest.param(
            '[{"a":"\\u0000"}]',
            {},
            False,
            ("nul_character", "$.a", "a string without NUL", "\\u0000"),
            id="malformed-nul",
        ),
        pytest.param(
            "[[1,2]]",
            {},
            False,
            ("not_object", "$", "an object", "[1, 2]"),
            id="not-object",
        ),
        pytest.param(
            _triage_raw(triage_item(wsjf={"score": "high"})),
            {},
            True,
            ("type", "$.wsjf.score", "number", '"high"'),
            id="schema-type",
        ),
        pytest.param(
            _triage_raw(triage_item(confidence=1.5)),
            {},
            True,
            ("maximum", "$.confidence", "a number <= 1", "1.5"),
            id="schema-maximum",
        ),
        pytest.param(
            _triage_raw({k: v for k, v in VALID.items() if k != "why"}),
            {},
            True,
            ("required", "$.why", "property 'why' (required)", "nothing"),
            id="schema-required",
        ),
        pytest.param(
            _triage_raw(triage_item(extra=1)),
            {},
            True,
            ("additionalProperties", "$.extra", "no such property (not in the schema)", "1"),
            id="schema-additional-property",
        ),
        pytest.param(
            '[{"candidate":"evil"}]',
            {"allow_lists": OK_LIST},
            False,
            ("not_allowed", "$.candidate", 'one of the 1 allowed values ("ok")', '"evil"'),
            id="allow-list",
        ),
        pytest.param(
            '[{"candidate":["ok","evil"]}]',
            {"allow_lists": OK_LIST},
            False,
            ("not_allowed", "$.candidate[1]", 'one of the 1 allowed values ("ok")', '"evil"'),
            id="allow-list-array-position",
        ),
        # Issue 13: the number 2 against the string "2" read "expected one of the 2
        # allowed values (2, a), received 2".
        pytest.param(
            '[{"candidate":2}]',
            {"allow_lists": {"candidate": frozenset({"2", "a"})}},
            False,
            (
                "not_allowed",
                "$.candidate",
                'one of the 2 allowed values ("2", "a")',
                "2 (a number)",
            ),
            id="allow-list-number-for-a-string",
        ),
        pytest.param(
            '[{"candidate":["a",true]}]',
            {"allow_lists": {"candidate": frozenset({"true", "a"})}},
            False,
            (
                "not_allowed",
                "$.candidate[1]",
                'one of the 2 allowed values ("a", "true")',
                "true (a boolean)",
            ),
            id="allow-list-boolean-for-a-string",
        ),
        pytest.param(
            '[{"candidate":null}]',
            {"allow_lists": {"candidate": frozenset({"null"})}},
            False,
            (
                "not_allowed",
                "$.candidate",
                'one of the 1 allowed values ("null")',
                "null (JSON null)",
            ),
            id="allow-list-null-for-a-string",
        ),
        pytest.param(
            '[{"rank":1},{"rank":2}]',
            {"max_items": 1, "rank_key": "rank"},
            False,
            (
                "over_limit",
                "$.rank",
                "at most 1 items (kept the 1 with the smallest rank)",
                "rank 2",
            ),
            id="over-limit-ranked",
        ),
        pytest.param(
            '[{"a":1},{"a":2}]',
            {"max_items": 1},
            False,
            ("over_limit", "$", "at most 1 items (kept the first 1)", "one item too many"),
            id="over-limit-unranked",
        ),
    ],
)
def test_correction_signal_fields(
    raw: str, limits: dict[str, Any], triage: bool, signal: tuple[str, str, str, str]
) -> None:
    result = run(raw, (), schema=triage_schema() if triage else None, **limits)
    error = result.quarantined[-1].error
    assert (error.code, error.path, error.expected, error.received) == signal
    reason = result.quarantined[-1].reason
    assert result.quarantined[-1].message.startswith(
        f"{reason} at {signal[1]}: expected {signal[2]}, received {signal[3]}"
    )
    as_json = result.to_json()["quarantined"][-1]["error"]
    assert {k: as_json[k] for k in ("code", "path", "expected", "received")} == dict(
        zip(("code", "path", "expected", "received"), signal, strict=True)
    )


def test_schema_message_is_exact_for_daily_triage() -> None:
    raw = "Ranked list:\n" + _triage_raw(VALID, triage_item(rank=2, wsjf={"score": "high"}))
    result = run(raw, (), schema=triage_schema())
    assert accepted_data(result) == [VALID]
    [held] = result.quarantined
    assert held.index == 1
    assert held.reason is Reason.SCHEMA
    assert held.message == 'schema at $.wsjf.score: expected number, received "high"'


# ------------------------------------------------------------- truncated items and their repair


def test_truncated_item_whose_repair_validates_is_still_not_accepted() -> None:
    whole = json.dumps(triage_item(rank=2))
    raw = "[" + json.dumps(VALID) + ", " + whole[:-1]  # only the item's closing brace is missing
    result = run(raw, (), schema=triage_schema())
    assert accepted_data(result) == [VALID]
    [held] = result.quarantined
    assert held.reason is Reason.TRUNCATED
    assert held.has_repair
    assert held.repaired == triage_item(rank=2)
    assert triage_schema().check(held.repaired) is None  # it would validate, and still is held
    assert result.to_json()["quarantined"][0]["repaired"] == triage_item(rank=2)
    assert result.status is Status.PARTIAL


@pytest.mark.parametrize(
    ("raw", "repaired"),
    [
        pytest.param('[{"a":1,"why":"cut of', {"a": 1, "why": "cut of"}, id="string-closed"),
        pytest.param('[{"a":1,"sc', {"a": 1}, id="key-cut-back"),
        pytest.param('[{"a":1,"n":12', {"a": 1}, id="number-dropped"),
        pytest.param('[{"a":{"b":[1,"x', {"a": {"b": [1, "x"]}}, id="nested-closed"),
    ],
)
def test_truncated_items_carry_their_repair(raw: str, repaired: Any) -> None:
    result = run(raw, ())
    assert result.items == ()
    [held] = result.quarantined
    assert held.reason is Reason.TRUNCATED
    assert held.repaired == repaired
    assert held.span.end == len(raw)


def test_truncated_item_without_possible_repair_has_none() -> None:
    result = run('[{"a" 1, "b": "cu', ())  # damaged before the cut: nothing to repair
    [held] = result.quarantined
    assert held.reason is Reason.TRUNCATED
    assert held.has_repair is False
    assert "repaired" not in result.to_json()["quarantined"][0]


# ------------------------------------------------------------------------------ over_limit


@pytest.mark.parametrize(
    ("items", "max_items", "rank_key", "kept", "dropped"),
    [
        pytest.param(
            [{"rank": 3}, {"rank": 1}, {"rank": 2}], 2, "rank", [1, 2], [0], id="smallest-ranks"
        ),
        pytest.param(
            [{"rank": 1}, {"rank": 2}, {"rank": 1}, {"rank": 1}],
            2,
            "rank",
            [0, 2],
            [1, 3],
            id="ties-by-order-of-appearance",
        ),
        pytest.param(
            [{"x": 0}, {"rank": 9}, {"rank": 5}], 2, "rank", [1, 2], [0], id="no-rank-goes-last"
        ),
        pytest.param(
            [{"x": 0}, {"y": 0}, {"rank": 5}], 2, "rank", [0, 2], [1], id="rankless-keep-order"
        ),
        pytest.param(
            [{"rank": True}, {"rank": 7}], 1, "rank", [1], [0], id="boolean-rank-is-no-rank"
        ),
        pytest.param(
            [{"rank": "1"}, {"rank": 7}], 1, "rank", [1], [0], id="string-rank-is-no-rank"
        ),
        pytest.param(
            [{"rank": 1.5}, {"rank": -1}, {"rank": 0}],
            2,
            "rank",
            [1, 2],
            [0],
            id="float-and-negative-ranks",
        ),
        pytest.param(
            # No float holds it: compared as a float, the rank raised OverflowError.
            [{"rank": 10**400}, {"rank": 1e308}, {"rank": 10**308 + 1}],
            2,
            "rank",
            [1, 2],
            [0],
            id="integer-rank-beyond-any-float",
        ),
        pytest.param(
            [{"rank": 10**20 + 1}, {"rank": 10**20}, {"rank": 1e20}],
            2,
            "rank",
            [1, 2],
            [0],
            id="large-ranks-compared-exactly",
        ),
        pytest.param([{"w": {"r": 2}}, {"w": {"r": 1}}], 1, "w.r", [1], [0], id="dotted-rank-key"),
        pytest.param(
            [{"rank": 3}, {"rank": 1}, {"rank": 2}], 2, None, [0, 1], [2], id="no-rank-key"
        ),
        pytest.param([{"rank": 3}, {"rank": 1}], 2, "rank", [0, 1], [], id="at-limit"),
        pytest.param([{"rank": 3}, {"rank": 1}], 0, "rank", [], [0, 1], id="zero"),
    ],
)
def test_over_limit_selection(
    items: list[dict[str, Any]],
    max_items: int,
    rank_key: str | None,
    kept: list[int],
    dropped: list[int],
) -> None:
    result = run(_items(*items), (), max_items=max_items, rank_key=rank_key)
    assert [item.index for item in result.items] == kept  # kept in order of appearance
    assert accepted_data(result) == [items[i] for i in kept]
    assert quarantine_reasons(result) == [(i, Reason.OVER_LIMIT) for i in dropped]


def test_invalid_items_never_take_a_slot() -> None:
    raw = _triage_raw(
        triage_item(rank=1, candidate="invented"),
        triage_item(rank=2, wsjf={"score": "high"}),
        triage_item(rank=3),
        triage_item(rank=4),
        triage_item(rank=5),
    )
    result = run(
        raw,
        (),
        schema=triage_schema(),
        max_items=2,
        rank_key="rank",
        allow_lists={"candidate": frozenset({"billing-migration"})},
    )
    assert [item.data["rank"] for item in result.items] == [3, 4]
    assert quarantine_reasons(result) == [
        (0, R.ALLOW_LIST),
        (1, R.SCHEMA),
        (4, R.OVER_LIMIT),
    ]


# --------------------------------------------------------------------- status and counts


@pytest.mark.parametrize(
    ("raw", "kwargs", "status", "counts", "truncated"),
    [
        pytest.param(
            '[{"a":1},{"a":2}]',
            {},
            Status.OK,
            {"candidates": 2, "accepted": 2, "quarantined": 0, "by_reason": {}},
            False,
            id="ok",
        ),
        pytest.param(
            "[]",
            {},
            Status.OK,
            {"candidates": 0, "accepted": 0, "quarantined": 0, "by_reason": {}},
            False,
            id="ok-empty-list",
        ),
        pytest.param(
            '[{"a":1},"x",{"a":NaN},{"a":"cu',
            {},
            Status.PARTIAL,
            {
                "candidates": 4,
                "accepted": 1,
                "quarantined": 3,
                "by_reason": {"truncated": 1, "malformed": 1, "not_object": 1},
            },
            True,
            id="partial-mixed-reasons-in-guardrail-order",
        ),
        pytest.param(
            '[{"a":1},',
            {},
            Status.PARTIAL,
            {"candidates": 1, "accepted": 1, "quarantined": 0, "by_reason": {}},
            True,
            id="partial-truncated-between-items",
        ),
        pytest.param(
            '[{"a":1}]',
            {"finish_reason": "max_tokens"},
            Status.PARTIAL,
            {"candidates": 1, "accepted": 1, "quarantined": 0, "by_reason": {}},
            True,
            id="partial-finish-reason-length",
        ),
        pytest.param(
            '[{"a":1}]',
            {"finish_reason": "end_turn"},
            Status.OK,
            {"candidates": 1, "accepted": 1, "quarantined": 0, "by_reason": {}},
            False,
            id="ok-finish-reason-stop",
        ),
        pytest.param(
            '["x",{"a":NaN}]',
            {},
            Status.FAILED,
            {
                "candidates": 2,
                "accepted": 0,
                "quarantined": 2,
                "by_reason": {"malformed": 1, "not_object": 1},
            },
            False,
            id="failed-all-quarantined",
        ),
        pytest.param(
            '[{"a":"cu',
            {},
            Status.FAILED,
            {"candidates": 1, "accepted": 0, "quarantined": 1, "by_reason": {"truncated": 1}},
            True,
            id="failed-only-item-truncated",
        ),
        pytest.param(
            "[",
            {},
            Status.FAILED,
            {"candidates": 0, "accepted": 0, "quarantined": 0, "by_reason": {}},
            True,
            id="failed-truncated-before-any-item",
        ),
        pytest.param(
            "Sorry, no report.",
            {},
            Status.FAILED,
            {"candidates": 0, "accepted": 0, "quarantined": 0, "by_reason": {}},
            False,
            id="failed-no-items-found",
        ),
        pytest.param(
            '[{"a":1}]',
            {"max_bytes": 4},
            Status.FAILED,
            {"candidates": 0, "accepted": 0, "quarantined": 1, "by_reason": {"oversize": 1}},
            False,
            id="failed-oversize",
        ),
    ],
)
def test_status_and_counts(
    raw: str, kwargs: dict[str, Any], status: Status, counts: dict[str, Any], truncated: bool
) -> None:
    finish = kwargs.pop("finish_reason", None)
    result = run(raw, (), finish_reason=finish, **kwargs)
    assert result.status is status
    assert result.partial is (status is Status.PARTIAL)
    assert result.counts() == counts
    assert list(result.counts()["by_reason"]) == list(counts["by_reason"])  # guardrail order
    assert result.truncated is truncated
    assert result.to_json()["status"] == str(status)
    assert result.to_json()["counts"] == counts


def test_envelope_issue_alone_makes_partial() -> None:
    result = run('{"s": 1, "items": [{"a": 1}], "s": 2}', ("items",))
    assert accepted_data(result) == [{"a": 1}]
    assert result.quarantined == ()
    assert result.status is Status.PARTIAL


def test_finish_reason_is_canonical() -> None:
    assert run("[]", (), finish_reason="max_tokens").finish_reason == "length"
    assert run("[]", (), finish_reason="weird").finish_reason == "unknown"
    assert run("[]", ()).finish_reason is None


# ---------------------------------------------------------------------- provenance records


@pytest.mark.parametrize(
    ("raw", "snippet_chars", "snippet"),
    [
        pytest.param('pre [{"a":1}, {"a":NaN}]', 240, '{"a":NaN}', id="whole-span"),
        pytest.param('pre [{"a":1}, {"a":NaN}]', 4, '{"a"', id="snippet-capped"),
    ],
)
def test_quarantine_provenance(raw: str, snippet_chars: int, snippet: str) -> None:
    result = run(raw, (), snippet_chars=snippet_chars)
    [held] = result.quarantined
    text = raw[held.span.start : held.span.end]
    assert text == '{"a":NaN}'
    assert held.snippet == snippet
    assert held.sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert result.to_json()["quarantined"][0]["span"] == [held.span.start, held.span.end]


def test_oversize_record_covers_the_whole_output() -> None:
    raw = '[{"a":1}]' + " " * 20
    result = run(raw, (), max_bytes=10, snippet_chars=5)
    [held] = result.quarantined
    assert held.index is None
    assert (held.span.start, held.span.end) == (0, len(raw))
    assert held.snippet == raw[:5]
    assert held.sha256 == hashlib.sha256(raw.encode("utf-8")).hexdigest()
    assert result.items_found is False
    assert result.document_valid is False


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"max_bytes": 0}, id="max-bytes-zero"),
        pytest.param({"max_depth": 0}, id="max-depth-zero"),
        pytest.param({"max_string_length": 0}, id="max-string-length-zero"),
        pytest.param({"snippet_chars": 0}, id="snippet-chars-zero"),
        pytest.param({"max_items": -1}, id="max-items-negative"),
        pytest.param({"allow_lists": {"": frozenset()}}, id="allow-list-empty-path"),
        pytest.param({"allow_lists": {"a..b": frozenset()}}, id="allow-list-empty-segment"),
    ],
)
def test_guardrails_reject_unusable_limits(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="guardrails"):
        Guardrails(**kwargs)
