"""The pure-Python loops give the compiled loops' results, end to end (issue 28.6).

``test_speedups.py`` compares the loops question by question on report documents.
This module compares whole salvages on everything else a model sends: every framing
(a document, fenced or prose-wrapped, a bare array, JSON Lines, a fenced block per
item), items that are arrays, scalars or deep values, damage, every schema shape,
the envelope check, lossless repair, coercion and tight depth limits. The results
must be byte-for-byte the same, so what a user gets never depends on whether a C
compiler was there when salvagelane was installed.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from salvagelane.core import Guardrails, ItemSchema, SalvagePolicy, salvage, speedups
from salvagelane.core.lexis import container_end
from tests.support.nested_reports import damaged_reports
from tests.unit.test_framing import _edits, _items, render

pytestmark = pytest.mark.skipif(
    not speedups.COMPILED, reason="the compiled scan loops were not built"
)

PARITY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ENVELOPE = ItemSchema.compile(
    {
        "type": "object",
        "properties": {"summary": {"type": "string"}, "findings": {"type": "array"}},
        "required": ["summary"],
        "additionalProperties": False,
    }
)
SCHEMAS = {
    "none": None,
    "object": ItemSchema.compile({"type": "object"}),
    "array": ItemSchema.compile({"type": "array"}),
    "flag": ItemSchema.compile(
        {
            "type": "object",
            "properties": {"a": {"type": ["boolean", "null"]}, "id": {"type": "string"}},
        }
    ),
}


def both(raw: str, policy: SalvagePolicy) -> tuple[str, str]:
    compiled = json.dumps(salvage(raw, policy).to_json(), sort_keys=True)
    with speedups.use_python():
        reference = json.dumps(salvage(raw, policy).to_json(), sort_keys=True)
    return compiled, reference


_leaf = st.one_of(st.integers(-5, 5), st.text("ab\"\\' \n", max_size=3), st.booleans(), st.none())
_value = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "id", "summary"]), inner, max_size=3)
    ),
    max_leaves=12,
)


def frame(items: list[object], style: str) -> str:
    body = ", ".join(json.dumps(item) for item in items)
    document = '{"summary": "s", "findings": [' + body + "]}"
    if style == "document":
        return document
    if style == "pretty":
        return json.dumps({"summary": "s", "findings": items}, indent=2)
    if style == "wrapped":
        return "Here it is:\n```json\n" + document + "\n```\nDone."
    if style == "bare":
        return "[" + body + "]"
    if style == "lines":
        return '{"summary": "s"}\n' + "\n".join(json.dumps(item) for item in items)
    return "".join("```json\n" + json.dumps(item) + "\n```\n" for item in items)


_damage = st.lists(
    st.tuples(
        st.sampled_from(["cut", "delete", "insert"]),
        st.integers(0, 10**6),
        st.sampled_from(list("{}[]\",:\n x'/#")),
    ),
    max_size=2,
)


def damage(text: str, edits: list[tuple[str, int, str]]) -> str:
    for kind, at, char in edits:
        at %= len(text) + 1
        if kind == "cut":
            text = text[:at]
        elif kind == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + char + text[at:]
    return text


@PARITY
@given(
    items=st.lists(_value, max_size=5),
    style=st.sampled_from(["document", "pretty", "wrapped", "bare", "lines", "fenced"]),
    edits=_damage,
    schema=st.sampled_from(sorted(SCHEMAS)),
    envelope=st.booleans(),
    framing=st.sampled_from(["auto", "document", "lines"]),
    repairs=st.sampled_from(["none", "lossless"]),
    coerce=st.booleans(),
    max_depth=st.sampled_from([1, 2, 3, 32]),
)
def test_salvage_is_the_same_in_every_framing_and_shape(
    items: list[object],
    style: str,
    edits: list[tuple[str, int, str]],
    schema: str,
    envelope: bool,
    framing: str,
    repairs: str,
    coerce: bool,
    max_depth: int,
) -> None:
    policy = SalvagePolicy(
        items_path="findings",
        item_schema=SCHEMAS[schema],
        envelope_schema=ENVELOPE if envelope else None,
        framing=framing,
        guardrails=Guardrails(max_depth=max_depth, coerce=coerce, accept_repairs=repairs),
    )
    compiled, reference = both(damage(frame(items, style), edits), policy)
    assert compiled == reference


@PARITY
@given(
    items=_items,
    framing=st.sampled_from(["lines", "packed", "pretty", "fenced"]),
    envelope=st.sampled_from(["first", "last", "none"]),
    edit=_edits,
)
def test_salvage_is_the_same_on_the_framing_property_cases(
    items: list[dict[str, object]], framing: str, envelope: str, edit: tuple[str, int, str]
) -> None:
    raw = damage(render(items, framing=framing, envelope=envelope).text, [edit])
    policy = SalvagePolicy(items_path="findings", item_schema=SCHEMAS["object"])
    compiled, reference = both(raw, policy)
    assert compiled == reference


@PARITY
@given(case=damaged_reports(max_damaged=3), repairs=st.sampled_from(["none", "lossless"]))
def test_salvage_is_the_same_on_nested_reports_with_quote_damage(
    case: tuple,  # type: ignore[type-arg]
    repairs: str,
) -> None:
    report, text, _ = case
    policy = SalvagePolicy(
        items_path=report.items_path, guardrails=Guardrails(accept_repairs=repairs)
    )
    compiled, reference = both(text, policy)
    assert compiled == reference


# Found by the first property: without the compiled loops, a valid report whose item is
# an array of item-shaped objects was split at each object (the strict pass, compiled
# only, read it as one value). Both now read it as one array item, quarantined whole.
ARRAY_ITEMS = [
    ('{"summary": "s", "findings": [{"id": 1}, [{"id": 2}, {"id": 3}]]}', [{"id": 1}]),
    ('{"summary": "s", "findings": [{"summary": null}, [{"summary": null}]]}', [{"summary": None}]),
    (
        '{"summary": "s", "findings": [{"id": 1}, [{"id": 2}, {"id": 3}], {"id": 4}',
        [{"id": 1}, {"id": 4}],
    ),
    (
        '{"summary": "s", "findings": [{"id": 1}, [[[[{"id": 2}]]]], {"id": 4}]}',
        [{"id": 1}, {"id": 4}],
    ),
]


@pytest.mark.parametrize(("raw", "kept"), ARRAY_ITEMS)
@pytest.mark.parametrize("loops", ["compiled", "python"])
def test_an_array_of_item_shaped_objects_is_one_item(
    raw: str, kept: list[object], loops: str
) -> None:
    policy = SalvagePolicy(items_path="findings", item_schema=SCHEMAS["object"])
    if loops == "python":
        with speedups.use_python():
            result = salvage(raw, policy)
    else:
        result = salvage(raw, policy)
    assert [item.data for item in result.items] == kept
    (held,) = result.quarantined
    array = raw.index("[", raw.index("findings") + len('findings": ['))
    assert (held.span.start, str(held.reason)) == (array, "not_object")
    assert isinstance(json.loads(raw[held.span.start : held.span.end]), list)


def test_an_item_that_opens_with_a_bracket_still_costs_only_itself() -> None:
    # Not well formed, so the signatures inside it are still new items (ADR 0002).
    raw = '[{"id": 0}, ["id": 1}, {"id": 2}, {"id": 3}]'
    for loops in ("compiled", "python"):
        if loops == "python":
            with speedups.use_python():
                result = salvage(raw, SalvagePolicy())
        else:
            result = salvage(raw, SalvagePolicy())
        assert [item.data for item in result.items] == [{"id": 0}, {"id": 2}, {"id": 3}], loops


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, [2, [3, [4, [5]]]]]", (23, 5)),
        ('{"a": {"b": {"c": {"d": "}"}}}}', (31, 4)),
        ('[{"a": "\\u00e9"}]', (17, 2)),
        ("[[[[1]]]", None),  # not closed
        ('[[[["a\nb"]]]]', None),  # a raw newline: not a well-formed string
        ("[[[[1}]]]", None),  # a closer of the wrong kind
        ("x", None),
    ],
)
def test_container_end_answers_at_any_depth_as_the_compiled_loop(
    text: str, expected: tuple[int, int] | None
) -> None:
    assert container_end(text, 0, len(text)) == expected
    assert speedups.match_container(text, 0, len(text)) == expected
