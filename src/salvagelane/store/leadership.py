"""One scheduler leader at a time: who may fire scheduled runs against a database.

PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) held on a dedicated
connection for as long as the node leads. The server releases it when that connection
ends, so a leader that is killed (or whose host vanishes, once TCP keepalives notice)
frees the lock for a standby without anyone cleaning up.

SQLite: a single node only. An exclusive, non-blocking ``flock`` on a file next to the
database refuses a second ``salvagelane serve`` on the same file; the kernel releases it
when the process dies.

Leadership only decides who fires. Each fire is still claimed by its run row (the unique
index on runs (instruction_id, scheduled_for)), so even two nodes that both believe they
lead cannot run one fire twice.
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from salvagelane.errors import DatabaseOpenError, ServeLockedError, StoreError
from salvagelane.store.engine import (
    database_url,
    describe,
    masked_url,
    require_postgres_driver,
)

LOCK_NAME = "salvagelane.scheduler"
SCHEDULER_LOCK_KEY = -5222849904921373575
"""The advisory lock key of the scheduler: the first 8 bytes of SHA-256 of
:data:`LOCK_NAME` as a signed big-endian 64-bit integer (see :func:`lock_key`). Fixed, so
every salvagelane version contends for the same lock."""

APPLICATION_NAME = "salvagelane-scheduler-leader"
"""How the leader's connection shows in ``pg_stat_activity``."""

_CONNECT_ARGS = {
    "application_name": APPLICATION_NAME,
    "connect_timeout": 10,
    # A leader whose host disappears must lose the lock in bounded time: the server drops
    # the session once keepalives go unanswered (about 30 + 3 * 10 seconds).
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class LeaderLock(Protocol):
    """What the scheduler needs of a leader lock, on either backend."""

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this object now holds it."""
        ...

    def acquire(self) -> None:
        """Take the lock, or raise StoreError saying who holds it."""
        ...

    def release(self) -> None:
        """Give the lock up (nothing happens when it is not held)."""
        ...

    def is_held(self) -> bool:
        """Whether this object still holds the lock."""
        ...


class _HeldWhileInside(abc.ABC):
    """``with lock:`` takes the lock (or raises) and gives it up on the way out."""

    @abc.abstractmethod
    def acquire(self) -> None: ...

    @abc.abstractmethod
    def release(self) -> None: ...

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class PostgresLeaderLock(_HeldWhileInside):
    """The scheduler leader lock on a PostgreSQL database (a session advisory lock).

    ``try_acquire`` opens a dedicated connection (not pooled, autocommit, so it never
    sits idle in a transaction) and keeps it open while the lock is held. ``is_held``
    asks the server, so a connection that was terminated or lost reads as not held.
    Not thread-safe: one thread (the scheduler's) uses it.
    """

    def __init__(self, url: str, *, key: int = SCHEDULER_LOCK_KEY) -> None:
        normalised = database_url(url)
        if sa.make_url(normalised).get_backend_name() != "postgresql":
            raise StoreError(f"{masked_url(normalised)}: not a PostgreSQL database")
        # Before a serve starts anything: its engine is made only when it tries to lead.
        require_postgres_driver(normalised)
        self._url = normalised
        self.key = key
        self._engine: Engine | None = None
        self._connection: Connection | None = None

    @property
    def url(self) -> str:
        """The database URL, password masked."""
        return masked_url(self._url)

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the lock's connection, while it is open."""
        if self._connection is None:
            return None
        pid = self._connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        return int(pid)

    def try_acquire(self) -> bool:
        if self._connection is not None:
            if self.is_held():
                return True
            self._close()
        engine = sa.create_engine(
            self._url,
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
            connect_args=_CONNECT_ARGS,
        )
        connection: Connection | None = None
        try:
            connection = engine.connect()
            acquired = bool(
                connection.execute(
                    sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}
                ).scalar_one()
            )
        except SQLAlchemyError as exc:
            if connection is not None:
                connection.close()
            engine.dispose()
            raise StoreError(
                f"{self.url}: take the scheduler leader lock failed: {describe(exc, self._url)}"
            ) from exc
        if not acquired:
            connection.close()
            engine.dispose()
            return False
        self._engine, self._connection = engine, connection
        return True

    def acquire(self) -> None:
        if not self.try_acquire():
            raise StoreError(
                f"{self.url}: another salvagelane scheduler holds the leader lock "
                f"(advisory lock {self.key})"
            )

    def is_held(self) -> bool:
        if self._connection is None:
            return False
        try:
            held = self._connection.execute(
                sa.text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND pid = pg_backend_pid() AND granted AND objsubid = 1 "
                    "AND classid::bigint = :classid AND objid::bigint = :objid"
                ),
                {"classid": (self.key >> 32) & 0xFFFFFFFF, "objid": self.key & 0xFFFFFFFF},
            ).scalar_one()
        except SQLAlchemyError:
            # The connection is gone (terminated, network lost): so is the lock.
            self._close()
            return False
        return bool(held)

    def release(self) -> None:
        if self._connection is None:
            return
        try:
            self._connection.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
        except SQLAlchemyError:
            pass  # The connection is gone, and the lock with it.
        finally:
            self._close()

    def _close(self) -> None:
        connection, engine = self._connection, self._engine
        self._connection = self._engine = None
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                connection.close()
        if engine is not None:
            engine.dispose()


class SqliteServeLock(_HeldWhileInside):
    """Refuses a second ``salvagelane serve`` on one SQLite file (any process, this host).

    An exclusive non-blocking ``flock`` on ``<database file>.serve.lock``. The lock file is
    left in place after release: deleting it would let two processes lock different files.
    Like every flock, it does not work across hosts on network file systems; SQLite itself
    should not be shared that way either.
    """

    def __init__(self, database_path: Path) -> None:
        self.database_path = Path(database_path)
        self.lock_path = self.database_path.with_name(self.database_path.name + ".serve.lock")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DatabaseOpenError(
                f"{self.database_path}: cannot open the serve lock {self.lock_path}: "
                f"{exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise StoreError(
                f"{self.database_path}: cannot lock {self.lock_path}: {exc.strerror or exc}"
            ) from exc
        # For people looking: which process serves. The lock, not this text, is what counts.
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self) -> None:
        if not self.try_acquire():
            raise ServeLockedError(
                f"another salvagelane serve is already running on {self.database_path} "
                f"(lock {self.lock_path}); SQLite supports a single scheduler node"
            )

    def is_held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def leader_lock_for(url: str) -> PostgresLeaderLock | SqliteServeLock:
    """The leader lock for the database at ``url``: an advisory lock on PostgreSQL, a
    file lock beside the database file on SQLite."""
    normalised = database_url(url)
    parsed = sa.make_url(normalised)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return PostgresLeaderLock(normalised)
    if backend == "sqlite":
        path = parsed.database
        if not path or path == ":memory:" or path.startswith("file:"):
            raise StoreError(
                f"{masked_url(parsed)}: a scheduler needs a SQLite database file "
                "(sqlite:///PATH), not an in-memory or URI database"
            )
        return SqliteServeLock(Path(path).resolve())
    raise StoreError(f"{masked_url(parsed)}: no leader lock for a {backend} database")
