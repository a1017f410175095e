"""The scheduler leader lock: a PostgreSQL advisory lock, and a file lock for SQLite."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.errors import StoreError
from salvagelane.store import (
    SCHEDULER_LOCK_KEY,
    PostgresLeaderLock,
    SqliteServeLock,
    leader_lock_for,
)
from salvagelane.store.leadership import LOCK_NAME, lock_key


def test_the_lock_key_is_derived_from_its_name() -> None:
    assert lock_key(LOCK_NAME) == SCHEDULER_LOCK_KEY
    assert -(2**63) <= SCHEDULER_LOCK_KEY < 2**63


def test_leader_lock_for_picks_the_backend(tmp_path: Path) -> None:
    sqlite_lock = leader_lock_for(f"sqlite:///{tmp_path / 'a.db'}")
    assert isinstance(sqlite_lock, SqliteServeLock)
    assert sqlite_lock.lock_path == tmp_path / "a.db.serve.lock"
    assert isinstance(leader_lock_for("postgresql://u:secret@db/x"), PostgresLeaderLock)
    with pytest.raises(StoreError, match="in-memory"):
        leader_lock_for("sqlite://")
    with pytest.raises(StoreError, match="unsupported database"):
        leader_lock_for("mysql://u@db/x")


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def postgres_url(postgres_database: Any) -> str:
    url: str = postgres_database.url
    return url


@pytest.fixture
def locks(postgres_url: str) -> Iterator[list[PostgresLeaderLock]]:
    made: list[PostgresLeaderLock] = []
    yield made
    for lock in made:
        lock.release()


def _terminate(url: str, pid: int) -> None:
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            assert connection.execute(
                sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}
            ).scalar_one()
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_one_postgres_leader_at_a_time(postgres_url: str, locks: list[PostgresLeaderLock]) -> None:
    first, second = PostgresLeaderLock(postgres_url), PostgresLeaderLock(postgres_url)
    locks += [first, second]

    assert first.try_acquire() is True
    assert first.is_held() is True
    assert second.try_acquire() is False
    assert second.is_held() is False
    with pytest.raises(StoreError, match="another salvagelane scheduler holds the leader lock"):
        second.acquire()
    # Acquiring again while holding is a no-op that keeps the lock.
    assert first.try_acquire() is True

    first.release()
    assert first.is_held() is False
    assert second.try_acquire() is True
    assert first.try_acquire() is False


@pytest.mark.postgres
def test_a_killed_leader_releases_the_lock(
    postgres_url: str, locks: list[PostgresLeaderLock]
) -> None:
    leader, standby = PostgresLeaderLock(postgres_url), PostgresLeaderLock(postgres_url)
    locks += [leader, standby]
    assert leader.try_acquire()
    pid = leader.backend_pid
    assert pid is not None

    _terminate(postgres_url, pid)

    # The server ends the session and its locks; the standby takes over.
    deadline = time.monotonic() + 10
    while not standby.try_acquire():
        assert time.monotonic() < deadline, "the lock outlived its connection"
        time.sleep(0.05)
    assert standby.is_held() is True
    assert leader.is_held() is False
    assert leader.try_acquire() is False


@pytest.mark.postgres
def test_postgres_lock_as_context_manager(
    postgres_url: str, locks: list[PostgresLeaderLock]
) -> None:
    other = PostgresLeaderLock(postgres_url)
    locks.append(other)
    with PostgresLeaderLock(postgres_url) as lock:
        assert lock.is_held()
        assert other.try_acquire() is False
    assert other.try_acquire() is True


@pytest.mark.postgres
def test_a_different_key_is_a_different_lock(
    postgres_url: str, locks: list[PostgresLeaderLock]
) -> None:
    first, second = PostgresLeaderLock(postgres_url), PostgresLeaderLock(postgres_url, key=42)
    locks += [first, second]
    assert first.try_acquire()
    assert second.try_acquire()


# --- SQLite -------------------------------------------------------------------------------------

_HOLD = """
import sys, time
from pathlib import Path
from salvagelane.store import SqliteServeLock
lock = SqliteServeLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
sys.stdin.read()
lock.release()
"""

_TRY = """
import sys
from pathlib import Path
from salvagelane.errors import StoreError
from salvagelane.store import SqliteServeLock
try:
    with SqliteServeLock(Path(sys.argv[1])):
        print("acquired")
except StoreError as exc:
    print(exc)
"""


def _try_in_another_process(database: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _TRY, str(database)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_second_sqlite_serve_is_refused(tmp_path: Path) -> None:
    database = tmp_path / "salvagelane.db"
    lock = SqliteServeLock(database)

    with lock:
        assert lock.is_held()
        message = _try_in_another_process(database)
        assert message == (
            f"another salvagelane serve is already running on {database} "
            f"(lock {database}.serve.lock); SQLite supports a single scheduler node"
        )

    assert lock.is_held() is False
    assert _try_in_another_process(database) == "acquired"


def test_the_sqlite_lock_held_by_another_process(tmp_path: Path) -> None:
    database = tmp_path / "salvagelane.db"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            lock = SqliteServeLock(database)
            with pytest.raises(StoreError, match="another salvagelane serve is already running"):
                lock.acquire()
            assert lock.try_acquire() is False
        finally:
            holder.kill()  # Killed, not released: the kernel drops the lock with the process.
            holder.wait(timeout=30)

    lock = SqliteServeLock(database)
    assert lock.try_acquire() is True
    lock.release()
