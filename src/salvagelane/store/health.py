"""Run health per instruction: is the scheduled job healthy, and what breaks when it breaks?

Reached through :attr:`Store.health <salvagelane.store.Store.health>`. Two halves: the
pure computation (:func:`clean`, :func:`streak_of`, :func:`rate`, :func:`by_day`,
:func:`tokens_of`, :func:`health_of`), which takes plain values and reads no clock, and
:class:`HealthReader`, which reads those values from the database. ``salvagelane health``
and the review page's health view both print an :class:`InstructionHealth` from here, so
they cannot disagree.

- A **clean** run is a scheduled run (trigger ``schedule`` or ``catch_up``) that ended
  ``ok`` with nothing quarantined: no item of its chosen attempt held back, and none
  approved by an operator either (a run an operator had to repair was not clean).
- The **streak** counts clean scheduled runs in a row, from the newest ended one back;
  ``missed`` and ``interrupted`` fires break it as any other status does. Runs still
  ``running`` are left out.
- The **window** is the last ``days`` UTC days up to ``now``; rates, finish reasons,
  missed and interrupted fires, quarantine reasons and tokens per day are over it. The
  **recent** strip is the last 30 runs of any trigger, newest first.
- The window's **runs**, **statuses**, **finish reasons** and the **partial rate** and
  **failed rate** count the scheduled runs (the job being watched), unless every trigger
  is asked for (``every_trigger``: ``health --all``): a ``run`` by hand without its key
  set, a replay while writing a definition, must not read as the schedule failing.
  Quarantine reasons and tokens per day count every run (review load and spend).
- **partial rate** and **failed rate** are over the counted runs that ended in the
  window (``ok``, ``partial``, ``failed``, ``interrupted``); None when none did.
- The **gate** (``health --gate N``) passes when the newest ``N`` ended scheduled runs
  (by fire time, as the streak reads them) are all clean: the streak is at least ``N``.
- The **queue** figures are of now, not of the window: the instruction's runs waiting
  ``queued`` for a worker, since when the oldest waits, the workers consuming the task
  queue, and whether it is **stalled** (:mod:`.backlog`: the oldest has waited longer than
  the stall time and no worker consumes the queue).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.store._rows import Transactions
from salvagelane.store.backlog import NO_QUEUE, QueueFigures, read_figures
from salvagelane.store.figures import RunFigures, figures_of
from salvagelane.store.models import AttemptRow, QuarantinedItemRow, ReportRow, RunRow
from salvagelane.store.spend import ModelSpend, spend_of
from salvagelane.vocabulary import (
    FINAL_RUN_STATUSES,
    OUT_OF_THE_LANE,
    ReviewStatus,
    RunStatus,
    Trigger,
)

RECENT_RUNS = 30
"""How many runs the strip of statuses shows."""
DEFAULT_DAYS = 30
"""The default window of the other figures, in days."""
SCHEDULED_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})
"""The triggers of a scheduled run (a fire, on time or caught up)."""
_PAGE = 50
"""Scheduled runs read per query while counting the streak back."""


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthRun:
    """One run as the health figures see it: its figures (:mod:`.figures`) and trigger."""

    id: str
    trigger: Trigger
    scheduled_for: datetime | None
    created_at: datetime
    status: RunStatus
    quarantined: int
    operator_approved: int
    finish_reason: str | None

    @property
    def scheduled(self) -> bool:
        return self.trigger in SCHEDULED_TRIGGERS


@dataclass(frozen=True, kw_only=True, slots=True)
class WindowRun:
    """A run of the window, as far as its counts need it."""

    trigger: Trigger
    status: RunStatus
    finish_reason: str | None

    @property
    def scheduled(self) -> bool:
        return self.trigger in SCHEDULED_TRIGGERS


@dataclass(frozen=True, kw_only=True, slots=True)
class RecentRun:
    """One run of the strip of statuses."""

    id: str
    status: RunStatus
    trigger: Trigger
    created_at: datetime
    clean: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Streak:
    """Clean scheduled runs in a row (``count``), newest first; ``since`` is the creation
    of the oldest of them; ``broken_by`` the newest scheduled run that was not clean (None:
    every ended scheduled run was)."""

    count: int
    since: datetime | None
    broken_by: RecentRun | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StreakChange:
    """How one ended scheduled run changed its instruction's clean streak: ``broken``
    (it is not clean and the scheduled run before it was: ``streak`` clean runs in a row
    ended) or ``restored`` (it is clean and the one before was not: ``streak`` is 1)."""

    kind: str
    streak: int
    previous_run_id: str


def streak_change(run_id: str, scheduled_newest_first: Iterable[HealthRun]) -> StreakChange | None:
    """The change run ``run_id`` made, read from its instruction's ended scheduled runs
    (newest first); None when it made none, is not among them, or is the first."""
    runs = iter(scheduled_newest_first)
    this = next((run for run in runs if run.id == run_id), None)
    if this is None:
        return None
    before = list(itertools.islice(runs, 1))
    if not before:
        return None
    previous = before[0]
    if clean(this) and not clean(previous):
        return StreakChange(kind="restored", streak=1, previous_run_id=previous.id)
    if not clean(this) and clean(previous):
        ended = streak_of(itertools.chain(before, runs))
        return StreakChange(kind="broken", streak=ended.count, previous_run_id=previous.id)
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenUsage:
    """Tokens of one day: prompt and completion as the providers reported them
    (``attempts`` counts the calls, ``unreported`` those that reported none)."""

    prompt: int
    completion: int
    attempts: int
    unreported: int
    models: tuple[ModelSpend, ...] = ()
    """The same calls per model (as the provider reported it), for pricing them."""

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetToday:
    """An instruction's daily limits and what its current day has spent (the day in its
    schedule's time zone, counted as a run's budget check counts it; filled in by
    :func:`salvagelane.runtime.budget.priced_healths`)."""

    day: date
    timezone: str
    tokens: int
    tokens_per_day: int | None
    cost: float | None
    """None: no price table applies."""
    cost_per_day: float | None
    currency: str | None
    reached: str | None
    """``tokens`` or ``cost``: a limit the day reached, so its runs call no model until
    the day ends; None: within budget."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InstructionHealth:
    """The health figures of one instruction (see the module docstring)."""

    instruction_id: str
    since: datetime
    until: datetime
    days: int
    recent: tuple[RecentRun, ...]
    streak: Streak
    runs: int
    ended: int
    statuses: Mapping[str, int]
    partial_rate: float | None
    failed_rate: float | None
    finish_reasons: Mapping[str, int]
    missed_fires: int
    interrupted_fires: int
    quarantined_by_day: Mapping[str, Mapping[str, int]]
    tokens_by_day: Mapping[str, TokenUsage]
    queued_runs: int = 0
    oldest_queued_at: datetime | None = None
    queue_workers: int | None = None
    """Workers consuming the task queue now; None: the database has no queue tables."""
    queue_stalled: bool = False
    every_trigger: bool = False
    """The window's runs, statuses, finish reasons and rates count every trigger; False:
    only scheduled runs (``schedule``, ``catch_up``)."""
    currency: str | None = None
    """The currency of ``cost_by_day``; None: no price table applies (no cost figures)."""
    cost_by_day: Mapping[str, float] = field(default_factory=dict)
    """What the tokens of each day of ``tokens_by_day`` cost, by the instruction's price
    table (:func:`salvagelane.runtime.budget.with_cost` fills it in)."""
    cost_note: str | None = None
    """What the cost figures do not say by themselves (models priced at another's price)."""
    reasked: Mapping[str, int] = field(default_factory=dict)
    """The window's rejected items a follow-up request asked again for (``retry.on:
    [quarantined]``), by what became of them: ``accepted`` or ``still_quarantined``."""
    budget: BudgetToday | None = None
    """The daily budget of the instruction's newest stored definition and today's spend;
    None: no limit is set."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Gate:
    """Whether the newest ``needed`` ended scheduled runs of an instruction were clean;
    ``runs`` holds them (fewer when fewer are stored), newest first."""

    instruction_id: str
    needed: int
    runs: tuple[HealthRun, ...]

    @property
    def clean_runs(self) -> int:
        return sum(clean(run) for run in self.runs)

    @property
    def unclean(self) -> tuple[HealthRun, ...]:
        """The runs that were not clean, newest first."""
        return tuple(run for run in self.runs if not clean(run))

    @property
    def passed(self) -> bool:
        return len(self.runs) >= self.needed and not self.unclean


# --- the pure computation -------------------------------------------------------------------


def gate_of(instruction_id: str, scheduled_newest_first: Iterable[HealthRun], needed: int) -> Gate:
    """The gate of ``needed`` clean runs over ended scheduled runs, newest first (other
    runs are skipped); reads no further than ``needed`` of them."""
    if needed < 1:
        raise ValueError(f"needed: expected at least 1, got {needed}")
    ended = (
        run for run in scheduled_newest_first if run.scheduled and run.status != RunStatus.RUNNING
    )
    return Gate(
        instruction_id=instruction_id,
        needed=needed,
        runs=tuple(itertools.islice(ended, needed)),
    )


def clean(run: HealthRun) -> bool:
    """A scheduled run that ended ``ok`` with nothing quarantined (nor approved)."""
    return (
        run.scheduled
        and run.status == RunStatus.OK
        and run.quarantined == 0
        and run.operator_approved == 0
    )


def recent_of(run: HealthRun) -> RecentRun:
    return RecentRun(
        id=run.id,
        status=run.status,
        trigger=run.trigger,
        created_at=run.created_at,
        clean=clean(run),
    )


def streak_of(scheduled_newest_first: Iterable[HealthRun]) -> Streak:
    """The streak of clean runs at the head of ``scheduled_newest_first`` (ended scheduled
    runs, newest first; others are skipped). Reads only as far as the first unclean run."""
    count = 0
    since = None
    for run in scheduled_newest_first:
        if not run.scheduled or run.status == RunStatus.RUNNING:
            continue
        if not clean(run):
            return Streak(count=count, since=since, broken_by=recent_of(run))
        count += 1
        since = run.created_at
    return Streak(count=count, since=since, broken_by=None)


def rate(part: int, whole: int) -> float | None:
    """``part / whole`` rounded to 4 places; None for an empty whole."""
    return None if whole == 0 else round(part / whole, 4)


def day_of(moment: datetime) -> str:
    """The UTC day of ``moment`` (timezone-aware, as the store returns them): 2026-11-21."""
    return moment.astimezone(UTC).date().isoformat()


def days_between(since: datetime, until: datetime) -> list[str]:
    """Every UTC day from ``since``'s to ``until``'s, oldest first."""
    first, last = date.fromisoformat(day_of(since)), date.fromisoformat(day_of(until))
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def by_day(counts: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """(UTC day, key, count) rows summed per day and key; days and keys sorted."""
    days: dict[str, dict[str, int]] = {}
    for day, key, count in counts:
        bucket = days.setdefault(day, {})
        bucket[key] = bucket.get(key, 0) + count
    return {day: dict(sorted(days[day].items())) for day in sorted(days)}


def _tokens(usage: Any, key: str) -> int | None:
    if not isinstance(usage, Mapping):
        return None
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def tokens_of(
    attempts: Iterable[tuple[datetime, Any] | tuple[datetime, Any, str | None]],
) -> dict[str, TokenUsage]:
    """(started at, usage[, model]) of model calls as tokens per UTC day; the connectors
    store ``prompt_tokens`` and ``completion_tokens`` (None when the provider sent none)."""
    days: dict[str, list[int]] = {}
    models: dict[str, list[tuple[str | None, Any]]] = {}
    for moment, usage, *model in attempts:
        prompt, completion = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
        day = day_of(moment)
        bucket = days.setdefault(day, [0, 0, 0, 0])
        bucket[0] += prompt or 0
        bucket[1] += completion or 0
        bucket[2] += 1
        bucket[3] += prompt is None and completion is None
        models.setdefault(day, []).append((model[0] if model else None, usage))
    return {
        day: TokenUsage(
            prompt=p, completion=c, attempts=n, unreported=u, models=spend_of(models[day])
        )
        for day, (p, c, n, u) in sorted(days.items())
    }


def health_of(
    instruction_id: str,
    *,
    since: datetime,
    until: datetime,
    days: int,
    recent: Sequence[HealthRun],
    scheduled: Iterable[HealthRun],
    window: Sequence[WindowRun],
    quarantined: Iterable[tuple[str, str, int]],
    attempts: Iterable[tuple[datetime, Any] | tuple[datetime, Any, str | None]],
    queue: QueueFigures = NO_QUEUE,
    queue_stall_seconds: float = float("inf"),
    every_trigger: bool = False,
    reasked: Mapping[str, int] | None = None,
) -> InstructionHealth:
    """The figures from their inputs: the ``recent`` runs (newest first), the ended
    ``scheduled`` runs newest first (read lazily, as far as the streak goes), the runs of
    the ``window``, its quarantined items as (created at, reason, count), its model
    calls as (started at, usage), and the task queue's waits now (``until``). The window's
    rates count its scheduled runs only, unless ``every_trigger``."""
    wait = queue.waits.get(instruction_id)
    statuses: dict[str, int] = {}
    finish: dict[str, int] = {}
    counted = window if every_trigger else [run for run in window if run.scheduled]
    for run in counted:
        statuses[run.status] = statuses.get(run.status, 0) + 1
        if run.status in FINAL_RUN_STATUSES:
            reason = run.finish_reason or "none"
            finish[reason] = finish.get(reason, 0) + 1
    ended = sum(statuses.get(status, 0) for status in FINAL_RUN_STATUSES)
    fires = [run for run in window if run.scheduled]
    return InstructionHealth(
        instruction_id=instruction_id,
        since=since,
        until=until,
        days=days,
        recent=tuple(recent_of(run) for run in recent[:RECENT_RUNS]),
        streak=streak_of(scheduled),
        runs=len(counted),
        ended=ended,
        statuses={str(s): statuses[s] for s in RunStatus if s in statuses},
        partial_rate=rate(statuses.get(RunStatus.PARTIAL, 0), ended),
        failed_rate=rate(statuses.get(RunStatus.FAILED, 0), ended),
        finish_reasons=dict(sorted(finish.items(), key=lambda kv: (-kv[1], kv[0]))),
        missed_fires=sum(run.status == RunStatus.MISSED for run in fires),
        interrupted_fires=sum(run.status == RunStatus.INTERRUPTED for run in fires),
        quarantined_by_day=by_day(quarantined),
        tokens_by_day=tokens_of(attempts),
        queued_runs=0 if wait is None else wait.queued,
        oldest_queued_at=None if wait is None else wait.oldest,
        queue_workers=queue.live_workers,
        queue_stalled=queue.stalled(instruction_id, now=until, after_seconds=queue_stall_seconds),
        every_trigger=every_trigger,
        reasked=dict(reasked or {}),
    )


# --- the read side --------------------------------------------------------------------------


class HealthReader:
    """The health figures, read from the store's database (one transaction per call)."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    def instruction_health(
        self,
        instruction_id: str,
        *,
        now: datetime,
        days: int = DEFAULT_DAYS,
        queue_stall_seconds: float = float("inf"),
        every_trigger: bool = False,
    ) -> InstructionHealth:
        """The figures of ``instruction_id`` over the ``days`` UTC days up to ``now``."""
        return self.healths(
            [instruction_id],
            now=now,
            days=days,
            queue_stall_seconds=queue_stall_seconds,
            every_trigger=every_trigger,
        )[0]

    def streak_change(self, run_id: str, instruction_id: str) -> StreakChange | None:
        """How ended scheduled run ``run_id`` changed ``instruction_id``'s clean streak
        (:func:`streak_change`)."""
        with self._transaction(f"read the streak of {instruction_id}") as session:
            stmt = _scheduled_stmt(instruction_id)
            first = _health_runs(session, list(session.scalars(stmt.limit(_PAGE))))
            return streak_change(run_id, _scheduled_newest_first(session, stmt, first))

    def gate(self, instruction_id: str, needed: int) -> Gate:
        """The gate of ``needed`` clean scheduled runs of ``instruction_id`` (:func:`gate_of`)."""
        with self._transaction(f"read the last scheduled runs of {instruction_id}") as session:
            stmt = _scheduled_stmt(instruction_id)
            first = _health_runs(session, list(session.scalars(stmt.limit(_PAGE))))
            return gate_of(instruction_id, _scheduled_newest_first(session, stmt, first), needed)

    def healths(
        self,
        instruction_ids: Sequence[str],
        *,
        now: datetime,
        days: int = DEFAULT_DAYS,
        queue_stall_seconds: float = float("inf"),
        every_trigger: bool = False,
    ) -> list[InstructionHealth]:
        """The figures of each of ``instruction_ids`` (in that order), read together: the
        window, the quarantine and the tokens of all of them in one query each.
        ``queue_stall_seconds``: how long queued runs may wait with no worker before the
        queue counts as stalled (infinite: never)."""
        if days < 1:
            raise ValueError(f"days: expected at least 1, got {days}")
        ids = list(dict.fromkeys(instruction_ids))
        since = _midnight(now) - timedelta(days=days - 1)
        with self._transaction("read run health") as session:
            # The recent strips and the streaks' first pages share one figures_of.
            recent_rows = {
                i: list(
                    session.scalars(
                        sa.select(RunRow)
                        .where(RunRow.instruction_id == i)
                        .order_by(RunRow.created_at.desc(), RunRow.id.desc())
                        .limit(RECENT_RUNS)
                    )
                )
                for i in ids
            }
            first_rows = {i: list(session.scalars(_scheduled_stmt(i).limit(_PAGE))) for i in ids}
            every = {run.id: run for i in ids for run in (*recent_rows[i], *first_rows[i])}
            made = dict(zip(every, _health_runs(session, list(every.values())), strict=True))
            windows = _window_runs(session, ids, since)
            quarantined: dict[str, list[tuple[str, str, int]]] = {}
            for i, day, reason, count in _quarantined_by_instruction(session, ids, since):
                quarantined.setdefault(i, []).append((day, reason, count))
            reasked = _reasked_by_instruction(session, ids, since)
            attempts: dict[str, list[tuple[datetime, Any, str | None]]] = {}
            for i, started, usage, model in session.execute(
                sa.select(
                    RunRow.instruction_id, AttemptRow.started_at, AttemptRow.usage, AttemptRow.model
                )
                .join(RunRow, RunRow.id == AttemptRow.run_id)
                .where(RunRow.instruction_id.in_(ids), AttemptRow.started_at >= since)
            ).tuples():
                attempts.setdefault(i, []).append((started, usage, model))
            queue = read_figures(session)
            return [
                health_of(
                    i,
                    since=since,
                    until=now,
                    days=days,
                    recent=[made[run.id] for run in recent_rows[i]],
                    scheduled=_scheduled_newest_first(
                        session, _scheduled_stmt(i), [made[run.id] for run in first_rows[i]]
                    ),
                    window=windows.get(i, []),
                    quarantined=quarantined.get(i, []),
                    attempts=attempts.get(i, []),
                    queue=queue,
                    queue_stall_seconds=queue_stall_seconds,
                    every_trigger=every_trigger,
                    reasked=reasked.get(i, {}),
                )
                for i in ids
            ]

    def quarantined_by_day(
        self,
        *,
        instruction_id: str | None = None,
        reason: str | None = None,
        review_status: ReviewStatus | None = None,
        since: datetime | None = None,
    ) -> dict[str, dict[str, int]]:
        """Quarantined items per UTC day and reason (since ``since``, None: all of them),
        as the queue's filters select them (``review_status`` None: every item but the
        superseded ones)."""
        with self._transaction("count the quarantine per day") as session:
            return by_day(
                quarantined_per_day(
                    session,
                    instruction_id=instruction_id,
                    reason=reason,
                    review_status=review_status,
                    since=since,
                )
            )


def _midnight(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _health_runs(session: Session, runs: list[RunRow]) -> list[HealthRun]:
    figures: dict[str, RunFigures] = {}
    # figures_of batches by id (IN lists): keep each batch bounded.
    for start in range(0, len(runs), 500):
        figures.update(figures_of(session, runs[start : start + 500]))
    return [_health_run(run, figures[run.id]) for run in runs]


def _health_run(run: RunRow, figures: RunFigures) -> HealthRun:
    return HealthRun(
        id=run.id,
        trigger=run.trigger,
        scheduled_for=run.scheduled_for,
        created_at=run.created_at,
        status=figures.status,
        quarantined=figures.quarantined,
        operator_approved=figures.operator_approved,
        finish_reason=figures.finish_reason,
    )


def _scheduled_stmt(instruction_id: str) -> sa.Select[tuple[RunRow]]:
    """The instruction's ended scheduled runs, by fire time newest first."""
    fire = sa.func.coalesce(RunRow.scheduled_for, RunRow.created_at)
    return (
        sa.select(RunRow)
        .where(
            RunRow.instruction_id == instruction_id,
            RunRow.trigger.in_([str(t) for t in SCHEDULED_TRIGGERS]),
            RunRow.status != RunStatus.RUNNING,
        )
        .order_by(fire.desc(), RunRow.fire_attempt.desc(), RunRow.created_at.desc(), RunRow.id)
    )


def _scheduled_newest_first(
    session: Session, stmt: sa.Select[tuple[RunRow]], first_page: list[HealthRun]
) -> Iterator[HealthRun]:
    """``stmt``'s runs, ``first_page`` (its first :data:`_PAGE`) and then a page at a time,
    only as far as the caller reads (the streak stops at its first unclean run)."""
    page, offset = first_page, 0
    while True:
        yield from page
        if len(page) < _PAGE:
            return
        offset += _PAGE
        page = _health_runs(session, list(session.scalars(stmt.offset(offset).limit(_PAGE))))


def quarantined_per_day(
    session: Session,
    *,
    instruction_id: str | None = None,
    reason: str | None = None,
    review_status: ReviewStatus | None = None,
    since: datetime | None,
) -> list[tuple[str, str, int]]:
    """(UTC day, reason, count) of the quarantined items the filters select, grouped in
    the database: the same days on both backends whatever the session's time zone."""
    day = utc_day(session, QuarantinedItemRow.created_at)
    stmt = sa.select(day, QuarantinedItemRow.reason, sa.func.count(QuarantinedItemRow.id)).group_by(
        day, QuarantinedItemRow.reason
    )
    if since is not None:
        stmt = stmt.where(QuarantinedItemRow.created_at >= since)
    if review_status is None:
        stmt = stmt.where(QuarantinedItemRow.review_status.not_in(OUT_OF_THE_LANE))
    else:
        stmt = stmt.where(QuarantinedItemRow.review_status == review_status)
    if instruction_id is not None:
        stmt = stmt.where(QuarantinedItemRow.instruction_id == instruction_id)
    if reason is not None:
        stmt = stmt.where(QuarantinedItemRow.reason == reason)
    return [(str(d), str(why), count) for d, why, count in session.execute(stmt).tuples()]


def utc_day(session: Session, column: Any) -> sa.ColumnElement[str]:
    """The UTC day (2026-11-21) of a timestamp column, in SQL. SQLite keeps UTC
    timestamps as ISO text (``UTCDateTime``); PostgreSQL converts from timestamptz."""
    if session.get_bind().dialect.name == "postgresql":
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD")
    return sa.func.substr(column, 1, 10)


def _window_runs(
    session: Session, instruction_ids: Sequence[str], since: datetime
) -> dict[str, list[WindowRun]]:
    """The window's runs: status and trigger from the run's row (every review settles the
    row's status, :func:`~salvagelane.store.figures.settle`), the finish reason as
    :mod:`.figures` defines it: the report's, else the last attempt's."""
    rows = (
        session.execute(
            sa.select(
                RunRow.id,
                RunRow.trigger,
                RunRow.status,
                ReportRow.finish_reason,
                ReportRow.id,
                RunRow.instruction_id,
            )
            .outerjoin(ReportRow, ReportRow.run_id == RunRow.id)
            .where(RunRow.instruction_id.in_(instruction_ids), RunRow.created_at >= since)
        )
        .tuples()
        .all()
    )
    without = [row[0] for row in rows if row[4] is None]
    last: dict[str, str | None] = {}
    for start in range(0, len(without), 500):
        for run_id, finish in session.execute(
            sa.select(AttemptRow.run_id, AttemptRow.finish_reason)
            .where(AttemptRow.run_id.in_(without[start : start + 500]))
            .order_by(AttemptRow.run_id, AttemptRow.number)
        ).tuples():
            last[run_id] = finish
    windows: dict[str, list[WindowRun]] = {}
    for run_id, trigger, status, finish, report_id, instruction_id in rows:
        windows.setdefault(instruction_id, []).append(
            WindowRun(
                trigger=trigger,
                status=status,
                finish_reason=finish if report_id is not None else last.get(run_id),
            )
        )
    return windows


def _reasked_by_instruction(
    session: Session, instruction_ids: Sequence[str], since: datetime
) -> dict[str, dict[str, int]]:
    """By instruction: the rejected items a follow-up request asked again for in the
    runs since ``since``, by what became of them (``accepted``: mended;
    ``still_quarantined``), as each report's counts recorded them."""
    found: dict[str, dict[str, int]] = {}
    for instruction, counts in session.execute(
        sa.select(RunRow.instruction_id, ReportRow.counts)
        .join(ReportRow, ReportRow.run_id == RunRow.id)
        .where(RunRow.instruction_id.in_(instruction_ids), RunRow.created_at >= since)
    ).tuples():
        reask = counts.get("reask") if isinstance(counts, Mapping) else None
        if not isinstance(reask, Mapping):
            continue
        totals = found.setdefault(instruction, {"accepted": 0, "still_quarantined": 0})
        for key in totals:
            value = reask.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                totals[key] += value
    return found


def _quarantined_by_instruction(
    session: Session, instruction_ids: Sequence[str], since: datetime
) -> list[tuple[str, str, str, int]]:
    """(instruction, UTC day, reason, count) of the instructions' quarantined items since
    ``since`` (superseded ones left out), as :func:`quarantined_per_day` counts them."""
    day = utc_day(session, QuarantinedItemRow.created_at)
    stmt = (
        sa.select(
            QuarantinedItemRow.instruction_id,
            day,
            QuarantinedItemRow.reason,
            sa.func.count(QuarantinedItemRow.id),
        )
        .where(
            QuarantinedItemRow.instruction_id.in_(instruction_ids),
            QuarantinedItemRow.created_at >= since,
            QuarantinedItemRow.review_status.not_in(OUT_OF_THE_LANE),
        )
        .group_by(QuarantinedItemRow.instruction_id, day, QuarantinedItemRow.reason)
    )
    return [(str(i), str(d), str(r), n) for i, d, r, n in session.execute(stmt).tuples()]


COUNTED_SCHEDULED = "scheduled"
COUNTED_ALL = "all"
"""The window's runs, statuses, finish reasons and rates count: scheduled runs, or all."""


def gate_json(gate: Gate) -> dict[str, Any]:
    """``gate`` as JSON-ready data: what ``salvagelane health --gate N --json`` prints."""
    return {
        "instruction": gate.instruction_id,
        "needed": gate.needed,
        "passed": gate.passed,
        "scheduled_runs": len(gate.runs),
        "clean_runs": gate.clean_runs,
        "runs": [
            {
                "run_id": run.id,
                "trigger": str(run.trigger),
                "scheduled_for": None
                if run.scheduled_for is None
                else run.scheduled_for.isoformat(),
                "status": str(run.status),
                "quarantined": run.quarantined,
                "operator_approved": run.operator_approved,
                "clean": clean(run),
            }
            for run in gate.runs
        ],
    }


def _budget_json(budget: BudgetToday) -> dict[str, Any]:
    return {
        "day": budget.day.isoformat(),
        "timezone": budget.timezone,
        "tokens": budget.tokens,
        "tokens_per_day": budget.tokens_per_day,
        "cost": budget.cost,
        "cost_per_day": budget.cost_per_day,
        "currency": budget.currency,
        "reached": budget.reached,
    }


def health_json(health: InstructionHealth) -> dict[str, Any]:
    """``health`` as JSON-ready data: what ``salvagelane health --json`` prints and the
    page's health view shows."""

    def recent(run: RecentRun) -> dict[str, Any]:
        return {
            "run_id": run.id,
            "status": str(run.status),
            "trigger": str(run.trigger),
            "created_at": run.created_at.isoformat(),
            "clean": run.clean,
        }

    streak = health.streak
    return {
        "instruction": health.instruction_id,
        "since": health.since.isoformat(),
        "until": health.until.isoformat(),
        "days": health.days,
        "streak": {
            "clean_scheduled_runs": streak.count,
            "since": None if streak.since is None else streak.since.isoformat(),
            "broken_by": None if streak.broken_by is None else recent(streak.broken_by),
        },
        "recent": [recent(run) for run in health.recent],
        "counted": COUNTED_ALL if health.every_trigger else COUNTED_SCHEDULED,
        "runs": health.runs,
        "ended": health.ended,
        "statuses": dict(health.statuses),
        "partial_rate": health.partial_rate,
        "failed_rate": health.failed_rate,
        "finish_reasons": dict(health.finish_reasons),
        "missed_fires": health.missed_fires,
        "interrupted_fires": health.interrupted_fires,
        "quarantined_by_day": {day: dict(c) for day, c in health.quarantined_by_day.items()},
        "reasked": dict(health.reasked),
        "budget": None if health.budget is None else _budget_json(health.budget),
        "tokens_by_day": {
            day: {
                "prompt": usage.prompt,
                "completion": usage.completion,
                "total": usage.total,
                "attempts": usage.attempts,
                "unreported": usage.unreported,
            }
            for day, usage in health.tokens_by_day.items()
        },
        # Beside the tokens when a price table applies (its currency), else null.
        "cost_by_day": None
        if health.currency is None
        else {
            "currency": health.currency,
            "days": {day: round(amount, 6) for day, amount in health.cost_by_day.items()},
            "note": health.cost_note,
        },
        "queue": {
            "queued_runs": health.queued_runs,
            "oldest_queued_at": None
            if health.oldest_queued_at is None
            else health.oldest_queued_at.isoformat(),
            "workers": health.queue_workers,
            "stalled": health.queue_stalled,
        },
    }
