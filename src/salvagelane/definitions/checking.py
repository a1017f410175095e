"""What ``salvagelane check`` finds in a definition beyond loading it: a render with
placeholders for the context callables, and warnings about what would bite a run from
this environment (a variable a definition names that is not set, an items path its
envelope schema does not define).

A warning never makes a definition invalid: the environment ``check`` runs in (a laptop,
CI) is often not the one runs happen in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from salvagelane import environment
from salvagelane.definitions.context_values import resolve_allow_lists, resolve_context
from salvagelane.definitions.field_paths import items_path_finding
from salvagelane.definitions.fields import schema_fields
from salvagelane.definitions.loading import load_instruction
from salvagelane.definitions.model import ContextSource, Instruction
from salvagelane.definitions.problems import PathParts, format_path, line_of, one_line
from salvagelane.definitions.templates import placeholder, preview_prompt, render_prompt
from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml, read_text

_MAX_DEFINITION_BYTES = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckedInstruction:
    """What ``check`` found: the definition, the context callables it ran (``--resolve``)
    or did not run, why the prompt could not be rendered without them (or None), and
    its warnings (``path: what (line N)``)."""

    instruction: Instruction
    ran: tuple[ContextSource, ...] = ()
    not_run: tuple[ContextSource, ...] = ()
    unrendered: str | None = None
    warnings: tuple[str, ...] = ()


def check_instruction(path: Path | str, *, resolve: bool = False) -> CheckedInstruction:
    """What a run does before calling the model, short of running code: load the
    definition, read its context files and allow-lists, render its prompt (within the
    render limits). DefinitionError listing every problem found.

    Context callables are neither imported nor called: their values are placeholders
    in the render and allow-lists from them are skipped. With ``resolve`` they are
    imported and run, as a run does. Callable sinks are never imported here.
    """
    instruction = load_instruction(path)
    warnings = _items_path_warnings(instruction)
    callables = tuple(
        source for source in instruction.context.values() if source.kind == "callable"
    )
    if resolve:
        context = resolve_context(instruction)
        resolve_allow_lists(instruction, context)
        render_prompt(instruction, context)
        return CheckedInstruction(instruction=instruction, ran=callables, warnings=warnings)
    context = resolve_context(instruction, run_callables=False)
    names = {source.name for source in callables}
    resolve_allow_lists(instruction, context, unresolved=names)
    for source in callables:
        assert source.callable is not None
        context[source.name] = placeholder(source.name, source.callable)
    return CheckedInstruction(
        instruction=instruction,
        not_run=callables,
        unrendered=preview_prompt(instruction, context),
        warnings=warnings,
    )


def _items_path_warnings(instruction: Instruction) -> tuple[str, ...]:
    output = instruction.output
    finding = items_path_finding(output.envelope_schema.schema, output.items_path)
    if finding is None or finding[0]:  # a provable mismatch is a problem, raised by loading
        return ()
    return (f"output.items_path: {one_line(finding[1])}",)


# --- Environment variables ----------------------------------------------------------------

_VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]*")  # the schema's pattern for a variable's NAME
_NEEDED_BY = {
    "api_key_env": "a run cannot call the model",
    "base_url_env": "a run cannot call the model",
    "url_env": "this sink cannot deliver",
    "token_env": "this sink cannot deliver",
}


def environment_warnings(path: Path | str) -> tuple[str, ...]:
    """A warning (``path: what (line N)``) for every environment variable the definition
    at ``path`` names (any ``*_env`` field of the schema) that is not set, or is blank,
    here. Values are never read out: only whether there is one.

    Read from the document as written, so that a definition with problems still gets
    them; nothing when it cannot be parsed (loading says why)."""
    try:
        document, lines = parse_yaml(read_text(Path(path), _MAX_DEFINITION_BYTES))
    except (OSError, ValueError, YamlProblem):  # UnicodeDecodeError is a ValueError
        return ()
    if not isinstance(document, Mapping):
        return ()
    warnings = []
    for field in schema_fields():
        if not field.name.endswith("_env"):
            continue
        for where, name in _values_at(document, field.path.split(".")):
            if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
                continue  # the schema check says what is wrong with it
            state = environment.variable_state(name)
            if state == "set":
                continue
            needed = (
                "this notification cannot be sent"
                if field.path.startswith("notify")
                else _NEEDED_BY.get(field.name, "a run needs it")
            )
            line = line_of(lines, where)
            at = f" (line {line})" if line else ""
            warnings.append(
                f"{format_path(where)}: environment variable {name} is {state} here: "
                f"{needed} until it is set{at}"
            )
    return tuple(warnings)


def _values_at(
    node: Any, parts: Sequence[str], at: PathParts = ()
) -> Iterator[tuple[PathParts, Any]]:
    """The values at a schema field path (``sinks[].url_env``) in a document, with their
    paths in it."""
    if not parts:
        yield at, node
        return
    head, rest = parts[0], parts[1:]
    key, many = (head[:-2], True) if head.endswith("[]") else (head, False)
    if not isinstance(node, Mapping) or key not in node:
        return
    value = node[key]
    if not many:
        yield from _values_at(value, rest, (*at, key))
    elif isinstance(value, list):
        for index, entry in enumerate(value):
            yield from _values_at(entry, rest, (*at, key, index))
