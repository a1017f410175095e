"""The one module that reads the process environment.

Secrets (API keys, and URLs named by ``base_url_env`` or ``url_env``) are read here, at
call time, by name. Errors name the variable, never a value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from salvagelane.errors import ConfigurationError, ConnectorError
from salvagelane.logs import register_secret, register_url


def api_key(name: str) -> str:
    """The API key held by environment variable ``name``; ConnectorError when unset or blank."""
    value = os.environ.get(name)
    if value is None:
        raise ConnectorError(
            f"environment variable {name} is not set: it must hold the connector's API key"
        )
    if not value.strip():
        raise ConnectorError(
            f"environment variable {name} is empty: it must hold the connector's API key"
        )
    secret = value.strip()
    # Every secret read here is scrubbed from log lines from now on, wherever it turns up.
    register_secret(secret)
    if not _PRINTABLE_ASCII.fullmatch(secret):
        # An HTTP header carries printable ASCII only: sent, such a key fails in the
        # client with the header quoted (escaped, past a scrub of the raw value) or
        # crashes on the encoding. Refused here, naming the variable, never the value.
        raise ConnectorError(
            f"environment variable {name} holds a control character or a non-ASCII "
            "character: an API key or token is printable ASCII (check how it was set, "
            "e.g. a newline from a file or a pasted quote)"
        )
    return secret


_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")


def variable_state(name: str) -> Literal["set", "empty", "not set"]:
    """Whether environment variable ``name`` holds something, for ``check``'s warnings:
    the value itself is never returned, so nothing can print it."""
    value = os.environ.get(name)
    if value is None:
        return "not set"
    return "set" if value.strip() else "empty"


def url(name: str, what: str) -> str:
    """The http(s) URL held by environment variable ``name``, which must hold ``what``
    (e.g. "the connector's base URL"); ConnectorError when unset, blank or not such a URL.

    The URL is treated as a secret as a whole (a webhook URL often is its own token):
    it, its userinfo, its secret-named query values and its long path segments are
    scrubbed from every later log line and error, and it is shown by the variable's
    name only.
    """
    value = os.environ.get(name)
    if value is None:
        raise ConnectorError(f"environment variable {name} is not set: it must hold {what}")
    value = value.strip()
    if not value:
        raise ConnectorError(f"environment variable {name} is empty: it must hold {what}")
    register_url(value, whole=True)
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise ConnectorError(
            f"environment variable {name}: expected {what}, an http:// or https:// URL, "
            "got a value that is not one (not shown: it may hold a secret)"
        )
    return value


def secret(name: str, what: str) -> str:
    """The secret held by environment variable ``name``, which must hold ``what`` (e.g.
    "the SMTP password"); ConfigurationError, naming the variable only, when unset or
    blank. It is scrubbed from every later log line and error."""
    value = os.environ.get(name, "").strip()
    if not value:
        state = "is not set" if name not in os.environ else "is empty"
        raise ConfigurationError(f"environment variable {name} {state}: it must hold {what}")
    register_secret(value)
    return value


def review_url() -> str | None:
    """``SALVAGELANE_REVIEW_URL``: where the review page is served, for the links in
    notifications (e.g. ``https://review.internal``); None when unset."""
    value = os.environ.get("SALVAGELANE_REVIEW_URL", "").strip()
    return value.rstrip("/") or None


DEFAULT_DATABASE_URL = "sqlite:///salvagelane.db"
"""A SQLite file in the working directory: the embedded default."""


def database_url(explicit: str | None = None) -> str:
    """The database to use: ``explicit`` (``--database``), else ``SALVAGELANE_DATABASE_URL``,
    else :data:`DEFAULT_DATABASE_URL`."""
    if explicit:
        return explicit
    return os.environ.get("SALVAGELANE_DATABASE_URL", "").strip() or DEFAULT_DATABASE_URL


def log_format() -> str | None:
    """``json`` or ``console`` from ``SALVAGELANE_LOG_FORMAT``; None lets the terminal decide."""
    value = os.environ.get("SALVAGELANE_LOG_FORMAT", "").strip().lower()
    return value or None


SPOOL_DIR_NAME = "salvagelane-spool"


def spool_dir(database: str) -> Path:
    """Where model outputs the database could not take are spooled for ``database``:
    ``SALVAGELANE_SPOOL_DIR`` when set; else a ``salvagelane-spool/`` directory beside a
    SQLite database file (the same disk and permissions as the database); else (PostgreSQL,
    an in-memory SQLite) ``$XDG_STATE_HOME/salvagelane/spool``, by default
    ``~/.local/state/salvagelane/spool``."""
    explicit = os.environ.get("SALVAGELANE_SPOOL_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser().resolve()
    from sqlalchemy.engine import make_url  # only here: the rest of this module is stdlib
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database)
    except (ArgumentError, ValueError):  # a port that is not a number, an unclosed "["
        url = None
    if (
        url is not None
        and url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
    ):
        return Path(url.database or "").resolve().parent / SPOOL_DIR_NAME
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    # The XDG spec: a relative $XDG_STATE_HOME is invalid and ignored.
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "salvagelane" / "spool"


def ui_token() -> str | None:
    """The review page's access token from ``SALVAGELANE_UI_TOKEN``; None when unset or
    blank (``salvagelane ui`` then makes one up). Registered as a secret: log lines never
    show it."""
    value = os.environ.get("SALVAGELANE_UI_TOKEN", "").strip()
    if not value:
        return None
    register_secret(value)
    return value


def secret_looking(is_secret: Callable[[str], bool], *, min_length: int) -> dict[str, str]:
    """The variables whose name ``is_secret`` calls a secret's (``*_API_KEY``, ``*_TOKEN``)
    and whose value is at least ``min_length`` characters, stripped: what a fixture must
    never contain."""
    return {
        name: value.strip()
        for name, value in os.environ.items()
        if is_secret(name) and len(value.strip()) >= min_length
    }
