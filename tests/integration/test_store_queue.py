"""The store's side of the task queue (``Store.queued``), on SQLite and PostgreSQL.

The claim of a queued run and its job are one transaction: the ``enqueue`` callback
writes on the claim's own connection, and whatever it raises rolls the claim back. A
queued run is taken once. Migration 0008 goes down only when no run is queued or
cancelled. (The queue itself, procrastinate, is tested with real processes in
``test_queue_processes.py``; here the callback writes a row of its own table.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.errors import DuplicateFireError, RunTakenError, StoreError
from salvagelane.store import Store, current_revision, downgrade, head_revision, upgrade
from salvagelane.store.engine import make_engine
from salvagelane.vocabulary import RunStatus, Trigger

NOW = datetime(2026, 11, 23, 5, 20, tzinfo=UTC)
FIRE = NOW - timedelta(seconds=1)


class Refused(Exception):
    pass


def outbox_rows(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return [row[0] for row in connection.exec_driver_sql("SELECT run_id FROM test_jobs")]
    finally:
        engine.dispose()


@pytest.fixture
def store(database_url: str) -> Any:
    upgrade(database_url)
    engine = make_engine(database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE test_jobs (id INTEGER PRIMARY KEY, run_id TEXT)")
    engine.dispose()
    with Store.open(database_url, auto_upgrade=False) as opened:
        yield opened


def writing_job(job_id: int) -> Any:
    """An enqueue callback writing its job on the DBAPI connection it is handed."""

    def enqueue(connection: Any, run_id: str) -> int:
        cursor = connection.cursor()
        placeholder = "?" if type(connection).__module__.startswith("sqlite3") else "%s"
        cursor.execute(
            f"INSERT INTO test_jobs (id, run_id) VALUES ({placeholder}, {placeholder})",
            (job_id, run_id),
        )
        cursor.close()
        return job_id

    return enqueue


def claim(store: Store, enqueue: Any, *, retry_of: str | None = None) -> str:
    return store.queued.claim(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger=Trigger.SCHEDULE,
        scheduled_for=FIRE,
        retry_of=retry_of,
        now=NOW,
        enqueue=enqueue,
    )


def test_a_claim_and_its_job_are_committed_together(store: Store, database_url: str) -> None:
    run_id = claim(store, writing_job(7))
    queued = store.queued.get(run_id)
    assert queued is not None
    assert (queued.status, queued.job_id, queued.scheduled_for) == (RunStatus.QUEUED, 7, FIRE)
    assert outbox_rows(database_url) == [run_id]
    assert [r.status for r in store.runs_for_fire("daily-triage", FIRE)] == ["queued"]
    # A second claim of the fire enqueues nothing.
    with pytest.raises(DuplicateFireError):
        claim(store, writing_job(8))
    assert outbox_rows(database_url) == [run_id]


def test_an_enqueue_that_fails_rolls_the_claim_back(store: Store, database_url: str) -> None:
    def refuse(connection: Any, run_id: str) -> int:
        writing_job(9)(connection, run_id)  # written, then the enqueue fails
        raise Refused("the queue refused the job")

    with pytest.raises(Refused):
        claim(store, refuse)
    assert store.runs_for_fire("daily-triage", FIRE) == []
    assert outbox_rows(database_url) == []
    # The fire is still free to claim.
    assert claim(store, writing_job(10))


def test_a_queued_run_is_taken_once_then_runs_as_any_run(store: Store) -> None:
    run_id = claim(store, writing_job(1))
    later = NOW + timedelta(seconds=5)
    taken = store.queued.take(run_id, now=later, definition_sha256="e" * 64, definition=None)
    assert taken.status == RunStatus.RUNNING
    with pytest.raises(RunTakenError, match="is running, not queued"):
        store.queued.take(run_id, now=later, definition_sha256=None, definition=None)
    detail = store.get_run(run_id)
    assert (detail.status, detail.started_at) == ("running", later)
    assert store.heartbeat(run_id, later)
    store.fail_run(run_id, finished_at=later, error="x", status=RunStatus.CANCELLED)
    assert store.get_run(run_id).status == "cancelled"


def test_cancel_ends_only_a_queued_run(store: Store) -> None:
    run_id = claim(store, writing_job(1))
    cancelled = store.queued.cancel_queued(run_id, now=NOW, error="cancelled: by a test")
    assert cancelled.status == RunStatus.CANCELLED
    with pytest.raises(RunTakenError, match="is cancelled"):
        store.queued.take(run_id, now=NOW, definition_sha256=None, definition=None)
    again = store.queued.cancel_queued(run_id, now=NOW, error="twice")
    assert again.status == RunStatus.CANCELLED
    assert store.get_run(run_id).error == "cancelled: by a test"


def test_interrupted_jobs_names_the_jobs_of_interrupted_runs_only(store: Store) -> None:
    first = claim(store, writing_job(1))
    store.queued.take(first, now=NOW, definition_sha256=None, definition=None)
    assert store.queued.interrupted_jobs([1]) == []
    stale = store.interrupt_stale_runs(stale_before=NOW + timedelta(seconds=1), now=NOW)
    assert [r.id for r in stale] == [first]
    assert store.queued.interrupted_jobs([1, 2]) == [1]


def test_downgrade_below_0008_refuses_while_a_run_is_queued(
    store: Store, database_url: str
) -> None:
    run_id = claim(store, writing_job(1))
    with pytest.raises(RuntimeError, match="1 run\\(s\\) are queued or cancelled"):
        downgrade(database_url, "0007")
    assert current_revision(database_url) == head_revision()
    store.queued.take(run_id, now=NOW, definition_sha256=None, definition=None)
    store.fail_run(run_id, finished_at=NOW, error="failed by a test")
    downgrade(database_url, "0007")
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("runs")}
    finally:
        engine.dispose()
    assert "job_id" not in columns
    upgrade(database_url)
    assert current_revision(database_url) == head_revision()


def test_fail_run_refuses_a_status_that_is_not_an_end_without_report(store: Store) -> None:
    run_id = claim(store, writing_job(1))
    store.queued.take(run_id, now=NOW, definition_sha256=None, definition=None)
    with pytest.raises(ValueError, match="expected one of cancelled, failed, interrupted"):
        store.fail_run(run_id, finished_at=NOW, error="x", status=RunStatus.QUEUED)
    store.fail_run(run_id, finished_at=NOW, error="x", status=RunStatus.CANCELLED)
    with pytest.raises(StoreError, match="already cancelled"):
        store.fail_run(run_id, finished_at=NOW, error="y", status=RunStatus.CANCELLED)
