"""``run --scheduled-for`` without ``serve``: a claim whose process died is taken over.

Issue 11.4: cron fires ``run X --scheduled-for T``; the process is killed during the
model call; the same command run again used to say "already claimed ... (running);
nothing to do" forever, because only a ``serve`` leader marked a stale run interrupted.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from salvagelane.store import Store
from tests.support.cli import clean_env, command, salvagelane
from tests.support.provider import ScriptedServer
from tests.support.serve import GOOD_REPORT, HANG, KEY_ENV, Project, all_runs, openai_connector

FIRE = "2026-11-23T05:20:00+00:00"
STALE_AFTER = "1"


@pytest.fixture
def provider() -> Iterator[ScriptedServer]:
    with ScriptedServer(then=GOOD_REPORT) as server:
        yield server


def run_fire(project: Project, *extra: str) -> subprocess.CompletedProcess[str]:
    return salvagelane(
        "run",
        "daily-triage",
        "--scheduled-for",
        FIRE,
        "--stale-after",
        STALE_AFTER,
        "--instructions",
        str(project.instructions),
        *extra,
        database=project.database_url,
        env={KEY_ENV: "sk-cron-test"},
        cwd=project.root,
    )


def wait_until_stale(database_url: str, run_id: str, seconds: float) -> None:
    """Until the run's last sign of life is older than ``seconds`` (its process is dead,
    so it only ages)."""
    with Store.open(database_url) as store:
        last = store.get_run(run_id).heartbeat_at
    assert last is not None
    while datetime.now(UTC) <= last + timedelta(seconds=seconds + 0.2):
        time.sleep(0.1)


def test_the_next_run_of_a_fire_takes_over_a_claim_whose_process_died(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    project = Project.create(tmp_path)
    project.write_definition(connector=openai_connector(provider.base_url))
    provider.script.append(HANG)

    first = subprocess.Popen(
        command(
            "run",
            "daily-triage",
            "--scheduled-for",
            FIRE,
            "--instructions",
            str(project.instructions),
        ),
        cwd=project.root,
        env=clean_env({KEY_ENV: "sk-cron-test", "SALVAGELANE_DATABASE_URL": project.database_url}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        provider.wait_for_requests(1, timeout=30)  # inside the model call
    finally:
        first.kill()
        first.wait(timeout=10)
    (claimed,) = all_runs(project.database_url)
    assert (claimed.status, claimed.fire_attempt) == ("running", 1)

    # Within the staleness limit the claim may be alive: nothing to do.
    early = run_fire(project, "--stale-after", "3600")
    assert early.returncode == 0, early.stderr
    assert "already claimed" in early.stdout
    assert len(provider.requests) == 1

    wait_until_stale(project.database_url, claimed.id, float(STALE_AFTER))
    taken = run_fire(project)
    assert taken.returncode == 0, taken.stderr
    assert "taking over" in taken.stderr
    assert len(provider.requests) == 2

    runs = {run.id: run for run in all_runs(project.database_url)}
    assert runs[claimed.id].status == "interrupted"
    (retry,) = [run for run in runs.values() if run.retry_of == claimed.id]
    assert (retry.fire_attempt, retry.status) == (2, "partial")
    with Store.open(project.database_url) as store:
        assert "no heartbeat" in (store.get_run(claimed.id).error or "")

    # The fire has had its one retry: a third call does nothing.
    again = run_fire(project)
    assert again.returncode == 0, again.stderr
    assert "already claimed" in again.stdout
    assert len(provider.requests) == 2
    assert len(all_runs(project.database_url)) == 2
