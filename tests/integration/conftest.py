"""The database fixtures of tests/support/databases.py (SQLite and PostgreSQL per test,
a spool directory of the test's own) for every integration test."""

from __future__ import annotations

from tests.support.databases import _private_state_home, database_url, postgres_database

__all__ = ["_private_state_home", "database_url", "postgres_database"]
