"""Best-effort repair of a truncated item, for the operator's eyes only.

The repair closes an open value string (dropping a half-written escape) or
cuts back to the last complete member, then closes the open brackets. Its
result is attached to the quarantine record and never accepted: a cut-off
value that happens to validate is still corrupt data.
"""

from __future__ import annotations

import re

from salvagelane.core import lexis
from salvagelane.core.records import JSONValue
from salvagelane.core.strict import Parsed, parse_item

# An escape cut in half: a backslash that is not itself escaped, maybe with \u and 0-3 digits.
_HALF_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*+)\\(?:u[0-9a-fA-F]{0,3})?\Z")

_AFTER_NUMBER = frozenset(" \t\n\r,]}")
_KEY, _COLON, _VALUE, _COMMA = range(4)


def repair_truncated(text: str) -> JSONValue | None:
    """Return the parsed repair of a cut-off object or array, or None if there is none."""
    stack: list[list[str | int]] = []  # [opener, state] per open container
    safe_pos, safe_depth = -1, 0
    pos = 0
    while True:
        match = lexis.TOKEN.match(text, pos)
        if match is None:
            break
        pos = match.end()
        kind = match.lastgroup
        token = match.group(kind or 0)
        if token in ("{", "["):
            if stack:
                if stack[-1][1] != _VALUE:
                    return None
                stack[-1][1] = _COMMA
            stack.append([token, _KEY if token == "{" else _VALUE])
            safe_pos, safe_depth = pos, len(stack)
            continue
        if not stack:
            return None
        top = stack[-1]
        opener, state = top
        if token in ("}", "]"):
            matching = "{" if token == "}" else "["
            if opener != matching or state in (_COLON,) or (state == _VALUE and opener == "{"):
                return None
            stack.pop()
            if not stack:
                return None  # the item closed: nothing was cut
            safe_pos, safe_depth = pos, len(stack)
        elif token == ",":
            if state != _COMMA:
                return None
            top[1] = _KEY if opener == "{" else _VALUE
        elif token == ":":
            if state != _COLON:
                return None
            top[1] = _VALUE
        elif opener == "{" and state == _KEY:
            if kind != "string":
                return None
            top[1] = _COLON
        elif state == _VALUE:
            top[1] = _COMMA
            # A number is complete only once a delimiter follows it: "12." or "1e" are cut.
            if kind != "number" or (pos < len(text) and text[pos] in _AFTER_NUMBER):
                safe_pos, safe_depth = pos, len(stack)
        else:
            return None
    rest_start = lexis.skip_ws(text, pos)
    rest = text[rest_start:]
    if stack and stack[-1][1] == _VALUE and lexis.STRING_PREFIX_TO_END.match(rest):
        closed = _HALF_ESCAPE.sub(r"\1", rest) + '"'
        repaired = text[:rest_start] + closed + _closers(stack, len(stack))
    elif safe_pos >= 0:
        repaired = text[:safe_pos] + _closers(stack, safe_depth)
    else:
        return None
    parsed = parse_item(repaired)
    return parsed.value if isinstance(parsed, Parsed) else None


def _closers(stack: list[list[str | int]], depth: int) -> str:
    return "".join("}" if entry[0] == "{" else "]" for entry in reversed(stack[:depth]))
