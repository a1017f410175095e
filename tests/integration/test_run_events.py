"""A real run publishes its facts as run events, once each and in order, on SQLite and
PostgreSQL; a subscriber that fails on every event changes nothing of the run."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from salvagelane.events import Event, EventStream, logged_stream
from salvagelane.events.kinds import ItemReviewed, ItemsRejected, RunEvent, RunFinished
from salvagelane.review.approval import reject_quarantined
from salvagelane.store import Store
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.run_setup import Project, replay_executor, store

__all__ = ["store"]

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


REPLAYED_RUN = [
    "run.started",
    "model.called",
    "attempt.stored",
    "attempt.salvaged",
    "run.finished",
]
"""The bundled truncated fixture, replayed: one call, kept 7, one item quarantined, and
no retry (the example retries only when nothing was salvaged)."""


def test_a_run_publishes_its_facts_once_in_order(project: Project, store: Store) -> None:
    stream = logged_stream()
    seen: list[Event] = []
    stream.subscribe(seen.append)
    outcome = replay_executor(store, events=stream).run(project.instruction())
    assert [event.name for event in seen] == REPLAYED_RUN
    assert all(isinstance(event, RunEvent) and event.run_id == outcome.run_id for event in seen)
    finished = seen[-1]
    assert isinstance(finished, RunFinished)
    assert (finished.status, finished.kept, finished.quarantined) == (
        outcome.status,
        outcome.kept,
        outcome.quarantined_total,
    )
    assert finished.by_reason == outcome.quarantined


def test_a_failing_subscriber_never_fails_the_run(project: Project, store: Store) -> None:
    failures: list[str] = []
    stream = EventStream(on_failure=lambda event, s, exc: failures.append(event.name))
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("a consumer that always fails")

    stream.subscribe(broken)
    stream.subscribe(lambda event: seen.append(event.name))
    outcome = replay_executor(store, events=stream).run(
        project.instruction(), trigger=Trigger.REPLAY
    )
    assert (outcome.status, outcome.kept, outcome.quarantined_total) == (RunStatus.PARTIAL, 7, 1)
    assert seen == REPLAYED_RUN
    assert failures == REPLAYED_RUN
    stored = store.get_run(outcome.run_id)
    assert stored.status == "partial"
    assert stored.report is not None
    assert len(stored.report.items) == 7


def test_review_decisions_are_events(project: Project, store: Store) -> None:
    outcome = replay_executor(store).run(project.instruction())
    (held,) = store.get_run(outcome.run_id).quarantined
    stream = EventStream()
    seen: list[Event] = []
    stream.subscribe(seen.append, [ItemReviewed, ItemsRejected])
    reject_quarantined(store, held.id, actor="alice", note="cut off", now=NOW, events=stream)
    assert seen == [
        ItemReviewed(quarantine_id=held.id, run_id=outcome.run_id, action="rejected", actor="alice")
    ]
    assert store.quarantine.get_quarantine(held.id).review_status == "rejected"
