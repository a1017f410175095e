"""Scanner tables: where items are, how they close, and what salvage keeps from them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from salvagelane.core.records import Reason, Status
from salvagelane.core.scanner import Closure, ItemsPath, parse_items_path, scan
from tests.support.builders import (
    TRIAGE_FIXTURE,
    accepted_data,
    assert_partition,
    assert_spans_reparse,
    assert_steps_bound,
    load_json,
    quarantine_reasons,
    run,
    triage_schema,
)

T, M, N = Reason.TRUNCATED, Reason.MALFORMED, Reason.NOT_OBJECT
OK, PARTIAL, FAILED = Status.OK, Status.PARTIAL, Status.FAILED

A1, A2, A3, A4 = {"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}

TRIPLE: list[dict[str, Any]] = [
    {"id": 1, "title": "first", "tags": ["x", "y"], "meta": {"n": 1.5}},
    {"id": 2, "title": "second", "tags": [], "meta": {"n": -2}},
    {"id": 3, "title": "third", "tags": ["z"], "meta": {"n": 0}},
]


def _pretty(doc: Any) -> str:
    return json.dumps(doc, indent=2)


def _compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _one_per_line(items: list[Any], summary: str = "s") -> str:
    lines = ",\n".join(json.dumps(item) for item in items)
    return '{"summary": "' + summary + '", "items": [\n' + lines + "\n]}"


@dataclass(frozen=True)
class SalvageCase:
    raw: str
    accepted: list[Any]
    quarantined: list[tuple[int | None, Reason]] = field(default_factory=list)
    path: ItemsPath = ("items",)
    envelope: dict[str, Any] = field(default_factory=dict)
    status: Status = OK
    truncated: bool = False
    items_found: bool = True


def case(id_: str, raw: str, accepted: list[Any], **kw: Any) -> Any:
    return pytest.param(SalvageCase(raw=raw, accepted=accepted, **kw), id=id_)


# --------------------------------------------------------------------------- layouts and wrapping

LAYOUT_CASES = [
    case(
        "prose-before-and-after",
        'Here is the report you asked for:\n{"items": [{"a": 1}, {"a": 2}]}\nLet me know!',
        [A1, A2],
    ),
    case(
        "prose-with-brackets-and-braces-around",
        'Note [draft] {v2}: {"items": [{"a": 1}]} -- end [1] {x}',
        [A1],
    ),
    case(
        "markdown-fence-json",
        '```json\n{"summary": "s", "items": [{"a": 1}, {"a": 2}]}\n```\n',
        [A1, A2],
        envelope={"summary": "s"},
    ),
    case(
        "markdown-fence-bare-with-prose",
        'Sure.\n```\n{"items": [\n  {"a": 1}\n]}\n```\nDone.',
        [A1],
    ),
    case(
        "pretty-printed",
        _pretty({"summary": "s", "items": TRIPLE}),
        TRIPLE,
        envelope={"summary": "s"},
    ),
    case("compact", _compact({"summary": "s", "items": TRIPLE}), TRIPLE, envelope={"summary": "s"}),
    case("one-item-per-line", _one_per_line(TRIPLE), TRIPLE, envelope={"summary": "s"}),
    case("empty-items-array", '{"items": []}', []),
    # The closing fence ends the document its lost delimiters did not: it is framing,
    # never a quarantined "item", and the output is not cut off.
    case(
        "fence-closes-a-list-whose-item-lost-its-brace",
        '```json\n{"summary": "s", "items": [{"a": 1}, {"a": 2\n]}\n```\n',
        [A1],
        quarantined=[(1, M)],
        envelope={"summary": "s"},
        status=PARTIAL,
    ),
    case(
        "fence-closes-a-list-and-report-never-closed",
        '```json\n{"summary": "s", "items": [{"a": 1}, {"a": 2}\n```\nThat is all.\n',
        [A1, A2],
        envelope={"summary": "s"},
    ),
    case(
        "fence-closes-a-report-whose-brace-was-lost",
        '```json\n{"items": [{"a": 1}], "summary": "s"\n```\n',
        [A1],
        envelope={"summary": "s"},
    ),
    case(
        "document-is-the-array-empty-path",
        'Result:\n```json\n[\n  {"a": 1},\n  {"a": 2}\n]\n```\nThanks [really].',
        [A1, A2],
        path=(),
    ),
    case(
        "document-is-the-array-compact-empty-path",
        "[" + ",".join(_compact(item) for item in TRIPLE) + "]",
        TRIPLE,
        path=(),
    ),
]

# ------------------------------------------------------------------------- strings and escapes

STRING_CASES = [
    case(
        "braces-brackets-commas-in-strings",
        '{"items": [{"a": "x}], {\\"a\\": 9}, [y"}, {"a": ",,{[]}"}]}',
        [{"a": 'x}], {"a": 9}, [y'}, {"a": ",,{[]}"}],
    ),
    case(
        "quotes-in-strings",
        '{"items": [{"a": "she said \\"stop\\" twice"}, {"a": "\\""}]}',
        [{"a": 'she said "stop" twice'}, {"a": '"'}],
    ),
    case(
        "escape-backslash-before-closing-quote",
        '{"items": [{"a": "dir\\\\"}, {"a": "\\\\\\"}]"}]}',
        [{"a": "dir\\"}, {"a": '\\"}]'}],
    ),
    case("escape-solidus", '{"items": [{"a": "a\\/b"}, {"a": 2}]}', [{"a": "a/b"}, A2]),
    case(
        "escape-bfnrt",
        '{"items": [{"a": "\\b\\f\\n\\r\\t"}, {"a": 2}]}',
        [{"a": "\b\f\n\r\t"}, A2],
    ),
    case(
        "escape-unicode-bmp",
        '{"items": [{"a": "\\u0041\\u00e9\\u1234\\uFFFD"}, {"a": 2}]}',
        [{"a": "A\u00e9\u1234\ufffd"}, A2],
    ),
    case(
        "escape-surrogate-pair",
        '{"items": [{"a": "\\ud83d\\ude00"}, {"a": "\\uD83D\\uDE00!"}]}',
        [{"a": "\U0001f600"}, {"a": "\U0001f600!"}],
    ),
    case(
        "raw-non-ascii",
        '{"items": [{"a": "caf\u00e9 \U0001f600 \u4e2d"}, {"a": 2}]}',
        [{"a": "caf\u00e9 \U0001f600 \u4e2d"}, A2],
    ),
    case(
        "every-escape-in-one-item-pretty",
        _pretty({"items": [{"a": '"\\/\b\f\n\r\t\u0001\u1234\U0001f600'}, A2]}),
        [{"a": '"\\/\b\f\n\r\t\u0001\u1234\U0001f600'}, A2],
    ),
]

# ---------------------------------------------------------------------- damage between items

BETWEEN_CASES = [
    case(
        "missing-comma-compact",
        '{"items":[{"a":1}{"a":2} {"a":3}]}',
        [A1, A2, A3],
    ),
    case(
        "missing-comma-one-per-line",
        '{"items": [\n{"a": 1}\n{"a": 2},\n{"a": 3}\n]}',
        [A1, A2, A3],
    ),
    case("trailing-comma", '{"items": [{"a": 1}, {"a": 2},]}', [A1, A2]),
    case("trailing-comma-pretty", '{"items": [\n  {"a": 1},\n  {"a": 2},\n]\n}', [A1, A2]),
    case("double-comma", '{"items": [{"a": 1},, {"a": 2}]}', [A1, A2]),
    case(
        "stray-text-between-items",
        '{"items": [{"a": 1}, and then, {"a": 2}]}',
        [A1, A2],
        quarantined=[(1, M)],
        status=PARTIAL,
    ),
    case(
        "stray-word-without-commas",
        '{"items": [{"a": 1} oops {"a": 2}]}',
        [A1, A2],
        quarantined=[(1, M)],
        status=PARTIAL,
    ),
    case("stray-brace-then-comma", '{"items": [{"a": 1}}, {"a": 2}]}', [A1, A2]),
    case("stray-brace-then-item", '{"items": [{"a": 1}} {"a": 2}]}', [A1, A2]),
    case("stray-brace-after-comma", '{"items": [{"a": 1},} {"a": 2}]}', [A1, A2]),
    case("stray-bracket-then-item", '{"items": [{"a": 1}] {"a": 2}]}', [A1, A2]),
    case("stray-bracket-after-comma", '{"items": [{"a": 1},] {"a": 2}]}', [A1, A2]),
    case("stray-bracket-then-comma", '{"items": [{"a": 1}], {"a": 2}]}', [A1, A2]),
    case(
        "stray-bracket-then-comma-one-per-line",
        '{"items": [\n{"a": 1}],\n{"a": 2},\n{"a": 3}\n]}',
        [A1, A2, A3],
    ),
    case(
        "stray-bracket-then-comma-root-array",
        '[{"a": 1}], {"a": 2}]',
        [A1, A2],
        path=(),
    ),
]

# --------------------------------------------------- an item with a syntax error inside it


def _compact_items(*items: str) -> str:
    return '{"items":[' + ",".join(items) + "]}"


def _pretty_items(*items: str) -> str:
    return '{\n  "items": [\n' + ",\n".join(items) + "\n  ]\n}"


def _pretty_item(*members: str) -> str:
    body = ",\n".join(f"      {member}" for member in members)
    return "    {\n" + body + "\n    }"


OK_C = ['{"a":1,"b":"x"}', '{"a":3,"b":"y"}', '{"a":4,"b":"z"}']
OK_P = [_pretty_item('"a": 1', '"b": "x"'), _pretty_item('"a": 3'), _pretty_item('"a": 4')]
AFTER = [{"a": 1, "b": "x"}, {"a": 3, "b": "y"}, {"a": 4, "b": "z"}]
AFTER_P = [{"a": 1, "b": "x"}, A3, A4]


def broken(id_: str, raw: str, survivors: list[Any]) -> Any:
    return case(id_, raw, survivors, quarantined=[(1, M)], status=PARTIAL)


BROKEN_ITEM_CASES = [
    broken(
        "dropped-colon-compact",
        _compact_items(OK_C[0], '{"a":2,"b" "v"}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "dropped-colon-pretty",
        _pretty_items(OK_P[0], _pretty_item('"a": 2', '"b" "v"'), OK_P[1], OK_P[2]),
        AFTER_P,
    ),
    broken(
        "one-stray-quote-compact",
        _compact_items(OK_C[0], '{"a":2,"b":"say "hi now","c":{"d":1}}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "one-stray-quote-pretty",
        _pretty_items(OK_P[0], _pretty_item('"a": 2', '"b": "say "hi now"'), OK_P[1], OK_P[2]),
        AFTER_P,
    ),
    broken(
        "three-stray-quotes-compact",
        _compact_items(OK_C[0], '{"a":2,"b":"x "y" z "w"}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "two-stray-quotes-compact",
        _compact_items(OK_C[0], '{"a":2,"b":"say "hi" now"}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "two-stray-quotes-pretty",
        _pretty_items(OK_P[0], _pretty_item('"a": 2', '"b": "say "hi" now"'), OK_P[1], OK_P[2]),
        AFTER_P,
    ),
    broken(
        "four-stray-quotes-compact",
        _compact_items(OK_C[0], '{"a":2,"b":"a "b" c "d" e"}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "missing-item-close-brace-compact",
        _compact_items(OK_C[0], '{"a":2,"b":"v"', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "missing-item-close-brace-pretty",
        _pretty_items(OK_P[0], '    {\n      "a": 2,\n      "b": "v"\n', OK_P[1], OK_P[2]),
        AFTER_P,
    ),
    broken(
        "missing-nested-close-brace-compact",
        _compact_items(OK_C[0], '{"a":2,"n":{"x":1,"b":"v"}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "missing-nested-close-brace-pretty",
        _pretty_items(
            OK_P[0],
            '    {\n      "a": 2,\n      "n": {\n        "x": 1,\n      "b": "v"\n    }',
            OK_P[1],
            OK_P[2],
        ),
        AFTER_P,
    ),
    broken(
        "bare-word-value-compact",
        _compact_items(OK_C[0], '{"a":2,"b":NaN}', OK_C[1], OK_C[2]),
        AFTER,
    ),
    broken(
        "raw-newline-in-string-pretty",
        _pretty_items(OK_P[0], _pretty_item('"a": 2', '"b": "line\nbreak"'), OK_P[1], OK_P[2]),
        AFTER_P,
    ),
]

# ------------------------------------------------------------- envelope and the items path

ENVELOPE_CASES = [
    case(
        "summary-before-list",
        '{"summary": "before", "items": [{"a": 1}]}',
        [A1],
        envelope={"summary": "before"},
    ),
    case(
        "summary-after-list",
        '{"items": [{"a": 1}], "summary": "after", "count": 1}',
        [A1],
        envelope={"summary": "after", "count": 1},
    ),
    case(
        "summary-before-and-after-nested-values",
        '{"meta": {"v": [1, 2]}, "items": [{"a": 1}], "done": true}',
        [A1],
        envelope={"meta": {"v": [1, 2]}, "done": True},
    ),
    case(
        "summary-before-truncated-list",
        '{"summary": "before", "items": [{"a": 1}, {"a": 2, "b": "cu',
        [A1],
        quarantined=[(1, T)],
        envelope={"summary": "before"},
        status=PARTIAL,
        truncated=True,
    ),
    case(
        "summary-after-list-with-broken-item",
        '{"items":[{"a":1},{"a":2,"b":"x"y"},{"a":3}],"summary":"after"}',
        [A1, A3],
        quarantined=[(1, M)],
        envelope={"summary": "after"},
        status=PARTIAL,
    ),
    case(
        "summary-around-pretty-list-with-broken-item",
        '{\n  "summary": "before",\n  "items": [\n    {"a": 1},\n    {"a": 2 "b": 3},\n'
        '    {"a": 3}\n  ],\n  "tail": "after"\n}',
        [A1, A3],
        quarantined=[(1, M)],
        envelope={"summary": "before", "tail": "after"},
        status=PARTIAL,
    ),
    case(
        "summary-after-list-missing-close-bracket",
        '{"items": [{"a": 1}, {"a": 2},\n"summary": "after"}',
        [A1, A2],
        envelope={"summary": "after"},  # as for '{"items": [{"a": 1}}': unclosed, not damaged
    ),
    case(
        "nested-items-path",
        '{"meta": {"v": 1}, "data": {"title": "t", "items": [{"a": 1}, {"a": 2}], "n": 2}}',
        [A1, A2],
        path=("data", "items"),
        envelope={"meta": {"v": 1}, "data": {"title": "t", "n": 2}},
    ),
    case(
        "nested-items-path-ignores-top-level-items",
        '{"items": [{"a": 9}], "data": {"items": [{"a": 1}]}}',
        [A1],
        path=("data", "items"),
        envelope={"items": [{"a": 9}]},
    ),
    case(
        "nested-items-path-truncated",
        '{"data": {"items": [{"a": 1}, {"a": 2',
        [A1],
        path=("data", "items"),
        quarantined=[(1, T)],
        status=PARTIAL,
        truncated=True,
    ),
    case(
        "items-path-not-found",
        '{"summary": "s", "results": [{"a": 1}]}',
        [],
        envelope={"summary": "s", "results": [{"a": 1}]},
        status=FAILED,
        items_found=False,
    ),
    case(
        "nested-items-path-not-found",
        '{"data": {"other": [{"a": 1}]}}',
        [],
        path=("data", "items"),
        envelope={"data": {"other": [{"a": 1}]}},
        status=FAILED,
        items_found=False,
    ),
    case(
        "no-json-at-all",
        "I could not produce a report today.",
        [],
        status=FAILED,
        items_found=False,
    ),
    case(
        "duplicate-envelope-key-not-taken",
        '{"summary": "honest", "items": [{"a": 1}], "summary": "injected"}',
        [A1],
        status=PARTIAL,
    ),
    case(
        "items-key-holds-object",
        '{"items": {"a": 1}, "summary": "s"}',
        [],
        envelope={"summary": "s"},
        status=FAILED,
        items_found=False,
    ),
    case(
        "items-key-holds-string",
        '{"items": "none today", "summary": "s"}',
        [],
        envelope={"summary": "s"},
        status=FAILED,
        items_found=False,
    ),
    case(
        "array-item-kinds-with-empty-path",
        '[1, "x", [2], {"a": 1}]',
        [A1],
        path=(),
        quarantined=[(0, N), (1, N), (2, N)],
        status=PARTIAL,
    ),
]


@pytest.mark.parametrize(
    "c", LAYOUT_CASES + STRING_CASES + BETWEEN_CASES + BROKEN_ITEM_CASES + ENVELOPE_CASES
)
def test_salvage_table(c: SalvageCase) -> None:
    result = run(c.raw, c.path)
    assert accepted_data(result) == c.accepted
    assert quarantine_reasons(result) == c.quarantined
    assert dict(result.envelope) == c.envelope
    assert result.truncated is c.truncated
    assert result.items_found is c.items_found
    assert result.status is c.status
    assert_spans_reparse(c.raw, result)
    assert_partition(result)
    assert_steps_bound(c.raw, scan(c.raw, c.path))


# ------------------------------------------------------------------ envelope issues in detail


@pytest.mark.parametrize(
    ("raw", "path", "issue_path", "problem"),
    [
        pytest.param(
            '{"summary": "honest", "items": [{"a": 1}], "summary": "injected"}',
            ("items",),
            "$.summary",
            "duplicate key",
            id="duplicate-summary",
        ),
        pytest.param(
            '{"items": [{"a": 1}], "items": [{"a": 666}]}',
            ("items",),
            "$.items",
            "duplicate key",
            id="duplicate-items-key",
        ),
        pytest.param(
            '{"items": {"a": 1}}',
            ("items",),
            "$.items",
            "does not hold an array",
            id="items-key-holds-object",
        ),
        pytest.param(
            '{"data": [{"a": 1}]}',
            ("data", "items"),
            "$.data",
            "not an object",
            id="path-step-holds-array",
        ),
        pytest.param(
            '{"items": [{"a": 1}], "summary": "cut off her',
            ("items",),
            "$.summary",
            "cut off",
            id="summary-truncated",
        ),
    ],
)
def test_envelope_issues(raw: str, path: ItemsPath, issue_path: str, problem: str) -> None:
    result = run(raw, path)
    assert [issue.path for issue in result.envelope_issues] == [issue_path]
    assert problem in result.envelope_issues[0].problem
    assert issue_path.removeprefix("$.").split(".")[0] not in result.envelope
    assert result.status is not Status.OK
    # a duplicated items key never lends the second array's items to the report
    assert {"a": 666} not in accepted_data(result)


# -------------------------------------------------------------- scanner spans and closures


@dataclass(frozen=True)
class Expect:
    text: str
    closure: Closure
    depth: int
    stray: bool = False
    defect: str = ""  # a substring of Candidate.defect (a closed candidate has none)


SCAN_CASES = [
    pytest.param(
        '{"items": [{"a": 1}, {"a": {"b": [1]}}]}',
        [Expect('{"a": 1}', Closure.CLOSED, 1), Expect('{"a": {"b": [1]}}', Closure.CLOSED, 3)],
        (True, False),
        id="closed-items-and-depth",
    ),
    pytest.param(
        '{"items": [{"a": 1}, {"a": "cut',
        [Expect('{"a": 1}', Closure.CLOSED, 1), Expect('{"a": "cut', Closure.TRUNCATED, 1)],
        (False, True),
        id="truncated-item",
    ),
    pytest.param(
        '{"items": [{"a": 1}, {"a": {"b": [1, ',
        [Expect('{"a": 1}', Closure.CLOSED, 1), Expect('{"a": {"b": [1, ', Closure.TRUNCATED, 3)],
        (False, True),
        id="truncated-nested-item",
    ),
    pytest.param(
        '{"items":[{"a":1,"b":"x",{"a":2}]}',
        [
            Expect('{"a":1,"b":"x"', Closure.BROKEN, 1, defect="not closed before the next item"),
            Expect('{"a":2}', Closure.CLOSED, 1),
        ],
        (True, False),
        id="cut-at-next-item-signature",
    ),
    pytest.param(
        '{"items": [{"a": 1}, junk text, {"a": 2}]}',
        [
            Expect('{"a": 1}', Closure.CLOSED, 1),
            Expect("junk text", Closure.BROKEN, 0, stray=True, defect="not a JSON value"),
            Expect('{"a": 2}', Closure.CLOSED, 1),
        ],
        (True, False),
        id="stray-text",
    ),
    pytest.param(
        '{"items": [{"a": 1, "b": NaN}, 12, "s", true]}',
        [
            Expect('{"a": 1, "b": NaN}', Closure.CLOSED, 1),
            Expect("12", Closure.CLOSED, 0),
            Expect('"s"', Closure.CLOSED, 0),
            Expect("true", Closure.CLOSED, 0),
        ],
        (True, False),
        id="scalars-and-junk-inside-closed-item",
    ),
    pytest.param(
        '{"items": [{"a": [1}, {"a": 2}]}',
        [
            Expect('{"a": [1}', Closure.BROKEN, 2, defect="mismatched"),
            Expect('{"a": 2}', Closure.CLOSED, 1),
        ],
        (True, False),
        id="mismatched-closer",
    ),
]


@pytest.mark.parametrize(("raw", "expected", "container_state"), SCAN_CASES)
def test_scan_spans_and_closures(
    raw: str, expected: list[Expect], container_state: tuple[bool, bool]
) -> None:
    scanned = scan(raw, ("items",))
    got = [(c.span.text(raw), c.closure, c.depth, c.stray) for c in scanned.candidates]
    assert got == [(e.text, e.closure, e.depth, e.stray) for e in expected]
    for candidate, want in zip(scanned.candidates, expected, strict=True):
        assert want.defect in candidate.defect
        assert candidate.complete is (want.closure is Closure.CLOSED)
        if want.closure is Closure.CLOSED:
            assert candidate.defect == ""
    assert [c.index for c in scanned.candidates] == list(range(len(expected)))
    assert (scanned.container_closed, scanned.truncated) == container_state
    assert scanned.container is not None
    assert raw[scanned.container.start] == "["
    if scanned.container_closed:
        assert raw[scanned.container.end - 1] == "]"
    assert_steps_bound(raw, scanned)


@pytest.mark.parametrize(
    ("raw", "path", "root", "container"),
    [
        pytest.param('x {"items": [1]} y', ("items",), '{"items": [1]}', "[1]", id="object-root"),
        pytest.param("x [1, 2] y", (), "[1, 2]", "[1, 2]", id="array-root"),
        pytest.param(
            'pre {"a": {"items": [{}]}} post',
            ("a", "items"),
            '{"a": {"items": [{}]}}',
            "[{}]",
            id="nested-root",
        ),
    ],
)
def test_scan_root_and_container_spans(
    raw: str, path: ItemsPath, root: str, container: str
) -> None:
    scanned = scan(raw, path)
    assert scanned.root is not None
    assert scanned.container is not None
    assert scanned.root.text(raw) == root
    assert scanned.container.text(raw) == container
    assert {a.kind for a in scanned.anomalies} >= {"leading_text", "trailing_text"}


@pytest.mark.parametrize(
    ("dotted", "expected"),
    [
        pytest.param("data.items", ("data", "items"), id="dotted"),
        pytest.param("items", ("items",), id="single"),
        pytest.param("", (), id="empty"),
        pytest.param("  ", (), id="blank"),
        pytest.param(" recommendations ", ("recommendations",), id="padded"),
    ],
)
def test_parse_items_path(dotted: str, expected: ItemsPath) -> None:
    assert parse_items_path(dotted) == expected


# -------------------------------------------------------------- truncation at many offsets

TRUNC_ITEMS: list[dict[str, Any]] = [
    {"rank": 1, "why": "first", "score": 1},
    {
        "rank": 2,
        "why": 'say "hi" \\ \u1234 \U0001f600 done',
        "score": 12.75,
        "ok": True,
        "tags": ["x", {"k": "v"}],
    },
    {"rank": 3, "why": "third", "score": 3},
]


def _trunc_doc(layout: str) -> str:
    doc = {"summary": "s", "items": TRUNC_ITEMS}
    if layout == "compact":
        return _compact(doc)
    if layout == "pretty":
        return _pretty(doc)
    return _one_per_line(TRUNC_ITEMS)


def _item_spans(raw: str) -> list[tuple[int, int]]:
    result = run(raw, ("items",))
    assert accepted_data(result) == TRUNC_ITEMS
    return [(item.span.start, item.span.end) for item in result.items]


# Each cut keeps the text up to the end of the marker (a regex), searched inside item 1.
CUTS = {
    "inside-key": r'"wh',
    "after-key": r'"why"',
    "after-colon": r'"why":',
    "after-colon-and-space": r'"why":\s*',
    "inside-value-string": r'"say',
    "inside-escape-backslash": r"say \\",
    "inside-escaped-backslash-pair": r"\\\\",
    "inside-unicode-escape": r"\\u12",
    "inside-surrogate-pair": r"\\ud83d",
    "inside-second-surrogate": r"\\ud83d\\ude0",
    "inside-number": r"12\.7",
    "inside-number-after-dot": r"12\.",
    "inside-literal": r"tr",
    "inside-nested-array": r'\[\s*"x",',
    "inside-nested-object-key": r'\{\s*"k',
    "inside-nested-object-value": r'"v',
}


@pytest.mark.parametrize("layout", ["compact", "pretty", "one-per-line"])
@pytest.mark.parametrize("marker", list(CUTS.values()), ids=list(CUTS))
def test_truncation_at_named_offsets(layout: str, marker: str) -> None:
    doc = _trunc_doc(layout)
    (_, _), (start, end), _ = _item_spans(doc)
    found = re.compile(marker).search(doc, start, end)
    assert found is not None, marker
    raw = doc[: found.end()]
    result = run(raw, ("items",))
    assert accepted_data(result) == TRUNC_ITEMS[:1]
    assert quarantine_reasons(result) == [(1, Reason.TRUNCATED)]
    assert result.quarantined[0].span.start == start
    assert result.quarantined[0].span.end == len(raw)
    assert result.truncated is True
    assert result.status is Status.PARTIAL
    assert dict(result.envelope) == {"summary": "s"}
    assert_spans_reparse(raw, result)


@pytest.mark.parametrize(
    ("where", "expected_items", "expected_quarantine"),
    [
        pytest.param("after-first-item", TRUNC_ITEMS[:1], [], id="after-first-item"),
        pytest.param("after-first-comma", TRUNC_ITEMS[:1], [], id="after-first-comma"),
        pytest.param("after-last-item", TRUNC_ITEMS, [], id="after-last-item"),
        pytest.param("after-open-bracket", [], [], id="after-open-bracket"),
    ],
)
@pytest.mark.parametrize("layout", ["compact", "pretty", "one-per-line"])
def test_truncation_between_items(
    layout: str,
    where: str,
    expected_items: list[Any],
    expected_quarantine: list[tuple[int, Reason]],
) -> None:
    doc = _trunc_doc(layout)
    spans = _item_spans(doc)
    cut = {
        "after-first-item": spans[0][1],
        "after-first-comma": doc.index(",", spans[0][1]) + 1,
        "after-last-item": spans[-1][1],
        "after-open-bracket": doc.index("[") + 1,
    }[where]
    raw = doc[:cut]
    result = run(raw, ("items",))
    assert accepted_data(result) == expected_items
    assert quarantine_reasons(result) == expected_quarantine
    assert result.truncated is True
    assert result.status is (Status.PARTIAL if expected_items else Status.FAILED)
    assert_spans_reparse(raw, result)


@pytest.mark.parametrize("layout", ["compact", "pretty", "one-per-line"])
def test_truncation_sweep_every_offset(layout: str) -> None:
    """Cut at every offset from the first key on: intact items survive, the cut one is held."""
    doc = _trunc_doc(layout)
    spans = _item_spans(doc)
    failures: list[tuple[int, str]] = []
    for cut in range(doc.index('"') + 1, len(doc)):
        raw = doc[:cut]
        result = run(raw, ("items",))
        want_items = [item for item, (_, end) in zip(TRUNC_ITEMS, spans, strict=True) if end <= cut]
        want_quarantine = [(i, Reason.TRUNCATED) for i, (s, e) in enumerate(spans) if s < cut < e]
        checks = {
            "items": accepted_data(result) == want_items,
            "quarantine": quarantine_reasons(result) == want_quarantine,
            "truncated": result.truncated,
            "not-ok": result.status is not Status.OK,
            "steps": scan(raw, ("items",)).steps <= 2 * len(raw) + 2,
        }
        failures.extend((cut, name) for name, passed in checks.items() if not passed)
        assert_spans_reparse(raw, result)
    assert failures == []


# -------------------------------------------------------------------- the recorded fixture


def test_daily_triage_fixture_keeps_seven_and_holds_the_eighth() -> None:
    raw = (TRIAGE_FIXTURE / "raw.txt").read_text(encoding="utf-8")
    complete = load_json(TRIAGE_FIXTURE / "complete.json")
    result = run(raw, ("recommendations",), schema=triage_schema(), finish_reason="length")
    assert accepted_data(result) == complete["recommendations"][:7]
    assert quarantine_reasons(result) == [(7, Reason.TRUNCATED)]
    assert dict(result.envelope) == {"summary": complete["summary"]}
    assert result.status is Status.PARTIAL
    assert result.finish_reason == "length"
    repaired = result.quarantined[0].repaired
    assert repaired["rank"] == 8
    assert repaired["candidate"] == complete["recommendations"][7]["candidate"]
    assert_spans_reparse(raw, result)
