"""The metrics endpoint against real runs, on SQLite and PostgreSQL.

Runs are real (the replay fixture, and the OpenAI-compatible connector calling the
scripted provider on 127.0.0.1); the endpoint is prometheus_client's real HTTP server,
scraped with httpx and parsed with prometheus_client's parser; every figure is compared
with what the store's ordinary API reads from the database (tests/support/metrics.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from salvagelane.connectors.replay import ReplayConnector
from salvagelane.errors import ConfigurationError
from salvagelane.events.kinds import FireReceived
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.metrics import Metrics, MetricsEndpoint, expose
from salvagelane.store import ReportItemRecord, Store
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import FIXTURE
from tests.support.history import seed
from tests.support.metrics import counted_by, database_figures, scrape
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import (
    JSON_HEADERS,
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    store,
)

__all__ = ["provider", "store"]

FIRE = datetime(2026, 11, 23, 5, 20, tzinfo=UTC)
WITH_PROVIDER_RETRY = {
    "on: [nothing_salvaged]": "on: [nothing_salvaged, truncated, provider_error]"
}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


@pytest.fixture
def metrics(store: Store) -> Metrics:
    return Metrics(state=store.state, process=False)


@pytest.fixture
def endpoint(metrics: Metrics) -> Iterator[MetricsEndpoint]:
    served = expose(0, registry=metrics.registry)
    try:
        yield served
    finally:
        served.close()


def error(status: int, message: str) -> Scripted:
    return Scripted(
        status=status,
        body={"error": {"message": message, "code": status}},
        headers=JSON_HEADERS,
    )


def at(moment: datetime):  # type: ignore[no-untyped-def]
    return lambda: moment


def run_the_mix(project: Project, store: Store, metrics: Metrics, provider: ScriptedServer) -> None:
    """Four real runs: two replayed (truncated, so partial, one item quarantined), one
    scheduled that a 429 answer retries into ``ok``, one refused (400: failed)."""
    replayed = project.instruction()
    scripted = project.instruction(**WITH_PROVIDER_RETRY)
    late = Executor(
        store,
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        events=counted_by(metrics),
        clock=at(FIRE + timedelta(seconds=90)),
    )
    assert late.run(replayed, trigger=Trigger.SCHEDULE, scheduled_for=FIRE).status == "partial"
    assert late.run(replayed, trigger=Trigger.REPLAY).status == "partial"
    provider.script.extend(
        [
            error(429, "slow down"),
            chat_answer(json.dumps({"summary": "Three things.", "recommendations": items(3)})),
            error(400, "bad request"),
        ]
    )
    with httpx.Client() as client:
        calling = openai_connector_for(
            client, provider.base_url, key="sk-metrics-test", sleep=lambda s: None, max_attempts=1
        )
        tomorrow = FIRE + timedelta(days=1)
        on_time = Executor(
            store,
            connector_for=calling,
            events=counted_by(metrics),
            clock=at(tomorrow + timedelta(seconds=2)),
        )
        ran = on_time.run(scripted, trigger=Trigger.SCHEDULE, scheduled_for=tomorrow)
        assert (ran.status, ran.attempts) == ("ok", 2)
        refused = on_time.run(scripted, trigger=Trigger.MANUAL)
        assert (refused.status, refused.attempts) == ("failed", 1)


def test_the_scrape_shows_what_the_database_holds(
    project: Project,
    store: Store,
    database_url: str,
    metrics: Metrics,
    endpoint: MetricsEndpoint,
    provider: ScriptedServer,
) -> None:
    run_the_mix(project, store, metrics, provider)

    scraped = scrape(endpoint.url)
    held = database_figures(database_url)

    assert scraped.total("salvagelane_state_up") == 1
    # The state gauges, from the database at scrape time.
    assert (
        scraped.by("salvagelane_runs", "instruction", "status")
        == held.runs
        == {
            ("daily-triage", "partial"): 2,
            ("daily-triage", "ok"): 1,
            ("daily-triage", "failed"): 1,
        }
    )
    assert scraped.by("salvagelane_quarantine_pending", "instruction", "reason") == held.pending
    assert held.pending == {("daily-triage", "truncated"): 2}
    assert scraped.by("salvagelane_deliveries", "status") == {}
    assert {s.labels["status"] for s in scraped.samples if s.name == "salvagelane_deliveries"} == {
        "pending",
        "failed",
    }
    assert scraped.by("salvagelane_queue_depth", "source") == {}
    assert scraped.by("salvagelane_last_clean_run_timestamp_seconds", "instruction") == {
        ("daily-triage",): (FIRE + timedelta(days=1)).timestamp()
    }

    # The event metrics, counted as the runs happened, agree with what they stored.
    assert scraped.by("salvagelane_run_duration_seconds_count", "instruction", "status") == (
        held.runs
    )
    assert scraped.by("salvagelane_tokens_total", "instruction", "type") == held.tokens
    assert held.tokens == {
        ("daily-triage", "input"): 2 * 2874 + 100,
        ("daily-triage", "output"): 2 * 1400 + 50,
    }
    assert scraped.total("salvagelane_model_call_duration_seconds_count") == held.attempts == 5
    assert scraped.by("salvagelane_model_call_duration_seconds_count", "outcome") == {
        ("ok",): 3,
        ("error",): 2,
    }
    assert scraped.by("salvagelane_provider_errors_total", "instruction", "status") == (
        held.provider_errors
    )
    assert held.provider_errors == {("daily-triage", "429"): 1, ("daily-triage", "400"): 1}
    # Every attempt after a run's first is a retry.
    assert scraped.total("salvagelane_retries_total") == held.attempts - 4
    assert scraped.by("salvagelane_retries_total", "cause") == {("provider_error",): 1}
    assert scraped.by("salvagelane_items_kept_total", "instruction") == held.kept
    # Nothing was reviewed: what the runs held back is what is pending.
    assert scraped.by("salvagelane_items_quarantined_total", "instruction", "reason") == (
        held.pending
    )
    # Fire lag of the two scheduled runs (the clocks were fixed): 90 s and 2 s late.
    assert scraped.by("salvagelane_fire_lag_seconds_count", "trigger") == {("schedule",): 2}
    assert scraped.total("salvagelane_fire_lag_seconds_sum") == 92
    assert scraped.total("salvagelane_fire_lag_seconds_bucket", le="60.0") == 1


def test_a_new_process_shows_the_same_state_and_fresh_counters(
    project: Project,
    store: Store,
    database_url: str,
    metrics: Metrics,
    provider: ScriptedServer,
) -> None:
    run_the_mix(project, store, metrics, provider)
    with Store.open(database_url) as reopened:
        restarted = Metrics(state=reopened.state, process=False)
        served = expose(0, registry=restarted.registry)
        try:
            scraped = scrape(served.url)
        finally:
            served.close()
    assert scraped.by("salvagelane_runs", "instruction", "status") == (
        database_figures(database_url).runs
    )
    assert scraped.by("salvagelane_run_duration_seconds_count", "instruction", "status") == {}
    assert scraped.total("salvagelane_tokens_total") == 0


def test_a_queued_run_and_waiting_jobs_are_the_queue_depth(
    project: Project, store: Store, database_url: str, endpoint: MetricsEndpoint
) -> None:
    Executor(store, connector_for=lambda instruction: ReplayConnector(FIXTURE)).run(
        project.instruction(), trigger=Trigger.REPLAY
    )
    engine = sa.create_engine(database_url)
    try:
        # A status this version's RunStatus may not have (the queue dispatch writes it):
        # counted by its word, not refused.
        with engine.begin() as connection:
            connection.execute(sa.text("UPDATE runs SET status = 'queued'"))
        scraped = scrape(endpoint.url)
        assert scraped.total("salvagelane_state_up") == 1
        assert scraped.by("salvagelane_runs", "status") == {("queued",): 1}
        assert scraped.by("salvagelane_queue_depth", "source") == {("runs",): 1}
        if engine.dialect.name != "postgresql":
            assert 'salvagelane_queue_depth{source="procrastinate"}' not in scraped.text
            return
        schema = pytest.importorskip("procrastinate.schema")
        with engine.begin() as connection:
            # Through the driver's own cursor: without parameters psycopg leaves the
            # schema's % signs alone.
            cursor = connection.connection.cursor()
            cursor.execute(schema.SchemaManager.get_schema())
            cursor.close()
            for queue, status in [
                ("runs", "todo"),
                ("runs", "todo"),
                ("other", "todo"),
                ("runs", "doing"),
                ("runs", "succeeded"),
            ]:
                connection.execute(
                    sa.text(
                        "INSERT INTO procrastinate_jobs (queue_name, task_name, status) "
                        "VALUES (:queue, 'salvagelane.run', "
                        "CAST(:status AS procrastinate_job_status))"
                    ),
                    {"queue": queue, "status": status},
                )
        scraped = scrape(endpoint.url)
        assert scraped.by("salvagelane_queue_depth", "source") == {
            ("runs",): 1,
            ("procrastinate",): 3,
        }
    finally:
        engine.dispose()


def test_a_database_that_does_not_answer_is_state_up_0_not_zero_counts(
    project: Project, store: Store, database_url: str, endpoint: MetricsEndpoint
) -> None:
    Executor(store, connector_for=lambda instruction: ReplayConnector(FIXTURE)).run(
        project.instruction(), trigger=Trigger.REPLAY
    )
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("ALTER TABLE runs RENAME TO runs_away"))
        broken = scrape(endpoint.url)
        with engine.begin() as connection:
            connection.execute(sa.text("ALTER TABLE runs_away RENAME TO runs"))
        mended = scrape(endpoint.url)
    finally:
        engine.dispose()
    assert broken.total("salvagelane_state_up") == 0
    assert "salvagelane_runs" not in broken.names()
    assert "salvagelane_quarantine_pending" not in broken.names()
    assert mended.total("salvagelane_state_up") == 1
    assert mended.by("salvagelane_runs", "status") == {("partial",): 1}


def test_a_port_in_use_is_a_configuration_error(
    metrics: Metrics, endpoint: MetricsEndpoint
) -> None:
    with pytest.raises(
        ConfigurationError, match=rf"metrics: cannot listen on 127.0.0.1:{endpoint.port}"
    ):
        expose(endpoint.port, registry=metrics.registry)


def test_the_registry_is_the_process_s_own(store: Store) -> None:
    from prometheus_client import REGISTRY

    first, second = Metrics(state=store.state), Metrics(state=store.state)
    assert first.registry is not second.registry is not REGISTRY
    first.observe(FireReceived(instruction_id="a", scheduled_for=None, trigger=Trigger.SCHEDULE))
    assert (
        first.registry.get_sample_value(
            "salvagelane_fires_total", {"instruction": "a", "trigger": "schedule"}
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "salvagelane_fires_total", {"instruction": "a", "trigger": "schedule"}
        )
        is None
    )
    assert (
        REGISTRY.get_sample_value(
            "salvagelane_fires_total", {"instruction": "a", "trigger": "schedule"}
        )
        is None
    )
    # The process collectors are there (memory per process, for the load benchmark).
    assert first.registry.get_sample_value("process_resident_memory_bytes") is not None


def test_the_last_clean_run_is_the_one_health_calls_clean(
    store: Store, endpoint: MetricsEndpoint
) -> None:
    clean_fire = FIRE - timedelta(days=1)
    seed(store, at=clean_fire, status=RunStatus.OK, instruction_id="daily-triage")
    # Today's fire was repaired by an operator: ok, but not clean.
    repaired = seed(
        store, at=FIRE, status=RunStatus.PARTIAL, instruction_id="daily-triage", reasons=("schema",)
    )
    (held,) = store.get_run(repaired).quarantined
    approval = store.quarantine.approve_quarantined(
        held.id,
        item=ReportItemRecord(
            source_index=1, data={"a": 3}, span_start=None, span_end=None, origin="operator"
        ),
        expected_items=1,
        actor="alice",
        note=None,
        now=FIRE + timedelta(minutes=5),
    )
    assert approval.status == "ok"
    # A manual run that ended ok has no fire to be clean for.
    seed(
        store,
        at=FIRE + timedelta(hours=1),
        status=RunStatus.OK,
        instruction_id="daily-triage",
        trigger=Trigger.MANUAL,
    )

    scraped = scrape(endpoint.url)

    health = store.health.instruction_health("daily-triage", now=FIRE + timedelta(hours=2))
    assert health.streak.broken_by is not None
    assert health.streak.broken_by.id == repaired
    assert health.streak.count == 0
    assert scraped.by("salvagelane_last_clean_run_timestamp_seconds", "instruction") == {
        ("daily-triage",): clean_fire.timestamp()
    }
    assert scraped.by("salvagelane_runs", "status") == {("ok",): 3}
    assert scraped.by("salvagelane_quarantine_pending", "reason") == {}
