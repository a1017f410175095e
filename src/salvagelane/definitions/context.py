"""Resolving a definition's context values and allow-lists for a run."""

from __future__ import annotations

import copy
import importlib
import json
import math
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from salvagelane.core.strict import Unparsable, parse_item
from salvagelane.definitions.model import Instruction
from salvagelane.definitions.problems import PathParts, fail, received
from salvagelane.definitions.yaml_source import MAX_NODES, YamlProblem, parse_yaml, read_text
from salvagelane.errors import ConfigurationError, not_utf8
from salvagelane.loading import load_allow_list

_MAX_CONTEXT_FILE_BYTES = 16 * 1024 * 1024
_MAX_DEPTH = 100  # nesting of context data


# --- Context ---------------------------------------------------------------------------------


def resolve_context(instruction: Instruction, *, run_callables: bool = True) -> dict[str, Any]:
    """The context values by name: inline values, file contents and callables' results.

    Every value is JSON-compatible (callables' tuples become lists). A file that
    cannot be read or parsed, a callable that cannot be imported, raises or returns
    something that is not JSON data raises DefinitionError naming the entry.

    A callable imports and runs code. With ``run_callables=False`` (``check`` without
    ``--resolve``) its entry is left out: nothing is imported, nothing runs.
    """
    values: dict[str, Any] = {}
    for name, entry in instruction.context.items():
        if entry.kind == "value":
            values[name] = copy.deepcopy(entry.value)
        elif entry.kind == "file":
            assert entry.file is not None
            values[name] = _context_file(instruction, name, entry.file)
        elif run_callables:
            assert entry.callable is not None
            values[name] = _context_call(instruction, name, entry.callable, entry.args)
    return values


def _context_file(instruction: Instruction, name: str, file: Path) -> Any:
    where: PathParts = ("context", name, "file")
    shown = instruction.definition["context"][name]["file"]
    try:
        text = read_text(file, _MAX_CONTEXT_FILE_BYTES)
    except OSError as exc:
        raise fail(
            instruction, where, f"expected a readable file, got {shown}: {exc.strerror or exc}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise fail(instruction, where, f"expected UTF-8 text in {shown}: {not_utf8(exc)}") from exc
    except ValueError as exc:
        raise fail(instruction, where, f"expected a context file, got {shown}: {exc}") from exc
    if file.suffix.lower() == ".json":
        # The same strict parse as model output: context data is a producer too.
        parsed = parse_item(text)
        if isinstance(parsed, Unparsable):
            problem = parsed.signal.message("malformed")
            raise fail(instruction, where, f"expected valid JSON in {shown}, got: {problem}")
        return parsed.value
    try:
        value, _ = parse_yaml(text, max_bytes=_MAX_CONTEXT_FILE_BYTES)
    except YamlProblem as exc:
        at = f" at line {exc.line}" if exc.line else ""
        raise fail(
            instruction, where, f"expected valid context data in {shown}{at}: {exc.describe()}"
        ) from exc
    return value


def _context_call(instruction: Instruction, name: str, target: str, args: Mapping[str, Any]) -> Any:
    where: PathParts = ("context", name, "callable")
    module_name, _, qualname = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise fail(
            instruction,
            where,
            f"expected an importable module, got {json.dumps(module_name)} "
            f"({type(exc).__name__}: {exc})",
        ) from exc
    for attribute in qualname.split("."):
        if not hasattr(found, attribute):
            raise fail(
                instruction,
                where,
                f"expected {json.dumps(target)} to name a callable, "
                f"got no attribute {json.dumps(attribute)}",
            )
        found = getattr(found, attribute)
    if not callable(found):
        raise fail(
            instruction,
            where,
            f"expected {json.dumps(target)} to be callable, got a {type(found).__name__}",
        )
    function: Callable[..., Any] = found
    try:
        result = function(**copy.deepcopy(dict(args)))
    except Exception as exc:
        raise fail(
            instruction,
            ("context", name),
            f"expected {target}(**args) to return the value, got {type(exc).__name__}: {exc}",
        ) from exc
    try:
        return _json_data(result, "$", 0, [0])
    except _NotJson as exc:
        raise fail(
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
    if budget[0] > MAX_NODES:
        raise _NotJson(f"more than {MAX_NODES} values")
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
    instruction: Instruction, context: Mapping[str, Any], *, unresolved: Collection[str] = ()
) -> dict[str, frozenset[str]]:
    """The allowed values per item field, from inline values, files and ``context``
    (as returned by :func:`resolve_context`). Sources for the same field are united.
    Sources naming an ``unresolved`` context entry are skipped."""
    lists: dict[str, frozenset[str]] = {}
    for index, spec in enumerate(instruction.guardrails.allow_lists):
        where: PathParts = ("guardrails", "allow_lists", index)
        if spec.context is not None and spec.context in unresolved:
            continue
        if spec.values is not None:
            values = frozenset(spec.values)
        elif spec.file is not None:
            try:
                values = load_allow_list(spec.file)
            except ConfigurationError as exc:
                raise fail(instruction, (*where, "file"), f"expected an allow-list: {exc}") from exc
        else:
            assert spec.context is not None
            values = _context_allow_list(instruction, (*where, "context"), spec.context, context)
        lists[spec.field] = lists.get(spec.field, frozenset()) | values
    return lists


def _context_allow_list(
    instruction: Instruction, where: PathParts, name: str, context: Mapping[str, Any]
) -> frozenset[str]:
    if name not in context:
        raise fail(instruction, where, f"expected a resolved context value {json.dumps(name)}")
    value = context[name]
    expected = (
        f"expected context value {json.dumps(name)} to be a non-empty list of strings "
        'or of mappings with a string "id"'
    )
    if not isinstance(value, list) or not value:
        raise fail(instruction, where, f"{expected}, got {received(value)}")
    values: set[str] = set()
    for index, entry in enumerate(value):
        if isinstance(entry, Mapping):
            entry = entry.get("id")
        if not isinstance(entry, str) or not entry:
            raise fail(instruction, where, f"{expected}, got {received(value[index])} at [{index}]")
        values.add(entry)
    return frozenset(values)
