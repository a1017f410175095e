"""``serve --dispatch queue`` and ``salvagelane worker`` end to end (docs/adr/0013).

Real processes on the real PostgreSQL server: a leader that claims each fire and enqueues
its run in one transaction, workers that take each run by its id. What one node promises
holds across processes: every fire has exactly one outcome and runs once; a worker killed
mid-call leaves its run ``running`` (raw output stored), the leader marks it
``interrupted`` and its one retry runs on the other worker; a leader killed between the
claim and the enqueue leaves neither; ``runs cancel`` stops a queued and a running run.
Tests wait for events (log lines, rows), never for a span of time.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import signal
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.store import Store
from salvagelane.store.values import RunSummary
from tests.support.cli import salvagelane
from tests.support.metrics import database_figures, scrape
from tests.support.postgres import PostgresDatabase
from tests.support.provider import SSE_HEADERS, Scripted, ScriptedServer, sse_event
from tests.support.serve import (
    COMPLETE,
    GOOD_REPORT,
    HANG,
    KEY_ENV,
    Processes,
    Project,
    ServeProcess,
    all_runs,
    chat,
    openai_connector,
    wait_for_runs,
)

LEADER = ("--heartbeat", "0.2", "--stale-after", "1", "--poll", "0.5", "--dispatch", "queue")
WORKER = ("--heartbeat", "0.2", "--shutdown-timeout", "5")
NOTHING = "I could not produce the report."
ENV = {KEY_ENV: "sk-queue-test"}
OPEN = {"queued", "running"}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


@pytest.fixture
def url(postgres_database: PostgresDatabase) -> str:
    """An empty database, migrated and with the queue's tables, by ``db upgrade``."""
    postgres_database.reset()
    upgraded = salvagelane("db", "upgrade", database=postgres_database.url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.splitlines()[-1].endswith(": installed the task queue's tables")
    again = salvagelane("db", "upgrade", database=postgres_database.url)
    assert again.returncode == 0, again.stderr
    assert "task queue" not in again.stdout  # idempotent: installed once
    return postgres_database.url


def query(url: str, sql: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(sa.text(sql), params))
    finally:
        engine.dispose()


def jobs(url: str) -> dict[int, str]:
    """Every job of the queue: id -> status."""
    return {row.id: row.status for row in query(url, "SELECT id, status FROM procrastinate_jobs")}


def describe(runs: list[RunSummary]) -> str:
    return "\n".join(
        f"  {r.id[:8]} {r.instruction_id} {r.scheduled_for} #{r.fire_attempt} {r.trigger} "
        f"{r.status}"
        for r in runs
    )


def started_runs(worker: ServeProcess) -> list[str]:
    """The run ids this worker executed (took and started)."""
    return [str(e["run_id"]) for e in worker.events("run.started")]


def job_of(url: str, run_id: str) -> int:
    (row,) = query(url, "SELECT job_id FROM runs WHERE id = :id", id=run_id)
    assert row.job_id is not None
    return int(row.job_id)


def assert_one_row_per_fire(runs: list[RunSummary], instruction_id: str) -> list[RunSummary]:
    firsts = sorted(
        (r for r in runs if r.instruction_id == instruction_id and r.fire_attempt == 1),
        key=lambda r: r.scheduled_for or datetime.min,
    )
    assert firsts, describe(runs)
    moments = [r.scheduled_for for r in firsts]
    assert [m for m, n in Counter(moments).items() if n > 1] == [], describe(runs)
    first, last = moments[0], moments[-1]
    assert first is not None
    assert last is not None
    expected = int((last - first).total_seconds()) + 1
    assert len(moments) == expected, f"a fire without a row:\n{describe(runs)}"
    return firsts


# --- 1. a burst, two workers, exactly once ---------------------------------------------------


@pytest.mark.postgres
def test_two_workers_run_a_burst_of_fires_exactly_once_each(
    project: Project, processes: Processes, url: str
) -> None:
    names = ("alpha", "beta", "gamma")
    (project.instructions / "daily-triage.yaml").unlink()
    for name in names:
        project.write_definition(f"{name}.yaml", instruction_id=name)
    workers = [
        processes.worker(project, *WORKER, "--concurrency", "2", database=url, name=f"w{i}")
        for i in (1, 2)
    ]
    for worker in workers:
        worker.wait_for_line("^worker: running queued runs from salvagelane")
    leader = processes.serve(project, *LEADER, database=url, name="leader")
    leader.wait_for_line(r"^leader: scheduling 3 instruction\(s\)")
    # A burst: every instruction every second, until 30 runs have been claimed.
    leader.wait_for_event("fire.claimed", count=30, timeout=60)
    assert leader.stop(signal.SIGTERM) == 0, leader.describe()
    runs = wait_for_runs(
        url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained queue"
    )
    for worker in workers:
        assert worker.stop(signal.SIGTERM) == 0, worker.describe()
        worker.assert_quiet()
    leader.assert_quiet("fire.missed")

    for name in names:
        assert_one_row_per_fire(runs, name)
    executed = [r for r in runs if r.status != "missed"]
    assert {(r.status, r.trigger, r.fire_attempt) for r in executed} == {
        ("partial", "schedule", 1)
    }, describe(runs)
    # Every claimed run was executed once, by one worker; both workers took some.
    by_worker = [started_runs(w) for w in workers]
    taken = Counter(run_id for ids in by_worker for run_id in ids)
    assert [run_id for run_id, n in taken.items() if n > 1] == []
    assert set(taken) == {r.id for r in executed}
    assert all(by_worker), [len(ids) for ids in by_worker]
    claimed = {str(e["run_id"]) for e in leader.events("fire.claimed")}
    assert claimed == set(taken)
    # One job per run, each succeeded once; none left.
    job_ids = [job_of(url, r.id) for r in executed]
    assert len(set(job_ids)) == len(job_ids)
    assert jobs(url) == dict.fromkeys(job_ids, "succeeded")


# --- 2. a worker killed mid-call -------------------------------------------------------------


@pytest.mark.postgres
def test_a_worker_killed_mid_call_leaves_its_run_interrupted_and_the_retry_runs_on_the_other(
    project: Project, processes: Processes, url: str
) -> None:
    with ScriptedServer(then=GOOD_REPORT) as provider:
        # The first run: an unusable answer (stored), then a second attempt that hangs.
        provider.script.extend([chat(NOTHING), HANG])
        project.write_definition(
            cron="*/2 * * * * *", grace=60, connector=openai_connector(provider.base_url)
        )
        workers = [
            processes.worker(project, *WORKER, database=url, env=ENV, name=f"w{i}") for i in (1, 2)
        ]
        for worker in workers:
            worker.wait_for_line("^worker: running queued runs")
        leader = processes.serve(project, *LEADER, database=url, env=ENV, name="leader")
        provider.wait_for_requests(2, timeout=30)
        (first,) = [r for r in all_runs(url) if r.status == "running"]
        (busy,) = wait_for(
            lambda: [w for w in workers if first.id in started_runs(w)], what="its worker"
        )
        (other,) = [w for w in workers if w is not busy]
        with Store.open(url) as store:
            assert [a.raw_output for a in store.get_run(first.id).attempts] == [NOTHING]
        busy.kill()

        leader.wait_for_event("run.interrupted", where=lambda e: e.get("run_id") == first.id)
        leader.wait_for_event("fire.retry", where=lambda e: e.get("retry_of") == first.id)
        runs = wait_for_runs(
            url,
            lambda rs: any(r.retry_of == first.id and r.status not in OPEN for r in rs),
            timeout=60,
            what="finished retry",
        )
        assert leader.stop(signal.SIGTERM) == 0, leader.describe()
        runs = wait_for_runs(
            url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
        )
        assert other.stop(signal.SIGTERM) == 0, other.describe()
    leader.assert_quiet("fire.missed", "run.interrupted")
    other.assert_quiet()

    by_id = {r.id: r for r in runs}
    assert by_id[first.id].status == "interrupted"
    (retry,) = [r for r in runs if r.retry_of == first.id]
    assert (retry.fire_attempt, retry.scheduled_for, retry.status) == (
        2,
        first.scheduled_for,
        "partial",
    ), describe(runs)
    assert retry.id in started_runs(other)
    assert retry.id not in started_runs(busy)
    with Store.open(url) as store:
        interrupted = store.get_run(first.id)
    assert "no heartbeat" in (interrupted.error or "")
    assert [a.raw_output for a in interrupted.attempts][:1] == [NOTHING]
    # The dead worker's job was ended by the leader, so the instruction's lock is free;
    # nothing else ran twice.
    assert jobs(url)[job_of(url, first.id)] == "failed"
    executed = Counter(run_id for w in workers for run_id in started_runs(w))
    assert [run_id for run_id, n in executed.items() if n > 1] == []
    assert_one_row_per_fire_every(runs, seconds=2)


def assert_one_row_per_fire_every(runs: list[RunSummary], *, seconds: int) -> None:
    firsts = sorted(r.scheduled_for for r in runs if r.fire_attempt == 1 and r.scheduled_for)
    assert len(firsts) == len(set(firsts)), describe(runs)
    steps = {int((b - a).total_seconds()) for a, b in itertools.pairwise(firsts)}
    assert steps <= {seconds}, describe(runs)


# --- 3. a leader killed between the claim and the enqueue ------------------------------------

BLOCK_KEY = 4242


@pytest.mark.postgres
def test_a_leader_killed_between_claim_and_enqueue_leaves_neither_and_the_fire_is_settled(
    project: Project, processes: Processes, url: str
) -> None:
    # Every job insert waits on an advisory lock this test holds: the leader's fire is
    # then stopped inside its transaction, after its run row and in its job's insert.
    project.write_definition(cron="*/2 * * * * *", grace=60)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    holder = engine.connect()
    try:
        holder.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": BLOCK_KEY})
        holder.exec_driver_sql(
            "CREATE FUNCTION test_block_jobs() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN PERFORM pg_advisory_xact_lock({BLOCK_KEY}); RETURN NEW; END $$"
        )
        holder.exec_driver_sql(
            "CREATE TRIGGER test_block_jobs BEFORE INSERT ON procrastinate_jobs "
            "FOR EACH ROW EXECUTE FUNCTION test_block_jobs()"
        )
        leader = processes.serve(project, *LEADER, database=url, name="killed")
        (fired,) = leader.wait_for_event("fire", timeout=30)[:1]
        moment = datetime.fromisoformat(str(fired["scheduled_for"]))
        waiting = wait_for(
            lambda: query(
                url,
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%procrastinate_defer_jobs%' AND pid <> pg_backend_pid()",
            ),
            what="a leader transaction waiting in its job insert",
        )
        # Inside the claim's transaction: its run row is written but not committed.
        assert query(url, "SELECT count(*) AS n FROM runs")[0].n == 0
        assert jobs(url) == {}
        leader.kill()
        holder.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": BLOCK_KEY})
        holder.exec_driver_sql("DROP TRIGGER test_block_jobs ON procrastinate_jobs")
        # The server ends the dead client's sessions, rolling their transactions back.
        pids = [row.pid for row in waiting]
        wait_for(
            lambda: (
                not query(url, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(:pids)", pids=pids)
            ),
            what="the killed leader's sessions gone",
        )
    finally:
        holder.close()
        engine.dispose()
    assert query(url, "SELECT count(*) AS n FROM runs")[0].n == 0  # no claim...
    assert jobs(url) == {}  # ...and no job: the window does not exist

    worker = processes.worker(project, *WORKER, database=url, name="worker")
    second = processes.serve(project, *LEADER, database=url, name="next")
    second.wait_for_event("fire.catch_up", timeout=30)
    runs = wait_for_runs(
        url,
        lambda rs: (
            any(r.scheduled_for == moment for r in rs)
            and any(r.trigger == "catch_up" and r.status not in OPEN for r in rs)
        ),
        timeout=60,
        what="the killed fire settled and the catch-up run",
    )
    assert second.stop(signal.SIGTERM) == 0, second.describe()
    runs = wait_for_runs(
        url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
    )
    assert worker.stop(signal.SIGTERM) == 0, worker.describe()
    second.assert_quiet("fire.missed")
    worker.assert_quiet()

    (killed_fire,) = [r for r in runs if r.scheduled_for == moment]
    assert killed_fire.status in {"missed", "partial"}, describe(runs)
    (catch_up,) = [r for r in runs if r.trigger == "catch_up"]
    assert catch_up.status == "partial"
    assert catch_up.id in started_runs(worker)
    assert_one_row_per_fire_every(runs, seconds=2)
    assert set(jobs(url).values()) == {"succeeded"}


def wait_for(found: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = found()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.05)


# --- 4. cancel ---------------------------------------------------------------------------------


@pytest.mark.postgres
def test_cancel_a_queued_run_and_a_running_one(
    project: Project, processes: Processes, url: str
) -> None:
    with ScriptedServer(then=GOOD_REPORT) as provider:
        # The first call never answers while the test runs.
        provider.script.append(dataclasses.replace(GOOD_REPORT, hang=True))
        project.write_definition(
            cron="*/2 * * * * *", grace=60, connector=openai_connector(provider.base_url)
        )
        leader = processes.serve(project, *LEADER, database=url, env=ENV, name="leader")
        leader.wait_for_event("fire.claimed", count=2, timeout=30)
        assert leader.stop(signal.SIGTERM) == 0, leader.describe()
        queued = [r for r in all_runs(url) if r.status == "queued"]
        assert len(queued) >= 2, describe(all_runs(url))
        first, second = queued[0], queued[1]

        # A queued run: cancelled at once, its job too; no worker will run it.
        cancelled = salvagelane("runs", "cancel", second.id[:8], database=url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout == f"cancelled: run {second.id} (daily-triage) was queued\n"
        assert jobs(url)[job_of(url, second.id)] == "cancelled"
        again = salvagelane("runs", "cancel", second.id, database=url)
        assert again.returncode == 2
        assert f"run {second.id} has ended (cancelled): nothing to cancel" in again.stderr

        # A running run: asked to stop, its call in flight is cut (issue 29.6) and it
        # ends cancelled.
        worker = processes.worker(project, *WORKER, database=url, env=ENV, name="worker")
        provider.wait_for_requests(1, timeout=30)
        (running,) = [r for r in all_runs(url) if r.status == "running"]
        assert running.id == first.id
        stopping = salvagelane("runs", "cancel", first.id, database=url)
        assert stopping.returncode == 0, stopping.stderr
        assert stopping.stdout.startswith(
            f"asked to stop: run {first.id} (daily-triage) is running"
        )
        runs = wait_for_runs(
            url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
        )
        assert worker.stop(signal.SIGTERM) == 0, worker.describe()
    worker.assert_quiet("run.cancelled")

    by_id = {r.id: r for r in runs}
    assert by_id[second.id].status == "cancelled"
    assert by_id[first.id].status == "cancelled"
    assert second.id not in started_runs(worker)
    with Store.open(url) as store:
        stopped = store.get_run(first.id)
        never = store.get_run(second.id)
    assert (stopped.error or "").startswith("cancelled: the operator asked the run to stop")
    (cut,) = stopped.attempts  # cut, not retried
    assert cut.raw_output is None  # nothing had arrived
    assert "the call was cut: its run was cancelled" in (cut.provider_error or "")
    assert stopped.report is None
    assert never.attempts == []
    assert (never.error or "").startswith("cancelled: salvagelane runs cancel, before")
    # The rest of the queue ran.
    assert {r.status for r in runs if r.id not in {first.id, second.id}} <= {"partial", "missed"}
    ended = salvagelane("runs", "cancel", first.id, database=url)
    assert ended.returncode == 2


@pytest.mark.postgres
def test_cancel_cuts_the_call_of_a_running_run_whose_provider_stalls(
    project: Project, processes: Processes, url: str
) -> None:
    # Issue 29.6: the provider streams part of an answer, then never sends more. The
    # connector's timeout is ten minutes; `runs cancel` must end the run within seconds,
    # with the text that arrived stored, and the worker must go on taking runs.
    half = json.dumps(COMPLETE)[:60]
    stalled = threading.Event()
    with ScriptedServer(then=GOOD_REPORT) as provider:
        provider.script.append(
            Scripted(
                headers=SSE_HEADERS,
                chunks=[
                    sse_event(
                        {
                            "id": "g",
                            "model": "test/model",
                            "choices": [{"delta": {"content": part}}],
                        }
                    )
                    for part in (half[:30], half[30:])
                ]
                + [b"data: [DONE]\n\n"],
                stall_after=2,
                on_stall=lambda: (stalled.set(), provider.released.wait()),
            )
        )
        connector = openai_connector(provider.base_url, timeout_seconds=600) + "  stream: true\n"
        project.write_definition(cron="*/2 * * * * *", grace=60, connector=connector)
        leader = processes.serve(project, *LEADER, database=url, env=ENV, name="leader")
        leader.wait_for_event("fire.claimed", count=2, timeout=30)
        assert leader.stop(signal.SIGTERM) == 0, leader.describe()
        worker = processes.worker(project, *WORKER, database=url, env=ENV, name="worker")
        assert stalled.wait(30), worker.describe()
        (running,) = [r for r in all_runs(url) if r.status == "running"]

        stopping = salvagelane("runs", "cancel", running.id, database=url)
        assert stopping.returncode == 0, stopping.stderr
        asked = time.monotonic()
        wait_for_runs(
            url,
            lambda rs: any(r.id == running.id and r.status == "cancelled" for r in rs),
            timeout=10,
            what="the cancelled run ended",
        )
        took = time.monotonic() - asked
        # The worker is still healthy: it takes and finishes the rest of the queue.
        runs = wait_for_runs(
            url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
        )
        assert worker.stop(signal.SIGTERM) == 0, worker.describe()
    print(f"cancelled {took:.1f} s after `runs cancel` returned")
    with Store.open(url) as store:
        stopped = store.get_run(running.id)
    assert stopped.status == "cancelled", describe(runs)
    (attempt,) = stopped.attempts  # the cut call was not retried
    assert attempt.raw_output
    assert half.startswith(attempt.raw_output)  # what arrived before the cut, kept
    assert attempt.stream_error is not None
    others = [r for r in runs if r.id != running.id]
    assert others, describe(runs)
    assert {r.status for r in others} <= {"partial", "missed"}, describe(runs)


# --- 5. SQLite refuses the queue ---------------------------------------------------------------


def test_sqlite_refuses_the_queue(project: Project) -> None:
    for args in (
        ("serve", "--dispatch", "queue", "--instructions", str(project.instructions)),
        ("worker", "--instructions", str(project.instructions)),
    ):
        done = salvagelane(*args, database=project.database_url)
        assert done.returncode == 2, done.stderr
        assert "the task queue needs PostgreSQL" in done.stderr
        assert done.stdout == ""
    assert not (project.root / "salvagelane.db").exists()


# --- 6. SIGTERM drains a worker; the deadline holds on it ------------------------------------


@pytest.mark.postgres
def test_sigterm_drains_a_worker_and_the_run_still_going_is_interrupted_then_retried(
    project: Project, processes: Processes, url: str
) -> None:
    with ScriptedServer(then=GOOD_REPORT) as provider:
        provider.script.append(HANG)
        project.write_definition(
            cron="*/2 * * * * *", grace=60, connector=openai_connector(provider.base_url)
        )
        draining = processes.worker(
            project, "--heartbeat", "0.2", "--shutdown-timeout", "1", database=url, env=ENV
        )
        leader = processes.serve(project, *LEADER, database=url, env=ENV, name="leader")
        provider.wait_for_requests(1, timeout=30)
        (hung,) = [r for r in all_runs(url) if r.status == "running"]
        assert draining.stop(signal.SIGTERM, timeout=30) == 0, draining.describe()
        assert draining.stdout_lines[-1] == f"stopped; 1 run(s) marked interrupted: {hung.id}"
        with Store.open(url) as store:
            interrupted = store.get_run(hung.id)
        assert interrupted.status == "interrupted"
        assert (interrupted.error or "").startswith(
            "interrupted: the worker stopped (SIGTERM) and the run did not finish within the "
            "1 s shutdown timeout"
        )

        fresh = processes.worker(project, *WORKER, database=url, env=ENV, name="fresh")
        leader.wait_for_event("fire.retry", where=lambda e: e.get("retry_of") == hung.id)
        runs = wait_for_runs(
            url,
            lambda rs: any(r.retry_of == hung.id and r.status not in OPEN for r in rs),
            timeout=60,
            what="finished retry",
        )
        assert leader.stop(signal.SIGTERM) == 0, leader.describe()
        wait_for_runs(
            url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
        )
        assert fresh.stop(signal.SIGTERM) == 0, fresh.describe()
    (retry,) = [r for r in runs if r.retry_of == hung.id]
    assert (retry.status, retry.fire_attempt) == ("partial", 2)
    assert retry.id in started_runs(fresh)
    draining.assert_quiet("run.interrupted")
    fresh.assert_quiet()
    leader.assert_quiet("fire.missed")


@pytest.mark.postgres
def test_the_run_deadline_holds_on_a_worker(
    project: Project, processes: Processes, url: str
) -> None:
    with ScriptedServer(then=HANG) as provider:
        project.write_definition(
            cron="*/2 * * * * *",
            grace=60,
            deadline=2,
            connector=openai_connector(provider.base_url),
        )
        leader = processes.serve(project, *LEADER, database=url, env=ENV, name="leader")
        leader.wait_for_event("fire.claimed", timeout=30)
        assert leader.stop(signal.SIGTERM) == 0, leader.describe()
        worker = processes.worker(project, *WORKER, database=url, env=ENV, name="worker")
        runs = wait_for_runs(
            url,
            lambda rs: any(r.status == "failed" for r in rs),
            timeout=60,
            what="a run failed by its deadline",
        )
        assert worker.stop(signal.SIGTERM, timeout=30) == 0, worker.describe()
    failed = next(r for r in runs if r.status == "failed")
    with Store.open(url) as store:
        detail = store.get_run(failed.id)
    assert (detail.error or "").startswith("deadline: the run's 2 s deadline passed"), detail.error


# --- 7. the metrics of two workers add up to the database ------------------------------------


@pytest.mark.postgres
def test_the_metrics_of_two_workers_add_up_to_what_the_database_holds(
    project: Project, processes: Processes, url: str
) -> None:
    project.write_definition(grace=60)
    workers = [
        processes.worker(project, *WORKER, "--metrics-port", "0", database=url, name=f"w{i}")
        for i in (1, 2)
    ]
    endpoints = []
    for worker in workers:
        line = worker.wait_for_line(r"^metrics: ", timeout=30)
        found = re.fullmatch(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", line)
        assert found, worker.describe()
        endpoints.append(found.group(1))
    leader = processes.serve(project, *LEADER, database=url, name="leader")
    leader.wait_for_event("fire.claimed", count=6, timeout=60)
    assert leader.stop(signal.SIGTERM) == 0, leader.describe()
    runs = wait_for_runs(
        url, lambda rs: not any(r.status in OPEN for r in rs), timeout=60, what="drained"
    )
    executed = [r for r in runs if r.status != "missed"]
    held = database_figures(url)
    scrapes = [scrape(endpoint) for endpoint in endpoints]
    # Each worker counts the runs it executed; together, every run the database holds.
    for worker, scraped in zip(workers, scrapes, strict=True):
        assert scraped.total("salvagelane_run_duration_seconds_count") == len(started_runs(worker))
    finished: Counter[tuple[str, ...]] = Counter()
    kept: Counter[tuple[str, ...]] = Counter()
    for scraped in scrapes:
        finished.update(
            scraped.by("salvagelane_run_duration_seconds_count", "instruction", "status")
        )
        kept.update(scraped.by("salvagelane_items_kept_total", "instruction"))
        # The database's own figures, read at each scrape, are the same from any process.
        assert scraped.by("salvagelane_runs", "instruction", "status") == held.runs
        # Each worker's definitions give the newest fire gauge.
        assert scraped.by("salvagelane_last_fire_timestamp_seconds", "instruction").keys() == {
            ("daily-triage",)
        }
    assert dict(finished) == {k: v for k, v in held.runs.items() if k[1] != "missed"}
    assert dict(kept) == held.kept
    assert sum(finished.values()) == len(executed)
    for worker in workers:
        assert worker.stop(signal.SIGTERM) == 0, worker.describe()
        worker.assert_quiet()
