"""Which fires to run, and the outcome of those no run will have.

On taking the lead, and every poll interval after, the leader settles what happened
while nobody (or nothing) ran the fires:

1. runs left ``running`` whose heartbeat went stale are marked ``interrupted`` (their
   raw outputs stay), and an interrupted scheduled run is retried once while its fire
   is still within the misfire grace; queued runs no worker will take are settled, and a
   queue no worker consumes is warned of;
2. per instruction, the newest fire that passed unrun is run once as a ``catch_up`` if
   still within grace; older unrun fires are recorded as ``missed``;
3. every poll, a fire whose grace passed without a run row is recorded ``missed``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from salvagelane.definitions import Instruction
from salvagelane.errors import SalvagelaneError
from salvagelane.events import EventStream
from salvagelane.events.kinds import (
    FireCaughtUp,
    FireMissed,
    FireRetryPlanned,
    MissedNotRecorded,
    QueueCheckFailed,
    QueueResumed,
    QueueStalled,
    RunInterrupted,
    RunSettled,
)
from salvagelane.runtime.fire_runner import Definitions, Dispatch, Fire
from salvagelane.runtime.scheduler import MISSED_LIMIT, newest_fire_times, plan_catch_up
from salvagelane.runtime.settings import ServeSettings
from salvagelane.store import Store
from salvagelane.vocabulary import Clock, Trigger

Announce = Callable[[str], None]

_RETRYABLE_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})


class FirePlanner:
    """The leader's decisions about past fires: retries, catch-ups, missed records."""

    def __init__(
        self,
        settings: ServeSettings,
        *,
        store: Store,
        definitions: Definitions,
        clock: Clock,
        events: EventStream,
        announce: Announce,
        dispatch: Dispatch | None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._definitions = definitions
        self._clock = clock
        self._events = events
        self._announce = announce
        self._dispatch = dispatch
        self._retries_asked: set[str] = set()
        # Per instruction: every fire up to this moment has an outcome (a run or a missed
        # record), as far as this leader has checked.
        self._settled: dict[str, datetime] = {}
        self._stalled_warned: datetime | None = None  # when queue.stalled was last published

    def begin_lead(self) -> None:
        """A new lead checks every instruction's fires again (:meth:`catch_up`)."""
        self._settled = {}

    def rescheduled(self, instruction_id: str, since: datetime) -> None:
        """The instruction has a new schedule, its fires due from ``since`` on."""
        self._settled[instruction_id] = max(since, self._settled.get(instruction_id, since))

    def removed(self, instruction_id: str) -> None:
        """The instruction is no longer scheduled."""
        self._settled.pop(instruction_id, None)

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
        definitions = self._definitions()
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
        for instruction in self._definitions().values():
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
        for instruction in self._definitions().values():
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

    def settle_before(self, moment: datetime, reason: str) -> None:
        for instruction in self._definitions().values():
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

    def skipped(self, instruction_id: str, fires: Sequence[datetime], reason: str) -> None:
        instruction = self._definitions().get(instruction_id)
        if instruction is None:
            return
        try:
            self._record_missed(instruction, fires, reason)
        except SalvagelaneError as exc:
            self._events.publish(MissedNotRecorded(instruction_id=instruction_id, exception=exc))
