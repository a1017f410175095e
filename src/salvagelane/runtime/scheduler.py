"""When instructions fire: crontab to APScheduler 3, fire-time arithmetic, and the service.

The only module that imports APScheduler. Everything here reads a cron expression with
crontab's meaning (see :mod:`salvagelane.definitions.cron`), not APScheduler's:

* day-of-week 0 and 7 are Sunday (APScheduler 3 counts 0 as Monday), so weekdays are
  handed to APScheduler as names;
* when both day-of-month and day-of-week are restricted, a day matching EITHER fires
  (APScheduler alone would require both);
* a fixed-time job (no ``*`` in its second, minute or hour field) whose local time occurs
  twice when the clocks go back fires once, on the first occurrence. A local time the
  clocks skip (spring forward) still fires once, one gap later (02:30 in Europe/Berlin
  fires at 03:30 CEST): a daily report is late that day, never lost.

All datetimes taken and returned are timezone-aware; returned ones are in UTC.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.events import (  # type: ignore[import-untyped]
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)
from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped]
from apscheduler.schedulers.background import (  # type: ignore[import-untyped]
    BackgroundScheduler,
)
from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.combining import OrTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped]

from salvagelane.callables import CallableProblem, resolve_callable
from salvagelane.definitions.cron import cron_fields, month_numbers, weekday_numbers
from salvagelane.definitions.model import Instruction, Schedule
from salvagelane.errors import (
    ConfigurationError,
    InternalError,
    NotFoundError,
    UnresolvedCallableError,
)

__all__ = [
    "RUN_SCHEDULED",
    "CatchUpPlan",
    "CronScheduler",
    "ScheduleRow",
    "SkipListener",
    "cron_trigger",
    "fire_times",
    "latest_fire_time",
    "newest_fire_times",
    "next_fire_time",
    "plan_catch_up",
    "run_scheduled",
    "schedule_table",
]

MISSED_LIMIT = 100
"""At most this many missed fires (the newest) are reported by :func:`plan_catch_up`."""

RUN_SCHEDULED = "salvagelane.runtime.scheduler:run_scheduled"
"""The textual job function every job names: it works out the fire time, then calls the
service's target (see :class:`CronScheduler`)."""

_CRONTAB_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # index = crontab number
_MONDAY_FIRST = (1, 2, 3, 4, 5, 6, 0)
_NUDGE = timedelta(microseconds=1)
_REFERENCE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:"
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


# --- Crontab to APScheduler ------------------------------------------------------------------


class _CrontabTrigger(CronTrigger):  # type: ignore[misc]
    """A CronTrigger that fires a fixed-time job once when the clocks go back.

    Stateless beyond CronTrigger's own fields, so it pickles like one (job stores).
    """

    __slots__ = ()

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        fire: datetime | None = super().get_next_fire_time(previous_fire_time, now)
        while fire is not None and self._repeats_a_wall_time(fire):
            after = fire.astimezone(UTC)  # see _after: UTC arithmetic, strictly later
            fire = super().get_next_fire_time(after, after + _NUDGE)
        return fire

    def _repeats_a_wall_time(self, fire: datetime) -> bool:
        # Like Vixie cron: jobs with a wildcard time field run in both passes of a repeated
        # hour (they are about elapsed time); fixed-time jobs already ran in the first.
        if any(str(field).startswith("*") for field in self.fields[5:]):  # hour minute second
            return False
        local = fire.astimezone(self.timezone)
        return bool(local.fold) and local.replace(fold=0).utcoffset() != local.utcoffset()


def _zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(
            f"schedule.timezone: expected an IANA time zone name such as UTC or "
            f"Europe/Berlin, got {name!r}"
        ) from exc


def _weekdays(text: str) -> str:
    """A crontab day-of-week field as APScheduler day names (its numbers mean otherwise)."""
    if text == "*":
        return "*"
    days = weekday_numbers(text)
    if len(days) == 7:
        return "*"
    return ",".join(_CRONTAB_WEEKDAYS[day] for day in _MONDAY_FIRST if day in days)


def _months(text: str) -> str:
    if text == "*" or not re.search(r"[A-Za-z]", text):
        return text  # numbers, ranges and steps mean the same to APScheduler
    return ",".join(str(month) for month in sorted(month_numbers(text)))


def cron_trigger(schedule: Schedule) -> BaseTrigger:
    """The APScheduler trigger of ``schedule``, in its time zone, with crontab's meaning.

    A :class:`CronTrigger` (subclass); an ``OrTrigger`` of two of them when both
    day-of-month and day-of-week are restricted. ConfigurationError for an unusable
    cron expression or time zone.
    """
    try:
        fields = cron_fields(schedule.cron)
    except ValueError as exc:
        raise ConfigurationError(f"schedule.cron: {exc}") from exc
    zone = _zone(schedule.timezone)
    common: dict[str, Any] = {
        "month": _months(fields.month),
        "hour": fields.hour,
        "minute": fields.minute,
        "second": fields.second,
        "timezone": zone,
    }
    weekdays = _weekdays(fields.day_of_week)
    if fields.day_of_month != "*" and fields.day_of_week != "*":
        # crontab: "0 9 1 * mon" fires on the 1st AND on every Monday.
        return OrTrigger(
            [
                _CrontabTrigger(day=fields.day_of_month, day_of_week="*", **common),
                _CrontabTrigger(day="*", day_of_week=weekdays, **common),
            ]
        )
    return _CrontabTrigger(day=fields.day_of_month, day_of_week=weekdays, **common)


# --- Fire times ------------------------------------------------------------------------------


def _aware(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {name}={moment.isoformat()}: pass a timezone-aware one")
    return moment


def _after(trigger: BaseTrigger, moment: datetime) -> datetime | None:
    # Strictly after ``moment``. Not get_next_fire_time(moment, moment): APScheduler nudges
    # past ``previous`` only when it compares equal, and an aware datetime in a repeated
    # (DST) hour never equals one in another zone (PEP 495), so it would repeat itself.
    # Arithmetic in UTC: adding to a wall time in a repeated hour drops its fold.
    moment = moment.astimezone(UTC)
    try:
        fire: datetime | None = trigger.get_next_fire_time(moment, moment + _NUDGE)
    except OverflowError:
        return None  # the next fire would be after 9999-12-31: there is none
    return None if fire is None else fire.astimezone(UTC)


def _fires(trigger: BaseTrigger, start: datetime, end: datetime, limit: int) -> list[datetime]:
    found: list[datetime] = []
    moment = start
    while len(found) < limit:
        fire = _after(trigger, moment)
        if fire is None or fire > end:
            break
        found.append(fire)
        moment = fire
    return found


def _newest_fires(
    trigger: BaseTrigger, start: datetime, end: datetime, count: int
) -> list[datetime]:
    """The newest ``count`` fires in (start, end], oldest first.

    Triggers only look forward, so this looks back in doubling windows: a daily job over a
    day costs one step, an every-second job over a day ~200 steps instead of 86,400.
    """
    span = timedelta(seconds=64)
    while True:
        lower = start if end - start <= span else end - span
        found = _fires(trigger, lower, end, limit=10**9)
        if len(found) >= count or lower == start:
            return found[-count:] if count else []
        span *= 2


def next_fire_time(schedule: Schedule, after: datetime) -> datetime:
    """The first fire strictly after ``after``, in UTC."""
    fire = _after(cron_trigger(schedule), _aware(after, "after"))
    if fire is None:
        raise ConfigurationError(f"schedule.cron: {schedule.cron!r} never fires after {after}")
    return fire


def fire_times(
    schedule: Schedule, start: datetime, end: datetime, *, limit: int = 1000
) -> list[datetime]:
    """The fires ``t`` with ``start < t <= end``, oldest first, in UTC: the first ``limit``."""
    if limit < 0:
        raise ValueError(f"limit={limit}: expected 0 or more")
    return _fires(cron_trigger(schedule), _aware(start, "start"), _aware(end, "end"), limit)


def latest_fire_time(
    schedule: Schedule, now: datetime, *, look_back: timedelta = timedelta(days=1)
) -> datetime | None:
    """The newest fire at or before ``now`` (within ``look_back``), in UTC, or None."""
    now = _aware(now, "now")
    found = _newest_fires(cron_trigger(schedule), now - look_back, now, 1)
    return found[0] if found else None


FIRE_LOOK_BACK = timedelta(days=366 * 8)
"""How far back :func:`nearest_fire_times` looks for a fire (a 29 February job fires
once in four years, or eight across a century that skips a leap day)."""


def nearest_fire_times(
    schedule: Schedule, moment: datetime
) -> tuple[datetime | None, datetime | None]:
    """The newest fire at or before ``moment`` (within :data:`FIRE_LOOK_BACK`) and the
    first strictly after it, in UTC; None where there is none. ``moment`` is a fire
    time of the schedule exactly when the first equals it."""
    moment = _aware(moment, "moment").astimezone(UTC)
    trigger = cron_trigger(schedule)
    # Near 0001-01-01 the look-back stops at the first moment a datetime can hold.
    earliest = datetime.min.replace(tzinfo=UTC)
    start = moment - FIRE_LOOK_BACK if moment - earliest > FIRE_LOOK_BACK else earliest
    found = _newest_fires(trigger, start, moment, 1)
    return (found[0] if found else None), _after(trigger, moment)


@dataclass(frozen=True, kw_only=True, slots=True)
class CatchUpPlan:
    """What ``serve`` does about fires that passed while nobody ran them.

    ``catch_up`` is the newest fire when it has no run and is still within the misfire
    grace: run it once (coalesced). ``missed`` are the other fires without a run, oldest
    first, the newest :data:`MISSED_LIMIT` at most: record them as missed, never run them.
    """

    catch_up: datetime | None
    missed: tuple[datetime, ...]


def newest_fire_times(
    schedule: Schedule, *, after: datetime, until: datetime, count: int
) -> list[datetime]:
    """The newest ``count`` fires ``t`` with ``after < t <= until``, oldest first, in UTC."""
    if count < 0:
        raise ValueError(f"count={count}: expected 0 or more")
    after, until = _aware(after, "after"), _aware(until, "until")
    if after >= until:
        return []
    return _newest_fires(cron_trigger(schedule), after, until, count)


def plan_catch_up(
    fires: Sequence[datetime],
    *,
    recorded: Collection[datetime],
    now: datetime,
    grace_seconds: int,
    scheduler_since: datetime | None = None,
) -> CatchUpPlan:
    """What to do about the fires up to ``now`` that have no run row (``recorded`` holds
    those that have one).

    ``fires`` are the fires up to ``now``, oldest first (see :func:`newest_fire_times`).
    The newest of them runs once as the catch-up when it has no row and is within grace
    (coalesced: older unrun fires are superseded by it). Every other fire without a row
    is missed, but those after ``scheduler_since``: the scheduler started then owns them,
    and one of them may be being claimed right now (the periodic settlement records it
    missed if nothing ever claims it).
    """
    now = _aware(now, "now")
    if not fires:
        return CatchUpPlan(catch_up=None, missed=())
    newest = fires[-1]
    catch_up: datetime | None = None
    if newest not in recorded and now - newest <= timedelta(seconds=grace_seconds):
        catch_up = newest
    owned_from = None if scheduler_since is None else _aware(scheduler_since, "scheduler_since")
    missed = [
        fire
        for fire in fires
        if fire not in recorded
        and fire != catch_up
        and (owned_from is None or fire <= owned_from or fire == newest)
    ]
    return CatchUpPlan(catch_up=catch_up, missed=tuple(missed[-MISSED_LIMIT:]))


# --- The schedule table ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleRow:
    """One instruction's schedule and its next fire (None: it never fires again)."""

    instruction_id: str
    cron: str
    timezone: str
    next_fire_utc: datetime | None
    next_fire_local: datetime | None


def schedule_table(instructions: Iterable[Instruction], now: datetime) -> list[ScheduleRow]:
    """A row per instruction, in the order given, with its next fire after ``now``."""
    now = _aware(now, "now")
    rows: list[ScheduleRow] = []
    for instruction in instructions:
        schedule = instruction.schedule
        fire = _after(cron_trigger(schedule), now)
        rows.append(
            ScheduleRow(
                instruction_id=instruction.id,
                cron=schedule.cron,
                timezone=schedule.timezone,
                next_fire_utc=fire,
                next_fire_local=None if fire is None else fire.astimezone(_zone(schedule.timezone)),
            )
        )
    return rows


# --- The service -----------------------------------------------------------------------------


def _resolve(reference: str) -> Callable[..., Any]:
    """The callable a ``module:function`` reference names; ConfigurationError otherwise."""
    if not _REFERENCE.match(reference):
        raise ConfigurationError(
            f"scheduler target: expected a Python callable as module:function, got {reference!r}"
        )
    try:
        return resolve_callable(reference)
    except UnresolvedCallableError as exc:
        if exc.problem == CallableProblem.NOT_CALLABLE:
            raise ConfigurationError(
                f"scheduler target {reference!r}: expected a callable"
            ) from None
        raise ConfigurationError(f"scheduler target {reference!r}: {exc.__cause__}") from exc


def run_scheduled(
    *, instruction_id: str, target: str, cron: str, timezone: str, grace_seconds: int
) -> None:
    """The job function of every scheduled instruction (named textually by :data:`RUN_SCHEDULED`).

    APScheduler 3 does not tell a job when it was due, so this works it out from the job's
    schedule: the newest fire at or before now. APScheduler runs a job (coalesced) at its
    newest due fire time and only within the misfire grace, so that is the fire it runs
    for, unless the worker thread started so late that the next fire has passed too (an
    overloaded pool and a sub-second-spaced schedule); then the newer fire is named, and
    the run claims that one. Calls ``target(instruction_id=..., scheduled_for=...)`` with
    the fire time as ISO 8601 in UTC, whole seconds.
    """
    now = datetime.now(UTC)
    schedule = Schedule(cron=cron, timezone=timezone)
    scheduled = latest_fire_time(schedule, now, look_back=timedelta(seconds=grace_seconds + 60))
    if scheduled is None:
        raise InternalError(
            f"instruction {instruction_id!r}: no fire of {cron!r} ({timezone}) within "
            f"{grace_seconds} s before {now.isoformat()}"
        )
    _resolve(target)(instruction_id=instruction_id, scheduled_for=scheduled.isoformat())


SkipListener = Callable[[str, Sequence[datetime], str], None]
"""Told ``(instruction_id, fire_times, reason)`` when APScheduler skips due fires."""

_ONE_OFF_PREFIX = "once:"


class CronScheduler:
    """A background APScheduler (UTC, in-memory jobs) with one job per instruction.

    ``target`` names, as ``module:function``, what runs a fire: it is called as
    ``target(instruction_id=..., scheduled_for=...)`` in a worker thread (one-off runs
    from :meth:`run_now` pass more keywords). Jobs are added with a textual function
    reference and plain-string arguments only, so they would survive a persistent job
    store. ``on_skipped`` hears of fires APScheduler did not run: too late for the
    misfire grace, or while the instruction's previous run was still running.
    """

    def __init__(
        self, *, target: str, max_workers: int = 10, on_skipped: SkipListener | None = None
    ) -> None:
        _resolve(target)  # fail now, not at the first fire
        self._target = target
        self._on_skipped = on_skipped
        self._scheduler: Any = BackgroundScheduler(
            timezone=UTC,
            executors={"default": {"type": "threadpool", "max_workers": max_workers}},
        )
        if on_skipped is not None:
            self._scheduler.add_listener(self._skipped, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
            # Skips reach the listener, which records and logs them as structured events;
            # APScheduler's own unformatted warnings would only repeat them.
            logging.getLogger("apscheduler").setLevel(logging.ERROR)

    def _skipped(self, event: JobEvent) -> None:
        assert self._on_skipped is not None
        if event.job_id.startswith(_ONE_OFF_PREFIX):
            return  # one-off runs have no misfire limit and are not instruction fires
        if event.code == EVENT_JOB_MISSED:
            times = [event.scheduled_run_time]
            reason = "it was due later than its misfire grace allows"
        else:
            times = list(event.scheduled_run_times)
            reason = "the previous run of the instruction was still running"
        self._on_skipped(event.job_id, [t.astimezone(UTC) for t in times], reason)

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    def add_instruction(self, instruction: Instruction) -> None:
        """Schedule ``instruction`` (replacing a job with its id): at most one run at a time,
        due fires coalesced into one, none later than its misfire grace."""
        schedule = instruction.schedule
        if not self._scheduler.running:
            # Before start() APScheduler queues jobs and replace_existing only applies at
            # start, so a second add would leave two pending jobs with one id.
            with contextlib.suppress(JobLookupError):
                self._scheduler.remove_job(instruction.id)
        self._scheduler.add_job(
            RUN_SCHEDULED,
            trigger=cron_trigger(schedule),
            kwargs={
                "instruction_id": instruction.id,
                "target": self._target,
                "cron": schedule.cron,
                "timezone": schedule.timezone,
                "grace_seconds": schedule.misfire_grace_seconds,
            },
            id=instruction.id,
            name=instruction.id,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=schedule.misfire_grace_seconds,
            replace_existing=True,
        )

    def run_now(self, name: str, **kwargs: str | None) -> None:
        """Call the target once with ``kwargs``, as soon as a worker is free (catch-ups,
        retries). ``name`` identifies the one-off job; a pending one of that name is
        replaced. No misfire limit: once asked for, it runs, however busy the pool."""
        self._scheduler.add_job(
            self._target,
            trigger=DateTrigger(run_date=datetime.now(UTC), timezone=UTC),
            kwargs=kwargs,
            id=_ONE_OFF_PREFIX + name,
            name=name,
            misfire_grace_time=None,
            replace_existing=True,
        )

    def remove_instruction(self, instruction_id: str) -> None:
        """Unschedule an instruction; NotFoundError when it is not scheduled."""
        try:
            self._scheduler.remove_job(instruction_id)
        except JobLookupError as exc:
            raise NotFoundError(f"no scheduled instruction {instruction_id!r}") from exc

    def next_fire_times(self) -> dict[str, datetime]:
        """Each scheduled instruction's next fire, in UTC (paused jobs left out)."""
        now = datetime.now(UTC)
        result: dict[str, datetime] = {}
        for job in self._scheduler.get_jobs():
            if job.id.startswith(_ONE_OFF_PREFIX):
                continue
            # Before start() jobs are pending and have no next_run_time yet.
            fire = job.trigger.get_next_fire_time(None, now) if job.pending else job.next_run_time
            if fire is not None:
                result[job.id] = fire.astimezone(UTC)
        return result

    def start(self) -> None:
        """Start firing, in a background thread."""
        self._scheduler.start()

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop firing; with ``wait``, return only after running jobs have finished.
        Without, runs already started go on in their worker threads."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)
