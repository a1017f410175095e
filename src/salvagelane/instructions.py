"""Instruction definitions (``instructions/*.yaml``): load, validate, resolve, render.

The I/O shell around a definition. Loading parses the YAML safely, validates it
against ``schemas/instruction.schema.json`` and checks every cross-reference
(schema files, allow-list files, context names, cron, time zone, template
variables) so that a broken definition fails here, with a message naming the
file, the field path and what was expected, never in the middle of a run.

YAML is read with the scalars of YAML 1.2's core schema: only ``true`` and
``false`` are booleans (so ``on:`` is a key, not ``True``), dates stay strings,
and there are no sexagesimal, octal or infinite numbers. Duplicate keys are
errors. Relative paths in a definition are resolved against its directory.
"""

from __future__ import annotations

import copy
import difflib
import enum
import hashlib
import importlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
import jinja2.meta
import jinja2.sandbox
import jsonschema
import jsonschema.exceptions
import yaml
import yaml.nodes

from salvagelane.core import Guardrails, ItemSchema, SalvagePolicy, parse_items_path
from salvagelane.errors import ConfigurationError, DefinitionError
from salvagelane.loading import load_allow_list, load_json_file

__all__ = [
    "AllowListSource",
    "Connector",
    "ConnectorKind",
    "ContextSource",
    "GuardrailSpec",
    "Instruction",
    "OutputSpec",
    "PromptTemplates",
    "RenderedPrompt",
    "RetryOn",
    "RetryPolicy",
    "Schedule",
    "check_instruction",
    "cron_problem",
    "definition_files",
    "duplicate_id_check",
    "load_instruction",
    "load_instructions",
    "output_contract",
    "render_prompt",
    "resolve_allow_lists",
    "resolve_context",
]

UNCERTAINTY_SENTENCE = "If uncertain, emit fewer well-formed items rather than more."

_MAX_DEFINITION_BYTES = 1024 * 1024
_MAX_CONTEXT_FILE_BYTES = 16 * 1024 * 1024
_MAX_NODES = 200_000  # values in one YAML document once aliases are expanded
_MAX_DEPTH = 100  # nesting of context data
_MAX_PROBLEMS = 3  # problems spelled out in one message
_RECEIVED_CHARS = 80


# --- The definition, as loaded -------------------------------------------------------------


class ConnectorKind(enum.StrEnum):
    """The wire format of a connector."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    REPLAY = "replay"


class RetryOn(enum.StrEnum):
    """Outcomes of an attempt that may trigger another one."""

    NOTHING_SALVAGED = "nothing_salvaged"
    TRUNCATED = "truncated"
    PROVIDER_ERROR = "provider_error"


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """When the scheduler runs the instruction."""

    cron: str
    timezone: str
    misfire_grace_seconds: int = 3600
    deadline_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Connector:
    """The LLM endpoint. ``api_key_env`` names the key's environment variable; it is read
    only when a call is made."""

    kind: ConnectorKind
    model: str
    max_output_tokens: int
    temperature: float
    timeout_seconds: float
    structured_output: bool
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens_field: str | None = None
    fixture: Path | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptTemplates:
    """The Jinja2 sources of the prompt."""

    system: str
    user: str


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputSpec:
    """The report the model must return, with its schemas compiled."""

    envelope_schema_path: Path
    item_schema_path: Path
    items_path: tuple[str, ...]
    rank_key: str
    envelope_schema: ItemSchema
    item_schema: ItemSchema

    @property
    def items_path_text(self) -> str:
        return ".".join(self.items_path)


@dataclass(frozen=True, kw_only=True, slots=True)
class AllowListSource:
    """One allow-list: a field and exactly one of inline values, a file or a context name."""

    field: str
    values: tuple[str, ...] | None = None
    file: Path | None = None
    context: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardrailSpec:
    """The guardrails of a definition; allow-lists are resolved per run."""

    max_items: int
    max_depth: int
    max_string_length: int
    max_output_bytes: int
    coerce: bool
    allow_lists: tuple[AllowListSource, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextSource:
    """Where one context value comes from."""

    name: str
    kind: Literal["value", "file", "callable"]
    value: Any = None
    file: Path | None = None
    callable: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often, and after which outcomes, a run asks again."""

    attempts: int
    on: tuple[RetryOn, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Instruction:
    """A validated instruction definition.

    ``definition`` is the document as written; ``definition_sha256`` is the SHA-256
    of its canonical JSON (sorted keys, no whitespace), which identifies the version
    a run used. Comments and layout do not change it; referenced files are hashed
    separately (``output.item_schema.sha256``).
    """

    id: str
    description: str
    schedule: Schedule
    connector: Connector
    prompt: PromptTemplates
    output: OutputSpec
    guardrails: GuardrailSpec
    context: Mapping[str, ContextSource]
    retry: RetryPolicy
    source: Path
    definition: Mapping[str, Any]
    definition_sha256: str

    def salvage_policy(self, allow_lists: Mapping[str, frozenset[str]]) -> SalvagePolicy:
        """The core's policy for this instruction, with allow-lists from
        :func:`resolve_allow_lists`."""
        limits = self.guardrails
        return SalvagePolicy(
            items_path=self.output.items_path,
            item_schema=self.output.item_schema,
            guardrails=Guardrails(
                max_bytes=limits.max_output_bytes,
                max_depth=limits.max_depth,
                max_string_length=limits.max_string_length,
                max_items=limits.max_items,
                rank_key=self.output.rank_key,
                allow_lists=dict(allow_lists),
                coerce=limits.coerce,
            ),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderedPrompt:
    """The prompt as sent: the system prompt ends with the output contract."""

    system: str
    user: str


# --- Problems and their messages -----------------------------------------------------------

PathParts = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True, slots=True)
class _Problem:
    path: PathParts
    message: str  # "expected ..., got ..."


def _format_path(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text or "(top level)"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _raise(
    source: str,
    problems: Sequence[_Problem],
    lines: Mapping[PathParts, int] | None = None,
) -> None:
    if not problems:
        return
    shown = []
    for problem in problems[:_MAX_PROBLEMS]:
        line = _line_of(lines or {}, problem.path)
        where = f" (line {line})" if line else ""
        shown.append(f"{_format_path(problem.path)}: {_one_line(problem.message)}{where}")
    if len(problems) > _MAX_PROBLEMS:
        shown.append(f"and {len(problems) - _MAX_PROBLEMS} more")
    raise DefinitionError(
        f"{source}: " + "; ".join(shown),
        source=source,
        paths=tuple(_format_path(p.path) for p in problems),
    )


def _in_document_order(problems: list[_Problem], lines: Mapping[PathParts, int]) -> list[_Problem]:
    return sorted(problems, key=lambda problem: _line_of(lines, problem.path) or 0)


def _line_of(lines: Mapping[PathParts, int], path: PathParts) -> int | None:
    while True:
        if path in lines:
            return lines[path]
        if not path:
            return None
        path = path[:-1]


def _received(value: Any, *, secret: bool = False) -> str:
    if secret:
        return "a value that is not a variable name (not shown: it may be a secret)"
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if len(value) > _RECEIVED_CHARS:
            return json.dumps(value[:_RECEIVED_CHARS], ensure_ascii=False)[:-1] + '..."'
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _quoted(values: Iterable[Any]) -> str:
    return ", ".join(json.dumps(v, ensure_ascii=False) for v in values)


# --- YAML ----------------------------------------------------------------------------------

_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_JSON_TAGS = frozenset({_STR_TAG, _INT_TAG, _FLOAT_TAG, _BOOL_TAG, _NULL_TAG, _MAP_TAG, _SEQ_TAG})


class _CoreSchemaLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, resolving plain scalars as YAML 1.2's core schema does."""

    # PyYAML's class-level table, replaced (not extended) below.
    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012


_CORE_SCHEMA_RESOLVERS: tuple[tuple[str, str, Sequence[str]], ...] = (
    (_BOOL_TAG, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (_INT_TAG, r"^[-+]?(?:0|[1-9][0-9]*)$", "-+0123456789"),
    (
        _FLOAT_TAG,
        r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$|^[-+]?[0-9]+[eE][-+]?[0-9]+$",
        "-+0123456789.",
    ),
    (_NULL_TAG, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    (_MERGE_TAG, r"^(?:<<)$", ["<"]),
)
for _tag, _pattern, _first in _CORE_SCHEMA_RESOLVERS:
    _CoreSchemaLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


class _YamlProblem(Exception):
    def __init__(self, message: str, line: int | None, path: PathParts | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path

    def describe(self) -> str:
        """``path: message`` when the problem is at a known path."""
        return self.message if self.path is None else f"{_format_path(self.path)}: {self.message}"


def _parse_yaml(text: str) -> tuple[Any, dict[PathParts, int]]:
    """The document and, for every field path, the line it is written on.

    Raises _YamlProblem for syntax errors, duplicate keys, non-string keys, tags
    that are not JSON types, recursive aliases and alias bombs.
    """
    loader = _CoreSchemaLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise _YamlProblem(
                f"expected valid YAML, got a syntax error: {exc.problem or exc.context}", line
            ) from exc
        except yaml.YAMLError as exc:
            raise _YamlProblem(f"expected valid YAML, got {exc}", None) from exc
        if node is None:
            return None, {}
        lines: dict[PathParts, int] = {}
        _check_nodes(node, (), lines, set(), {})
        try:
            return loader.construct_document(node), lines
        except yaml.YAMLError as exc:
            raise _YamlProblem(f"expected valid YAML, got {exc}", None) from exc
        except ValueError as exc:  # e.g. an integer with more digits than Python converts
            raise _YamlProblem(f"expected a usable value, got {exc}", None) from exc
    except RecursionError as exc:
        raise _YamlProblem("expected a document nested less deeply", None) from exc
    finally:
        loader.dispose()


def _check_nodes(
    node: yaml.nodes.Node,
    path: PathParts,
    lines: dict[PathParts, int],
    ancestors: set[int],
    sizes: dict[int, int],
) -> int:
    """Validate ``node`` and everything under it; return its size with aliases expanded."""
    line = node.start_mark.line + 1
    lines.setdefault(path, line)
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in ancestors:
        raise _YamlProblem("expected no recursive alias", line, path)
    if node.tag not in _JSON_TAGS:
        raise _YamlProblem(
            "expected a JSON value (string, number, true/false, null, list or mapping), "
            f"got a value tagged {node.tag}",
            line,
            path,
        )
    size = 1
    if node.tag == _FLOAT_TAG and isinstance(node, yaml.nodes.ScalarNode):
        text = str(node.value).lower()
        if "inf" in text or "nan" in text:
            raise _YamlProblem("expected a finite number", line, path)
    ancestors.add(id(node))
    if isinstance(node, yaml.nodes.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                size += _check_nodes(value_node, path, lines, ancestors, sizes)
                continue
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.nodes.ScalarNode) or key_node.tag != _STR_TAG:
                shown = key_node.value if isinstance(key_node, yaml.nodes.ScalarNode) else "?"
                raise _YamlProblem(
                    f"expected string keys, got the key {shown} (quote it)",
                    key_line,
                    path,
                )
            key = str(key_node.value)
            if key in first:
                raise _YamlProblem(
                    "expected each key once in a mapping, "
                    f"got a duplicate key {json.dumps(key)} (first at line {first[key]})",
                    key_line,
                    (*path, key),
                )
            first[key] = key_line
            lines.setdefault((*path, key), key_line)
            size += _check_nodes(value_node, (*path, key), lines, ancestors, sizes)
    elif isinstance(node, yaml.nodes.SequenceNode):
        for index, item in enumerate(node.value):
            size += _check_nodes(item, (*path, index), lines, ancestors, sizes)
    ancestors.discard(id(node))
    if size > _MAX_NODES:
        raise _YamlProblem(
            f"expected at most {_MAX_NODES} values once aliases are expanded, got more", line
        )
    sizes[id(node)] = size
    return size


def _read_text(path: Path, cap: int) -> str:
    """File contents; OSError and UnicodeDecodeError are left to the caller."""
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"larger than {cap} bytes")
    return data.decode("utf-8")


# --- The instruction schema ----------------------------------------------------------------


def _instruction_schema_path() -> Path:
    packaged = Path(__file__).with_name("instruction.schema.json")  # in a built wheel
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "schemas" / "instruction.schema.json"


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
    "^\\S+( +\\S+){4}$": "a cron expression of 5 fields: minute hour day-of-month month "
    "day-of-week",
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
        return "one of " + _quoted(schema["enum"])
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
            return f"a non-empty string such as {_quoted(examples[:2])}"
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


def _schema_problems(error: jsonschema.exceptions.ValidationError) -> list[_Problem]:
    path: PathParts = tuple(error.absolute_path)
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    instance = error.instance
    value: Any = error.validator_value
    secret = bool(path) and path[-1] == "api_key_env"
    got = _received(instance, secret=secret)
    if "propertyNames" in error.relative_schema_path:
        key = str(instance)
        return [_Problem((*path, key), f"expected {_expectation(schema)}, got the name {got}")]
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
                _Problem(
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
                _Problem(
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
        return [_Problem(path, f"expected exactly one of {_quoted(choices)}, got {given}")]
    if keyword == "oneOf":
        return []  # not a mapping: the type error says so
    if keyword == "dependentRequired" and isinstance(instance, Mapping):
        problems = []
        for name, needs in value.items():
            missing = [n for n in needs if name in instance and n not in instance]
            if missing:
                problems.append(
                    _Problem(
                        (*path, name),
                        f"expected {_quoted(missing)} alongside {json.dumps(name)}, "
                        f"got no {_quoted(missing)}",
                    )
                )
        return problems
    if keyword == "not":
        why = schema.get("description", "not allowed here")
        return [_Problem(path, f"expected no such field ({why}), got {got}")]
    if keyword == "uniqueItems" and isinstance(instance, list):
        seen: list[Any] = []
        repeated: Any = None
        for entry in instance:
            if entry in seen:
                repeated = entry
                break
            seen.append(entry)
        return [
            _Problem(path, f"expected each entry at most once, got {_received(repeated)} again")
        ]
    if keyword == "type":
        expected = _TYPE_NOUNS.get(value, str(value))
        return [_Problem(path, f"expected {expected}, got {got}")]
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
        return [_Problem(path, f"expected {_expectation(schema)}, got {got}")]
    return [_Problem(path, _one_line(error.message))]


def _validate(document: Any) -> list[_Problem]:
    _, validator = _instruction_schema()
    if document is None:
        return [_Problem((), "expected a mapping of definition fields, got an empty document")]
    problems: dict[PathParts, _Problem] = {}
    for error in validator.iter_errors(document):
        for problem in _schema_problems(error):
            problems.setdefault(problem.path, problem)  # the first word on a field is enough
    return list(problems.values())


# --- Cron and time zones ---------------------------------------------------------------------

_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
_CRON_PART = re.compile(
    r"^(?:(?P<star>\*)|(?P<low>[0-9]+|[a-zA-Z]{3})(?:-(?P<high>[0-9]+|[a-zA-Z]{3}))?)"
    r"(?:/(?P<step>[0-9]+))?$"
)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a usable 5-field cron expression, or None.

    Fields: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec,
    day-of-week 0-7 or sun-sat (0 and 7 are Sunday). Each comma-separated part is
    ``*``, ``N``, ``A-B``, ``*/S`` or ``A-B/S``.
    """
    fields = expression.split()
    if len(fields) != 5:
        return (
            "expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {json.dumps(expression)}"
        )
    expanded: list[set[int]] = []
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        values: set[int] = set()
        for part in text.split(","):
            match = _CRON_PART.match(part)
            if not match:
                return (
                    f"expected the {name} field to be *, N, A-B, */S or A-B/S (comma-separated), "
                    f"got {json.dumps(text)}"
                )
            if match["star"]:
                start, end = low, high
            else:
                try:
                    start = _cron_value(match["low"], low, names)
                    end = start if match["high"] is None else _cron_value(match["high"], low, names)
                except ValueError:
                    shown = "numbers" if not names else f"numbers or {names[0]}-{names[-1]}"
                    return f"expected {name} values as {shown}, got {json.dumps(part)}"
                for value in (start, end):
                    if not low <= value <= high:
                        return f"expected {name} values from {low} to {high}, got {value}"
                if start > end:
                    return f"expected a {name} range low-high, got {json.dumps(part)}"
            step = int(match["step"]) if match["step"] is not None else 1
            if match["step"] is not None and (match["star"] is None and match["high"] is None):
                return (
                    f"expected a step only after * or a range in the {name} field, "
                    f"got {json.dumps(part)}"
                )
            if not 1 <= step <= high - low + 1:
                return f"expected a {name} step from 1 to {high - low + 1}, got {step}"
            values.update(range(start, end + 1, step))
        expanded.append(values)
    days, months, weekdays = expanded[2], expanded[3], fields[4]
    if weekdays == "*" and not any(day <= _DAYS_IN_MONTH[m - 1] for day in days for m in months):
        return f"expected a schedule that can fire, got {json.dumps(expression)}, which never does"
    return None


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int:
    if text.isdigit():
        return int(text)
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    raise ValueError(text)


# --- Templates ---------------------------------------------------------------------------


@cache
def _template_environment() -> jinja2.sandbox.SandboxedEnvironment:
    return jinja2.sandbox.SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _template_problems(name: str, source: str, context_names: Iterable[str]) -> list[_Problem]:
    environment = _template_environment()
    path: PathParts = ("prompt", name)
    try:
        tree = environment.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return [
            _Problem(
                path,
                f"expected a valid Jinja2 template, got a syntax error at template line "
                f"{exc.lineno}: {exc.message}",
            )
        ]
    known = set(context_names) | set(environment.globals)
    unknown = sorted(jinja2.meta.find_undeclared_variables(tree) - known)
    if unknown:
        offered = ", ".join(sorted(context_names)) or "none"
        return [
            _Problem(
                path,
                f"expected only variables defined in context ({offered}), "
                f"got undefined {_quoted(unknown)}",
            )
        ]
    return []


def _template_line(traceback: TracebackType | None) -> int | None:
    line = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == "<template>":
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


# --- Loading ---------------------------------------------------------------------------------


def load_instruction(path: Path | str) -> Instruction:
    """Load, validate and cross-check one definition; DefinitionError when it is unusable."""
    path = Path(path)
    source = str(path)
    try:
        text = _read_text(path, _MAX_DEFINITION_BYTES)
    except OSError as exc:
        raise DefinitionError(
            f"{source}: expected a readable definition file, got {exc.strerror or exc}",
            source=source,
        ) from exc
    except UnicodeDecodeError as exc:
        raise DefinitionError(
            f"{source}: expected UTF-8 text, got a byte that is not UTF-8 at offset {exc.start}",
            source=source,
        ) from exc
    except ValueError as exc:
        raise DefinitionError(
            f"{source}: expected a definition file, got one {exc}", source=source
        ) from exc
    try:
        document, lines = _parse_yaml(text)
    except _YamlProblem as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise DefinitionError(
            f"{source}: {_one_line(exc.describe())}{where}",
            source=source,
            paths=() if exc.path is None else (_format_path(exc.path),),
        ) from exc
    _raise(source, _in_document_order(_validate(document), lines), lines)
    base = path.resolve().parent
    problems: list[_Problem] = []
    instruction = _build(document, path, base, problems)
    _raise(source, _in_document_order(problems, lines), lines)
    assert instruction is not None
    return instruction


def _build(
    document: Mapping[str, Any], path: Path, base: Path, problems: list[_Problem]
) -> Instruction | None:
    """The Instruction for a schema-valid document; cross-reference problems go to
    ``problems`` (and then nothing is returned)."""
    schedule_doc = document["schedule"]
    cron_error = cron_problem(schedule_doc["cron"])
    if cron_error:
        problems.append(_Problem(("schedule", "cron"), cron_error))
    timezone = schedule_doc["timezone"]
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(
            _Problem(
                ("schedule", "timezone"),
                f"expected an IANA time zone name such as UTC or Europe/Berlin, "
                f"got {_received(timezone)}",
            )
        )

    connector_doc = document["connector"]
    fixture = None
    if "fixture" in connector_doc:
        fixture = _existing_file(base, connector_doc["fixture"], ("connector", "fixture"), problems)

    output_doc = document["output"]
    item_schema, envelope_schema = _compile_schemas(base, output_doc, problems)
    items_path = parse_items_path(output_doc["items_path"])
    if envelope_schema is not None:
        _check_field_path(
            envelope_schema.schema, items_path, ("output", "items_path"), "envelope", problems
        )
    if item_schema is not None:
        rank_key = tuple(output_doc["rank_key"].split("."))
        _check_field_path(item_schema.schema, rank_key, ("output", "rank_key"), "item", problems)

    context = {
        name: _context_source(name, entry, base, problems)
        for name, entry in document["context"].items()
    }

    guardrails_doc = document["guardrails"]
    allow_lists = []
    for index, entry in enumerate(guardrails_doc["allow_lists"]):
        where: PathParts = ("guardrails", "allow_lists", index)
        if item_schema is not None:
            _check_field_path(
                item_schema.schema,
                tuple(entry["field"].split(".")),
                (*where, "field"),
                "item",
                problems,
            )
        file = None
        if "file" in entry:
            file = _existing_file(base, entry["file"], (*where, "file"), problems)
            if file is not None:
                try:
                    load_allow_list(file)
                except ConfigurationError as exc:
                    problems.append(_Problem((*where, "file"), f"expected an allow-list: {exc}"))
        if "context" in entry and entry["context"] not in context:
            offered = ", ".join(context) or "none"
            problems.append(
                _Problem(
                    (*where, "context"),
                    f"expected the name of a context entry ({offered}), "
                    f"got {_received(entry['context'])}",
                )
            )
        allow_lists.append(
            AllowListSource(
                field=entry["field"],
                values=tuple(entry["values"]) if "values" in entry else None,
                file=file,
                context=entry.get("context"),
            )
        )

    prompt_doc = document["prompt"]
    for name in ("system", "user"):
        problems.extend(_template_problems(name, prompt_doc[name], context))

    if problems or item_schema is None or envelope_schema is None:
        return None
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return Instruction(
        id=document["id"],
        description=document["description"],
        schedule=Schedule(
            cron=schedule_doc["cron"],
            timezone=timezone,
            misfire_grace_seconds=schedule_doc.get("misfire_grace_seconds", 3600),
            deadline_seconds=schedule_doc.get("deadline_seconds"),
        ),
        connector=Connector(
            kind=ConnectorKind(connector_doc["kind"]),
            model=connector_doc["model"],
            max_output_tokens=connector_doc["max_output_tokens"],
            temperature=float(connector_doc["temperature"]),
            timeout_seconds=float(connector_doc["timeout_seconds"]),
            structured_output=connector_doc["structured_output"],
            base_url=connector_doc.get("base_url"),
            api_key_env=connector_doc.get("api_key_env"),
            max_tokens_field=connector_doc.get("max_tokens_field"),
            fixture=fixture,
        ),
        prompt=PromptTemplates(system=prompt_doc["system"], user=prompt_doc["user"]),
        output=OutputSpec(
            envelope_schema_path=(base / output_doc["envelope_schema"]).resolve(),
            item_schema_path=(base / output_doc["item_schema"]).resolve(),
            items_path=items_path,
            rank_key=output_doc["rank_key"],
            envelope_schema=envelope_schema,
            item_schema=item_schema,
        ),
        guardrails=GuardrailSpec(
            max_items=guardrails_doc["max_items"],
            max_depth=guardrails_doc["max_depth"],
            max_string_length=guardrails_doc["max_string_length"],
            max_output_bytes=guardrails_doc["max_output_bytes"],
            coerce=guardrails_doc["coerce"],
            allow_lists=tuple(allow_lists),
        ),
        context=MappingProxyType(context),
        retry=RetryPolicy(
            attempts=document["retry"]["attempts"],
            on=tuple(RetryOn(value) for value in document["retry"]["on"]),
        ),
        source=path,
        definition=MappingProxyType(dict(document)),
        definition_sha256=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    )


def _existing_file(
    base: Path, relative: str, where: PathParts, problems: list[_Problem]
) -> Path | None:
    resolved = (base / relative).resolve()
    if not resolved.is_file():
        problems.append(
            _Problem(
                where,
                f"expected an existing file (relative to the definition's directory), "
                f"got {_received(relative)}: no such file {resolved}",
            )
        )
        return None
    return resolved


def _compile_schemas(
    base: Path, output: Mapping[str, Any], problems: list[_Problem]
) -> tuple[ItemSchema | None, ItemSchema | None]:
    """The compiled item and envelope schemas; the envelope may $ref the item by its $id."""
    item_path = _existing_file(base, output["item_schema"], ("output", "item_schema"), problems)
    envelope_path = _existing_file(
        base, output["envelope_schema"], ("output", "envelope_schema"), problems
    )
    item_schema = envelope_schema = None
    item_document: Any = None
    if item_path is not None:
        try:
            item_document = load_json_file(item_path, what="schema")
            item_schema = ItemSchema.compile(item_document, source=output["item_schema"])
        except ConfigurationError as exc:
            problems.append(
                _Problem(("output", "item_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    if envelope_path is not None and item_path is not None and item_schema is not None:
        # Compiled only with a usable item schema: the envelope usually $refs it.
        bundled = (
            [item_document]
            if isinstance(item_document, Mapping) and isinstance(item_document.get("$id"), str)
            else []
        )
        try:
            envelope_schema = ItemSchema.compile(
                load_json_file(envelope_path, what="schema"),
                source=output["envelope_schema"],
                resources=bundled,
            )
        except ConfigurationError as exc:
            problems.append(
                _Problem(("output", "envelope_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    return item_schema, envelope_schema


def _check_field_path(
    schema: Mapping[str, Any],
    parts: Sequence[str],
    where: PathParts,
    what: str,
    problems: list[_Problem],
) -> None:
    """Flag a field path the schema provably forbids (closed ``properties``); stop at
    anything the check cannot follow ($ref, combinators)."""
    node: Any = schema
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping) or node.get("additionalProperties") is not False:
            return
        properties = node.get("properties")
        if not isinstance(properties, Mapping) or any(
            key in node for key in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties")
        ):
            return
        if part not in properties:
            dotted = ".".join(parts[: depth + 1])
            problems.append(
                _Problem(
                    where,
                    f"expected a field of the {what} schema ({', '.join(properties)}), "
                    f"got {json.dumps(dotted)}",
                )
            )
            return
        node = properties[part]


def _context_source(
    name: str, entry: Mapping[str, Any], base: Path, problems: list[_Problem]
) -> ContextSource:
    if "file" in entry:
        file = _existing_file(base, entry["file"], ("context", name, "file"), problems)
        if file is not None and file.suffix.lower() not in (".json", ".yaml", ".yml"):
            problems.append(
                _Problem(
                    ("context", name, "file"),
                    f"expected a .json, .yaml or .yml file, got {_received(entry['file'])}",
                )
            )
        return ContextSource(name=name, kind="file", file=file or (base / entry["file"]).resolve())
    if "callable" in entry:
        return ContextSource(
            name=name,
            kind="callable",
            callable=entry["callable"],
            args=MappingProxyType(dict(entry.get("args", {}))),
        )
    return ContextSource(name=name, kind="value", value=entry["value"])


def definition_files(directory: Path | str) -> list[Path]:
    """The ``*.yaml`` and ``*.yml`` files directly in ``directory``, sorted by name.

    ConfigurationError (not DefinitionError) when the directory does not exist.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigurationError(
            f"{directory}: no such directory (expected a directory of instruction definitions)"
        )
    try:
        entries = list(directory.iterdir())
    except OSError as exc:
        raise ConfigurationError(f"{directory}: cannot list: {exc.strerror or exc}") from exc
    return sorted(
        entry
        for entry in entries
        if entry.suffix in (".yaml", ".yml") and not entry.name.startswith(".") and entry.is_file()
    )


def load_instructions(directory: Path | str) -> list[Instruction]:
    """Every definition in ``directory``; the first broken one raises DefinitionError,
    and so does an id used twice."""
    instructions: list[Instruction] = []
    seen: dict[str, Path] = {}
    for path in definition_files(directory):
        instruction = load_instruction(path)
        duplicate_id_check(instruction, seen)
        instructions.append(instruction)
    return instructions


def duplicate_id_check(instruction: Instruction, seen: dict[str, Path]) -> None:
    """Raise DefinitionError when another definition in ``seen`` has the same id; else
    record this one."""
    if instruction.id in seen:
        source = str(instruction.source)
        raise DefinitionError(
            f"{source}: id: expected an id no other definition uses, got "
            f"{json.dumps(instruction.id)}, which {seen[instruction.id]} uses too",
            source=source,
            paths=("id",),
        )
    seen[instruction.id] = instruction.source


# --- Context ---------------------------------------------------------------------------------


def resolve_context(instruction: Instruction) -> dict[str, Any]:
    """The context values by name: inline values, file contents and callables' results.

    Every value is JSON-compatible (callables' tuples become lists). A file that
    cannot be read or parsed, a callable that cannot be imported, raises or returns
    something that is not JSON data raises DefinitionError naming the entry.
    """
    values: dict[str, Any] = {}
    for name, entry in instruction.context.items():
        if entry.kind == "value":
            values[name] = copy.deepcopy(entry.value)
        elif entry.kind == "file":
            assert entry.file is not None
            values[name] = _context_file(instruction, name, entry.file)
        else:
            assert entry.callable is not None
            values[name] = _context_call(instruction, name, entry.callable, entry.args)
    return values


def _fail(instruction: Instruction, path: PathParts, message: str) -> DefinitionError:
    source = str(instruction.source)
    return DefinitionError(
        f"{source}: {_format_path(path)}: {_one_line(message)}",
        source=source,
        paths=(_format_path(path),),
    )


def _context_file(instruction: Instruction, name: str, file: Path) -> Any:
    where: PathParts = ("context", name, "file")
    shown = instruction.definition["context"][name]["file"]
    try:
        text = _read_text(file, _MAX_CONTEXT_FILE_BYTES)
    except OSError as exc:
        raise _fail(
            instruction, where, f"expected a readable file, got {shown}: {exc.strerror or exc}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise _fail(
            instruction, where, f"expected UTF-8 text in {shown}, got a bad byte at {exc.start}"
        ) from exc
    except ValueError as exc:
        raise _fail(instruction, where, f"expected a context file, got {shown}: {exc}") from exc
    if file.suffix.lower() == ".json":
        try:
            return json.loads(
                text, object_pairs_hook=_unique_json_object, parse_constant=_no_constant
            )
        except ValueError as exc:
            raise _fail(instruction, where, f"expected valid JSON in {shown}, got: {exc}") from exc
    try:
        value, _ = _parse_yaml(text)
    except _YamlProblem as exc:
        at = f" at line {exc.line}" if exc.line else ""
        raise _fail(
            instruction, where, f"expected valid context data in {shown}{at}: {exc.describe()}"
        ) from exc
    return value


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {json.dumps(key)}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _context_call(instruction: Instruction, name: str, target: str, args: Mapping[str, Any]) -> Any:
    where: PathParts = ("context", name, "callable")
    module_name, _, qualname = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise _fail(
            instruction,
            where,
            f"expected an importable module, got {json.dumps(module_name)} "
            f"({type(exc).__name__}: {exc})",
        ) from exc
    for attribute in qualname.split("."):
        if not hasattr(found, attribute):
            raise _fail(
                instruction,
                where,
                f"expected {json.dumps(target)} to name a callable, "
                f"got no attribute {json.dumps(attribute)}",
            )
        found = getattr(found, attribute)
    if not callable(found):
        raise _fail(
            instruction,
            where,
            f"expected {json.dumps(target)} to be callable, got a {type(found).__name__}",
        )
    function: Callable[..., Any] = found
    try:
        result = function(**copy.deepcopy(dict(args)))
    except Exception as exc:
        raise _fail(
            instruction,
            ("context", name),
            f"expected {target}(**args) to return the value, got {type(exc).__name__}: {exc}",
        ) from exc
    try:
        return _json_data(result, "$", 0, [0])
    except _NotJson as exc:
        raise _fail(
            instruction,
            ("context", name),
            f"expected {target} to return JSON data (strings, finite numbers, true/false, "
            f"null, lists, mappings with string keys), got {exc}",
        ) from exc


class _NotJson(Exception):
    pass


def _json_data(value: Any, where: str, depth: int, budget: list[int]) -> Any:
    """A JSON-compatible copy of ``value`` (tuples become lists); _NotJson otherwise."""
    budget[0] += 1
    if budget[0] > _MAX_NODES:
        raise _NotJson(f"more than {_MAX_NODES} values")
    if depth > _MAX_DEPTH:
        raise _NotJson(f"more than {_MAX_DEPTH} levels of nesting at {where}")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"{value} at {where}")
        return value
    if isinstance(value, list | tuple):
        return [_json_data(v, f"{where}[{i}]", depth + 1, budget) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJson(f"the key {key!r} at {where}")
            result[key] = _json_data(item, f"{where}.{key}", depth + 1, budget)
        return result
    raise _NotJson(f"a {type(value).__name__} at {where}")


# --- Allow-lists -----------------------------------------------------------------------------


def resolve_allow_lists(
    instruction: Instruction, context: Mapping[str, Any]
) -> dict[str, frozenset[str]]:
    """The allowed values per item field, from inline values, files and ``context``
    (as returned by :func:`resolve_context`). Sources for the same field are united."""
    lists: dict[str, frozenset[str]] = {}
    for index, spec in enumerate(instruction.guardrails.allow_lists):
        where: PathParts = ("guardrails", "allow_lists", index)
        if spec.values is not None:
            values = frozenset(spec.values)
        elif spec.file is not None:
            try:
                values = load_allow_list(spec.file)
            except ConfigurationError as exc:
                raise _fail(
                    instruction, (*where, "file"), f"expected an allow-list: {exc}"
                ) from exc
        else:
            assert spec.context is not None
            values = _context_allow_list(instruction, (*where, "context"), spec.context, context)
        lists[spec.field] = lists.get(spec.field, frozenset()) | values
    return lists


def _context_allow_list(
    instruction: Instruction, where: PathParts, name: str, context: Mapping[str, Any]
) -> frozenset[str]:
    if name not in context:
        raise _fail(instruction, where, f"expected a resolved context value {json.dumps(name)}")
    value = context[name]
    expected = (
        f"expected context value {json.dumps(name)} to be a non-empty list of strings "
        'or of mappings with a string "id"'
    )
    if not isinstance(value, list) or not value:
        raise _fail(instruction, where, f"{expected}, got {_received(value)}")
    values: set[str] = set()
    for index, entry in enumerate(value):
        if isinstance(entry, Mapping):
            entry = entry.get("id")
        if not isinstance(entry, str) or not entry:
            raise _fail(
                instruction, where, f"{expected}, got {_received(value[index])} at [{index}]"
            )
        values.add(entry)
    return frozenset(values)


# --- Prompt ----------------------------------------------------------------------------------


def output_contract(instruction: Instruction) -> str:
    """The text appended to the system prompt: what the reply must look like."""
    output = instruction.output
    cap = instruction.guardrails.max_items
    item_schema = json.dumps(output.item_schema.schema, indent=2, ensure_ascii=False)
    lines = ["Output contract:"]
    if output.items_path:
        envelope_schema = json.dumps(output.envelope_schema.schema, indent=2, ensure_ascii=False)
        lines += [
            "Reply with exactly one JSON object and nothing else: no text before or after it, "
            "no code fences.",
            "The reply must satisfy this JSON Schema:",
            envelope_schema,
            f'The items are the array at "{output.items_path_text}". '
            "Each item must satisfy this JSON Schema:",
        ]
    else:
        lines += [
            "Reply with exactly one JSON array of items and nothing else: no text before or "
            "after it, no code fences.",
            "Each item must satisfy this JSON Schema:",
        ]
    lines += [
        item_schema,
        f'Emit at most {cap} items, ranked by "{output.rank_key}", smallest first.',
        UNCERTAINTY_SENTENCE,
    ]
    return "\n".join(lines)


def render_prompt(instruction: Instruction, context: Mapping[str, Any]) -> RenderedPrompt:
    """Render both templates with ``context`` (sandboxed, strict undefined) and append
    the output contract to the system prompt. Template errors raise DefinitionError."""
    rendered: dict[str, str] = {}
    environment = _template_environment()
    for name in ("system", "user"):
        source = getattr(instruction.prompt, name)
        where: PathParts = ("prompt", name)
        try:
            rendered[name] = environment.from_string(source).render(dict(context))
        except jinja2.TemplateSyntaxError as exc:
            raise _fail(
                instruction,
                where,
                f"expected a valid Jinja2 template, got a syntax error at template line "
                f"{exc.lineno}: {exc.message}",
            ) from exc
        except jinja2.UndefinedError as exc:
            line = _template_line(exc.__traceback__)
            at = f" at template line {line}" if line else ""
            raise _fail(
                instruction,
                where,
                f"expected only defined variables and attributes, got{at}: {exc.message}",
            ) from exc
        except Exception as exc:
            line = _template_line(exc.__traceback__)
            at = f" at template line {line}" if line else ""
            raise _fail(
                instruction,
                where,
                f"expected a template that renders, got{at} {type(exc).__name__}: {exc}",
            ) from exc
    system = rendered["system"].rstrip() + "\n\n" + output_contract(instruction)
    return RenderedPrompt(system=system, user=rendered["user"])


def check_instruction(path: Path | str) -> Instruction:
    """Everything a run would do before calling the model: load the definition, resolve
    its context and allow-lists, render its prompt. DefinitionError on the first problem."""
    instruction = load_instruction(path)
    context = resolve_context(instruction)
    resolve_allow_lists(instruction, context)
    render_prompt(instruction, context)
    return instruction
