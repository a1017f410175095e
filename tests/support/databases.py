"""Databases for the store tests (integration and security): a SQLite file, and a
PostgreSQL database of our own.

The PostgreSQL server is named by ``SALVAGELANE_TEST_POSTGRES_URL`` (CI sets it). Other
test runs may share that server, so this session creates a uniquely named database,
empties it before each test, and drops it at the end. Without the variable the
``postgres`` cases are skipped with a note on how to enable them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from salvagelane.store import database_url as normalise_url
from tests.support.postgres import PostgresDatabase, scratch_database

POSTGRES_ENV = "SALVAGELANE_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[PostgresDatabase]:
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(
            f"PostgreSQL tests are off: set {POSTGRES_ENV}="
            "postgresql://postgres@127.0.0.1:5432/test to run them"
        )
    with scratch_database(normalise_url(server), f"salvagelane_test_{os.getpid()}") as url:
        yield PostgresDatabase(url=url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (no tables, no migration stamp) on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'salvagelane.db'}"
    postgres: PostgresDatabase = request.getfixturevalue("postgres_database")
    postgres.reset()
    return postgres.url


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spool directory that defaults to $XDG_STATE_HOME (PostgreSQL) lands in this test's
    own directory, never in the home of whoever runs the tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.delenv("SALVAGELANE_SPOOL_DIR", raising=False)
