"""Lossless repairs (``accept_repairs: lossless``): what is repaired, what never is, and
how a repaired item is recorded.

The tables hold the exact rule (core/lossless.py, ADR 0011); the properties hold it for
any item: trailing commas put at legal points are repaired into the original value, with
exactly those repairs on record, and refused with the policy off.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from salvagelane.core import AcceptRepairs, Guardrails, ItemSchema, SalvagePolicy, salvage
from salvagelane.core.assembly import check_item
from salvagelane.core.guardrails import ChainContext, Rejection, Review, review_item
from salvagelane.core.lossless import find_trailing_commas, repair_losslessly
from salvagelane.core.outcome import (
    DifferenceKind,
    Outcome,
    compare,
    outcome_of,
)
from salvagelane.core.records import (
    AcceptedItem,
    QuarantinedItem,
    Reason,
    Repair,
    RepairKind,
    Span,
)
from salvagelane.core.scanner import Candidate, Closure
from salvagelane.errors import ConfigurationError
from tests.support.builders import policy, run, triage_item, triage_schema
from tests.support.trailing_commas import with_trailing_commas

LOSSLESS = AcceptRepairs.LOSSLESS
TRAILING = RepairKind.TRAILING_COMMA


def _at(*offsets: int) -> list[Repair]:
    return [Repair(kind=TRAILING, at=at) for at in offsets]


# ------------------------------------------------------------------------ the exact rule

FOUND = [
    pytest.param('{"a":1,}', (6,), id="object"),
    pytest.param('{"rank":3,"tags":[],}', (19,), id="after-empty-array-member"),
    pytest.param('{"a":[1,2,]}', (9,), id="nested-array"),
    pytest.param('{"a":{"b":1,}}', (11,), id="nested-object"),
    pytest.param('{"a":[1,],"b":{"c":1,},}', (7, 20, 22), id="several"),
    pytest.param('{"a": 1 ,\n\t \r}', (8,), id="whitespace-around"),
    pytest.param('{"a":[[1,],[2,],],}', (8, 13, 15, 17), id="every-level"),
    pytest.param('[1,"x",]', (6,), id="array-value"),
    pytest.param('{"a":"x,}",}', (10,), id="comma-in-string-untouched"),
    pytest.param('{"a,]":{"b":"],",},}', (16, 18), id="brackets-in-keys-and-strings"),
    pytest.param('{"a":1}', (), id="nothing-to-repair"),
    pytest.param('{"a":"x,}"}', (), id="only-a-comma-in-a-string"),
    pytest.param('  {"a":[],}\n', (9,), id="whitespace-around-the-item"),
]


@pytest.mark.parametrize(("text", "offsets"), FOUND)
def test_trailing_commas_are_found_exactly(text: str, offsets: tuple[int, ...]) -> None:
    assert find_trailing_commas(text) == offsets
    for at in offsets:
        assert text[at] == ","


REFUSED = [
    pytest.param('{"a":1,,}', id="double-comma"),
    pytest.param('{"a":[1,,]}', id="double-comma-in-array"),
    pytest.param('{"a":[,]}', id="comma-alone-in-array"),
    pytest.param("{,}", id="comma-alone-in-object"),
    pytest.param('{"a":[,1]}', id="leading-comma"),
    pytest.param('{"a":1 "b":2,}', id="missing-comma-between-members"),
    pytest.param('{"a":[1 2,]}', id="missing-comma-between-elements"),
    pytest.param('{"a",}', id="key-without-value"),
    pytest.param('{"a":,}', id="colon-without-value"),
    pytest.param('{"a" 1,}', id="missing-colon"),
    pytest.param('{"a":1,', id="truncated-after-comma"),
    pytest.param('{"a":[1,]', id="truncated-object"),
    pytest.param('{"a":"x,}', id="truncated-string"),
    pytest.param('{"a":[1,}}', id="mismatched-closer"),
    pytest.param('{"a":NaN,}', id="bare-word"),
    pytest.param('{"a":1,} x', id="text-after"),
    pytest.param('{"a":1,}{"b":2}', id="two-values"),
    pytest.param('{"a":01,}', id="leading-zero"),
    pytest.param('{"a":"x\ny",}', id="raw-newline-in-string"),
    pytest.param("", id="empty"),
    pytest.param(",", id="comma"),
]


# Defects of other kinds, each with one reading (tests/unit/test_lossless_kinds.py): no
# trailing comma to find, but repaired with them.
OTHER_KINDS = [
    pytest.param("{'a':1,}", id="single-quotes"),
    pytest.param("{\"a\":'x',}", id="single-quoted-value"),
    pytest.param('{"a":"x\ty",}', id="raw-tab-in-string"),
]


@pytest.mark.parametrize("text", REFUSED)
def test_any_other_defect_means_no_lossless_repair(text: str) -> None:
    assert find_trailing_commas(text) is None
    assert repair_losslessly(text) is None


@pytest.mark.parametrize("text", OTHER_KINDS)
def test_defects_of_other_lossless_kinds_are_no_trailing_commas(text: str) -> None:
    assert find_trailing_commas(text) is None
    fixed = repair_losslessly(text)
    assert fixed is not None
    assert [r.kind for r in fixed.repairs][-1] is TRAILING


def test_a_repair_removes_exactly_the_commas_and_counts_offsets_in_the_raw_output() -> None:
    fixed = repair_losslessly('{"a":[1,],"b":{"c":1 ,\n},}', offset=100)
    assert fixed is not None
    assert fixed.text == '{"a":[1],"b":{"c":1 \n}}'
    assert list(fixed.repairs) == _at(107, 121, 124)


# ----------------------------------------------------------------- accepted, and recorded

ACCEPTED = [
    pytest.param(
        '{"items":[{"rank":3,"tags":[],}]}', {"rank": 3, "tags": []}, _at(29), id="issue-example"
    ),
    pytest.param('[{"a":[1,2,]}]', {"a": [1, 2]}, _at(10), id="nested-array"),
    pytest.param('[{"a":{"b":1,}}]', {"a": {"b": 1}}, _at(12), id="nested-object"),
    pytest.param(
        '[{"a":[1,],"b":{"c":1,},}]', {"a": [1], "b": {"c": 1}}, _at(8, 21, 23), id="several"
    ),
    pytest.param('[\n  {\n    "a": 1,\n  }\n]', {"a": 1}, _at(16), id="pretty-printed"),
    pytest.param('[{"a":"x,}",}]', {"a": "x,}"}, _at(11), id="comma-in-string-untouched"),
]


@pytest.mark.parametrize(("raw", "data", "repairs"), ACCEPTED)
def test_lossless_accepts_the_item_and_records_each_repair(
    raw: str, data: dict[str, Any], repairs: list[Repair]
) -> None:
    items_path = ("items",) if raw.startswith('{"items"') else ()
    result = run(raw, items_path, accept_repairs=LOSSLESS)
    assert not result.quarantined
    [item] = result.items
    assert item.data == data
    assert list(item.repairs) == repairs
    assert item.coercions == ()
    for repair in repairs:
        assert raw[repair.at] == ","  # ``at`` counts in the raw output, as spans do
    assert item.to_json()["repairs"] == [{"kind": "trailing_comma", "at": r.at} for r in repairs]
    assert result.status.value == "ok"


@pytest.mark.parametrize(("raw", "data", "repairs"), ACCEPTED)
def test_without_the_policy_the_same_items_are_quarantined_malformed(
    raw: str, data: dict[str, Any], repairs: list[Repair]
) -> None:
    items_path = ("items",) if raw.startswith('{"items"') else ()
    result = run(raw, items_path)
    assert not result.items
    assert [q.reason for q in result.quarantined] == [Reason.MALFORMED]


def test_the_policy_is_off_by_default_and_leaves_the_result_as_it_was() -> None:
    assert Guardrails().accept_repairs is AcceptRepairs.NONE
    raw = '[{"a":1},{"b":2,}]'
    result = run(raw)
    assert [q.index for q in result.quarantined] == [1]
    assert "repairs" not in result.to_json()["items"][0]  # an original item reads as before
    on = run(raw, accept_repairs=LOSSLESS)
    assert on.items[0].to_json() == result.items[0].to_json()


def test_accept_repairs_takes_its_word_and_refuses_any_other() -> None:
    assert Guardrails(accept_repairs="lossless").accept_repairs is AcceptRepairs.LOSSLESS  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="accept_repairs 'best_effort' is not one of"):
        Guardrails(accept_repairs="best_effort")  # type: ignore[arg-type]


def test_a_repaired_item_still_faces_the_schema_and_coercion() -> None:
    schema = triage_schema()
    good = json.dumps(triage_item())[:-1] + ",}"
    bad = json.dumps(triage_item(rank="first"))[:-1] + ",}"
    numeric = json.dumps(triage_item(rank="2"))[:-1] + ",}"
    raw = f"[{good},{bad},{numeric}]"
    result = run(raw, schema=schema, accept_repairs=LOSSLESS, coerce=True)
    assert [item.index for item in result.items] == [0, 2]
    assert [(q.index, q.reason) for q in result.quarantined] == [(1, Reason.SCHEMA)]
    repaired = result.items[1]
    assert repaired.data["rank"] == 2
    assert [c.path for c in repaired.coercions] == ["$.rank"]
    assert list(repaired.repairs) == _at(raw.rindex(",}"))


def test_a_repaired_item_still_faces_the_allow_list_and_the_item_limit() -> None:
    raw = '[{"c":"x","r":2,},{"c":"evil","r":1,},{"c":"x","r":1,}]'
    result = run(
        raw, accept_repairs=LOSSLESS, allow_lists={"c": frozenset({"x"})}, max_items=1, rank_key="r"
    )
    assert [item.index for item in result.items] == [2]
    assert [(q.index, q.reason) for q in result.quarantined] == [
        (0, Reason.OVER_LIMIT),
        (1, Reason.ALLOW_LIST),
    ]


# ---------------------------------------------------------------- never accepted, with it on

STILL_QUARANTINED = [
    pytest.param('[{"a":1,"a":2,}]', Reason.MALFORMED, id="duplicate-keys"),
    pytest.param('[{"a":{"b":1,"b":2,},}]', Reason.MALFORMED, id="nested-duplicate-keys"),
    pytest.param("[{'a':'it's'}]", Reason.MALFORMED, id="quote-inside-single-quotes"),
    pytest.param('[{"a":1 "b":2,}]', Reason.MALFORMED, id="missing-comma-between-members"),
    pytest.param('[{"a":1,,}]', Reason.MALFORMED, id="double-comma"),
    pytest.param('[{"a":[,]}]', Reason.MALFORMED, id="comma-alone-in-array"),
    pytest.param('[{"a":{,}}]', Reason.MALFORMED, id="comma-alone-in-object"),
    pytest.param('[{"a":1e999,}]', Reason.MALFORMED, id="number-overflow"),
    pytest.param('[{"a":"\\u0000",}]', Reason.MALFORMED, id="nul"),
    pytest.param('[{"a":"\\ud800",}]', Reason.MALFORMED, id="lone-surrogate"),
    pytest.param('[{"a":[1,],', Reason.TRUNCATED, id="truncated-with-trailing-comma"),
    pytest.param('[{"a":[1,],"b":"cut', Reason.TRUNCATED, id="truncated-in-a-string"),
    pytest.param("[[1,2,]]", Reason.NOT_OBJECT, id="repaired-array-is-still-no-object"),
]


@pytest.mark.parametrize(("raw", "reason"), STILL_QUARANTINED)
def test_nothing_but_a_lossless_defect_is_accepted(raw: str, reason: Reason) -> None:
    on = run(raw, accept_repairs=LOSSLESS)
    assert not on.items
    assert [q.reason for q in on.quarantined] == [reason]
    if reason is not Reason.NOT_OBJECT:
        # What could not be repaired keeps the record its own text earned: same signal,
        # same offsets, same operator-only repair of a cut item, as with the policy off.
        assert on.to_json() == run(raw).to_json()


def test_a_truncated_item_is_never_repaired_into_acceptance() -> None:
    # The operator-only repair of the cut item validates, and lossless is on: still cut.
    raw = '[{"a":1,},{"a":2,"b":[1],"c":"d'
    result = run(raw, accept_repairs=LOSSLESS)
    assert [item.index for item in result.items] == [0]
    [cut] = result.quarantined
    assert (cut.index, cut.reason) == (1, Reason.TRUNCATED)
    assert cut.has_repair
    assert cut.repaired == {"a": 2, "b": [1], "c": "d"}
    assert result.truncated
    # A cut item with a trailing comma before the cut: truncated, whatever the policy.
    cut_after_comma = run('[{"a":[1,],"b":', accept_repairs=LOSSLESS)
    assert [(q.index, q.reason) for q in cut_after_comma.quarantined] == [(0, Reason.TRUNCATED)]
    assert not cut_after_comma.items


@pytest.mark.parametrize(
    ("closure", "stray"),
    [pytest.param(Closure.BROKEN, False, id="damage-the-scanner-saw"), (Closure.CLOSED, True)],
)
def test_a_span_the_scanner_did_not_close_cleanly_is_never_repaired(
    closure: Closure, stray: bool
) -> None:
    text = '{"a":1,}'
    candidate = Candidate(
        index=0, span=Span(start=0, end=len(text)), closure=closure, depth=1, stray=stray
    )
    ctx = ChainContext(guardrails=Guardrails(accept_repairs=LOSSLESS), schema=None)
    outcome = review_item(Review(candidate=candidate, text=text), ctx)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is Reason.MALFORMED


# ------------------------------------------------------- commas of the items array itself


def test_a_trailing_comma_of_the_items_array_is_no_repair_of_an_item() -> None:
    # The array's own trailing comma is the scanner's (a note), with the policy on or off;
    # only the comma inside the item is a repair of that item.
    raw = '{"items":[{"a":1},{"b":[2,],},]}'
    off = run(raw, ("items",))
    on = run(raw, ("items",), accept_repairs=LOSSLESS)
    assert [note.startswith("trailing comma at offset") for note in off.notes] == [True]
    assert on.notes == off.notes
    assert [i.index for i in off.items] == [0]
    assert [(i.index, list(i.repairs)) for i in on.items] == [(0, []), (1, _at(25, 27))]


# ------------------------------------------------------------------- an operator's item


def test_an_operators_item_is_repaired_as_a_models_is() -> None:
    text = '  {"a":[1,],}'
    verdict = check_item(text, SalvagePolicy(guardrails=Guardrails(accept_repairs=LOSSLESS)))
    assert isinstance(verdict, AcceptedItem)
    assert verdict.data == {"a": [1]}
    assert list(verdict.repairs) == _at(9, 11)  # offsets into the operator's text
    refused = check_item(text, policy())
    assert isinstance(refused, QuarantinedItem)
    assert refused.reason is Reason.MALFORMED


# ------------------------------------------------------------- regression fixture outcome


def test_a_repaired_item_is_never_the_same_outcome_as_an_original_one() -> None:
    original = outcome_of(run('[{"a":[1]}]'))
    repaired = outcome_of(run('[{"a":[1,]}]', accept_repairs=LOSSLESS))
    assert original.items[0].sha256 == repaired.items[0].sha256  # the same data
    assert "repairs" not in original.to_json()["items"][0]
    assert repaired.to_json()["items"][0]["repairs"] == [{"kind": "trailing_comma", "at": 8}]
    [difference] = compare(original, repaired)
    assert difference.kind is DifferenceKind.ITEM_REPAIRS
    assert difference.message == "item 1 repairs changed: none (original) -> trailing_comma at 8"
    assert compare(repaired, Outcome.from_json(repaired.to_json())) == []
    assert compare(repaired, outcome_of(run('[{"a":[1 ,]}]', accept_repairs=LOSSLESS)))


@pytest.mark.parametrize(
    ("repairs", "message"),
    [
        ({"kind": "trailing_comma"}, r"items\[0\]\.repairs\[0\]\.at: expected an offset"),
        ({"kind": "guess", "at": 1}, r"items\[0\]\.repairs\[0\]\.kind: expected one of"),
        ("trailing_comma", r"items\[0\]\.repairs: expected an array"),
    ],
)
def test_an_outcome_with_unreadable_repairs_is_refused(repairs: Any, message: str) -> None:
    document = outcome_of(run('[{"a":[1,]}]', accept_repairs=LOSSLESS)).to_json()
    entry = document["items"][0]
    entry["repairs"] = repairs if isinstance(repairs, str) else [repairs]
    with pytest.raises(ValueError, match=message):
        Outcome.from_json(document)


# ----------------------------------------------------------------------------- properties

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.text(
        alphabet=st.characters(
            codec="utf-8", exclude_characters="\x00", exclude_categories=("Cs",)
        ),
        max_size=8,
    )
    | st.sampled_from([",}", ",]", '"', "{", "}\n", "[,]", "\\"])
)
KEYS = st.text(alphabet='abc,}]" {[', min_size=1, max_size=4)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)
ITEMS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=5)
GAPS = st.none() | st.sampled_from(["", " ", "\n", "\t", "\r\n  "])
PROPERTY = settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(item=ITEMS, data=st.data())
def test_trailing_commas_at_legal_points_are_repaired_into_the_original(
    item: dict[str, Any], data: st.DataObject
) -> None:
    text, commas = with_trailing_commas(item, lambda: data.draw(GAPS))
    verdict = check_item(text, SalvagePolicy(guardrails=Guardrails(accept_repairs=LOSSLESS)))
    assert isinstance(verdict, AcceptedItem)
    assert verdict.data == item
    assert list(verdict.repairs) == _at(*commas)
    off = check_item(text, policy())
    if commas:
        assert isinstance(off, QuarantinedItem)
        assert off.reason is Reason.MALFORMED
    else:
        assert isinstance(off, AcceptedItem)
        assert off.data == item
        assert not off.repairs


@PROPERTY
@given(items=st.lists(ITEMS, min_size=1, max_size=4), data=st.data())
def test_in_a_report_every_repaired_item_is_accepted_with_exactly_its_repairs(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    raw = '{"summary": "s", "items": ['
    expected: list[list[Repair]] = []
    for n, item in enumerate(items):
        text, commas = with_trailing_commas(item, lambda: data.draw(GAPS))
        raw += ", " if n else ""
        start = len(raw)
        raw += text
        expected.append(_at(*(start + at for at in commas)))
    raw += "]}"
    on = salvage(
        raw, SalvagePolicy(items_path="items", guardrails=Guardrails(accept_repairs=LOSSLESS))
    )
    assert not on.quarantined
    assert [item.data for item in on.items] == items
    assert [list(item.repairs) for item in on.items] == expected
    off = salvage(raw, SalvagePolicy(items_path="items"))
    assert [q.index for q in off.quarantined] == [n for n, r in enumerate(expected) if r]
    assert all(not item.repairs for item in off.items)


def test_the_schema_of_a_repaired_item_is_the_item_schema_as_written() -> None:
    # No item schema keyword is relaxed for a repaired item: a closed schema still closes.
    schema = ItemSchema.compile(
        {"type": "object", "additionalProperties": False, "properties": {"a": {}}},
        source="closed",
    )
    result = run('[{"a":1,},{"a":1,"b":2,}]', schema=schema, accept_repairs=LOSSLESS)
    assert [item.index for item in result.items] == [0]
    assert [(q.index, q.reason) for q in result.quarantined] == [(1, Reason.SCHEMA)]
