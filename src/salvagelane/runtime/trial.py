"""A dry run of one instruction: what a run would ask, keep, quarantine and deliver.

``salvagelane prompt`` shows the request a run would send; ``salvagelane try`` answers it
once (from a saved output, or by calling the model) and salvages the answer with every
guardrail. Both go through :mod:`salvagelane.runtime.plan`, as a run does, and neither opens a
database, writes a spool file or delivers to a sink: sinks are built to name where the
report would go, never given it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from salvagelane.connectors import Completion, CompletionRequest, Connector
from salvagelane.context_sources import reference_time
from salvagelane.core import SalvageResult
from salvagelane.core.attempts import RetryCause
from salvagelane.core.payload import report_payload
from salvagelane.core.schema_hint import provider_hint
from salvagelane.definitions import Instruction, snapshot_for_run, with_snapshot
from salvagelane.errors import ConnectorError
from salvagelane.logs import scrub_text
from salvagelane.runtime.plan import (
    RunPlan,
    build_run_sinks,
    failure,
    plan_run,
    provider_retry_cause,
    redacted,
    request_summary,
    run_status,
)
from salvagelane.sinks import Sink, describe
from salvagelane.vocabulary import ItemOrigin, RunStatus


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptPreview:
    """The first request a run of an instruction sends, as the attempt would record it
    (:func:`~salvagelane.runtime.plan.request_summary`), and the structured-output hint's
    schema as the connector sends it (None when it sends none)."""

    instruction_id: str
    request: Mapping[str, Any]
    hint_schema: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction_id,
            **self.request,
            "schema_hint_schema": None if self.hint_schema is None else dict(self.hint_schema),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class SinkTarget:
    """A sink the report would be delivered to; ``target`` is a path template with its
    ``{run_id}`` left in (a dry run has no run id)."""

    kind: str
    target: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPreview:
    """The attempt a run would make next, and why."""

    cause: str
    attempt: int
    attempts: int
    max_output_tokens: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Trial:
    """What one attempt of a run would store and deliver. ``completion`` is None when
    the call failed (``provider_error`` says why); ``payload`` is what each sink would
    receive, None when the run would store no report."""

    prompt: PromptPreview
    completion: Completion | None
    redactions: int
    provider_error: str | None
    result: SalvageResult | None
    status: RunStatus
    error: str | None
    retry: RetryPreview | None
    sinks: tuple[SinkTarget, ...]
    payload: Mapping[str, Any] | None

    @property
    def usable(self) -> bool:
        """Whether the run would store something usable (``ok`` or ``partial``)."""
        return self.status in (RunStatus.OK, RunStatus.PARTIAL)

    def to_json(self) -> dict[str, Any]:
        """``salvagelane try --json``."""
        completion, result = self.completion, self.result
        counts = None if result is None else result.counts()
        return {
            "dry_run": True,
            "instruction": self.prompt.instruction_id,
            "status": str(self.status),
            "partial": self.status is RunStatus.PARTIAL,
            "kept": 0 if result is None else len(result.items),
            "candidates": 0 if counts is None else counts["candidates"],
            "quarantined": 0 if counts is None else counts["quarantined"],
            "quarantined_by_reason": {} if counts is None else counts["by_reason"],
            "error": self.error,
            "answer": None
            if completion is None
            else {
                "chars": len(completion.text),
                "finish_reason": str(completion.finish_reason),
                "native_finish_reason": completion.native_finish_reason,
                "model": completion.model,
                "usage": dict(completion.usage),
                "http_status": completion.http_status,
                "stream_error": completion.stream_error,
                "redactions": self.redactions,
            },
            "provider_error": self.provider_error,
            "retry": None
            if self.retry is None
            else {
                "cause": self.retry.cause,
                "attempt": self.retry.attempt,
                "attempts": self.retry.attempts,
                "max_output_tokens": self.retry.max_output_tokens,
            },
            # The salvage of the answer, as `salvagelane salvage` prints it: the kept items,
            # the quarantined ones with their reason, path, expected and received, and the
            # envelope's issues.
            "salvage": None if result is None else result.to_json(),
            "deliveries": [
                {"kind": sink.kind, "target": sink.target, "sent": False} for sink in self.sinks
            ],
            "payload": None if self.payload is None else dict(self.payload),
            "request": self.prompt.to_json(),
        }


@contextmanager
def _as_a_run(instruction: Instruction, at: datetime) -> Iterator[Instruction]:
    """``instruction`` as a run at ``at`` sees it: its files read once (the run reads
    them from that snapshot) and time-dependent context reporting on ``at``."""
    planned = with_snapshot(instruction, snapshot_for_run(instruction))
    with reference_time(at):
        yield planned


def preview_prompt(instruction: Instruction, *, at: datetime) -> PromptPreview:
    """The first request a run of ``instruction`` at ``at`` would send. Runs its context
    callables, as a run does; DefinitionError when the prompt cannot be rendered."""
    with _as_a_run(instruction, at) as planned:
        plan = plan_run(planned)
    return _preview(plan, _first_request(plan))


def _first_request(plan: RunPlan) -> CompletionRequest:
    """The first attempt's request; its call ends when the run's deadline would."""
    return plan.request(
        max_output_tokens=plan.first_budget,
        time_limit_seconds=plan.instruction.schedule.deadline_seconds,
    )


def _preview(plan: RunPlan, request: CompletionRequest) -> PromptPreview:
    spec = plan.instruction.connector
    hint = None if plan.hint_schema is None else provider_hint(str(spec.kind), plan.hint_schema)
    return PromptPreview(
        instruction_id=plan.instruction.id,
        request=request_summary(plan.instruction, request),
        hint_schema=None if hint is None else hint.schema,
    )


def try_instruction(
    instruction: Instruction,
    *,
    connector_for: Callable[[Instruction], Connector],
    sinks_for: Callable[[Instruction], Sequence[Sink]],
    at: datetime,
) -> Trial:
    """One attempt of a run of ``instruction`` at ``at``, answered by its connector (a
    saved output's replay, or the model), salvaged with every guardrail; stored nowhere,
    delivered nowhere. The definition's further attempts are not made: the trial says
    which one a run would make next. DefinitionError when the definition cannot run (its
    prompt, context or sinks), as a run would fail with it."""
    with _as_a_run(instruction, at) as planned:
        sinks = build_run_sinks(planned, sinks_for)
        plan = plan_run(planned)
        connector = connector_for(planned)
    request = _first_request(plan)
    preview = _preview(plan, request)
    targets = tuple(SinkTarget(kind=kind, target=target) for kind, target in map(describe, sinks))
    attempts = planned.retry.attempts

    def next_attempt(cause: RetryCause | None, budget: int) -> RetryPreview | None:
        if cause is None or not plan.wants_retry(cause, attempts_left=attempts - 1):
            return None
        return RetryPreview(
            cause=str(cause), attempt=2, attempts=attempts, max_output_tokens=budget
        )

    try:
        answer = connector.complete(request)
    except ConnectorError as exc:
        message = scrub_text(str(exc))
        cause = provider_retry_cause(exc)
        return Trial(
            prompt=preview,
            completion=None,
            redactions=0,
            provider_error=message,
            result=None,
            status=RunStatus.FAILED,
            error=message,
            retry=next_attempt(cause, plan.first_budget),
            sinks=targets,
            payload=None,
        )
    # A key echoed in the answer is redacted before anything parses it, as in a run.
    completion, redactions = redacted(answer)
    result = plan.salvage(completion)
    status = run_status(result, completion)
    cause = plan.retry_cause(result)
    counts = {**result.counts(), "envelope_issues": len(result.envelope_issues)}
    payload = report_payload(
        run_id=None,
        instruction=planned.id,
        status=str(status),
        partial=status is RunStatus.PARTIAL,
        finish_reason=str(completion.finish_reason),
        # As the store shows a report no review has touched.
        counts={**counts, "operator_approved": 0},
        envelope=dict(result.envelope),
        items=[
            _Kept(data=item.data, repairs=[r.to_json() for r in item.repairs] or None)
            for item in result.items
        ],
    )
    return Trial(
        prompt=preview,
        completion=completion,
        redactions=redactions,
        provider_error=None,
        result=result,
        status=status,
        error=failure(result) if status is RunStatus.FAILED else None,
        retry=next_attempt(
            cause,
            plan.first_budget
            if cause is None
            else plan.next_budget(plan.first_budget, cause=cause, completion=completion),
        )
        or _follow_up(plan, result, attempts),
        sinks=targets,
        payload=payload,
    )


def _follow_up(plan: RunPlan, result: SalvageResult, attempts: int) -> RetryPreview | None:
    """The follow-up for the rejected items a run would send next (``retry.on:
    [quarantined]``), when no whole retry is due."""
    if attempts < 2 or not plan.items_to_reask(result):
        return None
    return RetryPreview(
        cause=str(RetryCause.QUARANTINED),
        attempt=2,
        attempts=attempts,
        max_output_tokens=plan.first_budget,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class _Kept:
    """A kept item of the model's, as the payload carries it."""

    data: Any
    repairs: list[Any] | None
    origin: str = ItemOrigin.MODEL
