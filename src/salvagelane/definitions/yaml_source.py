"""Reading definition and context files: YAML 1.2 core-schema scalars, safely.

Only ``true`` and ``false`` are booleans (so ``on:`` is a key, not ``True``), dates
stay strings, and there are no sexagesimal, octal or infinite numbers. Duplicate
keys, non-JSON tags and recursive aliases are errors.

A document is measured before it is built: its nesting, its values and the bytes of
its strings and keys with every alias expanded (an alias counts as a copy of what it
names). An alias bomb (one large string anchored once and aliased thousands of times)
is a small file whose expansion is gigabytes: it is refused here, from the parser's
events, before anything composes, serialises or hashes it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
import yaml.events
import yaml.nodes

from salvagelane.definitions.problems import PathParts, format_path, received

MAX_NODES = 200_000  # values in one YAML document once aliases are expanded
MAX_EXPANDED_BYTES = 4 * 1024 * 1024  # a definition's strings and keys, aliases expanded
MAX_NESTING = 128  # levels of lists and mappings in one document
_SHOWN_DEPTH = 6  # path parts named when a document nests too deeply


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

# libyaml when PyYAML was built with it: its parser and composer are C, an order of
# magnitude faster than PyYAML's own, which matters for a 1 MiB file of aliases. Its
# composer recurses in C, so the nesting is measured (in Python, from events) first.
_BaseLoader: Any = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


class _CoreSchemaLoader(_BaseLoader):  # type: ignore[misc]
    """PyYAML's safe loader, resolving plain scalars as YAML 1.2's core schema does."""

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


class YamlProblem(Exception):
    def __init__(self, message: str, line: int | None, path: PathParts | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path

    def describe(self) -> str:
        """``path: message`` when the problem is at a known path."""
        return self.message if self.path is None else f"{format_path(self.path)}: {self.message}"


def byte_size_text(limit: int) -> str:
    """``4194304 bytes (4 MiB)``: a limit as people and greps read it."""
    return f"{limit} bytes ({limit / (1024 * 1024):g} MiB)"


def parse_yaml(
    text: str, *, max_bytes: int = MAX_EXPANDED_BYTES
) -> tuple[Any, dict[PathParts, int]]:
    """The document and, for every field path, the line it is written on.

    Raises YamlProblem for syntax errors, duplicate keys, non-string keys, tags that
    are not JSON types, recursive aliases, infinite numbers, and documents nested more
    than MAX_NESTING levels, with more than MAX_NODES values or more than ``max_bytes``
    bytes of strings and keys once aliases are expanded.
    """
    try:
        _measure(text, max_bytes)
        loader = _CoreSchemaLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            lines: dict[PathParts, int] = {}
            _check_nodes(loader, node, (), lines, set(), set())
            try:
                return loader.construct_document(node), lines
            # PyYAML's constructors index and convert what an explicit tag claims
            # (``!!int ""``, ``!!bool maybe``, an integer with more digits than Python
            # converts): their errors are the document's.
            except (ValueError, LookupError, TypeError, OverflowError) as exc:
                problem = " ".join(str(exc).split())[:200]
                raise YamlProblem(f"expected a usable value, got {problem}", None) from exc
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise YamlProblem(
            f"expected valid YAML, got a syntax error: {exc.problem or exc.context}", line
        ) from exc
    except yaml.YAMLError as exc:
        raise YamlProblem(f"expected valid YAML, got {exc}", None) from exc
    except RecursionError as exc:
        raise YamlProblem("expected a document nested less deeply", None) from exc


# --- Measuring the document from its events --------------------------------------------------

_EXPECT_KEY: Any = object()  # a mapping's next child is a key


@dataclass(slots=True)
class _Open:
    """A list or mapping whose end event has not come yet."""

    path: PathParts
    anchor: str | None
    mapping: bool
    bytes: int = 0  # its strings and keys, aliases expanded
    values: int = 1  # itself and its values (not keys), aliases expanded
    index: int = 0  # a list: the next item's index
    key: Any = _EXPECT_KEY  # a mapping: the key of the value that comes next


def _measure(text: str, max_bytes: int) -> None:
    """Refuse (YamlProblem) a document too deep, too many values or too many bytes once
    aliases are expanded; computed from the parser's events, each anchored node measured
    once, so a bomb costs what its file costs."""
    try:
        _measure_events(_CoreSchemaLoader(text), max_bytes)
    except yaml.YAMLError:
        if _BaseLoader is yaml.SafeLoader:
            raise
        # libyaml refuses some documents before their events reach the budget: since
        # PyYAML 6.0.4 its scanner stops at 1,000 levels of flow nesting, a whole line
        # ahead of the parser. PyYAML's own parser streams any depth, so the budget
        # names what is wrong and where; a document within it keeps libyaml's error.
        _measure_events(yaml.SafeLoader(text), max_bytes)
        raise


def _measure_events(parser: Any, max_bytes: int) -> None:
    try:
        stack: list[_Open] = []
        anchored: dict[str, tuple[int, int]] = {}  # anchor: (bytes, values) of what it names
        total_bytes = total_values = 0
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.events.CollectionEndEvent):
                done = stack.pop()
                if done.anchor is not None:
                    anchored[done.anchor] = (done.bytes, done.values)
                if stack:
                    _finish_child(stack[-1], done.bytes, done.values, "?")
                continue
            if not isinstance(event, yaml.events.NodeEvent):
                continue  # stream and document boundaries
            line = event.start_mark.line + 1 if event.start_mark else None
            parent = stack[-1] if stack else None
            is_key = parent is not None and parent.mapping and parent.key is _EXPECT_KEY
            where = _child_path(parent)
            if isinstance(event, yaml.events.CollectionStartEvent):
                if len(stack) >= MAX_NESTING:
                    raise YamlProblem(
                        f"expected at most {MAX_NESTING} levels of nesting, got more",
                        line,
                        where[:_SHOWN_DEPTH],
                    )
                stack.append(
                    _Open(
                        path=where,
                        anchor=event.anchor,
                        mapping=isinstance(event, yaml.events.MappingStartEvent),
                    )
                )
                total_values += 0 if is_key else 1
            else:
                if isinstance(event, yaml.events.AliasEvent):
                    if any(frame.anchor == event.anchor for frame in stack):
                        raise YamlProblem("expected no recursive alias", line, where)
                    # An undefined alias is the composer's error to report.
                    size, values = anchored.get(str(event.anchor), (0, 1))
                else:
                    assert isinstance(event, yaml.events.ScalarEvent)
                    size = len(event.value.encode("utf-8", "surrogatepass"))
                    values = 1
                    if event.anchor is not None:
                        anchored[event.anchor] = (size, values)
                total_bytes += size
                total_values += 0 if is_key else values
                if parent is not None:
                    key = event.value if isinstance(event, yaml.events.ScalarEvent) else "?"
                    _finish_child(parent, size, 0 if is_key else values, key)
            container = parent.path if parent is not None else ()
            if total_bytes > max_bytes:
                raise YamlProblem(
                    f"expected at most {byte_size_text(max_bytes)} of text once aliases "
                    "are expanded, got more (an alias counts as a copy of what it names)",
                    line,
                    container,
                )
            if total_values > MAX_NODES:
                raise YamlProblem(
                    f"expected at most {MAX_NODES} values once aliases are expanded, got more",
                    line,
                    container,
                )
    finally:
        parser.dispose()


def _child_path(parent: _Open | None) -> PathParts:
    if parent is None:
        return ()
    if not parent.mapping:
        return (*parent.path, parent.index)
    if parent.key is _EXPECT_KEY:
        return parent.path  # a key is reported at its mapping
    return (*parent.path, str(parent.key))


def _finish_child(parent: _Open, size: int, values: int, key: str) -> None:
    """Count a complete child into ``parent`` and move past it."""
    parent.bytes += size
    parent.values += values
    if not parent.mapping:
        parent.index += 1
    elif parent.key is _EXPECT_KEY:
        parent.key = key
    else:
        parent.key = _EXPECT_KEY


# --- Checking the composed nodes -------------------------------------------------------------


def _check_nodes(
    loader: Any,
    node: yaml.nodes.Node,
    path: PathParts,
    lines: dict[PathParts, int],
    ancestors: set[int],
    checked: set[int],
) -> None:
    """Validate ``node`` and everything under it, each node once."""
    line = node.start_mark.line + 1
    lines.setdefault(path, line)
    if id(node) in checked:
        return
    if id(node) in ancestors:
        raise YamlProblem("expected no recursive alias", line, path)
    if node.tag not in _JSON_TAGS:
        raise YamlProblem(
            "expected a JSON value (string, number, true/false, null, list or mapping), "
            f"got a value tagged {node.tag}",
            line,
            path,
        )
    if isinstance(node, yaml.nodes.ScalarNode):
        _check_scalar(loader, node, line, path)
    ancestors.add(id(node))
    if isinstance(node, yaml.nodes.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                _check_nodes(loader, value_node, path, lines, ancestors, checked)
                continue
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.nodes.ScalarNode) or key_node.tag != _STR_TAG:
                shown = key_node.value if isinstance(key_node, yaml.nodes.ScalarNode) else "?"
                raise YamlProblem(
                    f"expected string keys, got the key {shown} (quote it)",
                    key_line,
                    path,
                )
            key = str(key_node.value)
            if key in first:
                raise YamlProblem(
                    "expected each key once in a mapping, "
                    f"got a duplicate key {json.dumps(key)} (first at line {first[key]})",
                    key_line,
                    (*path, key),
                )
            first[key] = key_line
            lines.setdefault((*path, key), key_line)
            _check_nodes(loader, value_node, (*path, key), lines, ancestors, checked)
    elif isinstance(node, yaml.nodes.SequenceNode):
        for index, item in enumerate(node.value):
            _check_nodes(loader, item, (*path, index), lines, ancestors, checked)
    ancestors.discard(id(node))
    checked.add(id(node))


def _check_scalar(loader: Any, node: yaml.nodes.ScalarNode, line: int, path: PathParts) -> None:
    """A scalar's value is what its tag says: what an explicit tag (``!!int ""``, ``!!bool
    maybe``) claims is converted by PyYAML without a question, and 1e999 is infinite."""
    if node.tag == _BOOL_TAG and str(node.value).lower() not in loader.bool_values:
        raise YamlProblem(f"expected true or false, got {received(node.value)}", line, path)
    if node.tag == _INT_TAG:
        try:
            loader.construct_yaml_int(node)
        except (ValueError, LookupError) as exc:
            raise YamlProblem(
                "expected an integer of at most 4300 digits, got " + received(node.value),
                line,
                path,
            ) from exc
    if node.tag == _FLOAT_TAG:
        try:
            number = loader.construct_yaml_float(node)
        except (ValueError, LookupError) as exc:
            raise YamlProblem(f"expected a number, got {received(node.value)}", line, path) from exc
        if not math.isfinite(number):
            raise YamlProblem("expected a finite number", line, path)


def read_text(path: Path, cap: int) -> str:
    """File contents; OSError and UnicodeDecodeError are left to the caller."""
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"larger than {cap} bytes")
    return data.decode("utf-8")
