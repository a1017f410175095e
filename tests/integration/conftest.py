"""The database fixtures of tests/support/databases.py (SQLite and PostgreSQL per test,
a spool directory of the test's own) for every integration test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.databases import _private_state_home, database_url, postgres_database
from tests.support.serve import Processes

__all__ = ["_private_state_home", "database_url", "postgres_database", "processes"]


@pytest.fixture
def processes() -> Iterator[Processes]:
    """The real serve and worker processes a test starts, killed at its end."""
    started = Processes()
    try:
        yield started
    finally:
        started.cleanup()
