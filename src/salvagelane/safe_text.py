"""The one way untrusted text reaches a terminal: control characters as visible escapes.

Model output, provider responses, fixtures, sink errors and what an operator or a model
wrote into the database can all carry terminal control sequences: OSC 52 writes the
clipboard, ``ESC[2J`` clears the screen, ``\\r`` rewrites the line, U+009B is an 8-bit CSI
and U+202E reverses the text after it. Every human-facing view prints such text through
:func:`line`, :func:`one_line` or :func:`block`, whether stdout is a terminal or not (a
pipe ends at ``less -R`` or a terminal as often as at a file). ``--json`` output is for
machines and stays as :func:`json.dumps` writes it.

The escapes are for reading, not for reversing: a backslash in the text is left as it
is, so ``\\x1b`` may have been typed by the model. The exact text is in ``--json``, and
``runs show --raw N`` writes the stored bytes to a file or a pipe.
"""

from __future__ import annotations

import re

__all__ = ["UNSAFE", "block", "escape", "line", "one_line"]

UNSAFE = re.compile(
    # C0 controls (ESC starts every escape sequence, BEL ends an OSC), DEL, C1 controls
    # (U+009B is a CSI of its own on a terminal that takes 8-bit controls) ...
    "[\x00-\x1f\x7f-\x9f"
    # ... the invisible characters that reorder the text around them (bidirectional
    # marks, embeddings, overrides and isolates), the Unicode line and paragraph
    # separators, and lone surrogates: bytes that were not UTF-8, which a
    # surrogateescape stream would write back raw.
    "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""Every character a view shows as an escape (:func:`block` keeps newline and tab)."""

_UNSAFE_IN_A_BLOCK = re.compile(UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every :data:`UNSAFE` character, newline and tab included, as an
    escape: ``\\x1b``, ``\\r``, ``\\u202e``."""
    return UNSAFE.sub(_escaped, text)


def line(text: str) -> str:
    """Untrusted ``text`` as part of one terminal line, every character kept: a newline
    shows as ``\\n``, so the text cannot start a line of its own (a fake log line, a fake
    table row)."""
    return escape(text)


_LAYOUT = re.compile("[ \t\n]+")


def one_line(text: str, width: int | None = None) -> str:
    """Untrusted ``text`` (model output, a server's error body) fit for one terminal
    line: runs of spaces, tabs and newlines as one space (a snippet of indented JSON stays
    readable), every other control and direction character as an escape (``\x1b``,
    ``\r``), at most ``width`` characters."""
    flat = escape(_LAYOUT.sub(" ", text).strip(" "))
    return flat if width is None or len(flat) <= width else flat[: width - 1] + "…"


def block(text: str) -> str:
    """Untrusted multi-line ``text`` (the raw output around a quarantined item): newlines
    and tabs kept, every other control character escaped, ``\\r`` included (it would
    rewrite the line it ends)."""
    return _UNSAFE_IN_A_BLOCK.sub(_escaped, text)
