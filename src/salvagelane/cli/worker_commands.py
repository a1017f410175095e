"""``salvagelane worker``: execute the runs a ``serve --dispatch queue`` leader enqueues."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from salvagelane.cli.options import (
    Command,
    count_range,
    database_option,
    instructions_option,
    metrics_options,
    seconds,
    shutdown_timeout_option,
)
from salvagelane.cli.wiring import (
    expose_metrics,
    loadable_definitions,
    recover_spooled,
    schedules_of,
    wired,
)
from salvagelane.runtime.settings import DEFAULT_SETTINGS as SERVE_DEFAULTS
from salvagelane.safe_text import block


@click.command("worker", cls=Command)
@instructions_option
@database_option
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=count_range(),
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
@shutdown_timeout_option(SERVE_DEFAULTS.shutdown_timeout_seconds)
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    default=SERVE_DEFAULTS.heartbeat_seconds,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="How often a running run records that it is alive (keep it under half of the "
    "leader's --stale-after).",
)
@metrics_options
def worker_command(
    instructions_dir: Path,
    database: str | None,
    concurrency: int,
    queues: str,
    shutdown_timeout: float,
    heartbeat_seconds: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Execute queued runs (PostgreSQL; `serve --dispatch queue` enqueues them).

    Start any number, on any machine that reaches the database, each with the same
    instruction definitions as the leader. A worker takes each run by its id, so a run
    executes at most once. SIGTERM or Ctrl-C stops taking runs and lets those in flight
    finish for up to the shutdown timeout; those still going are marked interrupted, and
    the leader retries a scheduled one once.

    With --metrics-port the worker serves the Prometheus metrics of the runs it executes
    (docs/guides/metrics.md), and the database's figures, as `serve` does.
    """
    from salvagelane import environment
    from salvagelane.events import logged_stream
    from salvagelane.runtime.dispatch import QueueWorker, WorkerSettings, require_postgres
    from salvagelane.store import Store

    url = require_postgres(environment.database_url(database), "salvagelane worker")
    if metrics_port is not None:
        # Without the `metrics` extra: MissingExtraError (exit 2) before anything starts.
        import salvagelane.runtime.metrics  # noqa: F401
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

    with Store.open(url) as store, wired() as wiring, ExitStack() as serving:
        recover_spooled(store, url)
        events = logged_stream()  # the log and, with --metrics-port, the metrics
        metrics_url = None
        if metrics_port is not None:
            # Imported only here: a worker without metrics loads no prometheus_client.
            from salvagelane.runtime.metrics import Metrics

            # Read at each scrape, once `worker` below exists (it adds a definition it
            # meets in a queued run).
            collected = Metrics(
                state=store.state, schedules=lambda: schedules_of(worker.definitions)
            )
            collected.subscribe(events)
            metrics_url = expose_metrics(serving, collected, metrics_port, metrics_host)
        worker = QueueWorker(
            settings,
            url=url,
            store=store,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            announce=announce,
            abandon=abandon,
            events=events,
        )
        # The runs this worker makes tell whom their definitions' notify names.
        wiring.notifier(store, lambda: worker.definitions).subscribe(events)
        worker.load()
        announce(
            f"salvagelane worker: {store.url}, definitions from {instructions_dir}/ "
            f"(pid {os.getpid()})"
        )
        if metrics_url is not None:
            announce(f"metrics: {metrics_url}")
        worker.run()
    announce("stopped")
