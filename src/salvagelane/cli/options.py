"""The options several commands share, and the parsers of their values.

Only click and the standard library here: every command module imports this at its top,
and ``--help`` must stay cheap (docs/adr/0008-command-line-start-up.md).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click

DATABASE_HELP = (
    "Database URL (sqlite:///file.db or postgresql://...). "
    "Default: $SALVAGELANE_DATABASE_URL, else sqlite:///salvagelane.db."
)
INSTRUCTIONS_HELP = "Directory of instruction definitions."
USE_CURRENT_HELP = (
    "Use the current definition in --instructions instead of the version the run was "
    "made with (the command says what differs)."
)

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
use_current_option = click.option(
    "--use-current", "use_current", is_flag=True, help=USE_CURRENT_HELP
)
by_option = click.option(
    "--by", "by", metavar="NAME", help="Who reviews (default: the login name)."
)


def destination_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--to DIR`` and ``--force``: where a command writes a fixture."""
    command = click.option(
        "--force", is_flag=True, help="Overwrite the fixture files of a non-empty DIR."
    )(command)
    return click.option(
        "--to",
        "to",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Directory to write the fixture into (created; must be empty unless --force).",
    )(command)


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


def actor_of(by: str | None) -> str:
    """``--by``, else the login name; a container without one still gets a stable name."""
    if by:
        return by
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry
        return f"uid {os.getuid()}"


def shutdown_timeout_option(
    default: float,
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``--shutdown-timeout``: serve and worker stop the same way."""
    return click.option(
        "--shutdown-timeout",
        default=default,
        show_default=True,
        type=click.FloatRange(min=0),
        metavar="SECONDS",
        help="On SIGTERM/SIGINT, how long runs in flight may take to finish before they are "
        "marked interrupted.",
    )


def metrics_options(function: Callable[..., object]) -> Callable[..., object]:
    """``--metrics-port`` and ``--metrics-host``: serve and worker expose metrics alike."""
    port = click.option(
        "--metrics-port",
        default=None,
        type=click.IntRange(min=0, max=65535),
        metavar="PORT",
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: a free port, printed "
        "at start). Off by default.",
    )
    host = click.option(
        "--metrics-host",
        default="127.0.0.1",
        show_default=True,
        metavar="HOST",
        help="The address the metrics endpoint listens on (it has no authentication).",
    )
    return port(host(function))


QUEUE_STALL_MAX_SECONDS = 7 * 86400.0
"""A stall time longer than a week would never warn."""


def _a_number(ctx: click.Context, param: click.Parameter, value: float) -> float:
    # FloatRange lets NaN through: no comparison with it is true.
    if value != value:
        raise click.BadParameter("expected a number of seconds, got nan", ctx, param)
    return value


def queue_stall_option(
    default: float, help_text: str
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``--queue-stall-after``: how long queued runs may wait with no worker consuming
    the task queue before they count as stalled (serve, health, worker metrics)."""
    return click.option(
        "--queue-stall-after",
        "queue_stall_seconds",
        default=default,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True, max=QUEUE_STALL_MAX_SECONDS),
        callback=_a_number,
        metavar="SECONDS",
        help=help_text,
    )
