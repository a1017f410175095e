"""What a run's attempts become in the store, decided without touching it.

Pure: no I/O, no clock. The executor hands over the instruction and its attempts (each a
completion with its salvage, or a failed call) and gets back the records to write: each
attempt's row and outcome, the chosen attempt's report, every attempt's quarantine (the
chosen one's pending, the others' superseded), the run's status and error, and the
:class:`RunOutcome` the scheduler and the log are told. The executor only writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from salvagelane.connectors import Completion, CompletionRequest
from salvagelane.core import SalvageResult
from salvagelane.core.attempts import RetryCause, Scored, best_attempt
from salvagelane.core.finish import FinishReason
from salvagelane.core.reask import ReaskMerge, merge_reask
from salvagelane.core.records import QuarantinedItem
from salvagelane.definitions import Instruction
from salvagelane.errors import ConnectorError, ProviderError
from salvagelane.runtime.plan import failure as failure_of
from salvagelane.runtime.plan import request_summary, run_status
from salvagelane.sinks import DeliveryOutcome
from salvagelane.store.values import QuarantineRecord, ReportItemRecord, ReportRecord
from salvagelane.vocabulary import ItemOrigin, ReviewStatus, RunStatus


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    """How a run ended, for the scheduler and the log. Its figures are those the store
    records (:mod:`salvagelane.store.figures`); the CLI prints the stored run itself."""

    run_id: str
    instruction_id: str
    status: RunStatus
    kept: int
    candidates: int
    quarantined: Mapping[str, int]
    finish_reason: str | None
    native_finish_reason: str | None
    attempts: int
    best_attempt: int | None
    error: str | None
    deliveries: tuple[DeliveryOutcome, ...] = ()
    # Of ``quarantined``, those past guardrails.max_quarantined: counted, not stored.
    folded: Mapping[str, int] = field(default_factory=dict)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())


@dataclass(frozen=True, kw_only=True, slots=True)
class Reasking:
    """A follow-up request for the rejected items ``asked`` of attempt ``of``."""

    of: int
    asked: tuple[QuarantinedItem, ...]

    def summary(self) -> dict[str, Any]:
        """What the attempt's stored request says of it."""
        return {"of_attempt": self.of, "items": [item.index for item in self.asked]}


@dataclass(kw_only=True, slots=True)
class StoredAttempt:
    """One attempt as stored: its completion and, once salvaged, its result; or the
    error of a call that failed. ``reask``: set for a follow-up request."""

    number: int
    attempt_id: str
    completion: Completion | None = None
    result: SalvageResult | None = None
    provider_error: str | None = None
    reask: Reasking | None = None

    @property
    def finish_reason(self) -> str:
        """The canonical finish reason stored for it: ``error`` for a failed call."""
        if self.completion is None:
            return str(FinishReason.ERROR)
        return str(self.completion.finish_reason)


@dataclass(frozen=True, kw_only=True, slots=True)
class Settlement:
    """What the run's attempts come to: ``report`` None when none was salvaged (the run
    fails with ``error``). ``result``: the report's salvage result (the chosen attempt's,
    with a follow-up's mended items joined: ``reask``)."""

    status: RunStatus
    error: str | None
    report: ReportRecord | None
    quarantined: tuple[QuarantineRecord, ...]
    chosen: StoredAttempt | None
    result: SalvageResult | None = None
    reask: ReaskMerge | None = None
    follow_up: StoredAttempt | None = None


# --- the attempts' rows -------------------------------------------------------------------------


def completion_fields(
    instruction: Instruction,
    request: CompletionRequest,
    completion: Completion,
    *,
    redactions: int = 0,
    reask: Reasking | None = None,
) -> dict[str, Any]:
    """``Store.add_attempt``'s fields for an answered call (but the times)."""
    summary = request_summary(instruction, request)
    if reask is not None:
        summary["reask"] = reask.summary()
    if redactions:
        summary["redactions"] = [{"kind": "secret", "count": redactions}]
    return {
        "request": summary,
        "raw_output": completion.text,
        "finish_reason": str(completion.finish_reason),
        "native_finish_reason": completion.native_finish_reason,
        "usage": dict(completion.usage),
        "model": completion.model,
        "request_id": completion.request_id,
        "latency_seconds": completion.latency_seconds,
        "http_status": completion.http_status,
        "provider_error": None,
        "stream_error": completion.stream_error,
        "max_raw_bytes": instruction.guardrails.max_output_bytes,
    }


def failed_call_fields(
    instruction: Instruction,
    request: CompletionRequest,
    exc: ConnectorError,
    message: str,
    *,
    reask: Reasking | None = None,
) -> dict[str, Any]:
    """``Store.add_attempt``'s fields for a call that failed with ``exc`` (``message``:
    its text, scrubbed of secrets)."""
    summary = request_summary(instruction, request)
    if reask is not None:
        summary["reask"] = reask.summary()
    return {
        "request": summary,
        "raw_output": None,
        "finish_reason": str(FinishReason.ERROR),
        "native_finish_reason": None,
        "usage": None,
        "model": None,
        "request_id": None,
        "latency_seconds": None,
        "http_status": exc.status if isinstance(exc, ProviderError) else None,
        "provider_error": message,
        "stream_error": None,
    }


def attempt_outcome(result: SalvageResult, retry: RetryCause | None) -> dict[str, Any]:
    """What an attempt's salvage gave, as ``Store.set_attempt_outcome`` keeps it."""
    return {
        "status": str(result.status),
        "document_valid": result.document_valid,
        "truncated": result.truncated,
        "framing": result.framing,
        "counts": result.counts(),
        "envelope_issues": [issue.to_json() for issue in result.envelope_issues],
        "retry_trigger": None if retry is None else str(retry),
    }


# --- the report -------------------------------------------------------------------------------


def settle(
    instruction: Instruction,
    attempts: Sequence[StoredAttempt],
    *,
    deadline_passed: bool = False,
) -> Settlement:
    """The report of the best salvaged attempt (with the items a follow-up request for
    its rejected ones mended), every attempt's quarantine, and the run's status; a failed
    settlement when no attempt was salvaged."""
    scored = [
        Scored(number=a.number, result=a.result)
        for a in attempts
        if a.result is not None and a.reask is None  # a follow-up answers a part only
    ]
    best = best_attempt(scored)
    if best is None:
        errors = [a.provider_error for a in attempts if a.provider_error]
        last_error = errors[-1] if errors else "no attempt was made"
        return Settlement(
            status=RunStatus.FAILED,
            error=deadline_note(instruction, last_error, deadline_passed=deadline_passed),
            report=None,
            quarantined=(),
            chosen=None,
        )
    chosen = next(a for a in attempts if a.number == best.number)
    assert chosen.completion is not None
    assert chosen.result is not None
    completion = chosen.completion
    follow_up = next(
        (a for a in attempts if a.reask is not None and a.reask.of == chosen.number), None
    )
    merge: ReaskMerge | None = None
    if follow_up is not None:
        assert follow_up.reask is not None
        merge = merge_reask(
            chosen.result,
            follow_up.reask.asked,
            follow_up.result,
            unanswered=f"the follow-up request failed: {follow_up.provider_error or 'no answer'}",
        )
    result = chosen.result if merge is None else merge.result
    status = run_status(result, completion)
    error: str | None = None
    if status is RunStatus.FAILED:
        error = deadline_note(instruction, failure_of(result), deadline_passed=deadline_passed)
    report = report_record(chosen, status, result=result, reask=merge, follow_up=follow_up)
    quarantined: list[QuarantineRecord] = []
    for attempt in attempts:
        if attempt.result is not None and attempt.completion is not None:
            quarantined.extend(
                quarantine_records(
                    instruction,
                    attempt,
                    superseded=attempt is not chosen,
                    reask=merge if attempt is chosen else None,
                    follow_up=follow_up,
                    report=report,
                )
            )
    return Settlement(
        status=status,
        error=error,
        report=report,
        quarantined=tuple(quarantined),
        chosen=chosen,
        result=result,
        reask=merge,
        follow_up=follow_up,
    )


def report_record(
    chosen: StoredAttempt,
    status: RunStatus,
    *,
    result: SalvageResult | None = None,
    reask: ReaskMerge | None = None,
    follow_up: StoredAttempt | None = None,
) -> ReportRecord:
    """The report of the chosen attempt (``result``: its salvage with a follow-up's
    mended items joined, ``reask``), its items as the model gave them; a mended item is
    marked ``reask``, its span in the follow-up's output."""
    assert chosen.completion is not None
    assert chosen.result is not None
    result = chosen.result if result is None else result
    counts = report_counts(result)
    if reask is not None and follow_up is not None:
        # ``status``: the salvage's, the follow-up joined (a review may change the report's).
        counts["reask"] = {
            "attempt": follow_up.number,
            **reask.counts(),
            "status": str(result.status),
        }
    items = []
    for item in result.items:
        mended = None if reask is None else reask.reasked_index(item.index)
        items.append(
            ReportItemRecord(
                source_index=item.index,
                data=item.data,
                span_start=item.span.start,
                span_end=item.span.end,
                coercions=[c.to_json() for c in item.coercions] or None,
                origin=ItemOrigin.MODEL if mended is None else ItemOrigin.REASK,
                repairs=[r.to_json() for r in item.repairs] or None,
                attempt=None if mended is None or follow_up is None else follow_up.number,
            )
        )
    return ReportRecord(
        attempt_id=chosen.attempt_id,
        envelope=dict(result.envelope),
        partial=status is RunStatus.PARTIAL,
        status=status,
        document_valid=result.document_valid,
        truncated=result.truncated,
        finish_reason=str(chosen.completion.finish_reason),
        counts=counts,
        items=items,
    )


def report_counts(result: SalvageResult) -> dict[str, Any]:
    """The report's counts. Envelope issues are counted with them: a damaged envelope is
    a cut no approval undoes, so the store must know of it when a review settles the
    status."""
    return {**result.counts(), "envelope_issues": len(result.envelope_issues)}


def quarantine_records(
    instruction: Instruction,
    attempt: StoredAttempt,
    *,
    superseded: bool,
    reask: ReaskMerge | None = None,
    follow_up: StoredAttempt | None = None,
    report: ReportRecord | None = None,
) -> list[QuarantineRecord]:
    """Every item ``attempt`` held back, with its provenance; ``superseded`` when another
    attempt's report was chosen (nothing to review). With ``reask`` (the follow-up for
    the chosen attempt's rejected items): a mended item is ``reasked``, linked to the
    report item that replaced it; one still rejected stays pending with both signals."""
    assert attempt.result is not None
    assert attempt.completion is not None
    provenance = {
        "instruction": instruction.id,
        "definition_sha256": instruction.definition_sha256,
        "model": attempt.completion.model,
        "finish_reason": str(attempt.completion.finish_reason),
        "native_finish_reason": attempt.completion.native_finish_reason,
        "schema_sha256": instruction.output.item_schema.sha256,
        "attempt": attempt.number,
    }
    if attempt.reask is not None:
        provenance["reask_of_attempt"] = attempt.reask.of
    records = []
    for item in attempt.result.quarantined:
        error: dict[str, Any] = {**item.error.to_json(), "message": item.message}
        status = ReviewStatus.SUPERSEDED if superseded else ReviewStatus.PENDING
        resolution: dict[str, Any] | None = None
        if reask is not None and follow_up is not None and item.index is not None:
            mended = reask.reasked_index(item.index)
            still = next((s for s in reask.still if s.original.index == item.index), None)
            if mended is not None and report is not None:
                status = ReviewStatus.REASKED
                resolution = {
                    "by": "reask",
                    "attempt": follow_up.number,
                    "position": next(
                        n
                        for n, kept in enumerate(report.items)
                        if kept.origin is ItemOrigin.REASK and kept.source_index == item.index
                    ),
                }
            elif still is not None:
                error["reask"] = {"attempt": follow_up.number, "signals": still.signals()}
        records.append(
            QuarantineRecord(
                attempt_id=attempt.attempt_id,
                instruction_id=instruction.id,
                source_index=item.index,
                reason=str(item.reason),
                error=error,
                span_start=item.span.start,
                span_end=item.span.end,
                snippet=item.snippet,
                sha256=item.sha256,
                repaired=item.repaired if item.has_repair else None,
                provenance=provenance,
                review_status=status,
                resolution=resolution,
            )
        )
    return records


# --- the outcome ------------------------------------------------------------------------------


def reported_outcome(
    run_id: str, instruction: Instruction, settlement: Settlement, attempts: int
) -> RunOutcome:
    """The outcome of a run whose report was written."""
    chosen = settlement.chosen
    assert chosen is not None
    assert chosen.result is not None
    assert chosen.completion is not None
    result = settlement.result or chosen.result
    completion = chosen.completion
    counts = report_counts(result)
    return RunOutcome(
        run_id=run_id,
        instruction_id=instruction.id,
        status=settlement.status,
        kept=len(result.items),
        candidates=int(counts["candidates"]),
        quarantined=dict(counts["by_reason"]),
        folded=dict(result.folded),
        finish_reason=str(completion.finish_reason),
        native_finish_reason=completion.native_finish_reason,
        attempts=attempts,
        best_attempt=chosen.number,
        error=settlement.error,
    )


def failed_outcome(
    run_id: str,
    instruction_id: str,
    attempts: Sequence[StoredAttempt],
    error: str,
    *,
    status: RunStatus = RunStatus.FAILED,
) -> RunOutcome:
    """The outcome of a run that ended without a report. Its finish reason is the one
    the store reports for such a run: its last attempt's, None when no call was made."""
    last = attempts[-1] if attempts else None
    return RunOutcome(
        run_id=run_id,
        instruction_id=instruction_id,
        status=status,
        kept=0,
        candidates=0,
        quarantined={},
        finish_reason=None if last is None else last.finish_reason,
        native_finish_reason=(
            None
            if last is None or last.completion is None
            else last.completion.native_finish_reason
        ),
        attempts=len(attempts),
        best_attempt=None,
        error=error,
    )


def deadline_note(instruction: Instruction, error: str, *, deadline_passed: bool) -> str:
    """``error``, prefixed with ``deadline:`` when the run's deadline cut it short."""
    if not deadline_passed:
        return error
    limit = instruction.schedule.deadline_seconds
    return f"deadline: the run's {limit:g} s deadline passed; {error}"
