"""The ``salvagelane`` command line: one module per group of commands."""

from __future__ import annotations

from salvagelane.cli import (
    db_commands,
    fixture_commands,
    init_commands,
    quarantine_commands,
    run_commands,
    salvage_commands,
    schedule_commands,
    serve_commands,
)
from salvagelane.cli.app import cli, main

__all__ = [
    "cli",
    "db_commands",
    "fixture_commands",
    "init_commands",
    "main",
    "quarantine_commands",
    "run_commands",
    "salvage_commands",
    "schedule_commands",
    "serve_commands",
]
