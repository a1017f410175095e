"""The structured-output hint: the report's schema in the form each provider accepts.

A definition's envelope schema usually ``$ref``s its item schema by ``$id`` and declares
its own ``maxItems``; no provider resolves an external reference, and the definition's
item cap is the one that counts. :func:`report_hint_schema` bundles every reference
into the document's ``$defs`` and sets the items' ``maxItems`` to the cap. Each provider
then takes the subset of JSON Schema it documents:

- OpenAI (``json_schema``): ``strict: true`` only when every object is closed
  (``additionalProperties: false``) and requires every property; otherwise the hint is
  advisory (``strict: false``), and :attr:`SchemaHint.not_strict` says why.
- Anthropic (``output_config.format``): always enforced, every object must be closed;
  a schema with an open object is not sent at all.

Keywords a provider documents as unsupported are left out of the hint, never out of
validation (salvage checks the whole schema), and :attr:`SchemaHint.left_out` lists them.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from salvagelane.errors import SchemaError

# Annotations and identifiers no provider needs; `$id` and `$schema` inside a bundled
# resource would also change how its relative references resolve.
_DROPPED = frozenset({"$id", "$schema", "$comment", "$anchor", "examples"})

# Keywords outside both providers' documented subsets: conditionals, negation, property
# name and count rules, and the array keywords beyond items and a size.
_NEITHER = frozenset(
    {
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "prefixItems",
    }
)
# OpenAI, "Supported schemas" (structured outputs): no string lengths, no allOf.
OPENAI_UNSUPPORTED = _NEITHER | {"minLength", "maxLength", "allOf"}
# Anthropic, "JSON Schema limitations" (structured outputs): no numeric or string-length
# constraints, no array constraint but minItems 0 or 1 (minItems is clamped below).
ANTHROPIC_UNSUPPORTED = _NEITHER | {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
}
# Keywords whose value is a schema, or a map or list of schemas: walked, never dropped
# for their name alone.
_SCHEMA_VALUED = frozenset(
    {"items", "additionalProperties", "contains", "not", "if", "then", "else", "propertyNames"}
)
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaHint:
    """A provider's hint: the schema sent, whether the provider enforces it, and what
    was left out of it."""

    provider: str
    schema: Mapping[str, Any]
    strict: bool
    left_out: tuple[str, ...] = ()  # "$.properties.summary.maxLength", one per keyword
    not_strict: tuple[str, ...] = ()  # why strict is off (OpenAI) or nothing is sent

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "strict": self.strict,
            "left_out": list(self.left_out),
            "not_strict": list(self.not_strict),
        }


def report_hint_schema(
    envelope: Mapping[str, Any],
    *,
    resources: Iterable[Mapping[str, Any]],
    items_path: tuple[str, ...],
    max_items: int,
) -> dict[str, Any]:
    """The report's schema with every ``$ref`` bundled into ``$defs`` and the items
    array capped at ``max_items``. Raises SchemaError for a reference it cannot bundle."""
    by_id = {str(r["$id"]): r for r in resources if isinstance(r.get("$id"), str)}
    root_id = envelope.get("$id") if isinstance(envelope.get("$id"), str) else None
    defs: dict[str, Any] = {}
    names: dict[str, str] = {}

    def bundled(uri: str) -> str:
        if uri not in names:
            stem = re.sub(r"[^A-Za-z0-9_-]+", "-", uri.rsplit(":", 1)[-1].rsplit("/", 1)[-1])
            name = stem or "schema"
            while name in defs or name in names.values():
                name += "_"
            names[uri] = name
            defs[name] = {}  # reserved before the walk: a resource may refer to itself
            defs[name] = rewrite(by_id[uri], f"#/$defs/{name}")
        return names[uri]

    def rewrite(node: Any, base: str) -> Any:
        if isinstance(node, list):
            return [rewrite(item, base) for item in node]
        if not isinstance(node, Mapping):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key == "$ref" and isinstance(value, str):
                out[key] = _local_ref(value, base, root_id, by_id, bundled)
            else:
                out[key] = rewrite(value, base)
        return out

    schema: dict[str, Any] = rewrite(envelope, "#")
    if defs:
        schema["$defs"] = {**schema.get("$defs", {}), **defs}
    _cap_items(schema, items_path, max_items)
    return schema


def _local_ref(
    ref: str,
    base: str,
    root_id: str | None,
    by_id: Mapping[str, Mapping[str, Any]],
    bundled: Any,
) -> str:
    uri, _, fragment = ref.partition("#")
    if fragment and not fragment.startswith("/"):
        raise SchemaError(f"$ref {ref!r}: an anchor cannot be bundled into a provider hint")
    if not uri or uri == root_id:
        return (base if uri == "" else "#") + fragment
    if uri in by_id:
        return f"#/$defs/{bundled(uri)}" + fragment
    raise SchemaError(
        f"$ref {ref!r}: expected a reference to the report's own schema or the item "
        "schema's $id; no provider resolves other documents"
    )


def _cap_items(schema: dict[str, Any], items_path: tuple[str, ...], max_items: int) -> None:
    node: Any = schema
    for key in items_path:
        properties = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(properties, dict) or not isinstance(properties.get(key), dict):
            return
        node = properties[key]
    if isinstance(node, dict):
        current = node.get("maxItems")
        node["maxItems"] = max_items if not isinstance(current, int) else min(current, max_items)


def openai_hint(schema: Mapping[str, Any]) -> SchemaHint:
    """OpenAI's hint: unsupported keywords left out; strict when the subset holds."""
    left_out: list[str] = []
    sent = _without(schema, OPENAI_UNSUPPORTED, "$", left_out)
    problems = _open_objects(sent, "$", require_all=True)
    if sent.get("type") != "object":
        problems.insert(0, "$: the root must be an object")
    return SchemaHint(
        provider="openai",
        schema=sent,
        strict=not problems,
        left_out=tuple(left_out),
        not_strict=tuple(problems),
    )


def anthropic_hint(schema: Mapping[str, Any]) -> SchemaHint | None:
    """Anthropic's hint, or None when the schema has an open object (it would refuse it)."""
    left_out: list[str] = []
    sent = _without(schema, ANTHROPIC_UNSUPPORTED, "$", left_out)
    _clamp_min_items(sent, "$", left_out)
    problems = _open_objects(sent, "$", require_all=False)
    hint = SchemaHint(
        provider="anthropic",
        schema=sent,
        strict=not problems,
        left_out=tuple(left_out),
        not_strict=tuple(problems),
    )
    return hint if hint.strict else None


def provider_hint(kind: str, schema: Mapping[str, Any]) -> SchemaHint | None:
    """The hint a connector of ``kind`` sends for ``schema``; None when it sends none."""
    if kind == "openai":
        return openai_hint(schema)
    if kind == "anthropic":
        return anthropic_hint(schema)
    return None


def hint_record(kind: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """What an attempt records of its hint: whether one was sent, and whether enforced."""
    hint = None if schema is None else provider_hint(kind, schema)
    if hint is None:
        why = "structured_output is off" if schema is None else f"{kind} takes no hint"
        if schema is not None and kind == "anthropic":
            why = "the schema has an open object, which Anthropic refuses"
        return {"sent": False, "strict": False, "why_not": why}
    return {"sent": True, **hint.to_json()}


def describe_hint(hint: SchemaHint) -> list[str]:
    """Lines for ``check``: why a hint is not strict and what it leaves out."""
    lines = [f"{hint.provider} hint is advisory, not strict: {why}" for why in hint.not_strict]
    if hint.left_out:
        shown = ", ".join(hint.left_out[:8])
        more = f" and {len(hint.left_out) - 8} more" if len(hint.left_out) > 8 else ""
        lines.append(
            f"{hint.provider} hint leaves out keywords it does not support (salvage still "
            f"checks them): {shown}{more}"
        )
    return lines


def _without(
    node: Mapping[str, Any], unsupported: frozenset[str], path: str, left_out: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in unsupported:
            left_out.append(where)
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {
                name: _without(sub, unsupported, f"{where}.{name}", left_out)
                if isinstance(sub, Mapping)
                else sub
                for name, sub in value.items()
            }
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [
                _without(sub, unsupported, f"{where}[{i}]", left_out)
                if isinstance(sub, Mapping)
                else sub
                for i, sub in enumerate(value)
            ]
        elif key in _SCHEMA_VALUED and isinstance(value, Mapping):
            out[key] = _without(value, unsupported, where, left_out)
        else:
            out[key] = value
    return out


def _clamp_min_items(node: dict[str, Any], path: str, left_out: list[str]) -> None:
    for key, value in list(node.items()):
        if key == "minItems" and isinstance(value, int) and value > 1:
            del node[key]
            left_out.append(f"{path}.minItems")
        elif isinstance(value, dict):
            if key in _SCHEMA_MAPS:
                for name, sub in value.items():
                    if isinstance(sub, dict):
                        _clamp_min_items(sub, f"{path}.{key}.{name}", left_out)
            else:
                _clamp_min_items(value, f"{path}.{key}", left_out)
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, dict):
                    _clamp_min_items(sub, f"{path}.{key}[{i}]", left_out)


def _open_objects(node: Mapping[str, Any], path: str, *, require_all: bool) -> list[str]:
    """Where an object schema is not closed, or (``require_all``) leaves a property
    optional."""
    problems: list[str] = []
    properties = node.get("properties")
    if node.get("type") == "object" or isinstance(properties, Mapping):
        if node.get("additionalProperties") is not False:
            problems.append(f"{path}: an object without additionalProperties: false")
        if require_all and isinstance(properties, Mapping):
            required = node.get("required")
            listed = set(required) if isinstance(required, list) else set()
            optional = [name for name in properties if name not in listed]
            if optional:
                problems.append(f"{path}: properties not required: {', '.join(optional)}")
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            for name, sub in value.items():
                if isinstance(sub, Mapping):
                    problems += _open_objects(sub, f"{where}.{name}", require_all=require_all)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, Mapping):
                    problems += _open_objects(sub, f"{where}[{i}]", require_all=require_all)
        elif key in _SCHEMA_VALUED and isinstance(value, Mapping):
            problems += _open_objects(value, where, require_all=require_all)
    return problems
