"""Database URLs, engines, and schema migrations (Alembic, run in-process).

SQLite connections run in WAL mode with a busy timeout and foreign keys on, and every
transaction starts with ``BEGIN IMMEDIATE``: a writer takes the write lock when it
begins rather than on its first write, so two processes never deadlock upgrading a read
lock, and the busy timeout makes the second one wait instead of failing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
import tenacity
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from salvagelane.errors import DatabaseUrlError, StoreError

MIGRATIONS_DIR = Path(__file__).resolve().with_name("migrations")
DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a SQLite connection waits for another writer before giving up."""

T = TypeVar("T")

_PG_PREFIXES = ("postgresql://", "postgres://")
_PG_DRIVER = "postgresql+psycopg://"


def database_url(url: str | None) -> str:
    """``url`` checked and normalised: PostgreSQL URLs are pointed at psycopg 3.

    The default database is the caller's decision; ``None`` is refused. So is a database
    that keeps nothing (:func:`keeps_nothing`): every command that opens the store comes
    through here, so none of them can store a run, a report or a verdict that vanishes
    when it exits. DatabaseUrlError for every refusal.
    """
    if not url:
        raise DatabaseUrlError(
            "no database URL given (expected sqlite:///PATH or postgresql://...)"
        )
    for prefix in _PG_PREFIXES:
        if url.startswith(prefix):
            url = _PG_DRIVER + url[len(prefix) :]
            break
    parsed = _parse(url)
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise DatabaseUrlError(
            f"{masked_url(parsed)}: unsupported database (expected sqlite:///PATH or postgresql://...)"
        )
    if (why := keeps_nothing(parsed)) is not None:
        raise DatabaseUrlError(
            f"{masked_url(parsed)}: {why}: every run, report and review would vanish when "
            "the process exits; give a database file (sqlite:///salvagelane.db, "
            "sqlite:////var/lib/salvagelane/runs.db) or postgresql://user@host/db"
        )
    return url


def keeps_nothing(url: URL) -> str | None:
    """Why the SQLite database ``url`` names lives only as long as its connection (an
    in-memory or a temporary database), or None for a database that persists.

    SQLite keeps nothing for an empty file name (``sqlite://``, ``sqlite:///``: SQLAlchemy
    opens ``:memory:``), ``:memory:``, a URI of ``:memory:``, ``mode=memory`` or the
    ``memdb`` VFS, and a URI with an empty path (a temporary database, deleted on close).
    """
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    for key, memory in (("mode", "memory"), ("vfs", "memdb")):
        value = url.query.get(key, ())
        if memory in ((value,) if isinstance(value, str) else value):
            return f"an in-memory SQLite database ({key}={memory}) keeps nothing"
    if name in ("", ":memory:"):
        return "an in-memory SQLite database keeps nothing"
    if name.startswith("file:"):
        path = name[len("file:") :]
        if path == ":memory:":
            return "an in-memory SQLite database keeps nothing"
        if not path:
            return "a temporary SQLite database (a file: URI without a path) keeps nothing"
    return None


def _parse(url: str) -> URL:
    try:
        return sa.make_url(url)
    except ArgumentError as exc:
        # The text may hold a password, so it is not repeated.
        raise DatabaseUrlError(
            f"database URL is not well formed: {exc.__class__.__name__}"
        ) from exc


def masked_url(url: str | URL) -> str:
    """``url`` as text with any password replaced by ``***``."""
    parsed = _parse(url) if isinstance(url, str) else url
    return parsed.render_as_string(hide_password=True)


def describe(exc: BaseException) -> str:
    """The driver's own message for ``exc`` (first line), without SQL or parameters."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else cause.__class__.__name__


def make_engine(url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Engine:
    """An engine for ``url`` (normalised by :func:`database_url`), set up for salvagelane.

    A SQLite URL's ``?timeout=SECONDS`` (the sqlite3 module's own parameter) sets the busy
    timeout instead of ``busy_timeout``.
    """
    url = database_url(url)
    with store_errors(url, "create engine"):
        parsed = sa.make_url(url)
        if parsed.get_backend_name() == "postgresql":
            # A pooled connection may have been closed by the server since its last use.
            return sa.create_engine(url, pool_pre_ping=True)
        if "timeout" in parsed.query:
            busy_timeout = _seconds(parsed, parsed.query["timeout"])
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout})
    _configure_sqlite(engine, busy_timeout)
    return engine


def _seconds(url: URL, value: str | tuple[str, ...]) -> float:
    text = value if isinstance(value, str) else value[-1]
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise StoreError(
            f"{masked_url(url)}: timeout={text!r}: expected the busy timeout in seconds"
        )
    return seconds


def _wal_switch_race(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc)


def _switch_to_wal(cursor: Any) -> None:
    """Put the database in WAL mode, retrying the race of several new connections.

    Connections opening a brand-new file at once race to switch it to WAL; SQLite
    answers the losers SQLITE_BUSY without calling the busy handler (seen in about 1
    of 12 three-way opens), so the busy timeout cannot help here. A short retry does.
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_wal_switch_race),
        stop=tenacity.stop_after_delay(10),
        wait=tenacity.wait_random(0.02, 0.2),
        reraise=True,
    )
    retrying(cursor.execute, "PRAGMA journal_mode = WAL")


def _configure_sqlite(engine: Engine, busy_timeout: float) -> None:
    # The recipe from SQLAlchemy's SQLite docs ("Enabling Non-Legacy SQLite Transactional
    # Modes"): the sqlite3 module stops issuing BEGIN itself and we issue BEGIN IMMEDIATE.
    def on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL needs a lock another connection may hold.
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            _switch_to_wal(cursor)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    def on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    sa.event.listen(engine, "connect", on_connect)
    sa.event.listen(engine, "begin", on_begin)


# --- migrations -----------------------------------------------------------------------------


def _alembic_config(connection: Connection | None = None) -> Config:
    # No alembic.ini: the environment ships inside the package, and env.py runs the
    # migrations on the connection handed over here (one transaction, our pragmas).
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The revision the code of this salvagelane expects (the migrations' head)."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "the packaged migrations have no head revision"
    return head


def revision_of(connection: Connection) -> str | None:
    """The revision the database on ``connection`` is at (None: never migrated)."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_connection(connection: Connection, revision: str = "head") -> None:
    """Migrate the database on ``connection`` to ``revision`` inside its transaction."""
    command.upgrade(_alembic_config(connection), revision)


@contextmanager
def store_errors(url: str | URL, operation: str) -> Iterator[None]:
    """Translate database and migration errors in the body into StoreError, once.

    The message names the database (password masked), the operation and the driver's
    reason; the original stays attached as ``__cause__``.
    """
    try:
        yield
    except (SQLAlchemyError, CommandError) as exc:
        raise StoreError(f"{masked_url(url)}: {operation} failed: {describe(exc)}") from exc


def _with_connection(url: str, operation: str, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction on a short-lived engine for ``url``."""
    engine = make_engine(url)
    try:
        with store_errors(url, operation), engine.begin() as connection:
            return work(connection)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (default: head), atomically."""
    _with_connection(url, f"upgrade to {revision}", lambda c: upgrade_connection(c, revision))


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"``: no tables)."""
    _with_connection(
        url,
        f"downgrade to {revision}",
        lambda c: command.downgrade(_alembic_config(c), revision),
    )


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated)."""
    return _with_connection(url, "read the schema revision", revision_of)
