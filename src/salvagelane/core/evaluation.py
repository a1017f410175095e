"""Comparing a candidate with the baseline on the same fixtures: the figures and the verdict.

Pure. ``salvagelane eval`` (:mod:`salvagelane.runtime.evaluation`) makes the calls; here
each side of a fixture is reduced to its figures (status, kept, quarantined by reason,
tokens, cost, latency), the sides are totalled, and the verdict says whether the
candidate did worse: fewer items kept in total, or more fixtures failed
(docs/adr/0024-eval.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from salvagelane.core.records import reason_ordered

FAILED = "failed"
ERROR = "error"  # the candidate's call failed: no answer to salvage


@dataclass(frozen=True, kw_only=True, slots=True)
class Side:
    """One side of one fixture: what salvage made of the answer, and what the call cost.
    ``status`` is ``error`` when the call failed (``error`` says why); ``cost`` and
    ``latency_seconds`` are None when unknown (no price for the model, a recorded answer)."""

    status: str
    kept: int = 0
    quarantined: Mapping[str, int] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    latency_seconds: float | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """Nothing usable: salvage failed or the call did."""
        return self.status in (FAILED, ERROR)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "kept": self.kept,
            "quarantined": self.quarantined_total,
            "quarantined_by_reason": reason_ordered(self.quarantined),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
            "latency_seconds": self.latency_seconds,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Side:
        """The side as :meth:`to_json` wrote it (read back from the store)."""
        return cls(
            status=str(document["status"]),
            kept=int(document["kept"]),
            quarantined=dict(document.get("quarantined_by_reason") or {}),
            prompt_tokens=document.get("prompt_tokens"),
            completion_tokens=document.get("completion_tokens"),
            cost=document.get("cost"),
            latency_seconds=document.get("latency_seconds"),
            error=document.get("error"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """Baseline and candidate on one fixture; ``skipped`` says why a fixture was not
    evaluated (then ``candidate`` is None)."""

    fixture: str
    instruction: str | None
    baseline: Side | None
    candidate: Side | None
    skipped: str | None = None

    @property
    def change(self) -> str:
        """``better``, ``worse`` or ``same``: failing where the other did not first, then
        the items kept; ``skipped`` when not evaluated."""
        if self.baseline is None or self.candidate is None:
            return "skipped"
        base, cand = self.baseline, self.candidate
        if base.failed != cand.failed:
            return "worse" if cand.failed else "better"
        if cand.kept != base.kept:
            return "better" if cand.kept > base.kept else "worse"
        if cand.quarantined_total != base.quarantined_total:
            return "better" if cand.quarantined_total < base.quarantined_total else "worse"
        return "same"

    def to_json(self) -> dict[str, Any]:
        return {
            "fixture": self.fixture,
            "instruction": self.instruction,
            "change": self.change,
            "skipped": self.skipped,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "candidate": None if self.candidate is None else self.candidate.to_json(),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Totals:
    """One side summed over the evaluated fixtures (skipped ones left out)."""

    fixtures: int
    failed: int
    kept: int
    quarantined: Mapping[str, int]
    tokens: int
    cost: float | None
    latency_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "fixtures": self.fixtures,
            "failed": self.failed,
            "kept": self.kept,
            "quarantined": sum(self.quarantined.values()),
            "quarantined_by_reason": reason_ordered(self.quarantined),
            "tokens": self.tokens,
            "cost": self.cost,
            "latency_seconds": self.latency_seconds,
        }


def totals(sides: Sequence[Side]) -> Totals:
    """``sides`` summed; cost and latency are None unless every side knows them."""
    quarantined: dict[str, int] = {}
    for side in sides:
        for reason, count in side.quarantined.items():
            quarantined[reason] = quarantined.get(reason, 0) + count
    costs = [side.cost for side in sides]
    latencies = [side.latency_seconds for side in sides]
    return Totals(
        fixtures=len(sides),
        failed=sum(side.failed for side in sides),
        kept=sum(side.kept for side in sides),
        quarantined=quarantined,
        tokens=sum((side.prompt_tokens or 0) + (side.completion_tokens or 0) for side in sides),
        cost=None if not costs or None in costs else sum(c for c in costs if c is not None),
        latency_seconds=None
        if not latencies or None in latencies
        else sum(s for s in latencies if s is not None),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """Whether the candidate did worse than the baseline, and why (each reason a line)."""

    baseline: Totals
    candidate: Totals
    reasons: tuple[str, ...]

    @property
    def worse(self) -> bool:
        return bool(self.reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            "worse": self.worse,
            "reasons": list(self.reasons),
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
        }


def verdict(comparisons: Sequence[Comparison]) -> Verdict:
    """The totals of both sides over the evaluated fixtures, and the candidate's verdict:
    worse when it keeps fewer items in total or fails more fixtures."""
    evaluated = [c for c in comparisons if c.baseline is not None and c.candidate is not None]
    base = totals([c.baseline for c in evaluated if c.baseline is not None])
    cand = totals([c.candidate for c in evaluated if c.candidate is not None])
    reasons = []
    if cand.kept < base.kept:
        reasons.append(f"the candidate kept {cand.kept} item(s), the baseline {base.kept}")
    if cand.failed > base.failed:
        reasons.append(f"the candidate failed {cand.failed} fixture(s), the baseline {base.failed}")
    return Verdict(baseline=base, candidate=cand, reasons=tuple(reasons))
