"""``salvagelane serve``: fire every instruction on its schedule until stopped."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType

import click

from salvagelane.cli.run_commands import database_option, instructions_option, recover_spooled
from salvagelane.safe_text import block

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@click.command("serve")
@instructions_option
@database_option
@click.option(
    "--shutdown-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, how long runs in flight may take to finish before they are "
    "marked interrupted.",
)
@click.option(
    "--poll",
    "poll_seconds",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="How often a standby node tries to take the lead, and the leader looks for runs "
    "whose process died.",
)
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="How often a running run records that it is alive.",
)
@click.option(
    "--stale-after",
    "stale_after_seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="A run without a heartbeat for this long is marked interrupted (at least twice "
    "the heartbeat).",
)
@click.option(
    "--max-workers",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs of different instructions that may execute at once.",
)
def serve_command(
    instructions_dir: Path,
    database: str | None,
    shutdown_timeout: float,
    poll_seconds: float,
    heartbeat_seconds: float,
    stale_after_seconds: float,
    max_workers: int,
) -> None:
    """Run every instruction on its schedule until stopped (SIGTERM or Ctrl-C).

    One node leads: on PostgreSQL further nodes stand by and take over when the leader
    stops or dies; on SQLite a second serve on the same file is refused. On taking the
    lead the node marks runs whose process died as interrupted (retrying a scheduled one
    once if its fire is within the misfire grace), runs each instruction's newest fire
    missed while nobody led as a catch-up (within grace), and records older ones as
    missed. Every fire is claimed in the database first, so none runs twice.

    SIGHUP reloads the definitions; one that no longer loads keeps its previous version.
    """
    import httpx

    from salvagelane import environment
    from salvagelane.connectors import build_connector
    from salvagelane.definitions import definition_files
    from salvagelane.service import ServeSettings, Service
    from salvagelane.sinks import build_sinks
    from salvagelane.store import PostgresLeaderLock, Store, leader_lock_for

    url = environment.database_url(database)
    lock = leader_lock_for(url)
    settings = ServeSettings(
        instructions_dir=instructions_dir,
        standby=isinstance(lock, PostgresLeaderLock),
        poll_seconds=poll_seconds,
        shutdown_timeout_seconds=shutdown_timeout,
        heartbeat_seconds=heartbeat_seconds,
        stale_after_seconds=stale_after_seconds,
        max_workers=max_workers,
    )
    # Usage errors before the database is opened (and, for a new SQLite file, created).
    if problem := settings.problem():
        raise click.UsageError(f"serve: {problem}")
    definition_files(instructions_dir)  # ConfigurationError when the directory is missing

    def announce(text: str) -> None:
        click.echo(block(text))  # may quote a definition's file or a database error
        sys.stdout.flush()  # a pipe (a supervisor, a test) sees each line as it happens

    with Store.open(url) as store, httpx.Client() as client:
        recover_spooled(store, url)
        service = Service(
            settings,
            store=store,
            lock=lock,
            connector_for=lambda spec: build_connector(
                spec.connector, client=client, deadline_seconds=spec.schedule.deadline_seconds
            ),
            sinks_for=lambda spec: build_sinks(spec.sinks, client=client),
            announce=announce,
        )

        def on_stop(signum: int, frame: FrameType | None) -> None:
            service.request_stop(signal.Signals(signum).name)

        def on_reload(signum: int, frame: FrameType | None) -> None:
            service.request_reload()

        previous = {sig: signal.signal(sig, on_stop) for sig in _STOP_SIGNALS}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_reload)
        try:
            announce(
                f"salvagelane serve: {store.url}, definitions from {instructions_dir}/ "
                f"(pid {os.getpid()})"
            )
            service.serve()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        abandoned = service.abandoned_runs
        if abandoned or service.unfinished_threads:
            announce(
                f"stopped; {len(abandoned)} run(s) marked interrupted: {', '.join(abandoned)}"
                if abandoned
                else "stopped"
            )
            # Their worker threads are still inside a call that cannot be cancelled; the
            # runs are recorded. Leave without waiting for the threads, and before the
            # HTTP client closes under them (they would record a bogus crash).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    announce("stopped")
