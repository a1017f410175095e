"""The operator review lane of the quarantine: list, show, approve, reject, annotate.

Reached through :attr:`Store.quarantine <salvagelane.store.Store.quarantine>`. Every
method is one transaction; a change locks the item's row first (``SELECT ... FOR UPDATE``
on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already serialises writers) and checks its
state under that lock, so two operators cannot both approve one item. Every action, a
refused approval included, leaves a row in ``quarantine_reviews``.

This module judges nothing: the guardrails run in the core (``check_item``) before
:meth:`QuarantineLane.approve_quarantined` is called with the item they accepted.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.errors import NotFoundError, ReviewStateError
from salvagelane.store._rows import Transactions, decode_raw, summary, view
from salvagelane.store.figures import settle
from salvagelane.store.models import (
    AttemptRow,
    QuarantinedItemRow,
    QuarantineReviewRow,
    ReportItemRow,
    ReportRow,
    RunRow,
)
from salvagelane.store.values import (
    ApprovalView,
    BulkSelection,
    InputDigest,
    QuarantineDetail,
    QuarantineFilter,
    QuarantineReviewView,
    QuarantineView,
    ReportItemRecord,
    ReviewedItem,
)
from salvagelane.vocabulary import OUT_OF_THE_LANE, ItemOrigin, ReviewAction, ReviewStatus

INPUT_HEAD_BYTES = 4096
"""Bytes of an operator's refused input kept in the audit trail (with its size and hash)."""
CONTEXT_CHARS = 300
"""Characters of raw output shown on each side of an item's span."""
LARGEST_ID = 2**31 - 1
"""The largest item id the ``Integer`` column holds on every database (PostgreSQL's
``integer`` is 32 bits): a larger one names nothing, and must not reach the database,
which refuses it ("integer out of range"; SQLite's driver cannot bind one past 64 bits)."""


class QuarantineLane:
    """Review of quarantined items, on the store's database."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    # --- reads ------------------------------------------------------------------------------

    def list_quarantine(self, where: QuarantineFilter | None = None) -> list[QuarantineView]:
        """The items ``where`` selects, newest first (created_at, then id, descending)."""
        with self._transaction("list the quarantine") as session:
            stmt = _matching(where or QuarantineFilter()).add_columns(AttemptRow.number)
            rows = session.execute(stmt).tuples().all()
            return [_quarantineview(row, number) for row, number in rows]

    def count_by_reason(self, where: QuarantineFilter | None = None) -> dict[str, int]:
        """How many items ``where`` selects per reason (its limit and offset ignored),
        the most frequent first."""
        stmt = _filtered(
            sa.select(QuarantinedItemRow.reason, sa.func.count(QuarantinedItemRow.id)),
            where or QuarantineFilter(),
        ).group_by(QuarantinedItemRow.reason)
        with self._transaction("count the quarantine by reason") as session:
            counts = {str(reason): count for reason, count in session.execute(stmt).tuples()}
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def bulk_selection(self, where: QuarantineFilter) -> BulkSelection:
        """The pending items ``where`` selects (its ``review_status`` ignored), as a bulk
        reject's confirmation shows them: :meth:`reject_matching` takes back what it
        returns and rejects exactly those items."""
        pending = replace(where, review_status=ReviewStatus.PENDING)
        stmt = _matching(pending).with_only_columns(QuarantinedItemRow.id)
        with self._transaction("list the quarantine for a bulk reject") as session:
            return BulkSelection.of(session.scalars(stmt))

    def neighbours(
        self, where: QuarantineFilter, quarantine_id: int
    ) -> tuple[int | None, int | None]:
        """The ids of the items just newer and just older than ``quarantine_id`` among
        those ``where`` selects (newest first; its limit and offset ignored); None at
        either end. The item itself need not match."""
        chosen = replace(where, limit=None, offset=0)
        with self._transaction(f"find the neighbours of {quarantine_id}") as session:
            row = self._item(session, quarantine_id)
            at, ident = row.created_at, row.id
            created, key = QuarantinedItemRow.created_at, QuarantinedItemRow.id
            older = _matching(chosen).where(
                sa.or_(created < at, sa.and_(created == at, key < ident))
            )
            newer = (
                _matching(chosen)
                .where(sa.or_(created > at, sa.and_(created == at, key > ident)))
                .order_by(None)
                .order_by(created.asc(), key.asc())
            )
            found = [
                session.scalars(stmt.with_only_columns(key).limit(1)).first()
                for stmt in (newer, older)
            ]
        return found[0], found[1]

    def get_quarantine(
        self, quarantine_id: int, *, context_chars: int = CONTEXT_CHARS
    ) -> QuarantineDetail:
        """Everything about one item: its record, the raw text around its span, its run's
        report (if any) and its audit trail."""
        with self._transaction(f"read quarantined item {quarantine_id}") as session:
            row = self._item(session, quarantine_id)
            attempt = session.get(AttemptRow, row.attempt_id)
            run = session.get(RunRow, row.run_id)
            assert attempt is not None  # foreign keys
            assert run is not None
            before = span = after = None
            if attempt.raw_output is not None and row.span_start is not None:
                raw = decode_raw(attempt.raw_output)
                start, end = row.span_start, row.span_end or row.span_start
                before = raw[max(0, start - context_chars) : start]
                span = raw[start:end]
                after = raw[end : end + context_chars]
            report = _report_of(session, row.run_id)
            return view(
                QuarantineDetail,
                row,
                attempt_number=attempt.number,
                run_status=run.status,
                raw_before=before,
                raw_span=span,
                raw_after=after,
                report_id=None if report is None else report.id,
                report_attempt_id=None if report is None else report.attempt_id,
                report_items=None if report is None else _item_count(session, report.id),
                reviews=[view(QuarantineReviewView, r) for r in _reviews(session, row.id)],
            )

    def reviewed_items(
        self,
        where: QuarantineFilter,
        statuses: Collection[ReviewStatus],
        *,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[ReviewedItem]:
        """A page of the items ``where`` selects whose status is one of ``statuses``
        (approved, rejected), by id ascending from the first after ``after_id``, at most
        ``limit``: each with its span of the attempt's raw output, its run's definition
        version and the audit row that decided it. ``where``'s ``review_status``, limit
        and offset are ignored; page on with the last id returned."""
        decisions = {
            ReviewStatus.APPROVED: (ReviewAction.APPROVE,),
            ReviewStatus.REJECTED: (ReviewAction.REJECT, ReviewAction.BULK_REJECT),
        }
        unknown = set(statuses) - set(decisions)
        if unknown:
            raise ValueError(f"statuses: expected approved or rejected, got {sorted(unknown)}")
        actions = [action for status in statuses for action in decisions[status]]
        stmt = (
            _filtered(
                sa.select(QuarantinedItemRow, AttemptRow.number, RunRow.definition_version)
                .join(AttemptRow, AttemptRow.id == QuarantinedItemRow.attempt_id)
                .join(RunRow, RunRow.id == QuarantinedItemRow.run_id),
                replace(where, review_status=None),
            )
            .where(QuarantinedItemRow.review_status.in_(list(statuses)))
            .where(QuarantinedItemRow.id > after_id)
            .order_by(QuarantinedItemRow.id.asc())
            .limit(limit)
        )
        with self._transaction("read reviewed quarantined items") as session:
            rows = session.execute(stmt).tuples().all()
            spanned = {row.attempt_id for row, _, _ in rows if row.span_start is not None}
            raws = {
                ident: _whole_characters(raw, length)
                for ident, raw, length in session.execute(
                    sa.select(AttemptRow.id, AttemptRow.raw_output, AttemptRow.raw_length).where(
                        AttemptRow.id.in_(spanned), AttemptRow.raw_output.is_not(None)
                    )
                ).tuples()
                if raw is not None
            }
            decided: dict[int, QuarantineReviewView] = {}
            for review in session.scalars(
                sa.select(QuarantineReviewRow)
                .where(
                    QuarantineReviewRow.quarantine_id.in_([row.id for row, _, _ in rows]),
                    QuarantineReviewRow.action.in_(actions),
                )
                .order_by(QuarantineReviewRow.at, QuarantineReviewRow.id)
            ):
                decided[review.quarantine_id] = view(QuarantineReviewView, review)
            return [
                ReviewedItem(
                    item=_quarantineview(row, number),
                    raw_span=_span_of(raws.get(row.attempt_id), row),
                    definition_version=version,
                    decision=decided.get(row.id),
                )
                for row, number, version in rows
            ]

    # --- writes -----------------------------------------------------------------------------

    def approve_quarantined(
        self,
        quarantine_id: int,
        *,
        item: ReportItemRecord,
        expected_items: int,
        actor: str,
        note: str | None,
        now: datetime,
        audit: Mapping[str, Any] | None = None,
    ) -> ApprovalView:
        """Add ``item`` (accepted by the guardrails) to the run's report and mark the
        quarantined item ``approved``, in one transaction.

        ``expected_items`` is the report's item count the guardrails' item-count check
        saw: if another approval changed it meanwhile, nothing is written (ReviewStateError:
        check and approve again). The item is appended after the existing
        items; then the run's figures are settled (:func:`~salvagelane.store.figures.settle`):
        the run's and the report's status, ``partial`` and counts are written as every view
        computes them, so the run becomes ``ok`` once nothing of the chosen attempt is held
        back, unless its output was cut off. ``audit`` adds values to the audit row.
        """
        with self._transaction(f"approve quarantined item {quarantine_id}") as session:
            row = self._item(session, quarantine_id, for_update=True)
            require_pending(row, "approve")
            report = _report_of(session, row.run_id, for_update=True)
            if report is None:
                run = session.get(RunRow, row.run_id)
                raise _no_report(row.id, row.run_id, "?" if run is None else run.status)
            if report.attempt_id != row.attempt_id:
                # Only pending items reach here, and pending ones belong to the chosen attempt.
                raise ReviewStateError(
                    f"quarantined item #{row.id} comes from attempt {row.attempt_id}, but "
                    f"the report of run {row.run_id} comes from attempt {report.attempt_id}"
                )
            items = _item_count(session, report.id)
            if items != expected_items:
                raise ReviewStateError(
                    f"the report of run {row.run_id} holds {items} items, the guardrails "
                    f"checked the approval against {expected_items}: it changed meanwhile; "
                    "approve again"
                )
            last = session.scalar(
                sa.select(sa.func.max(ReportItemRow.position)).where(
                    ReportItemRow.report_id == report.id
                )
            )
            position = 0 if last is None else last + 1
            session.add(
                ReportItemRow(
                    report_id=report.id,
                    position=position,
                    source_index=item.source_index,
                    data=item.data,
                    span_start=item.span_start,
                    span_end=item.span_end,
                    coercions=None if item.coercions is None else list(item.coercions),
                    origin=ItemOrigin.OPERATOR,
                    repairs=None if item.repairs is None else list(item.repairs),
                )
            )
            run = session.get(RunRow, row.run_id, with_for_update=True)
            assert run is not None  # a foreign key
            before_report = {
                "status": report.status,
                "partial": report.partial,
                "counts": report.counts,
            }
            _decide(row, ReviewStatus.APPROVED, actor=actor, note=note, now=now)
            figures = settle(session, run, report)
            self._audit(
                session,
                row,
                ReviewAction.APPROVE,
                actor=actor,
                note=note,
                now=now,
                before={"review_status": ReviewStatus.PENDING, "report": before_report},
                after={
                    "review_status": ReviewStatus.APPROVED,
                    "item": item.data,
                    "position": position,
                    "report": {
                        "status": report.status,
                        "partial": report.partial,
                        "counts": report.counts,
                    },
                    **(audit or {}),
                },
            )
            return ApprovalView(
                quarantine_id=row.id,
                run_id=row.run_id,
                report_id=report.id,
                position=position,
                items=figures.kept,
                counts=report.counts,
                partial=figures.partial,
                status=figures.status,
                run=summary(run, figures),
            )

    def record_refused_approval(
        self,
        quarantine_id: int,
        *,
        received: InputDigest,
        error: Mapping[str, Any],
        actor: str,
        note: str | None,
        now: datetime,
    ) -> None:
        """Record an approval the guardrails refused: the audit row is all that changes.

        Of the operator's input it keeps ``received``: the size, the SHA-256 and at most
        :data:`INPUT_HEAD_BYTES` of it (clipped here too), never the whole payload: a
        refusal must not let anyone fill the database.
        """
        head = clip_utf8(received.head, INPUT_HEAD_BYTES)
        kept = {
            "bytes": received.size,
            "sha256": received.sha256,
            "head": head,
            "clipped": received.clipped or head != received.head,
        }
        with self._transaction(f"record a refused approval of {quarantine_id}") as session:
            row = self._item(session, quarantine_id, for_update=True)
            self._audit(
                session,
                row,
                ReviewAction.APPROVE_REFUSED,
                actor=actor,
                note=note,
                now=now,
                before={"review_status": row.review_status},
                after={"review_status": row.review_status, "input": kept},
                error=dict(error),
            )

    def reject_quarantined(
        self, quarantine_id: int, *, actor: str, note: str, now: datetime
    ) -> QuarantineView:
        """Mark a pending item ``rejected`` (the report keeps its ``partial`` flag)."""
        _require_note(note)
        with self._transaction(f"reject quarantined item {quarantine_id}") as session:
            row = self._item(session, quarantine_id, for_update=True)
            require_pending(row, "reject")
            self._reject(session, row, ReviewAction.REJECT, actor=actor, note=note, now=now)
            return _quarantineview(row, _attempt_number(session, row))

    def note_quarantined(
        self, quarantine_id: int, *, actor: str, note: str, now: datetime
    ) -> QuarantineView:
        """Attach a note to an item in any state; its status stays."""
        _require_note(note)
        with self._transaction(f"note quarantined item {quarantine_id}") as session:
            row = self._item(session, quarantine_id, for_update=True)
            self._audit(
                session,
                row,
                ReviewAction.NOTE,
                actor=actor,
                note=note,
                now=now,
                before={"review_note": row.review_note},
                after={"review_note": note},
            )
            row.review_note = note
            return _quarantineview(row, _attempt_number(session, row))

    def reject_matching(
        self,
        where: QuarantineFilter,
        *,
        actor: str,
        note: str,
        now: datetime,
        confirmed: BulkSelection | None = None,
    ) -> list[int]:
        """Reject every pending item ``where`` selects (newest first, up to its limit);
        returns their ids. ``where.review_status`` must be None or ``pending``.

        With ``confirmed`` (what :meth:`bulk_selection` gave the confirmation), only items
        up to its highest id are taken, and they must be exactly the confirmed ones: an
        item quarantined since is left pending, and a list that changed otherwise (an
        item approved meanwhile) rejects nothing (ReviewStateError)."""
        _require_note(note)
        if where.review_status not in (None, ReviewStatus.PENDING):
            raise ReviewStateError(
                f"bulk reject takes pending items only, not {where.review_status!r} ones"
            )
        pending = QuarantineFilter(
            instruction_id=where.instruction_id,
            reason=where.reason,
            review_status=ReviewStatus.PENDING,
            since=where.since,
            through_id=where.through_id if confirmed is None else confirmed.through_id,
            limit=where.limit,
        )
        with self._transaction("reject matching quarantined items") as session:
            rows = list(session.scalars(_matching(pending).with_for_update()))
            if confirmed is not None:
                found = BulkSelection.of(row.id for row in rows)
                if found != confirmed:
                    raise ReviewStateError(
                        f"bulk reject: the pending items of this filter up to id "
                        f"{confirmed.through_id} changed since they were confirmed "
                        f"({confirmed.count} confirmed, {found.count} now): nothing was "
                        "rejected; look at the list again"
                    )
            for row in rows:
                self._reject(
                    session, row, ReviewAction.BULK_REJECT, actor=actor, note=note, now=now
                )
            return [row.id for row in rows]

    # --- helpers ----------------------------------------------------------------------------

    def _item(
        self, session: Session, quarantine_id: int, *, for_update: bool = False
    ) -> QuarantinedItemRow:
        row = (
            session.get(QuarantinedItemRow, quarantine_id, with_for_update=for_update)
            if 0 < quarantine_id <= LARGEST_ID
            else None
        )
        if row is None:
            raise NotFoundError(f"{self._url}: no quarantined item with id {quarantine_id}")
        return row

    def _reject(
        self,
        session: Session,
        row: QuarantinedItemRow,
        action: ReviewAction,
        *,
        actor: str,
        note: str,
        now: datetime,
    ) -> None:
        _decide(row, ReviewStatus.REJECTED, actor=actor, note=note, now=now)
        self._audit(
            session,
            row,
            action,
            actor=actor,
            note=note,
            now=now,
            before={"review_status": ReviewStatus.PENDING},
            after={"review_status": ReviewStatus.REJECTED},
        )

    @staticmethod
    def _audit(
        session: Session,
        row: QuarantinedItemRow,
        action: ReviewAction,
        *,
        actor: str,
        note: str | None,
        now: datetime,
        before: Any,
        after: Any,
        error: Any = None,
    ) -> None:
        session.add(
            QuarantineReviewRow(
                quarantine_id=row.id,
                action=action,
                actor=actor,
                at=now,
                note=note,
                before=before,
                after=after,
                error=error,
            )
        )


def _matching(where: QuarantineFilter) -> sa.Select[tuple[QuarantinedItemRow]]:
    """The items ``where`` selects, newest first: each filter is the leading column of
    one of the (column, created_at) indexes, and the order is that index's."""
    stmt = (
        sa.select(QuarantinedItemRow)
        .join(AttemptRow, AttemptRow.id == QuarantinedItemRow.attempt_id)
        .order_by(QuarantinedItemRow.created_at.desc(), QuarantinedItemRow.id.desc())
    )
    stmt = _filtered(stmt, where)
    if where.offset:
        stmt = stmt.offset(where.offset)
    if where.limit is not None:
        stmt = stmt.limit(where.limit)
    return stmt


S = TypeVar("S", bound=sa.Select[Any])


def _filtered(stmt: S, where: QuarantineFilter) -> S:
    """``stmt`` with the conditions of ``where`` (not its limit and offset)."""
    if where.review_status is None:
        stmt = stmt.where(QuarantinedItemRow.review_status.not_in(OUT_OF_THE_LANE))
    else:
        stmt = stmt.where(QuarantinedItemRow.review_status == where.review_status)
    if where.instruction_id is not None:
        stmt = stmt.where(QuarantinedItemRow.instruction_id == where.instruction_id)
    if where.reason is not None:
        stmt = stmt.where(QuarantinedItemRow.reason == where.reason)
    if where.since is not None:
        stmt = stmt.where(QuarantinedItemRow.created_at >= where.since)
    if where.through_id is not None:
        stmt = stmt.where(QuarantinedItemRow.id <= where.through_id)
    return stmt


def _whole_characters(data: bytes, length: int | None) -> str:
    """The stored output ``data`` as text; clipped (shorter than ``length``), without its
    last 3 characters, which may be the pieces of one cut in two."""
    text = decode_raw(data)
    if length is not None and len(data) < length:
        return text[:-3]
    return text


def _span_of(raw: str | None, row: QuarantinedItemRow) -> str | None:
    """``row``'s span of ``raw``; None without one, or when ``raw`` (stored clipped)
    ends before the span does."""
    if raw is None or row.span_start is None:
        return None
    end = row.span_end if row.span_end is not None else row.span_start
    if end > len(raw):
        return None
    return raw[row.span_start : end]


def _quarantineview(row: QuarantinedItemRow, attempt_number: int) -> QuarantineView:
    return view(QuarantineView, row, attempt_number=attempt_number)


def _attempt_number(session: Session, row: QuarantinedItemRow) -> int:
    number = session.scalar(sa.select(AttemptRow.number).where(AttemptRow.id == row.attempt_id))
    assert number is not None  # a foreign key
    return number


def _report_of(session: Session, run_id: str, *, for_update: bool = False) -> ReportRow | None:
    stmt = sa.select(ReportRow).where(ReportRow.run_id == run_id)
    if for_update:
        stmt = stmt.with_for_update()
    return session.scalars(stmt).one_or_none()


def _item_count(session: Session, report_id: str) -> int:
    return (
        session.scalar(
            sa.select(sa.func.count(ReportItemRow.id)).where(ReportItemRow.report_id == report_id)
        )
        or 0
    )


def _reviews(session: Session, quarantine_id: int) -> Iterator[QuarantineReviewRow]:
    return iter(
        session.scalars(
            sa.select(QuarantineReviewRow)
            .where(QuarantineReviewRow.quarantine_id == quarantine_id)
            .order_by(QuarantineReviewRow.at, QuarantineReviewRow.id)
        )
    )


def require_pending(row: QuarantinedItemRow | QuarantineView, action: str) -> None:
    """ReviewStateError unless ``row`` is pending (``action`` names what was tried)."""
    if row.review_status == ReviewStatus.PENDING:
        return
    by = f" by {row.reviewed_by}" if row.reviewed_by else ""
    when = f" at {row.reviewed_at.isoformat()}" if row.reviewed_at else ""
    if row.review_status == ReviewStatus.SUPERSEDED:
        why = "it belongs to an attempt that was not chosen for the report"
    elif row.review_status == ReviewStatus.REASKED:
        why = "a follow-up request mended it: the re-asked item is in the report"
    else:
        why = f"it was {row.review_status}{by}{when}"
    raise ReviewStateError(
        f"cannot {action} quarantined item #{row.id}: expected a pending item, "
        f"it is {row.review_status} ({why})"
    )


def require_report(detail: QuarantineDetail) -> None:
    """ReviewStateError when ``detail``'s run has no report to add an approved item to."""
    if detail.report_id is None:
        raise _no_report(detail.id, detail.run_id, detail.run_status)


def _no_report(quarantine_id: int, run_id: str, run_status: str) -> ReviewStateError:
    # An approval adds the item to the run's report; making up a report for a run that
    # produced none (its envelope, status, counts) would not be the model's nor the
    # operator's: refused.
    return ReviewStateError(
        f"cannot approve quarantined item #{quarantine_id}: its run {run_id} has no report "
        f"(the run is {run_status}), so there is no report to add the item to; "
        "reject it, or run the instruction again"
    )


def _require_note(note: str) -> None:
    if not note.strip():
        raise ValueError("note: expected some text, got an empty note")


def _decide(
    row: QuarantinedItemRow, status: ReviewStatus, *, actor: str, note: str | None, now: datetime
) -> None:
    row.review_status = status
    row.reviewed_by = actor
    row.reviewed_at = now
    if note is not None:
        row.review_note = note


def clip_utf8(text: str, limit: int) -> str:
    """The longest start of ``text`` whose UTF-8 form fits in ``limit`` bytes."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")
