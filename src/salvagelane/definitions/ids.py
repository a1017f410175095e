"""Instruction ids read from files and the database: one grammar, one resolver.

A fixture's ``meta.json`` arrives attached to bug reports, and a database row can be
written by anything that can reach the database: an instruction id read from either is
data. :func:`instruction_by_id` is the only way such an id becomes a definition: it must
match the id grammar of ``schemas/instruction.schema.json`` (so it cannot hold a ``/``,
a ``.`` or a file suffix) and is looked up among the definitions in the instructions
directory, never opened as a path. Loading a definition there runs none of its code
(context callables run only when a caller resolves the context of the definition it
got back, which is then one of the operator's own).

What an operator types as INSTRUCTION on the command line is trusted and may be a path:
that is :func:`instruction_from_argument`, and nothing read from a file or the database
goes through it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from salvagelane.errors import DefinitionError, InputError, NotFoundError

if TYPE_CHECKING:
    from salvagelane.definitions.model import Instruction

INSTRUCTION_ID_PATTERN = "^[a-z0-9][a-z0-9-]{0,62}$"
"""The ``id`` pattern of ``schemas/instruction.schema.json`` (a test keeps them equal)."""

# \A and \Z: with ^ and $, re would also accept the id followed by a newline.
_INSTRUCTION_ID = re.compile(r"\A[a-z0-9][a-z0-9-]{0,62}\Z")
_SHOWN_CHARS = 120

EXPECTED_ID = (
    "expected an instruction id (lower-case letters, digits and hyphens, at most 63 "
    "characters, starting with a letter or digit)"
)


def is_instruction_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string the id grammar accepts."""
    return isinstance(value, str) and _INSTRUCTION_ID.match(value) is not None


def require_instruction_id(value: object, *, where: str, directory: Path | None = None) -> str:
    """``value`` if it is an instruction id; InputError saying ``where`` it was read
    from, what it was, and what was expected, otherwise."""
    if is_instruction_id(value):
        return value
    among = "" if directory is None else f" of a definition in {directory}/"
    raise InputError(
        f"{where}: {EXPECTED_ID}{among}, got {shown(value)}: an id read from a file or the "
        "database is looked up among the definitions, never a path"
    )


def instruction_by_id(
    instruction_id: object, directory: Path, *, where: str | None = None
) -> Instruction:
    """The definition whose ``id`` is ``instruction_id``, among those in ``directory``
    (``<id>.yaml`` or ``<id>.yml`` first, then every definition file in it).

    InputError when ``instruction_id`` is not an id, NotFoundError when no definition
    has it; ``where`` (e.g. ``fixture/meta.json: instruction``) starts the message.
    DefinitionError when ``<id>.yaml`` itself does not load.
    """
    from salvagelane.definitions.directory import definition_files
    from salvagelane.definitions.loading import load_instruction

    prefix = "" if where is None else f"{where}: "
    valid = require_instruction_id(
        instruction_id, where=where or "instruction", directory=directory
    )
    for suffix in (".yaml", ".yml"):
        # The grammar admits no separator or dot: this names a file directly in directory.
        candidate = directory / f"{valid}{suffix}"
        if candidate.is_file():
            instruction = load_instruction(candidate)
            if instruction.id == valid:
                return instruction
    known: list[str] = []
    broken = 0
    for path in definition_files(directory):
        try:
            instruction = load_instruction(path)
        except DefinitionError:
            broken += 1
            continue
        if instruction.id == valid:
            return instruction
        known.append(instruction.id)
    hint = f" ({broken} definition(s) could not be loaded: run salvagelane check)" if broken else ""
    raise NotFoundError(
        f"{prefix}no instruction {valid!r} in {directory}/: expected one of "
        f"{', '.join(sorted(known)) or 'none'}{hint}"
    )


def shown(value: object) -> str:
    """``value`` for a message: JSON, ASCII only (no control or bidi character reaches a
    terminal), clipped."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return _ascii_json(value[:_SHOWN_CHARS])[:-1] + '..."'
    if value is None or isinstance(value, str | bool | int | float):
        return _ascii_json(value)
    return f"a JSON {type(value).__name__.replace('dict', 'object').replace('list', 'array')}"


def _ascii_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=True).replace("\x7f", "\\u007f")


def instruction_from_argument(reference: str, directory: Path) -> Instruction:
    """The definition named by INSTRUCTION as the operator typed it: a path to a YAML file
    (trusted: the operator chose it), else an id looked up in ``directory``.

    Only for the command line. An id read from a file or the database (a fixture's
    meta.json, a stored run) goes through :func:`instruction_by_id`, which never takes a
    path.
    """
    from salvagelane.definitions.loading import load_instruction

    as_path = Path(reference)
    if as_path.suffix in {".yaml", ".yml"} and as_path.is_file():
        return load_instruction(as_path)
    if not is_instruction_id(reference):
        raise NotFoundError(
            f"INSTRUCTION: expected the id of a definition in {directory}/ or an existing "
            f".yaml or .yml file, got {shown(reference)}"
        )
    return instruction_by_id(reference, directory)
