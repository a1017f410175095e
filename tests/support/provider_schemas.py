"""Checkers of the JSON Schema subsets providers document for structured output.

Written from the providers' documentation, apart from salvagelane's own
``core/schema_hint.py``, so that a request body the connectors send is held against
what the provider says it accepts, not against the code that built it.

- OpenAI, "Structured Outputs, supported schemas": the root is an object; every object
  has ``additionalProperties: false`` and lists every property in ``required`` (strict
  mode); ``$ref`` only to definitions in the same schema; no ``minLength``,
  ``maxLength``, ``patternProperties``, ``unevaluatedProperties``, ``propertyNames``,
  ``minProperties``, ``maxProperties``, ``unevaluatedItems``, ``contains``,
  ``minContains``, ``maxContains``, ``uniqueItems``, ``allOf``, ``oneOf``, ``not``,
  ``if``/``then``/``else``, ``dependentRequired``, ``dependentSchemas``.
- Anthropic, "Structured outputs, JSON Schema limitations": every object has
  ``additionalProperties: false``; no external ``$ref``; no numerical constraints
  (``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
  ``multipleOf``), no string-length constraints, no array constraint but ``minItems``
  of 0 or 1.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

CLOSED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["summary"],
    "properties": {"summary": {"type": "string", "maxLength": 100}},
}

OPENAI_NOT_IN_SUBSET = {
    "minLength", "maxLength", "patternProperties", "unevaluatedProperties",
    "propertyNames", "minProperties", "maxProperties", "unevaluatedItems", "contains",
    "minContains", "maxContains", "uniqueItems", "allOf", "oneOf", "not", "if", "then",
    "else", "dependentRequired", "dependentSchemas",
}  # fmt: skip
ANTHROPIC_NOT_IN_SUBSET = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "maxItems", "uniqueItems", "contains", "minContains",
    "maxContains",
}  # fmt: skip


def _schemas(node: Any, path: str = "$") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every subschema of ``node`` (a schema), with its path."""
    if not isinstance(node, Mapping):
        return
    yield path, node
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        for name, sub in (node.get(key) or {}).items():
            yield from _schemas(sub, f"{path}.{key}.{name}")
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        yield from _schemas(node.get(key), f"{path}.{key}")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            yield from _schemas(sub, f"{path}.{key}[{i}]")


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    assert ref.startswith("#"), f"$ref {ref!r} is not local to the schema"
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, Mapping), f"$ref {ref!r} does not resolve"
        assert part in node, f"$ref {ref!r} does not resolve"
        node = node[part]
    return node


def _common(schema: Mapping[str, Any], unsupported: set[str]) -> None:
    for path, node in _schemas(schema):
        found = unsupported & set(node)
        assert not found, f"{path}: {sorted(found)} are outside the provider's subset"
        if "$ref" in node:
            _resolve(schema, node["$ref"])
        if node.get("type") == "object" or "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: object not closed"


def assert_fits_openai(json_schema: Mapping[str, Any]) -> None:
    """``response_format.json_schema`` as OpenAI documents it; strict mode's rules when
    it says ``strict: true``."""
    assert isinstance(json_schema.get("name"), str)
    schema = json_schema["schema"]
    if json_schema.get("strict") is not True:
        for _, node in _schemas(schema):
            if "$ref" in node:
                _resolve(schema, node["$ref"])
        return
    assert schema.get("type") == "object", "the root must be an object"
    _common(schema, OPENAI_NOT_IN_SUBSET)
    for path, node in _schemas(schema):
        if isinstance(node.get("properties"), Mapping):
            missing = set(node["properties"]) - set(node.get("required") or [])
            assert not missing, f"{path}: {sorted(missing)} not required (strict mode)"


def assert_fits_anthropic(schema: Mapping[str, Any]) -> None:
    """``output_config.format.schema`` as Anthropic documents it."""
    _common(schema, ANTHROPIC_NOT_IN_SUBSET)
    for path, node in _schemas(schema):
        assert node.get("minItems", 0) in (0, 1), f"{path}: minItems above 1"


def schema_refs(node: Any) -> list[str]:
    """Every ``$ref`` in ``node``, in document order."""
    if isinstance(node, Mapping):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in schema_refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in schema_refs(value)]
    return []
