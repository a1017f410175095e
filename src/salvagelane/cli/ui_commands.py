"""``salvagelane ui``: the review page over the store, on this machine.

Exit codes: 0 stopped (Ctrl-C or SIGTERM, once the URL is printed); 2 a port in use,
a database that cannot be opened, a reviewers file that cannot be used, bad options.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from salvagelane.cli.options import (
    HOST,
    Command,
    actor_of,
    by_option,
    database_option,
    instructions_option,
)
from salvagelane.cli.wiring import open_store
from salvagelane.safe_text import line


@click.command("ui", cls=Command)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    type=HOST,
    help="Address to listen on. Anything but a loopback address is warned about, and then "
    "every page needs the token.",
)
@click.option(
    "--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port."
)
@click.option(
    "--reviewers",
    "reviewers_file",
    metavar="FILE",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Named reviewers: a file of name:token lines (chmod 600). Each reviewer signs in "
    "with their own token and their name is the actor of every change they make; "
    "$SALVAGELANE_UI_TOKEN and --by are then not used.",
)
@by_option
@instructions_option
@database_option
def ui_command(
    host: str,
    port: int,
    reviewers_file: Path | None,
    by: str | None,
    instructions_dir: Path,
    database: str | None,
) -> None:
    """Serve the review page: the quarantine queue, items, runs and health, in a browser.

    Prints the URL to open: it carries the access token every change needs
    ($SALVAGELANE_UI_TOKEN, else a new one each start). Without the token pages can only
    be read, and only when the server listens on 127.0.0.1. Approvals, rejections and
    fixtures go through the same code as `salvagelane quarantine`. With --reviewers
    each named reviewer opens the URL with their own token. Stops on Ctrl-C.
    """
    from salvagelane import environment
    from salvagelane.ui.reviewers import Reviewer, load_reviewers
    from salvagelane.ui.security import Access, is_loopback
    from salvagelane.ui.server import bind, serve

    reviewers: tuple[Reviewer, ...] = ()
    if reviewers_file is not None:
        if by is not None:
            raise click.UsageError(
                "--by and --reviewers: with named reviewers each change takes the name of "
                "the reviewer whose token signed in"
            )
        reviewers = load_reviewers(reviewers_file)
        token = ""
    else:
        token = environment.ui_token() or secrets.token_urlsafe(24)
    loopback = is_loopback(host)
    with open_store(database) as store:
        from salvagelane.ui.app import Settings

        sock = bind(host, port)
        bound_port = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        settings = Settings(
            store=store,
            access=Access(token=token, loopback=loopback, reviewers=reviewers),
            instructions_dir=instructions_dir,
            actor=actor_of(by),
        )

        def ready() -> None:
            if not loopback:
                click.echo(
                    f"warning: listening on {line(host)}, not 127.0.0.1: anyone who can "
                    "reach it and has the token can review; every page needs the token",
                    err=True,
                )
            click.echo(f"salvagelane ui on {line(store.url)}")
            if reviewers:
                if environment.variable_state("SALVAGELANE_UI_TOKEN") == "set":
                    click.echo(
                        "note: SALVAGELANE_UI_TOKEN is not used: with --reviewers only the "
                        "reviewers' own tokens sign in",
                        err=True,
                    )
                names = ", ".join(line(r.name) for r in reviewers)
                click.echo(f"reviewers: {names} (from {line(str(reviewers_file))})")
                # Never a reviewer's token: each reviewer puts in their own.
                click.echo(f"open http://{shown}:{bound_port}/?token=YOUR-TOKEN")
                return
            click.echo(f"open http://{shown}:{bound_port}/?token={token}")

        serve(settings, sock, ready)
