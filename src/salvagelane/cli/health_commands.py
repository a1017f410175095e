"""``salvagelane health``: is each instruction's scheduled job healthy?

Reads only (the database is opened read-only). The figures are the store's
(:mod:`salvagelane.store.health`), the same the review page's health view shows.
Exit codes: 0 done (also when nothing is stored); 2 an unknown instruction, a missing
database or bad options. With ``--gate N``: 0 when the gate passes, 1 when it does not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import (
    Command,
    database_option,
    json_option,
    queue_stall_option,
)
from salvagelane.cli.render import when
from salvagelane.cli.wiring import open_store, require_known_instruction
from salvagelane.runtime.settings import DEFAULT_QUEUE_STALL_SECONDS
from salvagelane.safe_text import line

if TYPE_CHECKING:  # the store is imported inside the command: `--help` must stay cheap
    from salvagelane.store import InstructionHealth
    from salvagelane.store.health import BudgetToday, Gate, HealthRun

_STRIP = {"ok": "o", "partial": "p", "failed": "F", "interrupted": "I", "missed": "M"}
"""One letter per status in the strip of recent runs (``running`` is ``.``)."""


@click.command("health", cls=Command)
@click.option("--instruction", "instruction_id", metavar="ID", help="Only this instruction.")
@click.option(
    "--days",
    default=30,
    show_default=True,
    type=click.IntRange(min=1, max=3660),
    help="Rates, reasons, fires and tokens over the last N days (UTC).",
)
@click.option(
    "--all",
    "every_trigger",
    is_flag=True,
    help="Count runs of every trigger (manual, replay, ...) in the window's statuses, "
    "finish reasons and rates; by default only scheduled runs.",
)
@click.option(
    "--gate",
    "gate",
    type=click.IntRange(min=1),
    metavar="N",
    help="Exit 0 when the last N scheduled runs (of each instruction, or of --instruction) "
    "were clean, 1 otherwise, printing why; for a CI step or a deployment that waits for "
    "N clean runs.",
)
@queue_stall_option(
    DEFAULT_QUEUE_STALL_SECONDS,
    "Queued runs waiting this long with no worker consuming the task queue: stalled.",
)
@database_option
@json_option
def health_command(
    instruction_id: str | None,
    days: int,
    every_trigger: bool,
    gate: int | None,
    queue_stall_seconds: float,
    database: str | None,
    as_json: bool,
) -> None:
    """Show each instruction's run health: clean scheduled runs in a row, recent statuses,
    partial and failed rates, quarantine reasons per day, finish reasons, missed and
    interrupted fires, tokens per day, and their cost when a price table applies (the
    one kept with the instruction's newest stored run).

    The window's statuses, finish reasons and rates count scheduled runs only (a run by
    hand or a replay is not the job failing); --all counts every trigger. Quarantine
    reasons and tokens per day count every run.

    A clean run is a scheduled run that ended ok with nothing quarantined (nor approved by
    an operator); missed and interrupted fires break the streak.

    With a daily budget in that definition, a budget line says what today (in the
    schedule's time zone) has spent of each limit, and whether one is reached.

    Runs waiting in the task queue (`serve --dispatch queue`) are shown with the oldest's
    wait; the queue is stalled when that wait passes --queue-stall-after and no worker
    consumes it.

    With --gate N: only the gate. It passes when the newest N ended scheduled runs (by
    fire time; trigger schedule or catch_up, so not manual, replay or backfill runs) were
    all clean; fewer than N scheduled runs fail it. One line per instruction says why;
    without --instruction every instruction with stored runs is gated, and the command
    fails if any gate does.
    """
    if gate is not None:
        _gate(instruction_id, gate, database, as_json=as_json)
        return
    now = datetime.now(UTC)
    with open_store(database, read_only=True) as store:
        if instruction_id is not None:
            require_known_instruction(store, instruction_id)
            ids = [instruction_id]
        else:
            ids = store.instruction_ids()
        figures = store.health.healths(
            ids,
            now=now,
            days=days,
            queue_stall_seconds=queue_stall_seconds,
            every_trigger=every_trigger,
        )
        from salvagelane.runtime.budget import priced_healths

        figures = priced_healths(store, figures, now=now)
        url = store.url
    if as_json:
        from salvagelane.store.health import health_json

        click.echo(json.dumps([health_json(h) for h in figures], indent=2, ensure_ascii=False))
        return
    if not figures:
        click.echo(f"no runs stored in {line(url)}")
        return
    click.echo("\n\n".join(health_text(h) for h in figures))


def _gate(instruction_id: str | None, needed: int, database: str | None, *, as_json: bool) -> None:
    with open_store(database, read_only=True) as store:
        if instruction_id is not None:
            require_known_instruction(store, instruction_id)
            ids = [instruction_id]
        else:
            ids = store.instruction_ids()
        gates = [store.health.gate(i, needed) for i in ids]
        url = store.url
    failed = [g.instruction_id for g in gates if not g.passed]
    if as_json:
        from salvagelane.store.health import gate_json

        document = {
            "needed": needed,
            "passed": bool(gates) and not failed,
            "instructions": [gate_json(g) for g in gates],
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    elif not gates:
        click.echo(f"gate: no runs stored in {line(url)}, {needed} clean scheduled runs needed")
    else:
        for g in gates:
            click.echo(gate_text(g))
        if len(gates) > 1 and failed:
            click.echo(
                f"gate: {len(failed)} of {len(gates)} instructions failed: "
                + ", ".join(line(i) for i in failed)
            )
    if failed or not gates:
        raise click.exceptions.Exit(EXIT_INVALID)


def _fire(run: HealthRun) -> str:
    moment = run.scheduled_for or run.created_at
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _why_unclean(run: HealthRun) -> str:
    """What kept ``run`` (a scheduled run) from being clean."""
    if run.status != "ok":
        return f"was {line(run.status)}"
    if run.quarantined:
        return f"was ok with {run.quarantined} item(s) quarantined"
    return f"was ok with {run.operator_approved} item(s) approved by an operator"


def gate_text(gate: Gate) -> str:
    """One or two lines: whether ``gate`` passed, and why."""
    name = f"gate: {line(gate.instruction_id)}:"
    runs, needed = len(gate.runs), gate.needed
    unclean = gate.unclean
    if gate.passed:
        newest = gate.runs[0]
        return (
            f"{name} the last {needed} scheduled run{'s were' if needed != 1 else ' was'} "
            f"clean (newest: run {line(newest.id[:8])} of {_fire(newest)} UTC)"
        )
    if not unclean:
        return f"{name} only {runs} scheduled run{'' if runs == 1 else 's'}, {needed} needed"
    short = "" if runs >= needed else f" ({needed} needed)"
    newest = unclean[0]
    text = (
        f"{name} {gate.clean_runs} of the last {runs} scheduled run{'' if runs == 1 else 's'} "
        f"{'was' if gate.clean_runs == 1 else 'were'} clean{short}; "
        f"run {line(newest.id[:8])} ({_fire(newest)} UTC) {_why_unclean(newest)}"
    )
    if len(unclean) > 1:
        others = ", ".join(f"{line(run.id[:8])} {line(run.status)}" for run in unclean[1:])
        text += f"\n{name} also not clean: {others}"
    return text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{line(key)} {n}" for key, n in counts.items()) or "-"


def _queue(health: InstructionHealth) -> str:
    text = f"{health.queued_runs} queued"
    if health.oldest_queued_at is not None:
        waited = max(0.0, (health.until - health.oldest_queued_at).total_seconds())
        text += f", the oldest since {when(health.oldest_queued_at)} ({waited:.0f} s)"
    if health.queue_workers is not None:
        text += f"; {health.queue_workers} worker(s) consuming"
    if health.queue_stalled:
        text += "; STALLED: no worker consumes the task queue (start `salvagelane worker`)"
    return text


def health_text(health: InstructionHealth) -> str:
    """One instruction's figures for the terminal."""
    streak = health.streak
    lines = [f"instruction  {line(health.instruction_id)}"]
    clean = f"{streak.count} clean scheduled run" + ("" if streak.count == 1 else "s")
    if streak.since is not None:
        clean += f" in a row, since {when(streak.since)}"
    if streak.broken_by is not None:
        broken = streak.broken_by
        clean += (
            f" (before that: run {line(broken.id[:8])} {line(broken.status)} "
            f"at {when(broken.created_at)})"
        )
    lines.append(f"streak       {clean}")
    strip = "".join(_STRIP.get(run.status, ".") for run in reversed(health.recent))
    lines.append(
        f"recent       {strip or '-'}  (every trigger, oldest to newest; o ok, p partial, "
        "F failed, I interrupted, M missed)"
    )
    counted = "runs" if health.every_trigger else "scheduled runs (--all: every trigger)"
    lines.append(
        f"window       {health.days} days since {when(health.since)} UTC: "
        f"{health.runs} {counted}, {health.ended} ended"
    )
    lines.append(f"statuses     {_counts(health.statuses)}")
    lines.append(
        f"rates        partial {_percent(health.partial_rate)}, "
        f"failed {_percent(health.failed_rate)}"
    )
    lines.append(
        f"fires        missed {health.missed_fires}, interrupted {health.interrupted_fires}"
    )
    lines.append(f"finish       {_counts(health.finish_reasons)}")
    if health.queued_runs or health.queue_stalled:
        lines.append(f"queue        {_queue(health)}")
    lines.append("quarantined per day (every trigger: the review load)")
    for day, reasons in health.quarantined_by_day.items():
        lines.append(f"  {day}  {_counts(reasons)}")
    if not health.quarantined_by_day:
        lines.append("  none")
    if health.reasked:
        mended = health.reasked.get("accepted", 0)
        still = health.reasked.get("still_quarantined", 0)
        lines.append(
            f"re-asked     {mended + still} item(s) asked again by a follow-up: {mended} mended, "
            f"{still} still quarantined"
        )
    if health.budget is not None:
        lines.append(f"budget       {_budget(health.budget)}")
    priced = "" if health.currency is None else f", cost in {line(health.currency)}"
    lines.append(f"tokens per day, every trigger (prompt + completion = total{priced})")
    for day, usage in health.tokens_by_day.items():
        unreported = f", {usage.unreported} unreported" if usage.unreported else ""
        cost = health.cost_by_day.get(day)
        costed = "" if cost is None else f"  {cost:.4f} {line(health.currency or '')}"
        lines.append(
            f"  {day}  {usage.prompt} + {usage.completion} = {usage.total} "
            f"({usage.attempts} calls{unreported}){costed}"
        )
    if health.cost_note:
        lines.append(f"  cost: {line(health.cost_note)}")
    if not health.tokens_by_day:
        lines.append("  none")
    return "\n".join(lines)


def _budget(budget: BudgetToday) -> str:
    """``today (2026-11-28, Europe/Paris): 10,432 of 10,000 tokens; reached: ...``."""
    from salvagelane.runtime.budget import today_amounts  # loaded already: see the command

    text = f"today ({budget.day.isoformat()}, {line(budget.timezone)}): "
    text += line(today_amounts(budget))
    if budget.reached is not None:
        text += f"; {budget.reached} limit reached: its runs call no model until the day ends"
    return text
