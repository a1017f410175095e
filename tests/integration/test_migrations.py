"""The packaged Alembic migrations: they build exactly the models' schema, and undo it."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from salvagelane.errors import DuplicateFireError, OutdatedDatabaseError
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
from salvagelane.store.engine import KNOWN_REVISIONS, MIGRATIONS_DIR, alembic_head, revision_of
from salvagelane.store.models import Base, UTCDateTime
from tests.support.cli import salvagelane

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
    assert (MIGRATIONS_DIR / "versions" / "0003_fire_retries_and_schedules.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0005_outbox_and_bounded_output.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0006_definition_versions.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0007_item_repairs.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0008_queued_runs.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0009_reasked_items.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0010_evals.py").is_file()
    assert head_revision() == "0010"


def test_the_head_the_code_expects_is_alembic_head() -> None:
    # HEAD_REVISION spares read commands importing Alembic: a new migration must bump it.
    assert head_revision() == alembic_head()


def test_the_revisions_the_code_knows_are_alembics() -> None:
    # KNOWN_REVISIONS tells a newer salvagelane's database from an outdated one without
    # Alembic: a new migration must be added to it.
    from alembic.script import ScriptDirectory

    from salvagelane.store.engine import _alembic_config

    script = ScriptDirectory.from_config(_alembic_config())
    walked = tuple(reversed([revision.revision for revision in script.walk_revisions()]))
    assert walked == KNOWN_REVISIONS


# --- a database a newer salvagelane migrated (issue 29.10) ------------------------------------

NEWER = "0099_from_the_future"
NEWER_SAYS = (
    f"the database schema is at revision '{NEWER}', unknown to this salvagelane "
    f"(it knows revisions up to {KNOWN_REVISIONS[-1]}): a newer salvagelane wrote it; "
    "upgrade salvagelane to use this database (salvagelane db upgrade cannot migrate it)"
)


def _migrated_by_a_newer_salvagelane(url: str) -> str:
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": NEWER})
    finally:
        engine.dispose()
    return url


def test_a_newer_databases_revision_is_refused_not_sent_to_db_upgrade(database_url: str) -> None:
    url = _migrated_by_a_newer_salvagelane(database_url)

    with pytest.raises(OutdatedDatabaseError) as opening:
        Store.open(url)
    with pytest.raises(OutdatedDatabaseError) as upgrading:
        upgrade(url)
    with pytest.raises(OutdatedDatabaseError) as downgrading:
        downgrade(url, "0007")

    for refused in (opening, upgrading, downgrading):
        assert NEWER_SAYS in str(refused.value)
        assert "run `salvagelane db upgrade`" not in str(refused.value)
    assert current_revision(url) == NEWER  # nothing was migrated


@pytest.mark.parametrize(
    "args",
    [("db", "upgrade"), ("runs", "list"), ("quarantine", "list")],
    ids=lambda args: "-".join(args),
)
def test_the_cli_says_in_one_line_to_upgrade_salvagelane(
    database_url: str, args: tuple[str, ...]
) -> None:
    url = _migrated_by_a_newer_salvagelane(database_url)

    proc = salvagelane(*args, database=url)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert NEWER_SAYS in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Can't locate revision" not in proc.stderr
    assert current_revision(url) == NEWER


def test_db_current_says_the_database_is_a_newer_salvagelanes(database_url: str) -> None:
    url = _migrated_by_a_newer_salvagelane(database_url)

    proc = salvagelane("db", "current", database=url)

    assert proc.returncode == 0, proc.stderr
    assert (
        f"revision {NEWER} (newest {KNOWN_REVISIONS[-1]}: unknown to this salvagelane: a newer "
        "one wrote it; upgrade salvagelane)"
    ) in proc.stdout


def test_the_revision_is_read_as_alembic_reads_it(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            assert revision_of(connection) is None  # no version table yet
        upgrade(database_url, "0003")
        with engine.connect() as connection:
            alembic_says = MigrationContext.configure(connection).get_current_revision()
            assert revision_of(connection) == alembic_says == "0003"
    finally:
        engine.dispose()


def test_a_read_command_leaves_alembic_unimported(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(database)
    probe = (
        "import sys\n"
        "from salvagelane.store import Store\n"
        f"with Store.open({database!r}, read_only=True) as store:\n"
        "    store.list_runs()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


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


def _seed_at_0001(url: str) -> tuple[str, str]:
    """A finished scheduled run and its attempt, inserted as the 0001 schema stores them
    (the models describe the newest schema, so the ORM cannot write an old one);
    timestamps bound as the store binds them, so SQLite holds the same text."""
    run_id, attempt_id = "r" * 36, "a" * 36
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO runs (id, instruction_id, definition_sha256, trigger,"
                    " scheduled_for, status, created_at, started_at, finished_at)"
                    " VALUES (:id, 'daily', :sha, 'schedule', :now, 'running', :now, :now, :now)"
                ).bindparams(sa.bindparam("now", type_=UTCDateTime)),
                {"id": run_id, "sha": "d" * 64, "now": NOW},
            )
            connection.execute(
                sa.text(
                    "INSERT INTO attempts (id, run_id, number, started_at, request, raw_output)"
                    " VALUES (:id, :run, 1, :now, '{}', :raw)"
                ).bindparams(sa.bindparam("now", type_=UTCDateTime)),
                {"id": attempt_id, "run": run_id, "now": NOW, "raw": b"[]"},
            )
            connection.execute(
                sa.text("UPDATE runs SET status = 'ok', best_attempt_id = :a WHERE id = :r"),
                {"a": attempt_id, "r": run_id},
            )
    finally:
        engine.dispose()
    return run_id, attempt_id


def test_fire_claims_migrate_a_database_that_has_runs(database_url: str) -> None:
    # 0002 adds the one-run-per-fire index and 0003 the fire attempt to a runs table
    # whose rows other tables reference; on SQLite (foreign keys on) a table rebuild
    # would fail here.
    upgrade(database_url, "0001")
    run_id, attempt_id = _seed_at_0001(database_url)

    upgrade(database_url)

    assert current_revision(database_url) == head_revision()
    with Store.open(database_url, auto_upgrade=False) as store:
        detail = store.get_run(run_id)
        assert (detail.status, detail.best_attempt_id) == ("ok", attempt_id)
        assert (detail.fire_attempt, detail.retry_of) == (1, None)
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
    assert _table_names(database_url) == (
        set(Base.metadata.tables)
        - {"schedules", "quarantine_reviews", "definition_versions", "evals", "eval_results"}
        | {"alembic_version"}
    )


def _columns(url: str, table: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return {column["name"] for column in sa.inspect(connection).get_columns(table)}
    finally:
        engine.dispose()


def test_quarantine_reviews_migrate_a_database_that_has_quarantined_items(
    database_url: str,
) -> None:
    # 0004 adds review columns to quarantined_items (which reports and runs sit next to,
    # and the new audit table references) without a rebuild, on both backends.
    upgrade(database_url, "0001")
    run_id, attempt_id = _seed_at_0001(database_url)
    upgrade(database_url, "0003")
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO quarantined_items (run_id, attempt_id, instruction_id,"
                    " source_index, reason, error, snippet, provenance, review_status,"
                    " created_at) VALUES (:run, :attempt, 'daily', 0, 'schema', '{}', '{',"
                    " '{}', 'pending', :now)"
                ).bindparams(sa.bindparam("now", type_=UTCDateTime)),
                {"run": run_id, "attempt": attempt_id, "now": NOW},
            )
    finally:
        engine.dispose()

    upgrade(database_url)

    assert current_revision(database_url) == head_revision()
    with Store.open(database_url, auto_upgrade=False) as store:
        (held,) = store.quarantine.list_quarantine()
        assert (held.run_id, held.review_status, held.reviewed_by) == (run_id, "pending", None)
        store.quarantine.reject_quarantined(held.id, actor="ops", note="noise", now=NOW)
        detail = store.quarantine.get_quarantine(held.id)
        assert (detail.review_status, detail.reviewed_by) == ("rejected", "ops")
        assert [review.action for review in detail.reviews] == ["reject"]

    downgrade(database_url, "0003")

    assert current_revision(database_url) == "0003"
    assert "quarantine_reviews" not in _table_names(database_url)
    assert not {"reviewed_at", "reviewed_by", "review_note"} & _columns(
        database_url, "quarantined_items"
    )
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            status = connection.execute(
                sa.text("SELECT review_status FROM quarantined_items")
            ).scalar_one()
    finally:
        engine.dispose()
    assert status == "rejected"  # the decision stays; its audit trail went with 0004
    upgrade(database_url)
    assert current_revision(database_url) == head_revision()


def test_downgrade_below_fire_retries_refuses_while_a_retry_exists(database_url: str) -> None:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        first = store.start_run(
            instruction_id="daily",
            definition_sha256="d" * 64,
            trigger="schedule",
            scheduled_for=NOW,
            now=NOW,
        )
        assert store.mark_interrupted(first, now=NOW, error="stopped")
        store.start_run(
            instruction_id="daily",
            definition_sha256="d" * 64,
            trigger="schedule",
            scheduled_for=NOW,
            now=NOW,
            retry_of=first,
        )

    with pytest.raises(RuntimeError, match="1 run\\(s\\) retry an interrupted fire"):
        downgrade(database_url, "0002")

    assert current_revision(database_url) == head_revision()
    with Store.open(database_url, auto_upgrade=False) as store:
        assert len(store.list_runs()) == 2


def test_downgrade_below_the_outbox_refuses_while_a_delivery_is_pending(database_url: str) -> None:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        run_id, _ = _seed_finished_run(store, scheduled_for=None, items=1)
        # An operator's redelivery starts: the delivery is pending until its result.
        claim = store.deliveries.claim_target(
            run_id, kind="webhook", target="https://hooks.test/r", now=NOW, lease_until=NOW
        )

    with pytest.raises(RuntimeError, match="1 sink delivery\\(ies\\) are pending"):
        downgrade(database_url, "0004")

    assert current_revision(database_url) == head_revision()
    with Store.open(database_url, auto_upgrade=False) as store:
        assert store.get_run(run_id).sink_status == "pending"
        assert store.deliveries.record_result(claim, error=None, now=NOW) is not None
    # Delivered: nothing would be lost, so the way down is open (and back up).
    downgrade(database_url, "0004")
    assert current_revision(database_url) == "0004"
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        [delivery] = store.get_run(run_id).deliveries
    assert (delivery.status, delivery.attempts) == ("delivered", 1)


def test_downgrade_below_item_repairs_refuses_while_a_repaired_item_exists(
    database_url: str,
) -> None:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        run_id, _ = _seed_finished_run(store, scheduled_for=None, items=2, repaired=1)

    # Without the column the repaired item would read as the model's own text.
    with pytest.raises(RuntimeError, match="1 report item\\(s\\) were accepted with lossless"):
        downgrade(database_url, "0006")

    assert current_revision(database_url) == head_revision()
    with Store.open(database_url, auto_upgrade=False) as store:
        report = store.get_run(run_id).report
        assert report is not None
        assert [item.repairs for item in report.items] == [
            [{"kind": "trailing_comma", "at": 2}],
            None,
        ]


def test_downgrade_below_item_repairs_without_one_drops_the_column(database_url: str) -> None:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        _seed_finished_run(store, scheduled_for=None, items=2)
    downgrade(database_url, "0006")
    assert current_revision(database_url) == "0006"
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("report_items")}
    finally:
        engine.dispose()
    assert "repairs" not in columns
    assert "coercions" in columns
    upgrade(database_url)
    assert current_revision(database_url) == head_revision()


def _seed_finished_run(
    store: Store, *, scheduled_for: datetime | None, items: int, repaired: int = 0
) -> tuple[str, str]:
    """A finished run with one attempt and a report: rows in the runs <-> attempts cycle;
    its first ``repaired`` items were accepted with a lossless repair."""
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
            ReportItemRecord(
                source_index=n,
                data={},
                span_start=1,
                span_end=3,
                repairs=[{"kind": "trailing_comma", "at": 2}] if n < repaired else None,
            )
            for n in range(items)
        ],
    )
    store.finish_run(
        run_id, status="ok", finished_at=NOW, error=None, report=report, quarantined=[]
    )
    return run_id, attempt_id
