"""Normalise ambiguous scalars to the type the schema asks for, and say so.

Code provides structure, the model provides values: ``"5"`` where the schema
wants an integer is unambiguous, so it becomes 5 with a recorded coercion.
Nothing is coerced where the schema also accepts the original (a string where a
string is allowed), where it offers a choice of shapes (``anyOf``/``oneOf``), or
where the text is not exactly a value of the target type. Every coercion travels
with the accepted item. The rules:

- ``string_to_integer``, ``string_to_number``: ``"5"``, ``" -2.5 "``, ``"1e3"``;
- ``string_to_boolean``: ``true``/``false``, ``yes``/``no``, ``on``/``off``, ``1``/``0``;
- ``string_to_null``: ``null``, ``none``, ``n/a`` and ``""``;
- ``string_to_array``: a string where an array of strings belongs, split at commas
  (``"a.com, b.com"``) or, with none, at whitespace (``"a.com b.com"``);
- ``date_to_iso8601``, ``datetime_to_rfc3339``: a date with one reading where
  ``format: date`` or ``date-time`` asks for ISO 8601 (``core.dates``). A date with two
  readings (``11/12/2025``), or a date-time without a zone, is a refusal: the item is
  rejected with a signal that says why, never guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from salvagelane.core.dates import Ambiguous, read_date, read_date_time
from salvagelane.core.records import Coercion, CorrectionSignal, JSONValue, SignalCode
from salvagelane.core.strict import describe, member_path

_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_NUMBER = re.compile(
    r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?"
)
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_NULL = frozenset({"null", "n/a", "none", ""})
_DATE_READERS = {
    "date": (read_date, "date_to_iso8601", "a date as YYYY-MM-DD (ISO 8601)"),
    "date-time": (
        read_date_time,
        "datetime_to_rfc3339",
        "a date-time with its time zone, as YYYY-MM-DDTHH:MM:SSZ (RFC 3339)",
    ),
}


def coerce(
    data: JSONValue, schema: Mapping[str, Any]
) -> tuple[JSONValue, tuple[Coercion, ...], CorrectionSignal | None]:
    """Return ``data`` with ambiguous scalars normalised, the coercions made, and the
    signal of the first value refused for having more than one reading (or None).

    ``data`` must be freshly parsed: containers are updated in place.
    """
    coercions: list[Coercion] = []
    refused: list[CorrectionSignal] = []
    root: list[JSONValue] = [data]
    # Each entry: the container holding the value, its key, the value's schema, its path.
    stack: list[tuple[Any, Any, Mapping[str, Any], str]] = [(root, 0, schema, "$")]
    while stack:
        holder, key, node_schema, path = stack.pop()
        node_schema = _resolve(node_schema, schema)
        value = holder[key]
        if isinstance(value, str):
            types = _types(node_schema)
            converted = (
                _convert(value, types)
                or _split(value, types, node_schema, schema)
                or _date(value, types, node_schema, path, refused)
            )
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
    refused.sort(key=lambda signal: signal.path)
    return root[0], tuple(coercions), refused[0] if refused else None


def _split(
    text: str, types: tuple[str, ...], node: Mapping[str, Any], root: Mapping[str, Any]
) -> tuple[JSONValue, str] | None:
    """A delimited string where only an array of strings is allowed: its parts."""
    if "array" not in types or "string" in types:
        return None
    items = node.get("items")
    if not isinstance(items, Mapping) or _types(_resolve(items, root)) != ("string",):
        return None
    parts = [part.strip() for part in text.split(",")] if "," in text else text.split()
    if not parts or any(not part for part in parts):
        return None  # "" or "a,,b": no single reading
    return list(parts), "string_to_array"


def _date(
    text: str,
    types: tuple[str, ...],
    node: Mapping[str, Any],
    path: str,
    refused: list[CorrectionSignal],
) -> tuple[JSONValue, str] | None:
    """A date (or date-time) with one reading where ISO 8601 is asked for."""
    wanted = node.get("format")
    reader = _DATE_READERS.get(wanted) if isinstance(wanted, str) else None
    if reader is None or types != ("string",):
        return None
    read, rule, expected = reader
    found = read(text)
    if isinstance(found, Ambiguous):
        refused.append(
            CorrectionSignal(
                code=SignalCode.AMBIGUOUS,
                path=path,
                expected=expected,
                received=describe(text),
                detail=found.why,
            )
        )
        return None
    return None if found is None else (found, rule)


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow local ``$ref``s (``#/$defs/...``); anything else is left as it is."""
    if "$ref" not in node:
        return node  # the usual case, asked for every value
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
