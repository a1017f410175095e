"""``salvagelane run`` and ``salvagelane runs``: run an instruction, look at stored runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvagelane.cli import render
from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import (
    Command,
    Group,
    count_range,
    database_option,
    instructions_option,
    json_option,
    parse_fire_time,
    seconds,
    use_current_option,
)
from salvagelane.cli.wiring import open_store, require_known_instruction, wired
from salvagelane.errors import SalvagelaneError
from salvagelane.safe_text import block, line
from salvagelane.vocabulary import RunStatus, Trigger

if TYPE_CHECKING:  # imported lazily at run time: `salvage` and `check` never need them
    from salvagelane.definitions import Instruction
    from salvagelane.errors import DuplicateFireError
    from salvagelane.store import RunSummary, Store


@click.command("run", cls=Command)
@click.argument("instruction")
@click.option(
    "--replay",
    type=click.Path(exists=True, path_type=Path),
    help="Answer from a recorded fixture (a directory with raw.txt and meta.json) "
    "instead of calling the provider.",
)
@click.option(
    "--scheduled-for",
    "scheduled_for",
    metavar="TIMESTAMP",
    callback=lambda ctx, param, value: None if value is None else parse_fire_time(value),
    help="Run as the fire of this time (ISO 8601 with a zone, e.g. 2026-11-21T05:20:00Z): "
    "the fire is claimed first, so it runs once however many schedulers fire it.",
)
@click.option(
    "--stale-after",
    default=60.0,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="With --scheduled-for: a run of the same fire without a heartbeat for this long "
    "belongs to a process that died; it is marked interrupted and the fire's one retry runs.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --scheduled-for: run as that fire even though it is not a fire time of the "
    "instruction's schedule (recorded on the run).",
)
@instructions_option
@database_option
@json_option
def run_command(
    instruction: str,
    replay: Path | None,
    scheduled_for: datetime | None,
    stale_after: float,
    force: bool,
    instructions_dir: Path,
    database: str | None,
    as_json: bool,
) -> None:
    """Run INSTRUCTION once (an id from the instructions directory, or a YAML file).

    Renders the prompt, calls the model (or replays a fixture), stores the raw output,
    salvages the report, retries as the definition allows, and stores the report and
    the quarantine. Exit 0 when the run ended ok or partial and every sink got its
    report, 1 when it failed or a sink did not get the report (the command says how to
    deliver it again).

    With --scheduled-for (a system cron or CI job firing runs itself), a fire that
    already has a run is not run again: the command says so and exits 0. A run of the
    fire left running by a process that died (no heartbeat for --stale-after seconds)
    is marked interrupted, and the fire's one retry runs. The time must be a fire time
    of the instruction's schedule (its cron in its time zone), unless --force.
    """
    from salvagelane.connectors import ReplayConnector
    from salvagelane.definitions.ids import instruction_from_argument
    from salvagelane.errors import DuplicateFireError
    from salvagelane.events.kinds import RunInterrupted
    from salvagelane.runtime.executor import Executor

    if force and scheduled_for is None:
        raise click.UsageError("--force goes with --scheduled-for: it forces a fire time")
    definition = instruction_from_argument(instruction, instructions_dir)
    forced = scheduled_for is not None and _off_schedule(definition, scheduled_for, force=force)
    if replay is not None:
        # Refused (exit 2) before the database is opened: no failed run is stored for it.
        ReplayConnector(replay).check()
        trigger = Trigger.REPLAY
    else:
        trigger = Trigger.MANUAL if scheduled_for is None else Trigger.SCHEDULE
    with open_store(database) as store, wired(replay=replay) as wiring:
        # The definition's notify: a cron-fired run tells whom it names when it breaks.
        events = wiring.notifying(store, definition)
        executor = Executor(
            store,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            events=events,
        )
        try:
            try:
                outcome = executor.run(
                    definition, trigger=trigger, scheduled_for=scheduled_for, forced=forced
                )
            except DuplicateFireError as exc:
                # Without serve nobody else notices a claim whose process died: this
                # command does, and runs the fire's one retry (the claim decides who).
                now = datetime.now(UTC)
                dead = store.reclaim_stale_fire(
                    exc.instruction_id,
                    exc.scheduled_for,
                    stale_before=now - timedelta(seconds=stale_after),
                    now=now,
                )
                if dead is None:
                    raise
                click.echo(
                    f"taking over: run {dead.id[:8]} of this fire stopped without finishing "
                    "(no heartbeat); marked interrupted, running the fire's one retry",
                    err=True,
                )
                events.publish(
                    RunInterrupted(
                        run_id=dead.id,
                        instruction_id=dead.instruction_id,
                        reason="no heartbeat",
                        scheduled_for=exc.scheduled_for,
                    )
                )
                outcome = executor.run(
                    definition,
                    trigger=trigger,
                    scheduled_for=exc.scheduled_for,
                    retry_of=dead.id,
                    forced=forced,
                )
        except DuplicateFireError as exc:
            existing = store.runs_for_fire(exc.instruction_id, exc.scheduled_for)
            _report_duplicate(exc, existing, as_json=as_json)
            return
        # What the run ended as is what the store recorded: printed from there, with the
        # figures every other view shows, it cannot tell another story.
        stored = store.get_run(outcome.run_id)
        location = store.url
    if as_json:
        document = render.run_json(stored, outcome.deliveries)
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        click.echo(render.run_outcome(stored, location, outcome.deliveries))
    if stored.status == RunStatus.FAILED:
        raise click.exceptions.Exit(EXIT_INVALID)
    undelivered = [delivery for delivery in outcome.deliveries if not delivery.ok]
    if undelivered:
        # Run by cron or CI, nothing else retries the delivery: the exit status says it
        # failed (docs/reference/cli.md, "Exit status"), and this line says how to deliver
        # it by hand.
        click.echo(
            f"salvagelane: error: run {stored.id} is stored, but {len(undelivered)} of "
            f"{len(outcome.deliveries)} sinks did not get its report; deliver it again with: "
            f"salvagelane runs redeliver {stored.id}",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_INVALID)


def _off_schedule(definition: Instruction, moment: datetime, *, force: bool) -> bool:
    """Whether ``moment`` is off the schedule of ``definition`` (then ``force`` must say
    so: click.UsageError naming the nearest fire times otherwise)."""
    from salvagelane.runtime.scheduler import nearest_fire_times

    before, after = nearest_fire_times(definition.schedule, moment)
    if before == moment:
        return False
    if force:
        return True
    schedule = definition.schedule
    nearest = " and ".join(
        f"{label} {_utc(fire)}"
        for label, fire in (("before", before), ("after", after))
        if fire is not None
    )
    raise click.UsageError(
        f"--scheduled-for {_utc(moment)}: expected a fire time of {definition.id}'s schedule "
        f"({schedule.cron!r} in {schedule.timezone}), got one it never fires at; the "
        f"nearest: {nearest or 'none'}; pass --force to run it as that fire anyway"
    )


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _report_duplicate(
    exc: DuplicateFireError, existing: Sequence[RunSummary], *, as_json: bool
) -> None:
    runs = [{"run_id": run.id, "status": run.status, "trigger": run.trigger} for run in existing]
    if as_json:
        document = {
            "duplicate": True,
            "instruction": exc.instruction_id,
            "scheduled_for": exc.scheduled_for.isoformat(),
            "runs": runs,
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    shown = ", ".join(f"{line(run['run_id'][:8])} ({line(run['status'])})" for run in runs) or "-"
    click.echo(
        f"already claimed: the {line(exc.instruction_id)} fire of {exc.scheduled_for.isoformat()} "
        f"has a run ({shown}); nothing to do"
    )


@click.group("runs", cls=Group)
def runs_group() -> None:
    """Stored runs: list them, show one, deliver one again, cancel one."""


@runs_group.command("list")
@click.option("--instruction", "instruction_id", metavar="ID", help="Only this instruction.")
@click.option("--limit", default=20, show_default=True, type=count_range(), help="At most N runs.")
@database_option
@json_option
def runs_list_command(
    instruction_id: str | None, limit: int, database: str | None, as_json: bool
) -> None:
    """List stored runs, newest first."""
    with open_store(database, read_only=True) as store:
        if instruction_id is not None:
            require_known_instruction(store, instruction_id)
        runs = store.list_runs(instruction_id=instruction_id, limit=limit)
    if as_json:
        click.echo(json.dumps([render.to_json(run) for run in runs], indent=2, ensure_ascii=False))
    else:
        click.echo(render.runs_table(runs, instruction_id=instruction_id))


@runs_group.command("show")
@click.argument("run_id")
@click.option(
    "--raw",
    "raw_attempt",
    type=count_range(),
    metavar="N",
    help="Print only the raw model output of attempt N, exactly as stored.",
)
@database_option
@json_option
def runs_show_command(
    run_id: str, raw_attempt: int | None, database: str | None, as_json: bool
) -> None:
    """Show one run (RUN_ID or a unique prefix of at least 8 characters): its attempts,
    report and quarantine."""
    with open_store(database, read_only=True) as store:
        detail = store.get_run(run_id)
    if raw_attempt is not None:
        text = render.raw_output(detail, raw_attempt)
        clipped = next(
            (render.clipped_note(a) for a in detail.attempts if a.number == raw_attempt), None
        )
        if clipped:
            click.echo(f"salvagelane: warning: attempt {raw_attempt}: {clipped}", err=True)
        if sys.stdout.isatty():
            # "Exactly as stored" is for a file or a tool; a terminal would act on what
            # the model put there (clipboard writes, a cleared screen, a new title).
            click.echo(
                f"salvagelane: note: attempt {raw_attempt}: control characters shown as "
                "escapes at a terminal; redirect stdout for the exact bytes",
                err=True,
            )
            shown = block(text)
            click.echo(shown, nl=not shown.endswith("\n"))
            return
        # The stored bytes themselves, whatever the terminal's encoding: a clipped output
        # may end inside a character, and a model's bytes need not be UTF-8 at all.
        from salvagelane.store import encode_raw

        sys.stdout.flush()
        sys.stdout.buffer.write(encode_raw(text))
        sys.stdout.buffer.flush()
        return
    if as_json:
        click.echo(json.dumps(render.to_json(detail), indent=2, ensure_ascii=False))
    else:
        click.echo(render.run_detail(detail))


@runs_group.command("cancel")
@click.argument("run_id")
@database_option
def runs_cancel_command(run_id: str, database: str | None) -> None:
    """Cancel a run dispatched through the task queue (RUN_ID or a unique prefix): a
    queued run ends cancelled at once; a running one is asked to stop: a model call in
    flight is cut within about a second, and the run ends cancelled with what arrived."""
    from salvagelane import environment
    from salvagelane.runtime.dispatch import cancel_run

    url = environment.database_url(database)
    with open_store(database) as store:
        detail = store.get_run(run_id)
        run = cancel_run(url, store, detail.id, now=datetime.now(UTC))
    if run.status == RunStatus.CANCELLED:
        click.echo(f"cancelled: run {run.id} ({line(run.instruction_id)}) was queued")
    else:
        click.echo(
            f"asked to stop: run {run.id} ({line(run.instruction_id)}) is {run.status}; its "
            "worker cuts its model call in flight and ends it cancelled (`runs show` tells when)"
        )


@runs_group.command("redeliver")
@click.argument("run_id", required=False)
@click.option(
    "--pending",
    "pending",
    is_flag=True,
    help="Deliver every undelivered report (pending or failed deliveries of all runs), "
    "due or not, given up or not.",
)
@use_current_option
@instructions_option
@database_option
def runs_redeliver_command(
    run_id: str | None,
    pending: bool,
    use_current: bool,
    instructions_dir: Path,
    database: str | None,
) -> None:
    """Deliver a stored run's report to its instruction's sinks again (RUN_ID), or deliver
    every report a sink has not received yet (--pending).

    The stored report is read as it is; nothing is recomputed. RUN_ID's report goes to
    the sinks of the version of the definition the run was made with (stored with the
    run); a sink is where a report goes, so it is taken only when the definition in
    --instructions names the same sinks (else exit 2 saying what differs). With
    --use-current, to the sinks of the current definition (the command says what differs).
    --pending delivers each undelivered delivery to the sink it was written for, matched
    in --instructions. Prints one line per delivery. Exit 0 when every delivery was
    delivered, 1 when any failed (or could not be tried), 2 on a usage error.
    """
    from salvagelane.cli.wiring import DefinitionSinks
    from salvagelane.logs import bound
    from salvagelane.runtime.delivery import deliver_report, redeliver_open

    if (run_id is None) == (not pending):
        raise click.UsageError("expected a RUN_ID or --pending (one of them)")
    if pending and use_current:
        raise click.UsageError(
            "--use-current applies to RUN_ID: --pending delivers each delivery to the sink "
            "its run wrote it for"
        )
    with open_store(database) as store, wired() as wiring:
        if pending:
            definitions = DefinitionSinks(
                instructions_dir, wiring.sinks_for, wiring.notifications_for
            )
            tried = delivered = 0
            for result in redeliver_open(store, sinks_for_run=definitions.sinks_for_run):
                click.echo(render.redelivery_line(result))
                tried += 1
                delivered += result.ok
            click.echo(render.redelivery_summary(tried=tried, delivered=delivered))
            failed = delivered < tried
        else:
            assert run_id is not None
            detail = store.get_run(run_id)
            definition = _sinks_definition(
                store, detail.id, detail.instruction_id, instructions_dir, use_current=use_current
            )
            with bound(run_id=detail.id, instruction=definition.id):
                deliveries = deliver_report(store, detail.id, wiring.sinks_for(definition))
            for delivery in deliveries:
                click.echo(render.delivery_line(delivery))
            failed = not all(delivery.ok for delivery in deliveries)
    if failed:
        raise click.exceptions.Exit(EXIT_INVALID)


def _sinks_definition(
    store: Store, run_id: str, instruction_id: str, directory: Path, *, use_current: bool
) -> Instruction:
    """The definition whose sinks ``runs redeliver RUN_ID`` delivers to: the operator's
    own (only it may say where a report goes), once it is known to name the sinks of
    the version the run was made with, or whatever it names with ``use_current``."""
    from salvagelane.review.run_definitions import choose_definition

    where = f"run {run_id}: instruction"
    chosen = choose_definition(
        store, run_id, instruction_id, directory, use_current=use_current, where=where
    )
    if chosen.note is not None:
        click.echo(f"note: {chosen.note}", err=True)
    written = list(chosen.instruction.definition.get("sinks", ()))
    if not written:
        whose = "its current definition" if use_current else "the version the run was made with"
        raise click.UsageError(f"instruction {chosen.instruction.id!r} defines no sinks ({whose})")
    if use_current:
        return chosen.instruction
    try:
        own = chosen.trusted()
    except SalvagelaneError as exc:
        raise click.UsageError(
            f"run {run_id[:8]}: its definition (stored {_short(chosen.version)}) delivers to "
            f"{_sinks_text(written)}; where a report goes is taken only from your "
            f"definitions, and there is none to compare ({exc}): give --instructions DIR "
            "holding it, or --use-current"
        ) from exc
    current = list(own.definition.get("sinks", ()))
    if current != written:
        raise click.UsageError(
            f"run {run_id[:8]}: the sinks of {own.source} differ from those of the version "
            f"the run was made with (stored {_short(chosen.version)}): the run's "
            f"{_sinks_text(written)}, now {_sinks_text(current)}; pass --use-current to "
            "deliver to the current ones"
        )
    return own


def _short(version: str | None) -> str:
    return (version or "-")[:12]


def _sinks_text(sinks: list[object]) -> str:
    """Sinks as written in a definition, for a message: kind and where (never a secret:
    a webhook URL without userinfo and query string, or its variable's name)."""
    from salvagelane.logs import redact_url

    if not sinks:
        return "no sinks"
    shown = []
    for sink in sinks:
        entry = sink if isinstance(sink, dict) else {}
        kind = str(entry.get("kind"))
        if "url_env" in entry:
            where = f"${entry['url_env']}"
        elif "url" in entry:
            where = redact_url(str(entry["url"]))
        else:
            where = str(entry.get("path") or entry.get("callable"))
        shown.append(f"{kind} {where}")
    return line(", ".join(shown))
