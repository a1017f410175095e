"""Strict JSON: the parse an item must survive, and whole-document validity.

Items are parsed with orjson first: it refuses NaN/Infinity, numbers that
overflow to infinity, lone surrogates and any grammar error, like the strict
decoder below. What it accepts and we refuse is checked after it, cheaply:
duplicate keys (the colons, or ``"key":``, the text holds against the parsed
objects' sizes), NUL (``\u0000``), and integers beyond 64 bits (which orjson
reads as floats: any float that large is parsed again). Anything orjson
refuses, or any doubt, goes to the precise parse below, which names the defect
for the correction signal.

The precise parse is the C decoder, made strict with hooks: no NaN/Infinity,
no number that overflows to infinity, no duplicate keys (so
``{"candidate": "ok", "candidate": "evil"}`` can never reach an allow-list as
``"evil"``), and, checked only when the raw text could hold them, no lone
surrogates and no NUL. Callers bound depth before calling, so the decoder never recurses
deeply.

``is_strict_document`` answers the narrower RFC 8259 question (grammar plus
unique keys) for the whole output, iteratively when the nesting is deep.
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from salvagelane.core import lexis, speedups
from salvagelane.core.records import CorrectionSignal, JSONValue, SignalCode
from salvagelane.core.scanner import Closure, bracket_extent

_PARSER_DEPTH_LIMIT = 200  # beyond this the C decoder is not asked at all

_NUL_OR_SURROGATE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A byte that was not UTF-8, as text decoded with ``surrogateescape`` holds it (the CLI,
# the store and the replay connector read model output so): U+DC80..U+DCFF, raw in the
# text. The same code point written as a \u escape is a lone surrogate, not a byte.
_UNDECODED_BYTE = re.compile(r"[\udc80-\udcff]")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _NonFiniteConstant(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _reject_constant(name: str) -> Any:
    raise _NonFiniteConstant(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteConstant(f"{text[:24]} (overflows to infinity)")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_pairs, parse_constant=_reject_constant, parse_float=_finite_float
)
# Document validity is about grammar: 1e999 is a valid RFC 8259 number.
_GRAMMAR_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_pairs, parse_constant=_reject_constant
)

_EXPECTED_BY_MESSAGE = {
    "Expecting value": "a JSON value",
    "Expecting ',' delimiter": "',' between members",
    "Expecting ':' delimiter": "':' after the key",
    "Expecting property name enclosed in double quotes": "a key in double quotes",
    "Unterminated string starting at": "a closing '\"'",
    "Invalid control character at": "control characters escaped inside strings",
    "Invalid \\escape": "a valid escape sequence",
    "Invalid \\uXXXX escape": "four hex digits after \\u",
    "Extra data": "the end of the value",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Parsed:
    value: JSONValue


new_parsed = speedups.builder(Parsed, "value")


@dataclass(frozen=True, kw_only=True, slots=True)
class Unparsable:
    signal: CorrectionSignal


# `"key":` as the text can hold it: at least one per object member (a string that opens
# with `:` or holds `\":` adds more, never fewer), so equal counts prove unique keys.
_MEMBER = re.compile(r'"[ \t\n\r]*+:')
# orjson reads an integer beyond 64 bits as a float; a float this large may be one, and
# goes to the precise parse, which keeps it an int (or refuses it past the digit limit).
_INT64 = float(2**63)


def parse_item(text: str, *, offset: int = 0) -> Parsed | Unparsable:
    """Parse one item's span strictly. ``offset`` locates errors in the raw output."""
    if speedups.check_strict(text, 0, len(text)) == speedups.STRICT_GRAMMAR:
        # Proven strict, keys unique, nothing orjson reads differently: one C parse.
        try:
            return new_parsed(orjson.loads(text))
        except orjson.JSONDecodeError:  # 1e999, or nesting orjson refuses
            return _parse_precisely(text, offset)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _parse_precisely(text, offset)
    members = _members(value)
    # Every member has a colon: as many colons as members proves no key repeats; more
    # (colons in strings), count `"key":` the same way; still more, the precise parse.
    if members < 0 or (
        members and text.count(":") != members and len(_MEMBER.findall(text)) != members
    ):
        return _parse_precisely(text, offset)
    return _checked(value, text, offset)


def _members(value: JSONValue) -> int:
    """Members of every object in ``value``; -1 for a float that may be a big int.

    Iterative: nesting is bounded by the guardrails, but not small.
    """
    total = 0
    stack: list[JSONValue] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            total += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, float) and abs(node) >= _INT64:
            return -1
    return total


def _parse_precisely(text: str, offset: int) -> Parsed | Unparsable:
    """The C decoder with strict hooks: slower, and it names what is wrong."""
    try:
        value = _DECODER.decode(text)
    except _DuplicateKey as exc:
        return _unparsable(
            SignalCode.DUPLICATE_KEY, "$", "unique keys", f"{describe(exc.key)} twice"
        )
    except _NonFiniteConstant as exc:
        return _unparsable(SignalCode.NON_FINITE, "$", "a finite JSON number", exc.name)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text):
            received = "end of item"
        elif _UNDECODED_BYTE.match(text, exc.pos):
            received = _undecoded_byte(text[exc.pos])
        else:
            received = describe(text[exc.pos : exc.pos + 24])
        expected = _EXPECTED_BY_MESSAGE.get(exc.msg, exc.msg)
        return _unparsable(
            SignalCode.SYNTAX, "$", expected, received, detail=f"at offset {offset + exc.pos}"
        )
    except RecursionError:
        return _unparsable(
            SignalCode.SYNTAX, "$", "nesting the parser can follow", "deeper nesting"
        )
    except ValueError as exc:  # int() beyond sys.get_int_max_str_digits()
        return _unparsable(
            SignalCode.NUMBER_TOO_LONG, "$", "a number of sensible length", str(exc)[:80]
        )
    return _checked(value, text, offset)


def _checked(value: JSONValue, text: str, offset: int) -> Parsed | Unparsable:
    """NUL and lone surrogates, which a decoder reads without complaint."""
    # Cheap tests first: a NUL or lone surrogate needs an escape or a raw surrogate.
    if ("\\u" in text and _NUL_OR_SURROGATE_ESCAPE.search(text)) or (
        not text.isascii() and _SURROGATE.search(text)
    ):
        problem = _find_forbidden(value, text, offset)
        if problem is not None:
            return Unparsable(signal=problem)
    return new_parsed(value)


def _undecoded_byte(char: str) -> str:
    """How a byte that was not UTF-8 (``char``, from ``surrogateescape``) is named."""
    return f"byte 0x{ord(char) - 0xDC00:02X}, not valid UTF-8"


def _find_forbidden(value: JSONValue, text: str, offset: int) -> CorrectionSignal | None:
    """Walk a parsed value (iteratively) for NUL and lone surrogates in keys and strings.

    A byte that was not UTF-8 in the raw ``text`` is named as such, with its offset in
    the output (``offset`` is the text's), rather than as the surrogate it was decoded to.
    """
    byte = None if text.isascii() else _UNDECODED_BYTE.search(text)
    if byte is not None:
        char = byte.group()
        path, what = _first_holding(value, char)
        return CorrectionSignal(
            code=SignalCode.INVALID_UTF8,
            path=path,
            expected=f"a {what} of valid UTF-8",
            received=f"byte 0x{ord(char) - 0xDC00:02X} at offset {offset + byte.start()}",
        )
    stack: list[tuple[str, JSONValue]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                child_path = member_path(path, key)
                bad = _bad_string(child_path, key, "key")
                if bad is not None:
                    return bad
                stack.append((child_path, child))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(node))
        elif isinstance(node, str):
            bad = _bad_string(path, node, "string")
            if bad is not None:
                return bad
    return None


def _first_holding(value: JSONValue, char: str) -> tuple[str, str]:
    """The path of the first key or string, in document order, that holds ``char``, and
    which it is; ``("$", "string")`` when none does."""
    # (path, node, is_key): a key is looked at before its value, as it comes first.
    stack: list[tuple[str, JSONValue, bool]] = [("$", value, False)]
    while stack:
        path, node, is_key = stack.pop()
        if is_key:
            if char in node:
                return path, "key"
        elif isinstance(node, dict):
            for key, child in reversed(node.items()):
                child_path = member_path(path, key)
                stack.append((child_path, child, False))
                stack.append((child_path, key, True))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", node[i], False) for i in reversed(range(len(node))))
        elif isinstance(node, str) and char in node:
            return path, "string"
    return "$", "string"


def _bad_string(path: str, text: str, what: str) -> CorrectionSignal | None:
    if "\x00" in text:
        return CorrectionSignal(
            code=SignalCode.NUL_CHARACTER,
            path=path,
            expected=f"a {what} without NUL",
            received="\\u0000",
        )
    match = _SURROGATE.search(text)
    if match is not None:
        return CorrectionSignal(
            code=SignalCode.LONE_SURROGATE,
            path=path,
            expected=f"a {what} of valid Unicode",
            received=f"lone surrogate U+{ord(match.group()):04X}",
        )
    return None


def _unparsable(
    code: SignalCode, path: str, expected: str, received: str, *, detail: str = ""
) -> Unparsable:
    return Unparsable(
        signal=CorrectionSignal(
            code=code, path=path, expected=expected, received=received, detail=detail
        )
    )


def read_strict_document(
    raw: str, items_path: tuple[str, ...], count: int
) -> tuple[bool | None, Any, list[Any] | None]:
    """One compiled check of the whole output: its validity, and it parsed once.

    The verdict is what :func:`is_strict_document` would answer, or None when the check
    cannot tell (an escaped key, NUL, a surrogate, a big integer; or no compiled check).
    The document and its items come only when the text is proven strict with nothing
    an item parse would look at again (see :func:`read_items`); else None, None.
    """
    checked = speedups.check_strict(raw, 0, len(raw))
    verdict = _verdict(checked)
    if checked != speedups.STRICT_GRAMMAR:
        return verdict, None, None
    document, items = read_items(raw, items_path, count)
    return verdict, document, items


def read_items(raw: str, items_path: tuple[str, ...], count: int) -> tuple[Any, list[Any] | None]:
    """``raw`` parsed once with orjson, and its ``count`` items at ``items_path``.

    Only for a text ``check_strict`` proved strict with no flag left: each item is then
    exactly what :func:`parse_item` gives its span, and each envelope member what it
    gives the member's span. None, None when orjson refuses the text (1e999, deep
    nesting); the items are None when the list there does not hold ``count`` values.
    """
    try:
        document = node = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None
    for key in items_path:
        if not isinstance(node, dict):
            return document, None
        node = node.get(key)
    if not isinstance(node, list) or len(node) != count:
        return document, None
    return document, node


def _verdict(checked: int) -> bool | None:
    """What a compiled check's flags decide about a document; None: not enough."""
    if checked == speedups.STRICT_GRAMMAR:
        return True
    if checked == 0 or (checked > 0 and checked & speedups.DUPLICATE_KEY):
        return False  # not one strict value, or a key proven twice
    return None


def is_strict_document(raw: str, *, depth: int | None = None) -> bool:
    """True when ``raw``, less surrounding whitespace, is one RFC 8259 text with unique keys.

    The nesting is measured first (without parsing), unless the caller's scan
    already did (``depth``); deep documents go to the iterative validator so
    that no parser recursion depends on the input.
    """
    verdict = _verdict(speedups.check_strict(raw, 0, len(raw)))
    if verdict is not None:
        return verdict
    text = raw.strip(lexis.WHITESPACE)
    if not text or _SURROGATE.search(text):
        return False
    if depth is None and text[0] in "{[":
        end, closure, depth = bracket_extent(text, 0)
        if closure is not Closure.CLOSED or end != len(text):
            return False
    if (depth or 0) <= _PARSER_DEPTH_LIMIT:
        try:
            _GRAMMAR_DECODER.decode(text)
        except (_DuplicateKey, _NonFiniteConstant, json.JSONDecodeError):
            return False
        except (ValueError, RecursionError):
            return validate_iteratively(text)
        return True
    return validate_iteratively(text)


class _Expect(enum.IntEnum):
    """What the iterative validator accepts next."""

    VALUE = 0
    VALUE_OR_CLOSE = 1
    KEY = 2
    KEY_OR_CLOSE = 3
    COLON = 4
    COMMA_OR_CLOSE = 5
    END = 6


# Aliases, compared with `is`: the loop runs once per token, and `==` on an IntEnum goes
# through a Python-level __eq__ (6-14% of the validator), an attribute lookup costs more
# than a global load.
_VALUE, _VALUE_OR_CLOSE = _Expect.VALUE, _Expect.VALUE_OR_CLOSE
_KEY, _KEY_OR_CLOSE, _COLON = _Expect.KEY, _Expect.KEY_OR_CLOSE, _Expect.COLON
_COMMA_OR_CLOSE, _END = _Expect.COMMA_OR_CLOSE, _Expect.END


def validate_iteratively(text: str) -> bool:
    """RFC 8259 grammar plus unique keys, with an explicit stack: any depth, no recursion."""
    stack: list[set[str] | None] = []  # a set of seen keys per object, None per array
    expect = _VALUE
    pos = 0
    while True:
        match = lexis.TOKEN.match(text, pos)
        if match is None:
            return expect is _END and lexis.skip_ws(text, pos) == len(text)
        pos = match.end()
        kind = match.lastgroup
        token = match.group(kind or 0)
        if expect is _END:
            return False
        if expect is _VALUE or expect is _VALUE_OR_CLOSE:
            if token == "]" and expect is _VALUE_OR_CLOSE:
                stack.pop()
            elif token == "{":
                stack.append(set())
                expect = _KEY_OR_CLOSE
                continue
            elif token == "[":
                stack.append(None)
                expect = _VALUE_OR_CLOSE
                continue
            elif kind == "punct":
                return False
        elif expect is _KEY or expect is _KEY_OR_CLOSE:
            top = stack[-1]
            if token == "}" and expect is _KEY_OR_CLOSE:
                stack.pop()
            elif kind == "string" and top is not None:
                key = json.loads(token)
                if key in top:
                    return False
                top.add(key)
                expect = _COLON
                continue
            else:
                return False
        elif expect is _COLON:
            if token != ":":
                return False
            expect = _VALUE
            continue
        else:  # _COMMA_OR_CLOSE
            top = stack[-1]
            if token == ",":
                expect = _KEY if top is not None else _VALUE
                continue
            if (token == "}" and top is not None) or (token == "]" and top is None):
                stack.pop()
            else:
                return False
        expect = _COMMA_OR_CLOSE if stack else _END


def member_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def describe(value: JSONValue, limit: int = 60) -> str:
    """A short, JSON-encoded rendering of a received value for correction signals."""
    if type(value) is int:  # a rank, a count: the one kind every over_limit names
        text = str(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
