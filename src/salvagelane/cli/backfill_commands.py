"""``salvagelane backfill``: run the past fires of a schedule that have no outcome yet.

Exit codes: 0 every fire in the range has its outcome (ok or partial, or left alone);
1 a fire's run failed; 2 bad options, an unknown instruction or a missing database;
130 stopped by Ctrl-C (every fire is either done or untouched).
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, time, timedelta, tzinfo
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from salvagelane.cli.app import EXIT_INTERRUPTED, EXIT_INVALID
from salvagelane.cli.options import Command, database_option, instructions_option, seconds
from salvagelane.cli.wiring import open_store, wired
from salvagelane.safe_text import line
from salvagelane.vocabulary import RunStatus

if TYPE_CHECKING:
    from salvagelane.runtime.backfill import FirePlan, FireResult, Summary

_REPROCESSABLE = ("failed", "partial", "missed")


def _moment(text: str, *, end: bool) -> tuple[datetime, bool]:
    """``text`` as a datetime and whether it named a zone; a date alone is the start of
    that day (``--from``) or its end (``--to``)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"expected an ISO 8601 time such as 2026-11-21T05:20:00Z or a date such as "
            f"2026-11-21, got {text!r}",
            param_hint="--to" if end else "--from",
        ) from exc
    if end and len(text.strip()) == 10:  # a date: the whole of that day
        moment = datetime.combine(moment.date(), time.max, tzinfo=moment.tzinfo)
    return moment, moment.tzinfo is not None and moment.utcoffset() is not None


def _reprocess(text: str | None) -> frozenset[RunStatus]:
    if not text:
        return frozenset()
    words = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in words if word not in _REPROCESSABLE]
    if unknown:
        raise click.BadParameter(
            f"expected some of {', '.join(_REPROCESSABLE)} (comma-separated), got "
            f"{', '.join(map(repr, unknown))}",
            param_hint="--reprocess",
        )
    return frozenset(RunStatus(word) for word in words)


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


@click.command("backfill", cls=Command)
@click.argument("instruction")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="TIME",
    help="The first moment of the range (ISO 8601; without a zone: in the schedule's time "
    "zone; a date alone: its midnight).",
)
@click.option(
    "--to",
    "end",
    required=True,
    metavar="TIME",
    help="The last moment of the range, included (ISO 8601; without a zone: in the "
    "schedule's time zone; a date alone: the whole of that day).",
)
@click.option("--dry-run", is_flag=True, help="List what it would do; change nothing.")
@click.option(
    "--reprocess",
    metavar="STATUSES",
    help="Run again the fires whose newest run ended with one of these statuses "
    "(comma-separated: failed, partial, missed); by default a fire with an outcome is left "
    "alone.",
)
@click.option(
    "--stale-after",
    default=60.0,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="A run of a fire without a heartbeat for this long belongs to a process that "
    "died (a backfill killed mid-run): it is marked interrupted and the fire runs again.",
)
@instructions_option
@database_option
def backfill_command(
    instruction: str,
    start: str,
    end: str,
    dry_run: bool,
    reprocess: str | None,
    stale_after: float,
    instructions_dir: Path,
    database: str | None,
) -> None:
    """Run every fire of INSTRUCTION's schedule from --from to --to that has no outcome
    yet, oldest first, one at a time (to make up a gap: an outage, a node down).

    Each fire is claimed as `run --scheduled-for` claims it, so a fire runs once however
    many processes backfill or serve it; its run has trigger `backfill` (not a scheduled
    run: the clean streak and `health --gate` leave it out). A fire that has a run is
    left alone, unless its newest run is interrupted (or running without a heartbeat
    for --stale-after seconds: its process died), which is retried, or ended with a
    status --reprocess names. Each run is bounded by the instruction's deadline.

    One progress line per fire on stderr, then a summary. Running it again changes
    nothing. Ctrl-C stops before the next fire is claimed (the run in flight finishes;
    a second Ctrl-C stops it as a kill would: the next backfill retries its fire once
    its heartbeat is stale) and exits 130.
    """
    from zoneinfo import ZoneInfo

    from salvagelane.definitions.ids import instruction_from_argument
    from salvagelane.runtime.backfill import Backfill, backfill_fire_times
    from salvagelane.runtime.executor import Executor

    wanted = _reprocess(reprocess)
    definition = instruction_from_argument(instruction, instructions_dir)
    zone: tzinfo = ZoneInfo(definition.schedule.timezone)
    first, first_zoned = _moment(start, end=False)
    last, last_zoned = _moment(end, end=True)
    first = first if first_zoned else first.replace(tzinfo=zone)
    last = last if last_zoned else last.replace(tzinfo=zone)
    try:
        first, last = first.astimezone(UTC), last.astimezone(UTC)
        earliest = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
        if first < earliest or last.year >= 9999:
            raise OverflowError
    except OverflowError as exc:
        raise click.UsageError(
            f"--from {start} --to {end}: expected times between 0001-01-02 and 9998-12-31 in UTC"
        ) from exc
    if last < first:
        raise click.UsageError(f"--to {end} is before --from {start}")
    fires = backfill_fire_times(definition, first, last)
    name = f"backfill {line(definition.id)}"
    span = f"{first.isoformat()} to {last.isoformat()}"
    with open_store(database, read_only=dry_run) as store, wired() as wiring:
        events = wiring.notifying(store, definition)
        executor = Executor(
            store,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            events=events,
        )
        backfill = Backfill(
            store, executor, events=events, reprocess=wanted, stale_after_seconds=stale_after
        )
        click.echo(
            f"{name}: {len(fires)} fire(s) of {definition.schedule.cron!r} "
            f"({definition.schedule.timezone}) from {span}",
            err=True,
        )
        if dry_run:
            plans = backfill.plan(definition, fires)
            for number, plan in enumerate(plans, 1):
                click.echo(
                    f"{name}: {number}/{len(plans)} {_utc(plan.scheduled_for)} {_would(plan)}"
                )
            runs = sum(plan.action != "skip" for plan in plans)
            click.echo(
                f"{name}: dry run: would run {runs}, leave {len(plans) - runs} alone; "
                "nothing changed"
            )
            return
        stop: list[str] = []

        def on_interrupt(signum: int, frame: FrameType | None) -> None:
            if stop:
                raise KeyboardInterrupt  # a second Ctrl-C: the run in flight too
            stop.append(signal.Signals(signum).name)
            click.echo(
                f"{name}: stopping after the fire in flight (Ctrl-C again to interrupt it)",
                err=True,
            )

        previous = signal.signal(signal.SIGINT, on_interrupt)
        try:
            summary = backfill.run(
                definition,
                fires,
                on_fire=lambda result: click.echo(f"{name}: {_progress(result)}", err=True),
                should_stop=lambda: bool(stop),
            )
        finally:
            signal.signal(signal.SIGINT, previous)
    click.echo(f"{name}: {_summary(summary)}")
    if summary.stopped:
        raise click.exceptions.Exit(EXIT_INTERRUPTED)
    if summary.failed:
        raise click.exceptions.Exit(EXIT_INVALID)


def _would(plan: FirePlan) -> str:
    if plan.action == "run":
        return "would run"
    if plan.action == "retry":
        return f"would run ({line(plan.why)})"
    return line(plan.why)


def _progress(result: FireResult) -> str:
    where = f"{result.number}/{result.total} {_utc(result.plan.scheduled_for)}"
    run = result.run
    if run is None:
        return f"{where} {line(result.plan.why)}"
    text = f"{where} {line(run.status)} (kept {run.kept_count}"
    if run.quarantined_count:
        text += f", quarantined {run.quarantined_count}"
    text += f"; run {run.id[:8]}"
    if result.plan.why:
        text += f"; {line(result.plan.why)}"
    return text + ")"


def _summary(summary: Summary) -> str:
    text = (
        f"{summary.fires} fire(s): ran {summary.ran}, skipped-existing {summary.skipped}, "
        f"failed {summary.failed}"
    )
    if summary.stopped:
        text += f"; stopped by Ctrl-C, {summary.remaining} fire(s) left untouched"
    return text
