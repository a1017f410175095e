"""Human renderings of runs for the terminal, and JSON renderings of store records."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from salvagelane.cli.tables import aligned
from salvagelane.core.numbering import item_label
from salvagelane.core.reask import follow_up_label
from salvagelane.errors import NotFoundError
from salvagelane.safe_text import line, one_line
from salvagelane.vocabulary import OPEN_DELIVERY_STATUSES, DeliveryStatus, ItemOrigin, OutputCut

if TYPE_CHECKING:  # annotations only: rendering must not pull in the store or httpx
    from salvagelane.review.capture import CapturedFixture
    from salvagelane.runtime.delivery import Redelivery
    from salvagelane.sinks import DeliveryOutcome
    from salvagelane.store import AttemptView, RunDetail, RunSummary, SinkDeliveryView

_ITEM_WIDTH = 110
_SNIPPET_WIDTH = 90


def to_json(record: Any) -> Any:
    """A store record (dataclass) as JSON-ready data; datetimes as ISO 8601."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_json(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, datetime):
        return record.isoformat()
    if isinstance(record, Mapping):
        return {str(k): to_json(v) for k, v in record.items()}
    if isinstance(record, list | tuple):
        return [to_json(v) for v in record]
    return record


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else "-"


def _by_reason(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{line(reason)} {n}" for reason, n in counts.items())


_CUT = {
    OutputCut.TRUNCATED: "truncated",
    OutputCut.STREAM: "the stream broke off",
    OutputCut.ENVELOPE: "part of the envelope was damaged",
}


def status_notes(run: RunSummary) -> list[str]:
    """What stands behind the run's status: that its output was cut off (no review undoes
    that), and how many of its items an operator approved (an operator's item is never
    passed off as the model's, even in an ``ok`` report)."""
    notes = []
    if run.output_cut:
        cut = ", ".join(_CUT.get(c) or line(c) for c in run.output_cut)
        notes.append(f"the model's output was cut off ({cut}): no review makes it ok")
    if run.operator_approved:
        notes.append(f"{_items(run.operator_approved)} approved by an operator (origin operator)")
    if run.reasked:
        notes.append(f"{_items(run.reasked)} mended by a follow-up request (origin reask)")
    if run.folded:
        notes.append(folded_note(run.folded, run.folded_by_reason))
    return notes


def _follow_up_note(request: Mapping[str, Any]) -> str:
    label = follow_up_label(request)
    return "" if label is None else f" ({label})"


def _resolution_note(resolution: Mapping[str, Any] | None) -> str:
    """`` -> report item 7 (attempt 2)`` for a record a follow-up mended."""
    if not isinstance(resolution, Mapping) or not isinstance(resolution.get("position"), int):
        return ""
    return f" -> report item {resolution['position'] + 1} (attempt {resolution.get('attempt')})"


def folded_note(folded: int, by_reason: Mapping[str, int]) -> str:
    """What became of the quarantined candidates past the bound of stored records."""
    return (
        f"{folded} of the quarantined folded past guardrails.max_quarantined "
        f"({_by_reason(by_reason)}): counted, not stored; the raw output holds them"
    )


def _repairs(repairs: Sequence[Any]) -> str:
    """``trailing_comma at offset 57, ...``: a stored item's lossless repairs."""
    return ", ".join(
        f"{line(str(r.get('kind')))} at offset {line(str(r.get('at')))}"
        if isinstance(r, Mapping)
        else line(str(r))
        for r in repairs
    )


def _items(count: int) -> str:
    return f"{count} item" + ("" if count == 1 else "s")


def figures_line(run: RunSummary) -> str:
    """The run's figures in one line: what ``quarantine approve`` says the run became."""
    held = run.quarantined_count
    detail = f" ({_by_reason(run.quarantined_by_reason)})" if held else ""
    notes = "".join(f"; {note}" for note in status_notes(run))
    return (
        f"{line(run.status)}, kept {run.kept_count} of {run.candidates} candidates, "
        f"quarantined {held}{detail}{notes}"
    )


def run_json(detail: RunDetail, deliveries: Sequence[DeliveryOutcome] = ()) -> dict[str, Any]:
    """What ``salvagelane run --json`` prints: the run as the store recorded it when it
    ended (the figures every view shows), with how delivering it went."""
    return {
        "run_id": detail.id,
        "instruction": detail.instruction_id,
        "scheduled_for": None if detail.scheduled_for is None else detail.scheduled_for.isoformat(),
        "forced": detail.forced,
        "definition_version": detail.definition_version,
        "status": detail.status,
        "partial": detail.partial,
        "kept": detail.kept_count,
        "operator_approved": detail.operator_approved,
        "reasked": detail.reasked,
        "candidates": detail.candidates,
        "quarantined": detail.quarantined_count,
        "quarantined_by_reason": dict(detail.quarantined_by_reason),
        "folded": detail.folded,
        "folded_by_reason": dict(detail.folded_by_reason),
        "output_cut": list(detail.output_cut),
        "finish_reason": detail.finish_reason,
        "native_finish_reason": detail.native_finish_reason,
        "attempts": len(detail.attempts),
        "best_attempt": _best_attempt(detail),
        "error": detail.error,
        "deliveries": [
            {"target": d.target, "kind": d.kind, "ok": d.ok, "error": d.error} for d in deliveries
        ],
    }


def _best_attempt(detail: RunDetail) -> int | None:
    """The number of the attempt the run's report came from."""
    return next((a.number for a in detail.attempts if a.id == detail.best_attempt_id), None)


def run_outcome(
    detail: RunDetail, database: str, deliveries: Sequence[DeliveryOutcome] = ()
) -> str:
    """The short summary ``salvagelane run`` prints, from the run as stored."""
    quarantined = detail.quarantined_count
    reasons = f" ({_by_reason(detail.quarantined_by_reason)})" if quarantined else ""
    lines = [
        f"run          {line(detail.id)}  ({line(detail.instruction_id)})",
        f"status       {line(detail.status)}",
        f"kept         {detail.kept_count} of {detail.candidates} candidates",
        f"quarantined  {quarantined}{reasons}",
    ]
    if detail.folded:
        lines.append(f"             {folded_note(detail.folded, detail.folded_by_reason)}")
    if detail.finish_reason is not None:
        native = detail.native_finish_reason
        lines.append(
            f"finish       {line(detail.finish_reason)}"
            + (f" (provider: {line(native)})" if native and native != detail.finish_reason else "")
        )
    best = _best_attempt(detail)
    lines.append(
        f"attempts     {len(detail.attempts)}" + (f", report from attempt {best}" if best else "")
    )
    if detail.error:
        lines.append(f"error        {line(detail.error)}")
    for delivery in deliveries:
        state = "delivered" if delivery.ok else f"FAILED: {one_line(delivery.error or '', 200)}"
        lines.append(f"sink         {line(delivery.kind)} {line(delivery.target)}: {state}")
    lines.append(f"database     {line(database)}")
    lines.append(f"details      salvagelane runs show {line(detail.id[:8])}")
    return "\n".join(lines)


def runs_table(runs: Sequence[RunSummary], *, instruction_id: str | None = None) -> str:
    """``runs list``: one line per run."""
    if not runs and instruction_id is not None:
        return f"no runs of instruction {line(instruction_id)}"
    if not runs:
        return "no runs stored yet (salvagelane run INSTRUCTION stores one)"
    header = (
        "RUN",
        "CREATED (UTC)",
        "INSTRUCTION",
        "TRIGGER",
        "FIRE (UTC)",
        "STATUS",
        "KEPT",
        "QUAR",
        "FINISH",
    )
    rows = [header]
    for run in runs:
        rows.append(
            (
                run.id[:8],
                when(run.created_at),
                run.instruction_id,
                run.trigger
                + (" retry" if run.retry_of else "")
                + (" forced" if run.forced else ""),
                when(run.scheduled_for),
                run.status
                + (f" ({run.operator_approved} approved)" if run.operator_approved else "")
                + _undelivered(run.sink_status),
                str(run.kept_count),
                str(run.quarantined_count),
                run.finish_reason or "-",
            )
        )
    return "\n".join(aligned(rows))


def run_detail(detail: RunDetail) -> str:
    """``runs show``: the run, its attempts, its report and its quarantine."""
    definition = line(detail.definition_sha256[:12])
    version = (
        f"stored {line(detail.definition_version[:12])}"
        if detail.definition_version
        else "not stored"
    )
    lines = [
        f"run          {line(detail.id)}",
        f"instruction  {line(detail.instruction_id)}  (definition {definition}, {version})",
        f"trigger      {line(detail.trigger)}"
        + (f", scheduled for {when(detail.scheduled_for)}" if detail.scheduled_for else "")
        + (", forced: not a fire time of the schedule" if detail.forced else "")
        + (f", retry of {line(detail.retry_of)}" if detail.retry_of else ""),
        f"status       {line(detail.status)}",
        *(f"             {note}" for note in status_notes(detail)),
        f"started      {when(detail.started_at)}",
        f"finished     {when(detail.finished_at)}",
    ]
    if detail.error:
        lines.append(f"error        {line(detail.error)}")
    lines.append("")
    lines.append(f"attempts ({len(detail.attempts)})")
    for attempt in detail.attempts:
        size = "no output" if attempt.raw_output is None else f"{len(attempt.raw_output)} chars"
        finish = line(attempt.finish_reason or "-")
        if attempt.native_finish_reason and attempt.native_finish_reason != attempt.finish_reason:
            finish += f" (provider: {line(attempt.native_finish_reason)})"
        if attempt.http_status is not None:
            status = f"HTTP {attempt.http_status}"
        else:
            status = "no HTTP response" if attempt.provider_error else "replayed"
        lines.append(
            f"  #{attempt.number}  {size}, finish {finish}, {status}, "
            f"model {line(attempt.model or '-')}{_follow_up_note(attempt.request)}"
        )
        if clipped := clipped_note(attempt):
            lines.append(f"      {clipped}")
        for label, text in (
            ("provider error", attempt.provider_error),
            ("stream", attempt.stream_error),
        ):
            if text:
                lines.append(f"      {label}: {one_line(text, _ITEM_WIDTH)}")
    report = detail.report
    lines.append("")
    if report is None:
        lines.append("report       none stored")
    else:
        approved = (
            f" ({detail.operator_approved} approved by an operator)"
            if detail.operator_approved
            else ""
        )
        lines.append(
            f"report       {line(report.status)}: "
            f"{detail.kept_count} of {detail.candidates} candidates kept{approved}, "
            f"{detail.quarantined_count} quarantined; "
            f"document {'valid' if report.document_valid else 'not valid'} JSON"
            + ("; output truncated" if report.truncated else "")
        )
        for name, value in report.envelope.items():
            lines.append(
                f"  {line(name)}: {one_line(json.dumps(value, ensure_ascii=False), _ITEM_WIDTH)}"
            )
        lines.append(f"items ({len(report.items)})")
        for item in report.items:
            text = json.dumps(item.data, ensure_ascii=False, separators=(", ", ": "))
            origin = "" if item.origin == ItemOrigin.MODEL else f" [{line(item.origin)}]"
            if item.attempt is not None:
                origin = f" [{line(item.origin)}, attempt {item.attempt}]"
            lines.append(f"  {item.position + 1}. {one_line(text, _ITEM_WIDTH)}{origin}")
            if item.repairs:
                # A repaired item is never passed off as the model's own text (ADR 0001).
                lines.append(f"      repaired: {_repairs(item.repairs)}")
    lines.append("")
    lines.append(
        f"quarantine lane ({_items(len(detail.quarantined))}, {detail.quarantined_count} held back)"
    )
    for held in detail.quarantined:
        where = item_label(held.source_index) if held.source_index is not None else "output"
        message = held.error.get("message") or held.error
        lines.append(
            f"  #{held.id} {where} of attempt {held.attempt_number}: {line(held.reason)} "
            f"[{line(held.review_status)}]{_resolution_note(held.resolution)}"
        )
        lines.append(f"      {one_line(str(message), _ITEM_WIDTH)}")
        again = held.error.get("reask")
        if isinstance(again, Mapping):
            for signal in again.get("signals") or ():
                if isinstance(signal, Mapping):
                    said = str(signal.get("message", ""))
                    lines.append(
                        f"      asked again (attempt {again.get('attempt')}): "
                        f"{one_line(said, _ITEM_WIDTH)}"
                    )
        lines.append(
            f"      span {held.span_start}-{held.span_end}, "
            f"sha256 {line((held.sha256 or '-')[:12])}: "
            f"{one_line(held.snippet or '', _SNIPPET_WIDTH)!r}"
        )
    if detail.deliveries:
        lines.append("")
        # The sink status is the report's; notifications are listed with their own.
        status = "" if detail.sink_status is None else f": {line(str(detail.sink_status))}"
        lines.append(f"deliveries ({len(detail.deliveries)}){status}")
        for delivery in detail.deliveries:
            lines.append(f"  #{delivery.id} {line(delivery.kind)} {line(delivery.target)}")
            lines.append(f"      {_delivery_state(delivery)}")
            if delivery.error:
                lines.append(f"      {one_line(delivery.error, _ITEM_WIDTH)}")
    return "\n".join(lines)


def clipped_note(attempt: AttemptView) -> str | None:
    """What a clipped stored output lacks, or None when all of it is stored."""
    if not attempt.clipped:
        return None
    return (
        f"output clipped: first {attempt.stored_length:,} of {attempt.raw_length:,} bytes "
        f"stored (over max_output_bytes), sha256 {line(str(attempt.raw_sha256))}"
    )


def _undelivered(sink_status: DeliveryStatus | None) -> str:
    """The ``runs list`` marker of a report some sink has not received (yet)."""
    return f" (sink {sink_status})" if sink_status in OPEN_DELIVERY_STATUSES else ""


def _delivery_state(delivery: SinkDeliveryView) -> str:
    """A delivery's status, tries and when it is tried next, e.g. ``failed on attempt
    2 at 2026-11-21 09:00:00, next attempt 2026-11-21 09:02:00``."""
    tries = f"attempt {delivery.attempts}"
    if delivery.status == DeliveryStatus.PENDING:
        # A pending delivery is being tried, or its process stopped: the lease says when
        # another process takes it over.
        state = f"pending since {when(delivery.attempted_at)} ({tries})"
    else:
        state = f"{line(delivery.status)} on {tries} at {when(delivery.attempted_at)}"
    if delivery.status != DeliveryStatus.DELIVERED:
        state += (
            f", next attempt {when(delivery.next_attempt_at)}"
            if delivery.next_attempt_at is not None
            else ", given up (salvagelane runs redeliver --pending)"
        )
    return state


def delivery_line(delivery: DeliveryOutcome) -> str:
    """``runs redeliver RUN_ID``: how delivering to one sink went."""
    state = "delivered" if delivery.ok else f"failed: {one_line(delivery.error or '', 200)}"
    return f"{line(delivery.kind):<10} {line(delivery.target)}  {state}"


def redelivery_line(result: Redelivery) -> str:
    """``runs redeliver --pending``: one delivery taken by hand, as stored afterwards."""
    delivery = result.delivery
    if result.skipped is not None:
        state = f"not tried: {one_line(result.skipped, 200)}"
    elif delivery.status == DeliveryStatus.DELIVERED:
        state = f"delivered on attempt {delivery.attempts}"
    else:
        state = f"{line(delivery.status)} on attempt {delivery.attempts}"
        state += (
            f", next attempt {when(delivery.next_attempt_at)}"
            if delivery.next_attempt_at is not None
            else ", given up"
        )
        if delivery.error:
            state += f": {one_line(delivery.error, 200)}"
    kind, target = line(delivery.kind), line(delivery.target)
    return f"{line(delivery.run_id[:8])}  {kind:<10} {target}  {state}"


def redelivery_summary(*, tried: int, delivered: int) -> str:
    if tried == 0:
        return "nothing to deliver: every stored report reached its sinks"
    return f"{delivered} of {tried} deliveries delivered"


def raw_output(detail: RunDetail, number: int) -> str:
    """The raw output of attempt ``number``, exactly as stored (see :func:`clipped_note`)."""
    attempt = detail.attempt(number)
    if attempt.raw_output is None:
        raise NotFoundError(
            f"run {detail.id}: attempt {number} has no output "
            f"(the call failed: {attempt.provider_error})"
        )
    return attempt.raw_output


def captured_fixture(captured: CapturedFixture) -> str:
    """What ``fixture capture`` and ``quarantine export`` print about a written fixture."""
    lines = [
        f"fixture      {line(str(captured.path))}",
        f"run          {line(captured.run_id)}, attempt {captured.attempt}",
        f"instruction  {line(str(captured.meta.instruction))}",
        "definition   not kept: the run was stored before salvagelane kept definitions; "
        "replay it with --use-current"
        if captured.definition is None
        else f"definition   stored {line(captured.definition[:12])} (definition.json)",
        f"finish       {line(captured.meta.finish_reason or '-')}",
    ]
    expected = captured.expected
    if expected is None:
        lines.append(
            f"expected     not recorded: the run stored no report of attempt {captured.attempt}; "
            f"record today's outcome with: salvagelane replay {line(str(captured.path))} --update"
        )
    else:
        reasons = (
            ", ".join(
                f"{'output' if q.index is None else item_label(q.index)}: {line(str(q.reason))}"
                for q in expected.quarantined
            )
            or "none"
        )
        lines.append(
            f"expected     {line(str(expected.status))}: {len(expected.items)} item(s) kept, "
            f"{len(expected.quarantined)} quarantined ({reasons})"
        )
    if captured.corrections:
        lines.append(
            f"corrections  {captured.corrections} approved by an operator (corrections.json)"
        )
    return "\n".join(lines)
