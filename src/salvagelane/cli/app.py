"""The ``salvagelane`` command group, its exit codes and the console entry point."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
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


COMMANDS: Mapping[str, str] = {
    "check": "salvagelane.cli.salvage_commands:check_command",
    "db": "salvagelane.cli.db_commands:db_group",
    "fixture": "salvagelane.cli.fixture_commands:fixture_group",
    "init": "salvagelane.cli.init_commands:init_command",
    "quarantine": "salvagelane.cli.quarantine_commands:quarantine_group",
    "replay": "salvagelane.cli.fixture_commands:replay_command",
    "run": "salvagelane.cli.run_commands:run_command",
    "runs": "salvagelane.cli.run_commands:runs_group",
    "salvage": "salvagelane.cli.salvage_commands:salvage_command",
    "schedule": "salvagelane.cli.schedule_commands:schedule_command",
    "serve": "salvagelane.cli.serve_commands:serve_command",
}
"""Every command, by the module that defines it: a command's module (and what it
imports) is loaded only when that command runs, or when --help lists them all."""


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented
    pattern for lazily loaded subcommands)."""

    def __init__(self, *args: object, lazy: Mapping[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = self.lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name]}: expected a click command")
        self.add_command(command, cmd_name)
        return command


def _print_version(context: click.Context, _param: click.Parameter, value: bool) -> None:
    # A callback rather than click.version_option: the version is looked up (package
    # metadata) only when asked for, not on every start.
    if not value or context.resilient_parsing:
        return
    from salvagelane import __version__

    click.echo(f"salvagelane, version {__version__}")
    context.exit()


@click.group(
    cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
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
