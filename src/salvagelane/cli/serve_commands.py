"""``salvagelane serve``: fire every instruction on its schedule until stopped."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from salvagelane.cli.options import (
    Command,
    count_range,
    database_option,
    instructions_option,
    metrics_options,
    queue_stall_option,
    seconds,
    shutdown_timeout_option,
)
from salvagelane.cli.tables import render_schedule_table
from salvagelane.cli.wiring import (
    expose_metrics,
    loadable_definitions,
    recover_spooled,
    schedules_of,
    wired,
)
from salvagelane.runtime.settings import DEFAULT_SETTINGS as DEFAULTS
from salvagelane.runtime.settings import ServeSettings
from salvagelane.safe_text import block

if TYPE_CHECKING:
    from salvagelane.definitions import Instruction
    from salvagelane.runtime.dispatch import QueueDispatch
    from salvagelane.runtime.metrics import Metrics
    from salvagelane.runtime.service import Service
    from salvagelane.store import LeaderLock, Store

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@click.command("serve", cls=Command)
@instructions_option
@database_option
@shutdown_timeout_option(DEFAULTS.shutdown_timeout_seconds)
@click.option(
    "--poll",
    "poll_seconds",
    default=DEFAULTS.poll_seconds,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="How often a standby node tries to take the lead, and the leader looks for runs "
    "whose process died.",
)
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    default=DEFAULTS.heartbeat_seconds,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="How often a running run records that it is alive.",
)
@click.option(
    "--stale-after",
    "stale_after_seconds",
    default=DEFAULTS.stale_after_seconds,
    show_default=True,
    type=seconds(),
    metavar="SECONDS",
    help="A run without a heartbeat for this long is marked interrupted (at least twice "
    "the heartbeat).",
)
@click.option(
    "--max-workers",
    default=DEFAULTS.max_workers,
    show_default=True,
    type=count_range(),
    help="Runs of different instructions that may execute at once.",
)
@click.option(
    "--dispatch",
    type=click.Choice(["inprocess", "queue"]),
    default="inprocess",
    show_default=True,
    help="Where runs execute: in this process, or (PostgreSQL) through the task queue, by "
    "`salvagelane worker` processes on any machine.",
)
@queue_stall_option(
    DEFAULTS.queue_stall_seconds,
    "Queued runs waiting this long with no worker consuming the task queue: with "
    "--dispatch queue the leader warns (log, `health`, metrics); dispatching in-process it "
    "ends them interrupted (a fire within its grace is retried once).",
)
@metrics_options
def serve_command(
    instructions_dir: Path,
    database: str | None,
    shutdown_timeout: float,
    poll_seconds: float,
    heartbeat_seconds: float,
    stale_after_seconds: float,
    max_workers: int,
    dispatch: str,
    queue_stall_seconds: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run every instruction on its schedule until stopped (SIGTERM or Ctrl-C).

    One node leads: on PostgreSQL further nodes stand by and take over when the leader
    stops or dies; on SQLite a second serve on the same file is refused. On taking the
    lead the node marks runs whose process died as interrupted (retrying a scheduled one
    once if its fire is within the misfire grace), runs each instruction's newest fire
    missed while nobody led as a catch-up (within grace), and records older ones as
    missed. Every fire is claimed in the database first, so none runs twice.

    SIGHUP reloads the definitions; one that no longer loads keeps its previous version.

    With --dispatch queue (PostgreSQL) the leader claims each fire and enqueues its run
    in one transaction, and `salvagelane worker` processes execute the runs. In either
    mode the leader ends interrupted a queued run no worker will take (its job is gone,
    its worker died before taking it), with the reason on the run.

    With --metrics-port the node serves Prometheus metrics (docs/guides/metrics.md) for as long
    as it runs, leading or standing by.
    """
    from salvagelane import environment
    from salvagelane.store import PostgresLeaderLock, SqliteServeLock, leader_lock_for

    url = environment.database_url(database)
    if dispatch == "queue":
        from salvagelane.runtime.dispatch import require_postgres

        require_postgres(url, "serve --dispatch queue")  # SQLite: refused, exit 2
    if metrics_port is not None:
        # Without the `metrics` extra: MissingExtraError (exit 2) before anything starts.
        import salvagelane.runtime.metrics  # noqa: F401
    lock = leader_lock_for(url)
    settings = ServeSettings(
        instructions_dir=instructions_dir,
        standby=isinstance(lock, PostgresLeaderLock),
        poll_seconds=poll_seconds,
        shutdown_timeout_seconds=shutdown_timeout,
        heartbeat_seconds=heartbeat_seconds,
        stale_after_seconds=stale_after_seconds,
        max_workers=max_workers,
        queue_stall_seconds=queue_stall_seconds,
    )
    # Usage errors before the database is opened (and, for a new SQLite file, created).
    if problem := settings.problem():
        raise click.UsageError(f"serve: {problem}")
    # A directory where nothing loads is refused before the lock file or the database is
    # touched (the service loads them again, reporting each problem, before its banner).
    loadable_definitions(instructions_dir)
    if isinstance(lock, SqliteServeLock):
        # A second serve on one SQLite file is refused (ServeLockedError, exit 2) before it
        # opens the database, imports the spool or prints anything as if it had started.
        lock.acquire()
    try:
        _serve(
            settings,
            url,
            lock,
            instructions_dir,
            metrics_at=_metrics_at(metrics_port, metrics_host),
            queue=dispatch == "queue",
        )
    finally:
        lock.release()


def _served_definitions(service: Service) -> Mapping[str, Instruction]:
    """The definitions ``service`` serves now (the last good load of each)."""
    return service.definitions


def _metrics_at(port: int | None, host: str) -> tuple[str, int] | None:
    return None if port is None else (host, port)


def _serve(
    settings: ServeSettings,
    url: str,
    lock: LeaderLock,
    instructions_dir: Path,
    *,
    metrics_at: tuple[str, int] | None = None,
    queue: bool = False,
) -> None:
    from salvagelane.events import logged_stream
    from salvagelane.runtime.service import Service
    from salvagelane.store import Store

    def announce(text: str) -> None:
        click.echo(block(text))  # may quote a definition's file or a database error
        sys.stdout.flush()  # a pipe (a supervisor, a test) sees each line as it happens

    with Store.open(url) as store, wired() as wiring, ExitStack() as serving:
        dispatch = serving.enter_context(_dispatch(url, store, queue))
        recover_spooled(store, url)
        # One stream for the node: the log and, with --metrics-port, the metrics.
        events = logged_stream()
        collected: Metrics | None = None
        if metrics_at is not None:
            # Imported only here: a serve without metrics loads no prometheus_client.
            from salvagelane.runtime.metrics import Metrics

            collected = Metrics(
                state=store.state,
                queue_stall_seconds=settings.queue_stall_seconds,
                # Read at each scrape, after `service` below exists (the endpoint opens
                # after service.load()): a SIGHUP reload changes the definitions.
                schedules=lambda: schedules_of(_served_definitions(service)),
            )
            collected.subscribe(events)
        service = Service(
            settings,
            store=store,
            lock=lock,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            announce=announce,
            render_schedule=render_schedule_table,
            dispatch=dispatch,
            events=events,
            notifications_for=wiring.notifications_for,
        )
        # Before the banner: a directory where nothing loads stops here, not after
        # "salvagelane serve: ..." has told a supervisor that it started.
        service.load()
        metrics_url = None
        if collected is not None and metrics_at is not None:
            # Before the banner too: a port in use stops the node before it says it started.
            host, port = metrics_at
            metrics_url = expose_metrics(serving, collected, port, host)

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
                + ("; runs go to the task queue" if dispatch is not None else "")
            )
            if metrics_url is not None:
                announce(f"metrics: {metrics_url}")
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


@contextmanager
def _dispatch(url: str, store: Store, queue: bool) -> Iterator[QueueDispatch | None]:
    """The task queue the leader hands its fires to (``--dispatch queue``), or None."""
    if not queue:
        yield None
        return
    from salvagelane.runtime.dispatch import QueueDispatch

    dispatch = QueueDispatch(url, store)
    dispatch.open()
    try:
        yield dispatch
    finally:
        dispatch.close()
