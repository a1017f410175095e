"""The scanner's values: item candidates, envelope fields, anomalies and the scan result."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from salvagelane.core.records import Span
from salvagelane.core.speedups import builder

ItemsPath = tuple[str, ...]
"""Keys from the document root to the items array; empty: the document is the array."""


class Closure(enum.StrEnum):
    """How a scanned value ended."""

    CLOSED = "closed"  # reached its own end; may still be malformed inside
    TRUNCATED = "truncated"  # the text ended while the value was open
    BROKEN = "broken"  # the scanner saw damage it had to step over or cut at


class AnomalyKind(enum.StrEnum):
    """Structure the scanner tolerated; the value is the word the result's notes show."""

    LEADING_TEXT = "leading_text"  # text before the report
    TRAILING_TEXT = "trailing_text"  # text after the report
    MISSING_COMMA = "missing_comma"
    TRAILING_COMMA = "trailing_comma"
    EXTRA_COMMA = "extra_comma"
    MISSING_COLON = "missing_colon"
    SKIPPED_TEXT = "skipped_text"  # damage between envelope members, stepped over
    ITEMS_AFTER_REPORT = "items_after_report"  # the list was closed early by damage
    STRAY_BRACKET = "stray_bracket"
    STRAY_BRACE = "stray_brace"
    UNCLOSED_ITEMS = "unclosed_items"  # the envelope went on without closing the list


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One item candidate inside the items container."""

    index: int
    span: Span
    closure: Closure
    depth: int  # containers nested in the span; the item object itself is 1
    defect: str = ""  # what the scanner saw, for the correction signal
    stray: bool = False  # text between items that does not start a JSON value

    @property
    def complete(self) -> bool:
        return self.closure is Closure.CLOSED


new_candidate = builder(Candidate, "index", "span", "closure", "depth", "defect", "stray")
"""``Candidate(...)`` by position, for the items loop that builds one per item."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvelopeField:
    """A member of the root object (or of an object on the items path)."""

    path: tuple[str, ...]
    span: Span
    closure: Closure
    depth: int
    defect: str = ""
    conflict: str = ""  # why this member cannot be taken as the envelope's value


new_envelope_field = builder(
    EnvelopeField, "path", "span", "closure", "depth", "defect", "conflict"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Anomaly:
    """Structure the scanner tolerated: worth a note, costs no item."""

    kind: AnomalyKind
    span: Span


@dataclass(frozen=True, kw_only=True, slots=True)
class ScanResult:
    items_path: ItemsPath
    root: Span | None
    container: Span | None
    container_closed: bool
    candidates: tuple[Candidate, ...]
    envelope: tuple[EnvelopeField, ...]
    truncated: bool
    anomalies: tuple[Anomaly, ...]
    steps: int

    @property
    def items_found(self) -> bool:
        return self.container is not None


def parse_items_path(dotted: str) -> ItemsPath:
    """``"data.items"`` -> ``("data", "items")``; ``""`` -> ``()``."""
    dotted = dotted.strip()
    if not dotted:
        return ()
    return tuple(dotted.split("."))


new_scan_result = builder(
    ScanResult,
    "items_path",
    "root",
    "container",
    "container_closed",
    "candidates",
    "envelope",
    "truncated",
    "anomalies",
    "steps",
)
