"""What the database holds right now, counted: the state half of the metrics (issue 17).

Reached through :attr:`Store.state <salvagelane.store.Store.state>`.
:mod:`salvagelane.runtime.metrics` reads one :class:`StoreState` per scrape, so the
gauges equal what every other view of the database shows, whichever process wrote the
rows and however often the processes restarted. Every figure is one aggregate query
(``GROUP BY``): no row is read into
Python. What a read costs on a long history: ADR 0014 and ``benchmarks/metrics_state.py``.

- **runs**: runs per (instruction, status), every status the table holds, read as plain
  text so that a status a newer salvagelane writes (``queued``) is counted, not refused.
- **quarantine_pending**: quarantined items awaiting review (``pending``) per
  (instruction, reason). Superseded, approved and rejected ones are settled.
- **deliveries**: open deliveries per status (``pending``, ``failed``).
- **queued_runs**: runs whose status is ``queued`` (claimed by ``serve --dispatch queue``,
  not yet taken by a worker).
- **queue_jobs**: jobs waiting (``todo``) in procrastinate's ``procrastinate_jobs`` per
  queue, None when the database has no such table.
- **queue**: queued runs per instruction (count, oldest) and the workers consuming the
  task queue (:mod:`.backlog`), for how long the oldest waits and whether it is stalled.
- **last_clean**: per instruction, the fire time of the newest *clean* scheduled run (as
  :mod:`.health` defines clean: trigger ``schedule`` or ``catch_up``, status ``ok``, and no
  item an operator had to approve into the report).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.store._rows import Transactions
from salvagelane.store.backlog import NO_QUEUE, QueueFigures, read_figures
from salvagelane.store.health import SCHEDULED_TRIGGERS
from salvagelane.store.models import (
    QuarantinedItemRow,
    ReportItemRow,
    ReportRow,
    RunRow,
    SinkDeliveryRow,
)
from salvagelane.vocabulary import (
    OPEN_DELIVERY_STATUSES,
    ItemOrigin,
    ReviewStatus,
    RunStatus,
)

QUEUED = "queued"
"""The run status of a run waiting in a task queue (the queue dispatch writes it); read
by its word, so this module counts it whether or not this version's RunStatus has it."""
PROCRASTINATE_JOBS = "procrastinate_jobs"
"""procrastinate's job table; its ``todo`` jobs are the queue's backlog."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreState:
    """The counts of one read (see the module docstring)."""

    runs: Mapping[tuple[str, str], int]
    quarantine_pending: Mapping[tuple[str, str], int]
    deliveries: Mapping[str, int]
    queued_runs: int
    queue_jobs: Mapping[str, int] | None
    last_clean: Mapping[str, datetime]
    queue: QueueFigures = NO_QUEUE


class StateReader:
    """Reads :class:`StoreState` from the store's database, in one read transaction."""

    def __init__(self, transaction: Transactions) -> None:
        self._transaction = transaction

    def read(self) -> StoreState:
        """The counts now. StoreError (from the store's transaction) when the database
        does not answer."""
        with self._transaction("count runs, quarantine and deliveries for the metrics") as s:
            runs = _runs_by_status(s)
            return StoreState(
                runs=runs,
                quarantine_pending=_pending_quarantine(s),
                deliveries=_open_deliveries(s),
                queued_runs=sum(n for (_, status), n in runs.items() if status == QUEUED),
                queue_jobs=_queue_jobs(s),
                last_clean=_last_clean(s),
                queue=read_figures(s),
            )


def _runs_by_status(session: Session) -> dict[tuple[str, str], int]:
    # The status as stored text, not through Word(RunStatus): a word of a newer version
    # is a count to show, not an error that blanks every metric.
    status = sa.type_coerce(RunRow.status, sa.Text)
    rows = session.execute(
        sa.select(RunRow.instruction_id, status, sa.func.count()).group_by(
            RunRow.instruction_id, status
        )
    ).tuples()
    return {(str(i), str(s)): int(n) for i, s, n in rows}


def _pending_quarantine(session: Session) -> dict[tuple[str, str], int]:
    rows = session.execute(
        sa.select(QuarantinedItemRow.instruction_id, QuarantinedItemRow.reason, sa.func.count())
        .where(QuarantinedItemRow.review_status == ReviewStatus.PENDING)
        .group_by(QuarantinedItemRow.instruction_id, QuarantinedItemRow.reason)
    ).tuples()
    return {(str(i), str(r)): int(n) for i, r, n in rows}


def _open_deliveries(session: Session) -> dict[str, int]:
    rows = session.execute(
        sa.select(SinkDeliveryRow.status, sa.func.count())
        .where(SinkDeliveryRow.status.in_(OPEN_DELIVERY_STATUSES))
        .group_by(SinkDeliveryRow.status)
    ).tuples()
    counted = {str(status): int(n) for status, n in rows}
    # Both statuses always: a gauge that vanishes at 0 cannot be alerted on.
    return {str(status): counted.get(str(status), 0) for status in OPEN_DELIVERY_STATUSES}


def _queue_jobs(session: Session) -> dict[str, int] | None:
    connection = session.connection()
    if connection.dialect.name != "postgresql" or not sa.inspect(connection).has_table(
        PROCRASTINATE_JOBS
    ):
        return None
    rows = session.execute(
        sa.text(
            "SELECT queue_name, count(*) FROM procrastinate_jobs "
            "WHERE status = 'todo' GROUP BY queue_name"
        )
    ).tuples()
    return {str(queue): int(n) for queue, n in rows}


def _last_clean(session: Session) -> dict[str, datetime]:
    # NOT IN over the few runs an operator approved an item into (a set built once),
    # rather than NOT EXISTS per ok run: a fraction of the cost on a long history.
    approved = (
        sa.select(ReportRow.run_id)
        .join(ReportItemRow, ReportItemRow.report_id == ReportRow.id)
        .where(ReportItemRow.origin == ItemOrigin.OPERATOR)
    )
    rows = session.execute(
        sa.select(RunRow.instruction_id, sa.func.max(RunRow.scheduled_for))
        .where(
            RunRow.status == RunStatus.OK,
            RunRow.trigger.in_([str(t) for t in SCHEDULED_TRIGGERS]),
            RunRow.id.not_in(approved),
        )
        .group_by(RunRow.instruction_id)
    ).tuples()
    return {str(i): moment for i, moment in rows if moment is not None}
