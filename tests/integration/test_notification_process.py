"""A notification survives ``kill -9``: a real ``salvagelane run`` process killed while
it is sending a partial run's notification leaves it in the outbox, and the next
``runs redeliver --pending`` (what a restarted node's redelivery does) sends it; it is
recorded once. SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from salvagelane.store import Store
from tests.support.cli import FIXTURE, command, command_env, salvagelane, upgraded
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project

OK = Scripted(status=200, body={"ok": True})


@pytest.fixture
def receiver() -> Iterator[ScriptedServer]:
    with ScriptedServer(then=OK) as server:
        yield server


def test_a_notification_cut_by_kill_9_is_sent_after_the_restart(
    tmp_path: Path, database_url: str, receiver: ScriptedServer
) -> None:
    project = Project.create(tmp_path)
    project.edit(
        {},
        append=(f"notify:\n  - on: [partial]\n    webhook:\n      url: {receiver.origin}/hook\n"),
    )
    upgraded(database_url)
    receiver.script.append(Scripted(hang=True))  # the first send never gets an answer
    args = ["run", "daily-triage", "--instructions", str(project.instructions)]
    running = subprocess.Popen(
        command(*args, "--replay", str(FIXTURE)),
        env=command_env(database_url, {"SALVAGELANE_LOG_FORMAT": "json"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        receiver.wait_for_requests(1, timeout=60)
        running.send_signal(signal.SIGKILL)
        assert running.wait(timeout=30) == -signal.SIGKILL
    finally:
        if running.poll() is None:
            running.kill()
        running.communicate()
    with Store.open(database_url) as store:
        (run,) = store.list_runs(instruction_id="daily-triage", limit=5)
        assert run.status == "partial"  # committed before the notification
        (cut,) = store.get_run(run.id).deliveries
        assert (cut.kind, cut.status) == ("notify-webhook", "pending")

    again = salvagelane(
        "runs",
        "redeliver",
        "--pending",
        "--instructions",
        str(project.instructions),
        database=database_url,
    )
    assert again.returncode == 0, again.stderr
    assert [r.body["event"] for r in receiver.requests] == ["partial", "partial"]
    assert receiver.requests[1].body["run_id"] == run.id
    with Store.open(database_url) as store:
        (sent,) = store.get_run(run.id).deliveries
        assert (sent.id, sent.status) == (cut.id, "delivered")
