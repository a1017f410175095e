"""``salvagelane worker``: execute the runs a ``serve --dispatch queue`` leader enqueues."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from salvagelane.cli.options import database_option, instructions_option
from salvagelane.cli.wiring import loadable_definitions, recover_spooled, wired
from salvagelane.safe_text import block
from salvagelane.serve_settings import DEFAULT_SETTINGS as SERVE_DEFAULTS


@click.command("worker")
@instructions_option
@database_option
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs this worker executes at once.",
)
@click.option(
    "--queues",
    "queues",
    default="salvagelane",
    show_default=True,
    metavar="NAME[,NAME...]",
    help="The task queues to take runs from (comma-separated).",
)
@click.option(
    "--shutdown-timeout",
    default=SERVE_DEFAULTS.shutdown_timeout_seconds,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, how long runs in flight may take to finish before they are "
    "marked interrupted.",
)
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    default=SERVE_DEFAULTS.heartbeat_seconds,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="How often a running run records that it is alive (keep it under half of the "
    "leader's --stale-after).",
)
def worker_command(
    instructions_dir: Path,
    database: str | None,
    concurrency: int,
    queues: str,
    shutdown_timeout: float,
    heartbeat_seconds: float,
) -> None:
    """Execute queued runs (PostgreSQL; `serve --dispatch queue` enqueues them).

    Start any number, on any machine that reaches the database, each with the same
    instruction definitions as the leader. A worker takes each run by its id, so a run
    executes at most once. SIGTERM or Ctrl-C stops taking runs and lets those in flight
    finish for up to the shutdown timeout; those still going are marked interrupted, and
    the leader retries a scheduled one once.
    """
    from salvagelane import environment
    from salvagelane.dispatch import QueueWorker, WorkerSettings, require_postgres
    from salvagelane.store import Store

    url = require_postgres(environment.database_url(database), "salvagelane worker")
    names = tuple(name.strip() for name in queues.split(",") if name.strip())
    settings = WorkerSettings(
        instructions_dir=instructions_dir,
        concurrency=concurrency,
        queues=names,
        shutdown_timeout_seconds=shutdown_timeout,
        heartbeat_seconds=heartbeat_seconds,
    )
    if problem := settings.problem():
        raise click.UsageError(f"worker: {problem}")
    loadable_definitions(instructions_dir)

    def announce(text: str) -> None:
        click.echo(block(text))
        sys.stdout.flush()

    def abandon(runs: tuple[str, ...]) -> None:
        announce(f"stopped; {len(runs)} run(s) marked interrupted: {', '.join(runs)}")
        # Their threads are inside calls that cannot be cancelled; the runs are
        # recorded. Leave now, before anything waits for those threads or closes the
        # HTTP client under them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    with Store.open(url) as store, wired() as wiring:
        recover_spooled(store, url)
        worker = QueueWorker(
            settings,
            url=url,
            store=store,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            announce=announce,
            abandon=abandon,
        )
        worker.load()
        announce(
            f"salvagelane worker: {store.url}, definitions from {instructions_dir}/ "
            f"(pid {os.getpid()})"
        )
        worker.run()
    announce("stopped")
