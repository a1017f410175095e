"""The task queue's backlog as the database holds it: queued runs, their jobs, live workers.

Reached through :meth:`QueuedRuns.backlog <salvagelane.store.queued.QueuedRuns.backlog>`
(the leader, which settles stranded runs), :mod:`.health` and :mod:`.state` (which show how
long runs wait). The store does not use procrastinate; it reads two of its tables by name
(``procrastinate_jobs``, ``procrastinate_workers``; the version is pinned to the minor,
docs/adr/0013), as :mod:`.state` reads the job table for the queue depth.

Two rules, pure functions of what was read (docs/adr/0013, "Settling queued runs"):

- **Stranded** (:func:`stranded_reason`): a queued run that no worker will ever take: the
  queue's tables are absent, its job is gone or ended, the worker that fetched its job
  stopped before taking it, or (``unconsumed_after`` given: a leader dispatching
  in-process) its job waits with no worker consuming the queue for that long. The leader
  ends such a run ``interrupted`` and the fire's one retry follows the usual rule.
- **Stalled** (:meth:`QueueFigures.stalled`): queued runs have waited longer than a set
  time and no worker consumes the queue. A queue-mode leader warns (log, ``health``,
  metrics); it does not settle them, since a worker that starts will take them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.store.models import RunRow
from salvagelane.vocabulary import RunStatus

PROCRASTINATE_JOBS = "procrastinate_jobs"
PROCRASTINATE_WORKERS = "procrastinate_workers"
WORKER_SILENT_SECONDS = 60.0
"""A procrastinate worker whose heartbeat is older than this is not consuming: workers
beat every 10 s, and procrastinate prunes one silent for 30 s."""
WAITING_JOB_STATUSES = frozenset({"todo", "doing"})
"""The job statuses in which procrastinate may still hand the job to a worker."""

_jobs = sa.table(PROCRASTINATE_JOBS, sa.column("id"), sa.column("status"), sa.column("worker_id"))
_workers = sa.table(PROCRASTINATE_WORKERS, sa.column("id"), sa.column("last_heartbeat"))


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitingRun:
    """A queued run and what the queue holds for it. ``job_status`` None: no job row (or
    no queue tables); ``job_worker_alive``: the job is held by a worker that beats."""

    id: str
    instruction_id: str
    created_at: datetime
    job_id: int | None
    job_status: str | None
    job_worker_alive: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Backlog:
    """The oldest queued runs (up to a limit) with their jobs, and the live workers."""

    installed: bool
    """The queue's tables exist."""
    live_workers: int
    runs: tuple[WaitingRun, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class InstructionWait:
    """Queued runs of one instruction: how many, and since when the oldest waits."""

    queued: int
    oldest: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueFigures:
    """How long queued runs wait, per instruction, and whether anything consumes them.
    ``live_workers`` None: the database has no queue tables (nothing can)."""

    waits: Mapping[str, InstructionWait] = field(default_factory=dict)
    live_workers: int | None = None

    @property
    def queued(self) -> int:
        return sum(wait.queued for wait in self.waits.values())

    @property
    def oldest(self) -> datetime | None:
        return min((wait.oldest for wait in self.waits.values()), default=None)

    def stalled(self, instruction_id: str | None, *, now: datetime, after_seconds: float) -> bool:
        """Whether the instruction's (None: any) oldest queued run has waited longer than
        ``after_seconds`` while no worker consumes the queue."""
        if self.live_workers:
            return False
        if instruction_id is None:
            oldest = self.oldest
        else:
            wait = self.waits.get(instruction_id)
            oldest = None if wait is None else wait.oldest
        return oldest is not None and waited_seconds(oldest, now) > after_seconds


NO_QUEUE = QueueFigures()


# --- the rules ------------------------------------------------------------------------------


def waited_seconds(since: datetime, now: datetime) -> float:
    return max(0.0, (now - since).total_seconds())


def stranded_reason(
    run: WaitingRun,
    *,
    installed: bool,
    live_workers: int,
    now: datetime,
    unconsumed_after: float | None,
) -> str | None:
    """Why no worker will ever take the queued ``run``, or None while one may.
    ``unconsumed_after``: also strand a run whose job waits, when no worker has consumed
    the queue and the run has waited that many seconds (a leader that dispatches
    in-process enqueues nothing, so nothing else would end it)."""
    if not installed:
        return "the task queue's tables are absent, so no worker can take it"
    if run.job_id is None:
        return "it has no job in the task queue"
    if run.job_status is None:
        return f"its job {run.job_id} is gone from the task queue"
    if run.job_status not in WAITING_JOB_STATUSES:
        return f"its job {run.job_id} ended ({run.job_status}) without a worker taking it"
    if run.job_status == "doing" and not run.job_worker_alive:
        return f"the worker that fetched its job {run.job_id} stopped before taking it"
    if (
        run.job_status == "todo"
        and unconsumed_after is not None
        and live_workers == 0
        and waited_seconds(run.created_at, now) > unconsumed_after
    ):
        return (
            f"serve dispatches in-process and no worker has consumed the task queue "
            f"while it waited over {unconsumed_after:g} s"
        )
    return None


# --- reading --------------------------------------------------------------------------------


def queue_installed(session: Session) -> bool:
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        return False
    inspector = sa.inspect(connection)
    return inspector.has_table(PROCRASTINATE_JOBS) and inspector.has_table(PROCRASTINATE_WORKERS)


def _fresh(heartbeat: sa.ColumnElement[datetime]) -> sa.ColumnElement[bool]:
    # The database's clock: procrastinate writes its heartbeats with now().
    silent = sa.func.make_interval(0, 0, 0, 0, 0, 0, WORKER_SILENT_SECONDS)
    return heartbeat > sa.func.now() - silent


def live_workers(session: Session) -> int:
    """Workers whose heartbeat is fresh (the queue's tables must exist)."""
    stmt = sa.select(sa.func.count()).select_from(_workers).where(_fresh(_workers.c.last_heartbeat))
    return int(session.execute(stmt).scalar_one())


def read_backlog(
    session: Session, *, installed: bool, limit: int, run_id: str | None = None
) -> list[WaitingRun]:
    """The oldest ``limit`` queued runs (or the run ``run_id``, if queued) with their jobs."""
    where = [RunRow.status == RunStatus.QUEUED]
    if run_id is not None:
        where.append(RunRow.id == run_id)
    if not installed:
        stmt = sa.select(RunRow.id, RunRow.instruction_id, RunRow.created_at, RunRow.job_id)
        rows = session.execute(
            stmt.where(*where).order_by(RunRow.created_at, RunRow.id).limit(limit)
        ).tuples()
        return [
            WaitingRun(
                id=i,
                instruction_id=instruction,
                created_at=created,
                job_id=job,
                job_status=None,
                job_worker_alive=False,
            )
            for i, instruction, created, job in rows
        ]
    alive = sa.and_(_workers.c.id.is_not(None), _fresh(_workers.c.last_heartbeat))
    joined = (
        sa.select(
            RunRow.id,
            RunRow.instruction_id,
            RunRow.created_at,
            RunRow.job_id,
            sa.cast(_jobs.c.status, sa.Text),
            alive,
        )
        .select_from(RunRow)
        .outerjoin(_jobs, _jobs.c.id == RunRow.job_id)
        .outerjoin(_workers, _workers.c.id == _jobs.c.worker_id)
        .where(*where)
        .order_by(RunRow.created_at, RunRow.id)
        .limit(limit)
    )
    return [
        WaitingRun(
            id=i,
            instruction_id=instruction,
            created_at=created,
            job_id=job,
            job_status=None if status is None else str(status),
            job_worker_alive=bool(worker_alive),
        )
        for i, instruction, created, job, status, worker_alive in session.execute(joined).tuples()
    ]


def read_figures(session: Session) -> QueueFigures:
    """Queued runs per instruction (count, oldest creation) and the live workers."""
    rows = session.execute(
        sa.select(RunRow.instruction_id, sa.func.count(), sa.func.min(RunRow.created_at))
        .where(RunRow.status == RunStatus.QUEUED)
        .group_by(RunRow.instruction_id)
    ).tuples()
    waits = {
        str(i): InstructionWait(queued=int(n), oldest=oldest)
        for i, n, oldest in rows
        if oldest is not None
    }
    installed = queue_installed(session)
    return QueueFigures(
        waits=dict(sorted(waits.items())),
        live_workers=live_workers(session) if installed else None,
    )


def cancel_waiting_job(session: Session, job_id: int) -> bool:
    """Cancel the job ``job_id`` if it still waits (``todo``), as procrastinate's own
    cancel does; False when a worker has fetched it meanwhile (or it is not there). The
    job's row stays locked until the transaction ends: no worker fetches it meanwhile."""
    cancelled = session.execute(
        sa.update(_jobs)
        .where(_jobs.c.id == job_id, sa.cast(_jobs.c.status, sa.Text) == "todo")
        .values(status=sa.literal_column("'cancelled'::procrastinate_job_status"))
        .returning(_jobs.c.id)
    ).first()
    return cancelled is not None
