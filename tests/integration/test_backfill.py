"""``salvagelane backfill`` on SQLite and PostgreSQL: the fires of a range, each claimed as
``run --scheduled-for`` claims it, once however often the backfill runs or is killed."""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from salvagelane.store import RunSummary, Store, upgrade
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import salvagelane_here
from tests.support.history import seed
from tests.support.provider import ScriptedServer
from tests.support.serve import GOOD_REPORT, HANG, KEY_ENV, Processes, Project, openai_connector

FIRST = datetime(2026, 11, 21, 5, 20, tzinfo=UTC)
DAY = timedelta(days=1)
FIRES = [FIRST + n * DAY for n in range(7)]
RANGE = ("--from", "2026-11-21", "--to", "2026-11-27")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    made = Project.create(tmp_path)
    made.write_definition(cron="20 5 * * *")  # daily at 05:20 UTC, answered by the replay
    return made


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


def backfill(project: Project, database_url: str, *args: str) -> tuple[int, str, str]:
    proc = salvagelane_here(
        "backfill",
        "daily-triage",
        "--instructions",
        str(project.instructions),
        *args,
        database=database_url,
        cwd=project.root,
    )
    return proc.returncode, proc.stdout, proc.stderr


def runs_of(store: Store) -> list[RunSummary]:
    return sorted(
        store.list_runs(instruction_id="daily-triage", limit=1000),
        key=lambda run: (run.scheduled_for or run.created_at, run.fire_attempt),
    )


def test_a_week_of_a_daily_instruction_runs_seven_fires_once(
    project: Project, database_url: str, store: Store
) -> None:
    code, out, err = backfill(project, database_url, *RANGE)

    assert code == 0, err
    runs = runs_of(store)
    assert [run.scheduled_for for run in runs] == FIRES
    assert {run.trigger for run in runs} == {Trigger.BACKFILL}
    assert {run.status for run in runs} == {RunStatus.PARTIAL}  # the truncated fixture
    assert {(run.fire_attempt, run.retry_of) for run in runs} == {(1, None)}
    progress = [line for line in err.splitlines() if "/7 " in line]
    assert progress[2] == (
        f"backfill daily-triage: 3/7 2026-11-23T05:20Z partial (kept 7, quarantined 1; "
        f"run {runs[2].id[:8]})"
    )
    assert len(progress) == 7
    assert out == "backfill daily-triage: 7 fire(s): ran 7, skipped-existing 0, failed 0\n"

    # Again: every fire has its outcome, nothing runs.
    code, out, err = backfill(project, database_url, *RANGE)

    assert code == 0, err
    assert runs_of(store) == runs
    assert out == "backfill daily-triage: 7 fire(s): ran 0, skipped-existing 7, failed 0\n"
    assert "1/7 2026-11-21T05:20Z skipped: has run" in err


def test_a_fire_with_its_outcome_is_left_alone_unless_reprocessed(
    project: Project, database_url: str, store: Store
) -> None:
    ok = seed(store, at=FIRES[1], status=RunStatus.OK, instruction_id="daily-triage")
    partial = seed(
        store, at=FIRES[4], status=RunStatus.PARTIAL, instruction_id="daily-triage",
        reasons=("schema",),
    )  # fmt: skip

    code, out, err = backfill(project, database_url, *RANGE)

    assert code == 0, err
    assert out.endswith("ran 5, skipped-existing 2, failed 0\n")
    runs = runs_of(store)
    assert [run.id for run in runs if run.scheduled_for in (FIRES[1], FIRES[4])] == [ok, partial]
    assert [run.scheduled_for for run in runs] == FIRES

    code, out, err = backfill(project, database_url, *RANGE, "--reprocess", "partial")

    # Every partial fire runs again (the replay's runs are partial too), the ok one does not.
    assert code == 0, err
    assert out.endswith("ran 6, skipped-existing 1, failed 0\n")
    again = runs_of(store)
    retries = [run for run in again if run.fire_attempt == 2]
    assert len(retries) == 6
    assert {run.trigger for run in retries} == {Trigger.BACKFILL}
    retry_of_partial = next(run for run in retries if run.scheduled_for == FIRES[4])
    assert retry_of_partial.retry_of == partial
    assert [run.id for run in again if run.scheduled_for == FIRES[1]] == [ok]
    assert "5/7 2026-11-25T05:20Z partial (kept 7, quarantined 1; run " in err
    assert f"reprocess run {partial[:8]} (partial))" in err


def test_a_dry_run_lists_the_fires_and_writes_nothing(
    project: Project, database_url: str, store: Store
) -> None:
    ok = seed(store, at=FIRES[0], status=RunStatus.OK, instruction_id="daily-triage")

    code, out, err = backfill(project, database_url, *RANGE, "--dry-run")

    assert code == 0, err
    lines = out.splitlines()
    assert (
        lines[0] == f"backfill daily-triage: 1/7 2026-11-21T05:20Z skipped: has run {ok[:8]} (ok)"
    )
    assert lines[1] == "backfill daily-triage: 2/7 2026-11-22T05:20Z would run"
    assert (
        lines[-1] == "backfill daily-triage: dry run: would run 6, leave 1 alone; nothing changed"
    )
    assert [run.id for run in runs_of(store)] == [ok]


def test_a_naive_range_is_read_in_the_schedules_time_zone(
    project: Project, database_url: str, store: Store
) -> None:
    text = project.definition.read_text(encoding="utf-8")
    project.definition.write_text(
        text.replace("  timezone: UTC\n", "  timezone: America/New_York\n", 1), encoding="utf-8"
    )

    code, out, err = backfill(
        project, database_url, "--from", "2026-11-21T05:20", "--to", "2026-11-21T05:20", "--dry-run"
    )

    # 05:20 in New York (EST, UTC-5) is 10:20 UTC.
    assert code == 0, err
    assert out.splitlines()[0] == "backfill daily-triage: 1/1 2026-11-21T10:20Z would run"


def test_a_killed_backfill_rerun_leaves_every_fire_one_outcome(
    project: Project, database_url: str, store: Store, processes: Processes
) -> None:
    slow = dataclasses.replace(GOOD_REPORT, delay=0.2)
    with ScriptedServer(then=slow) as server:
        server.script.extend([slow, slow, HANG])  # the third fire's call never answers
        project.write_definition(cron="20 5 * * *", connector=openai_connector(server.base_url))
        env = {KEY_ENV: "test-key"}
        first = processes.serve(
            project, "daily-triage", *RANGE, "--stale-after", "1",
            database=database_url, env=env, subcommand="backfill",
        )  # fmt: skip
        server.wait_for_requests(3, timeout=60)
        first.proc.kill()  # kill -9 while the third fire's run waits for the model
        first.proc.wait(timeout=10)
        killed = runs_of(store)
        assert [run.status == RunStatus.RUNNING for run in killed] == [False, False, True]
        time.sleep(1.5)  # the killed run's heartbeat goes stale (--stale-after 1)

        second = processes.serve(
            project, "daily-triage", *RANGE, "--stale-after", "1",
            database=database_url, env=env, subcommand="backfill",
        )  # fmt: skip
        assert second.proc.wait(timeout=120) == 0, second.describe()

    runs = runs_of(store)
    newest = {run.scheduled_for: run for run in runs}  # the last run of each fire
    assert list(newest) == FIRES
    ended = {run.status for run in newest.values()}
    assert ended <= {RunStatus.OK, RunStatus.PARTIAL}, ended
    # The killed fire: its run marked interrupted, and one retry of it; no other fire twice.
    stopped = killed[2]
    assert [(run.id, run.status) for run in runs if run.scheduled_for == FIRES[2]] == [
        (stopped.id, RunStatus.INTERRUPTED),
        (newest[FIRES[2]].id, newest[FIRES[2]].status),
    ]
    assert newest[FIRES[2]].retry_of == stopped.id
    assert newest[FIRES[2]].status != RunStatus.INTERRUPTED
    assert len(runs) == 8
    assert "ran 5, skipped-existing 2, failed 0" in second.stdout

    # A third backfill changes nothing.
    code, out, err = backfill(project, database_url, *RANGE)
    assert code == 0, err
    assert len(runs_of(store)) == 8
    assert out.endswith("ran 0, skipped-existing 7, failed 0\n")


def test_ctrl_c_finishes_the_fire_in_flight_and_claims_no_other(
    project: Project, database_url: str, store: Store, processes: Processes
) -> None:
    slow = dataclasses.replace(GOOD_REPORT, delay=1.5)
    with ScriptedServer(then=slow) as server:
        project.write_definition(cron="20 5 * * *", connector=openai_connector(server.base_url))
        running = processes.serve(
            project, "daily-triage", *RANGE,
            database=database_url, env={KEY_ENV: "test-key"}, subcommand="backfill",
        )  # fmt: skip
        server.wait_for_requests(1, timeout=60)
        running.proc.send_signal(signal.SIGINT)  # while the first fire waits for the model
        assert running.proc.wait(timeout=60) == 130, running.describe()

    (run,) = runs_of(store)
    assert run.scheduled_for == FIRES[0]
    assert run.status in (RunStatus.OK, RunStatus.PARTIAL)  # it finished, with its report
    assert len(server.requests) == 1
    assert (
        "7 fire(s): ran 1, skipped-existing 0, failed 0; stopped by Ctrl-C, 6 fire(s) left "
        "untouched" in running.stdout
    )


def test_a_live_run_is_left_alone_and_an_interrupted_one_retried(
    project: Project, database_url: str, store: Store
) -> None:
    one_day = ("--from", "2026-11-21", "--to", "2026-11-21")
    alive = store.start_run(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger=Trigger.SCHEDULE,
        scheduled_for=FIRES[0],
        now=datetime.now(UTC),  # its heartbeat is fresh: another process runs it
    )

    code, out, err = backfill(project, database_url, *one_day)

    assert code == 0, err
    assert f"1/1 2026-11-21T05:20Z skipped: run {alive[:8]} (running) is in flight" in err
    assert [run.id for run in runs_of(store)] == [alive]

    store.fail_run(
        alive, finished_at=datetime.now(UTC), error="it died", status=RunStatus.INTERRUPTED
    )
    code, out, err = backfill(project, database_url, *one_day)

    assert code == 0, err
    first, retry = runs_of(store)
    assert (first.id, first.status) == (alive, RunStatus.INTERRUPTED)
    assert (retry.trigger, retry.retry_of, retry.fire_attempt) == (Trigger.BACKFILL, alive, 2)
    assert out.endswith("1 fire(s): ran 1, skipped-existing 0, failed 0\n")
