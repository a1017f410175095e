"""Which validator decides: jsonschema-rs's verdict, jsonschema's explanation, the routing rule.

The JSON Schema Test Suite proves the agreement (tests/integration/test_json_schema_suite.py);
these tables pin the routing rule itself and the disagreements found beyond the suite.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core import schema_routing
from salvagelane.core.schema import ItemSchema
from salvagelane.core.schema_routing import (
    FORMATS_CHECKED,
    compile_fast,
    reference_only_reason,
)
from salvagelane.errors import SchemaError
from tests.support.builders import SCHEMAS, load_json, triage_item, triage_item_schema_dict

# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        pytest.param(
            {"pattern": "^\\d$"}, "at //pattern: its pattern '^\\\\d$' uses", id="pattern-root"
        ),
        pytest.param(
            {"properties": {"id": {"type": "string", "pattern": "^[A-Z]+-\\w+$"}}},
            "at /properties/id/pattern:",
            id="pattern-nested",
        ),
        pytest.param(
            {"patternProperties": {"^x-": {}}},
            "at //patternProperties:",
            id="pattern-properties",
        ),
        pytest.param(
            {"items": {"dependencies": {"a": ["b"]}}},
            "at /items/dependencies: it uses the draft-07 keyword dependencies",
            id="dependencies",
        ),
        pytest.param(
            {"allOf": [{"$defs": {"x": {"pattern": "\\ba"}}}]},
            "at /allOf/0/$defs/x/pattern:",
            id="pattern-in-defs-in-array",
        ),
        pytest.param(
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
            "it declares $schema 'http://json-schema.org/draft-07/schema#'",
            id="another-draft",
        ),
    ],
)
def test_a_schema_touching_a_known_disagreement_is_validated_by_jsonschema_alone(
    schema: dict[str, Any], words: str
) -> None:
    compiled = ItemSchema.compile(schema)
    assert compiled.fast is None
    assert words in compiled.reference_only


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(
            {"type": "object", "properties": {"pattern": {"type": "string"}}},
            id="a-property-named-pattern",
        ),
        pytest.param(
            {"type": "object", "properties": {"dependencies": {"type": "array"}}},
            id="a-property-named-dependencies",
        ),
        pytest.param({"required": ["pattern", "dependencies"]}, id="names-in-required"),
        pytest.param({"enum": [{"pattern": "a"}]}, id="data-in-enum"),
        pytest.param({"const": {"dependencies": {}}}, id="data-in-const"),
        pytest.param(
            {"$schema": "https://json-schema.org/draft/2020-12/schema#", "type": "object"},
            id="draft-2020-12-with-empty-fragment",
        ),
        pytest.param({"type": "string", "format": "date-time"}, id="a-checked-format"),
        pytest.param(triage_item_schema_dict(), id="daily-triage-item"),
    ],
)
def test_other_schemas_get_the_fast_validator(schema: dict[str, Any]) -> None:
    compiled = ItemSchema.compile(schema)
    assert compiled.reference_only == ""
    assert compiled.fast is not None


def test_a_schema_jsonschema_rs_cannot_compile_is_validated_by_jsonschema_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No schema in the suite reaches this branch today; a future jsonschema-rs may."""

    def refuse(schema: Any, resources: Any = ()) -> Any:
        raise jsonschema_rs.ReferencingError("unsupported here\nmore lines")

    monkeypatch.setattr(schema_routing, "compile_fast", refuse)
    compiled = ItemSchema.compile({"type": "object"})
    assert compiled.fast is None
    assert compiled.reference_only == "jsonschema-rs cannot compile it: unsupported here"
    assert compiled.check({}) is None
    assert compiled.check([]) is not None


def test_a_bundled_resource_is_routed_by_its_own_keywords() -> None:
    report = load_json(SCHEMAS / "daily-triage-report.schema.json")
    item = copy.deepcopy(triage_item_schema_dict())  # the loader caches it
    item["properties"]["candidate"]["pattern"] = "^\\w+$"
    compiled = ItemSchema.compile(report, resources=[item])
    assert compiled.fast is None
    assert "/properties/candidate/pattern" in compiled.reference_only
    assert reference_only_reason([report]) == ""


def test_the_fast_validator_resolves_bundled_resources_without_fetching() -> None:
    report = ItemSchema.compile(
        load_json(SCHEMAS / "daily-triage-report.schema.json"),
        resources=[triage_item_schema_dict()],
    )
    assert report.fast is not None
    good = {"summary": "s", "recommendations": [triage_item()]}
    bad = {"summary": "s", "recommendations": [triage_item(wsjf={"score": "high"})]}
    assert report.fast.is_valid(good)
    assert not report.fast.is_valid(bad)


def test_jsonschema_rs_never_fetches_a_remote_ref() -> None:
    """Even unrouted and unrefused, the fast validator is built offline."""
    with pytest.raises(jsonschema_rs.ValidationError, match="Retrieval is disabled"):
        compile_fast({"$ref": "http://127.0.0.1:9/never.json"})


def test_an_unknown_dialect_is_refused_at_load() -> None:
    with pytest.raises(SchemaError) as info:
        ItemSchema.compile(
            {"properties": {"a": {"$schema": "https://example.com/my-meta", "type": "integer"}}},
            source="s.json",
        )
    assert str(info.value).startswith(
        "s.json: $schema 'https://example.com/my-meta' at /properties/a is not a JSON Schema "
        "dialect salvagelane knows, and it never fetches a meta-schema"
    )


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        pytest.param({"$ref": "#", "type": "object"}, "/$ref", id="root-refers-to-itself"),
        pytest.param(
            {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
            "/$defs/a/$ref",
            id="defs-refers-to-itself",
        ),
        pytest.param({"allOf": [{"$ref": "#"}]}, "/allOf/0/$ref", id="through-all-of"),
        pytest.param(
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"not": {"$ref": "#/$defs/a"}}}},
            "/$defs/",
            id="two-defs-through-not",
        ),
    ],
)
def test_a_ref_loop_at_one_place_in_the_item_is_refused_at_load(
    schema: dict[str, Any], pointer: str
) -> None:
    """jsonschema would raise RecursionError on every item, jsonschema-rs accept them all."""
    with pytest.raises(SchemaError) as info:
        ItemSchema.compile(schema, source="s.json")
    message = str(info.value)
    assert message.startswith(f"s.json: $ref at {pointer}")
    assert "leads back to where it started without going into the item" in message


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"properties": {"child": {"$ref": "#"}}}, id="through-properties"),
        pytest.param({"items": {"$ref": "#"}}, id="through-items"),
        pytest.param(
            {"$defs": {"a": {"type": "integer"}}, "allOf": [{"$ref": "#/$defs/a"}]},
            id="no-loop",
        ),
    ],
)
def test_a_recursive_schema_that_goes_into_the_item_is_fine(schema: dict[str, Any]) -> None:
    compiled = ItemSchema.compile(schema)
    nested: Any = {"child": {"child": {}}} if "properties" in schema else [[[]]]
    assert (compiled.check(nested) is None) == (compiled.explain(nested) is None)


def test_an_unknown_dialect_in_a_bundled_schema_is_refused_at_load() -> None:
    resource = {"$id": "urn:example:part", "$schema": "https://example.com/my-meta"}
    with pytest.raises(SchemaError) as info:
        ItemSchema.compile({"$ref": "urn:example:part"}, source="s.json", resources=[resource])
    assert str(info.value).startswith(
        "s.json: bundled schema #1: $schema 'https://example.com/my-meta' at / is not"
    )


# ----------------------------------------------------------------------------- formats


# The formats jsonschema asserted when salvagelane installed its format packages (until
# issue 28): both validators still assert every one, with jsonschema-rs's predicates, now
# that those packages are gone (jsonschema imported them at start-up to use none).
BAD_VALUE_OF_EACH_FORMAT = {
    "date": "2025-13-45",
    "date-time": "2025-11-12 10:00",
    "duration": "P",
    "email": "no-at",
    "hostname": "-bad-.com",
    "idn-email": "no-at",
    "idn-hostname": "-bad-.com",
    "ipv4": "999.1.1.1",
    "ipv6": "zz::",
    "json-pointer": "no-slash",
    "regex": "(",
    "relative-json-pointer": "x",
    "time": "25:00:00Z",
    "uri": "no scheme",
    "uri-reference": "a b",
    "uri-template": "{",
    "uuid": "x",
}


def test_the_checked_formats_are_the_set_jsonschema_asserted() -> None:
    assert set(FORMATS_CHECKED) == set(BAD_VALUE_OF_EACH_FORMAT)


@pytest.mark.parametrize(("name", "bad"), sorted(BAD_VALUE_OF_EACH_FORMAT.items()))
def test_every_checked_format_is_asserted_by_both_validators(name: str, bad: str) -> None:
    compiled = ItemSchema.compile({"format": name})
    assert compiled.fast is not None
    signal = compiled.check(bad)
    assert signal is not None
    assert signal.code == "format"
    assert compiled.explain(bad) is not None


@pytest.mark.parametrize("name", ["iri", "iri-reference", "no-such-format"])
def test_a_format_outside_the_set_is_an_annotation_for_both(name: str) -> None:
    compiled = ItemSchema.compile({"format": name})
    assert compiled.fast is not None
    assert compiled.check("http://a b\n") is None
    assert compiled.explain("http://a b\n") is None


# ---------------------------------------------- disagreements found beyond the suite


@pytest.mark.parametrize(
    ("pattern", "instance"),
    [
        pytest.param("^\\d+$", "\u0663", id="arabic-indic-digit"),
        pytest.param("^\\w+$", "\u00e9", id="e-acute-as-word-character"),
    ],
)
def test_regex_dialects_disagree_and_the_layer_follows_jsonschema(
    pattern: str, instance: str
) -> None:
    raw = compile_fast({"pattern": pattern}).is_valid(instance)
    compiled = ItemSchema.compile({"pattern": pattern})
    reference = compiled.explain(instance) is None
    assert raw != reference  # the disagreement is real: routing is needed
    assert compiled.fast is None
    assert (compiled.check(instance) is None) == reference


@pytest.mark.parametrize(
    ("pattern", "instance"),
    [
        pytest.param("^ab$", "ab\n", id="dollar-before-a-final-newline"),
        pytest.param("^[0-9]+$", "12\n", id="digits-then-newline"),
    ],
)
def test_where_jsonschema_rs_reads_a_pattern_stricter_the_reference_has_the_last_word(
    pattern: str, instance: str
) -> None:
    raw = compile_fast({"pattern": pattern}).is_valid(instance)
    compiled = ItemSchema.compile({"pattern": pattern})
    reference = compiled.explain(instance) is None
    assert (raw, reference) == (False, True)  # stricter, never wider
    assert compiled.fast is not None  # so jsonschema-rs decides, and is asked first
    assert compiled.check(instance) is None  # its refusal is asked again of the reference


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        pytest.param({"maximum": 2**64}, 2**64 + 1, id="maximum-past-u64"),
        pytest.param({"multipleOf": 2}, 10**20 + 1, id="odd-past-u64"),
        pytest.param({"const": 2**70}, 2**70 + 1, id="const-past-u64"),
        pytest.param({"minimum": 2**53}, 2**53 + 1, id="past-float-precision"),
        pytest.param({"uniqueItems": True}, [1, True], id="one-is-not-true"),
        pytest.param({"const": 1.0}, 1, id="one-point-zero-is-one"),
        pytest.param({"multipleOf": 0.01}, 0.075, id="float-multiple"),
    ],
)
def test_big_and_mixed_numbers_agree(schema: dict[str, Any], instance: Any) -> None:
    compiled = ItemSchema.compile(schema)
    assert compiled.fast is not None
    assert compiled.fast.is_valid(instance) == (compiled.explain(instance) is None)


# ----------------------------------------------------------- verdict and explanation


def test_a_rejected_item_gets_the_references_signal() -> None:
    compiled = ItemSchema.compile(triage_item_schema_dict())
    item = triage_item(wsjf={"score": "high"}, action="dance")
    assert compiled.fast is not None
    assert not compiled.fast.is_valid(item)
    signal = compiled.check(item)
    assert signal is not None
    assert signal == compiled.explain(item)


class _RejectsEverything:
    def is_valid(self, instance: Any) -> bool:
        return False


class _MustNotBeAsked:
    def iter_errors(self, instance: Any) -> Any:
        raise AssertionError("the reference ran for an item the fast validator accepted")


def test_the_fast_validators_acceptance_is_final() -> None:
    compiled = ItemSchema.compile({"type": "object"})
    silenced = dataclasses.replace(compiled, validator=_MustNotBeAsked())
    assert silenced.check({}) is None


def test_an_unexplained_rejection_falls_back_to_the_references_verdict() -> None:
    compiled = ItemSchema.compile({"type": "object"})
    wrong = dataclasses.replace(compiled, fast=_RejectsEverything())
    assert wrong.check({}) is None  # the reference finds nothing wrong: accepted
    assert wrong.check([]) == compiled.check([])


# ------------------------------------------------- agreement on generated items


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def _near_triage_items() -> st.SearchStrategy[dict[str, Any]]:
    """Valid items with one or two fields replaced by anything: near the boundary."""
    fields = ["rank", "candidate", "action", "why", "confidence", "wsjf", "extra"]
    wsjf = ["business_value", "time_criticality", "risk_reduction", "job_size", "score"]

    def damage(changes: list[tuple[str, Any]], drop: str | None) -> dict[str, Any]:
        item = triage_item()
        for name, value in changes:
            if name in wsjf and isinstance(item["wsjf"], dict):
                item["wsjf"][name] = value
            else:
                item[name] = value
        item.pop(drop or "", None)
        return item

    return st.builds(
        damage,
        st.lists(st.tuples(st.sampled_from(fields + wsjf), _values | _scalars), max_size=2),
        st.none() | st.sampled_from(fields),
    )


_TRIAGE = ItemSchema.compile(triage_item_schema_dict())
_FORMATS = ItemSchema.compile(
    {
        "type": "object",
        "properties": {name: {"format": name} for name in FORMATS_CHECKED},
        "additionalProperties": {"type": ["integer", "string"], "minLength": 2, "maximum": 9},
    }
)


@settings(max_examples=400)
@given(_near_triage_items())
def test_the_validators_agree_on_items_near_the_triage_schema(item: dict[str, Any]) -> None:
    assert _TRIAGE.fast is not None
    assert _TRIAGE.fast.is_valid(item) == (_TRIAGE.explain(item) is None)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from([*FORMATS_CHECKED, "other"]),
        st.text(alphabet="0123456789-:.TZ@a/#{}[]~%\n ", max_size=24) | _scalars,
        max_size=4,
    )
)
def test_the_validators_agree_on_formats_and_bounds(item: dict[str, Any]) -> None:
    assert _FORMATS.fast is not None
    assert _FORMATS.fast.is_valid(item) == (_FORMATS.explain(item) is None)
