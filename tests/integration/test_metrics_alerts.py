"""The example alerts (docs/prometheus/, shown in docs/guides/metrics.md) are valid rules
that fire when they should, and name metrics salvagelane really exposes; the newest fire
gauge they compare with the newest clean run is each schedule's newest fire.

promtool (Debian's ``prometheus`` package) checks and unit-tests the rules; without it
those tests skip with a note, except under CI (``CI`` set), where .ci/run installs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from salvagelane.definitions.model import Schedule
from salvagelane.runtime.metrics import Metrics, MetricsEndpoint, expose
from salvagelane.store import Store
from tests.support.metrics import scrape
from tests.support.run_setup import Project, store

__all__ = ["store"]

RULES = Path(__file__).parents[2] / "docs" / "prometheus"


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not installed, and the alert tests must run under CI")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    done = subprocess.run(
        [tool, *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid_prometheus_rules() -> None:
    assert "SUCCESS: 4 rules found" in promtool("check", "rules", "salvagelane-alerts.yml")


def test_the_rules_fire_when_an_instruction_was_not_clean_and_only_then() -> None:
    assert "SUCCESS" in promtool("test", "rules", "salvagelane-alerts.test.yml")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


@contextmanager
def served(metrics: Metrics) -> Iterator[MetricsEndpoint]:
    endpoint = expose(0, registry=metrics.registry)
    try:
        yield endpoint
    finally:
        endpoint.close()


def fires_scraped(url: str) -> dict[str, datetime]:
    """The newest fire gauge of a scrape, by instruction."""
    return {
        sample.labels["instruction"]: datetime.fromtimestamp(sample.value, UTC)
        for sample in scrape(url).samples
        if sample.name == "salvagelane_last_fire_timestamp_seconds"
    }


def test_the_rules_name_metrics_salvagelane_exposes(project: Project, store: Store) -> None:
    named = set(
        re.findall(r"\bsalvagelane_[a-z_]+", (RULES / "salvagelane-alerts.yml").read_text())
    )
    assert named == {
        "salvagelane_last_fire_timestamp_seconds",
        "salvagelane_last_clean_run_timestamp_seconds",
        "salvagelane_state_up",
        "salvagelane_queue_stalled",
        "salvagelane_queue_oldest_wait_seconds",
        "salvagelane_budget_exhausted_total",
    }
    instruction = project.instruction()
    metrics = Metrics(
        state=store.state,
        process=False,
        schedules=lambda: {instruction.id: instruction.schedule},
    )
    with served(metrics) as endpoint:
        scraped = scrape(endpoint.url)
    exposed = set(re.findall(r"^# TYPE (\S+) ", scraped.text, re.MULTILINE))
    assert named <= exposed, named - exposed
    # The new gauge has a sample, not only its HELP and TYPE.
    assert scraped.by("salvagelane_last_fire_timestamp_seconds", "instruction").keys() == {
        ("daily-triage",)
    }
    # The guide's tables list every metric a scrape has, and no other.
    guide = (RULES.parent / "guides" / "metrics.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(salvagelane_[a-z_]+)` \|", guide, re.MULTILINE))
    assert listed == {name for name in exposed if name.startswith("salvagelane_")}


def test_the_newest_fire_gauge_is_each_schedule_s_newest_fire_at_the_clock(
    project: Project, store: Store, database_url: str
) -> None:
    # Weekdays at 09:30 in Berlin: on Monday 2026-11-23 at 07:00 UTC (08:00 CET) the
    # newest fire is Friday's, 08:30 UTC; hourly-sync's is 07:00 itself (at or before).
    instruction = project.instruction(
        **{
            'cron: "20 5 * * *"': 'cron: "30 9 * * 1-5"',
            "  timezone: UTC\n  misfire": "  timezone: Europe/Berlin\n  misfire",
        }
    )
    schedules = {
        instruction.id: instruction.schedule,
        "hourly-sync": Schedule(cron="0 * * * *", timezone="UTC"),
    }
    now = [datetime(2026, 11, 23, 7, 0, tzinfo=UTC)]
    metrics = Metrics(
        state=store.state, process=False, clock=lambda: now[0], schedules=lambda: dict(schedules)
    )
    with served(metrics) as endpoint:
        first = fires_scraped(endpoint.url)
        # An hour and three quarters on, and a reload that drops hourly-sync: Monday's
        # 09:30 CET fire, and no gauge for the instruction no longer served.
        now[0] = datetime(2026, 11, 23, 8, 45, tzinfo=UTC)
        del schedules["hourly-sync"]
        second = fires_scraped(endpoint.url)
        # The database does not answer: the gauge is left out with the state gauges, so
        # the rule compares it with a newest clean run of the same scrape, never with none.
        engine = sa.create_engine(database_url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("ALTER TABLE runs RENAME TO runs_away"))
            broken = fires_scraped(endpoint.url)
            with engine.begin() as connection:
                connection.execute(sa.text("ALTER TABLE runs_away RENAME TO runs"))
            mended = fires_scraped(endpoint.url)
        finally:
            engine.dispose()
    assert first == {
        "daily-triage": datetime(2026, 11, 20, 8, 30, tzinfo=UTC),
        "hourly-sync": datetime(2026, 11, 23, 7, 0, tzinfo=UTC),
    }
    assert second == {"daily-triage": datetime(2026, 11, 23, 8, 30, tzinfo=UTC)}
    assert broken == {}
    assert mended == second
