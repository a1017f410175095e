"""``salvagelane run`` and ``salvagelane runs``: run an instruction, look at stored runs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvagelane.cli import render
from salvagelane.cli.app import EXIT_INVALID, cli
from salvagelane.errors import DefinitionError, NotFoundError

if TYPE_CHECKING:  # imported lazily at run time: `salvage` and `check` never need them
    from salvagelane.definitions import Instruction
    from salvagelane.errors import DuplicateFireError
    from salvagelane.store import RunSummary, Store

DATABASE_HELP = (
    "Database URL (sqlite:///file.db or postgresql://...). "
    "Default: $SALVAGELANE_DATABASE_URL, else sqlite:///salvagelane.db."
)
INSTRUCTIONS_HELP = "Directory of instruction definitions."

database_option = click.option("--database", "database", metavar="URL", help=DATABASE_HELP)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
instructions_option = click.option(
    "--instructions",
    "instructions_dir",
    default="instructions",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help=INSTRUCTIONS_HELP,
)


@contextmanager
def open_store(database: str | None) -> Iterator[Store]:
    """The store at ``database`` (or the environment's default), upgraded if new.

    A database that keeps nothing (in-memory SQLite) is refused by the store's URL check
    (DatabaseUrlError, exit 2), for every command, before anything runs."""
    from salvagelane import environment
    from salvagelane.store import Store

    with Store.open(environment.database_url(database)) as store:
        yield store


def find_instruction(reference: str, directory: Path) -> Instruction:
    """The definition named by ``reference``: a path to a YAML file, or an id looked up in
    ``directory`` (``<id>.yaml`` first, then every definition's ``id``)."""
    from salvagelane.definitions import definition_files, load_instruction

    as_path = Path(reference)
    if as_path.suffix in {".yaml", ".yml"} and as_path.is_file():
        return load_instruction(as_path)
    for suffix in (".yaml", ".yml"):
        candidate = directory / f"{reference}{suffix}"
        if candidate.is_file():
            instruction = load_instruction(candidate)
            if instruction.id == reference:
                return instruction
    known: list[str] = []
    broken = 0
    for path in definition_files(directory):
        try:
            instruction = load_instruction(path)
        except DefinitionError:
            broken += 1
            continue
        if instruction.id == reference:
            return instruction
        known.append(instruction.id)
    hint = f" ({broken} definition(s) could not be loaded: run salvagelane check)" if broken else ""
    raise NotFoundError(
        f"no instruction {reference!r} in {directory}/: expected one of "
        f"{', '.join(sorted(known)) or 'none'}{hint}"
    )


@cli.command("run")
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
@instructions_option
@database_option
@json_option
def run_command(
    instruction: str,
    replay: Path | None,
    scheduled_for: datetime | None,
    instructions_dir: Path,
    database: str | None,
    as_json: bool,
) -> None:
    """Run INSTRUCTION once (an id from the instructions directory, or a YAML file).

    Renders the prompt, calls the model (or replays a fixture), stores the raw output,
    salvages the report, retries as the definition allows, and stores the report and
    the quarantine. Exit 0 when the run ended ok or partial, 1 when it failed.

    With --scheduled-for (a system cron or CI job firing runs itself), a fire that
    already has a run is not run again: the command says so and exits 0.
    """
    import httpx

    from salvagelane.connectors import build_connector
    from salvagelane.errors import DuplicateFireError
    from salvagelane.executor import Executor, Trigger
    from salvagelane.sinks import build_sinks

    definition = find_instruction(instruction, instructions_dir)
    if replay is not None:
        trigger = Trigger.REPLAY
    else:
        trigger = Trigger.MANUAL if scheduled_for is None else Trigger.SCHEDULE
    with open_store(database) as store, httpx.Client() as client:
        executor = Executor(
            store,
            connector_for=lambda spec: build_connector(
                spec.connector,
                client=client,
                deadline_seconds=spec.schedule.deadline_seconds,
                replay=replay,
            ),
            sinks_for=lambda spec: build_sinks(spec.sinks, client=client),
        )
        try:
            outcome = executor.run(definition, trigger=trigger, scheduled_for=scheduled_for)
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
    if stored.status == "failed":
        raise click.exceptions.Exit(EXIT_INVALID)


def parse_fire_time(text: str) -> datetime:
    """An ISO 8601 timestamp with a zone, as UTC; click.BadParameter otherwise."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"expected an ISO 8601 timestamp such as 2026-11-21T05:20:00Z, got {text!r}"
        ) from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise click.BadParameter(
            f"expected a timestamp with a zone (Z or +01:00), got {text!r}: a fire time "
            "without one would mean different fires on different hosts"
        )
    return moment.astimezone(UTC)


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
    shown = ", ".join(f"{run['run_id'][:8]} ({run['status']})" for run in runs) or "-"
    click.echo(
        f"already claimed: the {exc.instruction_id} fire of {exc.scheduled_for.isoformat()} "
        f"has a run ({shown}); nothing to do"
    )


@cli.group("runs")
def runs_group() -> None:
    """Stored runs: list them, show one, deliver one again."""


@runs_group.command("list")
@click.option("--instruction", "instruction_id", metavar="ID", help="Only this instruction.")
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(min=1), help="At most N runs."
)
@database_option
@json_option
def runs_list_command(
    instruction_id: str | None, limit: int, database: str | None, as_json: bool
) -> None:
    """List stored runs, newest first."""
    with open_store(database) as store:
        runs = store.list_runs(instruction_id=instruction_id, limit=limit)
    if as_json:
        click.echo(json.dumps([render.to_json(run) for run in runs], indent=2, ensure_ascii=False))
    else:
        click.echo(render.runs_table(runs))


@runs_group.command("show")
@click.argument("run_id")
@click.option(
    "--raw",
    "raw_attempt",
    type=click.IntRange(min=1),
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
    with open_store(database) as store:
        detail = store.get_run(run_id)
    if raw_attempt is not None:
        click.echo(render.raw_output(detail, raw_attempt), nl=False)
        return
    if as_json:
        click.echo(json.dumps(render.to_json(detail), indent=2, ensure_ascii=False))
    else:
        click.echo(render.run_detail(detail))


@runs_group.command("redeliver")
@click.argument("run_id")
@instructions_option
@database_option
def runs_redeliver_command(run_id: str, instructions_dir: Path, database: str | None) -> None:
    """Deliver a stored run's report to its instruction's sinks again (after a sink failed).

    The stored report is read as it is; nothing is recomputed. Exit 1 if a sink fails again.
    """
    import httpx

    from salvagelane.executor import deliver_report
    from salvagelane.logs import bound
    from salvagelane.sinks import build_sinks

    with open_store(database) as store, httpx.Client() as client:
        detail = store.get_run(run_id)
        definition = find_instruction(detail.instruction_id, instructions_dir)
        if not definition.sinks:
            raise click.UsageError(f"instruction {definition.id!r} defines no sinks")
        with bound(run_id=detail.id, instruction=definition.id):
            deliveries = deliver_report(
                store, detail.id, build_sinks(definition.sinks, client=client)
            )
    for delivery in deliveries:
        state = "delivered" if delivery.ok else f"failed: {delivery.error}"
        click.echo(f"{delivery.kind:<10} {delivery.target}  {state}")
    if not all(delivery.ok for delivery in deliveries):
        raise click.exceptions.Exit(EXIT_INVALID)
