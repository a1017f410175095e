"""Resolving a definition's context values and allow-lists for a run."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from salvagelane.callables import CallableProblem, resolve_callable, split_reference
from salvagelane.core import SalvagePolicy
from salvagelane.core.strict import Unparsable, parse_item
from salvagelane.definitions.model import Instruction
from salvagelane.definitions.problems import PathParts, fail, received
from salvagelane.definitions.snapshot import (
    DefinitionFiles,
    DefinitionSnapshot,
    DiskFiles,
    StoredFiles,
)
from salvagelane.definitions.yaml_source import MAX_NODES, YamlProblem, parse_yaml
from salvagelane.errors import ConfigurationError, UnresolvedCallableError, not_utf8
from salvagelane.policy_files import allow_list_values

_MAX_CONTEXT_FILE_BYTES = 16 * 1024 * 1024
_MAX_ALLOW_LIST_BYTES = 16 * 1024 * 1024
_MAX_DEPTH = 100  # nesting of context data


# --- Context ---------------------------------------------------------------------------------


def resolve_context(
    instruction: Instruction,
    *,
    run_callables: bool = True,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """The context values by name: inline values, file contents and callables' results
    (those named in ``only``, when given).

    Every value is JSON-compatible (callables' tuples become lists). A file that
    cannot be read or parsed, a callable that cannot be imported, raises or returns
    something that is not JSON data raises DefinitionError naming the entry.

    A callable imports and runs code. With ``run_callables=False`` (``check`` without
    ``--resolve``) its entry is left out: nothing is imported, nothing runs. The
    callables of a stored definition (:func:`~salvagelane.definitions.loading.load_stored`)
    never run: DefinitionError (see :func:`salvage_policy_for`).
    """
    values: dict[str, Any] = {}
    for name, entry in instruction.context.items():
        if only is not None and name not in only:
            continue
        if entry.kind == "value":
            values[name] = copy.deepcopy(entry.value)
        elif entry.kind == "file":
            values[name] = _context_file(instruction, name, _context_text(instruction, name))
        elif run_callables:
            assert entry.callable is not None
            if instruction.stored_sha256 is not None:
                raise fail(
                    instruction,
                    ("context", name, "callable"),
                    f"a stored definition names {json.dumps(entry.callable)}: code named by a "
                    "stored copy runs only when the operator's definition names it too",
                )
            values[name] = _context_call(instruction, name, entry.callable, entry.args)
    return values


def _files(instruction: Instruction) -> DefinitionFiles:
    return instruction.files or DiskFiles(instruction.source.resolve().parent)


def _context_text(instruction: Instruction, name: str) -> str:
    """The text of context entry ``name``'s file, read through the definition's files."""
    where: PathParts = ("context", name, "file")
    shown = instruction.definition["context"][name]["file"]
    try:
        return _files(instruction).read(shown, _MAX_CONTEXT_FILE_BYTES)
    except OSError as exc:
        raise fail(
            instruction, where, f"expected a readable file, got {shown}: {exc.strerror or exc}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise fail(instruction, where, f"expected UTF-8 text in {shown}: {not_utf8(exc)}") from exc
    except ValueError as exc:
        raise fail(instruction, where, f"expected a context file, got {shown}: {exc}") from exc


def _context_file(instruction: Instruction, name: str, text: str) -> Any:
    where: PathParts = ("context", name, "file")
    shown = instruction.definition["context"][name]["file"]
    if PurePosixPath(shown).suffix.lower() == ".json":
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
    try:
        function = resolve_callable(target)
    except UnresolvedCallableError as exc:
        if exc.problem == CallableProblem.MODULE:
            cause = exc.__cause__
            module_name, _ = split_reference(target)
            problem = (
                f"expected an importable module, got {json.dumps(module_name)} "
                f"({type(cause).__name__}: {cause})"
            )
        elif exc.problem == CallableProblem.ATTRIBUTE:
            problem = (
                f"expected {json.dumps(target)} to name a callable, "
                f"got no attribute {json.dumps(exc.part)}"
            )
        else:
            problem = f"expected {json.dumps(target)} to be callable, got a {exc.part}"
        raise fail(instruction, where, problem) from exc.__cause__
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
        elif spec.reference is not None:
            text = _allow_list_text(instruction, index, spec.reference)
            try:
                values = allow_list_values(text, shown=_files(instruction).shown(spec.reference))
            except ConfigurationError as exc:
                raise fail(instruction, (*where, "file"), f"expected an allow-list: {exc}") from exc
        else:
            assert spec.context is not None
            values = _context_allow_list(instruction, (*where, "context"), spec.context, context)
        lists[spec.field] = lists.get(spec.field, frozenset()) | values
    return lists


def _allow_list_text(instruction: Instruction, index: int, reference: str) -> str:
    files = _files(instruction)
    try:
        return files.read(reference, _MAX_ALLOW_LIST_BYTES)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = (
            f"not UTF-8 text: {not_utf8(exc)}"
            if isinstance(exc, UnicodeDecodeError)
            else f"cannot read: {exc.strerror or exc}"
            if isinstance(exc, OSError)
            else str(exc)
        )
        raise fail(
            instruction,
            ("guardrails", "allow_lists", index, "file"),
            f"expected an allow-list: allow-list {files.shown(reference)}: {problem}",
        ) from exc


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


# --- The version a run uses, and checking items again with it --------------------------------


def snapshot_for_run(instruction: Instruction) -> DefinitionSnapshot:
    """What a run of ``instruction`` uses, read now: its YAML text as loaded, the schemas
    it was loaded with, and the text of its allow-list and context files.

    The run then reads those files from the snapshot (:func:`with_snapshot`), so what the
    store keeps is exactly what the run used. DefinitionError naming the entry when a
    file cannot be read, as resolving the context would raise.
    """
    files = dict(instruction.loaded_files)
    for name, source in instruction.context.items():
        if source.kind == "file" and source.reference is not None:
            files[source.reference] = _context_text(instruction, name)
    for index, spec in enumerate(instruction.guardrails.allow_lists):
        if spec.reference is not None:
            files[spec.reference] = _allow_list_text(instruction, index, spec.reference)
    stored = instruction.files
    name = stored.snapshot.name if isinstance(stored, StoredFiles) else instruction.source.name
    return DefinitionSnapshot(name=name, text=instruction.text, files=files)


def with_snapshot(instruction: Instruction, snapshot: DefinitionSnapshot) -> Instruction:
    """``instruction`` reading the files it names from ``snapshot`` instead of the disk."""
    return replace(instruction, files=StoredFiles(snapshot))


TrustedDefinition = Callable[[], Instruction]
"""The operator's own definition of the same id (from the definitions directory); raises a
SalvagelaneError saying why there is none."""


def salvage_policy_for(
    instruction: Instruction,
    *,
    context: Mapping[str, Any] | None = None,
    trusted: TrustedDefinition | None = None,
) -> SalvagePolicy:
    """The salvage policy of ``instruction``: the core's, with its allow-lists resolved.
    The one place a policy is built from a definition.

    A run passes the ``context`` it resolved for its prompt. Checking an item again
    (``quarantine approve``, ``replay``) passes none: the allow-lists are resolved from
    the context entries they name, and only those (a prompt's other context, such as
    today's date from a service, has no say over an item).

    A stored definition (:func:`~salvagelane.definitions.loading.load_stored`) is data:
    a context callable an allow-list needs runs only when ``trusted()``, the operator's
    definition of the same id, names the same context entry (callable and arguments),
    and then it runs as the operator's definition would run it. Otherwise, or when there
    is no such definition, DefinitionError saying so.
    """
    if context is None:
        context = _allow_list_context(instruction, trusted)
    return instruction.salvage_policy(resolve_allow_lists(instruction, context))


def _allow_list_context(
    instruction: Instruction, trusted: TrustedDefinition | None
) -> dict[str, Any]:
    """The context entries the allow-lists of ``instruction`` name, resolved (see
    :func:`salvage_policy_for` for a stored definition's callables)."""
    from salvagelane.errors import SalvagelaneError

    needed = {spec.context for spec in instruction.guardrails.allow_lists if spec.context}
    if instruction.stored_sha256 is None:
        return resolve_context(instruction, only=needed)
    context = resolve_context(instruction, run_callables=False, only=needed)
    for name in sorted(needed):
        source = instruction.context.get(name)
        if source is None or source.kind != "callable":
            continue
        written = instruction.definition["context"][name]
        named = json.dumps(source.callable)
        try:
            if trusted is None:
                raise ConfigurationError("no definitions directory was given")
            own = trusted()
        except SalvagelaneError as exc:
            raise fail(
                instruction,
                ("context", name, "callable"),
                f"an allow-list needs context {json.dumps(name)} from {named}, named by the "
                "stored definition: code named by a stored copy runs only when the "
                f"operator's definition of {instruction.id} names it too, and there is none "
                f"to compare ({exc}); give --instructions DIR holding it, or --use-current",
            ) from exc
        if own.definition.get("context", {}).get(name) != written:
            raise fail(
                instruction,
                ("context", name, "callable"),
                f"an allow-list needs context {json.dumps(name)} from {named}, named by the "
                "stored definition: code named by a stored copy runs only when the "
                f"operator's definition of {instruction.id} names it too, and "
                f"{own.source} does not (its context {json.dumps(name)} differs); "
                "use --use-current to check against that definition instead",
            )
        context.update(resolve_context(own, only={name}))
    return context
