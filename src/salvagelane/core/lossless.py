"""Lossless repairs: defects with exactly one reading, repaired only when opted in.

Not to be confused with ``core.repair``, the best-effort repair of a *truncated* item,
which is shown to the operator and never accepted. A lossless repair makes an item
acceptable, so it is held to a much narrower rule: it may only delete separators the
grammar forbids, never add, change or reorder a value, and it applies only when those
separators are the item's *only* defect. The repaired text must then pass the full
strict parse and every other guardrail as an intact item does.

One kind exists: ``trailing_comma``, a comma that directly follows a complete member
or element and is followed, after JSON whitespace only, by the ``}`` or ``]`` that
closes the same container. Why its reading is unique (docs/adr/0011-lossless-repairs.md):
every value token of the item keeps its place, so the repaired item holds exactly the
members and elements the text spelled out; the only other way to make such text valid
is to insert a value after the comma, and that value would be invented.

Every other defect (``,,``, ``[,]``, ``{,}``, a missing comma, single quotes, a bare
word, an unclosed container, text after the item) makes :func:`find_trailing_commas`
answer None: the item is not repairable and keeps the rejection it had.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from salvagelane.core import lexis
from salvagelane.core.records import Repair, RepairKind


class AcceptRepairs(enum.StrEnum):
    """Which repaired items a policy accepts (``accept_repairs`` in a definition)."""

    NONE = "none"  # every defect quarantines the item (the default)
    LOSSLESS = "lossless"  # defects with exactly one reading are repaired and recorded


class _Expect(enum.Enum):
    """What the grammar allows next inside the innermost open container."""

    KEY_OR_CLOSE = enum.auto()  # just after "{"
    KEY = enum.auto()  # after a comma in an object
    COLON = enum.auto()
    MEMBER_VALUE = enum.auto()
    VALUE_OR_CLOSE = enum.auto()  # just after "["
    ELEMENT = enum.auto()  # after a comma in an array
    COMMA_OR_CLOSE = enum.auto()


@dataclass(frozen=True, kw_only=True, slots=True)
class LosslessRepair:
    """The repaired text of an item and the repairs that made it."""

    text: str
    repairs: tuple[Repair, ...]


def find_trailing_commas(text: str) -> tuple[int, ...] | None:
    """Offsets (into ``text``) of the trailing commas of one JSON value, in order.

    None when ``text`` holds any other grammatical defect, or is not one whole value
    with nothing but whitespace around it; ``()`` when it is grammatical as it is.
    Iterative: the nesting of ``text`` never becomes recursion.
    """
    # One entry per open container: is it an object, and what comes next in it.
    stack: list[list[bool | _Expect]] = []
    last_comma = -1
    found: list[int] = []
    pos = 0
    done = False
    while True:
        match = lexis.TOKEN.match(text, pos)
        if match is None:
            break
        if done:
            return None  # a second value after the item's own
        kind = match.lastgroup
        token = match.group(kind or 0)
        token_at = match.start(kind or 0)
        pos = match.end()
        expect = stack[-1][1] if stack else None
        is_object = bool(stack[-1][0]) if stack else False
        if token in ("}", "]"):
            if not stack or is_object != (token == "}"):
                return None
            if expect in (_Expect.KEY, _Expect.ELEMENT):
                found.append(last_comma)  # only whitespace lies between: see lexis.TOKEN
            elif expect not in (
                _Expect.KEY_OR_CLOSE,
                _Expect.VALUE_OR_CLOSE,
                _Expect.COMMA_OR_CLOSE,
            ):
                return None
            stack.pop()
            done = _value_ends(stack)
            continue
        if token == ",":
            if expect is not _Expect.COMMA_OR_CLOSE:
                return None  # ",," or "[," or "{," or a comma after a key
            stack[-1][1] = _Expect.KEY if is_object else _Expect.ELEMENT
            last_comma = token_at
            continue
        if token == ":":
            if expect is not _Expect.COLON:
                return None
            stack[-1][1] = _Expect.MEMBER_VALUE
            continue
        if expect in (_Expect.KEY_OR_CLOSE, _Expect.KEY):
            if kind != "string":
                return None
            stack[-1][1] = _Expect.COLON
            continue
        if stack and expect not in (
            _Expect.MEMBER_VALUE,
            _Expect.VALUE_OR_CLOSE,
            _Expect.ELEMENT,
        ):
            return None  # a value where a comma or a colon belongs
        if token in ("{", "["):
            stack.append(
                [token == "{", _Expect.KEY_OR_CLOSE if token == "{" else _Expect.VALUE_OR_CLOSE]
            )
            continue
        done = _value_ends(stack)
    if not done or lexis.skip_ws(text, pos) != len(text):
        return None
    return tuple(found)


def _value_ends(stack: list[list[bool | _Expect]]) -> bool:
    """A value just ended: the container holding it expects a comma next; with none
    open, the item itself is complete."""
    if not stack:
        return True
    stack[-1][1] = _Expect.COMMA_OR_CLOSE
    return False


def repair_losslessly(text: str, *, offset: int = 0) -> LosslessRepair | None:
    """``text`` with its trailing commas removed, and one repair per comma removed.

    ``offset`` is where ``text`` starts in the raw output: each repair's ``at`` is the
    comma's offset in the raw output, as spans and correction signals count. None when
    there is nothing to repair losslessly (no trailing comma, or any other defect).
    The caller still has to parse the result strictly.
    """
    commas = find_trailing_commas(text)
    if not commas:
        return None
    pieces: list[str] = []
    start = 0
    for at in commas:
        pieces.append(text[start:at])
        start = at + 1
    pieces.append(text[start:])
    return LosslessRepair(
        text="".join(pieces),
        repairs=tuple(Repair(kind=RepairKind.TRAILING_COMMA, at=offset + at) for at in commas),
    )
