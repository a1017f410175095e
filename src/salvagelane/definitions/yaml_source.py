"""Reading definition and context files: YAML 1.2 core-schema scalars, safely.

Only ``true`` and ``false`` are booleans (so ``on:`` is a key, not ``True``), dates
stay strings, and there are no sexagesimal, octal or infinite numbers. Duplicate
keys, non-JSON tags, recursive aliases and alias bombs are errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
import yaml.nodes

from salvagelane.definitions.problems import PathParts, format_path

MAX_NODES = 200_000  # values in one YAML document once aliases are expanded


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


class YamlProblem(Exception):
    def __init__(self, message: str, line: int | None, path: PathParts | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path

    def describe(self) -> str:
        """``path: message`` when the problem is at a known path."""
        return self.message if self.path is None else f"{format_path(self.path)}: {self.message}"


def parse_yaml(text: str) -> tuple[Any, dict[PathParts, int]]:
    """The document and, for every field path, the line it is written on.

    Raises YamlProblem for syntax errors, duplicate keys, non-string keys, tags
    that are not JSON types, recursive aliases and alias bombs.
    """
    loader = _CoreSchemaLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise YamlProblem(
                f"expected valid YAML, got a syntax error: {exc.problem or exc.context}", line
            ) from exc
        except yaml.YAMLError as exc:
            raise YamlProblem(f"expected valid YAML, got {exc}", None) from exc
        if node is None:
            return None, {}
        lines: dict[PathParts, int] = {}
        _check_nodes(node, (), lines, set(), {})
        try:
            return loader.construct_document(node), lines
        except yaml.YAMLError as exc:
            raise YamlProblem(f"expected valid YAML, got {exc}", None) from exc
        except ValueError as exc:  # e.g. an integer with more digits than Python converts
            raise YamlProblem(f"expected a usable value, got {exc}", None) from exc
    except RecursionError as exc:
        raise YamlProblem("expected a document nested less deeply", None) from exc
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
        raise YamlProblem("expected no recursive alias", line, path)
    if node.tag not in _JSON_TAGS:
        raise YamlProblem(
            "expected a JSON value (string, number, true/false, null, list or mapping), "
            f"got a value tagged {node.tag}",
            line,
            path,
        )
    size = 1
    if node.tag == _FLOAT_TAG and isinstance(node, yaml.nodes.ScalarNode):
        text = str(node.value).lower()
        if "inf" in text or "nan" in text:
            raise YamlProblem("expected a finite number", line, path)
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
            size += _check_nodes(value_node, (*path, key), lines, ancestors, sizes)
    elif isinstance(node, yaml.nodes.SequenceNode):
        for index, item in enumerate(node.value):
            size += _check_nodes(item, (*path, index), lines, ancestors, sizes)
    ancestors.discard(id(node))
    if size > MAX_NODES:
        raise YamlProblem(
            f"expected at most {MAX_NODES} values once aliases are expanded, got more", line
        )
    sizes[id(node)] = size
    return size


def read_text(path: Path, cap: int) -> str:
    """File contents; OSError and UnicodeDecodeError are left to the caller."""
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"larger than {cap} bytes")
    return data.decode("utf-8")
