"""The definitions of a directory: its files, all of them loaded (the first broken one
fails), and what a ``serve`` node schedules (every loadable one).

A file that does not load is reported, not fatal: the node schedules the others, and on
a reload keeps the previous version of a definition whose file broke.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from salvagelane.definitions.loading import load_instruction
from salvagelane.definitions.model import Instruction
from salvagelane.errors import ConfigurationError, DefinitionError


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionSet:
    """The definitions a node schedules. ``problems`` are the files that did not load
    (with why); ``kept`` the ids whose previous version stays because their file broke."""

    instructions: Mapping[str, Instruction]
    problems: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


def load_definitions(
    directory: Path, previous: Mapping[str, Instruction] | None = None
) -> DefinitionSet:
    """Every loadable definition in ``directory``, by id.

    A file that does not load is reported in ``problems``; if ``previous`` held a
    definition from that file, it is kept. A definition whose file is gone is dropped.
    ConfigurationError when the directory itself is missing.
    """
    previous = previous or {}
    by_source = {instruction.source.resolve(): instruction for instruction in previous.values()}
    loaded: dict[str, Instruction] = {}
    seen: dict[str, Path] = {}
    problems: list[str] = []
    kept: list[str] = []
    for path in definition_files(directory):
        try:
            instruction = load_instruction(path)
        except DefinitionError as exc:
            old = by_source.get(path.resolve())
            if old is not None and old.id not in loaded:
                loaded[old.id] = old
                seen[old.id] = old.source
                kept.append(old.id)
                problems.append(f"{exc} (keeping the previous version of {old.id})")
            else:
                problems.append(str(exc))
            continue
        try:
            duplicate_id_check(instruction, seen)
        except DefinitionError as exc:
            problems.append(f"{exc} (ignoring {path.name})")
            continue
        loaded[instruction.id] = instruction
    return DefinitionSet(instructions=loaded, problems=tuple(problems), kept=tuple(kept))


def require_loadable(found: DefinitionSet, directory: Path) -> None:
    """Refuse a directory where no definition loads: DefinitionError when every file
    failed to load (a definition failure, exit 1, as for ``run``), ConfigurationError
    when there is no file at all (a directory to fix, exit 2)."""
    if found.instructions:
        return
    if not found.problems:
        raise ConfigurationError(
            f"{directory}: no instruction definition (*.yaml, *.yml) to schedule"
        )
    more = len(found.problems) - 1
    raise DefinitionError(
        f"{directory}: no loadable instruction definition to schedule: {found.problems[0]}"
        + (f" (and {more} more file(s))" if more else "")
        + "; salvagelane check says what is wrong"
    )


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
