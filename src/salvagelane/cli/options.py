"""The options several commands share, and the parsers of their values.

Only click, the standard library and salvagelane.errors here: every command module
imports this at its top, and ``--help`` must stay cheap
(docs/adr/0008-command-line-start-up.md).
"""

from __future__ import annotations

import errno
import getpass
import ipaddress
import math
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from salvagelane.errors import not_utf8

ID_MAX = 2**31 - 1
"""The largest id a quarantined item can have: PostgreSQL's ``integer`` column (SQLite's
is wider, but ids are numbered from 1 on both)."""

SECONDS_MAX = 1e9
"""The longest time an option takes (about 31 years): moments that far back or ahead,
and waits that long, are still within what datetime and the thread timers hold."""

COUNT_MAX = 2**31 - 1
"""The largest count an option takes (``--limit``, ``--max-workers``): a bound both
databases and the standard library take without overflowing."""

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
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        # 0001-01-01T00:00:00+14:00 is before the first UTC moment Python can hold.
        raise click.BadParameter(
            f"expected a timestamp between 0001-01-01 and 9999-12-31 in UTC, got {text!r}"
        ) from exc


class Seconds(click.FloatRange):
    """A FloatRange of seconds up to :data:`SECONDS_MAX` that refuses ``inf`` and ``nan``:
    click's range lets nan through (every comparison with it is false), and a timedelta of
    either, or a moment that many seconds back, overflows. Its help shows the lower bound."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"expected a finite number of seconds, got {value!r}", param, ctx)
        if number > SECONDS_MAX:
            self.fail(f"expected at most {SECONDS_MAX:.0f} seconds, got {value!r}", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return f"x{'>' if self.min_open else '>='}{self.min:g}"


def seconds(*, min_open: bool = True) -> Seconds:
    """Seconds above 0 (``min_open``) or from 0, finite."""
    return Seconds(min=0, min_open=min_open)


class Count(click.IntRange):
    """An IntRange up to :data:`COUNT_MAX`, whose help shows only its lower bound."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if number > COUNT_MAX:
            self.fail(f"expected at most {COUNT_MAX}, got {number}", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return f"x>={self.min}"


def count_range(*, least: int = 1) -> Count:
    """A whole number from ``least`` to :data:`COUNT_MAX`."""
    return Count(min=least, max=COUNT_MAX)


class ItemId(click.ParamType[int, Any]):
    """A quarantined item's id: a number beyond any id stored is refused as such, rather
    than sent to a database whose integer it overflows."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if not 1 <= number <= ID_MAX:
            self.fail(
                f"no quarantined item has id {number}: ids are whole numbers from 1 to {ID_MAX}",
                param,
                ctx,
            )
        return number


ITEM_ID = ItemId()


class Host(click.ParamType[str, Any]):
    """An address to listen on: an IP address or a host name the socket layer can encode
    (IDNA); "" is every interface. A name it cannot encode raised TypeError at bind."""

    name = "host"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        try:
            ipaddress.ip_address(text.strip("[]"))
        except ValueError:
            try:
                text.encode("idna")
            except UnicodeError:
                self.fail(f"expected an IP address or a host name, got {text!r}", param, ctx)
        return text


HOST = Host()


def undecodable(value: str) -> str | None:
    """Why ``value`` is not text (a byte that is not UTF-8, which Python passes on from
    the command line as a lone surrogate), or None when it is."""
    try:
        value.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        return not_utf8(exc)
    except UnicodeEncodeError as exc:
        return f"a lone surrogate U+{ord(value[exc.start]):04X} at offset {exc.start}"
    return None


def unreachable(path: str | os.PathLike[str]) -> str | None:
    """Why the system cannot even look ``path`` up (a name too long, a directory on the
    way that may not be searched), or None. A missing file, or a symbolic link loop, is
    left for the command to say in its own words."""
    try:
        os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        return f"the system cannot look it up: {exc.strerror}"
    return None


def refuse_unusable(ctx: click.Context) -> None:
    """click.BadParameter for the first parameter of ``ctx`` whose text holds a byte that
    is not UTF-8, or whose path the system cannot look up. Paths may hold such bytes: a
    file name is the operating system's bytes."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values: Sequence[object] = value if isinstance(value, (tuple, list)) else (value,)
        for each in values:
            if isinstance(param.type, click.Path) and isinstance(each, (str, Path)):
                why = unreachable(each)
            elif isinstance(each, str):
                why = undecodable(each)
                why = None if why is None else f"{why}: expected text"
            else:
                continue
            if why is not None:
                raise click.BadParameter(why, ctx=ctx, param=param)


class Command(click.Command):
    """Every salvagelane command: its text parameters are refused when they are not
    UTF-8, and its paths when the system cannot look them up, before the command stores,
    opens or prints them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        refuse_unusable(ctx)
        return rest


class Group(click.Group):
    """A salvagelane command group: its commands and groups are :class:`Command` and
    :class:`Group`."""

    command_class = Command
    group_class = type  # a subgroup is a Group too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        refuse_unusable(ctx)
        return rest


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
        type=seconds(min_open=False),
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
        type=HOST,
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
