"""The one module that reads the process environment.

Secrets (API keys) are read here, at call time, by name. Errors name the variable,
never a value.
"""

from __future__ import annotations

import os

from salvagelane.errors import ConnectorError
from salvagelane.logs import register_secret


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
    return secret


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
