"""The packaged Alembic migrations: they build exactly the models' schema, and undo it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from salvagelane.errors import DuplicateFireError
from salvagelane.store import (
    ReportItemRecord,
    ReportRecord,
    Store,
    current_revision,
    downgrade,
    head_revision,
    make_engine,
    upgrade,
)
from salvagelane.store.engine import MIGRATIONS_DIR
from salvagelane.store.models import Base

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()


def test_migration_environment_ships_inside_the_package() -> None:
    # Installed from a wheel there is no alembic.ini: everything must be under the package.
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0002_fire_claims.py").is_file()
    assert head_revision() == "0002"


def test_upgrade_builds_exactly_the_models_schema(database_url: str) -> None:
    assert current_revision(database_url) is None

    upgrade(database_url)

    assert current_revision(database_url) == head_revision()
    assert _table_names(database_url) == set(Base.metadata.tables) | {"alembic_version"}
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_downgrade_to_base_leaves_no_tables(database_url: str) -> None:
    upgrade(database_url)
    # With rows in the runs <-> attempts cycle, which the downgrade has to break.
    with Store.open(database_url, auto_upgrade=False) as store:
        _seed_finished_run(store, scheduled_for=None, items=1)

    downgrade(database_url, "base")

    # Alembic keeps its (now empty) version table; every table of ours is gone.
    assert _table_names(database_url) == {"alembic_version"}
    assert current_revision(database_url) is None
    # And the way back up still works.
    upgrade(database_url)
    assert _table_names(database_url) == set(Base.metadata.tables) | {"alembic_version"}


def test_fire_claims_migrate_a_database_that_has_runs(database_url: str) -> None:
    # 0002 adds the one-run-per-fire index to a runs table whose rows other tables
    # reference; on SQLite (foreign keys on) a table rebuild would fail here.
    upgrade(database_url, "0001")
    with Store(make_engine(database_url)) as store:
        run_id, attempt_id = _seed_finished_run(store, scheduled_for=NOW, items=0)

    upgrade(database_url)

    assert current_revision(database_url) == "0002"
    with Store.open(database_url, auto_upgrade=False) as store:
        detail = store.get_run(run_id)
        assert (detail.status, detail.best_attempt_id) == ("ok", attempt_id)
        assert [a.raw_output for a in detail.attempts] == ["[]"]
        with pytest.raises(DuplicateFireError):
            store.start_run(
                instruction_id="daily",
                definition_sha256="d" * 64,
                trigger="schedule",
                scheduled_for=NOW,
                now=NOW,
            )

    downgrade(database_url, "0001")
    assert current_revision(database_url) == "0001"
    assert _table_names(database_url) == set(Base.metadata.tables) | {"alembic_version"}


def _seed_finished_run(
    store: Store, *, scheduled_for: datetime | None, items: int
) -> tuple[str, str]:
    """A finished run with one attempt and a report: rows in the runs <-> attempts cycle."""
    run_id = store.start_run(
        instruction_id="daily",
        definition_sha256="d" * 64,
        trigger="manual" if scheduled_for is None else "schedule",
        scheduled_for=scheduled_for,
        now=NOW,
    )
    attempt_id = store.add_attempt(
        run_id,
        number=1,
        started_at=NOW,
        request={"model": "m"},
        raw_output="[]",
        finish_reason="stop",
        native_finish_reason="stop",
        usage=None,
        model="m",
        request_id=None,
        latency_seconds=0.5,
        http_status=200,
        provider_error=None,
        stream_error=None,
        finished_at=NOW,
    )
    report = ReportRecord(
        attempt_id=attempt_id,
        envelope={},
        partial=False,
        status="ok",
        document_valid=True,
        truncated=False,
        finish_reason="stop",
        counts={"accepted": items},
        items=[
            ReportItemRecord(source_index=n, data={}, span_start=1, span_end=3)
            for n in range(items)
        ],
    )
    store.finish_run(
        run_id, status="ok", finished_at=NOW, error=None, report=report, quarantined=[]
    )
    return run_id, attempt_id
