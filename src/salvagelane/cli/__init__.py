"""The ``salvagelane`` command line: one module per group of commands, each loaded only
when its command runs (or ``--help`` lists them)."""

from __future__ import annotations

from salvagelane.cli.app import cli, console_main, main

__all__ = ["cli", "console_main", "main"]
