"""The structured-output hint (issue 28, section 5): bundled, capped, each provider's subset.

The bodies are held against tests/support/provider_schemas.py, a checker written from
the providers' documentation apart from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing

from salvagelane.core.schema_hint import (
    anthropic_hint,
    hint_record,
    openai_hint,
    report_hint_schema,
)
from salvagelane.errors import SchemaError
from tests.support.provider_schemas import assert_fits_anthropic, assert_fits_openai, schema_refs

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
ENVELOPE = json.loads((SCHEMAS / "daily-triage-report.schema.json").read_text(encoding="utf-8"))
ITEM = json.loads((SCHEMAS / "daily-triage-item.schema.json").read_text(encoding="utf-8"))
COMPLETE = json.loads(
    (
        Path(__file__).resolve().parents[1]
        / "fixtures"
        / "daily-triage-truncated"
        / "complete.json"
    ).read_text(encoding="utf-8")
)


def triage_hint_schema(max_items: int = 7) -> dict[str, Any]:
    return report_hint_schema(
        ENVELOPE, resources=[ITEM], items_path=("recommendations",), max_items=max_items
    )


def test_every_reference_is_bundled_and_the_items_are_capped() -> None:
    schema = triage_hint_schema()
    assert schema_refs(schema) == ["#/$defs/daily-triage-item"]
    assert "$id" not in json.dumps(schema)
    assert schema["properties"]["recommendations"]["maxItems"] == 7  # not the schema's 16
    assert triage_hint_schema(max_items=20)["properties"]["recommendations"]["maxItems"] == 16


def test_the_bundled_schema_judges_reports_as_the_original_does() -> None:
    """Bundling changes where the item schema lives, never what a report must be."""
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        ITEM["$id"], referencing.Resource.from_contents(ITEM)
    )
    original = jsonschema.Draft202012Validator(ENVELOPE, registry=registry)
    bundled = jsonschema.Draft202012Validator(triage_hint_schema(max_items=16))
    report = {"summary": COMPLETE["summary"], "recommendations": COMPLETE["recommendations"][:7]}
    broken = json.loads(json.dumps(report))
    broken["recommendations"][2]["wsjf"]["score"] = "high"
    for document in (report, broken, {"summary": ""}, {"recommendations": []}):
        assert original.is_valid(document) == bundled.is_valid(document)
    assert not bundled.is_valid(broken)


def test_openai_gets_a_strict_hint_for_the_triage_schema() -> None:
    hint = openai_hint(triage_hint_schema())
    assert hint.strict
    assert hint.not_strict == ()
    assert "$.properties.summary.maxLength" in hint.left_out
    assert_fits_openai({"name": "report", "strict": hint.strict, "schema": hint.schema})


def test_anthropic_gets_the_triage_schema_without_numeric_or_length_limits() -> None:
    hint = anthropic_hint(triage_hint_schema())
    assert hint is not None
    assert "$.properties.recommendations.maxItems" in hint.left_out
    assert "$.$defs.daily-triage-item.properties.confidence.minimum" in hint.left_out
    assert_fits_anthropic(hint.schema)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            "$: an object without additionalProperties: false",
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": {}, "b": {}},
                "required": ["a"],
            },
            "$: properties not required: b",
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["a"],
                "properties": {"a": {"type": "array", "items": {"type": "object"}}},
            },
            "$.properties.a.items: an object without additionalProperties: false",
        ),
        ({"type": "array"}, "$: the root must be an object"),
    ],
)
def test_a_schema_outside_the_strict_subset_is_advisory_for_openai_and_says_why(
    schema: dict[str, Any], why: str
) -> None:
    hint = openai_hint(schema)
    assert not hint.strict
    assert why in hint.not_strict
    assert_fits_openai({"name": "report", "strict": hint.strict, "schema": hint.schema})


def test_anthropic_gets_no_hint_for_an_open_object_and_the_attempt_records_why() -> None:
    open_schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert anthropic_hint(open_schema) is None
    assert hint_record("anthropic", open_schema) == {
        "sent": False,
        "strict": False,
        "why_not": "the schema has an open object, which Anthropic refuses",
    }
    assert hint_record("openai", None)["sent"] is False
    record = hint_record("openai", triage_hint_schema())
    assert (record["sent"], record["strict"], record["provider"]) == (True, True, "openai")


def test_a_minimum_of_items_above_one_is_left_out_for_anthropic() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"xs": {"type": "array", "minItems": 3}},
    }
    hint = anthropic_hint(schema)
    assert hint is not None
    assert hint.schema["properties"]["xs"] == {"type": "array"}
    assert hint.left_out == ("$.properties.xs.minItems",)


def test_a_reference_to_another_document_cannot_be_bundled() -> None:
    envelope = {"type": "object", "properties": {"x": {"$ref": "https://example.test/x.json"}}}
    with pytest.raises(SchemaError, match="no provider resolves other documents"):
        report_hint_schema(envelope, resources=[], items_path=(), max_items=3)


def test_local_references_inside_a_bundled_resource_follow_it() -> None:
    item = {
        "$id": "urn:test:item",
        "$defs": {"score": {"type": "number"}},
        "type": "object",
        "properties": {"s": {"$ref": "#/$defs/score"}},
    }
    envelope = {"type": "object", "properties": {"items": {"items": {"$ref": "urn:test:item"}}}}
    schema = report_hint_schema(envelope, resources=[item], items_path=("items",), max_items=2)
    assert sorted(schema_refs(schema)) == ["#/$defs/item", "#/$defs/item/$defs/score"]
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"items": [{"s": 1.5}]})
    assert not validator.is_valid({"items": [{"s": "x"}]})
    assert not validator.is_valid({"items": [{}, {}, {}]})  # capped at 2
