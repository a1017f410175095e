"""``salvagelane init [DIR]``: write the daily-triage example project to start from."""

from __future__ import annotations

from pathlib import Path

import click

from salvagelane.cli.options import (
    Command,
)

FIXTURE = "fixtures/daily-triage-truncated"
"""The recorded output the quick start replays, relative to the project."""
THEN = (
    "salvagelane quarantine list (review what was held back); for a definition of your "
    "own: salvagelane check, then salvagelane try ID --sample FILE (nothing is stored)"
)


@click.command("init", cls=Command)
@click.argument(
    "directory",
    default=".",
    required=False,
    type=click.Path(path_type=Path),
)
def init_command(directory: Path) -> None:
    """Write a working example project into DIRECTORY (default: here, created if missing).

    The daily-triage instruction (instructions/), its schemas (schemas/), its context
    and a recorded truncated model output to replay (fixtures/daily-triage-truncated/).
    Nothing is overwritten: exit 2, listing them, when any of those files exists.
    """
    import shlex

    from salvagelane.errors import ConfigurationError
    from salvagelane.example_project import conflicts, example_files, write_example
    from salvagelane.safe_text import line

    example = example_files()
    clashes = conflicts(directory, example)
    if clashes:
        raise ConfigurationError(
            f"{directory}: {len(clashes)} of the example's paths already exist; nothing was "
            f"written (move them away or choose another directory): {', '.join(clashes)}"
        )
    written = write_example(directory, example)
    here = directory == Path(".")
    shown = directory.resolve() if here else directory
    click.echo(f"wrote {len(written.files)} files in {line(str(shown))}:")
    for path in written.files:
        click.echo(f"  {line(str(path))}")
    run = f"salvagelane run daily-triage --replay {FIXTURE}"
    change = "" if here else f"cd {line(shlex.quote(str(directory)))} && "
    click.echo(f"next: {change}{run}")
    # The rest of the loop a newcomer walks (docs/guides/first-definition.md).
    click.echo(f"then: {THEN}")
