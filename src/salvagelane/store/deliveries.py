"""The delivery outbox: claiming deliveries of stored reports to sinks, and their results.

Reached through :attr:`Store.deliveries <salvagelane.store.Store.deliveries>`. A
delivery is written ``pending`` with its report (:meth:`Store.finish_run`), its first
try leased to the process that wrote it until ``next_attempt_at``. Whoever tries a
delivery claims it first: the claim adds one to ``attempts`` and moves
``next_attempt_at`` to the end of its lease, in one conditional UPDATE (or under the row
lock of ``SELECT ... FOR UPDATE SKIP LOCKED`` for a batch), so two processes never hold
the same try. A result is recorded only while ``attempts`` is still the claimed one: a
process whose lease ran out and whose delivery was taken over cannot overwrite the
newer try's result.

Every method is one transaction. A change to a run's ``sink_status`` locks the run's row
first (SQLite's ``BEGIN IMMEDIATE`` already serialises writers). This module decides no
policy: the caller says when a lease ends and when a failed delivery is due again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from salvagelane.errors import NotFoundError
from salvagelane.store._rows import Transactions, deliveries_of, get_run, view
from salvagelane.store.models import ReportRow, RunRow, SinkDeliveryRow
from salvagelane.store.values import (
    ClaimedDelivery,
    DeliveryRun,
    OpenDelivery,
    PendingDelivery,
    SinkDeliveryView,
)
from salvagelane.vocabulary import OPEN_DELIVERY_STATUSES, DeliveryStatus


class DeliveryOutbox:
    """The deliveries of reports to sinks, on the store's database."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    # --- reads ------------------------------------------------------------------------------

    def list_open(self, *, limit: int | None = None) -> list[OpenDelivery]:
        """Every undelivered delivery (the latest to its sink, ``pending`` or ``failed``,
        given up or not), oldest run first, with its run."""
        stmt = (
            sa.select(SinkDeliveryRow, RunRow)
            .join(RunRow, RunRow.id == SinkDeliveryRow.run_id)
            .where(SinkDeliveryRow.status.in_(OPEN_DELIVERY_STATUSES), _is_latest())
            .order_by(RunRow.created_at, RunRow.id, SinkDeliveryRow.id)
            .limit(limit)
        )
        with self._transaction("list undelivered reports") as session:
            return [
                OpenDelivery(delivery=view(SinkDeliveryView, row), run=_run_of(run))
                for row, run in session.execute(stmt).tuples()
            ]

    def get(self, delivery_id: int) -> SinkDeliveryView:
        """One delivery as stored; NotFoundError for an unknown id."""
        with self._transaction(f"read sink delivery {delivery_id}") as session:
            return view(SinkDeliveryView, self._row(session, delivery_id))

    # --- claims -----------------------------------------------------------------------------

    def claim_due(
        self, *, now: datetime, lease_until: datetime, limit: int, max_attempts: int
    ) -> list[ClaimedDelivery]:
        """Claim up to ``limit`` deliveries due at ``now`` (``pending`` or ``failed`` with
        ``next_attempt_at`` at or before it) that have had fewer than ``max_attempts``
        tries, oldest due first, each leased until ``lease_until``.

        Rows another transaction has locked are skipped (PostgreSQL), so concurrent
        claimers split the due deliveries between them instead of sending one twice.
        """
        stmt = (
            sa.select(SinkDeliveryRow)
            .where(
                SinkDeliveryRow.status.in_(OPEN_DELIVERY_STATUSES),
                SinkDeliveryRow.next_attempt_at <= now,
                SinkDeliveryRow.attempts < max_attempts,
                _is_latest(),
            )
            .order_by(SinkDeliveryRow.next_attempt_at, SinkDeliveryRow.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=SinkDeliveryRow)
        )
        with self._transaction("claim due sink deliveries") as session:
            rows = list(session.scalars(stmt))
            for row in rows:
                _lease(row, now=now, lease_until=lease_until)
            session.flush()
            return _claims(session, rows)

    def give_up_exhausted(
        self, *, now: datetime, max_attempts: int, limit: int
    ) -> list[SinkDeliveryView]:
        """Stop retrying the deliveries due at ``now`` that have had ``max_attempts`` tries:
        a ``failed`` one keeps its error, a ``pending`` one (its last try never ended: the
        process delivering it stopped) becomes ``failed`` saying so. Neither is due again.
        Returns them as now stored."""
        stmt = (
            sa.select(SinkDeliveryRow.id, SinkDeliveryRow.run_id, SinkDeliveryRow.attempts)
            .where(
                SinkDeliveryRow.status.in_(OPEN_DELIVERY_STATUSES),
                SinkDeliveryRow.next_attempt_at <= now,
                SinkDeliveryRow.attempts >= max_attempts,
            )
            .order_by(SinkDeliveryRow.next_attempt_at, SinkDeliveryRow.id)
            .limit(limit)
        )
        with self._transaction("list exhausted sink deliveries") as session:
            exhausted = session.execute(stmt).tuples().all()
        given_up: list[SinkDeliveryView] = []
        for delivery_id, run_id, attempts in exhausted:
            cut_off = (
                f"try {attempts} never finished (the process delivering it stopped); "
                f"given up after {attempts} tries"
            )
            with self._transaction(f"give up sink delivery {delivery_id}") as session:
                run = get_run(session, run_id, for_update=True)
                due = (SinkDeliveryRow.next_attempt_at <= now,)
                changed = _update(
                    session,
                    delivery_id,
                    expect_attempts=attempts,
                    extra=(SinkDeliveryRow.status == DeliveryStatus.PENDING, *due),
                    status=DeliveryStatus.FAILED,
                    error=cut_off,
                    attempted_at=now,
                    next_attempt_at=None,
                ) or _update(
                    session,
                    delivery_id,
                    expect_attempts=attempts,
                    extra=(SinkDeliveryRow.status == DeliveryStatus.FAILED, *due),
                    next_attempt_at=None,
                )
                if changed:
                    refresh_sink_status(session, run)
                    given_up.append(view(SinkDeliveryView, self._row(session, delivery_id)))
        return given_up

    def claim(
        self, delivery_id: int, *, attempts: int, now: datetime, lease_until: datetime
    ) -> ClaimedDelivery | None:
        """Claim one undelivered delivery, due or not (an operator's redelivery), if it has
        still had ``attempts`` tries: None when another process claimed it meanwhile or it
        is no longer undelivered."""
        with self._transaction(f"claim sink delivery {delivery_id}") as session:
            changed = _update(
                session,
                delivery_id,
                expect_attempts=attempts,
                extra=(SinkDeliveryRow.status.in_(OPEN_DELIVERY_STATUSES),),
                attempts=attempts + 1,
                attempted_at=now,
                next_attempt_at=lease_until,
            )
            if not changed:
                return None
            return _claims(session, [self._row(session, delivery_id)])[0]

    def claim_target(
        self,
        run_id: str,
        *,
        kind: str,
        target: str,
        now: datetime,
        lease_until: datetime,
        also: Sequence[str] = (),
    ) -> ClaimedDelivery:
        """Claim the delivery of ``run_id``'s report to the sink ``kind`` at ``target``:
        its undelivered one, due or not, or else a new ``pending`` one (the report was
        delivered there before, or never tried there): an operator's redelivery.
        ``also``: other targets the same sink's deliveries may be recorded under (its
        path template, by versions that did not fill it in)."""
        with self._transaction(f"claim a sink delivery of run {run_id}") as session:
            run = get_run(session, run_id, for_update=True)
            if (
                session.scalars(sa.select(ReportRow.id).where(ReportRow.run_id == run_id)).first()
                is None
            ):
                raise NotFoundError(
                    f"{self._url}: run {run_id} has no report to deliver (it is {run.status})"
                )
            latest = session.scalars(
                sa.select(SinkDeliveryRow)
                .where(
                    SinkDeliveryRow.run_id == run_id,
                    SinkDeliveryRow.kind == kind,
                    SinkDeliveryRow.target.in_([target, *also]),
                )
                .order_by(SinkDeliveryRow.id.desc())
                .limit(1)
                .with_for_update()
            ).first()
            if latest is not None and latest.status in OPEN_DELIVERY_STATUSES:
                _lease(latest, now=now, lease_until=lease_until)
                session.flush()
                return _claims(session, [latest])[0]
            pending = PendingDelivery(kind=kind, target=target, next_attempt_at=lease_until)
            return enqueue(session, run, [pending], at=now)[0]

    def ensure(
        self,
        run_id: str,
        *,
        kind: str,
        target: str,
        now: datetime,
        lease_until: datetime,
    ) -> ClaimedDelivery | None:
        """The one delivery of ``run_id`` to ``kind`` at ``target`` (a notification: sent
        once per run, event and target): a new ``pending`` one leased to the caller when
        there is none, in any state; None when there is one already. Under the run's row
        lock, so two processes cannot both create it."""
        with self._transaction(f"record a notification of run {run_id}") as session:
            run = get_run(session, run_id, for_update=True)
            existing = session.scalars(
                sa.select(SinkDeliveryRow.id)
                .where(
                    SinkDeliveryRow.run_id == run_id,
                    SinkDeliveryRow.kind == kind,
                    SinkDeliveryRow.target == target,
                )
                .limit(1)
            ).first()
            if existing is not None:
                return None
            pending = PendingDelivery(kind=kind, target=target, next_attempt_at=lease_until)
            return enqueue(session, run, [pending], at=now)[0]

    # --- results ----------------------------------------------------------------------------

    def record_result(
        self,
        claim: ClaimedDelivery,
        *,
        error: str | None,
        now: datetime,
        retry_at: datetime | None = None,
    ) -> SinkDeliveryView | None:
        """Record how the claimed try ended: ``delivered`` without ``error``, else
        ``failed`` with it, due again at ``retry_at`` (None: given up). Updates the run's
        ``sink_status``. None, and nothing written, when another process has claimed the
        delivery since (this claim's lease ran out): the newer try's result stands."""
        with self._transaction(f"record sink delivery {claim.id}") as session:
            run = get_run(session, claim.run.id, for_update=True)
            changed = _update(
                session,
                claim.id,
                expect_attempts=claim.attempts,
                extra=(SinkDeliveryRow.run_id == claim.run.id,),
                status=DeliveryStatus.DELIVERED if error is None else DeliveryStatus.FAILED,
                error=error,
                attempted_at=now,
                next_attempt_at=None if error is None else retry_at,
            )
            if not changed:
                return None
            refresh_sink_status(session, run)
            return view(SinkDeliveryView, self._row(session, claim.id))

    def _row(self, session: Session, delivery_id: int) -> SinkDeliveryRow:
        row = session.get(SinkDeliveryRow, delivery_id, populate_existing=True)
        if row is None:
            raise NotFoundError(f"{self._url}: no sink delivery with id {delivery_id}")
        return row


# --- helpers ------------------------------------------------------------------------------------


NOTIFICATION_KIND_PREFIX = "notify-"
"""The kind of a notification's deliveries starts so (``notify-webhook``,
``notify-email``): they share the outbox with the report's sinks, not its sink status."""


def enqueue(
    session: Session, run: RunRow, deliveries: Sequence[PendingDelivery], *, at: datetime
) -> list[ClaimedDelivery]:
    """Write ``deliveries`` of ``run`` as ``pending``, their first try leased to the caller."""
    rows = [
        SinkDeliveryRow(
            run_id=run.id,
            kind=delivery.kind,
            target=delivery.target,
            status=DeliveryStatus.PENDING,
            error=None,
            attempted_at=at,
            attempts=1,
            next_attempt_at=delivery.next_attempt_at,
        )
        for delivery in deliveries
    ]
    if not rows:
        return []
    session.add_all(rows)
    session.flush()
    refresh_sink_status(session, run)
    owner = _run_of(run)
    return [
        ClaimedDelivery(id=row.id, run=owner, kind=row.kind, target=row.target, attempts=1)
        for row in rows
    ]


def refresh_sink_status(session: Session, run: RunRow) -> None:
    """Set ``run.sink_status`` from the latest delivery to each sink: ``pending`` while
    any is pending, else ``failed`` if any failed, else ``delivered`` (None: no delivery).
    A later delivery to a sink replaces an earlier one, so a retry that worked clears
    the failure. The caller holds the run's row lock, so concurrent results for two
    sinks of one run cannot each miss the other's."""
    latest: dict[tuple[str, str], DeliveryStatus] = {}
    for row in deliveries_of(session, run.id):
        if row.kind.startswith(NOTIFICATION_KIND_PREFIX):
            continue  # a notification is about the run, not a delivery of its report
        latest[(row.kind, row.target)] = row.status
    statuses = set(latest.values())
    if not statuses:
        run.sink_status = None
    elif DeliveryStatus.PENDING in statuses:
        run.sink_status = DeliveryStatus.PENDING
    elif DeliveryStatus.FAILED in statuses:
        run.sink_status = DeliveryStatus.FAILED
    else:
        run.sink_status = DeliveryStatus.DELIVERED


def _is_latest() -> sa.ColumnElement[bool]:
    """True for a delivery that no later delivery to the same sink of its run replaces."""
    later = aliased(SinkDeliveryRow)
    return ~sa.exists().where(
        later.run_id == SinkDeliveryRow.run_id,
        later.kind == SinkDeliveryRow.kind,
        later.target == SinkDeliveryRow.target,
        later.id > SinkDeliveryRow.id,
    )


def _lease(row: SinkDeliveryRow, *, now: datetime, lease_until: datetime) -> None:
    row.attempts += 1
    row.attempted_at = now
    row.next_attempt_at = lease_until


def _update(
    session: Session,
    delivery_id: int,
    *,
    expect_attempts: int,
    extra: tuple[sa.ColumnElement[bool], ...],
    **values: object,
) -> bool:
    """One conditional UPDATE of a delivery still at ``expect_attempts`` tries (and
    matching ``extra``); whether it changed the row. The condition, not a prior read,
    decides: two concurrent updates cannot both pass it."""
    result = session.execute(
        sa.update(SinkDeliveryRow)
        .where(
            SinkDeliveryRow.id == delivery_id, SinkDeliveryRow.attempts == expect_attempts, *extra
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def _run_of(run: RunRow) -> DeliveryRun:
    return DeliveryRun(
        id=run.id, instruction_id=run.instruction_id, definition_sha256=run.definition_sha256
    )


def _claims(session: Session, rows: list[SinkDeliveryRow]) -> list[ClaimedDelivery]:
    runs = {
        run.id: _run_of(run)
        for run in session.scalars(
            sa.select(RunRow).where(RunRow.id.in_({row.run_id for row in rows}))
        )
    }
    return [
        ClaimedDelivery(
            id=row.id, run=runs[row.run_id], kind=row.kind, target=row.target, attempts=row.attempts
        )
        for row in rows
    ]
