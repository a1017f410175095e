"""Values produced by the salvage core: spans, reasons, correction signals, results.

Everything here is a frozen, keyword-only dataclass or an enum, so a result can
be passed around, compared and serialised without anyone mutating it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from salvagelane.core.speedups import builder

JSONValue = Any
"""A value produced by strict JSON parsing (dict, list, str, int, float, bool, None)."""


DEFAULT_MAX_QUARANTINED = 1000
"""Quarantine records kept per output by default (``Guardrails.max_quarantined``); past
it the rest are folded: counted by reason, with no record."""


class Reason(enum.StrEnum):
    """Why a candidate was quarantined. The order is the guardrail order."""

    OVERSIZE = "oversize"
    TOO_DEEP = "too_deep"
    TOO_LONG = "too_long"
    TRUNCATED = "truncated"
    MALFORMED = "malformed"
    NOT_OBJECT = "not_object"
    SCHEMA = "schema"
    ALLOW_LIST = "allow_list"
    OVER_LIMIT = "over_limit"


class SignalCode(enum.StrEnum):
    """The codes of the correction signals the core's own checks give.

    A schema violation's code is the JSON Schema keyword that failed (``type``,
    ``required``, ...), an open set: ``CorrectionSignal.code`` is therefore a ``str``
    that is one of these or a keyword.
    """

    OVERSIZE = "oversize"
    TOO_DEEP = "too_deep"
    TOO_LONG = "too_long"
    TRUNCATED = "truncated"
    DAMAGED = "damaged"  # the scanner stepped over damage inside the item
    STRAY_TEXT = "stray_text"  # text between items that is no JSON value
    SYNTAX = "syntax"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE = "non_finite"
    NUMBER_TOO_LONG = "number_too_long"
    INVALID_UTF8 = "invalid_utf8"
    NUL_CHARACTER = "nul_character"
    LONE_SURROGATE = "lone_surrogate"
    NOT_OBJECT = "not_object"
    NOT_ALLOWED = "not_allowed"
    OVER_LIMIT = "over_limit"
    AMBIGUOUS = "ambiguous"  # a value with more than one reading, refused by coercion


class Status(enum.StrEnum):
    """How usable a salvage result is, as a whole."""

    OK = "ok"  # every candidate accepted, nothing truncated
    PARTIAL = "partial"  # some items usable, something quarantined or cut off
    FAILED = "failed"  # nothing usable: total loss, never reported as partial


@dataclass(frozen=True, kw_only=True, slots=True)
class Span:
    """Half-open character offsets ``[start, end)`` into the raw model text."""

    start: int
    end: int

    def text(self, raw: str) -> str:
        return raw[self.start : self.end]

    def to_json(self) -> list[int]:
        return [self.start, self.end]


new_span = builder(Span, "start", "end")
"""``Span(start=, end=)`` by position, for the loops that build one per item."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CorrectionSignal:
    """A structured error a retry prompt can use: what, where, expected, received."""

    code: SignalCode | str  # a JSON Schema keyword when the schema failed
    path: str
    expected: str
    received: str
    detail: str = ""

    def message(self, reason: Reason | str) -> str:
        text = f"{reason} at {self.path}: expected {self.expected}, received {self.received}"
        return f"{text} ({self.detail})" if self.detail else text

    def to_json(self) -> dict[str, str]:
        data = {
            "code": str(self.code),
            "path": self.path,
            "expected": self.expected,
            "received": self.received,
        }
        if self.detail:
            data["detail"] = self.detail
        return data


new_signal = builder(CorrectionSignal, "code", "path", "expected", "received", "detail")
"""``CorrectionSignal(...)`` by position, for signals built one per item."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Coercion:
    """One ambiguous scalar normalised to the schema's type; never silent."""

    path: str
    original: JSONValue
    value: JSONValue
    rule: str

    def to_json(self) -> dict[str, JSONValue]:
        return {"path": self.path, "from": self.original, "to": self.value, "rule": self.rule}


class RepairKind(enum.StrEnum):
    """The defects a lossless repair removes: each has exactly one reading."""

    TRAILING_COMMA = "trailing_comma"  # a comma before the "}" or "]" that closes
    COMMENT = "comment"  # a // or /* */ comment outside strings, removed
    SINGLE_QUOTE = "single_quote"  # a 'string' written with double quotes
    PYTHON_LITERAL = "python_literal"  # True, False or None written as JSON's literal
    RAW_CONTROL = "raw_control"  # a raw control character in a string, escaped
    BARE_KEY = "bare_key"  # an identifier key, quoted


@dataclass(frozen=True, kw_only=True, slots=True)
class Repair:
    """One defect removed from an item's text by a lossless repair; never silent.

    ``at`` is the offset of the removed text in the raw output, as spans count.
    """

    kind: RepairKind
    at: int

    def to_json(self) -> dict[str, JSONValue]:
        return {"kind": str(self.kind), "at": self.at}


@dataclass(frozen=True, kw_only=True, slots=True)
class AcceptedItem:
    """An item that passed every guardrail.

    ``data`` comes from intact model text, or, when ``repairs`` is not empty, from
    that text with exactly those lossless repairs made (an opt-in policy); the JSON
    form carries ``repairs`` only then, so an item without any reads as before.
    """

    index: int
    data: JSONValue
    span: Span
    coercions: tuple[Coercion, ...] = ()
    repairs: tuple[Repair, ...] = ()

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {
            "index": self.index,
            "data": self.data,
            "span": self.span.to_json(),
            "coercions": [c.to_json() for c in self.coercions],
        }
        if self.repairs:
            data["repairs"] = [r.to_json() for r in self.repairs]
        return data


_NO_REPAIR: Any = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantinedItem:
    """A rejected candidate, with the provenance an operator needs to review it.

    ``index`` is None for a whole-document rejection (``oversize``).
    ``repaired`` holds a best-effort repair of a truncated item, for the
    operator only: it is never accepted.
    """

    index: int | None
    reason: Reason
    error: CorrectionSignal
    span: Span
    snippet: str
    sha256: str
    repaired: JSONValue = _NO_REPAIR

    @property
    def has_repair(self) -> bool:
        return self.repaired is not _NO_REPAIR

    @property
    def message(self) -> str:
        return self.error.message(self.reason)

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {
            "index": self.index,
            "reason": str(self.reason),
            "error": {**self.error.to_json(), "message": self.message},
            "span": self.span.to_json(),
            "snippet": self.snippet,
            "sha256": self.sha256,
        }
        if self.has_repair:
            data["repaired"] = self.repaired
        return data


# The records salvage builds once per item, by position (see speedups.builder).
new_accepted = builder(AcceptedItem, "index", "data", "span", "coercions", "repairs")
new_quarantined = builder(
    QuarantinedItem, "index", "reason", "error", "span", "snippet", "sha256", "repaired"
)


def reason_ordered(counts: Mapping[str, int]) -> dict[str, int]:
    """``counts`` by reason in the order of :class:`Reason` (an unknown word last)."""
    order = {reason.value: position for position, reason in enumerate(Reason)}
    return {
        reason: counts[reason]
        for reason in sorted(counts, key=lambda word: (order.get(word, len(order)), word))
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvelopeIssue:
    """An envelope field that could not be recovered intact (never silently dropped)."""

    path: str
    problem: str
    span: Span

    def to_json(self) -> dict[str, JSONValue]:
        return {"path": self.path, "problem": self.problem, "span": self.span.to_json()}


@dataclass(frozen=True, kw_only=True, slots=True)
class SalvageResult:
    """Everything salvage learned about one raw model output."""

    document_valid: bool
    truncated: bool
    items_found: bool
    envelope: Mapping[str, JSONValue]
    items: tuple[AcceptedItem, ...]
    quarantined: tuple[QuarantinedItem, ...]
    envelope_issues: tuple[EnvelopeIssue, ...] = ()
    finish_reason: str | None = None
    notes: tuple[str, ...] = field(default=())
    framing: str = "document"  # where the items were found (core.framing.Found)
    # Rejected candidates past Guardrails.max_quarantined: counted by reason, no record.
    folded: Mapping[str, int] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        if not self.items and (self.quarantined or self.truncated or not self.items_found):
            return Status.FAILED
        if self.quarantined or self.truncated or self.envelope_issues:
            return Status.PARTIAL
        return Status.OK

    @property
    def partial(self) -> bool:
        return self.status is Status.PARTIAL

    @property
    def folded_total(self) -> int:
        return sum(self.folded.values())

    @property
    def quarantined_total(self) -> int:
        """Every rejected candidate, with a record or folded."""
        return len(self.quarantined) + self.folded_total

    def counts(self) -> dict[str, JSONValue]:
        """The figures of the result. ``quarantined`` and ``by_reason`` count folded
        candidates too; ``folded`` and ``folded_by_reason`` are present only when some
        were folded."""
        by_reason: dict[str, int] = dict(self.folded)
        for item in self.quarantined:
            by_reason[str(item.reason)] = by_reason.get(str(item.reason), 0) + 1
        folded = self.folded_total
        counts: dict[str, JSONValue] = {
            "candidates": len(self.items)
            + folded
            + sum(1 for q in self.quarantined if q.index is not None),
            "accepted": len(self.items),
            "quarantined": len(self.quarantined) + folded,
            "by_reason": reason_ordered(by_reason),
        }
        if folded:
            counts["folded"] = folded
            counts["folded_by_reason"] = reason_ordered(self.folded)
        return counts

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "status": str(self.status),
            "document_valid": self.document_valid,
            "truncated": self.truncated,
            "partial": self.partial,
            "finish_reason": self.finish_reason,
            "items_found": self.items_found,
            "framing": self.framing,
            "envelope": dict(self.envelope),
            "envelope_issues": [issue.to_json() for issue in self.envelope_issues],
            "items": [item.to_json() for item in self.items],
            "quarantined": [item.to_json() for item in self.quarantined],
            "counts": self.counts(),
            "notes": list(self.notes),
        }


new_result = builder(
    SalvageResult,
    "document_valid",
    "truncated",
    "items_found",
    "envelope",
    "items",
    "quarantined",
    "envelope_issues",
    "finish_reason",
    "notes",
    "framing",
    "folded",
)
"""``SalvageResult(...)`` by position: built once per salvage, which on a short valid
report costs no more than this."""
