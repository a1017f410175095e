"""``salvagelane db``: create and migrate the database."""

from __future__ import annotations

import click

from salvagelane.cli.app import cli
from salvagelane.cli.run_commands import database_option


@cli.group("db")
def db_group() -> None:
    """The database: migrate it, see its revision."""


@db_group.command("upgrade")
@database_option
def db_upgrade_command(database: str | None) -> None:
    """Create the tables or migrate them to the newest revision (idempotent)."""
    from salvagelane import environment
    from salvagelane.store import current_revision, masked_url, upgrade

    url = environment.database_url(database)
    before = current_revision(url)
    upgrade(url)
    after = current_revision(url)
    if before == after:
        click.echo(f"{masked_url(url)}: already at revision {after}")
    else:
        click.echo(f"{masked_url(url)}: upgraded from {before or 'an empty database'} to {after}")


@db_group.command("current")
@database_option
def db_current_command(database: str | None) -> None:
    """Print the database's migration revision and the newest one."""
    from salvagelane import environment
    from salvagelane.store import current_revision, head_revision, masked_url

    url = environment.database_url(database)
    current = current_revision(url)
    head = head_revision()
    state = "up to date" if current == head else "run salvagelane db upgrade"
    click.echo(f"{masked_url(url)}: revision {current or 'none'} (newest {head}: {state})")
