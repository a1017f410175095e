"""The PostgreSQL test database handle, importable by name from any test directory
(``conftest`` is ambiguous once several test folders have one)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


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
