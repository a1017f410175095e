"""Validation against ``schemas/instruction.schema.json``, with messages in words."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.exceptions

from salvagelane.definitions.problems import (
    PathParts,
    Problem,
    format_path,
    one_line,
    quoted,
    received,
)
from salvagelane.logs import redact_url
from salvagelane.policy_files import load_json_file

# --- The instruction schema ----------------------------------------------------------------


def _instruction_schema_path() -> Path:
    packaged = Path(__file__).parents[1] / "instruction.schema.json"  # in a built wheel
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "schemas" / "instruction.schema.json"


def instruction_schema() -> Mapping[str, Any]:
    """The instruction schema, as loaded (shared: never change it)."""
    return _instruction_schema()[0]


def notify_problem(entries: Any) -> str | None:
    """What is wrong with ``entries`` as a definition's ``notify`` list (the first
    problem, with its path), or None."""
    schema = instruction_schema()["properties"]["notify"]
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(entries), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
    return f"at {at or '(the whole list)'}: {first.message}"


@cache
def _instruction_schema() -> tuple[Mapping[str, Any], jsonschema.Draft202012Validator]:
    path = _instruction_schema_path()
    schema = load_json_file(path, what="instruction schema")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return schema, validator


_TYPE_NOUNS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "an empty value",
}

_PATTERN_NOUNS = {
    "^[a-z0-9][a-z0-9-]{0,62}$": "a slug of lower-case letters, digits and hyphens, "
    "at most 63 characters (^[a-z0-9][a-z0-9-]{0,62}$)",
    "^\\S+( +\\S+){4,5}$": "a cron expression of 5 fields (minute hour day-of-month month "
    "day-of-week) or 6 with seconds first",
    "^https?://": "an http:// or https:// URL",
    "^[A-Z_][A-Z0-9_]*$": "the NAME of an environment variable (^[A-Z_][A-Z0-9_]*$), "
    "never the key itself",
    "^[a-z][a-z0-9_]*$": "a request field name such as max_tokens or max_completion_tokens",
    "^(?:[^.]+(?:\\.[^.]+)*)?$": "a dotted key path such as recommendations or data.items, "
    "without empty keys",
    "^[^.\\s]+(?:\\.[^.\\s]+)*$": "a dotted field path such as candidate or wsjf.score",
    "^[A-Za-z_][A-Za-z0-9_]*$": "a name of letters, digits and underscores, "
    "not starting with a digit",
    (
        "^[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*:"
        "[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*$"
    ): "a Python callable as module:function, e.g. salvagelane.context_sources:today",
}


def _expectation(schema: Any) -> str:
    """What a (sub)schema asks for, in words."""
    if not isinstance(schema, Mapping):
        return "a value"
    if "enum" in schema:
        return "one of " + quoted(schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type")
    noun = _TYPE_NOUNS.get(kind, "a value") if isinstance(kind, str) else "a value"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        return _PATTERN_NOUNS.get(pattern, f"{noun} matching {pattern}")
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    if low is not None:
        return f"{noun} of at least {low}"
    if above is not None:
        return f"{noun} greater than {above}"
    if kind == "string" and schema.get("minLength"):
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            return f"a non-empty string such as {quoted(examples[:2])}"
        return "a non-empty string"
    if kind == "array":
        items = schema.get("items")
        if schema.get("minItems"):
            noun = f"a non-empty list of {_expectation(items)}"
        elif isinstance(items, Mapping) and "enum" in items:
            noun = f"a list of {_expectation(items)}"
        if schema.get("uniqueItems"):
            noun += ", each at most once"
    return noun


def _schema_at(path: PathParts) -> Any:
    """The instruction schema's subschema for an instance path."""
    node: Any = _instruction_schema()[0]
    for part in path:
        if not isinstance(node, Mapping):
            return None
        if isinstance(part, int):
            node = node.get("items")
        else:
            properties = node.get("properties", {})
            node = properties.get(part, node.get("additionalProperties"))
    return node


def _schema_problems(error: jsonschema.exceptions.ValidationError) -> list[Problem]:
    path: PathParts = tuple(error.absolute_path)
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    instance = error.instance
    value: Any = error.validator_value
    # A field that names a variable may have been given the secret itself.
    secret = bool(path) and path[-1] in ("api_key_env", "token_env", "base_url_env", "url_env")
    if path and path[-1] in ("base_url", "url") and isinstance(instance, str):
        # A URL may carry credentials: quoted without userinfo and query string.
        instance = redact_url(instance)
    got = received(instance, secret=secret)
    if "propertyNames" in error.relative_schema_path:
        key = str(instance)
        return [Problem((*path, key), f"expected {_expectation(schema)}, got the name {got}")]
    if keyword == "required" and isinstance(instance, Mapping):
        problems = []
        for name in value:
            if name in instance:
                continue
            # A conditional clause (then/else) says why the field is needed in that case.
            conditional = {"then", "else"} & set(map(str, error.relative_schema_path))
            why = schema.get("description") if conditional else None
            because = f": {why}" if isinstance(why, str) else " field"
            problems.append(
                Problem(
                    (*path, name),
                    f"expected {_expectation(_schema_at((*path, name)))} "
                    f"(required{because}), got nothing",
                )
            )
        return problems
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        known = list(schema.get("properties", {}))
        problems = []
        for name in instance:
            if name in known:
                continue
            hint = ""
            close = difflib.get_close_matches(str(name), known, n=1)
            if re.search(r"key|token|secret|password", str(name), re.IGNORECASE):
                hint = (
                    " (secrets never go in a definition: name the environment variable "
                    "holding the key in connector.api_key_env)"
                )
            elif close:
                hint = f" (did you mean {json.dumps(close[0])}?)"
            problems.append(
                Problem(
                    (*path, name),
                    f"expected one of the fields {', '.join(known)}, "
                    f"got the unknown field {json.dumps(str(name))}{hint}",
                )
            )
        return problems
    if keyword == "oneOf" and isinstance(instance, Mapping):
        choices = [
            branch["required"][0]
            for branch in value
            if isinstance(branch, Mapping) and branch.get("required")
        ]
        present = [name for name in choices if name in instance]
        if not present:
            given = "none of them"
        else:
            given = " and ".join(json.dumps(name) for name in present)
        return [Problem(path, f"expected exactly one of {quoted(choices)}, got {given}")]
    if keyword == "oneOf":
        return []  # not a mapping: the type error says so
    if keyword == "dependentRequired" and isinstance(instance, Mapping):
        problems = []
        for name, needs in value.items():
            missing = [n for n in needs if name in instance and n not in instance]
            if missing:
                problems.append(
                    Problem(
                        (*path, name),
                        f"expected {quoted(missing)} alongside {json.dumps(name)}, "
                        f"got no {quoted(missing)}",
                    )
                )
        return problems
    if keyword == "not" and isinstance(value, Mapping) and "const" in value:
        why = schema.get("description")
        because = f" ({why})" if isinstance(why, str) else ""
        refused = json.dumps(value["const"])  # the instance is that value: short
        return [Problem(path, f"expected anything but {refused}{because}, got {refused}")]
    if keyword == "contains":
        needed = _expectation(value) if isinstance(value, Mapping) else str(value)
        trail = [str(part) for part in error.relative_schema_path]
        cause = ""
        if "dependentSchemas" in trail and trail.index("dependentSchemas") + 1 < len(trail):
            other = trail[trail.index("dependentSchemas") + 1]
            cause = f" (because {format_path((*path[:-1], other))} is given)"
        return [Problem(path, f"expected a list holding {needed}{cause}, got {got}")]
    if keyword == "not":
        why = schema.get("description", "not allowed here")
        return [Problem(path, f"expected no such field ({why}), got {got}")]
    if keyword == "uniqueItems" and isinstance(instance, list):
        seen: list[Any] = []
        repeated: Any = None
        for entry in instance:
            if entry in seen:
                repeated = entry
                break
            seen.append(entry)
        return [Problem(path, f"expected each entry at most once, got {received(repeated)} again")]
    if keyword == "type":
        expected = _TYPE_NOUNS.get(value, str(value))
        return [Problem(path, f"expected {expected}, got {got}")]
    if keyword in (
        "enum",
        "const",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "minLength",
        "minItems",
    ):
        return [Problem(path, f"expected {_expectation(schema)}, got {got}")]
    return [Problem(path, one_line(error.message))]


def validate(document: Any) -> list[Problem]:
    _, validator = _instruction_schema()
    if document is None:
        return [Problem((), "expected a mapping of definition fields, got an empty document")]
    problems: dict[PathParts, Problem] = {}
    for error in validator.iter_errors(document):
        for problem in _schema_problems(error):
            problems.setdefault(problem.path, problem)  # the first word on a field is enough
    return list(problems.values())
