"""ItemSchema tables: compile-time rejection, no remote refs, bundled resources, formats, hash."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from typing import Any

import pytest

from salvagelane.core.records import Reason, Status
from salvagelane.core.schema import ItemSchema
from salvagelane.errors import ConfigurationError, SchemaError
from tests.support.builders import SCHEMAS, load_json, run, triage_item, triage_item_schema_dict


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record (and refuse) every attempt to resolve a name or open a connection."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def _refuse(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{name}{args!r}")
            raise OSError(f"network access in a unit test: {name}")

        return _refuse

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(urllib.request, "urlopen", refuse("urlopen"))
    return attempts


# ------------------------------------------------------------------------ invalid schemas


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        pytest.param({"type": "objekt"}, "not a valid JSON Schema at type:", id="bad-type-name"),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "strin"}}},
            "not a valid JSON Schema at properties/a/type:",
            id="bad-nested-type",
        ),
        pytest.param(
            {"properties": {"a": {"minLength": -1}}},
            "not a valid JSON Schema at properties/a/minLength:",
            id="negative-min-length",
        ),
        pytest.param(
            {"required": "a"}, "not a valid JSON Schema at required:", id="required-not-list"
        ),
        pytest.param(
            {"properties": {"a": {"pattern": 5}}},
            "not a valid JSON Schema at properties/a/pattern:",
            id="pattern-not-string",
        ),
        pytest.param([{"type": "object"}], "a JSON Schema must be an object", id="not-a-mapping"),
        pytest.param("object", "a JSON Schema must be an object", id="a-string"),
    ],
)
def test_compile_rejects_invalid_schema(schema: Any, fragment: str) -> None:
    with pytest.raises(SchemaError) as info:
        ItemSchema.compile(schema, source="triage.schema.json")
    message = str(info.value)
    assert message.startswith("triage.schema.json: ")
    assert fragment in message
    assert isinstance(info.value, ConfigurationError)


# --------------------------------------------------------------------------- remote $refs


@pytest.mark.parametrize(
    ("schema", "ref", "pointer"),
    [
        pytest.param(
            {"$ref": "http://example.com/item.json"},
            "http://example.com/item.json",
            "/$ref",
            id="http-at-root",
        ),
        pytest.param(
            {"properties": {"a": {"$ref": "https://example.com/s.json#/$defs/x"}}},
            "https://example.com/s.json#/$defs/x",
            "/properties/a/$ref",
            id="https-with-fragment",
        ),
        pytest.param(
            {"allOf": [{"type": "object"}, {"$ref": "http://example.com/more.json"}]},
            "http://example.com/more.json",
            "/allOf/1/$ref",
            id="inside-array",
        ),
        pytest.param(
            {"$defs": {"x": {"$ref": "http://example.com/x.json"}}},
            "http://example.com/x.json",
            "/$defs/x/$ref",
            id="inside-unused-defs",
        ),
        pytest.param(
            {"$defs": {"x": {"$dynamicRef": "http://example.com/x.json#meta"}}},
            "http://example.com/x.json#meta",
            "/$defs/x/$dynamicRef",
            id="dynamic-ref",
        ),
        pytest.param(
            {"$ref": "other.schema.json"}, "other.schema.json", "/$ref", id="relative-file"
        ),
        pytest.param({"$ref": "urn:nobody:knows"}, "urn:nobody:knows", "/$ref", id="unknown-urn"),
    ],
)
def test_remote_ref_is_refused_at_compile_time(
    schema: dict[str, Any], ref: str, pointer: str, no_network: list[str]
) -> None:
    with pytest.raises(SchemaError) as info:
        ItemSchema.compile(schema, source="s.json")
    message = str(info.value)
    assert repr(ref) in message
    assert f"at {pointer} " in message
    assert "never fetches remote schemas" in message
    assert no_network == []


def test_remote_ref_inside_a_bundled_resource_is_refused_at_compile_time(
    no_network: list[str],
) -> None:
    resource = {
        "$id": "urn:example:part",
        "type": "object",
        "properties": {"b": {"$ref": "http://example.com/remote.json"}},
    }
    root = {"type": "object", "properties": {"a": {"$ref": "urn:example:part"}}}
    with pytest.raises(SchemaError, match=re.escape("http://example.com/remote.json")):
        ItemSchema.compile(root, resources=[resource])
    assert no_network == []


def test_dangling_local_ref_is_refused_at_compile_time() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(SchemaError, match="missing"):
        ItemSchema.compile(schema)


# --------------------------------------------------------------- bundled resources by $id


def _report_schema() -> dict[str, Any]:
    data: dict[str, Any] = load_json(SCHEMAS / "daily-triage-report.schema.json")
    return data


def test_ref_to_a_bundled_resource_by_id_works(no_network: list[str]) -> None:
    report = ItemSchema.compile(
        _report_schema(), source="report", resources=[triage_item_schema_dict()]
    )
    good = {"summary": "s", "recommendations": [triage_item()]}
    bad = {"summary": "s", "recommendations": [triage_item(wsjf={"score": "high"})]}
    assert report.check(good) is None
    signal = report.check(bad)
    assert signal is not None
    assert (signal.code, signal.path, signal.expected, signal.received) == (
        "type",
        "$.recommendations[0].wsjf.score",
        "number",
        '"high"',
    )
    assert no_network == []


def test_ref_to_the_item_id_without_the_resource_is_refused() -> None:
    with pytest.raises(SchemaError, match=re.escape("urn:salvagelane:schema:daily-triage-item")):
        ItemSchema.compile(_report_schema(), source="report")


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(
            {
                "$id": "https://example.com/root.json",
                "type": "object",
                "properties": {"a": {"$ref": "https://example.com/root.json#/$defs/count"}},
                "$defs": {"count": {"type": "integer"}},
            },
            id="absolute-ref-to-own-id",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/count"}},
                "$defs": {"count": {"type": "integer"}},
            },
            id="local-ref-to-defs",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {"a": {"$ref": "urn:example:count"}},
                "$defs": {"count": {"$id": "urn:example:count", "type": "integer"}},
            },
            id="ref-to-id-embedded-in-defs",
        ),
    ],
)
def test_refs_that_stay_inside_the_bundle_work(
    schema: dict[str, Any], no_network: list[str]
) -> None:
    compiled = ItemSchema.compile(schema)
    assert compiled.check({"a": 3}) is None
    signal = compiled.check({"a": "three"})
    assert signal is not None
    assert (signal.code, signal.path) == ("type", "$.a")
    assert no_network == []


# -------------------------------------------------------------------------------- formats

FORMAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "due": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid"},
    },
}


@pytest.mark.parametrize(
    ("field", "value", "valid"),
    [
        pytest.param("due", "2026-13-45", False, id="date-month-13-day-45"),
        pytest.param("due", "2026-02-30", False, id="date-february-30"),
        pytest.param("due", "2026-1-5", False, id="date-without-padding"),
        pytest.param("due", "tomorrow", False, id="date-in-words"),
        pytest.param("due", "2026-01-05", True, id="date-valid"),
        pytest.param("due", "2028-02-29", True, id="date-leap-day"),
        pytest.param("at", "2026-01-05", False, id="date-time-without-time"),
        pytest.param("at", "2026-01-05T10:00:00Z", True, id="date-time-valid"),
        pytest.param("mail", "not-an-address", False, id="email-invalid"),
        pytest.param("mail", "ops@example.com", True, id="email-valid"),
        pytest.param("id", "1234", False, id="uuid-invalid"),
        pytest.param("id", "123e4567-e89b-12d3-a456-426614174000", True, id="uuid-valid"),
    ],
)
def test_format_is_checked(field: str, value: str, valid: bool) -> None:
    signal = ItemSchema.compile(FORMAT_SCHEMA).check({field: value})
    if valid:
        assert signal is None
        return
    assert signal is not None
    expected_format = FORMAT_SCHEMA["properties"][field]["format"]
    assert (signal.code, signal.path, signal.expected, signal.received) == (
        "format",
        f"$.{field}",
        f"a valid {expected_format}",
        json.dumps(value),
    )


def test_format_failure_quarantines_the_item_in_salvage() -> None:
    schema = ItemSchema.compile(FORMAT_SCHEMA)
    result = run('[{"due": "2026-13-45"}, {"due": "2026-12-24"}]', (), schema=schema)
    assert [item.data for item in result.items] == [{"due": "2026-12-24"}]
    [held] = result.quarantined
    assert held.reason is Reason.SCHEMA
    assert held.message == 'schema at $.due: expected a valid date, received "2026-13-45"'
    assert result.status is Status.PARTIAL


# ------------------------------------------------------------------------------ the hash


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(triage_item_schema_dict(), id="daily-triage-item"),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}},
            id="small",
        ),
        pytest.param(
            {"properties": {"\u00e9": {"enum": ["\u4e2d", 1]}}, "type": "object"},
            id="non-ascii",
        ),
    ],
)
def test_hash_is_stable_under_key_order(schema: dict[str, Any]) -> None:
    reordered = _reordered(schema)
    assert list(reordered) != list(schema)  # the keys really are in another order
    first = ItemSchema.compile(schema)
    assert ItemSchema.compile(reordered).sha256 == first.sha256
    assert ItemSchema.compile(json.loads(json.dumps(schema))).sha256 == first.sha256
    assert len(first.sha256) == 64
    assert int(first.sha256, 16) >= 0


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param({"type": "integer"}, {"type": "number"}, id="different-value"),
        pytest.param({"type": "integer"}, {"type": "integer", "minimum": 0}, id="extra-keyword"),
        pytest.param({"enum": [1, 2]}, {"enum": [2, 1]}, id="array-order-matters"),
    ],
)
def test_hash_differs_for_different_schemas(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert ItemSchema.compile(left).sha256 != ItemSchema.compile(right).sha256


# -------------------------------------------------------------- correction signal details


def test_required_details_name_each_missing_property() -> None:
    schema = ItemSchema.compile(triage_item_schema_dict())
    signal = schema.check({"rank": 1, "candidate": "billing-migration"})
    assert signal is not None
    assert signal.code == "required"
    assert signal.path == "$.action"
    # the other missing properties are listed once each, not the first one again
    assert "$.why" in signal.detail
    assert "$.confidence" in signal.detail
    assert signal.detail.count("$.action") == 0
