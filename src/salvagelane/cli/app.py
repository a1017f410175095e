"""The ``salvagelane`` command group, its exit codes and the console entry point."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import click

from salvagelane.cli.options import Group
from salvagelane.errors import (
    ConfigurationError,
    ConflictError,
    DefinitionError,
    NotFoundError,
    RefusedInputError,
    SalvagelaneError,
    UnavailableError,
)
from salvagelane.safe_text import one_line

# The exit-code contract (docs/reference/cli.md, "Exit status";
# tests/integration/test_exit_codes.py).
EXIT_OK = 0  # done (a partial run is done)
EXIT_INVALID = 1  # a run, a delivery or a definition failed; a declined confirmation
EXIT_USAGE = 2  # something to fix in the command, its files, its database, its environment
EXIT_INTERRUPTED = 130  # Ctrl-C, and only that


@dataclass(frozen=True, kw_only=True)
class LazyCommand:
    """Where a command is defined (``module:attribute``) and the first paragraph of its
    help, which the group's --help lists without importing the module."""

    target: str
    summary: str


COMMANDS: Mapping[str, LazyCommand] = {
    "backfill": LazyCommand(
        target="salvagelane.cli.backfill_commands:backfill_command",
        summary="Run every fire of INSTRUCTION's schedule from --from to --to that has no "
        "outcome yet, oldest first, one at a time (to make up a gap: an outage, a node down).",
    ),
    "check": LazyCommand(
        target="salvagelane.cli.salvage_commands:check_command",
        summary="Validate every instruction definition (*.yaml, *.yml) in DIRECTORY.",
    ),
    "db": LazyCommand(
        target="salvagelane.cli.db_commands:db_group",
        summary="The database: migrate it, see its revision, import spooled outputs.",
    ),
    "eval": LazyCommand(
        target="salvagelane.cli.eval_commands:eval_command",
        summary="Evaluate a candidate (a definition, a model, a provider) on recorded "
        "fixtures, side by side with their recorded answers.",
    ),
    "fixture": LazyCommand(
        target="salvagelane.cli.fixture_commands:fixture_group",
        summary="Regression fixtures: capture a stored run's raw output and its outcome.",
    ),
    "health": LazyCommand(
        target="salvagelane.cli.health_commands:health_command",
        summary="Show each instruction's run health: clean scheduled runs in a row, recent "
        "statuses, partial and failed rates, quarantine reasons per day, finish reasons, "
        "missed and interrupted fires, tokens per day, and their cost when a price table "
        "applies (the one kept with the instruction's newest stored run).",
    ),
    "init": LazyCommand(
        target="salvagelane.cli.init_commands:init_command",
        summary="Write a working example project into DIRECTORY (default: here, created "
        "if missing).",
    ),
    "prompt": LazyCommand(
        target="salvagelane.cli.try_commands:prompt_command",
        summary="Print the prompt a run of INSTRUCTION would send: the rendered system and "
        "user prompts, and the structured-output hint's schema when the connector sends one.",
    ),
    "quarantine": LazyCommand(
        target="salvagelane.cli.quarantine_commands:quarantine_group",
        summary="Review quarantined items: list, show, approve, reject, annotate.",
    ),
    "replay": LazyCommand(
        target="salvagelane.cli.fixture_commands:replay_command",
        summary="Replay regression fixtures and compare the outcomes with the recorded ones.",
    ),
    "run": LazyCommand(
        target="salvagelane.cli.run_commands:run_command",
        summary="Run INSTRUCTION once (an id from the instructions directory, or a YAML file).",
    ),
    "runs": LazyCommand(
        target="salvagelane.cli.run_commands:runs_group",
        summary="Stored runs: list them, show one, deliver one again, cancel one.",
    ),
    "salvage": LazyCommand(
        target="salvagelane.cli.salvage_commands:salvage_command",
        summary="Salvage the items of one raw model output (FILE, or stdin) and print the result.",
    ),
    "schedule": LazyCommand(
        target="salvagelane.cli.schedule_commands:schedule_command",
        summary="Print every instruction's cron, time zone and next fire time (UTC and local).",
    ),
    "serve": LazyCommand(
        target="salvagelane.cli.serve_commands:serve_command",
        summary="Run every instruction on its schedule until stopped (SIGTERM or Ctrl-C).",
    ),
    "try": LazyCommand(
        target="salvagelane.cli.try_commands:try_command",
        summary="Try INSTRUCTION without a run: nothing is stored, nothing is delivered.",
    ),
    "ui": LazyCommand(
        target="salvagelane.cli.ui_commands:ui_command",
        summary="Serve the review page: the quarantine queue, items, runs and health, in a "
        "browser.",
    ),
    "worker": LazyCommand(
        target="salvagelane.cli.worker_commands:worker_command",
        summary="Execute queued runs (PostgreSQL; `serve --dispatch queue` enqueues them).",
    ),
}
"""Every command: its module (and what that imports) is loaded only when the command
runs; the group's --help lists the summaries, which a test holds equal to each
command's own help."""


class LazyGroup(Group):
    """A click group whose commands are imported on first use (click's documented
    pattern for lazily loaded subcommands), and whose --help imports none of them."""

    def __init__(self, *args: object, lazy: Mapping[str, LazyCommand], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        target = self.lazy[cmd_name].target
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target}: expected a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click.Group.format_commands, with the summaries of the commands not yet
        # loaded taken from COMMANDS rather than by importing every command module.
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.lazy and name not in self.commands:
                # Shortened exactly as click shortens a loaded command's help.
                summary = click.Command(name, help=self.lazy[name].summary).get_short_help_str(
                    limit
                )
            else:
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                summary = command.get_short_help_str(limit)
            rows.append((name, summary))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(context: click.Context, _param: click.Parameter, value: bool) -> None:
    # A callback rather than click.version_option: the version is looked up (package
    # metadata) only when asked for, not on every start.
    if not value or context.resilient_parsing:
        return
    from salvagelane import __version__
    from salvagelane.core import speedups

    loops = "compiled" if speedups.COMPILED else "pure Python (the C extension was not built)"
    click.echo(f"salvagelane, version {__version__}\nscan loops: {loops}")
    context.exit()


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
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


def exit_code_for(exc: SalvagelaneError) -> int:
    """The exit status of a salvagelane error, by what it means (errors.py): the one
    place the command line decides it. An invalid definition, and anything that was
    tried and failed (a provider, a sink, the store, the queue), exit 1; what the operator
    must fix first (an input, an id, a state, a database) exits 2."""
    if isinstance(exc, DefinitionError):
        return EXIT_INVALID
    if isinstance(exc, RefusedInputError | NotFoundError | ConflictError | UnavailableError):
        return EXIT_USAGE
    return EXIT_INVALID


def _fail(message: str, code: int) -> NoReturn:
    # A message may quote a provider's error, a fixture or a file name: one safe line.
    click.echo(f"salvagelane: error: {one_line(message)}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: one-line errors, and the exit codes (docs/reference/cli.md): 0
    done, 1 a run or a definition failed, 2 something to fix before anything starts, 130
    Ctrl-C."""
    try:
        code = cli.main(args=argv, prog_name="salvagelane", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        # A bare group (`salvagelane`, `salvagelane db`) is a request for its help.
        click.echo(exc.ctx.get_help())
        sys.exit(EXIT_OK)
    except click.exceptions.Abort as exc:
        # click turns Ctrl-C (and an end of input at one of its prompts) into Abort.
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            _fail("interrupted", EXIT_INTERRUPTED)
        _fail("aborted: no answer", EXIT_USAGE)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INTERRUPTED)
    except click.ClickException as exc:
        _fail(exc.format_message(), EXIT_USAGE)
    except SalvagelaneError as exc:
        _fail(str(exc), exit_code_for(exc))
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def console_main() -> NoReturn:
    """The ``salvagelane`` executable (and ``python -m salvagelane``): :func:`main` in a
    process of its own, which ends without CPython's final garbage collections."""
    try:
        main()
    finally:
        # At exit CPython runs full collections over every live object (jsonschema,
        # click and the core hold a few hundred thousand), which cost a one-shot command
        # such as `salvage` tens of milliseconds. Frozen objects are skipped. Nothing
        # relies on a cycle being finalised: stores, files and servers are closed by
        # their context managers, and logging flushes in its atexit hook.
        gc.freeze()
