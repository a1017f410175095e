"""salvagelane: salvage every intact item from broken LLM output; quarantine the rest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from salvagelane.core import (
        Guardrails,
        ItemSchema,
        Reason,
        SalvagePolicy,
        SalvageResult,
        Status,
        salvage,
    )

__version__ = "0.1.0"

_CORE = frozenset(
    {"Guardrails", "ItemSchema", "Reason", "SalvagePolicy", "SalvageResult", "Status", "salvage"}
)


def __getattr__(name: str) -> Any:
    if name in _CORE:
        return getattr(importlib.import_module("salvagelane.core"), name)
    raise AttributeError(f"module 'salvagelane' has no attribute {name!r}")


__all__ = [
    "Guardrails",
    "ItemSchema",
    "Reason",
    "SalvagePolicy",
    "SalvageResult",
    "Status",
    "__version__",
    "salvage",
]
