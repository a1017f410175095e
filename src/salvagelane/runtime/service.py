"""``salvagelane serve``: the long-running scheduler node.

One node leads at a time (see :mod:`salvagelane.store.leadership`); the others stand by
and poll the lock. The leader schedules every instruction definition, and on taking the
lead it first settles what happened while nobody led:

1. runs left ``running`` whose heartbeat went stale are marked ``interrupted`` (their
   raw outputs stay), and an interrupted scheduled run is retried once while its fire
   is still within the misfire grace;
2. per instruction, the newest fire that passed unrun is run once as a ``catch_up`` if
   still within grace; older unrun fires are recorded as ``missed``.

Every fire claims (instruction, fire time) in the database before it runs, so a
duplicate (another node, a catch-up racing the scheduler, an external ``run
--scheduled-for``) does nothing but log ``fire.duplicate``. The leader repeats step 1
every poll interval, so a run of a node that died is noticed without a restart.

With a :class:`Dispatch` (``serve --dispatch queue``, docs/adr/0013) the leader executes
nothing itself: each fire, catch-up and retry is claimed ``queued`` and handed to the
task queue in the same transaction, and ``salvagelane worker`` processes run it.

Stopping (SIGTERM/SIGINT) ends new fires at once, lets runs in flight finish for up to
the shutdown timeout, then marks those still going ``interrupted``. SIGHUP reloads the
definitions; a definition that no longer loads is reported and its previous version kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, TypedDict

from salvagelane.definitions import Instruction
from salvagelane.definitions.directory import DefinitionSet, load_definitions, require_loadable
from salvagelane.errors import (
    ConfigurationError,
    DuplicateFireError,
    SalvagelaneError,
)
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import (
    DefinitionInvalid,
    DefinitionsReloaded,
    DefinitionsReloadFailed,
    FireCaughtUp,
    FireClaimed,
    FireCrashed,
    FireDropped,
    FireDuplicate,
    FireMissed,
    FireNotQueued,
    FireReceived,
    FireRetryPlanned,
    FireSkipped,
    FireUnknown,
    LeaderAcquired,
    LeaderLost,
    LeaderReleased,
    LeaderStandby,
    MissedNotRecorded,
    QueueCheckFailed,
    QueueResumed,
    QueueStalled,
    RedeliveryFailed,
    RunInterrupted,
    RunSettled,
    ShutdownWaiting,
)
from salvagelane.logs import bound
from salvagelane.runtime.delivery import redeliver_due, sinks_from_definitions
from salvagelane.runtime.executor import ConnectorFactory, Executor, SinkFactory, mark_abandoned
from salvagelane.runtime.scheduler import (
    MISSED_LIMIT,
    CronScheduler,
    ScheduleRow,
    newest_fire_times,
    plan_catch_up,
    schedule_table,
)
from salvagelane.runtime.settings import ServeSettings
from salvagelane.store import LeaderLock, Store
from salvagelane.vocabulary import Clock, Trigger, utc_now

__all__ = [
    "TARGET",
    "DefinitionSet",
    "Fire",
    "LeaderLock",
    "ServeSettings",
    "Service",
    "fire",
]

TARGET = "salvagelane.runtime.service:fire"
"""The textual job reference every scheduled job names."""

Announce = Callable[[str], None]
RenderSchedule = Callable[[Sequence[ScheduleRow]], str]
"""How the leader's banner shows the next fires (the command line's table)."""

_RETRYABLE_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})


class Dispatch(Protocol):
    """Where a leader sends fires instead of running them (``serve --dispatch queue``:
    :class:`salvagelane.runtime.dispatch.QueueDispatch`)."""

    def enqueue(
        self,
        instruction: Instruction,
        *,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        now: datetime,
    ) -> str:
        """Claim the fire and enqueue its run in one transaction; returns the run id
        (DuplicateFireError when the fire is claimed already)."""
        ...

    def release_interrupted(self) -> object:
        """Free what the runs just marked interrupted still hold in the queue."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Fire:
    """A run the leader asks for outside the cron jobs: a catch-up or a retry."""

    instruction_id: str
    scheduled_for: datetime
    trigger: Trigger
    retry_of: str | None = None

    @property
    def name(self) -> str:
        kind = "retry" if self.retry_of else self.trigger
        return f"{kind}:{self.instruction_id}:{self.scheduled_for.isoformat()}"


class FireFields(TypedDict):
    """The fields every event about one fire carries."""

    instruction_id: str
    scheduled_for: datetime
    trigger: Trigger
    retry_of: str | None


# --- the job function ------------------------------------------------------------------------

_active: Service | None = None
_active_guard = threading.Lock()


def fire(
    *,
    instruction_id: str,
    scheduled_for: str,
    trigger: str = Trigger.SCHEDULE,
    retry_of: str | None = None,
) -> None:
    """The job function (named textually by :data:`TARGET`): run one fire on the
    service of this process."""
    service = _active
    moment = datetime.fromisoformat(scheduled_for)
    if service is None:
        # No service, so no stream of its own: the fact still reaches the log.
        logged_stream().publish(
            FireDropped(
                instruction_id=instruction_id,
                scheduled_for=moment,
                trigger=Trigger(trigger),
                retry_of=retry_of,
                reason="no service is running",
            )
        )
        return
    service.fire(instruction_id, moment, trigger=Trigger(trigger), retry_of=retry_of)


# --- the service -----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Flags:
    """What signal handlers ask for; the main loop acts on it."""

    wake: threading.Event = field(default_factory=threading.Event)
    stop_reason: str | None = None
    reload: bool = False


class Service:
    """One scheduler node. :meth:`serve` blocks until :meth:`request_stop`.

    ``connector_for`` and ``sinks_for`` build what each run calls (as for
    :class:`~salvagelane.runtime.executor.Executor`); ``announce`` prints human lines (the
    schedule table, standby and stop notices), the table as ``render_schedule`` lays it
    out (without it the leader's banner only counts the instructions); ``clock`` is the
    wall clock; ``telemetry`` is told of every fire and passed to every run's executor
    (``serve --metrics-port``: :class:`salvagelane.runtime.metrics.Metrics`).
    """

    def __init__(
        self,
        settings: ServeSettings,
        *,
        store: Store,
        lock: LeaderLock,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory,
        announce: Announce = lambda line: None,
        render_schedule: RenderSchedule | None = None,
        clock: Clock = utc_now,
        events: EventStream | None = None,
        dispatch: Dispatch | None = None,
    ) -> None:
        if problem := settings.problem():
            raise ConfigurationError(f"serve: {problem}")
        self._dispatch = dispatch
        self._settings = settings
        self._store = store
        self._lock = lock
        self._connector_for = connector_for
        self._sinks_for = sinks_for
        self._announce = announce
        self._render_schedule = render_schedule
        self._clock = clock
        self._events = events or logged_stream()  # fires, and each run's events
        self._flags = _Flags()
        self._guard = threading.Lock()
        self._definitions: Mapping[str, Instruction] = {}
        self._in_flight: dict[str, str] = {}  # run id -> instruction id
        self._instruction_locks: dict[str, threading.Lock] = {}
        self._retries_asked: set[str] = set()
        self._scheduler: CronScheduler | None = None
        self._stopping = threading.Event()
        # The gate every fire passes before it claims: closed while the node does not
        # lead, so a fire thread left over from a lead cannot start a run after it.
        self._gate_closed = False
        self._active_fires = 0
        self._fires_done = threading.Condition(self._guard)
        # Per instruction: every fire up to this moment has an outcome (a run or a missed
        # record), as far as this leader has checked.
        self._settled: dict[str, datetime] = {}
        self.abandoned_runs: tuple[str, ...] = ()
        """Runs still executing when the node stopped (marked interrupted)."""
        self._redelivery: threading.Thread | None = None
        self._stalled_warned: datetime | None = None  # when queue.stalled was last logged
        self.unfinished_threads = 0
        """Fire or delivery threads still working when the node stopped (they may still
        use the HTTP client: the process should exit without closing it under them)."""

    # --- control, from signal handlers ----------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop: no new fires; runs in flight get the shutdown timeout. Signal-safe."""
        self._flags.stop_reason = self._flags.stop_reason or reason
        self._stopping.set()
        self._flags.wake.set()

    def request_reload(self) -> None:
        """Reload the definitions at the next chance. Signal-safe."""
        self._flags.reload = True
        self._flags.wake.set()

    @property
    def in_flight(self) -> dict[str, str]:
        """Runs executing now: run id -> instruction id."""
        with self._guard:
            return dict(self._in_flight)

    # --- the main loop --------------------------------------------------------------------

    def load(self) -> None:
        """Load the definitions (first start); ConfigurationError when none loads."""
        found = load_definitions(self._settings.instructions_dir)
        self._report_problems(found)
        require_loadable(found, self._settings.instructions_dir)
        self._definitions = found.instructions

    def serve(self) -> None:
        """Stand by until leading, lead until stopped (or the lead is lost), repeat."""
        global _active
        with _active_guard:
            if _active is not None:
                raise SalvagelaneError("another salvagelane service is running in this process")
            _active = self
        try:
            if not self._definitions:
                self.load()
            if not self._settings.standby:
                self._lock.acquire()  # refuses, with the lock's own explanation
            standing_by = False
            while not self._stopping.is_set():
                if self._lock.try_acquire():
                    if standing_by:
                        # The files may have changed while this node waited.
                        standing_by = False
                        self._reload()
                    self._lead()
                    continue
                if not standing_by:
                    standing_by = True
                    self._events.publish(LeaderStandby(poll_seconds=self._settings.poll_seconds))
                    self._announce(
                        "standby: another node leads; taking over when it stops "
                        f"(checking every {self._settings.poll_seconds:g} s)"
                    )
                self._wait()
        finally:
            with _active_guard:
                _active = None

    def _wait(self) -> None:
        self._flags.wake.wait(self._settings.poll_seconds)
        self._flags.wake.clear()
        if self._flags.reload and not self._stopping.is_set():
            self._flags.reload = False
            self._reload()

    def _lead(self) -> None:
        self._events.publish(LeaderAcquired(instructions=len(self._definitions)))
        scheduler = CronScheduler(
            target=TARGET, max_workers=self._settings.max_workers, on_skipped=self._skipped
        )
        for instruction in self._definitions.values():
            scheduler.add_instruction(instruction)
        self._scheduler = scheduler
        self._settled = {}
        with self._guard:
            self._gate_closed = False
        lost = False
        try:
            started = self._clock()
            scheduler.start()
            # After start(): the scheduler owns fires from now on, catch-up the ones up to
            # now; one at the boundary is claimed by whichever comes first.
            now = self._clock()
            self._submit(self.recover(now))
            self._submit(self.catch_up(now, scheduler_since=started))
            banner = f"leader: scheduling {len(self._definitions)} instruction(s)"
            if self._render_schedule is not None:
                rows = schedule_table(self._definitions.values(), now)
                banner += "; next fires:\n" + self._render_schedule(rows)
            self._announce(banner)
            while True:
                self._wait()
                if self._stopping.is_set():
                    break
                if not self._lock.is_held():
                    lost = True
                    self._events.publish(LeaderLost())
                    self._announce("lost the scheduler lock (database connection?): standing by")
                    break
                now = self._clock()
                self._submit(self.recover(now))
                self.settle(now)
                self._redeliver_in_background()
        finally:
            self._step_down(lost=lost)

    def _step_down(self, *, lost: bool) -> None:
        with self._guard:
            self._gate_closed = True
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)
        timeout = self._settings.shutdown_timeout_seconds
        reason = "the scheduler lock was lost" if lost else f"serve stopped ({self._stop_reason})"
        waiting = self.in_flight
        if waiting:
            self._events.publish(
                ShutdownWaiting(runs=tuple(sorted(waiting)), timeout_seconds=timeout)
            )
            self._announce(
                f"stopping: waiting up to {timeout:g} s for {len(waiting)} run(s) to finish"
            )
        began = time.monotonic()
        self._wait_for_fires(timeout)
        redelivery = self._redelivery
        if redelivery is not None:
            redelivery.join(max(0.0, timeout - (time.monotonic() - began)))
        abandoned = self.in_flight
        mark_abandoned(self._store, abandoned, reason=reason, timeout=timeout, now=self._clock())
        self.abandoned_runs = tuple(sorted(abandoned))
        with self._guard:
            self.unfinished_threads = self._active_fires + int(
                redelivery is not None and redelivery.is_alive()
            )
        if not lost:
            # Still the leader: no fire due by now may be left without an outcome. (A
            # node that lost the lock leaves that to the node that took it.)
            self._settle_before(self._clock(), f"serve stopped ({self._stop_reason}) before it ran")
        self._lock.release()
        self._events.publish(LeaderReleased(abandoned_runs=len(abandoned)))

    @property
    def _stop_reason(self) -> str:
        return self._flags.stop_reason or "stop requested"

    def redeliver(self) -> None:
        """One pass over the deliveries that are due: failed ones after their backoff,
        pending ones whose process died once their lease ended. Never raises."""
        try:
            redeliver_due(
                self._store,
                sinks_for_run=sinks_from_definitions(self._definitions, self._sinks_for),
                now=self._clock(),
                clock=self._clock,
            )
        except SalvagelaneError as exc:
            self._events.publish(RedeliveryFailed(exception=exc))

    def _redeliver_in_background(self) -> None:
        # A thread of its own: a slow sink must not hold up the poll loop that notices
        # dead runs and settles fires. One pass at a time.
        if self._redelivery is not None and self._redelivery.is_alive():
            return
        self._redelivery = threading.Thread(target=self.redeliver, name="redeliver", daemon=True)
        self._redelivery.start()

    def _wait_for_fires(self, timeout: float) -> None:
        """Until every fire thread past the gate is done, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._fires_done:
            while self._active_fires:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._fires_done.wait(left)

    # --- settling the past ----------------------------------------------------------------

    def recover(self, now: datetime) -> list[Fire]:
        """Mark runs with a stale heartbeat interrupted; return the retries to run: each
        interrupted scheduled run whose fire is within grace, once."""
        stale_before = now - timedelta(seconds=self._settings.stale_after_seconds)
        for run in self._store.interrupt_stale_runs(stale_before=stale_before, now=now):
            self._events.publish(
                RunInterrupted(
                    run_id=run.id,
                    instruction_id=run.instruction_id,
                    scheduled_for=run.scheduled_for,
                    reason="no heartbeat",
                )
            )
        # Before the retries are listed: a stranded fire is retried in this same pass.
        self._settle_queued(now)
        if self._dispatch is not None:
            self._dispatch.release_interrupted()
            self._watch_queue(now)
        definitions = self._definitions
        if not definitions:
            return []
        widest = max(d.schedule.misfire_grace_seconds for d in definitions.values())
        retries: list[Fire] = []
        for run in self._store.unretried_interrupted_fires(since=now - timedelta(seconds=widest)):
            instruction = definitions.get(run.instruction_id)
            if (
                instruction is None
                or run.scheduled_for is None
                or run.trigger not in _RETRYABLE_TRIGGERS
                or run.id in self._retries_asked
                or now - run.scheduled_for
                > timedelta(seconds=instruction.schedule.misfire_grace_seconds)
            ):
                continue
            self._retries_asked.add(run.id)
            self._events.publish(
                FireRetryPlanned(
                    instruction_id=run.instruction_id,
                    scheduled_for=run.scheduled_for,
                    trigger=run.trigger,
                    retry_of=run.id,
                )
            )
            retries.append(
                Fire(
                    instruction_id=run.instruction_id,
                    scheduled_for=run.scheduled_for,
                    trigger=run.trigger,
                    retry_of=run.id,
                )
            )
        return retries

    def _settle_queued(self, now: datetime) -> None:
        """End ``interrupted`` the queued runs no worker will take (docs/adr/0013): their
        job is gone, their worker died before taking them, or (dispatching in-process)
        no worker has consumed the queue for the stall time. The fire's one retry then
        follows the usual rule, through this leader's dispatch. Never raises."""
        in_process = self._dispatch is None
        try:
            settled = self._store.queued.settle_stranded(
                now=now,
                unconsumed_after=self._settings.queue_stall_seconds if in_process else None,
            )
        except SalvagelaneError as exc:
            self._events.publish(QueueCheckFailed(check="settle", exception=exc))
            return
        for run in settled:
            self._events.publish(
                RunSettled(
                    run_id=run.id,
                    instruction_id=run.instruction_id,
                    job_id=run.job_id,
                    status="interrupted",
                    reason=run.reason,
                )
            )

    def _watch_queue(self, now: datetime) -> None:
        """Warn while queued runs wait past the stall time with no worker consuming the
        queue: when it starts, again every stall time while it lasts, and say when it
        ends. Never raises."""
        after = self._settings.queue_stall_seconds
        try:
            figures = self._store.queued.figures()
        except SalvagelaneError as exc:
            self._events.publish(QueueCheckFailed(check="watch", exception=exc))
            return
        stalled = figures.stalled(None, now=now, after_seconds=after)
        if not stalled:
            if self._stalled_warned is not None:
                self._events.publish(
                    QueueResumed(queued=figures.queued, live_workers=figures.live_workers)
                )
            self._stalled_warned = None
            return
        if self._stalled_warned is not None and now - self._stalled_warned < timedelta(
            seconds=after
        ):
            return
        self._stalled_warned = now
        oldest = figures.oldest
        waited = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        self._events.publish(
            QueueStalled(
                queued=figures.queued,
                oldest_queued_at=oldest,
                waited_seconds=round(waited, 1),
                live_workers=figures.live_workers or 0,
                stall_after_seconds=after,
            )
        )
        self._announce(
            f"warning: {figures.queued} queued run(s) waiting, the oldest for {waited:.0f} s, "
            "and no worker consumes the task queue (start `salvagelane worker`)"
        )

    def catch_up(self, now: datetime, *, scheduler_since: datetime | None = None) -> list[Fire]:
        """Settle each instruction's fires up to ``now`` that have no run row: the newest
        fire, when unrun and within grace, is returned to run once as a catch-up; the
        other unrun ones are recorded as missed.

        Every fire is checked, not only those after the newest recorded one: a fire a
        dead node decided to run but never claimed leaves a hole below newer rows.
        ``scheduler_since``: when the running scheduler started; unrun fires after it
        (but the newest) are the scheduler's to claim, and :meth:`settle` records them
        missed once their grace has passed if nothing did.
        """
        fires: list[Fire] = []
        for instruction in self._definitions.values():
            schedule = instruction.schedule
            # The schedule is owned from when the scheduler started, not from now: its
            # first fire may come before this line, and a node that dies inside that
            # fire's claim must leave it for the next leader to settle.
            since = self._store.register_schedule(
                instruction.id,
                cron=schedule.cron,
                timezone=schedule.timezone,
                now=now if scheduler_since is None else min(scheduler_since, now),
            )
            lower = max(since, now - self._settings.look_back)
            self._settled[instruction.id] = lower
            due = newest_fire_times(schedule, after=lower, until=now, count=MISSED_LIMIT + 1)
            plan = plan_catch_up(
                due,
                recorded=self._recorded(instruction.id, due),
                now=now,
                grace_seconds=schedule.misfire_grace_seconds,
                scheduler_since=scheduler_since,
            )
            if plan.missed:
                self._record_missed(
                    instruction,
                    plan.missed,
                    "no scheduler ran it in time, and a newer fire supersedes it"
                    if plan.catch_up is not None
                    else f"no scheduler ran it within its {schedule.misfire_grace_seconds} s "
                    "misfire grace",
                )
            if plan.catch_up is not None:
                self._events.publish(
                    FireCaughtUp(
                        instruction_id=instruction.id,
                        scheduled_for=plan.catch_up,
                        trigger=Trigger.CATCH_UP,
                    )
                )
                fires.append(
                    Fire(
                        instruction_id=instruction.id,
                        scheduled_for=plan.catch_up,
                        trigger=Trigger.CATCH_UP,
                    )
                )
        return fires

    def settle(self, now: datetime) -> None:
        """Record as missed every fire whose misfire grace has passed without a run row.

        The leader calls this every poll interval: whatever kept a fire from being
        claimed (a worker pool busy past the grace, a run of the same instruction that
        would not end, a fire thread lost to a bug), the fire still gets an outcome.
        """
        for instruction in self._definitions.values():
            grace = instruction.schedule.misfire_grace_seconds
            # Past the grace APScheduler starts no job for the fire; the extra poll
            # interval leaves a job that did start the time to claim it.
            horizon = now - timedelta(seconds=grace + self._settings.poll_seconds)
            self._settle_instruction(
                instruction,
                horizon,
                f"no run claimed it within its {grace} s misfire grace "
                "(the node was busy or the fire was lost)",
            )

    def _settle_before(self, moment: datetime, reason: str) -> None:
        for instruction in self._definitions.values():
            self._settle_instruction(instruction, moment, reason)

    def _settle_instruction(self, instruction: Instruction, horizon: datetime, reason: str) -> None:
        lower = self._settled.get(instruction.id)
        if lower is None or horizon <= lower:
            return
        try:
            due = newest_fire_times(
                instruction.schedule, after=lower, until=horizon, count=MISSED_LIMIT
            )
            recorded = self._recorded(instruction.id, due)
            unrun = [moment for moment in due if moment not in recorded]
            if unrun:
                self._record_missed(instruction, unrun, reason)
        except SalvagelaneError as exc:
            # The watermark stays: the next pass looks at these fires again.
            self._events.publish(MissedNotRecorded(instruction_id=instruction.id, exception=exc))
            return
        self._settled[instruction.id] = horizon

    def _recorded(self, instruction_id: str, fires: Sequence[datetime]) -> set[datetime]:
        if not fires:
            return set()
        return self._store.recorded_fires(instruction_id, start=fires[0], end=fires[-1])

    def _record_missed(
        self, instruction: Instruction, fires: Sequence[datetime], reason: str
    ) -> None:
        for moment in fires:
            run_id = self._store.record_missed(
                instruction_id=instruction.id,
                definition_sha256=instruction.definition_sha256,
                scheduled_for=moment,
                now=self._clock(),
                reason=reason,
            )
            if run_id is not None:
                self._events.publish(
                    FireMissed(
                        instruction_id=instruction.id,
                        scheduled_for=moment,
                        run_id=run_id,
                        reason=reason,
                    )
                )

    def _skipped(self, instruction_id: str, fires: Sequence[datetime], reason: str) -> None:
        instruction = self._definitions.get(instruction_id)
        if instruction is None:
            return
        try:
            self._record_missed(instruction, fires, reason)
        except SalvagelaneError as exc:
            self._events.publish(MissedNotRecorded(instruction_id=instruction_id, exception=exc))

    def _submit(self, fires: Sequence[Fire]) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            raise SalvagelaneError("cannot submit fires: this node does not lead")
        for one in fires:
            scheduler.run_now(
                one.name,
                instruction_id=one.instruction_id,
                scheduled_for=one.scheduled_for.isoformat(),
                trigger=one.trigger.value,
                retry_of=one.retry_of,
            )

    # --- one fire -------------------------------------------------------------------------

    def fire(
        self,
        instruction_id: str,
        scheduled_for: datetime,
        *,
        trigger: Trigger = Trigger.SCHEDULE,
        retry_of: str | None = None,
    ) -> None:
        """Claim and run one fire (in a worker thread). Never raises: a fire that fails
        is recorded on its run and logged; the scheduler goes on."""
        with bound(instruction=instruction_id):
            fields = FireFields(
                instruction_id=instruction_id,
                scheduled_for=scheduled_for,
                trigger=trigger,
                retry_of=retry_of,
            )
            instruction = self._definitions.get(instruction_id)
            if instruction is None:
                self._events.publish(FireUnknown(**fields))
                return
            self._events.publish(FireReceived(**fields))
            if self._dispatch is not None:
                self._enqueue(self._dispatch, instruction, scheduled_for, trigger, retry_of, fields)
                return
            with self._instruction_lock(instruction_id):
                # A fire that waited for the instruction's previous run through a stop (or
                # a lost lead) stays unclaimed: the settlement at the stop, or the next
                # leader's catch-up, gives it its outcome.
                with self._guard:
                    closed = self._gate_closed or self._stopping.is_set()
                    if not closed:
                        self._active_fires += 1
                if closed:
                    self._events.publish(FireSkipped(reason="not leading", **fields))
                    return
                try:
                    self._run(instruction, scheduled_for, trigger, retry_of, fields)
                finally:
                    with self._fires_done:
                        self._active_fires -= 1
                        self._fires_done.notify_all()

    def _run(
        self,
        instruction: Instruction,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        fields: FireFields,
    ) -> None:
        claimed: list[str] = []

        def on_claimed(run_id: str) -> None:
            claimed.append(run_id)
            with self._guard:
                self._in_flight[run_id] = instruction.id
            self._events.publish(FireClaimed(run_id=run_id, **fields))

        executor = Executor(
            self._store,
            connector_for=self._connector_for,
            sinks_for=self._sinks_for,
            heartbeat_seconds=self._settings.heartbeat_seconds,
            on_claimed=on_claimed,
            events=self._events,
        )
        try:
            executor.run(
                instruction, trigger=trigger, scheduled_for=scheduled_for, retry_of=retry_of
            )
        except DuplicateFireError:
            self._events.publish(FireDuplicate(**fields))
        except Exception as exc:
            # Recorded on the run by the executor where the database allowed; the
            # scheduler thread must survive it.
            self._events.publish(FireCrashed(exception=exc, **fields))
        finally:
            with self._guard:
                for run_id in claimed:
                    self._in_flight.pop(run_id, None)

    def _enqueue(
        self,
        dispatch: Dispatch,
        instruction: Instruction,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        fields: FireFields,
    ) -> None:
        # The queue keeps one run of an instruction at a time (across workers): no
        # instruction lock here, a fire is claimed as soon as it comes.
        with self._guard:
            closed = self._gate_closed or self._stopping.is_set()
        if closed:
            self._events.publish(FireSkipped(reason="not leading", **fields))
            return
        try:
            run_id = dispatch.enqueue(
                instruction,
                scheduled_for=scheduled_for,
                trigger=trigger,
                retry_of=retry_of,
                now=self._clock(),
            )
        except DuplicateFireError:
            self._events.publish(FireDuplicate(**fields))
        except SalvagelaneError as exc:
            # Claim and job rolled back together: the fire is unclaimed, and settling
            # (or the next leader's catch-up) gives it its outcome.
            self._events.publish(FireNotQueued(exception=exc, **fields))
        else:
            self._events.publish(FireClaimed(run_id=run_id, queued=True, **fields))

    @contextmanager
    def _instruction_lock(self, instruction_id: str) -> Iterator[None]:
        # One run of an instruction at a time, whether the scheduler, a catch-up or a
        # retry started it (APScheduler's max_instances only sees its own job).
        with self._guard:
            lock = self._instruction_locks.setdefault(instruction_id, threading.Lock())
        with lock:
            yield

    # --- reload ---------------------------------------------------------------------------

    def _reload(self) -> None:
        try:
            found = load_definitions(self._settings.instructions_dir, self._definitions)
        except ConfigurationError as exc:
            self._events.publish(DefinitionsReloadFailed(error=str(exc)))
            self._announce(f"reload failed, keeping every definition: {exc}")
            return
        self._report_problems(found)
        before = self._definitions
        after = found.instructions
        # Jobs look their definition up when they fire, so only a new schedule needs a
        # new job; every other change takes effect at the next fire.
        changed = [
            i for i in after.values() if i.id not in before or before[i.id].schedule != i.schedule
        ]
        updated = [
            i.id
            for i in after.values()
            if i.id in before and before[i.id].definition_sha256 != i.definition_sha256
        ]
        removed = sorted(set(before) - set(after))
        self._definitions = after
        scheduler = self._scheduler
        # What this reload scheduled, said once for the log and the console: a node that
        # does not lead (standing by, or reloading just before it takes the lead)
        # schedules nothing here; the lead schedules every instruction when it starts.
        rescheduled: list[str] = []
        if scheduler is not None:
            now = self._clock()
            for instruction in changed:
                scheduler.add_instruction(instruction)
                rescheduled.append(instruction.id)
                schedule = instruction.schedule
                since = self._store.register_schedule(
                    instruction.id, cron=schedule.cron, timezone=schedule.timezone, now=now
                )
                # The new schedule's fires are due from `since` on; none before.
                self._settled[instruction.id] = max(since, self._settled.get(instruction.id, since))
            for instruction_id in removed:
                scheduler.remove_instruction(instruction_id)
                self._settled.pop(instruction_id, None)
        kept = list(found.kept)
        self._events.publish(
            DefinitionsReloaded(
                instructions=tuple(sorted(after)),
                scheduled=tuple(sorted(after)) if scheduler is not None else (),
                rescheduled=tuple(sorted(rescheduled)),
                updated=tuple(sorted(updated)),
                removed=tuple(removed),
                kept_previous=tuple(kept),
            )
        )
        counts = f"{len(updated)} changed, "
        if scheduler is not None:
            counts += f"{len(rescheduled)} (re)scheduled, "
        counts += f"{len(removed)} removed, {len(kept)} kept at their previous version"
        self._announce(
            f"reloaded: {len(after)} instruction(s); {counts}"
            + ("" if scheduler is not None else "; scheduled when this node leads")
        )

    def _report_problems(self, found: DefinitionSet) -> None:
        for problem in found.problems:
            self._events.publish(DefinitionInvalid(error=problem))
            self._announce(f"invalid definition: {problem}")
