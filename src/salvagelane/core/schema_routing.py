"""Which validator decides an item schema: jsonschema-rs (fast) or ``jsonschema`` alone.

The verdict comes from jsonschema-rs and the explanation from ``jsonschema``, so the two
must agree on every instance. The JSON Schema Test Suite (draft 2020-12) shows where
they do not; each such place is listed here, and a schema that touches one is validated
by ``jsonschema`` alone. The decision is made once, when the schema is loaded, from the
schema's keywords: never per instance (docs/adr/0010-fast-verdict-reference-explanation.md).

Formats are one set of predicates for both validators: jsonschema-rs's, which pass the
suite's format tests where several of ``jsonschema``'s own checkers do not. The
reference then explains a format failure with the same verdict the fast one gave.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache, partial
from typing import Any

import jsonschema
import jsonschema_rs

FORMATS_CHECKED: tuple[str, ...] = (
    "date",
    "date-time",
    "duration",
    "email",
    "hostname",
    "idn-email",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "json-pointer",
    "regex",
    "relative-json-pointer",
    "time",
    "uri",
    "uri-reference",
    "uri-template",
    "uuid",
)
"""The formats the item-schema layer asserts: those ``jsonschema`` checks with the
format libraries salvagelane depends on. Any other format is an annotation only."""

_FORMATS_NOT_CHECKED = ("iri", "iri-reference")
"""Formats jsonschema-rs knows but ``jsonschema`` does not check here (rfc3987 is not a
dependency): the fast validator must not assert them either."""

_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

# Keywords whose meaning differs between the two validators, with the reason shown to
# whoever asks why a schema is validated by jsonschema alone.
_TWO_REGEX_DIALECTS = (
    "its regular expressions are read two ways: Python's re by jsonschema, ECMA-262 "
    "by jsonschema-rs ($ before a final newline, \\d \\w \\s on non-ASCII text)"
)
REFERENCE_ONLY_KEYWORDS: Mapping[str, str] = {
    "patternProperties": _TWO_REGEX_DIALECTS,
    "dependencies": (
        "it uses the draft-07 keyword dependencies, which jsonschema ignores in a "
        "draft 2020-12 schema and jsonschema-rs enforces"
    ),
}

# A `pattern` both validators read alike, but for jsonschema-rs being stricter at the
# edges: literal characters, escaped ASCII punctuation, classes of literals and ranges,
# groups, alternation, quantifiers with a lower bound, `^`, `$` and `.`. Python's `$`
# also matches before a final newline and its `.` before \r or U+2028, where
# ECMA-262's do not; no construct here matches anything in jsonschema-rs that Python's
# re does not match. Classes such as \d \w \s, their negations and \b are left out:
# there the two differ both ways.
_SAFE_PATTERN = re.compile(
    r"(?:\\[-.\\/+*?()\[\]{}|^$]"
    r"|\[\^?(?:\\[-.\\/\]\[^]|[^\\\[\]])+\]"
    r"|\(\?:|\((?!\?)|[)|]"
    r"|\{[0-9]+(?:,[0-9]*)?\}\??"
    r"|[*+?]\??"
    r"|[\^$.]"
    r"|[^\\\[\](){}|^$.*+?])*+"
)
# Python reads these inside a class as (future) set operations.
_SET_OPERATION = re.compile(r"\[[^\]]*(?:--|&&|\|\||~~)")
# Where a stricter `pattern` could make a schema more lenient: under negation, a
# condition, exactly-one, counting, or annotations of what was evaluated.
_NOT_MONOTONE = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "oneOf",
        "contains",
        "minContains",
        "maxContains",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
_PATTERN_STRICTER = (
    "its pattern {pattern!r} uses a construct the two validators read differently "
    "(\\d \\w \\s, \\b, an escape, a lookaround or flag); only literals, "
    "classes of literals, groups, alternation, quantifiers, ^ $ and . are read alike"
)


def pattern_reads_alike(pattern: str) -> bool:
    """Whether jsonschema-rs matches ``pattern`` only where Python's re does too (the
    constructs of ``_SAFE_PATTERN``); its "valid" is then the reference's."""
    return bool(_SAFE_PATTERN.fullmatch(pattern)) and not _SET_OPERATION.search(pattern)


# Keywords whose value is a map from names to subschemas: the names are not keywords.
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
# Keywords whose value is data or names, never a subschema.
_NOT_SCHEMAS = frozenset(
    {"const", "enum", "examples", "default", "required", "dependentRequired", "type"}
)


def _accept(_: object) -> bool:
    return True


@cache
def _format_predicate(name: str) -> Callable[[object], bool]:
    return jsonschema_rs.Draft202012Validator(
        {"format": name}, validate_formats=True, offline=True
    ).is_valid


def _check_format(name: str, instance: object) -> bool:
    return _format_predicate(name)(instance)


@cache
def format_checker() -> jsonschema.FormatChecker:
    """The reference's format checker, asking jsonschema-rs's predicate for each format.

    Each predicate is compiled on first use: building all 17 costs 5 ms at start-up.
    """
    checker = jsonschema.FormatChecker(formats=())
    for name in FORMATS_CHECKED:
        checker.checks(name)(partial(_check_format, name))
    return checker


def subschemas(schema: Any, pointer: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object in a schema position, with its JSON pointer, the root first.

    Unknown keywords' objects count as schemas: a ``$ref`` may point into them.
    """
    stack: list[tuple[str, Any]] = [(pointer, schema)]
    while stack:
        where, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        yield where, node
        for key, value in node.items():
            at = f"{where}/{key}"
            if key in _NOT_SCHEMAS:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, Mapping):
                stack.extend((f"{at}/{name}", sub) for name, sub in value.items())
            elif isinstance(value, Mapping):
                stack.append((at, value))
            elif isinstance(value, list):
                stack.extend((f"{at}/{i}", sub) for i, sub in enumerate(value))


def reference_only_reason(documents: Sequence[Mapping[str, Any]]) -> str:
    """Why these schemas must be validated by jsonschema alone, or "" when they need not.

    A ``pattern`` both read alike leaves jsonschema-rs the verdict: where it refuses an
    instance the reference accepts (a final newline before ``$``), the reference is asked
    and its verdict stands (``ItemSchema.check``). That holds only where a stricter
    pattern makes the whole schema stricter, so not under ``_NOT_MONOTONE`` keywords.
    """
    patterns: list[str] = []
    not_monotone = ""
    for document in documents:
        for where, node in subschemas(document):
            dialect = node.get("$schema", _DRAFT_2020_12)
            if isinstance(dialect, str) and dialect.rstrip("#") != _DRAFT_2020_12:
                return (
                    f"at {where or '/'}: it declares $schema {dialect!r}; agreement between "
                    "the validators is proven for draft 2020-12 only"
                )
            for keyword, reason in REFERENCE_ONLY_KEYWORDS.items():
                if keyword in node:
                    return f"at {where or '/'}/{keyword}: {reason}"
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                if not pattern_reads_alike(pattern):
                    return f"at {where or '/'}/pattern: " + _PATTERN_STRICTER.format(
                        pattern=pattern
                    )
                patterns.append(where or "/")
            found = _NOT_MONOTONE.intersection(node)
            if found and not not_monotone:
                not_monotone = f"{where or '/'}/{sorted(found)[0]}"
    if patterns and not_monotone:
        return (
            f"at {patterns[0]}/pattern: with {not_monotone} in the schema, jsonschema-rs's "
            "stricter reading of a pattern could make the schema more lenient"
        )
    return ""


def fast_validator(
    schema: Mapping[str, Any], resources: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[Any, str]:
    """jsonschema-rs's validator for ``schema``, or None and the reason it cannot be used.

    ``resources`` are the bundled schemas by URI; nothing else is ever fetched.
    """
    reason = reference_only_reason([schema, *(contents for _, contents in resources)])
    if reason:
        return None, reason
    try:
        validator = compile_fast(schema, resources)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"jsonschema-rs cannot compile it: {first_line}"
    return validator, ""


# Where a list validator finds the item schema: a URI no schema can fetch or name by
# accident, and a base against which the schema's own relative references resolve.
_ITEM_URI = "https://salvagelane.invalid/item.schema.json"


def batch_validator(
    schema: Mapping[str, Any], resources: Sequence[tuple[str, Mapping[str, Any]]]
) -> Any:
    """jsonschema-rs for a list of items, each validated against ``schema``; None when
    jsonschema-rs cannot compile it so.

    One call over all the items of a valid report costs less than one call per item.
    The item schema is its own resource, referenced from the list's ``items``: inlined,
    its ``#`` references would resolve against the list's schema. The JSON Schema Test
    Suite proves its verdict on a one-item list is the item's, test by test.
    """
    wrapper = {"$schema": _DRAFT_2020_12, "type": "array", "items": {"$ref": _ITEM_URI}}
    try:
        return compile_fast(wrapper, [(_ITEM_URI, schema), *resources])
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError):
        return None


def compile_fast(
    schema: Mapping[str, Any], resources: Sequence[tuple[str, Mapping[str, Any]]] = ()
) -> Any:
    """jsonschema-rs configured as salvagelane uses it, whatever the routing would say.

    Offline (a ``$ref`` outside the bundle is an error, never a fetch), formats asserted
    for the same set as the reference, unknown formats ignored. Raises what jsonschema-rs
    raises for a schema it cannot compile.
    """
    overrides: dict[str, Callable[[object], bool]] = dict.fromkeys(_FORMATS_NOT_CHECKED, _accept)
    bundle = [(uri, dict(contents)) for uri, contents in resources]
    registry = jsonschema_rs.Registry(bundle) if bundle else None
    return jsonschema_rs.validator_for(
        dict(schema),
        formats=overrides,
        validate_formats=True,
        ignore_unknown_formats=True,
        registry=registry,
        offline=True,
    )
