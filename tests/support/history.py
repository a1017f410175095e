"""A run history written through the store's own API: scheduled and manual runs that end
ok, partial, failed, interrupted or missed, with quarantined items and token usage, so
the health figures and the review page have exactly what a test needs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from salvagelane.store import QuarantineRecord, ReportItemRecord, ReportRecord, Store
from salvagelane.vocabulary import RunStatus, Trigger

RAW = '{"items": [{"a": 1}, {"a": "x"}, {"a": 2, "b"'
SPANS = {"schema": (21, 31), "truncated": (33, 45), "malformed": (33, 45)}


def seed(
    store: Store,
    *,
    at: datetime,
    status: RunStatus,
    instruction_id: str = "daily",
    trigger: Trigger = Trigger.SCHEDULE,
    reasons: Sequence[str] = (),
    usage: dict[str, int | None] | None = None,
    finish_reason: str = "stop",
    raw: str = RAW,
    request: dict[str, str] | None = None,
    span: tuple[int, int] | None = None,
) -> str:
    """One run created and ended at ``at`` with ``status``; a ``missed`` one is only its
    row. ``reasons``: its quarantined items (pending), each over its span of ``raw``
    (:data:`SPANS`, or ``span`` for all of them); ``request``: the attempt's stored
    request (empty by default)."""
    scheduled_for = at if trigger in (Trigger.SCHEDULE, Trigger.CATCH_UP) else None
    if status == RunStatus.MISSED:
        assert scheduled_for is not None
        run_id = store.record_missed(
            instruction_id=instruction_id,
            definition_sha256="d" * 64,
            scheduled_for=at,
            now=at,
            reason="no node was up",
        )
        assert run_id is not None
        return run_id
    run_id = store.start_run(
        instruction_id=instruction_id,
        definition_sha256="d" * 64,
        trigger=trigger,
        scheduled_for=scheduled_for,
        now=at,
    )
    attempt = store.add_attempt(
        run_id,
        number=1,
        started_at=at,
        request=request if request is not None else {},
        raw_output=raw,
        finish_reason=finish_reason,
        native_finish_reason=finish_reason,
        usage=usage if usage is not None else {"prompt_tokens": 100, "completion_tokens": 40},
        model="m",
        request_id=None,
        latency_seconds=None,
        http_status=200,
        provider_error=None,
        stream_error=None,
        finished_at=at,
    )
    if status in (RunStatus.FAILED, RunStatus.INTERRUPTED):
        store.fail_run(run_id, finished_at=at, error="it broke", status=status)
        return run_id
    quarantined = [
        QuarantineRecord(
            attempt_id=attempt,
            instruction_id=instruction_id,
            source_index=index + 1,
            reason=reason,
            error={
                "code": reason,
                "path": "$.a",
                "expected": "a number",
                "received": '"x"',
                "message": f'{reason} at $.a: expected a number, received "x"',
            },
            span_start=(span or SPANS.get(reason, (21, 31)))[0],
            span_end=(span or SPANS.get(reason, (21, 31)))[1],
            snippet=raw[slice(*(span or SPANS.get(reason, (21, 31))))],
            sha256="s" * 64,
            repaired=None,
            provenance={"instruction": instruction_id, "model": "m", "attempt": 1},
        )
        for index, reason in enumerate(reasons)
    ]
    report = ReportRecord(
        attempt_id=attempt,
        envelope={"summary": "today"},
        partial=status == RunStatus.PARTIAL,
        status=status,
        document_valid=not reasons,
        truncated=False,
        finish_reason=finish_reason,
        counts={
            "candidates": 1 + len(reasons),
            "accepted": 1,
            "quarantined": len(reasons),
            "envelope_issues": 0,
        },
        items=[ReportItemRecord(source_index=0, data={"a": 1}, span_start=11, span_end=19)],
    )
    store.finish_run(
        run_id, status=status, finished_at=at, error=None, report=report, quarantined=quarantined
    )
    return run_id
