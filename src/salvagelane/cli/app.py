"""The ``salvagelane`` command group, its exit codes and the console entry point."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from salvagelane.errors import (
    ConfigurationError,
    DatabaseUrlError,
    InputError,
    NotFoundError,
    OutdatedDatabaseError,
    SalvagelaneError,
)
from salvagelane.safe_text import one_line

EXIT_OK = 0
EXIT_INVALID = 1  # a definition is invalid, a run failed, a delivery failed
EXIT_USAGE = 2  # something the user must fix: options, files, unknown ids


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Not click.version_option(__version__): that reads the package metadata (tens of
    # milliseconds for importlib.metadata) at import, for every command; this only for --version.
    if not value or ctx.resilient_parsing:
        return
    import salvagelane

    click.echo(f"salvagelane, version {salvagelane.__version__}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least severe log events written to stderr.",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "console"]),
    help="Log lines as JSON or readable text. Default: $SALVAGELANE_LOG_FORMAT, else "
    "console at a terminal and JSON otherwise.",
)
def cli(log_level: str, log_format: str | None) -> None:
    """Salvage every intact item from broken LLM output; quarantine the rest."""
    from salvagelane import environment
    from salvagelane.logs import configure_logging

    chosen = log_format or environment.log_format()
    if chosen not in (None, "json", "console"):
        raise ConfigurationError(
            f"SALVAGELANE_LOG_FORMAT: expected json or console, got {chosen!r}"
        )
    configure_logging(json=None if chosen is None else chosen == "json", level=log_level)


def _fail(message: str, code: int) -> NoReturn:
    # A message may quote a provider's error, a fixture or a file name: one safe line.
    click.echo(f"salvagelane: error: {one_line(message)}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: one-line errors, exit 2 for anything the user must fix."""
    try:
        code = cli.main(args=argv, prog_name="salvagelane", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message(), EXIT_USAGE)
    except (
        ConfigurationError,
        DatabaseUrlError,
        InputError,
        NotFoundError,
        OutdatedDatabaseError,
    ) as exc:
        _fail(str(exc), EXIT_USAGE)
    except SalvagelaneError as exc:
        _fail(str(exc), EXIT_INVALID)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
