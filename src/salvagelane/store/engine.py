"""Database URLs, engines, and schema migrations (Alembic, run in-process).

SQLite connections run in WAL mode with a busy timeout and foreign keys on, and every
transaction starts with ``BEGIN IMMEDIATE``: a writer takes the write lock when it
begins rather than on its first write, so two processes never deadlock upgrading a read
lock, and the busy timeout makes the second one wait instead of failing.
"""

from __future__ import annotations

import errno
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import sqlalchemy as sa
import tenacity
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from salvagelane.errors import (
    DatabaseOpenError,
    DatabaseUrlError,
    MissingExtraError,
    OutdatedDatabaseError,
    StoreError,
    not_utf8,
)

if TYPE_CHECKING:  # imported by the commands that migrate, and only by them
    from alembic.config import Config

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
    _require_text(url)
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


def _require_text(url: str) -> None:
    """DatabaseUrlError when ``url`` holds a byte that is not UTF-8 (Python passes one on
    from the command line or the environment as a lone surrogate, which no driver takes)."""
    try:
        url.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        why = not_utf8(exc)
    except UnicodeEncodeError as exc:
        why = f"a lone surrogate at offset {exc.start}"
    else:
        return
    # The text may hold a password, so it is not repeated.
    raise DatabaseUrlError(f"database URL is not well formed: {why} (expected text)")


def _parse(url: str) -> URL:
    try:
        return sa.make_url(url)
    except ArgumentError as exc:
        # The text may hold a password, so it is not repeated.
        raise DatabaseUrlError(
            f"database URL is not well formed: {exc.__class__.__name__}"
        ) from exc
    except ValueError as exc:
        # SQLAlchemy reads a port that is not a number (as after an IPv6 host without
        # its closing "]") with int(), whose message would quote the URL.
        raise DatabaseUrlError(
            "database URL is not well formed: its port is not a number (expected "
            "HOST:PORT, or [IPv6]:PORT with the brackets)"
        ) from exc


SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})
"""Query parameters libpq reads as secrets: ``?password=`` stands for the userinfo's
password, ``?sslpassword=`` unlocks the client key. (``passfile`` names a file: not one.)"""

_MASK = "***"
_PLACEHOLDER = "MaskedSecretValue"  # survives URL quoting, unlike "***"


def masked_url(url: str | URL) -> str:
    """``url`` as text with any password replaced by ``***``: the userinfo's, and the
    values of the query parameters in :data:`SECRET_QUERY_KEYS`."""
    parsed = _parse(url) if isinstance(url, str) else url
    hidden = {key: _PLACEHOLDER for key in parsed.query if key.lower() in SECRET_QUERY_KEYS}
    if hidden:
        parsed = parsed.update_query_dict(hidden)
    return parsed.render_as_string(hide_password=True).replace(_PLACEHOLDER, _MASK)


def url_secrets(url: str | URL) -> list[str]:
    """The secret values ``url`` carries: its password and those of the query parameters
    in :data:`SECRET_QUERY_KEYS`; none for text that is not a URL."""
    try:
        parsed = _parse(url) if isinstance(url, str) else url
    except DatabaseUrlError:
        return []
    found = [] if parsed.password is None else [str(parsed.password)]
    for key, value in parsed.query.items():
        if key.lower() in SECRET_QUERY_KEYS:
            found.extend((value,) if isinstance(value, str) else value)
    return [secret for secret in found if secret]


def describe(exc: BaseException, url: str | URL | None = None) -> str:
    """The driver's own message for ``exc`` (first line), without SQL or parameters, nor
    any secret of ``url`` (a driver may quote what it was given)."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    first = text[0] if text else cause.__class__.__name__
    # Longest first: a secret holding another is replaced whole.
    for secret in sorted(url_secrets(url) if url is not None else (), key=len, reverse=True):
        first = first.replace(secret, _MASK)
    return first


def require_postgres_driver(url: str | URL) -> None:
    """MissingExtraError unless PostgreSQL's driver (psycopg, the ``postgres`` extra) is
    installed: SQLAlchemy imports it only when an engine for ``url`` is made, and its
    ImportError would name neither the extra nor the database."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"{masked_url(url)}: a PostgreSQL database needs its driver (psycopg)",
            extra="postgres",
        ) from exc


def make_engine(
    url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, read_only: bool = False
) -> Engine:
    """An engine for ``url`` (normalised by :func:`database_url`), set up for salvagelane.

    A SQLite URL's ``?timeout=SECONDS`` (the sqlite3 module's own parameter) sets the busy
    timeout instead of ``busy_timeout``.

    ``read_only``: the engine can only read. A SQLite file is opened read-only (never
    created: DatabaseOpenError "no database at PATH" when it is missing), a PostgreSQL
    session has ``default_transaction_read_only`` on. Otherwise a SQLite file that cannot
    be created or written where it is (a missing or read-only directory, a read-only file)
    is refused up front with DatabaseOpenError saying which and why, rather than with
    SQLite's "unable to open database file".
    """
    url = database_url(url)
    with store_errors(url, "create engine"):
        parsed = sa.make_url(url)
        if parsed.get_backend_name() == "postgresql":
            require_postgres_driver(parsed)
            connect_args: dict[str, Any] = {}
            if read_only:
                # Set by the server for the whole session, so no transaction of this engine
                # can write, whatever the code above it does.
                options = parsed.query.get("options", "")
                options = options if isinstance(options, str) else " ".join(options)
                connect_args["options"] = f"{options} -c default_transaction_read_only=on".strip()
            # A pooled connection may have been closed by the server since its last use.
            return sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args)
        if "timeout" in parsed.query:
            busy_timeout = _seconds(parsed, parsed.query["timeout"])
        if read_only:
            parsed = _read_only_sqlite(parsed)
        else:
            _check_writable_sqlite(parsed)
        engine = sa.create_engine(parsed, connect_args={"timeout": busy_timeout})
    _configure_sqlite(engine, busy_timeout, read_only=read_only)
    return engine


def _sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names as a plain path (None for a ``file:`` URI, whose path
    SQLite itself resolves)."""
    name = url.database or ""
    if _flag(url, "uri") or name.startswith("file:"):
        return None
    path = Path(name).resolve()
    try:
        path.lstat()
    except OSError as exc:
        # A missing file is for the caller to create or refuse; a name too long, or a
        # directory on the way that may not be searched, is refused here.
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise DatabaseOpenError(f"cannot open the database {path}: {exc.strerror}") from exc
    return path


def _flag(url: URL, key: str) -> bool:
    value = url.query.get(key)
    text = value if isinstance(value, str) else (value[-1] if value else "")
    return text.lower() in ("1", "true", "yes", "on")


def _read_only_sqlite(url: URL) -> URL:
    """``url`` as a read-only SQLite URI (``mode=ro``): SQLite never creates the file.

    A read-only connection to a WAL database creates the ``-wal`` and ``-shm`` files when
    they are missing (and cannot in a directory it may not write), and cannot remove them
    when it closes: files owned by whoever read, which a writer of another user then
    cannot write. So when no writer is active (no ``-wal`` file), the file is opened
    ``immutable``, read without those files or locks, as SQLite documents for read-only
    media; only a writer that starts and checkpoints during this short read could make
    it fail. With a writer active, the read takes part in its WAL as usual.
    """
    path = _sqlite_file(url)
    if path is None:
        return url.update_query_dict({"mode": "ro"})
    if not path.exists():
        raise DatabaseOpenError(
            f"no database at {path}: a command that only reads never creates one "
            "(check --database or $SALVAGELANE_DATABASE_URL; a run creates the database)"
        )
    query: dict[str, str] = {"mode": "ro", "uri": "true"}
    if not path.with_name(path.name + "-wal").exists():
        query["immutable"] = "1"
    return url.set(database=f"file:{quote(str(path))}").update_query_dict(query)


def _check_writable_sqlite(url: URL) -> None:
    """DatabaseOpenError, naming the directory or file and what is missing, when SQLite
    could not create or write the database file ``url`` names, or its journal files."""
    path = _sqlite_file(url)
    if path is None:
        return
    verb = "write" if path.exists() else "create"
    directory = path.parent
    if not directory.is_dir():
        raise DatabaseOpenError(
            f"cannot create the database {path}: directory {directory} does not exist "
            "(create it, or give --database another path)"
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise DatabaseOpenError(
            f"cannot write the database {path}: no read and write permission on the file"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        why = (
            f"SQLite keeps {path.name}-wal and {path.name}-shm beside the database while "
            "it writes; commands that only read still work"
            if path.exists()
            else f"SQLite creates {path.name} and its -wal and -shm files there"
        )
        raise DatabaseOpenError(
            f"cannot {verb} the database {path}: no write permission on directory "
            f"{directory} ({why})"
        )


def _seconds(url: URL, value: str | tuple[str, ...]) -> float:
    text = value if isinstance(value, str) else value[-1]
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        # DatabaseUrlError (exit 2): the URL is to fix. inf would overflow the busy timeout
        # SQLite takes in milliseconds, and nan passes every comparison.
        raise DatabaseUrlError(
            f"{masked_url(url)}: timeout={text!r}: expected the busy timeout in seconds "
            "(a finite number, 0 or more)"
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


def _configure_sqlite(engine: Engine, busy_timeout: float, *, read_only: bool = False) -> None:
    # The recipe from SQLAlchemy's SQLite docs ("Enabling Non-Legacy SQLite Transactional
    # Modes"): the sqlite3 module stops issuing BEGIN itself and we issue BEGIN IMMEDIATE.
    # A read-only connection switches nothing (the journal mode is a write) and begins
    # deferred transactions: BEGIN IMMEDIATE asks for the write lock.
    def on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL needs a lock another connection may hold.
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
            else:
                _switch_to_wal(cursor)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    def on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    sa.event.listen(engine, "connect", on_connect)
    sa.event.listen(engine, "begin", on_begin)


# --- migrations -----------------------------------------------------------------------------


KNOWN_REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010")
"""Every revision the packaged migrations hold, oldest first. Known without Alembic,
which only the commands that migrate import (it is a quarter of a read command's
start); tests/integration/test_migrations.py holds it equal to Alembic's."""

HEAD_REVISION = KNOWN_REVISIONS[-1]
"""The migrations' head: the revision this salvagelane's code expects."""

VERSION_TABLE = "alembic_version"


def _alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    # No alembic.ini: the environment ships inside the package, and env.py runs the
    # migrations on the connection handed over here (one transaction, our pragmas).
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def alembic_head() -> str:
    """The head revision as Alembic reads it from the packaged migrations."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "the packaged migrations have no head revision"
    return head


def head_revision() -> str:
    """The revision the code of this salvagelane expects (the migrations' head)."""
    return HEAD_REVISION


def revision_of(connection: Connection) -> str | None:
    """The revision the database on ``connection`` is at (None: never migrated), read
    from Alembic's version table as Alembic reads it."""
    if not sa.inspect(connection).has_table(VERSION_TABLE):
        return None
    revisions = (
        connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    )
    if len(revisions) > 1:
        raise StoreError(
            f"{masked_url(connection.engine.url)}: {VERSION_TABLE} holds "
            f"{len(revisions)} revisions ({', '.join(revisions)}): expected one"
        )
    return revisions[0] if revisions else None


def unknown_revision(url: str | URL, current: str | None) -> OutdatedDatabaseError | None:
    """The error for a database at ``current``, a revision none of this salvagelane's
    migrations know (a newer salvagelane migrated it), or None for a known revision.

    Alembic cannot migrate from a revision it cannot locate, so telling the operator to
    run ``salvagelane db upgrade`` would only lead to "Can't locate revision".
    """
    if current is None or current in KNOWN_REVISIONS:
        return None
    return OutdatedDatabaseError(
        f"{masked_url(url)}: the database schema is at revision {current!r}, unknown to "
        f"this salvagelane (it knows revisions up to {HEAD_REVISION}): a newer salvagelane "
        "wrote it; upgrade salvagelane to use this database (salvagelane db upgrade "
        "cannot migrate it)"
    )


def _known_revision_of(connection: Connection, url: str) -> str | None:
    """The database's revision; OutdatedDatabaseError when this salvagelane does not know it."""
    current = revision_of(connection)
    if (error := unknown_revision(url, current)) is not None:
        raise error
    return current


def upgrade_connection(connection: Connection, revision: str = "head") -> None:
    """Migrate the database on ``connection`` to ``revision`` inside its transaction."""
    from alembic import command

    command.upgrade(_alembic_config(connection), revision)


def _migration_errors() -> tuple[type[Exception], ...]:
    # Alembic's own error, once something imported it: before that it cannot be raised.
    util = sys.modules.get("alembic.util")
    return (util.CommandError,) if util is not None else ()


@contextmanager
def store_errors(url: str | URL, operation: str) -> Iterator[None]:
    """Translate database and migration errors in the body into StoreError, once.

    The message names the database (password masked), the operation and the driver's
    reason; the original stays attached as ``__cause__``.
    """
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, (SQLAlchemyError, *_migration_errors())):
            raise
        raise StoreError(f"{masked_url(url)}: {operation} failed: {describe(exc, url)}") from exc


def _locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's answer to a lock another connection held past the busy
    timeout (SQLITE_BUSY, SQLITE_LOCKED and their extended codes)."""
    cause = getattr(exc, "orig", None) or exc
    code = getattr(cause, "sqlite_errorcode", None)
    return (
        isinstance(cause, sqlite3.OperationalError)
        and isinstance(code, int)
        and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    )


@contextmanager
def opening_errors(url: str | URL, operation: str) -> Iterator[None]:
    """:func:`store_errors` for the first transaction a command makes: a SQLite database
    another process kept locked past the busy timeout is DatabaseOpenError (the command
    could not start; nothing was read or written), like one that cannot be reached."""
    try:
        with store_errors(url, operation):
            yield
    except StoreError as exc:
        if exc.__cause__ is None or not _locked(exc.__cause__):
            raise
        raise DatabaseOpenError(
            f"{masked_url(url)}: cannot open the database: {operation} failed: "
            f"{describe(exc.__cause__)} (another process held its lock for the whole busy "
            "timeout; nothing was read or written: try again when it is done)"
        ) from exc.__cause__


def connect(engine: Engine) -> Connection:
    """A connection of ``engine``; DatabaseOpenError (the command cannot start: nothing
    was read or written) when the database cannot be reached or opened at all."""
    try:
        return engine.connect()
    except SQLAlchemyError as exc:
        raise DatabaseOpenError(
            f"{masked_url(engine.url)}: cannot open the database: {describe(exc, engine.url)}"
        ) from exc


def _with_connection(
    url: str, operation: str, work: Callable[[Connection], T], *, read_only: bool = False
) -> T:
    """Run ``work`` in one transaction on a short-lived engine for ``url``."""
    engine = make_engine(url, read_only=read_only)
    try:
        with connect(engine) as connection, opening_errors(url, operation), connection.begin():
            return work(connection)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (default: head), atomically."""

    def work(connection: Connection) -> None:
        _known_revision_of(connection, url)
        upgrade_connection(connection, revision)

    _with_connection(url, f"upgrade to {revision}", work)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"``: no tables)."""
    _with_connection(
        url,
        f"downgrade to {revision}",
        lambda c: _downgrade_connection(c, url, revision),
    )


def _downgrade_connection(connection: Connection, url: str, revision: str) -> None:
    from alembic import command

    _known_revision_of(connection, url)
    command.downgrade(_alembic_config(connection), revision)


def current_revision(url: str, *, read_only: bool = False) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated). ``read_only``:
    only read (a missing SQLite file is DatabaseOpenError, never created)."""
    return _with_connection(url, "read the schema revision", revision_of, read_only=read_only)
