"""Callables an instruction definition can name as a context source (``module:function``).

A context callable takes keyword arguments (the definition's ``args``) and
returns JSON-compatible data, which becomes a template variable.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo


def today(timezone: str = "UTC") -> str:
    """Today's date in ``timezone``, as ISO 8601 (``2026-11-21``)."""
    return datetime.now(ZoneInfo(timezone)).date().isoformat()
