"""The fields of a definition as ``schemas/instruction.schema.json`` declares them: their
paths, whether they are required, and their defaults.

The schema's ``default`` keywords are the one place a definition's defaults are written:
loading fills an absent field from here (:func:`field_default`), and the definition
reference (``scripts/definition_reference.py``) prints them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from salvagelane.definitions.validation import instruction_schema

CONTEXT_NAME = "<name>"  # the path part standing for any context name


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaField:
    """One field: ``path`` as ``guardrails.allow_lists[].field``, its subschema, and
    whether its parent requires it (a conditional requirement is only in the description)."""

    path: str
    schema: Mapping[str, Any]
    required: bool

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def schema_fields(schema: Mapping[str, Any] | None = None) -> Iterator[SchemaField]:
    """Every field of the instruction schema (or ``schema``), parents before children,
    in the schema's order. The ``not`` clauses of if/then/else are not fields."""
    yield from _fields(instruction_schema() if schema is None else schema, "")


def _fields(node: Mapping[str, Any], prefix: str) -> Iterator[SchemaField]:
    required = set(node.get("required", ()))
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        for name, child in properties.items():
            path = f"{prefix}.{name}" if prefix else name
            yield SchemaField(path=path, schema=child, required=name in required)
            yield from _children(child, path)
    values = node.get("additionalProperties")
    if isinstance(values, Mapping):
        path = f"{prefix}.{CONTEXT_NAME}"
        yield SchemaField(path=path, schema=values, required=False)
        yield from _children(values, path)


def _children(node: Mapping[str, Any], path: str) -> Iterator[SchemaField]:
    items = node.get("items")
    if node.get("type") == "array" and isinstance(items, Mapping):
        yield from _fields(items, f"{path}[]")
    else:
        yield from _fields(node, path)


@cache
def _defaults() -> Mapping[str, Any]:
    return {
        field.path: field.schema["default"]
        for field in schema_fields()
        if "default" in field.schema
    }


def field_default(path: str) -> Any:
    """The schema's ``default`` for the field at ``path`` (e.g. ``guardrails.max_depth``,
    ``sinks[].timeout_seconds``); KeyError for a field without one."""
    return copy.deepcopy(_defaults()[path])


def field_value(document: Mapping[str, Any], name: str, path: str) -> Any:
    """``document[name]``, or the default of the field at ``path`` when it is absent."""
    return document[name] if name in document else field_default(path)


def defaults() -> dict[str, Any]:
    """Every default the schema declares, by field path."""
    return copy.deepcopy(dict(_defaults()))
