"""Problems found in a definition, and the messages that report them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from salvagelane.errors import DefinitionError


class Sourced(Protocol):
    """What a problem is reported against: an instruction, by the file it came from.
    (A protocol, not the Instruction class: the model imports this module.)"""

    @property
    def source(self) -> object: ...


_RECEIVED_CHARS = 80


# --- Problems and their messages -----------------------------------------------------------

PathParts = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True, slots=True)
class Problem:
    path: PathParts
    message: str  # "expected ..., got ..."


def format_path(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text or "(top level)"


def one_line(text: str) -> str:
    return " ".join(text.split())


def raise_problems(
    source: str,
    problems: Sequence[Problem],
    lines: Mapping[PathParts, int] | None = None,
) -> None:
    """DefinitionError listing every one of ``problems`` (none: nothing happens). Every
    one is spelled out: fixing a definition one message at a time is what ``check``
    is there to spare."""
    if not problems:
        return
    shown = []
    for problem in problems:
        line = line_of(lines or {}, problem.path)
        where = f" (line {line})" if line else ""
        shown.append(f"{format_path(problem.path)}: {one_line(problem.message)}{where}")
    raise DefinitionError(
        f"{source}: " + "; ".join(shown),
        source=source,
        paths=tuple(format_path(p.path) for p in problems),
        problems=tuple(shown),
    )


def in_document_order(problems: list[Problem], lines: Mapping[PathParts, int]) -> list[Problem]:
    return sorted(problems, key=lambda problem: line_of(lines, problem.path) or 0)


def line_of(lines: Mapping[PathParts, int], path: PathParts) -> int | None:
    while True:
        if path in lines:
            return lines[path]
        if not path:
            return None
        path = path[:-1]


def received(value: Any, *, secret: bool = False) -> str:
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


def quoted(values: Iterable[Any]) -> str:
    return ", ".join(json.dumps(v, ensure_ascii=False) for v in values)


def fail(instruction: Sourced, path: PathParts, message: str) -> DefinitionError:
    source = str(instruction.source)
    shown = f"{format_path(path)}: {one_line(message)}"
    return DefinitionError(
        f"{source}: {shown}", source=source, paths=(format_path(path),), problems=(shown,)
    )
