"""clear_the_chain: "every step would pass" is said only where the chain passes the item.

salvage asks it first, for all the items of a report proven strict at once, and keeps
each item it says yes to without running the chain; so a yes where any step would
reject (or change) the item would accept what the chain quarantines. A no is never a
verdict: the chain then runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from salvagelane.core import Guardrails
from salvagelane.core.assembly import _judge_each, _keep_cleared
from salvagelane.core.guardrails import (
    ChainContext,
    Review,
    clear_the_chain,
    parse_the_plain,
    review_item,
    under_review,
)
from salvagelane.core.records import Span
from salvagelane.core.scan_values import Candidate, Closure
from salvagelane.core.scanner import scan
from salvagelane.core.schema import ItemSchema
from salvagelane.core.strict import Parsed, parse_item
from salvagelane.errors import ConfigurationError
from tests.unit.test_properties import (
    FAST,
    GENERIC_SCHEMA,
    ITEM_KEY,
    _mutate,
    edits,
    guardrails,
    reports,
    values,
)

SCHEMAS = [
    None,
    GENERIC_SCHEMA,
    ItemSchema.compile({"type": "object", "maxProperties": 3}, source="small"),
    # Validated by the reference alone (a regex the validators read two ways): such a
    # schema never clears in one call.
    ItemSchema.compile(
        {"type": "object", "properties": {"candidate": {"pattern": "^\\w"}}}, source="regex"
    ),
    # A regex both read alike: jsonschema-rs clears what it finds valid.
    ItemSchema.compile(
        {"type": "object", "properties": {"candidate": {"pattern": "^o"}}}, source="alike"
    ),
    # Every value coercion could touch: with coerce on, an item this schema accepts
    # still clears (coerce() changes nothing the schema accepts), one it refuses never.
    ItemSchema.compile(
        {
            "type": "object",
            "properties": {
                ITEM_KEY: {"type": "integer"},
                "candidate": {"type": ["boolean", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "x": {"type": "string", "format": "date"},
                "a": {"type": "object", "properties": {"b": {"type": "number"}}},
            },
        },
        source="coercible",
    ),
]

allow_lists = st.dictionaries(
    st.sampled_from([ITEM_KEY, "candidate", "tags", "a.b", "x"]),
    st.frozensets(st.sampled_from(["ok", "0", "", "a"]), max_size=3),
    max_size=2,
)
# Items whose allow-listed fields are mostly strings near the allowed ones: the cases
# where only membership decides. Values of every kind come in through ``values``.
_NEAR = st.sampled_from(["ok", "a", "b", "nope", ""])
items = st.fixed_dictionaries(
    {},
    optional={
        ITEM_KEY: st.integers(min_value=-2, max_value=3) | st.just("0"),
        "candidate": _NEAR | _NEAR | values,
        "tags": st.lists(_NEAR | _NEAR | values, max_size=3),
        "a": st.fixed_dictionaries({}, optional={"b": _NEAR | values}),
        "x": values,
    },
)


def _review(value: Any, closure: Closure = Closure.CLOSED, depth: int | None = None) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    parsed = parse_item(text)
    assert isinstance(parsed, Parsed)
    if depth is None:
        depth = text.count("{") + text.count("[")  # a bound is all check_size compares
    candidate = Candidate(index=0, span=Span(start=0, end=len(text)), closure=closure, depth=depth)
    return under_review(candidate, text, parsed.value)


def _context(limits: Guardrails, allowed: dict[str, frozenset[str]], schema: Any) -> ChainContext:
    """The drawn limits, with the drawn allow-lists and no item limit."""
    kept = Guardrails(
        max_depth=limits.max_depth,
        max_string_length=limits.max_string_length,
        allow_lists=allowed,
        coerce=limits.coerce,
    )
    return ChainContext(guardrails=kept, schema=schema)


def clears_the_chain(review: Review, ctx: ChainContext) -> bool:
    """The verdict on one item, asked as salvage asks it: in a list."""
    return clear_the_chain([review.candidate], [review.data], ctx)[0]


@FAST
@given(
    item=items,
    limits=guardrails,
    allowed=allow_lists,
    schema=st.sampled_from(SCHEMAS),
    closure=st.sampled_from([Closure.CLOSED, Closure.CLOSED, Closure.TRUNCATED, Closure.BROKEN]),
)
def test_a_cleared_item_is_one_the_chain_passes_unchanged(
    item: Any, limits: Guardrails, allowed: dict[str, frozenset[str]], schema: Any, closure: Closure
) -> None:
    ctx = _context(limits, allowed, schema)
    review = _review(item, closure)
    cleared = clears_the_chain(review, ctx)
    event(f"cleared: {cleared}")
    if cleared:
        assert review_item(review, ctx) == review


@pytest.mark.parametrize(
    ("item", "limits", "schema", "clears"),
    [
        ({ITEM_KEY: 1}, Guardrails(), GENERIC_SCHEMA, True),
        ({ITEM_KEY: -1}, Guardrails(), GENERIC_SCHEMA, False),  # schema: minimum
        (
            {ITEM_KEY: 1, "candidate": "ok"},
            Guardrails(allow_lists={"candidate": frozenset({"ok"})}),
            None,
            True,
        ),
        (
            {ITEM_KEY: 1, "candidate": "no"},
            Guardrails(allow_lists={"candidate": frozenset({"ok"})}),
            None,
            False,
        ),
        (
            {ITEM_KEY: 1, "tags": ["ok", 1]},
            Guardrails(allow_lists={"tags": frozenset({"ok"})}),
            None,
            False,
        ),
        (
            {ITEM_KEY: 1, "a": {"b": "ok"}},
            Guardrails(allow_lists={"a.b": frozenset({"ok"})}),
            None,
            True,
        ),
        ({ITEM_KEY: 1}, Guardrails(allow_lists={"candidate": frozenset()}), None, True),  # absent
        ({ITEM_KEY: 1, "x": [[1]]}, Guardrails(max_depth=2), None, False),  # too deep
        (
            {ITEM_KEY: 1, "x": "long"},
            Guardrails(max_string_length=4),
            None,
            False,
        ),  # may be too long
        ({ITEM_KEY: "1"}, Guardrails(coerce=True), GENERIC_SCHEMA, False),  # coercion changes it
        ([1], Guardrails(), None, False),  # not an object
        ("ok", Guardrails(), None, False),
        ({"candidate": "ok"}, Guardrails(), SCHEMAS[3], False),  # the reference decides
        ({"candidate": "ok"}, Guardrails(), SCHEMAS[4], True),  # jsonschema-rs decides
        ({"candidate": "no"}, Guardrails(), SCHEMAS[4], False),
    ],
)
def test_what_clears_in_one_call(item: Any, limits: Guardrails, schema: Any, clears: bool) -> None:
    ctx = ChainContext(guardrails=limits, schema=schema)
    review = _review(item)
    assert clears_the_chain(review, ctx) is clears
    if clears:
        assert review_item(review, ctx) is review


def test_an_allow_list_holds_only_strings() -> None:
    # Built in code, one could hold the number 1, which no item value matches as a
    # string: the one-set test of a batch would take it as allowed. Refused at once.
    with pytest.raises(ConfigurationError, match=r"allow-list 'candidate' holds 1; expected"):
        Guardrails(allow_lists={"candidate": frozenset({"ok", 1})})  # type: ignore[arg-type]


def test_only_a_closed_candidate_clears() -> None:
    ctx = ChainContext(guardrails=Guardrails(), schema=None)
    assert clears_the_chain(_review({}), ctx)
    assert not clears_the_chain(_review({}, Closure.TRUNCATED), ctx)
    assert not clears_the_chain(_review({}, Closure.BROKEN), ctx)


@FAST
@given(
    batch=st.lists(items | values, max_size=6),
    limits=guardrails,
    allowed=allow_lists,
    schema=st.sampled_from(SCHEMAS),
)
def test_each_verdict_is_the_items_own(
    batch: list[Any], limits: Guardrails, allowed: dict[str, frozenset[str]], schema: Any
) -> None:
    # Asked for many items at once, each answer is the one asked for that item alone.
    ctx = _context(limits, allowed, schema)
    reviews = [_review(item) for item in batch]
    together = clear_the_chain([r.candidate for r in reviews], [r.data for r in reviews], ctx)
    assert together == [clears_the_chain(r, ctx) for r in reviews]


@FAST
@given(report=reports(), mutations=st.none() | edits, limits=guardrails, allowed=allow_lists)
def test_a_broken_reports_items_get_the_chains_verdicts(
    report: Any, mutations: Any, limits: Guardrails, allowed: dict[str, frozenset[str]]
) -> None:
    # The lenient path parses each plain item once and clears them together (issue 28):
    # the outcome is the chain's, item by item, parse and all.
    raw = report.text if mutations is None else _mutate(report.text, mutations)
    candidates = scan(raw, report.items_path).candidates
    for schema in (GENERIC_SCHEMA, SCHEMAS[-1]):
        ctx = _context(limits, allowed, schema)
        by_chain = _judge_each(raw, candidates, None, None, ctx)
        values = parse_the_plain(raw, candidates, ctx)
        cleared = clear_the_chain(candidates, values, ctx)
        together = (
            _keep_cleared(candidates, values, ctx.guardrails)
            if all(cleared)
            else _judge_each(raw, candidates, values, cleared, ctx)
        )
        assert together == by_chain
