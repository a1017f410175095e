"""The PostgreSQL test database handle, importable by name from any test directory
(``conftest`` is ambiguous once several test folders have one), and the scratch database
the tests and the benchmarks create beside the server's own."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa


@contextmanager
def scratch_database(server: str, prefix: str) -> Iterator[str]:
    """A new, uniquely named database on the server of the URL ``server`` (other runs may
    share that server), yielded as its URL and dropped at the end."""
    server_url = sa.make_url(server)
    if server_url.drivername == "postgresql":
        server_url = server_url.set(drivername="postgresql+psycopg")
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield server_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            # A leaked pool connection would make DROP DATABASE wait or fail.
            connection.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
        admin.dispose()


@dataclass(frozen=True, kw_only=True, slots=True)
class PostgresDatabase:
    """The session's own database on the shared server."""

    url: str

    def reset(self) -> None:
        """Drop every table (and the migration stamp) left by the previous test."""
        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("DROP SCHEMA public CASCADE")
                connection.exec_driver_sql("CREATE SCHEMA public")
        finally:
            engine.dispose()
