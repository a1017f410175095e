"""salvagelane: salvage every intact item from broken LLM output; quarantine the rest."""

from __future__ import annotations

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
