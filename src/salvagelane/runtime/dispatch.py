"""Runs dispatched through a task queue: procrastinate on the store's PostgreSQL.

The only module that imports procrastinate (an import-linter contract holds it). What
it adds to one node (docs/adr/0013-distributed-dispatch.md):

* :class:`QueueDispatch`, for a ``serve --dispatch queue`` leader: each fire is claimed
  (its run row, ``queued``) and its job enqueued in ONE transaction of the store's
  connection, so a fire is never claimed without a job, nor a job left for an unclaimed
  fire. Catch-ups and the one retry of an interrupted run come through here too.
* :class:`QueueWorker`, ``salvagelane worker``: procrastinate fetches the jobs; each job
  takes its run by id (``queued`` → ``running``, at most once) and executes it with the
  same :class:`~salvagelane.runtime.executor.Executor` as a node does in-process: heartbeats,
  deadline, raw outputs stored first.
* :func:`cancel_run`, ``salvagelane runs cancel``.

What stays salvagelane's, not the queue's: the claim, the run's status, and retries.
Procrastinate's own retries are off (a job runs once); a worker that dies leaves its run
``running`` until the leader sees its heartbeat go stale, marks it ``interrupted`` and
enqueues the fire's one retry, as a node does for its own runs. The leader then also
ends the dead worker's job, which would otherwise hold the instruction's queue lock (a
job's ``lock`` is its instruction: one run of an instruction at a time, as in-process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from salvagelane.errors import (
    ConfigurationError,
    MissingExtraError,
    NotFoundError,
    QueueError,
    RunStateError,
    RunTakenError,
    SalvagelaneError,
)

try:
    import psycopg
    from procrastinate import App, PsycopgConnector
    from procrastinate import exceptions as queue_errors
    from procrastinate.job_context import AbortReason, JobContext
    from procrastinate.schema import SchemaManager
    from procrastinate.sql import queries as queue_queries
except ImportError as exc:
    # Every command that dispatches through the queue imports this module first.
    raise MissingExtraError(
        "the task queue (`serve --dispatch queue`, `salvagelane worker`, `runs cancel`) "
        "needs its packages (procrastinate, psycopg)",
        extra="queue",
    ) from exc

from salvagelane.definitions import Instruction
from salvagelane.definitions.directory import load_definitions, require_loadable
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import (
    DefinitionInvalid,
    JobCrashed,
    QueueCheckFailed,
    QueuedRunNotTaken,
    QueuedRunUnknown,
    QueueJobReleased,
    QueueSchemaInstalled,
    RunFailed,
    ShutdownWaiting,
)
from salvagelane.logs import bound
from salvagelane.runtime.executor import ConnectorFactory, Executor, SinkFactory, mark_abandoned
from salvagelane.store import QueuedRun, Store, database_url, masked_url
from salvagelane.store.engine import describe
from salvagelane.store.leadership import lock_key
from salvagelane.vocabulary import Clock, RunStatus, Trigger, utc_now

__all__ = [
    "DEFAULT_QUEUE",
    "TASK_NAME",
    "QueueDispatch",
    "QueueWorker",
    "WorkerSettings",
    "cancel_run",
    "install_schema",
    "require_postgres",
]

TASK_NAME = "salvagelane.run"
"""The one task: execute the queued run named by its ``run_id`` argument."""
DEFAULT_QUEUE = "salvagelane"
SCHEMA_LOCK_KEY = lock_key("salvagelane.queue-schema")
"""Held while the queue's tables are installed, so that two processes starting at once
do not both create them."""

Announce = Callable[[str], None]


def require_postgres(url: str, what: str) -> str:
    """``url`` normalised; ConfigurationError unless it names a PostgreSQL database: the
    task queue lives in PostgreSQL, and SQLite stays single-node and in-process."""
    normalised = database_url(url)
    if sa.make_url(normalised).get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"{what}: {masked_url(normalised)} is SQLite; the task queue needs PostgreSQL "
            "(SQLite stays one node dispatching in-process: `serve --dispatch inprocess`)"
        )
    return normalised


def _conninfo(url: str) -> str:
    """The libpq form of a store URL (``postgresql+psycopg://`` → ``postgresql://``)."""
    parsed = sa.make_url(require_postgres(url, "the task queue"))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def _app(url: str) -> App:
    # A small pool: a leader uses it to cancel and tidy jobs, a worker for its loop;
    # enqueueing uses the store's own connection (the claim's transaction).
    return App(connector=PsycopgConnector(conninfo=_conninfo(url), min_size=1, max_size=4))


def install_schema(url: str) -> bool:
    """Create the task queue's tables (``procrastinate_*``) unless they exist; True when
    this call created them. One transaction, under an advisory lock: idempotent, and
    safe when several processes start at once."""
    conninfo = _conninfo(url)
    try:
        with psycopg.connect(conninfo, connect_timeout=10) as connection, connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            exists = connection.execute(
                "SELECT to_regclass('procrastinate_jobs') IS NOT NULL"
            ).fetchone()
            if exists and exists[0]:
                return False
            # No parameters: the schema's text is sent as it is (its % signs too).
            connection.execute(SchemaManager.get_schema())
            return True
    except psycopg.Error as exc:
        raise QueueError(
            f"{masked_url(url)}: install the task queue's tables failed: {describe(exc, url)}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- the leader's side -----------------------------------------------------------------------


class QueueDispatch:
    """How a ``serve --dispatch queue`` leader hands fires to the workers."""

    def __init__(
        self,
        url: str,
        store: Store,
        *,
        queue: str = DEFAULT_QUEUE,
        events: EventStream | None = None,
    ) -> None:
        require_postgres(url, "serve --dispatch queue")
        self._events = events or logged_stream()
        self._url = url
        self._store = store
        self._queue = queue
        self._app = _app(url)
        self._opened = False

    def open(self) -> None:
        """Install the queue's tables if missing and open the pool."""
        if install_schema(self._url):
            self._events.publish(QueueSchemaInstalled())
        self._app.open()
        self._opened = True

    def close(self) -> None:
        if self._opened:
            self._app.close()
            self._opened = False

    def enqueue(
        self,
        instruction: Instruction,
        *,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        now: datetime,
    ) -> str:
        """Claim the fire ``queued`` and enqueue its job in one transaction; returns the
        run id. DuplicateFireError when claimed already; QueueError when the job could
        not be written (then nothing was: the claim rolled back with it)."""

        def defer(connection: Any, run_id: str) -> int:
            try:
                return self._app.configure_task(
                    TASK_NAME,
                    connection=connection,
                    queue=self._queue,
                    # One run of an instruction at a time, across every worker.
                    lock=f"instruction:{instruction.id}",
                ).defer(run_id=run_id)
            except queue_errors.ProcrastinateException as exc:
                raise QueueError(
                    f"enqueue the run of {instruction.id} for {scheduled_for.isoformat()} "
                    f"failed: {_first_line(exc.__cause__ or exc)}"
                ) from exc

        return self._store.queued.claim(
            instruction_id=instruction.id,
            definition_sha256=instruction.definition_sha256,
            trigger=trigger,
            scheduled_for=scheduled_for,
            retry_of=retry_of,
            now=now,
            enqueue=defer,
        )

    def release_interrupted(self) -> list[int]:
        """End (``failed``) the jobs still ``doing`` whose run was marked interrupted:
        their worker died, and each would hold its instruction's lock forever. Returns
        their ids. Never raises: the next poll tries again."""
        try:
            doing = [
                job.id
                for job in self._app.job_manager.list_jobs(status="doing", queue=self._queue)
                if job.id is not None
            ]
            stalled = self._store.queued.interrupted_jobs(doing)
            sync = self._app.connector.get_sync_connector()
            for job_id in stalled:
                sync.execute_query(
                    query=queue_queries["finish_job"],
                    job_id=job_id,
                    status="failed",
                    delete_job=False,
                )
                self._events.publish(QueueJobReleased(job_id=job_id))
            return stalled
        except (queue_errors.ProcrastinateException, SalvagelaneError) as exc:
            self._events.publish(QueueCheckFailed(check="release", exception=exc))
            return []


def cancel_run(url: str, store: Store, run_id: str, *, now: datetime) -> QueuedRun:
    """``runs cancel``: a queued run ends ``cancelled`` and its job is cancelled; a
    running one's job is asked to abort (the worker ends the run ``cancelled`` at its next
    check point). Returns the run as it stands. NotFoundError for an unknown id,
    RunStateError for a run that has ended, ConfigurationError for a run not dispatched
    through the queue."""
    run = store.queued.get(run_id)
    if run is None:
        raise NotFoundError(f"{store.url}: no run with id {run_id}")
    if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        raise RunStateError(f"run {run.id} has ended ({run.status}): nothing to cancel")
    if run.job_id is None:
        raise ConfigurationError(
            f"run {run.id} runs in-process in a `serve` node, not through the task queue: "
            "only a queued run can be cancelled (stop that node to interrupt it)"
        )
    app = _app(url)
    app.open()
    try:
        if run.status == RunStatus.QUEUED:
            run = store.queued.cancel_queued(
                run.id,
                now=now,
                error="cancelled: salvagelane runs cancel, before a worker took it",
            )
        # Queued: the job is cancelled (a worker that fetched it meanwhile finds the
        # run cancelled and leaves it). Running: its worker is asked to stop it.
        app.job_manager.cancel_job_by_id(run.job_id or 0, abort=run.status == RunStatus.RUNNING)
    except queue_errors.ProcrastinateException as exc:
        raise QueueError(f"cancel the job of run {run.id} failed: {describe(exc, url)}") from exc
    finally:
        app.close()
    return run


# --- the worker --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerSettings:
    """How ``salvagelane worker`` works."""

    instructions_dir: Path
    concurrency: int = 4
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    shutdown_timeout_seconds: float = 30.0
    heartbeat_seconds: float = 15.0
    name: str = ""

    def problem(self) -> str | None:
        if self.concurrency < 1:
            return "concurrency must be at least 1"
        if self.heartbeat_seconds <= 0:
            return "the heartbeat must be positive"
        if self.shutdown_timeout_seconds < 0:
            return "the shutdown timeout must not be negative"
        if not self.queues:
            return "give at least one queue"
        return None


class QueueWorker:
    """One ``salvagelane worker`` process: runs queued runs until SIGTERM/SIGINT.

    Stopping: no new job is fetched; runs in flight get the shutdown timeout, then those
    still going are marked ``interrupted`` (their raw outputs kept) and ``abandon`` is
    called with their ids, at once: their threads are inside calls that cannot be
    cancelled, so the command line leaves the process there (``os._exit``), before the
    event loop would wait for those threads and the HTTP client close under them.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        url: str,
        store: Store,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory,
        announce: Announce = lambda line: None,
        abandon: Callable[[tuple[str, ...]], None] = lambda runs: None,
        clock: Clock = utc_now,
        events: EventStream | None = None,
    ) -> None:
        if problem := settings.problem():
            raise ConfigurationError(f"worker: {problem}")
        self._abandon = abandon
        self._events = events or logged_stream()  # each run's events
        self._settings = settings
        self._url = require_postgres(url, "salvagelane worker")
        self._conninfo = _conninfo(self._url)
        self._store = store
        self._connector_for = connector_for
        self._sinks_for = sinks_for
        self._announce = announce
        self._clock = clock
        self._definitions: Mapping[str, Instruction] = {}
        self._definitions_guard = threading.Lock()
        self._guard = threading.Lock()
        self._in_flight: dict[str, str] = {}  # run id -> instruction id
        self._stop_reason: str | None = None
        self.abandoned_runs: tuple[str, ...] = ()

    @property
    def in_flight(self) -> dict[str, str]:
        with self._guard:
            return dict(self._in_flight)

    @property
    def definitions(self) -> Mapping[str, Instruction]:
        """The definitions the worker knows now, by instruction id."""
        with self._definitions_guard:
            return self._definitions

    def load(self) -> None:
        """Load the definitions; ConfigurationError when none loads."""
        found = load_definitions(self._settings.instructions_dir)
        for problem in found.problems:
            self._events.publish(DefinitionInvalid(error=problem))
        require_loadable(found, self._settings.instructions_dir)
        self._definitions = found.instructions

    def run(self) -> None:
        """Work until stopped. Returns once every run in flight has ended or been marked
        interrupted (then :attr:`abandoned_runs` names them)."""
        if not self._definitions:
            self.load()
        if install_schema(self._url):
            self._events.publish(QueueSchemaInstalled())
        asyncio.run(self._main())

    async def _main(self) -> None:
        app = _app(self._url)
        app.task(name=TASK_NAME, pass_context=True, retry=False)(self._job)
        loop = asyncio.get_running_loop()
        # Sync jobs run on the loop's default executor: one thread per job at once, and
        # spare ones, so that the drain's own database writes never wait behind runs
        # stuck in calls (the default pool is sized by CPUs, not by --concurrency).
        loop.set_default_executor(
            ThreadPoolExecutor(max_workers=self._settings.concurrency + 2, thread_name_prefix="run")
        )
        stopping = asyncio.Event()

        def on_stop(sig: signal.Signals) -> None:
            self._stop_reason = self._stop_reason or sig.name
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_stop, sig)
        try:
            async with app.open_async():
                working = asyncio.create_task(
                    app.run_worker_async(
                        queues=list(self._settings.queues),
                        concurrency=self._settings.concurrency,
                        name=self._settings.name or f"worker-{os.getpid()}",
                        # Stops are ours (below); procrastinate, with no graceful
                        # timeout of its own, waits for the jobs.
                        install_signal_handlers=False,
                        delete_jobs="never",
                    )
                )
                self._announce(
                    f"worker: running queued runs from {', '.join(self._settings.queues)} "
                    f"with concurrency {self._settings.concurrency} "
                    f"({len(self._definitions)} instruction(s))"
                )
                stop_wait = asyncio.create_task(stopping.wait())
                await asyncio.wait({working, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if working.done():
                    stop_wait.cancel()
                    working.result()  # a worker that ended on its own: say why
                    return
                await self._drain(working)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def _drain(self, working: asyncio.Task[None]) -> None:
        timeout = self._settings.shutdown_timeout_seconds
        waiting = self.in_flight
        self._events.publish(ShutdownWaiting(runs=tuple(sorted(waiting)), timeout_seconds=timeout))
        if waiting:
            self._announce(
                f"stopping: waiting up to {timeout:g} s for {len(waiting)} run(s) to finish"
            )
        working.cancel()  # procrastinate: fetch no more, wait for the jobs running
        done, _ = await asyncio.wait({working}, timeout=timeout)
        if done:
            with contextlib.suppress(asyncio.CancelledError):
                working.result()
            return
        abandoned = self.in_flight
        await asyncio.to_thread(
            mark_abandoned,
            self._store,
            abandoned,
            reason=f"the worker stopped ({self._stop_reason})",
            timeout=timeout,
            now=self._clock(),
        )
        self.abandoned_runs = tuple(sorted(abandoned))
        self._abandon(self.abandoned_runs)

    # --- one job (in a worker thread) ---------------------------------------------------

    def _job(self, context: JobContext, run_id: str) -> None:
        """The task: take the queued run ``run_id`` and execute it. Never raises: what
        happens to a run is recorded on it; the job itself always succeeds (the queue
        does not retry; the fire's retry is the leader's)."""
        with bound(run_id=run_id, job_id=context.job.id):
            try:
                self._execute(context, run_id)
            except Exception as exc:
                self._events.publish(JobCrashed(run_id=run_id, exception=exc))

    def _execute(self, context: JobContext, run_id: str) -> None:
        queued = self._store.queued.get(run_id)
        if queued is None:
            self._events.publish(
                QueuedRunUnknown(
                    run_id=run_id, reason="the job names a run the database does not hold"
                )
            )
            return
        if queued.status != RunStatus.QUEUED:
            self._events.publish(QueuedRunNotTaken(run_id=run_id, status=queued.status))
            return
        instruction = self._definition(queued.instruction_id)
        if instruction is None:
            self._refuse(queued)
            return

        def claimed(taken: str) -> None:
            with self._guard:
                self._in_flight[taken] = instruction.id

        def cancelled() -> bool:
            # The worker's own poll of abort requests, else the job's row itself: a
            # cancel is seen at the first check point after `runs cancel` returned.
            if context.abort_reason() == AbortReason.USER_REQUEST:
                return True
            return context.job.id is not None and self._abort_requested(context.job.id)

        executor = Executor(
            self._store,
            connector_for=self._connector_for,
            sinks_for=self._sinks_for,
            heartbeat_seconds=self._settings.heartbeat_seconds,
            on_claimed=claimed,
            should_stop=cancelled,
            events=self._events,
        )
        try:
            executor.run(
                instruction,
                trigger=queued.trigger,
                scheduled_for=queued.scheduled_for,
                retry_of=queued.retry_of,
                queued_run=run_id,
            )
        except RunTakenError as exc:
            self._events.publish(QueuedRunNotTaken(run_id=run_id, status=exc.status))
        finally:
            with self._guard:
                self._in_flight.pop(run_id, None)

    def _abort_requested(self, job_id: int) -> bool:
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as connection:
                row = connection.execute(
                    "SELECT abort_requested FROM procrastinate_jobs WHERE id = %s", (job_id,)
                ).fetchone()
        except psycopg.Error as exc:
            self._events.publish(QueueCheckFailed(check="abort", exception=exc))
            return False
        return bool(row and row[0])

    def _definition(self, instruction_id: str) -> Instruction | None:
        """The instruction's definition; the directory is read again for an id this
        worker does not know yet (a definition added after it started)."""
        with self._definitions_guard:
            if instruction_id not in self._definitions:
                found = load_definitions(self._settings.instructions_dir, self._definitions)
                self._definitions = found.instructions
            return self._definitions.get(instruction_id)

    def _refuse(self, queued: QueuedRun) -> None:
        """A run of an instruction this worker has no definition of: taken and failed,
        so it is not left queued for ever (and the leader does not retry a failure)."""
        try:
            self._store.queued.take(
                queued.id, now=self._clock(), definition_sha256=None, definition=None
            )
        except RunTakenError:
            return
        error = (
            f"definition: no instruction {queued.instruction_id!r} in this worker's "
            f"{self._settings.instructions_dir}/ (workers need the same definitions as serve)"
        )
        self._store.fail_run(queued.id, finished_at=self._clock(), error=error)
        self._events.publish(
            RunFailed(run_id=queued.id, instruction_id=queued.instruction_id, error=error)
        )
