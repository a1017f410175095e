"""The one module that reads the process environment.

Secrets (API keys) are read here, at call time, by name. Errors name the variable,
never a value.
"""

from __future__ import annotations

import os

from salvagelane.errors import ConnectorError


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
    return value.strip()
