"""Named reviewers: one token per reviewer, from a file ``salvagelane ui --reviewers``
reads (docs/guides/review.md).

The file holds one ``name:token`` a line; blank lines and lines starting with ``#`` are
skipped. A name is 1 to 64 letters, digits, spaces and ``._@+-`` (starting with a letter
or digit); a token is 16 to 256 URL-safe characters (``A-Z a-z 0-9 - _ . ~``), as
``python -c 'import secrets; print(secrets.token_urlsafe(24))'`` makes one. Names and
tokens are unique. The file is a secret: it must be a regular file that neither its
group nor others may read or write (``chmod 600``).

Only the SHA-256 of each token is kept in memory, and errors name the file and the line
number, never a token.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from salvagelane.errors import ConfigurationError

MAX_FILE_BYTES = 1 << 20
"""The largest reviewers file read (a team's file is a few hundred bytes)."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._@+-]{0,63}")
TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,256}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Reviewer:
    """A reviewer: ``name`` (the actor of every audit row they make) and the SHA-256 of
    their token, never the token."""

    name: str
    digest: bytes


def token_digest(token: str) -> bytes:
    """What is kept of a token, and what a presented one is compared with."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_reviewers(text: str, *, source: str) -> tuple[Reviewer, ...]:
    """The reviewers ``text`` names (``name:token`` lines); ConfigurationError naming
    ``source`` and the line for anything else, or for a file with no reviewer."""
    found: list[Reviewer] = []
    names: dict[str, int] = {}
    digests: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        name, colon, token = entry.partition(":")
        name, token = name.strip(), token.strip()
        where = f"{source}, line {number}"
        if not colon:
            raise ConfigurationError(f"{where}: expected name:token (the line has no colon)")
        if not NAME.fullmatch(name):
            raise ConfigurationError(
                f"{where}: expected a reviewer name of 1 to 64 letters, digits, spaces or "
                "._@+- starting with a letter or digit"
            )
        if not TOKEN.fullmatch(token):
            # Never the token itself: the message may end up in a log.
            raise ConfigurationError(
                f"{where}: the token of {name} is not 16 to 256 URL-safe characters "
                "(A-Z a-z 0-9 - _ . ~); make one with "
                "python -c 'import secrets; print(secrets.token_urlsafe(24))'"
            )
        if name.casefold() in names:
            raise ConfigurationError(
                f"{where}: reviewer {name} is named again (first on line {names[name.casefold()]})"
            )
        digest = token_digest(token)
        if digest in digests:
            raise ConfigurationError(
                f"{where}: the token of {name} is the one of line {digests[digest]}: "
                "every reviewer needs a token of their own"
            )
        names[name.casefold()] = number
        digests[digest] = number
        found.append(Reviewer(name=name, digest=digest))
    if not found:
        raise ConfigurationError(f"{source}: expected at least one name:token line, found none")
    return tuple(found)


def load_reviewers(path: Path) -> tuple[Reviewer, ...]:
    """The reviewers of the file at ``path``: a regular file, of at most
    :data:`MAX_FILE_BYTES`, UTF-8, readable and writable by its owner only on POSIX;
    ConfigurationError (exit 2) otherwise."""
    source = f"reviewers file {path}"
    try:
        # O_NONBLOCK: a FIFO in its place is refused below instead of waiting for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as exc:
        raise ConfigurationError(f"{source}: no such file") from exc
    except OSError as exc:
        raise ConfigurationError(f"{source}: cannot be read: {exc.strerror}") from exc
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ConfigurationError(f"{source}: expected a regular file")
        if os.name == "posix" and status.st_mode & 0o077:
            raise ConfigurationError(
                f"{source}: its group or others may read or write it (mode "
                f"{stat.S_IMODE(status.st_mode):04o}): it holds tokens; chmod 600 it"
            )
        with os.fdopen(fd, "rb", closefd=False) as opened:
            data = opened.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigurationError(f"{source}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{source}: not UTF-8 text (byte {exc.start})") from exc
    return parse_reviewers(text, source=source)
