"""The one definition of a run's figures: status, partial, kept, quarantined, candidates,
finish reason (ADR 0007, "One truth for a run's figures").

Every view of a run reads them from here: ``runs list``, ``runs show`` (text and JSON),
``run --json``, the report payload a sink receives, and the answer of an approval. An
approval writes them back onto the run's and the report's rows with :func:`settle`, so a
query of the tables tells the same story too. Nothing else counts.

- **kept**: the items of the run's report, the model's and the operator's.
  **operator_approved**: those of them an operator added (origin ``operator``).
- **quarantined**: the chosen attempt's quarantined items still held back, ``pending``
  or ``rejected``. An approved one is in the report (counted as kept); ``superseded``
  ones (rejects of attempts that were not chosen) are not counted.
  Candidates **folded** past ``guardrails.max_quarantined`` (counted by reason in the
  report's stored counts, with no row) are held back too, for good: no review takes them.
- **candidates**: the items the chosen attempt's output held (kept by the model plus
  quarantined with an index), fixed when the run ended; reviews do not change it. An
  output over the byte cap holds none: it is quarantined whole.
- **output_cut**: why the chosen output counts as cut off (``truncated``, ``stream``
  broken, ``envelope`` damaged). No review can undo these.
- **status**: a run without a report keeps its own (``running``, ``failed``,
  ``interrupted``, ``missed``); a report without an item keeps the status it ended with
  (``failed``, or ``ok`` for an output whose list was empty); otherwise ``partial`` while
  an item is held back or the output was cut off, else ``ok``. **partial** is
  ``status == "partial"``.
- **finish_reason**: the report's (the chosen attempt's canonical finish reason), else
  the last attempt's (``error`` for a call that failed), else None (no call was made).
  ``native_finish_reason`` is the provider's own word for the same attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.core.records import reason_ordered
from salvagelane.store.models import (
    AttemptRow,
    QuarantinedItemRow,
    ReportItemRow,
    ReportRow,
    RunRow,
)
from salvagelane.vocabulary import (
    FINAL_RUN_STATUSES,
    ItemOrigin,
    OutputCut,
    ReviewStatus,
    RunStatus,
)

HELD_BACK = (ReviewStatus.PENDING, ReviewStatus.REJECTED)
"""Review states of a quarantined item of the chosen attempt that keep it out of the report."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFigures:
    """A run's figures, as every view shows them (see the module docstring)."""

    status: RunStatus
    partial: bool
    kept: int
    operator_approved: int
    quarantined: int
    # Of ``kept``, the items a follow-up request mended (origin reask).
    reasked: int = 0
    quarantined_by_reason: Mapping[str, int]
    folded: int
    folded_by_reason: Mapping[str, int]
    candidates: int
    finish_reason: str | None
    native_finish_reason: str | None
    output_cut: tuple[OutputCut, ...]


def figures_of(session: Session, runs: Sequence[RunRow]) -> dict[str, RunFigures]:
    """The figures of ``runs`` by run id, from a few batch queries."""
    ids = [run.id for run in runs]
    if not ids:
        return {}
    reports = {
        row.run_id: row
        for row in session.execute(
            sa.select(
                ReportRow.run_id,
                ReportRow.id,
                ReportRow.attempt_id,
                ReportRow.status,
                ReportRow.truncated,
                ReportRow.finish_reason,
                ReportRow.counts,
            ).where(ReportRow.run_id.in_(ids))
        )
    }
    kept: dict[tuple[str, ItemOrigin], int] = {
        (report_id, origin): count
        for report_id, origin, count in session.execute(
            sa.select(
                ReportItemRow.report_id, ReportItemRow.origin, sa.func.count(ReportItemRow.id)
            )
            .join(ReportRow, ReportRow.id == ReportItemRow.report_id)
            .where(ReportRow.run_id.in_(ids))
            .group_by(ReportItemRow.report_id, ReportItemRow.origin)
        ).tuples()
    }
    # Every quarantined item of each report's attempt, by reason, review state and whether
    # it stood for a candidate (an index) or for the whole output.
    chosen: dict[str, list[tuple[str, ReviewStatus, bool, int]]] = {}
    for run_id, reason, review, indexed, count in session.execute(
        sa.select(
            QuarantinedItemRow.run_id,
            QuarantinedItemRow.reason,
            QuarantinedItemRow.review_status,
            QuarantinedItemRow.source_index.is_not(None),
            sa.func.count(QuarantinedItemRow.id),
        )
        .join(ReportRow, ReportRow.attempt_id == QuarantinedItemRow.attempt_id)
        # The run_id filter lets the database use the quarantine's run_id index.
        .where(QuarantinedItemRow.run_id.in_(ids), ReportRow.run_id.in_(ids))
        .group_by(
            QuarantinedItemRow.run_id,
            QuarantinedItemRow.reason,
            QuarantinedItemRow.review_status,
            QuarantinedItemRow.source_index.is_not(None),
        )
    ).tuples():
        chosen.setdefault(run_id, []).append((reason, review, bool(indexed), count))
    attempts: dict[str, list[Any]] = {}
    for row in session.execute(
        sa.select(
            AttemptRow.run_id,
            AttemptRow.id,
            AttemptRow.finish_reason,
            AttemptRow.native_finish_reason,
            AttemptRow.stream_error,
        )
        .where(AttemptRow.run_id.in_(ids))
        .order_by(AttemptRow.number)
    ):
        attempts.setdefault(row.run_id, []).append(row)

    figures: dict[str, RunFigures] = {}
    for run in runs:
        calls = attempts.get(run.id, [])
        report = reports.get(run.id)
        if report is not None and run.status not in FINAL_RUN_STATUSES:
            # The run row was read before the transaction that wrote its report and ended
            # it committed (each statement sees the newest commit on PostgreSQL): it is
            # still running for this read, whatever the report says.
            report = None
        if report is None:
            last = calls[-1] if calls else None
            figures[run.id] = RunFigures(
                status=run.status,
                partial=False,
                kept=0,
                operator_approved=0,
                quarantined=0,
                quarantined_by_reason={},
                folded=0,
                folded_by_reason={},
                candidates=0,
                finish_reason=None if last is None else last.finish_reason,
                native_finish_reason=None if last is None else last.native_finish_reason,
                output_cut=(),
            )
            continue
        call = next((a for a in calls if a.id == report.attempt_id), None)
        by_model = kept.get((report.id, ItemOrigin.MODEL), 0)
        by_reask = kept.get((report.id, ItemOrigin.REASK), 0)
        kept_total = sum(n for (report_id, _), n in kept.items() if report_id == report.id)
        rows = chosen.get(run.id, [])
        held: dict[str, int] = {}
        for reason, review, _, count in rows:
            if review in HELD_BACK:
                held[reason] = held.get(reason, 0) + count
        stored = report.counts if isinstance(report.counts, Mapping) else {}
        folded = _folded(stored.get("folded_by_reason"))
        for reason, count in folded.items():
            held[reason] = held.get(reason, 0) + count
        candidates = stored.get("candidates")
        if not isinstance(candidates, int) or isinstance(candidates, bool):
            candidates = by_model + sum(count for _, _, indexed, count in rows if indexed)
        cut = _output_cut(
            truncated=report.truncated,
            stream_error=None if call is None else call.stream_error,
            envelope_issues=stored.get("envelope_issues"),
            legacy_partial=report.status == RunStatus.PARTIAL and not rows,
        )
        quarantined = sum(held.values())
        # A report without an item keeps the status it ended with (approvals add items).
        status = (
            run.status
            if kept_total == 0
            else RunStatus.PARTIAL
            if quarantined or cut
            else RunStatus.OK
        )
        figures[run.id] = RunFigures(
            status=status,
            partial=status == RunStatus.PARTIAL,
            kept=kept_total,
            operator_approved=kept_total - by_model - by_reask,
            reasked=by_reask,
            quarantined=quarantined,
            quarantined_by_reason=reason_ordered(held),
            folded=sum(folded.values()),
            folded_by_reason=folded,
            candidates=candidates,
            finish_reason=report.finish_reason,
            native_finish_reason=None if call is None else call.native_finish_reason,
            output_cut=cut,
        )
    return figures


def _folded(stored: Any) -> dict[str, int]:
    """The stored ``folded_by_reason`` counts; what is not a count is not counted."""
    if not isinstance(stored, Mapping):
        return {}
    return {
        str(reason): count
        for reason, count in stored.items()
        if isinstance(count, int) and not isinstance(count, bool) and count > 0
    }


def _output_cut(
    *, truncated: bool, stream_error: str | None, envelope_issues: Any, legacy_partial: bool
) -> tuple[OutputCut, ...]:
    cut = []
    if truncated:
        cut.append(OutputCut.TRUNCATED)
    if stream_error is not None:
        cut.append(OutputCut.STREAM)
    if isinstance(envelope_issues, int) and not isinstance(envelope_issues, bool):
        if envelope_issues > 0:
            cut.append(OutputCut.ENVELOPE)
    elif legacy_partial and not cut:
        # A report stored before envelope issues were counted: partial with nothing
        # quarantined, not truncated and an intact stream was partial for its envelope.
        cut.append(OutputCut.ENVELOPE)
    return tuple(cut)


def report_counts(stored: Any, figures: RunFigures) -> dict[str, Any]:
    """The report's ``counts`` as every view shows them (and an approval stores them):
    what was stored, with the figures that reviews move written over it."""
    counts = dict(stored) if isinstance(stored, Mapping) else {}
    counts.update(
        candidates=figures.candidates,
        accepted=figures.kept,
        quarantined=figures.quarantined,
        by_reason=dict(figures.quarantined_by_reason),
        operator_approved=figures.operator_approved,
    )
    return counts


def settle(session: Session, run: RunRow, report: ReportRow) -> RunFigures:
    """Write ``run``'s figures onto its row and its report's (status, partial, counts)
    after a review changed them; returns them. The caller holds both rows locked."""
    session.flush()
    figures = figures_of(session, [run])[run.id]
    run.status = figures.status
    report.status = figures.status
    report.partial = figures.partial
    report.counts = report_counts(report.counts, figures)
    return figures
