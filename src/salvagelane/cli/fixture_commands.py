"""``salvagelane fixture capture`` and ``salvagelane replay``: regression fixtures."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvagelane.cli.app import EXIT_INVALID, EXIT_USAGE
from salvagelane.cli.options import (
    Command,
    Group,
    count_range,
    database_option,
    destination_options,
    instructions_option,
    json_option,
)
from salvagelane.cli.render import captured_fixture
from salvagelane.cli.tables import aligned
from salvagelane.cli.wiring import open_store
from salvagelane.safe_text import line

if TYPE_CHECKING:  # the fixtures module pulls in the core and the connectors: not for --help
    from salvagelane.fixtures.replay import FixtureReplay, Replayer

PROGRESS_THRESHOLD = 5
"""More fixtures than this get a progress bar (at a terminal): fewer finish at once."""


def replayer_for(instructions_dir: Path, *, use_current: bool = False) -> Replayer:
    """The replayer ``salvagelane replay`` (and the test suite) uses: each fixture with
    the definition its run was made with (its ``definition.json``), or with
    ``use_current`` today's definition of its instruction, an id looked up among the
    definitions in ``instructions_dir`` only."""
    from salvagelane.fixtures.replay import Replayer

    return Replayer(instructions_dir, use_current=use_current)


@click.group("fixture", cls=Group)
def fixture_group() -> None:
    """Regression fixtures: capture a stored run's raw output and its outcome."""


@fixture_group.command("capture")
@click.argument("run_id")
@click.option(
    "--attempt",
    type=count_range(),
    metavar="N",
    help="Capture attempt N. Default: the attempt the run's report came from, "
    "else the last one with raw output.",
)
@destination_options
@database_option
def capture_command(
    run_id: str, attempt: int | None, to: Path, force: bool, database: str | None
) -> None:
    """Write a regression fixture of run RUN_ID (or a unique prefix of 8+ characters).

    Writes raw.txt (the output exactly as stored), meta.json (finish reason, usage,
    model, where it came from; never the prompt or a key), expected.json (the outcome
    the run stored) and definition.json (the definition the run was made with, with the
    schemas, allow-lists and context files it names). Replay it with: salvagelane
    replay DIR.

    Once an operator approved a quarantined item of the attempt, corrections.json
    records the fix (lines of `salvagelane quarantine export --format jsonl`).
    """
    from salvagelane.review.capture import capture_run

    with open_store(database, read_only=True) as store:
        captured = capture_run(store, run_id, attempt, to, force=force)
    click.echo(captured_fixture(captured))


@click.command("replay", cls=Command)
@click.argument("paths", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--use-current",
    "use_current",
    is_flag=True,
    help="Salvage with the current definition in --instructions instead of the one the "
    "fixture's run was made with (each fixture says what differs).",
)
@instructions_option
@click.option(
    "--update",
    is_flag=True,
    help="Rewrite expected.json of every fixture that differs (or has none) with today's outcome.",
)
@json_option
def replay_command(
    paths: tuple[Path, ...],
    use_current: bool,
    instructions_dir: Path,
    update: bool,
    as_json: bool,
) -> None:
    """Replay regression fixtures and compare the outcomes with the recorded ones.

    Each PATH is a fixture directory (raw.txt, meta.json, expected.json, definition.json)
    or a directory searched recursively for them. The raw output is salvaged with the
    definition the fixture's run was made with (its definition.json), or with
    --use-current with the current definition of its instruction (a fixture without
    definition.json needs it); no provider is called, no database opened. A fixture is
    data: its meta.json names its instruction by id, looked up in --instructions only,
    never as a path, and its definition.json is never resolved against the filesystem.

    Exit 1 if any fixture differs or cannot be replayed; with --update, differing
    fixtures are rewritten (exit 0 unless one cannot be replayed). Exit 2 if any fixture
    is refused (meta.json naming a path or an unknown id, a file that is a link or
    not a regular file, no definition.json without --use-current, a definition.json
    naming a context callable the definition in --instructions does not): the others
    are still replayed.
    """
    from salvagelane.fixtures.format import discover
    from salvagelane.fixtures.replay import summarise

    directories = discover(paths)
    replayer = replayer_for(instructions_dir, use_current=use_current)
    replays: list[FixtureReplay] = []
    if len(directories) > PROGRESS_THRESHOLD and sys.stderr.isatty():
        with click.progressbar(
            directories, label="replaying", file=sys.stderr, item_show_func=_shown
        ) as bar:
            replays.extend(replayer.replay(directory, update=update) for directory in bar)
    else:
        replays.extend(replayer.replay(directory, update=update) for directory in directories)
    counts = summarise(replays)
    if as_json:
        document = {"fixtures": [r.to_json() for r in replays], "counts": counts}
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        click.echo(render_replays(replays, counts))
    if counts["refused"]:
        raise click.exceptions.Exit(EXIT_USAGE)
    if counts["error"] or counts["differs"]:
        raise click.exceptions.Exit(EXIT_INVALID)


def _shown(directory: Path | None) -> str | None:
    return None if directory is None else line(directory.name)


def render_replays(replays: Sequence[FixtureReplay], counts: dict[str, int]) -> str:
    """One line per fixture, each difference or error indented under it, then totals."""
    from salvagelane.fixtures.format import EXPECTED_FILE

    header = ("FIXTURE", "INSTRUCTION", "STATUS", "RESULT")
    rows = [
        (
            str(r.path),
            r.instruction or "-",
            "-" if r.actual is None else r.actual.status,
            r.verdict,
        )
        for r in replays
    ]
    table = aligned([header, *rows])
    lines = [table[0]]
    for row, replay in zip(table[1:], replays, strict=True):
        lines.append(row)
        if replay.note is not None:
            lines.append(f"    note: {line(replay.note)}")
        # A fixture is data from elsewhere (a bug report): its values are quoted in these.
        lines.extend(f"    {line(difference.message)}" for difference in replay.differences)
        if replay.error is not None:
            lines.append(f"    {line(replay.error)}")
        if replay.verdict == "recorded":
            lines.append(f"    {EXPECTED_FILE} written")
        elif replay.verdict == "updated":
            lines.append(f"    {EXPECTED_FILE} rewritten with the outcome above")
    total = ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n)
    lines.append(f"{len(replays)} fixture(s): {total}")
    return "\n".join(shown.rstrip() for shown in lines)
