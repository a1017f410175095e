"""The pure salvage core: no I/O, no clock, no environment.

Its names are imported on first use (PEP 562), as the package root does: the store
needs only ``core.records``, and a command that opens the store (``runs list``,
``quarantine list``) must not pay for jsonschema, which the guardrails import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ imports on demand
    from salvagelane.core.assembly import SalvagePolicy, check_item, salvage
    from salvagelane.core.finish import FinishReason, canonical_finish_reason
    from salvagelane.core.framing import Framing
    from salvagelane.core.guardrails import Guardrails
    from salvagelane.core.lossless import AcceptRepairs
    from salvagelane.core.records import (
        AcceptedItem,
        Coercion,
        CorrectionSignal,
        EnvelopeIssue,
        QuarantinedItem,
        Reason,
        Repair,
        SalvageResult,
        Span,
        Status,
    )
    from salvagelane.core.scanner import ItemsPath, ScanResult, parse_items_path, scan
    from salvagelane.core.schema import ItemSchema
    from salvagelane.core.strict import is_strict_document

_EXPORTS: dict[str, str] = {
    "FinishReason": "salvagelane.core.finish",
    "canonical_finish_reason": "salvagelane.core.finish",
    "Framing": "salvagelane.core.framing",
    "Guardrails": "salvagelane.core.guardrails",
    "AcceptRepairs": "salvagelane.core.lossless",
    "AcceptedItem": "salvagelane.core.records",
    "Coercion": "salvagelane.core.records",
    "CorrectionSignal": "salvagelane.core.records",
    "EnvelopeIssue": "salvagelane.core.records",
    "QuarantinedItem": "salvagelane.core.records",
    "Reason": "salvagelane.core.records",
    "Repair": "salvagelane.core.records",
    "SalvageResult": "salvagelane.core.records",
    "Span": "salvagelane.core.records",
    "Status": "salvagelane.core.records",
    "SalvagePolicy": "salvagelane.core.assembly",
    "check_item": "salvagelane.core.assembly",
    "salvage": "salvagelane.core.assembly",
    "ItemsPath": "salvagelane.core.scanner",
    "ScanResult": "salvagelane.core.scanner",
    "parse_items_path": "salvagelane.core.scanner",
    "scan": "salvagelane.core.scanner",
    "ItemSchema": "salvagelane.core.schema",
    "is_strict_document": "salvagelane.core.strict",
}
"""Name -> the module that defines it."""

__all__ = [
    "AcceptRepairs",
    "AcceptedItem",
    "Coercion",
    "CorrectionSignal",
    "EnvelopeIssue",
    "FinishReason",
    "Framing",
    "Guardrails",
    "ItemSchema",
    "ItemsPath",
    "QuarantinedItem",
    "Reason",
    "Repair",
    "SalvagePolicy",
    "SalvageResult",
    "ScanResult",
    "Span",
    "Status",
    "canonical_finish_reason",
    "check_item",
    "is_strict_document",
    "parse_items_path",
    "salvage",
    "scan",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'salvagelane.core' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # looked up once: the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
