"""Notifications (a definition's ``notify``), on SQLite and PostgreSQL, sent to a real
local webhook receiver and a real local SMTP server: each event of a run is sent once,
through the outbox, retried when the receiver is down, and a clean streak's break and
return are told once each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.errors import DefinitionError
from salvagelane.events import logged_stream
from salvagelane.runtime.delivery import redeliver_due, sinks_from_definitions
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.notifications import Notifier, notifications_of
from salvagelane.store import Store
from salvagelane.vocabulary import Trigger
from tests.support.cli import FIXTURE
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project, store

__all__ = ["store"]

FIRST_FIRE = datetime(2026, 11, 20, 5, 20, tzinfo=UTC)
OK = Scripted(status=200, body={"ok": True})


@pytest.fixture
def receiver() -> Iterator[ScriptedServer]:
    with ScriptedServer(then=OK) as server:
        yield server


@pytest.fixture
def clean_fixture(tmp_path: Path) -> Path:
    """A complete daily-triage answer: the truncated fixture's 7 intact items, closed."""
    expected = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    report = {"summary": "Seven things.", "recommendations": [i["data"] for i in expected["items"]]}
    directory = tmp_path / "clean"
    directory.mkdir()
    (directory / "raw.txt").write_text(json.dumps(report), encoding="utf-8")
    meta = {"instruction": "daily-triage", "finish_reason": "stop", "model": "m"}
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return directory


def notifying(project: Project, receiver: ScriptedServer, on: str) -> Instruction:
    notify = f"notify:\n  - on: [{on}]\n    webhook:\n      url: {receiver.origin}/hook\n"
    return load_instruction(project.edit({}, append=notify))


class Runs:
    """Scheduled runs of one instruction, each answered by a fixture, with a notifier."""

    def __init__(self, store: Store, instruction: Instruction, client: httpx.Client) -> None:
        self.store = store
        self.instruction = instruction
        self.client = client
        self.events = logged_stream()
        self.notifier = Notifier(
            store,
            definitions=lambda: {instruction.id: instruction},
            notifications_for=lambda i: notifications_of(i, client, review_url="https://r.test"),
        )
        self.notifier.subscribe(self.events)
        self.fires = 0

    def run(self, fixture: Path) -> str:
        executor = Executor(
            self.store, connector_for=lambda i: ReplayConnector(fixture), events=self.events
        )
        fire = FIRST_FIRE + timedelta(days=self.fires)
        self.fires += 1
        outcome = executor.run(self.instruction, trigger=Trigger.SCHEDULE, scheduled_for=fire)
        return outcome.run_id


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


def bodies(receiver: ScriptedServer) -> list[dict[str, object]]:
    return [r.body for r in receiver.requests]


def test_a_broken_streak_is_told_once_and_its_return_once(
    project: Project, store: Store, receiver: ScriptedServer, clean_fixture: Path
) -> None:
    instruction = notifying(project, receiver, "streak_broken, streak_restored")
    with httpx.Client() as client:
        runs = Runs(store, instruction, client)
        clean = [runs.run(clean_fixture) for _ in range(3)]
        assert receiver.requests == []
        broke = runs.run(FIXTURE)  # partial: the streak of 3 breaks
        runs.run(FIXTURE)  # still partial: nothing new to tell
        back = runs.run(clean_fixture)
    sent = bodies(receiver)
    assert [(b["event"], b["run_id"]) for b in sent] == [
        ("streak_broken", broke),
        ("streak_restored", back),
    ]
    assert sent[0]["streak"] == {
        "change": "broken",
        "length": 3,
        "previous_run": clean[-1],
    }  # type: ignore[index]
    text = str(sent[0]["text"])
    assert text.startswith("daily-triage: clean streak of 3 scheduled run(s) broken by run ")
    assert "- item 8 of the output: truncated: " in text
    assert f"review: https://r.test/runs/{broke}" in text
    # Visible with the run's deliveries, and not counted as the report's sink status.
    (delivery,) = store.get_run(broke).deliveries
    assert (delivery.kind, delivery.status) == ("notify-webhook", "delivered")
    assert delivery.target == f"streak_broken: {receiver.origin}/hook"


def test_each_event_is_sent_once_however_often_it_is_asked(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    instruction = notifying(project, receiver, "partial, failed")
    with httpx.Client() as client:
        runs = Runs(store, instruction, client)
        run_id = runs.run(FIXTURE)
        assert [b["event"] for b in bodies(receiver)] == ["partial"]
        assert runs.notifier.notify(run_id) == []
        assert runs.notifier.sweep(datetime.now(UTC)) == []
    (body,) = bodies(receiver)
    assert (body["status"], body["kept"], body["quarantined"]) == ("partial", 7, 1)
    (reason,) = body["quarantine_reasons"]  # type: ignore[misc]
    assert (reason["item"], reason["reason"]) == (8, "truncated")
    assert "cut at offset 5269" in reason["message"]


def test_a_receiver_that_is_down_gets_the_message_when_it_is_back(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    instruction = notifying(project, receiver, "partial")
    receiver.script.append(Scripted(status=503, body={"error": "down"}))
    with httpx.Client() as client:
        runs = Runs(store, instruction, client)
        run_id = runs.run(FIXTURE)
        (delivery,) = store.get_run(run_id).deliveries
        assert delivery.status == "failed"
        later = datetime.now(UTC) + timedelta(hours=1)
        redelivered = redeliver_due(
            store,
            sinks_for_run=sinks_from_definitions(
                {instruction.id: instruction},
                lambda i: (),
                lambda i: notifications_of(i, client),
            ),
            now=later,
        )
    assert [d.status for d in redelivered] == ["delivered"]
    assert [b["event"] for b in bodies(receiver)] == ["partial", "partial"]
    assert store.get_run(run_id).deliveries[0].status == "delivered"


def test_a_run_whose_notification_was_never_written_is_swept(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    instruction = notifying(project, receiver, "partial")
    # The process that ran it died before its notifier wrote anything.
    outcome = Executor(store, connector_for=lambda i: ReplayConnector(FIXTURE)).run(
        instruction, trigger=Trigger.SCHEDULE, scheduled_for=FIRST_FIRE
    )
    with httpx.Client() as client:
        notifier = Notifier(
            store,
            definitions=lambda: {instruction.id: instruction},
            notifications_for=lambda i: notifications_of(i, client),
        )
        swept = notifier.sweep(datetime.now(UTC))
        assert [(s.run_id, s.event, s.error) for s in swept] == [(outcome.run_id, "partial", None)]
        assert notifier.sweep(datetime.now(UTC)) == []
    assert [b["run_id"] for b in bodies(receiver)] == [outcome.run_id]


def test_a_definition_without_notify_sends_nothing(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    with httpx.Client() as client:
        runs = Runs(store, project.instruction(), client)
        runs.run(FIXTURE)
    assert receiver.requests == []


def test_the_directory_s_default_notifications_apply_unless_a_definition_names_its_own(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    default = [{"on": ["partial"], "webhook": {"url": f"{receiver.origin}/default"}}]
    (project.instructions / "notify.json").write_text(json.dumps(default), encoding="utf-8")
    with httpx.Client() as client:
        Runs(store, project.instruction(), client).run(FIXTURE)
        opted_out = Runs(store, load_instruction(project.edit({}, append="notify: []\n")), client)
        opted_out.fires = 1  # the next day's fire
        opted_out.run(FIXTURE)
    assert [(r.path, r.body["event"]) for r in receiver.requests] == [("/default", "partial")]


def test_a_broken_default_is_refused_naming_its_file(project: Project) -> None:
    broken = [{"on": ["sometimes"], "webhook": {"url": "http://127.0.0.1:1/x"}}]
    (project.instructions / "notify.json").write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(DefinitionError) as refused:
        project.instruction()
    message = str(refused.value)
    assert "notify: expected the default notifications in " in message
    assert "notify.json: at [0].on[0]: 'sometimes' is not one of" in message


def test_the_review_page_lists_a_run_s_notification_with_its_deliveries(
    project: Project, store: Store, receiver: ScriptedServer
) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from salvagelane.ui.app import Settings, create_app
    from salvagelane.ui.security import Access

    instruction = notifying(project, receiver, "partial")
    with httpx.Client() as client:
        run_id = Runs(store, instruction, client).run(FIXTURE)
    settings = Settings(
        store=store,
        access=Access(token="t" * 32, loopback=True),
        instructions_dir=project.root / "instructions",
        actor="alice",
    )
    html = TestClient(create_app(settings), base_url="http://127.0.0.1:8765").get(f"/runs/{run_id}")
    assert html.status_code == 200
    deliveries = html.text.split('<section class="deliveries">', 1)[1].split("</section>", 1)[0]
    row = f"<td>notify-webhook</td><td>partial: {receiver.origin}/hook</td><td>delivered</td>"
    assert row in deliveries
