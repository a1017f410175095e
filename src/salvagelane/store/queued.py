"""Runs dispatched through the task queue: claimed ``queued``, taken by one worker.

Reached through :attr:`Store.queued <salvagelane.store.Store.queued>`. The store does not
know the queue (it imports nothing of it, docs/adr/0013): :meth:`QueuedRuns.claim` hands
the open transaction's driver connection to an ``enqueue`` callback, which writes the
job on it and returns the job's id. The run row and its job are committed together or
not at all, so no fire is ever claimed without a job to run it, nor a job left for a
fire that was not claimed.

A worker takes a queued run with one conditional UPDATE (``status = 'queued'`` →
``running``): of any number of workers given the same run, exactly one takes it.

A queued run that no worker will ever take (:mod:`.backlog`: its job is gone, its worker
died before taking it, the leader went back to in-process dispatch) is settled by the
leader with :meth:`QueuedRuns.settle_stranded`: under the run's row lock, rechecked, and
ended ``interrupted`` (a waiting job is cancelled in the same transaction), so that it
races a worker's take the way two workers race: exactly one wins.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from salvagelane.errors import DuplicateFireError, RunTakenError, StoreError
from salvagelane.store._rows import (
    Transactions,
    close_run,
    get_run,
    insert_definition,
    new_id,
)
from salvagelane.store.backlog import (
    Backlog,
    QueueFigures,
    cancel_waiting_job,
    live_workers,
    queue_installed,
    read_backlog,
    read_figures,
    stranded_reason,
)
from salvagelane.store.fires import is_fire_conflict
from salvagelane.store.models import RunRow
from salvagelane.store.values import DefinitionRecord
from salvagelane.vocabulary import RunStatus, Trigger

Enqueue = Callable[[Any, str], int]
"""Given the claim's open DBAPI connection and the new run's id, enqueue its job on that
connection (in that transaction) and return the job's id."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueuedRun:
    """What a worker or ``runs cancel`` needs of a dispatched run."""

    id: str
    instruction_id: str
    trigger: Trigger
    scheduled_for: datetime | None
    retry_of: str | None
    status: RunStatus
    job_id: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class SettledRun:
    """A queued run the leader ended ``interrupted`` because no worker would take it."""

    id: str
    instruction_id: str
    job_id: int | None
    reason: str


BACKLOG_LIMIT = 500
"""Queued runs looked at per pass (oldest first): a pile-up is settled over passes."""


class QueuedRuns:
    """The runs of the task queue, on the store's database."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    def claim(
        self,
        *,
        instruction_id: str,
        definition_sha256: str,
        trigger: Trigger,
        scheduled_for: datetime,
        retry_of: str | None,
        now: datetime,
        enqueue: Enqueue,
    ) -> str:
        """Claim a fire as a ``queued`` run and enqueue its job, in one transaction;
        returns the run's id. DuplicateFireError when the fire is claimed already
        (nothing is enqueued); whatever ``enqueue`` raises rolls the claim back."""
        run_id = new_id()
        run = RunRow(
            id=run_id,
            instruction_id=instruction_id,
            definition_sha256=definition_sha256,
            trigger=Trigger(trigger),
            scheduled_for=scheduled_for,
            fire_attempt=1 if retry_of is None else 2,
            retry_of=retry_of,
            status=RunStatus.QUEUED,
            created_at=now,
            started_at=now,  # when a worker takes it, the time it started instead
            heartbeat_at=None,
        )
        try:
            with self._transaction(f"claim and enqueue a fire of {instruction_id}") as session:
                session.add(run)
                session.flush()  # the claim: a duplicate fails here, before the job
                driver = session.connection().connection.driver_connection
                run.job_id = enqueue(driver, run_id)
        except StoreError as exc:
            if is_fire_conflict(exc.__cause__):
                raise DuplicateFireError(
                    instruction_id=instruction_id, scheduled_for=scheduled_for, where=self._url
                ) from exc.__cause__
            raise
        return run_id

    def get(self, run_id: str) -> QueuedRun | None:
        """The run ``run_id`` (a full id), None when there is none."""
        with self._transaction(f"read run {run_id}") as session:
            row = session.get(RunRow, run_id)
            return None if row is None else _queued(row)

    def take(
        self,
        run_id: str,
        *,
        now: datetime,
        definition_sha256: str | None,
        definition: DefinitionRecord | None,
    ) -> QueuedRun:
        """Make the queued run ``running`` for the caller (a worker), with the definition
        version it will use; RunTakenError when it is not queued any more (taken by
        another worker, cancelled), NotFoundError when there is no such run.
        ``definition_sha256`` None keeps the one the leader claimed the run with."""
        changes: dict[str, object] = {
            "status": RunStatus.RUNNING,
            "started_at": now,
            "heartbeat_at": now,
            "definition_version": None if definition is None else definition.sha256,
        }
        if definition_sha256 is not None:
            changes["definition_sha256"] = definition_sha256
        with self._transaction(f"take queued run {run_id}") as session:
            if definition is not None:
                insert_definition(session, definition, now)
            taken = session.execute(
                sa.update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == RunStatus.QUEUED)
                .values(changes)
                .execution_options(synchronize_session=False)
            )
            row = get_run(session, run_id)
            session.refresh(row)
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                raise RunTakenError(run_id, row.status, where=self._url)
            return _queued(row)

    def cancel_queued(self, run_id: str, *, now: datetime, error: str) -> QueuedRun:
        """End the run ``cancelled`` if it is still queued; returns it as now stored
        (a run no longer queued is returned unchanged)."""
        with self._transaction(f"cancel run {run_id}") as session:
            row = get_run(session, run_id, for_update=True)
            if row.status == RunStatus.QUEUED:
                close_run(row, status=RunStatus.CANCELLED, finished_at=now, error=error)
            return _queued(row)

    def backlog(self, *, limit: int = BACKLOG_LIMIT) -> Backlog:
        """The oldest ``limit`` queued runs with their jobs, and the live workers."""
        with self._transaction("read the task queue's backlog") as session:
            installed = queue_installed(session)
            return Backlog(
                installed=installed,
                live_workers=live_workers(session) if installed else 0,
                runs=tuple(read_backlog(session, installed=installed, limit=limit)),
            )

    def figures(self) -> QueueFigures:
        """Queued runs per instruction (count, oldest) and the live workers."""
        with self._transaction("count the queued runs") as session:
            return read_figures(session)

    def settle_stranded(
        self, *, now: datetime, unconsumed_after: float | None, limit: int = BACKLOG_LIMIT
    ) -> list[SettledRun]:
        """End ``interrupted`` each queued run no worker will take (:func:`~.backlog.
        stranded_reason`), with the reason in its error; returns them, oldest first.

        Each is rechecked in its own transaction under its row lock, and a job still
        waiting is cancelled there first: a worker that fetched the job or took the run
        meanwhile wins, and the run is left to it."""
        backlog = self.backlog(limit=limit)
        settled: list[SettledRun] = []
        for run in backlog.runs:
            reason = stranded_reason(
                run,
                installed=backlog.installed,
                live_workers=backlog.live_workers,
                now=now,
                unconsumed_after=unconsumed_after,
            )
            if reason is not None and (done := self._settle(run.id, now, unconsumed_after)):
                settled.append(done)
        return settled

    def _settle(
        self, run_id: str, now: datetime, unconsumed_after: float | None
    ) -> SettledRun | None:
        with self._transaction(f"settle stranded queued run {run_id}") as session:
            row = session.get(RunRow, run_id, with_for_update=True)
            if row is None or row.status != RunStatus.QUEUED:
                return None
            installed = queue_installed(session)
            current = read_backlog(session, installed=installed, limit=1, run_id=run_id)
            if not current:
                return None
            (run,) = current
            reason = stranded_reason(
                run,
                installed=installed,
                live_workers=live_workers(session) if installed else 0,
                now=now,
                unconsumed_after=unconsumed_after,
            )
            if reason is None:
                return None
            waiting = run.job_status == "todo" and run.job_id is not None
            if waiting and not cancel_waiting_job(session, run.job_id or 0):
                return None  # a worker fetched the job just now: it takes the run
            close_run(
                row,
                status=RunStatus.INTERRUPTED,
                finished_at=now,
                error=f"never started: {reason} (settled by the serve leader)",
            )
            return SettledRun(
                id=row.id, instruction_id=row.instruction_id, job_id=row.job_id, reason=reason
            )

    def interrupted_jobs(self, job_ids: Collection[int]) -> list[int]:
        """Of ``job_ids``, those whose run ended ``interrupted``: a job the queue still
        counts as in progress although its run was given up (its worker died)."""
        if not job_ids:
            return []
        stmt = sa.select(RunRow.job_id).where(
            RunRow.job_id.in_(list(job_ids)), RunRow.status == RunStatus.INTERRUPTED
        )
        with self._transaction("find the jobs of interrupted runs") as session:
            return sorted(job for job in session.scalars(stmt) if job is not None)


def _queued(row: RunRow) -> QueuedRun:
    return QueuedRun(
        id=row.id,
        instruction_id=row.instruction_id,
        trigger=row.trigger,
        scheduled_for=row.scheduled_for,
        retry_of=row.retry_of,
        status=row.status,
        job_id=row.job_id,
    )
