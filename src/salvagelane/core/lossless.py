"""Lossless repairs: defects with exactly one reading, repaired only when opted in.

Not to be confused with ``core.repair``, the best-effort repair of a *truncated* item,
which is shown to the operator and never accepted. A lossless repair makes an item
acceptable, so it is held to a much narrower rule: it may only remove what the grammar
forbids or respell a token the one way it can be read, never add, change or reorder a
value, and it applies only when such defects are the item's *only* ones. The repaired
text must then pass the full strict parse and every other guardrail as an intact item
does. The kinds, and why each has one reading (docs/adr/0011-lossless-repairs.md):

- ``trailing_comma``: a comma that directly follows a complete member or element and is
  followed, after whitespace, by the ``}`` or ``]`` closing the same container: removed.
- ``comment``: ``// ...`` to the end of the line or ``/* ... */``, outside strings: removed.
- ``single_quote``: a ``'string'``: written with double quotes, ``\'`` unescaped and
  ``"`` escaped.
- ``python_literal``: ``True``, ``False``, ``None`` where a value belongs: written as
  ``true``, ``false``, ``null``.
- ``raw_control``: a raw control character (a tab, a bell) inside a string: escaped. Not a
  line break: in laid-out output a quote that meets one may be out of step instead
  (ADR 0002, rule 3), and the scanner reads it so.
- ``bare_key``: an identifier (``rank``) where a member name belongs: quoted.

Anything else (``,,``, a missing comma, a bare word that is no key, ``NaN``, smart
quotes, an unclosed comment or string, a quote inside a single-quoted string, a second
value, an unclosed container) makes the item unrepairable: it keeps its rejection.
Where a Python reading is involved (single quotes, ``True``), only escapes that mean the
same to Python and to JSON are allowed, so that the reading stays one.
"""

from __future__ import annotations

import enum
import re
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


# One token of an item as models write it: JSON's, and the lossless defects'. A
# string's body is matched loosely here and checked below, escape by escape.
_LENIENT = re.compile(
    r"(?P<ws>[ \t\n\r]++)"
    r"|(?P<line_comment>//[^\n]*+)"
    r"|(?P<block_comment>/\*(?:[^*]++|\*(?!/))*+\*/)"
    r'|(?P<dq>"(?:[^"\\]++|\\.)*+")'
    r"|(?P<sq>'(?:[^'\\]++|\\.)*+')"
    r"|(?P<number>" + lexis.NUMBER.pattern + r")(?![A-Za-z0-9_$.])"
    r"|(?P<word>[A-Za-z_$][A-Za-z0-9_$]*+)"
    r"|(?P<punct>[{}\[\],:])",
    re.DOTALL,
)
_JSON_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
# Escapes a Python literal and JSON read alike (not \/, which Python keeps as two
# characters, nor a surrogate \u, which JSON pairs and Python does not).
_SHARED_ESCAPE = re.compile(r"\\(?:[\"\\'bfnrt]|u(?![dD][89a-fA-F])[0-9a-fA-F]{4})")
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CONTROL_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_RAW_CONTROL = re.compile(r"[\x00-\x1f]")


def _escaped_controls(body: str, at: int, repairs: list[Repair]) -> str:
    """``body`` (a string's inside) with each raw control character escaped."""

    def escape(match: re.Match[str]) -> str:
        repairs.append(Repair(kind=RepairKind.RAW_CONTROL, at=at + match.start()))
        char = match.group()
        return _CONTROL_ESCAPES.get(char, f"\\u{ord(char):04x}")

    return _RAW_CONTROL.sub(escape, body)


def _check_escapes(body: str, allowed: re.Pattern[str]) -> bool:
    """Every backslash in ``body`` starts an escape ``allowed`` matches; whether any
    escape JSON and Python would read differently is present is the caller's concern."""
    pos = body.find("\\")
    while pos >= 0:
        match = allowed.match(body, pos)
        if match is None:
            return False
        pos = body.find("\\", match.end())
    return True


def _rewrite(text: str, offset: int) -> LosslessRepair | None:
    """``text`` with every lossless defect repaired, or None (nothing to repair, or any
    other defect). The grammar walk of :func:`find_trailing_commas`, over the lenient
    tokens; iterative."""
    stack: list[list[bool | _Expect]] = []
    out: list[str] = []
    repairs: list[Repair] = []
    pending_comma = comma_at = 0  # out index and offset of the last comma
    python_reading = False  # single quotes or True/False/None were read
    json_only_escape = False  # an escape a Python reading would take otherwise
    done = False
    pos, n = 0, len(text)
    while pos < n:
        match = _LENIENT.match(text, pos)
        if match is None:
            return None  # smart quotes, NaN's neighbours, stray characters
        kind = match.lastgroup
        token = match.group()
        at = offset + pos
        pos = match.end()
        if kind == "ws":
            out.append(token)
            continue
        if kind in ("line_comment", "block_comment"):
            repairs.append(Repair(kind=RepairKind.COMMENT, at=at))
            out.append(" " if kind == "block_comment" else "")
            continue
        if done:
            return None  # a second value after the item's own
        expect = stack[-1][1] if stack else None
        is_object = bool(stack[-1][0]) if stack else False
        if kind == "punct" and token in ("}", "]"):
            if not stack or is_object != (token == "}"):
                return None
            if expect in (_Expect.KEY, _Expect.ELEMENT):
                out[pending_comma] = ""
                repairs.append(Repair(kind=RepairKind.TRAILING_COMMA, at=comma_at))
            elif expect not in (
                _Expect.KEY_OR_CLOSE,
                _Expect.VALUE_OR_CLOSE,
                _Expect.COMMA_OR_CLOSE,
            ):
                return None
            stack.pop()
            out.append(token)
            done = _value_ends(stack)
            continue
        if kind == "punct" and token == ",":
            if expect is not _Expect.COMMA_OR_CLOSE:
                return None
            stack[-1][1] = _Expect.KEY if is_object else _Expect.ELEMENT
            pending_comma, comma_at = len(out), at
            out.append(token)
            continue
        if kind == "punct" and token == ":":
            if expect is not _Expect.COLON:
                return None
            stack[-1][1] = _Expect.MEMBER_VALUE
            out.append(token)
            continue
        in_key = expect in (_Expect.KEY_OR_CLOSE, _Expect.KEY)
        if (
            not in_key
            and stack
            and expect
            not in (
                _Expect.MEMBER_VALUE,
                _Expect.VALUE_OR_CLOSE,
                _Expect.ELEMENT,
            )
        ):
            return None  # a value where a comma or a colon belongs
        if kind in ("dq", "sq") and ("\n" in token or "\r" in token):
            return None  # a line break in a string: quotes may be out of step instead
        if kind == "dq":
            body = token[1:-1]
            if not _check_escapes(body, _JSON_ESCAPE):
                return None
            json_only_escape = json_only_escape or not _check_escapes(body, _SHARED_ESCAPE)
            out.append('"' + _escaped_controls(body, at + 1, repairs) + '"')
        elif kind == "sq":
            body = token[1:-1]
            if not _check_escapes(body, _SHARED_ESCAPE):
                return None
            python_reading = True
            repairs.append(Repair(kind=RepairKind.SINGLE_QUOTE, at=at))
            body = _escaped_controls(body, at + 1, repairs)
            # \' means ' ; a raw " needs its escape once the quotes are double.
            body = re.sub(r"\\(.)|\"", lambda m: _requote(m), body)
            out.append('"' + body + '"')
        elif kind == "word":
            if in_key:
                repairs.append(Repair(kind=RepairKind.BARE_KEY, at=at))
                out.append(f'"{token}"')
            elif token in ("true", "false", "null"):
                out.append(token)
            elif token in _PYTHON_LITERALS:
                python_reading = True
                repairs.append(Repair(kind=RepairKind.PYTHON_LITERAL, at=at))
                out.append(_PYTHON_LITERALS[token])
            else:
                return None  # NaN, Infinity, undefined, a bare word
        elif kind == "number" or (kind == "punct" and token in ("{", "[")):
            if in_key:
                return None
            out.append(token)
            if token in ("{", "["):
                stack.append(
                    [token == "{", _Expect.KEY_OR_CLOSE if token == "{" else _Expect.VALUE_OR_CLOSE]
                )
                continue
        else:
            return None
        if in_key:
            stack[-1][1] = _Expect.COLON
            continue
        done = _value_ends(stack)
    if not done or not repairs or (python_reading and json_only_escape):
        return None
    repairs.sort(key=lambda r: r.at)
    return LosslessRepair(text="".join(out), repairs=tuple(repairs))


def _requote(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped is None:
        return '\\"'  # a raw " inside single quotes
    return "'" if escaped == "'" else "\\" + escaped


def repair_losslessly(text: str, *, offset: int = 0) -> LosslessRepair | None:
    """``text`` with its lossless defects repaired, and one repair per defect.

    ``offset`` is where ``text`` starts in the raw output: each repair's ``at`` is the
    defect's offset in the raw output, as spans and correction signals count. None when
    there is nothing to repair losslessly (no such defect, or any other defect).
    The caller still has to parse the result strictly.
    """
    return _rewrite(text, offset)
