"""Compiled JSON lexical patterns shared by the scanner, the strict checks and repair.

Every pattern is possessive or atomic, so matching is linear in the text it
covers: no input can make the regex engine backtrack.
"""

from __future__ import annotations

import re

WHITESPACE = " \t\n\r"
"""RFC 8259 insignificant whitespace; nothing else counts (no NBSP, no form feed)."""

STRING_BODY = r'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+'

WS_RUN = re.compile(r"[ \t\n\r]*+")

STRING_PREFIX_TO_END = re.compile('"' + STRING_BODY + r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?\Z")
"""A string cut off by the end of the text: every character so far is legal."""

STRICT_STRING_PREFIX = re.compile('"' + STRING_BODY)
"""Always matches: up to the closing quote, or to where a strict string fails."""

LENIENT_STRING_PREFIX = re.compile(r'"(?:[^"\\\n]++|\\[^\n])*+')
"""Always matches: up to the closing quote of a string that may hold bad escapes or
control characters, or to the newline (or end of text) where it cannot close."""

RAW_TO_BRACKET = re.compile(r"[^{}\[\]]*+")
"""Up to the next bracket, quotes being plain text (inside a dead-quote region)."""

NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][+-]?+[0-9]++)?+")

TOKEN = re.compile(
    r"[ \t\n\r]*+(?:"
    r'(?P<string>"' + STRING_BODY + '")'
    r"|(?P<number>" + NUMBER.pattern + ")"
    r"|(?P<literal>true|false|null)"
    r"|(?P<punct>[{}\[\],:]))"
)
"""One strict JSON token after optional whitespace; the group named by ``lastgroup``
says which kind (string, number, literal, punct)."""

OBJECT_WITH_MEMBER = re.compile(r'\{[ \t\n\r]*+"(?:[^"\\\n]|\\.)*+"[ \t\n\r]*+:')
"""`{` and a member name: what an item looks like, as opposed to braces in prose."""

WORD = re.compile(r"[A-Za-z0-9_.+\-]++")
"""A run that looks like a bare token: literals, numbers and junk such as NaN."""

SKIP_TO_BRACKET = re.compile(r'(?:[^"{}\[\]]++|"' + STRING_BODY + '")*+')
"""Everything up to the next bracket or quote that is not inside a well-formed string."""


def _nested(levels: int) -> str:
    """Content of a container that may nest ``levels`` more containers, strings skipped."""
    alternatives = [r'[^"{}\[\]]++', '"' + STRING_BODY + '"']
    if levels:
        inner = _nested(levels - 1)
        alternatives += [r"\{" + inner + r"\}", r"\[" + inner + r"\]"]
    return "(?:" + "|".join(alternatives) + ")*+"


SHALLOW_CONTAINERS = tuple(
    re.compile(r"\{" + _nested(depth - 1) + r"\}|\[" + _nested(depth - 1) + r"\]")
    for depth in (1, 2, 3)
)
"""Whole objects or arrays nesting at most 1, 2, 3 levels, with well-formed strings.

Capture-free on purpose: CPython's re mis-tracks groups inside possessive
repeats (SystemError), so the depth is told by which pattern matches.
"""


LITERALS = ("true", "false", "null")


def item_anchor(raw_key: str) -> re.Pattern[str]:
    """The signature of an item start: ``{`` then the key every item opens with."""
    return re.compile(r"\{[ \t\n\r]*+" + re.escape(raw_key) + r"[ \t\n\r]*+:")


def skip_to_bracket(text: str, pos: int, bound: int) -> int:
    match = SKIP_TO_BRACKET.match(text, pos, bound)
    return match.end() if match else pos


def container_end(text: str, start: int, bound: int) -> tuple[int, int] | None:
    """``(end, depth)`` of the well-formed container opening at ``start`` and closed
    before ``bound``, at any depth; None if there is none (the reference of the compiled
    ``match_container``)."""
    opener = text[start] if start < bound else ""
    if opener not in ("{", "["):
        return None
    stack = [opener]
    depth = 1
    pos = start + 1
    while True:
        pos = skip_to_bracket(text, pos, bound)
        if pos >= bound or text[pos] == '"':
            return None  # not closed before bound, or a string that is not well formed
        char = text[pos]
        if char == "{" or char == "[":
            stack.append(char)
            depth = max(depth, len(stack))
        elif stack.pop() != ("{" if char == "}" else "["):
            return None
        elif not stack:
            return pos + 1, depth
        pos += 1


def skip_ws(text: str, pos: int) -> int:
    if pos >= len(text) or text[pos] not in WHITESPACE:
        return pos  # the usual case in compact output: no regex call
    match = WS_RUN.match(text, pos)
    return match.end() if match else pos


def last_non_ws(text: str, pos: int) -> int:
    """The offset of the last non-whitespace character before ``pos``, or -1."""
    pos -= 1
    while pos >= 0 and text[pos] in WHITESPACE:
        pos -= 1
    return pos
