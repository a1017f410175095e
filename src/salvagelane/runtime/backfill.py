"""Backfill: run the past fires of an instruction's schedule that have no outcome.

``salvagelane backfill ID --from T --to T`` makes up a gap (a provider outage, a server
down over a weekend) one fire at a time, oldest first. Each fire is claimed exactly as
``run --scheduled-for`` claims it: the insert of its run row is the claim (the
one-run-per-fire index), so a fire a scheduler or another backfill runs meanwhile is
not run twice. The runs have trigger ``backfill``: they are not the schedule running,
so the clean streak, the gate and the fire lag leave them out.

What happens to each fire (:func:`plan_fire`), from the runs it already has:

- none: it is run (``run``);
- its newest run ``running`` with no heartbeat for ``stale_after`` seconds (its process
  died, e.g. a backfill killed mid-run): marked ``interrupted`` and retried;
- its newest run ``interrupted``: retried (``run --scheduled-for`` takes over such a
  fire the same way), once per interrupted run;
- its newest run's status in ``reprocess`` (failed, partial, missed): retried;
- otherwise left alone (``skip``): it has its outcome, or is running in another process.

A retry names the run it repeats (``retry_of``) and takes the next ``fire_attempt`` of
the fire, so two claims of the same retry collide and one wins (docs/adr/0021).
Running a backfill twice therefore runs nothing the second time, unless a fire's newest
run has a status ``reprocess`` asks for again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from salvagelane.definitions.model import Instruction
from salvagelane.errors import ConfigurationError, DuplicateFireError
from salvagelane.events.kinds import RunInterrupted
from salvagelane.events.stream import EventStream
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.scheduler import fire_times
from salvagelane.store import RunSummary, Store
from salvagelane.vocabulary import Clock, RunStatus, Trigger, utc_now

REPROCESSABLE = frozenset({RunStatus.FAILED, RunStatus.PARTIAL, RunStatus.MISSED})
"""The statuses ``--reprocess`` may name."""
MAX_FIRES = 10_000
"""At most this many fires in one backfill (a every-second cron over a year is a typo)."""


class Action(StrEnum):
    """What a backfill does about one fire."""

    RUN = "run"
    RETRY = "retry"
    SKIP = "skip"


@dataclass(frozen=True, kw_only=True, slots=True)
class FirePlan:
    """One fire and what to do about it; ``existing`` is its newest run (None: none)."""

    scheduled_for: datetime
    action: Action
    existing: RunSummary | None
    why: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FireResult:
    """One fire after the backfill dealt with it: ``run`` is the run it made (None when
    the fire was left alone)."""

    number: int
    total: int
    plan: FirePlan
    run: RunSummary | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    """The counts of a backfill: ``ran`` fires that ended ok or partial, ``failed`` those
    that ended otherwise, ``skipped`` those left alone; ``stopped`` when it was asked to
    stop before every fire was dealt with (``remaining`` fires untouched)."""

    fires: int
    ran: int = 0
    failed: int = 0
    skipped: int = 0
    remaining: int = 0
    stopped: bool = False


def backfill_fire_times(instruction: Instruction, start: datetime, end: datetime) -> list[datetime]:
    """Every fire of ``instruction``'s schedule in ``[start, end]`` (both aware), oldest
    first, in UTC; ConfigurationError past :data:`MAX_FIRES` or for an empty range."""
    if end < start:
        raise ConfigurationError(
            f"backfill: --to {end.isoformat()} is before --from {start.isoformat()}"
        )
    # fire_times excludes its start: begin a microsecond earlier so --from itself counts.
    fires = fire_times(
        instruction.schedule, start - timedelta(microseconds=1), end, limit=MAX_FIRES + 1
    )
    if len(fires) > MAX_FIRES:
        raise ConfigurationError(
            f"backfill: more than {MAX_FIRES} fires of {instruction.id}'s schedule "
            f"({instruction.schedule.cron!r}) between {start.isoformat()} and "
            f"{end.isoformat()}; backfill a shorter range at a time"
        )
    return fires


def plan_fire(
    scheduled_for: datetime,
    runs: Sequence[RunSummary],
    *,
    reprocess: Iterable[RunStatus],
    stale: bool = False,
) -> FirePlan:
    """What to do about the fire with ``runs`` (in fire-attempt order); ``stale``: its
    newest run, if ``running``, has had no heartbeat for too long (its process died)."""
    if not runs:
        return FirePlan(scheduled_for=scheduled_for, action=Action.RUN, existing=None, why="")
    newest = runs[-1]
    status = newest.status
    short = f"run {newest.id[:8]} ({status})"
    if status in (RunStatus.RUNNING, RunStatus.QUEUED):
        if status == RunStatus.RUNNING and stale:
            return FirePlan(
                scheduled_for=scheduled_for,
                action=Action.RETRY,
                existing=newest,
                why=f"retry of {short}: no heartbeat, its process died",
            )
        return FirePlan(
            scheduled_for=scheduled_for,
            action=Action.SKIP,
            existing=newest,
            why=f"skipped: {short} is in flight",
        )
    if status == RunStatus.INTERRUPTED:
        return FirePlan(
            scheduled_for=scheduled_for,
            action=Action.RETRY,
            existing=newest,
            why=f"retry of {short}",
        )
    if status in frozenset(reprocess):
        return FirePlan(
            scheduled_for=scheduled_for,
            action=Action.RETRY,
            existing=newest,
            why=f"reprocess {short}",
        )
    return FirePlan(
        scheduled_for=scheduled_for,
        action=Action.SKIP,
        existing=newest,
        why=f"skipped: has {short}",
    )


class Backfill:
    """Runs the fires of one instruction in a range, one at a time (see the module)."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        *,
        events: EventStream,
        reprocess: Iterable[RunStatus] = (),
        stale_after_seconds: float = 60.0,
        clock: Clock = utc_now,
    ) -> None:
        unknown = set(reprocess) - REPROCESSABLE
        if unknown:
            raise ConfigurationError(
                f"backfill: cannot reprocess {', '.join(sorted(unknown))}; expected some of "
                f"{', '.join(sorted(REPROCESSABLE))}"
            )
        self._store = store
        self._executor = executor
        self._events = events
        self._reprocess = frozenset(reprocess)
        self._stale_after = timedelta(seconds=stale_after_seconds)
        self._clock = clock

    def plan(self, instruction: Instruction, fires: Sequence[datetime]) -> list[FirePlan]:
        """What a backfill of ``fires`` would do now (``--dry-run``); writes nothing."""
        return [self._plan(instruction, fire) for fire in fires]

    def _plan(self, instruction: Instruction, fire: datetime) -> FirePlan:
        runs = self._store.runs_for_fire(instruction.id, fire)
        newest = runs[-1] if runs else None
        stale = False
        if newest is not None and newest.status == RunStatus.RUNNING:
            stale = not self._store.fires.has_sign_of_life(
                newest.id, since=self._clock() - self._stale_after
            )
        return plan_fire(fire, runs, reprocess=self._reprocess, stale=stale)

    def run(
        self,
        instruction: Instruction,
        fires: Sequence[datetime],
        *,
        on_fire: Callable[[FireResult], None] = lambda result: None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Summary:
        """Deal with each of ``fires`` in turn, oldest first; ``should_stop`` is asked
        before each claim (a fire is either done or untouched)."""
        ran = failed = skipped = 0
        for number, fire in enumerate(fires, 1):
            if should_stop():
                return Summary(
                    fires=len(fires),
                    ran=ran,
                    failed=failed,
                    skipped=skipped,
                    remaining=len(fires) - number + 1,
                    stopped=True,
                )
            plan, run = self._one(instruction, fire)
            if run is None:
                skipped += 1
            elif run.status in (RunStatus.OK, RunStatus.PARTIAL):
                ran += 1
            else:
                failed += 1
            on_fire(FireResult(number=number, total=len(fires), plan=plan, run=run))
        return Summary(fires=len(fires), ran=ran, failed=failed, skipped=skipped)

    def _one(self, instruction: Instruction, fire: datetime) -> tuple[FirePlan, RunSummary | None]:
        # Twice at most: a claim lost to another process is planned again from what won.
        for _ in range(2):
            plan = self._plan(instruction, fire)
            if plan.action == Action.SKIP:
                return plan, None
            retry_of = None
            if plan.action == Action.RETRY:
                assert plan.existing is not None
                retry_of = plan.existing.id
                if plan.existing.status == RunStatus.RUNNING and not self._interrupt(
                    instruction, plan.existing
                ):
                    continue  # it showed a sign of life meanwhile: plan again
            try:
                outcome = self._executor.run(
                    instruction, trigger=Trigger.BACKFILL, scheduled_for=fire, retry_of=retry_of
                )
            except DuplicateFireError:
                continue
            return plan, self._summary(outcome.run_id, instruction.id, fire)
        return self._plan(instruction, fire), None

    def _summary(self, run_id: str, instruction_id: str, fire: datetime) -> RunSummary:
        return next(
            run for run in self._store.runs_for_fire(instruction_id, fire) if run.id == run_id
        )

    def _interrupt(self, instruction: Instruction, stale: RunSummary) -> bool:
        """Mark the stale ``running`` run interrupted (as a ``serve`` leader or ``run
        --scheduled-for`` would) and say so on the event stream; False when it is not
        interrupted after all (a heartbeat came in meanwhile)."""
        now = self._clock()
        assert stale.scheduled_for is not None
        self._store.reclaim_stale_fire(
            instruction.id, stale.scheduled_for, stale_before=now - self._stale_after, now=now
        )
        runs = self._store.runs_for_fire(instruction.id, stale.scheduled_for)
        if not any(run.id == stale.id and run.status == RunStatus.INTERRUPTED for run in runs):
            return False
        self._events.publish(
            RunInterrupted(
                run_id=stale.id,
                instruction_id=instruction.id,
                reason="no heartbeat",
                scheduled_for=stale.scheduled_for,
            )
        )
        return True
