"""Normalise ambiguous scalars to the type the schema asks for, and say so.

Code provides structure, the model provides values: ``"5"`` where the schema
wants an integer is unambiguous, so it becomes 5 with a recorded coercion.
Nothing is coerced where the schema also accepts a string, where it offers a
choice of shapes (``anyOf``/``oneOf``), or where the text is not exactly a
value of the target type. Every coercion travels with the accepted item.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from salvagelane.core.records import Coercion, JSONValue
from salvagelane.core.strict import member_path

_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_NUMBER = re.compile(
    r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?"
)
_TRUE = frozenset({"true", "yes"})
_FALSE = frozenset({"false", "no"})
_NULL = frozenset({"null", "n/a", "none"})


def coerce(data: JSONValue, schema: Mapping[str, Any]) -> tuple[JSONValue, tuple[Coercion, ...]]:
    """Return ``data`` with ambiguous scalars normalised, and the coercions made.

    ``data`` must be freshly parsed: containers are updated in place.
    """
    coercions: list[Coercion] = []
    root: list[JSONValue] = [data]
    # Each entry: the container holding the value, its key, the value's schema, its path.
    stack: list[tuple[Any, Any, Mapping[str, Any], str]] = [(root, 0, schema, "$")]
    while stack:
        holder, key, node_schema, path = stack.pop()
        node_schema = _resolve(node_schema, schema)
        value = holder[key]
        if isinstance(value, str):
            converted = _convert(value, _types(node_schema))
            if converted is not None:
                new_value, rule = converted
                holder[key] = new_value
                coercions.append(Coercion(path=path, original=value, value=new_value, rule=rule))
        elif isinstance(value, dict):
            properties = node_schema.get("properties")
            if isinstance(properties, Mapping):
                for name, sub in properties.items():
                    if name in value and isinstance(sub, Mapping):
                        stack.append((value, name, sub, member_path(path, name)))
        elif isinstance(value, list):
            items = node_schema.get("items")
            if isinstance(items, Mapping):
                stack.extend((value, i, items, f"{path}[{i}]") for i in range(len(value)))
    coercions.sort(key=lambda c: c.path)
    return root[0], tuple(coercions)


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow local ``$ref``s (``#/$defs/...``); anything else is left as it is."""
    for _ in range(16):  # a bound, not a depth: local refs can form cycles
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return node
            target = target[part]
        if not isinstance(target, Mapping):
            return node
        node = target
    return node


def _types(node: Mapping[str, Any]) -> tuple[str, ...]:
    declared = node.get("type")
    if isinstance(declared, str):
        return (declared,)
    if isinstance(declared, list):
        return tuple(t for t in declared if isinstance(t, str))
    return ()


def _convert(text: str, types: tuple[str, ...]) -> tuple[JSONValue, str] | None:
    if not types or "string" in types:
        return None
    word = text.strip().lower()
    if "integer" in types and _INTEGER.fullmatch(text.strip()):
        return int(text.strip()), "string_to_integer"
    if "number" in types and _NUMBER.fullmatch(text.strip()):
        number = float(text.strip())
        if math.isfinite(number):
            if number.is_integer() and _INTEGER.fullmatch(text.strip()):
                return int(text.strip()), "string_to_number"
            return number, "string_to_number"
    if "boolean" in types and (word in _TRUE or word in _FALSE):
        return word in _TRUE, "string_to_boolean"
    if "null" in types and word in _NULL:
        return None, "string_to_null"
    return None
