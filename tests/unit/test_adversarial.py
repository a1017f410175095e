"""Adversarial inputs: each must finish and quarantine, never crash or accept bad data.

No wall-clock assertions: "finishes" means the call returns; what is asserted is the
reason every hostile candidate is quarantined under.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from salvagelane.core import (
    Guardrails,
    ItemSchema,
    Reason,
    SalvagePolicy,
    SalvageResult,
    Status,
    salvage,
    scan,
    speedups,
)
from salvagelane.core.records import DEFAULT_MAX_QUARANTINED
from salvagelane.core.strict import is_strict_document, validate_iteratively
from tests.support.guards import time_limit

ITEMS = ("items",)
MIB = 1024 * 1024


def run(
    raw: str,
    items_path: tuple[str, ...] = ITEMS,
    schema: ItemSchema | None = None,
    **limits: Any,
) -> SalvageResult:
    result = salvage(
        raw,
        SalvagePolicy(items_path=items_path, item_schema=schema, guardrails=Guardrails(**limits)),
    )
    json.dumps(result.to_json(), allow_nan=False)  # always serialisable, as the CLI needs
    return result


def reasons(result: SalvageResult) -> list[Reason]:
    return [q.reason for q in result.quarantined]


def codes(result: SalvageResult) -> list[str]:
    return [q.error.code for q in result.quarantined]


def accepted(result: SalvageResult) -> list[Any]:
    return [item.data for item in result.items]


# ---------------------------------------------------------------------------------------------
# A million open brackets
# ---------------------------------------------------------------------------------------------

MILLION = 10**6


@pytest.mark.parametrize(
    ("raw", "items_path", "expected"),
    [
        pytest.param(
            '{"items": [' + "[" * MILLION + "]}", ITEMS, [Reason.TOO_DEEP], id="arrays-as-an-item"
        ),
        pytest.param(
            '{"items": [' + "{" * MILLION + "]}", ITEMS, [Reason.TOO_DEEP], id="objects-as-an-item"
        ),
        pytest.param(
            '{"items": [{"id": 1}, ' + '{"a":' * MILLION,
            ITEMS,
            [Reason.TOO_DEEP],
            id="nested-members-cut-off",
        ),
        pytest.param("[" * MILLION, (), [Reason.TOO_DEEP], id="arrays-as-the-document"),
        pytest.param("{" * MILLION, ITEMS, [], id="objects-as-the-document-no-root"),
        pytest.param("[" * MILLION, ITEMS, [], id="arrays-as-the-document-wrong-path"),
    ],
)
def test_a_million_open_brackets_are_quarantined_too_deep(
    raw: str, items_path: tuple[str, ...], expected: list[Reason]
) -> None:
    result = run(raw, items_path)
    assert reasons(result) == expected
    assert result.document_valid is False
    assert result.status is Status.FAILED or result.items
    if raw.startswith('{"items": [{"id": 1}'):
        assert accepted(result) == [{"id": 1}]
    else:
        assert not result.items
    assert not is_strict_document(raw)


def test_a_million_balanced_brackets_are_a_valid_document_but_a_too_deep_item() -> None:
    raw = "[" * MILLION + "]" * MILLION
    result = run(raw, ())
    assert result.document_valid is True  # validated iteratively: no recursion on the input
    assert validate_iteratively(raw) is True
    assert reasons(result) == [Reason.TOO_DEEP]
    assert result.quarantined[0].error.received == f"{MILLION - 1} nested containers"


def test_a_million_nested_envelope_members_become_an_envelope_issue() -> None:
    raw = '{"items": [{"id": 1}], "meta": ' + '{"a":' * MILLION + "1" + "}" * MILLION + "}"
    result = run(raw)
    assert accepted(result) == [{"id": 1}]
    assert result.document_valid is True
    assert "meta" not in result.envelope
    assert [issue.path for issue in result.envelope_issues] == ["$.meta"]
    assert "too_deep" in result.envelope_issues[0].problem


# ---------------------------------------------------------------------------------------------
# Huge strings and numbers
# ---------------------------------------------------------------------------------------------

FIFTY_MB = 50_000_000


@pytest.fixture(scope="module")
def fifty_mb_item_report() -> str:
    return '{"items": [{"id": 1, "s": "' + "a" * FIFTY_MB + '"}, {"id": 2}]}'


def test_a_50_mb_string_under_a_large_byte_cap_is_scanned_and_too_long(
    fifty_mb_item_report: str,
) -> None:
    result = run(fifty_mb_item_report, max_bytes=64 * MIB)
    assert reasons(result) == [Reason.TOO_LONG]
    assert result.quarantined[0].index == 0
    assert result.quarantined[0].error.received == f"{FIFTY_MB} characters"
    assert len(result.quarantined[0].snippet) == 240
    assert accepted(result) == [{"id": 2}]
    assert result.document_valid is True


def test_a_50_mb_string_under_the_default_byte_cap_is_oversize(fifty_mb_item_report: str) -> None:
    result = run(fifty_mb_item_report)
    assert reasons(result) == [Reason.OVERSIZE]
    assert result.quarantined[0].index is None
    assert result.quarantined[0].span.end == len(fifty_mb_item_report)
    assert not result.items
    assert result.document_valid is False  # not checked: nothing was scanned
    assert result.status is Status.FAILED


FIVE_THOUSAND_DIGITS = "7" * 5000


def _int_digit_limit_rejects(digits: int) -> bool:
    """Python's int() digit limit (default 4300, PYTHONINTMAXSTRDIGITS) applies."""
    limit = sys.get_int_max_str_digits()
    return 0 < limit < digits


@pytest.mark.parametrize(
    ("limits", "expected_reason", "expected_code"),
    [
        # 5000 <= 8192: the default max_string_length lets the token through; the strict
        # parse then refuses it (Python's int digit limit) as malformed/number_too_long.
        # (Not too_long: the documented default limit is 8192 characters.)
        pytest.param({}, Reason.MALFORMED, "number_too_long", id="default-limit"),
        pytest.param(
            {"max_string_length": 10000},
            Reason.MALFORMED,
            "number_too_long",
            id="max_string_length-10000",
        ),
        pytest.param({"max_string_length": 5000}, Reason.MALFORMED, "number_too_long", id="5000"),
        pytest.param({"max_string_length": 4999}, Reason.TOO_LONG, "too_long", id="4999"),
        pytest.param({"max_string_length": 4096}, Reason.TOO_LONG, "too_long", id="4096"),
    ],
)
def test_a_5000_digit_integer(
    limits: dict[str, int], expected_reason: Reason, expected_code: str
) -> None:
    raw = '{"items": [{"id": 1, "n": ' + FIVE_THOUSAND_DIGITS + '}, {"id": 2}]}'
    result = run(raw, **limits)
    assert result.document_valid is True  # grammatical JSON, whatever int() thinks of it
    if expected_reason is Reason.MALFORMED and not _int_digit_limit_rejects(5000):
        assert accepted(result) == [{"id": 1, "n": int(FIVE_THOUSAND_DIGITS)}, {"id": 2}]
        return
    assert reasons(result) == [expected_reason]
    assert codes(result) == [expected_code]
    assert accepted(result) == [{"id": 2}]


def test_a_5000_digit_fraction_is_a_float_and_accepted_under_the_default_limit() -> None:
    raw = '{"items": [{"n": 0.' + FIVE_THOUSAND_DIGITS + "}]}"
    result = run(raw)
    assert accepted(result) == [{"n": float("0." + FIVE_THOUSAND_DIGITS)}]


# ---------------------------------------------------------------------------------------------
# Non-finite numbers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code"),
    [
        pytest.param("NaN", "non_finite", id="NaN"),
        pytest.param("Infinity", "non_finite", id="Infinity"),
        pytest.param("-Infinity", "non_finite", id="-Infinity"),
        pytest.param("1e999", "non_finite", id="1e999"),
        pytest.param("-1e999", "non_finite", id="-1e999"),
        pytest.param("1E400", "non_finite", id="1E400"),
        pytest.param(
            "123e00000000000000000000000000000000000000400", "non_finite", id="padded-exp"
        ),
    ],
)
def test_non_finite_numbers_inside_an_item_are_malformed(value: str, code: str) -> None:
    raw = '{"items": [{"id": 1}, {"id": 2, "score": ' + value + '}, {"id": 3}]}'
    result = run(raw)
    assert accepted(result) == [{"id": 1}, {"id": 3}]
    assert reasons(result) == [Reason.MALFORMED]
    assert codes(result) == [code]
    assert result.quarantined[0].index == 1
    overflow = value[0].isdigit() or value.startswith("-1")
    assert result.document_valid is overflow  # 1e999 is grammatical; NaN is not JSON


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals_as_bare_items_are_quarantined(value: str) -> None:
    result = run('{"items": [{"id": 1}, ' + value + ', {"id": 3}]}')
    assert accepted(result) == [{"id": 1}, {"id": 3}]
    assert reasons(result) == [Reason.MALFORMED]
    assert result.quarantined[0].snippet.startswith(value)


def test_underflow_is_finite_and_accepted() -> None:
    result = run('{"items": [{"x": 1e-999}]}')
    assert accepted(result) == [{"x": 0.0}]


# ---------------------------------------------------------------------------------------------
# Duplicate keys never reach the allow-list
# ---------------------------------------------------------------------------------------------

ALLOW_OK = {"candidate": frozenset({"ok"})}


@pytest.mark.parametrize(
    "item",
    [
        pytest.param('{"candidate": "ok", "candidate": "evil"}', id="ok-then-evil"),
        pytest.param('{"candidate": "evil", "candidate": "ok"}', id="evil-then-ok"),
        pytest.param('{"candidate": "ok", "candid\\u0061te": "evil"}', id="escaped-duplicate"),
        pytest.param('{"candidate": "ok", "x": {"y": 1, "y": 2}}', id="nested-duplicate"),
        pytest.param('{"candidate": "ok", "candidate": "ok"}', id="same-value-twice"),
    ],
)
@pytest.mark.parametrize("coerce", [False, True], ids=["plain", "coerce"])
def test_duplicate_keys_are_malformed_and_never_accepted(item: str, coerce: bool) -> None:
    schema = ItemSchema.compile({"type": "object"}) if coerce else None
    raw = '{"items": [' + item + ', {"candidate": "ok"}]}'
    result = run(raw, schema=schema, allow_lists=ALLOW_OK, coerce=coerce)
    assert accepted(result) == [{"candidate": "ok"}]
    assert [q.index for q in result.quarantined] == [0]
    assert reasons(result) == [Reason.MALFORMED]
    assert codes(result) == ["duplicate_key"]
    assert result.document_valid is False


def test_an_allow_listed_value_is_accepted_and_another_refused() -> None:
    # The control for the duplicate-key table: the allow-list itself does work.
    result = run('{"items": [{"candidate": "ok"}, {"candidate": "evil"}]}', allow_lists=ALLOW_OK)
    assert accepted(result) == [{"candidate": "ok"}]
    assert reasons(result) == [Reason.ALLOW_LIST]


def test_a_duplicated_items_key_never_yields_the_second_list() -> None:
    raw = '{"items": [{"candidate": "ok"}], "items": [{"candidate": "evil"}]}'
    result = run(raw, allow_lists=ALLOW_OK)
    assert all(item["candidate"] != "evil" for item in accepted(result))
    assert result.document_valid is False
    assert result.status is not Status.OK


# ---------------------------------------------------------------------------------------------
# Lone surrogates, NUL, BOM
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "code"),
    [
        pytest.param('{"s": "\ud800"}', "lone_surrogate", id="raw-high"),
        pytest.param('{"s": "x\udfff"}', "lone_surrogate", id="raw-low"),
        pytest.param('{"s": "\ud83d\ude00"}', "lone_surrogate", id="raw-pair-as-two-code-points"),
        pytest.param('{"\ud800": 1}', "lone_surrogate", id="raw-in-key"),
        pytest.param('{"s": "\\ud800"}', "lone_surrogate", id="escaped-high"),
        pytest.param('{"s": "\\uDC00"}', "lone_surrogate", id="escaped-low"),
        pytest.param('{"s": "\\ude00\\ud83d"}', "lone_surrogate", id="escaped-pair-reversed"),
        pytest.param('{"s": ["a", {"t": "\\ud800"}]}', "lone_surrogate", id="escaped-nested"),
        pytest.param('{"s": "a\x00b"}', "syntax", id="raw-nul-in-string"),
        pytest.param('{"s": "\\u0000"}', "nul_character", id="escaped-nul"),
        pytest.param('{"\\u0000": 1}', "nul_character", id="escaped-nul-in-key"),
    ],
)
def test_surrogates_and_nul_inside_items_are_malformed(item: str, code: str) -> None:
    raw = '{"items": [{"id": 1}, ' + item + ', {"id": 3}]}'
    result = run(raw)
    assert accepted(result) == [{"id": 1}, {"id": 3}]
    assert reasons(result) == [Reason.MALFORMED]
    assert codes(result) == [code]
    assert result.document_valid is (code == "nul_character" or "\\u" in item)
    json.dumps(result.to_json(), ensure_ascii=True)


def test_an_escaped_surrogate_pair_is_one_character_and_accepted() -> None:
    result = run('{"items": [{"s": "\\ud83d\\ude00"}]}')
    assert accepted(result) == [{"s": "\U0001f600"}]


@pytest.mark.parametrize(
    ("raw", "document_valid"),
    [
        pytest.param('\ud800{"items": [{"id": 1}]}', False, id="surrogate-before-the-document"),
        pytest.param('{"items": [{"id": 1}]}\udcff', False, id="surrogate-after-the-document"),
        pytest.param('{"items": [{"id": 1},\x00{"id": 2}]}', False, id="nul-between-items"),
        pytest.param('\x00{"items": [{"id": 1}, {"id": 2}]}', False, id="nul-before"),
        pytest.param('\ufeff{"items": [{"id": 1}, {"id": 2}]}', False, id="bom-before"),
        pytest.param('\ufeff\ufeff{"items": [{"id": 1}, {"id": 2}]}', False, id="two-boms"),
    ],
)
def test_debris_outside_the_items_costs_no_item(raw: str, document_valid: bool) -> None:
    result = run(raw)
    expected = [{"id": 1}, {"id": 2}] if '"id": 2' in raw else [{"id": 1}]
    assert accepted(result) == expected
    assert result.document_valid is document_valid
    if "\x00{" in raw[1:]:  # NUL between items is stray text, quarantined, not ignored
        assert reasons(result) == [Reason.MALFORMED]
        assert codes(result) == ["stray_text"]
    else:
        assert not result.quarantined
        assert result.notes  # the leading or trailing debris is noted


def test_a_bom_before_a_bare_array_document() -> None:
    result = run('\ufeff[{"id": 1}]', ())
    assert accepted(result) == [{"id": 1}]
    assert result.document_valid is False
    assert any("leading text" in note for note in result.notes)


def test_surrogates_in_the_envelope_are_an_envelope_issue_not_a_crash() -> None:
    raw = '{"summary": "\ud800", "items": [{"id": 1}]}'
    result = run(raw)
    assert accepted(result) == [{"id": 1}]
    assert "summary" not in result.envelope
    assert [issue.path for issue in result.envelope_issues] == ["$.summary"]
    assert result.status is Status.PARTIAL


# ---------------------------------------------------------------------------------------------
# Known bugs and limits found by tests/unit/test_properties.py (minimal reproductions)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "items_path", "survivors"),
    [
        pytest.param(
            '{"items": [{"id": 1}, "id": 2}, {"id": 3}]}',
            ITEMS,
            [{"id": 1}, {"id": 3}],
            id="item-lost-its-opening-brace",
        ),
        pytest.param(
            '{"items": [{"id": 1}, {"id": 2}, "c": 3}, {"id": 3}]}',
            ITEMS,
            [{"id": 1}, {"id": 3}],
            id="stray-brace-inside-an-item",
        ),
        pytest.param(
            '{"items": [{"id": 1}, {"id": 2, "tags": ["a"}, "b"]}, {"id": 3}]}',
            ITEMS,
            [{"id": 1}, {"id": 3}],
            id="brace-inside-an-array-leaves-a-bracket",
        ),
        pytest.param(
            '{"items": [{"id": 1, "pattern": "\\d+}"}, {"id": 2}]}',
            ITEMS,
            [{"id": 2}],
            id="invalid-escape-and-brace-in-a-string",
        ),
        pytest.param(
            '[\n  {\n    "id": 0,\n    "s": "\\}]"\n  },\n  {\n    "id": 1\n  }\n]',
            (),
            [{"id": 1}],
            id="pretty-invalid-escape-before-brace-and-bracket",
        ),
    ],
)
def test_damage_inside_one_item_costs_only_that_item(
    raw: str, items_path: tuple[str, ...], survivors: list[dict[str, int]]
) -> None:
    # ADR 0002: "One bad item costs one item. Items before and after it are accepted."
    result = run(raw, items_path)
    for item in survivors:
        assert item in accepted(result)
    assert result.status is Status.PARTIAL  # something was damaged: never "ok"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"items": [{"id": 1}, "id": 2}, {"id": 3}]}', id="lost-brace"),
        pytest.param('{"items": [{"id": 1}, {"id": 2}, "c": 3}, {"id": 3}]}', id="stray-brace"),
    ],
)
def test_an_intact_item_is_never_silently_dropped(raw: str) -> None:
    # ADR 0001: rejected items are quarantined, never silently dropped. `{"id": 3}` is
    # intact: it must be accepted or at least be inside a quarantined span.
    result = run(raw)
    start = raw.index('{"id": 3}')
    covered = [q for q in result.quarantined if q.span.start <= start and start + 9 <= q.span.end]
    assert {"id": 3} in accepted(result) or covered
    assert "id" not in result.envelope  # an item's member is not an envelope field


@pytest.mark.parametrize(
    ("raw", "items_path"),
    [
        pytest.param('[{"id": 0, "note": "}]', (), id="bare-array"),
        pytest.param('{"items": [{"id": 0, "note": "}]', ITEMS, id="in-envelope"),
        pytest.param('{"items": [{"id": 0}, {"id": 1, "note": "a} b', ITEMS, id="brace-then-text"),
    ],
)
def test_a_cut_inside_a_string_holding_a_closer_is_truncation(
    raw: str, items_path: tuple[str, ...]
) -> None:
    # The text ends inside a string (every character so far is legal in a string), as
    # when a model hits its token limit. The cut item must be `truncated`, not `malformed`.
    result = run(raw, items_path)
    assert result.truncated is True
    assert reasons(result)[-1] is Reason.TRUNCATED
    assert result.status is not Status.OK


@pytest.mark.xfail(strict=True, reason="ADR 0002 limit: signature learned from the first item")
def test_limit_damage_to_the_first_items_opening_key() -> None:
    # One line, the first item's `{"id":` damaged: no signature is ever learned, so the
    # first item runs on over the second.
    result = run('[{""id": 0}, {"id": 1}]', ())
    assert accepted(result) == [{"id": 1}]


def test_a_closer_that_ends_the_list_early_loses_no_later_item() -> None:
    # Found by random exploration: a `}` knocked into item 0 ends it before an array
    # whose `]]` reads as the end of the list. The envelope's scan then meets item 1
    # where a member should be: it is scanned as the list's continuation.
    raw = '{"data": {"items": [{"id": 0, "\\"": }[null, null]], "": null}, {"id": 1}]}}'
    result = run(raw, ("data", "items"))
    assert accepted(result) == [{"id": 1}]
    assert [q.index for q in result.quarantined] == [0, 1]
    assert any(note.startswith("items after report") for note in result.notes)


@pytest.mark.parametrize(
    ("raw", "kept", "stray"),
    [
        # A stray `]` then envelope members, then items: remnants between are quarantined.
        (
            '{"items": [{"id": 0}], "n": 1, oops {"id": 1}, {"id": 2}], "m": 2}',
            [{"id": 0}, {"id": 1}, {"id": 2}],
            "oops",
        ),
        # Damage right after the early `]`: the items after it are still the list's.
        ('{"items": [{"id": 0}]] {"id": 1}]}', [{"id": 0}, {"id": 1}], None),
    ],
)
def test_items_after_a_list_closed_early_inside_the_envelope(
    raw: str, kept: list[dict[str, int]], stray: str | None
) -> None:
    result = run(raw, ("items",))
    assert accepted(result) == kept
    strays = [raw[q.span.start : q.span.end] for q in result.quarantined]
    assert strays == ([] if stray is None else [stray])


@pytest.mark.parametrize(
    ("raw", "items_path", "kept", "held"),
    [
        # An object in the prose around the report may be an item: held, in text order.
        (
            'Example: {"id": 9}\n{"items": [{"id": 0}]}',
            ITEMS,
            [{"id": 0}],
            ['Example: {"id": 9}'],
        ),
        # Braces in prose are not an object: noted, not quarantined.
        ('[{"id": 0}]\nHope this helps! {see the notes}', (), [{"id": 0}], []),
        # The first item lost its `{`: its key, opening a later item, is the signature.
        ('{"items": [\n  "id": 0},\n  {"id": 1}\n], "s": ""}', ITEMS, [{"id": 1}], ['"id": 0']),
        # ... and a `}` in its place is stray in a bare array (nothing for it to close).
        ('[\n  }\n    "id": 0\n  },\n  {\n    "id": 1\n  }\n]', (), [{"id": 1}], ['"id": 0']),
        # A line holding just `[` after a fence is the root, not the first `[]` found.
        (
            '```json\n[\n  "\n    "id": 0\n  },\n  {\n    "id": 1,\n    "tags": []\n  }\n]',
            (),
            [{"id": 1, "tags": []}],
            ['"\n    "id": 0'],
        ),
    ],
    ids=["object-in-prose", "braces-in-prose", "lost-brace", "brace-turned-closer", "fenced"],
)
def test_nothing_item_shaped_is_left_outside_the_candidates(
    raw: str, items_path: tuple[str, ...], kept: list[dict[str, int]], held: list[str]
) -> None:
    result = run(raw, items_path)
    assert accepted(result) == kept
    assert [raw[q.span.start : q.span.end] for q in result.quarantined] == held
    assert set(codes(result)) <= {"stray_text"}
    assert result.status is (Status.PARTIAL if held else Status.OK)
    spans = [c.span.start for c in scan(raw, items_path).candidates]
    assert spans == sorted(spans)  # numbered in text order


def test_an_item_that_opens_with_a_bracket_costs_only_itself() -> None:
    # `{` replaced by `[`: once a limit of ADR 0002, now cut at the next signature
    # (a signature directly inside an array-shaped candidate starts a new item).
    result = run('[{"id": 0}, ["id": 1}, {"id": 2}, {"id": 3}]', ())
    assert accepted(result) == [{"id": 0}, {"id": 2}, {"id": 3}]


def test_limits_still_quarantine_what_they_swallow() -> None:
    # The documented limit loses an item, but never silently: the swallowed text is in
    # a quarantined candidate's span.
    raw = '[{""id": 0}, {"id": 1}]'
    result = run(raw, ())
    swallowed = raw.index('{"id": 1}')
    assert any(q.span.start < swallowed < q.span.end for q in result.quarantined)
    assert result.status is Status.FAILED  # nothing accepted: total loss, never "partial"


# ---------------------------------------------------------------------------------------------
# The same hostile inputs through the real CLI
# ---------------------------------------------------------------------------------------------


def _cli(repo_root: Path, *args: str, stdin: bytes | None = None) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-m", "salvagelane", "salvage", *args],
        input=stdin,
        capture_output=True,
        cwd=repo_root,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode("utf-8", "replace")
    output: dict[str, Any] = json.loads(completed.stdout)
    return output


def test_cli_duplicate_keys_with_an_allow_list(repo_root: Path, tmp_path: Path) -> None:
    allow = tmp_path / "workstreams.txt"
    allow.write_text("ok\n", encoding="utf-8")
    schema = tmp_path / "any.schema.json"
    schema.write_text('{"type": "object"}', encoding="utf-8")
    raw = b'{"items": [{"candidate": "ok", "candidate": "evil"}, {"candidate": "ok"}]}'
    out = _cli(
        repo_root,
        "--schema",
        str(schema),
        "--items",
        "items",
        f"--allow=candidate={allow}",
        stdin=raw,
    )
    assert [item["data"] for item in out["items"]] == [{"candidate": "ok"}]
    assert [q["error"]["code"] for q in out["quarantined"]] == ["duplicate_key"]
    assert out["status"] == "partial"


def test_cli_hostile_bytes(repo_root: Path, tmp_path: Path) -> None:
    # Bytes that are not UTF-8, a BOM, NaN, 1e999, a NUL, a lone-surrogate escape and a
    # 5000-digit integer, in one output.
    schema = tmp_path / "any.schema.json"
    schema.write_text('{"type": "object"}', encoding="utf-8")
    raw = (
        b"\xef\xbb\xbf"
        + b'{"items": [{"id": 1, "s": "\xff\xfe"}, {"id": 2, "x": NaN}, {"id": 3, "x": 1e999},'
        + b' {"id": 4, "s": "\\ud800"}, {"id": 5, "s": "a\x00"}, {"id": 6, "n": '
        + FIVE_THOUSAND_DIGITS.encode()
        + b'}, {"id": 7}]}'
    )
    source = tmp_path / "raw.txt"
    source.write_bytes(raw)
    out = _cli(repo_root, "--schema", str(schema), "--items", "items", str(source))
    assert [item["data"] for item in out["items"]] == [{"id": 7}]
    assert [q["index"] for q in out["quarantined"]] == [0, 1, 2, 3, 4, 5]
    assert {q["reason"] for q in out["quarantined"]} == {"malformed"}
    assert [q["error"]["code"] for q in out["quarantined"]][:4] == [
        "invalid_utf8",
        "non_finite",
        "non_finite",
        "lone_surrogate",
    ]
    # The byte is named as the byte it was, where it was (not as "lone surrogate U+DCFF").
    first = out["quarantined"][0]["error"]
    # Offsets count characters, as spans do: the BOM's 3 bytes are one, the rest is ASCII.
    at = raw.index(b"\xff") - 2
    assert (first["path"], first["received"]) == ("$.s", f"byte 0xFF at offset {at}")
    assert out["document_valid"] is False
    assert out["status"] == "partial"


QUOTE_BACKSLASH = '"\\' * 50_000  # 100 KB of `"\"\"\...`: every quote opens a string that fails


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the hang guard")
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"items": [' + QUOTE_BACKSLASH + "]}", id="between-items"),
        pytest.param('{"items": [{"a": ' + QUOTE_BACKSLASH + "}]}", id="inside-an-item"),
        pytest.param('{"x": ' + QUOTE_BACKSLASH + ', "items": [{"id": 1}]}', id="envelope"),
    ],
)
def test_quotes_that_never_close_cost_linear_work(raw: str) -> None:
    # Each regex is linear, but a scan that retries a failing string match at every
    # quote re-reads the rest of the text each time: quadratic. The step counter cannot
    # see work done inside the regex engine, so this guard does: 100 KB takes well under a
    # second when linear; 20 s is only reached by quadratic work (about 100 s here, hours
    # at the 8 MiB default byte cap).
    with time_limit(20, "superlinear work:"):
        result = run(raw)
        assert scan(raw, ITEMS).steps <= 2 * len(raw) + 2
    assert {"id": 1} in accepted(result) if '{"id": 1}' in raw else not result.items
    assert result.document_valid is False
    assert result.quarantined or result.envelope_issues


@pytest.mark.parametrize("loops", ["compiled", "python"])
def test_a_chain_of_unclosed_array_items_costs_linear_work(loops: str) -> None:
    # Each array-shaped item is checked for closing well formed (then it is one value):
    # unclosed, each check reads to the end of the text, so n of them would read n^2/2
    # characters. The checks share a budget of twice the text. Every check the scanner
    # makes to the end of the text is counted here (the real loop answers each one).
    raw = '{"items": [' + '{"id": 1}, [{"id": 2}, ' * 2_000
    read = []
    with speedups.use_python() if loops == "python" else contextlib.nullcontext():
        real = speedups.match_container

        def counted(text: str, start: int, bound: int) -> tuple[int, int] | None:
            if bound == len(text):
                read.append(bound - start)
            return real(text, start, bound)

        speedups.match_container = counted
        try:
            result = run(raw)
        finally:
            speedups.match_container = real
    assert sum(read) <= 3 * len(raw)
    # After the first unclosed `[` every object may be nested in it: held, none lost
    # (the first max_quarantined with a record, the rest counted).
    assert accepted(result) == [{"id": 1}]
    assert result.quarantined_total == 3 * 2_000 - 1
    held = [(q.span.start, q.span.end) for q in result.quarantined]
    assert len(held) == DEFAULT_MAX_QUARANTINED
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(held))


def test_scan_of_hostile_text_stays_within_its_step_bound() -> None:
    # The linear-work invariant on the shapes above, not only on fuzzed text.
    for raw in (
        "[" * MILLION,
        '{"items": [' + '{"a":' * 1000 + "]}",
        '{"items": [' + '"\\' * 1000 + "]}",
        '{"items": [' + '{"id": "' * 10000,
        '{"items": [' + '{"id": 1}, ' * 10000 + "]}",
    ):
        assert scan(raw, ITEMS).steps <= 2 * len(raw) + 2
        assert scan(raw, ()).steps <= 2 * len(raw) + 2
