"""``Store.open(url, read_only=True)``: what the commands that only read open, on SQLite
and PostgreSQL. It creates nothing, migrates nothing and cannot write."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from salvagelane.errors import DatabaseOpenError, OutdatedDatabaseError, StoreError
from salvagelane.store import Store, current_revision, upgrade
from tests.support.postgres import PostgresDatabase

NOW = datetime(2026, 11, 21, 5, 20, tzinfo=UTC)


def start_run(store: Store) -> str:
    return store.start_run(
        instruction_id="daily-triage",
        definition_sha256="0" * 64,
        trigger="manual",
        scheduled_for=None,
        now=NOW,
    )


def tables(url: str) -> list[str]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            return sorted(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()


def test_a_read_only_store_reads_and_cannot_write(database_url: str) -> None:
    upgrade(database_url)
    with Store.open(database_url) as store:
        run_id = start_run(store)

    with Store.open(database_url, read_only=True) as store:
        assert [run.id for run in store.list_runs()] == [run_id]
        assert store.instruction_ids() == ["daily-triage"]
        with pytest.raises(StoreError, match=r"read-only|readonly"):
            start_run(store)

    with Store.open(database_url) as store:
        assert [run.id for run in store.list_runs()] == [run_id]


def test_a_read_only_store_migrates_nothing(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        # An empty file, as `touch` leaves it (a missing one is another test).
        Path(database_url.removeprefix("sqlite:///")).touch()
    with pytest.raises(OutdatedDatabaseError, match="salvagelane db upgrade"):
        Store.open(database_url, read_only=True)
    assert current_revision(database_url, read_only=True) is None
    assert tables(database_url) == []


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for open_it in (
        lambda: Store.open(url, read_only=True),
        lambda: current_revision(url, read_only=True),
    ):
        with pytest.raises(DatabaseOpenError, match=f"no database at {tmp_path / 'typo.db'}"):
            open_it()
    assert list(tmp_path.iterdir()) == []


def test_reading_sqlite_leaves_no_file_beside_it(tmp_path: Path) -> None:
    """A read-only connection to a WAL database would create -wal and -shm files it can
    never remove (owned by the reader); with no writer active it reads immutable."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    with Store.open(url) as store:
        start_run(store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]

    with Store.open(url, read_only=True) as store:
        assert len(store.list_runs()) == 1

    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_reading_sqlite_while_a_writer_is_active_sees_its_commits(tmp_path: Path) -> None:
    """With a writer's WAL present the read takes part in it: the writer's newest
    commit (still in the -wal file, not yet in the database file) is seen."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    with Store.open(url) as writer:
        first = start_run(writer)
        assert (tmp_path / "runs.db-wal").exists()  # the writer's pool holds it open
        with Store.open(url, read_only=True) as reader:
            assert [run.id for run in reader.list_runs()] == [first]
            second = start_run(writer)
            assert {run.id for run in reader.list_runs()} == {first, second}


@pytest.mark.postgres
def test_a_postgres_read_only_session_refuses_writes_on_the_server(
    postgres_database: PostgresDatabase,
) -> None:
    postgres_database.reset()
    upgrade(postgres_database.url)
    with Store.open(postgres_database.url, read_only=True) as store:
        with pytest.raises(StoreError, match="read-only transaction"):
            start_run(store)
        assert store.list_runs() == []
