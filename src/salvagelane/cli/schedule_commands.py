"""``salvagelane schedule``: when each instruction fires next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from salvagelane.cli.options import (
    Command,
    instructions_option,
)
from salvagelane.cli.tables import render_schedule_table


@click.command("schedule", cls=Command)
@instructions_option
def schedule_command(instructions_dir: Path) -> None:
    """Print every instruction's cron, time zone and next fire time (UTC and local).

    Exit 1 when a definition is invalid (salvagelane check says why), 2 when the
    directory is missing.
    """
    from salvagelane.definitions import load_instructions
    from salvagelane.runtime.scheduler import schedule_table

    instructions = load_instructions(instructions_dir)
    click.echo(render_schedule_table(schedule_table(instructions, datetime.now(UTC))))
