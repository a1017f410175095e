"""``salvagelane db``: create and migrate the database."""

from __future__ import annotations

import click

from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import (
    Group,
    database_option,
)
from salvagelane.safe_text import line


@click.group("db", cls=Group)
def db_group() -> None:
    """The database: migrate it, see its revision, import spooled outputs."""


@db_group.command("upgrade")
@database_option
def db_upgrade_command(database: str | None) -> None:
    """Create the tables or migrate them to the newest revision (idempotent)."""
    from salvagelane import environment
    from salvagelane.errors import MissingExtraError
    from salvagelane.store import current_revision, masked_url, upgrade
    from salvagelane.store import database_url as normalised

    url = environment.database_url(database)

    def url_is_postgres(url: str) -> bool:
        return normalised(url).startswith("postgresql")

    before = current_revision(url)
    upgrade(url)  # OutdatedDatabaseError, before any change, at a revision it does not know
    after = current_revision(url)
    if before == after:
        click.echo(f"{masked_url(url)}: already at revision {after}")
    else:
        click.echo(f"{masked_url(url)}: upgraded from {before or 'an empty database'} to {after}")
    if url_is_postgres(url):
        # The task queue's tables (`serve --dispatch queue`, `worker`; ADR 0013), once.
        try:
            from salvagelane.runtime.dispatch import install_schema
        except MissingExtraError:
            # PostgreSQL without the queue: the store is upgraded; the first queue
            # leader or worker installs the tables once the extra is there.
            click.echo(
                f"{masked_url(url)}: the task queue's tables are not installed, nor are its "
                "packages (`serve --dispatch queue` and `worker` need "
                "pip install 'salvagelane[queue]')"
            )
            return
        if install_schema(url):
            click.echo(f"{masked_url(url)}: installed the task queue's tables")


@db_group.command("current")
@database_option
def db_current_command(database: str | None) -> None:
    """Print the database's migration revision and the newest one (only reads: a missing
    SQLite file is reported, never created)."""
    from salvagelane import environment
    from salvagelane.store import current_revision, head_revision, masked_url, unknown_revision

    url = environment.database_url(database)
    current = current_revision(url, read_only=True)
    head = head_revision()
    if current == head:
        state = "up to date"
    elif unknown_revision(url, current) is not None:
        state = "unknown to this salvagelane: a newer one wrote it; upgrade salvagelane"
    else:
        state = "run salvagelane db upgrade"
    # A revision this salvagelane does not know is whatever the database holds.
    shown = line(current or "none")
    click.echo(f"{masked_url(url)}: revision {shown} (newest {head}: {state})")


@db_group.command("recover")
@database_option
def db_recover_command(database: str | None) -> None:
    """Import model outputs that were spooled to disk while the database refused them.

    When the database cannot take a model call's output (locked, full, gone), the run
    writes it to the spool directory ($SALVAGELANE_SPOOL_DIR, else salvagelane-spool/
    beside a SQLite file, else $XDG_STATE_HOME/salvagelane/spool) and fails naming the
    file. Every command that opens the database imports such files first; this one does
    it by hand and says what it did. A file is removed only once its attempt is
    committed, and an attempt already stored is never stored twice. Exit 1 when a file
    could not be imported (it stays, with the reason printed).
    """
    from salvagelane import environment
    from salvagelane.store import Store
    from salvagelane.store.spool import Imported, Spool, recover

    url = environment.database_url(database)
    spool = Spool(environment.spool_dir(url))
    with Store.open(url) as store:
        recovery = recover(store, spool)
        where = store.url
    click.echo(f"{line(where)}: spool {line(str(spool.directory))}")
    for done in recovery.files:
        if done.removed and done.entry is not None:
            size = (
                "no output" if done.entry.raw_length is None else f"{done.entry.raw_length:,} bytes"
            )
            verb = "imported" if done.outcome is Imported.IMPORTED else "already stored, removed"
            click.echo(
                f"  {verb}: attempt {done.entry.number} of run {line(done.entry.run_id)} "
                f"({size}) from {line(done.path.name)}"
            )
        elif done.other_database:
            click.echo(
                f"  left for its database: {line(done.path.name)}: {line(str(done.problem))}"
            )
        elif done.outcome in (Imported.IMPORTED, Imported.ALREADY_STORED):
            click.echo(f"  stored, but the file stays: {line(str(done.problem))}")
        else:
            click.echo(f"  NOT imported, kept: {line(str(done.path))}: {line(str(done.problem))}")
    stored = (Imported.IMPORTED, Imported.ALREADY_STORED)
    unremoved = sum(done.outcome in stored for done in recovery.failed)
    summary = (
        f"{len(recovery.imported)} imported, "
        f"{len(recovery.failed) - unremoved} could not be imported"
        if recovery.files
        else "nothing to recover"
    )
    if unremoved:
        summary += f", {unremoved} stored but not removed"
    if recovery.elsewhere:
        summary += f", {len(recovery.elsewhere)} left for another database"
    click.echo(summary)
    if recovery.failed:
        raise click.exceptions.Exit(EXIT_INVALID)
