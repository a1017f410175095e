"""The pure salvage core: no I/O, no clock, no environment."""

from __future__ import annotations

from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.core.guardrails import Guardrails
from salvagelane.core.records import (
    AcceptedItem,
    Coercion,
    CorrectionSignal,
    EnvelopeIssue,
    QuarantinedItem,
    Reason,
    SalvageResult,
    Span,
    Status,
)
from salvagelane.core.salvage import SalvagePolicy, check_item, salvage
from salvagelane.core.scanner import ItemsPath, ScanResult, parse_items_path, scan
from salvagelane.core.schema import ItemSchema
from salvagelane.core.strict import is_strict_document

__all__ = [
    "AcceptedItem",
    "Coercion",
    "CorrectionSignal",
    "EnvelopeIssue",
    "FinishReason",
    "Guardrails",
    "ItemSchema",
    "ItemsPath",
    "QuarantinedItem",
    "Reason",
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
