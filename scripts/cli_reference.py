"""Keep the documentation's command-line reference equal to the real ``--help`` output.

Each ``<!-- help: salvagelane COMMAND... -->`` marker in docs/reference/cli.md is followed by
a console block holding ``$ salvagelane COMMAND... --help`` and its output. This script
rewrites those blocks from the command line itself (``--write``) or reports the ones that
drifted (``--check``, exit 1), and lists every command or subcommand without a block: the
reference must show them all. The test suite runs the check.

    .venv/bin/python scripts/cli_reference.py --write
    .venv/bin/python scripts/cli_reference.py --check
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference" / "cli.md"
"""Where the help blocks live (the site's page "Command line")."""
WIDTH = 80
"""Help is wrapped at this width wherever it is generated, so the block is stable."""

MARKER = re.compile(
    r"(?P<marker><!-- help: salvagelane(?P<command>(?: [a-z-]+)*) -->\n)"
    r"```console\n(?P<body>.*?)```\n",
    re.DOTALL,
)


@dataclass(frozen=True, kw_only=True)
class Drift:
    command: str
    expected: str
    found: str


def help_text(words: list[str]) -> str:
    """``salvagelane WORDS --help`` exactly as a terminal WIDTH columns wide shows it."""
    from salvagelane.cli import cli

    result = CliRunner().invoke(
        cli, [*words, "--help"], prog_name="salvagelane", terminal_width=WIDTH
    )
    if result.exit_code != 0:
        raise SystemExit(f"salvagelane {' '.join(words)} --help exited {result.exit_code}")
    return result.output


def block(words: list[str]) -> str:
    return f"$ {' '.join(['salvagelane', *words, '--help'])}\n{help_text(words)}"


def every_command(group: click.Group | None = None, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command a user runs: ``""`` (the top level), ``"check"``, ``"db upgrade"``...
    A group's own help only lists its commands, which have blocks of their own."""
    from salvagelane.cli import cli

    if group is None:
        group = cli
        yield ""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            yield from every_command(command, (*prefix, name))
        elif command is not None:
            yield " ".join((*prefix, name))


def drifted(text: str) -> list[Drift]:
    drifts = []
    for match in MARKER.finditer(text):
        expected = block(match["command"].split())
        if match["body"] != expected:
            drifts.append(Drift(command=match["command"], expected=expected, found=match["body"]))
    return drifts


def missing(text: str) -> list[str]:
    documented = {match["command"].strip() for match in MARKER.finditer(text)}
    return [command for command in every_command() if command not in documented]


def rewritten(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        return f"{match['marker']}```console\n{block(match['command'].split())}```\n"

    return MARKER.sub(replace, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    action.add_argument("--check", action="store_true", help="exit 1 if a block drifted")
    args = parser.parse_args()
    text = REFERENCE.read_text(encoding="utf-8")
    if args.write:
        REFERENCE.write_text(rewritten(text), encoding="utf-8")
    now = REFERENCE.read_text(encoding="utf-8")
    problems = [f"drifted: salvagelane{d.command} --help" for d in drifted(now)]
    problems += [f"no help block: salvagelane {command}".rstrip() for command in missing(now)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
