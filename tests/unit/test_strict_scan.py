"""The scan of a strict document from one compiled pass (core/strict_scan.py, ADR 0016).

``scan_strict`` answers only for a text the compiled check proves strict, and its
answer must be the document itself: one candidate per element of the list at the
path, whose span holds exactly that element, and one envelope field per member of
the objects on the path. Where the lenient scan reads the same document cleanly,
both answers are the same, and so is the whole salvage.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.core import Guardrails, Reason, SalvagePolicy, salvage, speedups
from salvagelane.core.scanner import (
    AnomalyKind,
    Closure,
    ItemsPath,
    ScanResult,
    scan_leniently,
    scan_strict,
)
from salvagelane.core.strict_scan import scan_wrapped
from tests.unit.test_properties import FAST, GENERIC_SCHEMA, guardrails

pytestmark = pytest.mark.skipif(
    not speedups.COMPILED, reason="the compiled scan loops were not built"
)

# Keys JSON must escape are rarer: a document holding one is not proven strict.
KEYS = ["rank", "id", "items", "data", "summary", "x y", "é", "\U0001f600"] * 4 + ['q"k', "a\\b"]
STRINGS = st.sampled_from(
    ["", "s", 'a"b', '{"rank": 1}', "]", "}", "[", "\\", "é中", "\U0001f600", "line\nbreak"]
) | st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | STRINGS
SCALARS |= st.floats(allow_nan=False, allow_infinity=False, width=32)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
# Items shaped like a report's, with sub-lists of objects that carry the same keys: the
# shape a lenient scan could misread, and the one a strict pass must read exactly.
ITEM_LIKE = st.fixed_dictionaries(
    {"rank": st.integers(0, 9), "id": STRINGS},
    optional={
        "related": st.lists(
            st.fixed_dictionaries({"rank": st.integers(0, 9), "id": STRINGS}), max_size=3
        ),
        "extra": VALUES,
    },
)
ELEMENTS = st.lists(ITEM_LIKE | VALUES, max_size=6)
PATHS = st.sampled_from([(), ("items",), ("data", "items"), ("x y", "é")])


@st.composite
def strict_reports(draw: st.DrawFn) -> tuple[str, ItemsPath, Any]:
    """A JSON text holding a list at a path, laid out as a model might write it."""
    path: ItemsPath = draw(PATHS)
    doc: Any = draw(ELEMENTS)
    for key in reversed(path):
        members = draw(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3))
        members.pop(key, None)
        pairs = list(members.items())
        pairs.insert(draw(st.integers(0, len(pairs))), (key, doc))
        doc = dict(pairs)
    layout = draw(st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")}]))
    ascii_only = draw(st.sampled_from([False, False, False, True]))
    text = json.dumps(doc, ensure_ascii=ascii_only, **layout)
    return (
        draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", "\n"])),
        path,
        doc,
    )


def _depth(value: Any) -> int:
    """Containers nested in ``value``, itself included: what a candidate's depth counts."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _members(node: Any, path: ItemsPath, level: int = 0) -> list[tuple[tuple[str, ...], Any]]:
    """The envelope: every member of the objects on the path, off the path, in the
    document's order."""
    found: list[tuple[tuple[str, ...], Any]] = []
    if level == len(path):
        return found
    for key, value in node.items():
        if key == path[level]:
            found.extend(_members(value, path, level + 1))
        else:
            found.append(((*path[:level], key), value))
    return found


def _same(a: Any, b: Any) -> bool:
    # json.dumps tells 1 from 1.0 and True from 1, which == does not.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _items_of(doc: Any, path: ItemsPath) -> list[Any]:
    for key in path:
        doc = doc[key]
    assert isinstance(doc, list)
    return doc


@FAST
@given(case=strict_reports())
def test_the_strict_scan_is_the_document(case: tuple[str, ItemsPath, Any]) -> None:
    text, path, doc = case
    scanned = scan_strict(text, path)
    if speedups.check_strict(text, 0, len(text)) != speedups.STRICT_GRAMMAR:
        assert scanned is None  # an escaped key: not proven, so no answer
        return
    assert scanned is not None
    elements = _items_of(doc, path)
    assert [c.index for c in scanned.candidates] == list(range(len(elements)))
    for candidate, element in zip(scanned.candidates, elements, strict=True):
        assert _same(json.loads(candidate.span.text(text)), element)
        assert candidate.depth == _depth(element)
        assert candidate.closure is Closure.CLOSED
        assert (candidate.defect, candidate.stray) == ("", False)
    members = _members(doc, path)
    assert [f.path for f in scanned.envelope] == [p for p, _ in members]
    for member, (_, value) in zip(scanned.envelope, members, strict=True):
        assert _same(json.loads(member.span.text(text)), value)
        assert member.depth == _depth(value)
        assert (member.closure, member.defect, member.conflict) == (Closure.CLOSED, "", "")
    assert scanned.root is not None
    assert scanned.container is not None
    assert scanned.root.text(text) == text.strip()
    assert _same(json.loads(scanned.container.text(text)), elements)
    assert scanned.container_closed
    assert scanned.items_found
    assert not scanned.truncated
    assert not scanned.anomalies
    assert scanned.steps <= 2 * len(text) + 2


def _clean(scanned: ScanResult) -> bool:
    return not scanned.anomalies and all(c.complete for c in scanned.candidates)


@FAST
@given(case=strict_reports(), limits=guardrails)
def test_where_the_lenient_scan_reads_it_cleanly_both_agree(
    case: tuple[str, ItemsPath, Any], limits: Guardrails
) -> None:
    text, path, _ = case
    strict = scan_strict(text, path)
    lenient = scan_leniently(text, path)
    if strict is None or not _clean(lenient):
        return
    assert replace(strict, steps=0) == replace(lenient, steps=0)
    policy = SalvagePolicy(items_path=path, item_schema=GENERIC_SCHEMA, guardrails=limits)
    fast = salvage(text, policy)
    with speedups.without_strict_scan():
        slow = salvage(text, policy)
    assert fast == slow


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param('{"items": [1], "items": [2]}', ("items",), id="duplicate-key"),
        pytest.param('{"items": [1,]}', ("items",), id="trailing-comma"),
        pytest.param('{"items": [NaN]}', ("items",), id="nan"),
        pytest.param('{"items": [{"a": 1, "\\u0061": 2}]}', ("items",), id="escaped-key"),
        pytest.param('{"\\u0069tems": [1]}', ("items",), id="escaped-path-key"),
        pytest.param('{"items": ["\\u0000"]}', ("items",), id="nul"),
        pytest.param('{"items": [12345678901234567890]}', ("items",), id="big-integer"),
        pytest.param('{"items": [{"rank": 1}', ("items",), id="truncated"),
        pytest.param('Here it is: {"items": [1]}', ("items",), id="leading-prose"),
        pytest.param('```json\n{"items": [1]}\n```', ("items",), id="fenced"),
        pytest.param('{"items": {"a": 1}}', ("items",), id="items-key-holds-an-object"),
        pytest.param('{"data": [1], "x": 2}', ("data", "items"), id="path-object-is-a-list"),
        pytest.param('{"other": [1]}', ("items",), id="no-items-key"),
        pytest.param('[{"items": [1]}]', ("items",), id="root-is-a-list"),
        pytest.param('{"items": [1]}', (), id="root-is-an-object"),
        pytest.param("", (), id="empty"),
    ],
)
def test_no_answer_without_a_proof(text: str, path: ItemsPath) -> None:
    assert scan_strict(text, path) is None


def test_a_list_item_holding_item_shaped_objects_is_one_candidate() -> None:
    # Both passes read the document as it is: one element, a list, quarantined as not
    # an object. (The lenient scan once cut such a list at its first item-shaped object,
    # so a report read without the compiled strict pass lost it differently.)
    text = (
        '[{"rank": 1, "id": "a"}, [{"rank": 2, "id": "b"}, {"rank": 3, "id": "c"}], '
        '{"rank": 4, "id": "d"}]'
    )
    lenient = scan_leniently(text, ())
    assert _clean(lenient)
    strict = scan_strict(text, ())
    assert strict is not None
    assert [c.span for c in lenient.candidates] == [c.span for c in strict.candidates]
    result = salvage(text, SalvagePolicy(items_path=()))
    assert result.document_valid
    assert [item.data for item in result.items] == [{"rank": 1, "id": "a"}, {"rank": 4, "id": "d"}]
    assert [(q.index, q.reason) for q in result.quarantined] == [(1, Reason.NOT_OBJECT)]
    assert result.notes == ()


def test_a_nested_path_and_its_envelope() -> None:
    text = '{"run": 7, "data": {"meta": {"n": [1, 2]}, "items": [{"rank": 1}, "x"]}, "z": null}'
    scanned = scan_strict(text, ("data", "items"))
    assert scanned is not None
    assert [c.span.text(text) for c in scanned.candidates] == ['{"rank": 1}', '"x"']
    assert [(f.path, f.span.text(text), f.depth) for f in scanned.envelope] == [
        (("run",), "7", 0),
        (("data", "meta"), '{"n": [1, 2]}', 2),
        (("z",), "null", 0),
    ]


WRAPPERS = st.sampled_from(
    [
        ("```json\n", "\n```"),
        ("```\n", "\n```\n"),
        ("Here is today's report:\n\n", ""),
        ("", "\n\nLet me know if you need anything else."),
        ("Sure! ```json\n", "\n``` Done."),
    ]
)


@FAST
@given(case=strict_reports(), wrapper=WRAPPERS, limits=guardrails)
def test_a_wrapped_strict_report_is_read_by_the_strict_pass_as_the_scanner_reads_it(
    case: tuple[str, ItemsPath, Any], wrapper: tuple[str, str], limits: Guardrails
) -> None:
    report, path, _ = case
    before, after = wrapper
    text = before + report + after
    wrapped = scan_wrapped(text, path)
    lenient = scan_leniently(text, path)
    if scan_strict(report, path) is None:
        assert wrapped is None  # no proof, no answer
        return
    assert wrapped is not None
    scanned, span = wrapped
    assert span.text(text) == report.strip()
    unwrapped = scan_strict(report, path)
    assert unwrapped is not None
    assert [c.span.text(text) for c in scanned.candidates] == [
        c.span.text(report) for c in unwrapped.candidates
    ]
    noted = {a.kind for a in lenient.anomalies}
    if (
        lenient.root != scanned.root
        or not noted <= {AnomalyKind.LEADING_TEXT, AnomalyKind.TRAILING_TEXT}
        or not all(c.complete for c in lenient.candidates)
    ):
        return  # the scanner misreads this report (a fenced [[]] from its inner list)
    assert replace(scanned, steps=0) == replace(lenient, steps=0)
    policy = SalvagePolicy(items_path=path, item_schema=GENERIC_SCHEMA, guardrails=limits)
    fast = salvage(text, policy)
    with speedups.without_strict_scan():
        slow = salvage(text, policy)
    assert fast == slow
    assert not fast.document_valid


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('Use "the" report: {"items": [1]}', id="quote-in-prose"),
        pytest.param('See [1]: {"items": [1]}', id="bracket-in-prose"),
        pytest.param('{"items": [1]} and {"x": 2}', id="an-object-after"),
        pytest.param('{"items": [1]}', id="not-wrapped"),
        pytest.param('```json\n{"items": [1,]}\n```', id="not-strict-inside"),
    ],
)
def test_a_wrapper_that_could_be_structure_gets_no_answer(text: str) -> None:
    assert scan_wrapped(text, ("items",)) is None
