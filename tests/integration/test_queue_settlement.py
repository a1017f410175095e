"""Queue mode settles its own state (issue 29.13; docs/adr/0013, "Settling queued runs").

A ``queued`` run that no worker will take (the queue's tables are absent, its job is gone
or ended, the worker that fetched its job died before taking it, or the leader went back
to in-process dispatch and no worker consumes the queue) is ended ``interrupted`` by the
leader with the reason on the run, and the fire's one retry follows the usual rule. A
run a worker may still take is left to it, including one a worker fetches while the
leader settles. A queue-mode leader warns while queued runs wait past the stall time with
no worker consuming: a structured log event, ``health`` and a metric.

The clock is the leader's, moved by hand; worker liveness is procrastinate's heartbeat
rows, written here relative to the database's own clock. No test sleeps.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import Instruction, load_definitions
from salvagelane.runtime.dispatch import QueueDispatch
from salvagelane.runtime.metrics import Metrics
from salvagelane.runtime.service import Dispatch, Fire, ServeSettings, Service
from salvagelane.store import QueuedRuns, Store, upgrade
from salvagelane.store.backlog import Backlog
from salvagelane.vocabulary import Trigger
from tests.support.cli import salvagelane
from tests.support.postgres import PostgresDatabase

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
MONDAY = datetime(2031, 3, 3, tzinfo=UTC)
STALL = 300.0


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return MONDAY + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


FIRE = at(0, 5, 20)  # daily-triage: "20 5 * * *", 3600 s misfire grace


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    return tmp_path


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


@pytest.fixture
def pg(postgres_database: PostgresDatabase) -> Iterator[Store]:
    """A migrated PostgreSQL store whose database also has the task queue's tables."""
    postgres_database.reset()
    upgrade(postgres_database.url)
    with Store.open(postgres_database.url) as opened:
        yield opened


@pytest.fixture
def dispatch(pg: Store) -> Iterator[QueueDispatch]:
    queue = QueueDispatch(pg.url, pg)
    queue.open()  # installs the queue's tables
    try:
        yield queue
    finally:
        queue.close()


class _NoLock:
    def try_acquire(self) -> bool:
        return True

    def acquire(self) -> None:
        pass

    def is_held(self) -> bool:
        return True

    def release(self) -> None:
        pass


def make_service(
    project: Path, store: Store, *, dispatch: Dispatch | None = None, announce: Any = None
) -> Service:
    service = Service(
        ServeSettings(instructions_dir=project / "instructions", queue_stall_seconds=STALL),
        store=store,
        lock=_NoLock(),
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        sinks_for=lambda instruction: (),
        dispatch=dispatch,
        announce=announce or (lambda line: None),
    )
    service.load()
    return service


def triage(project: Path) -> Instruction:
    return load_definitions(project / "instructions").instructions["daily-triage"]


def claim_without_job(store: Store, *, fire: datetime, now: datetime, job_id: int = 7) -> str:
    """A queued run whose job id names no job (as after the queue's tables went away)."""
    return store.queued.claim(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger=Trigger.SCHEDULE,
        scheduled_for=fire,
        retry_of=None,
        now=now,
        enqueue=lambda connection, run_id: job_id,
    )


def enqueue(dispatch: QueueDispatch, project: Path, *, fire: datetime, now: datetime) -> str:
    return dispatch.enqueue(
        triage(project), scheduled_for=fire, trigger=Trigger.SCHEDULE, retry_of=None, now=now
    )


def sql(store: Store, statement: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(store.url)
    try:
        with engine.begin() as connection:
            result = connection.execute(sa.text(statement), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


def job_of(store: Store, run_id: str) -> int:
    queued = store.queued.get(run_id)
    assert queued is not None
    assert queued.job_id is not None
    return queued.job_id


def job_status(store: Store, job_id: int) -> str:
    (row,) = sql(store, "SELECT status::text FROM procrastinate_jobs WHERE id = :id", id=job_id)
    return str(row[0])


def worker(store: Store, *, seconds_since_heartbeat: int) -> int:
    """A procrastinate worker row whose last heartbeat is that old by the database's clock."""
    (row,) = sql(
        store,
        "INSERT INTO procrastinate_workers (last_heartbeat) "
        "VALUES (now() - make_interval(secs => :age)) RETURNING id",
        age=seconds_since_heartbeat,
    )
    return int(row[0])


def fetched_by(store: Store, job_id: int, worker_id: int) -> None:
    """What procrastinate's fetch does to a job a worker took off the queue."""
    sql(
        store,
        "UPDATE procrastinate_jobs SET status = 'doing', worker_id = :w WHERE id = :id",
        w=worker_id,
        id=job_id,
    )


def settled(logs: list[dict[str, Any]]) -> dict[str, str]:
    return {e["run_id"]: e["reason"] for e in logs if e["event"] == "run.settled"}


def run_retries(service: Service, retries: list[Fire]) -> None:
    for retry in retries:
        service.fire(
            retry.instruction_id,
            retry.scheduled_for,
            trigger=retry.trigger,
            retry_of=retry.retry_of,
        )


# --- in-process, both backends ------------------------------------------------------------------


def test_a_queued_run_no_queue_can_take_is_ended_and_its_fire_retried_in_process(
    project: Path, store: Store
) -> None:
    # Left by a queue-mode leader; this database has no task queue tables (SQLite never
    # has; on PostgreSQL they were never installed, or dropped).
    run_id = claim_without_job(store, fire=FIRE, now=FIRE)
    service = make_service(project, store)

    with capture_logs() as logs:
        retries = service.recover(FIRE + timedelta(minutes=1))

    detail = store.get_run(run_id)
    assert detail.status == "interrupted"
    reason = "the task queue's tables are absent, so no worker can take it"
    assert detail.error == f"never started: {reason} (settled by the serve leader)"
    assert settled(logs) == {run_id: reason}
    assert retries == [
        Fire(
            instruction_id="daily-triage",
            scheduled_for=FIRE,
            trigger=Trigger.SCHEDULE,
            retry_of=run_id,
        )
    ]
    run_retries(service, retries)
    (retry,) = [run for run in store.list_runs() if run.retry_of == run_id]
    assert (retry.status, retry.fire_attempt) == ("partial", 2)
    # Settled once: the next pass finds nothing queued.
    with capture_logs() as again:
        assert service.recover(FIRE + timedelta(minutes=2)) == []
    assert settled(again) == {}


def test_health_shows_the_queued_runs_and_a_stalled_queue(database_url: str, store: Store) -> None:
    # Waiting since an hour ago by the real clock: `health` measures with it.
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    claim_without_job(store, fire=since, now=since)

    proc = salvagelane("health", "--json", "--queue-stall-after", "600", database=database_url)

    assert proc.returncode == 0, proc.stderr
    [printed] = json.loads(proc.stdout)
    assert printed["queue"] == {
        "queued_runs": 1,
        "oldest_queued_at": since.isoformat(),
        "workers": None,  # no queue tables: nothing consumes it
        "stalled": True,
    }
    text = salvagelane("health", "--queue-stall-after", "600", database=database_url)
    assert text.returncode == 0, text.stderr
    (line,) = [row for row in text.stdout.splitlines() if row.startswith("queue ")]
    assert line.startswith("queue        1 queued, the oldest since ")
    assert line.endswith("STALLED: no worker consumes the task queue (start `salvagelane worker`)")
    # Not yet stalled under a longer stall time.
    later = salvagelane("health", "--json", "--queue-stall-after", "7200", database=database_url)
    assert json.loads(later.stdout)[0]["queue"]["stalled"] is False


# --- queue mode, PostgreSQL ----------------------------------------------------------------------


@pytest.mark.postgres
def test_queue_mode_settles_runs_whose_job_is_gone_or_ended_and_leaves_a_waiting_one(
    project: Path, pg: Store, dispatch: QueueDispatch
) -> None:
    now = at(2, 5, 21)
    waiting = enqueue(dispatch, project, fire=at(0, 5, 20), now=at(0, 5, 20))
    ended = enqueue(dispatch, project, fire=at(1, 5, 20), now=at(1, 5, 20))
    gone = enqueue(dispatch, project, fire=at(2, 5, 20), now=at(2, 5, 20))
    sql(pg, "UPDATE procrastinate_jobs SET status = 'failed' WHERE id = :id", id=job_of(pg, ended))
    sql(pg, "DELETE FROM procrastinate_jobs WHERE id = :id", id=job_of(pg, gone))
    service = make_service(project, pg, dispatch=dispatch)

    with capture_logs() as logs:
        retries = service.recover(now)

    assert settled(logs) == {
        gone: f"its job {job_of(pg, gone)} is gone from the task queue",
        ended: f"its job {job_of(pg, ended)} ended (failed) without a worker taking it",
    }
    assert pg.get_run(gone).status == "interrupted"
    assert pg.get_run(ended).status == "interrupted"
    # A job that still waits is a worker's to take: left alone (the leader warns instead).
    assert pg.get_run(waiting).status == "queued"
    assert job_status(pg, job_of(pg, waiting)) == "todo"
    # Within its grace the fire is retried once, through the queue; the other is not.
    assert [(r.scheduled_for, r.retry_of) for r in retries] == [(at(2, 5, 20), gone)]
    run_retries(service, retries)
    (retry,) = [run for run in pg.list_runs() if run.retry_of == gone]
    assert (retry.status, retry.fire_attempt) == ("queued", 2)
    assert job_status(pg, job_of(pg, retry.id)) == "todo"


@pytest.mark.postgres
def test_a_run_whose_worker_died_before_taking_it_is_settled_and_its_job_released(
    project: Path, pg: Store, dispatch: QueueDispatch
) -> None:
    queued = enqueue(dispatch, project, fire=FIRE, now=FIRE)
    job = job_of(pg, queued)
    fetcher = worker(pg, seconds_since_heartbeat=0)
    fetched_by(pg, job, fetcher)
    service = make_service(project, pg, dispatch=dispatch)

    # A live worker between its fetch and its take: left to it.
    with capture_logs() as logs:
        service.recover(FIRE + timedelta(minutes=1))
    assert settled(logs) == {}
    assert pg.get_run(queued).status == "queued"
    assert job_status(pg, job) == "doing"

    # It died there: its heartbeat stopped.
    sql(
        pg,
        "UPDATE procrastinate_workers SET last_heartbeat = now() - interval '10 minutes' "
        "WHERE id = :id",
        id=fetcher,
    )
    with capture_logs() as logs:
        retries = service.recover(FIRE + timedelta(minutes=2))

    assert settled(logs) == {
        queued: f"the worker that fetched its job {job} stopped before taking it"
    }
    assert pg.get_run(queued).status == "interrupted"
    # Its job would hold the instruction's queue lock for ever: released in the same pass.
    assert job_status(pg, job) == "failed"
    assert [r.retry_of for r in retries] == [queued]


@pytest.mark.postgres
def test_back_in_process_a_run_no_worker_consumes_is_settled_after_the_stall_time(
    project: Path, pg: Store, dispatch: QueueDispatch
) -> None:
    queued = enqueue(dispatch, project, fire=FIRE, now=FIRE)
    job = job_of(pg, queued)
    # The leader goes back to `serve --dispatch inprocess`; a worker still runs.
    service = make_service(project, pg)
    consuming = worker(pg, seconds_since_heartbeat=0)

    with capture_logs() as logs:
        assert service.recover(FIRE + timedelta(seconds=STALL + 60)) == []
    assert settled(logs) == {}
    assert pg.get_run(queued).status == "queued"  # that worker may take it

    sql(pg, "DELETE FROM procrastinate_workers WHERE id = :id", id=consuming)
    with capture_logs() as logs:
        assert service.recover(FIRE + timedelta(seconds=STALL - 1)) == []
    assert pg.get_run(queued).status == "queued"  # not waited the stall time yet
    with capture_logs() as logs:
        retries = service.recover(FIRE + timedelta(seconds=STALL + 1))

    assert settled(logs) == {
        queued: "serve dispatches in-process and no worker has consumed the task queue "
        f"while it waited over {STALL:g} s"
    }
    assert pg.get_run(queued).status == "interrupted"
    assert job_status(pg, job) == "cancelled"  # a worker that starts later finds none
    # Re-dispatched in-process: the fire is within its grace.
    run_retries(service, retries)
    (retry,) = [run for run in pg.list_runs() if run.retry_of == queued]
    assert (retry.status, retry.fire_attempt) == ("partial", 2)


@pytest.mark.postgres
def test_a_worker_that_fetches_the_job_while_the_leader_settles_keeps_the_run(
    project: Path, pg: Store, dispatch: QueueDispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued = enqueue(dispatch, project, fire=FIRE, now=FIRE)
    job = job_of(pg, queued)
    before = pg.queued.backlog()  # what the leader read: a job waiting, no worker
    assert [(run.id, run.job_status) for run in before.runs] == [(queued, "todo")]
    assert before.live_workers == 0
    # Between that read and the settlement a worker starts and fetches the job.
    fetched_by(pg, job, worker(pg, seconds_since_heartbeat=0))

    def stale_backlog(self: QueuedRuns, *, limit: int = 500) -> Backlog:
        return before

    monkeypatch.setattr(QueuedRuns, "backlog", stale_backlog)
    done = pg.queued.settle_stranded(
        now=FIRE + timedelta(seconds=STALL + 1), unconsumed_after=STALL
    )

    assert done == []
    assert pg.get_run(queued).status == "queued"
    assert job_status(pg, job) == "doing"
    # The worker takes it, as it would have without the leader.
    taken = pg.queued.take(
        queued, now=FIRE + timedelta(seconds=STALL + 2), definition_sha256=None, definition=None
    )
    assert taken.status == "running"


@pytest.mark.postgres
def test_queue_mode_warns_while_runs_wait_with_no_worker_in_log_metrics_and_health(
    project: Path, pg: Store, dispatch: QueueDispatch
) -> None:
    queued = enqueue(dispatch, project, fire=FIRE, now=FIRE)
    announced: list[str] = []
    service = make_service(project, pg, dispatch=dispatch, announce=announced.append)
    stalled_at = FIRE + timedelta(seconds=STALL + 1)

    with capture_logs() as early:
        service.recover(FIRE + timedelta(seconds=STALL - 1))
    assert [e for e in early if e["event"] == "queue.stalled"] == []
    with capture_logs() as logs:
        service.recover(stalled_at)
        service.recover(stalled_at + timedelta(seconds=5))  # said once per stall time

    (warning,) = [e for e in logs if e["event"] == "queue.stalled"]
    assert warning["log_level"] == "warning"
    assert (warning["queued"], warning["live_workers"], warning["waited_seconds"]) == (
        1,
        0,
        STALL + 1,
    )
    assert warning["stall_after_seconds"] == STALL
    assert announced == [
        "warning: 1 queued run(s) waiting, the oldest for 301 s, and no worker consumes the "
        "task queue (start `salvagelane worker`)"
    ]
    assert pg.get_run(queued).status == "queued"  # warned, not settled: a worker may come
    # The metric and `health` say the same, with the same stall time.
    assert gauges(pg, now=stalled_at) == {
        "salvagelane_queue_oldest_wait_seconds": STALL + 1,
        "salvagelane_queue_workers": 0.0,
        "salvagelane_queue_stalled": 1.0,
    }
    (health,) = pg.health.healths(["daily-triage"], now=stalled_at, queue_stall_seconds=STALL)
    assert (health.queued_runs, health.queue_workers, health.queue_stalled) == (1, 0, True)

    # A worker starts: the warning ends, and the gauges say so.
    worker(pg, seconds_since_heartbeat=0)
    with capture_logs() as resumed:
        service.recover(stalled_at + timedelta(seconds=10))
    assert [e["event"] for e in resumed if e["event"].startswith("queue.")] == ["queue.resumed"]
    assert gauges(pg, now=stalled_at)["salvagelane_queue_stalled"] == 0.0
    assert gauges(pg, now=stalled_at)["salvagelane_queue_workers"] == 1.0


def gauges(store: Store, *, now: datetime) -> dict[str, float]:
    metrics = Metrics(
        state=store.state, process=False, queue_stall_seconds=STALL, clock=lambda: now
    )
    return {
        sample.name: sample.value
        for family in metrics.registry.collect()
        if family.name.startswith("salvagelane_queue_") and family.name != "salvagelane_queue_depth"
        for sample in family.samples
    }
