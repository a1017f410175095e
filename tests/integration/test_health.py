"""Run health (``Store.health`` and ``salvagelane health``) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from salvagelane.store import Store, upgrade
from salvagelane.store.health import health_json
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.history import seed

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


def history(store: Store) -> dict[str, str]:
    """Eight days of a daily fire, oldest first: clean, partial, missed, interrupted, then
    three clean ones; a manual run in between; a failed fire outside a 7-day window."""
    runs = {}
    runs["old-failed"] = seed(store, at=NOW - 9 * DAY, status=RunStatus.FAILED)
    runs["clean-1"] = seed(store, at=NOW - 6 * DAY, status=RunStatus.OK)
    runs["partial"] = seed(
        store, at=NOW - 5 * DAY, status=RunStatus.PARTIAL, reasons=("schema", "truncated")
    )
    runs["missed"] = seed(store, at=NOW - 4 * DAY, status=RunStatus.MISSED)
    runs["interrupted"] = seed(store, at=NOW - 3 * DAY, status=RunStatus.INTERRUPTED)
    runs["manual"] = seed(
        store,
        at=NOW - 3 * DAY + timedelta(hours=1),
        status=RunStatus.PARTIAL,
        trigger=Trigger.MANUAL,
        reasons=("schema",),
        finish_reason="length",
    )
    for n, back in enumerate((2, 1, 0), 1):
        runs[f"streak-{n}"] = seed(
            store, at=NOW - back * DAY - timedelta(hours=1), status=RunStatus.OK
        )
    runs["other"] = seed(store, at=NOW, status=RunStatus.FAILED, instruction_id="weekly")
    return runs


def test_the_figures_of_one_instruction(store: Store) -> None:
    runs = history(store)

    health = store.health.instruction_health("daily", now=NOW, days=7)

    # Read together with another instruction, the figures are the same.
    assert store.health.healths(["weekly", "daily"], now=NOW, days=7)[1] == health
    assert health.streak.count == 3
    assert health.streak.since == NOW - 2 * DAY - timedelta(hours=1)
    assert health.streak.broken_by is not None
    assert (health.streak.broken_by.id, health.streak.broken_by.status) == (
        runs["interrupted"],
        "interrupted",
    )
    assert [run.id for run in health.recent] == [
        runs[key]
        for key in (
            "streak-3", "streak-2", "streak-1", "manual", "interrupted", "missed", "partial",
            "clean-1", "old-failed",
        )
    ]  # fmt: skip
    assert [run.clean for run in health.recent][:5] == [True, True, True, False, False]
    # The window: 7 UTC days up to NOW, so the failed run 9 days back is out of it. Its
    # statuses, finish reasons and rates count the scheduled runs: not the manual one.
    assert health.since == datetime(2026, 11, 15, tzinfo=UTC)
    assert not health.every_trigger
    assert health.runs == 7
    assert dict(health.statuses) == {"ok": 4, "partial": 1, "interrupted": 1, "missed": 1}
    assert health.ended == 6
    assert health.partial_rate == round(1 / 6, 4)
    assert health.failed_rate == 0.0
    assert (health.missed_fires, health.interrupted_fires) == (1, 1)
    assert dict(health.finish_reasons) == {"stop": 6}
    assert {day: dict(c) for day, c in health.quarantined_by_day.items()} == {
        "2026-11-16": {"schema": 1, "truncated": 1},
        "2026-11-18": {"schema": 1},
    }
    tokens = health.tokens_by_day
    assert sorted(tokens) == [
        "2026-11-15", "2026-11-16", "2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21",
    ]  # fmt: skip
    assert (tokens["2026-11-18"].prompt, tokens["2026-11-18"].total) == (200, 280)
    assert tokens["2026-11-18"].attempts == 2


def test_every_trigger_counts_the_manual_run_in_the_rates(store: Store) -> None:
    history(store)

    scheduled = store.health.instruction_health("daily", now=NOW, days=7)
    every = store.health.instruction_health("daily", now=NOW, days=7, every_trigger=True)

    assert every.every_trigger
    assert every.runs == 8
    assert dict(every.statuses) == {"ok": 4, "partial": 2, "interrupted": 1, "missed": 1}
    assert every.ended == 7
    assert every.partial_rate == round(2 / 7, 4)
    assert dict(every.finish_reasons) == {"stop": 6, "length": 1}
    # What is not a rate is the same either way.
    assert every.streak == scheduled.streak
    assert every.recent == scheduled.recent
    assert every.quarantined_by_day == scheduled.quarantined_by_day
    assert every.tokens_by_day == scheduled.tokens_by_day


def test_a_failed_run_by_hand_does_not_read_as_the_schedule_failing(
    database_url: str, store: Store
) -> None:
    # Issue 30: one `run` without its key set showed "failed 33.3%" from then on.
    for back in (2, 1):
        seed(store, at=NOW - back * DAY, status=RunStatus.OK)
    seed(store, at=NOW, status=RunStatus.FAILED, trigger=Trigger.MANUAL)

    # A window wide enough to hold NOW whatever the day the tests run.
    args = ("health", "--instruction", "daily", "--days", "3660")
    proc = salvagelane(*args, database=database_url)
    every = salvagelane(*args, "--all", database=database_url)

    assert proc.returncode == every.returncode == 0, proc.stderr + every.stderr
    assert "failed 0.0%" in proc.stdout
    assert "scheduled runs (--all: every trigger)" in proc.stdout
    assert "failed 33.3%" in every.stdout
    # What still counts every trigger says so, next to the rates that do not: the strip
    # shows the manual failure, and its quarantine and tokens are review load and spend.
    lines = proc.stdout.splitlines()
    [recent] = [text for text in lines if text.startswith("recent ")]
    assert "ooF  (every trigger," in recent
    assert "quarantined per day (every trigger: the review load)" in lines
    assert "tokens per day, every trigger (prompt + completion = total)" in lines


def test_an_approval_or_a_pending_item_makes_a_run_unclean(store: Store) -> None:
    seed(store, at=NOW - DAY, status=RunStatus.OK)
    held = seed(store, at=NOW, status=RunStatus.PARTIAL, reasons=("schema",))

    health = store.health.instruction_health("daily", now=NOW)

    assert health.streak.count == 0
    assert health.streak.broken_by is not None
    assert health.streak.broken_by.id == held


def test_running_runs_and_manual_runs_do_not_count(store: Store) -> None:
    seed(store, at=NOW - DAY, status=RunStatus.OK)
    seed(store, at=NOW - DAY / 2, status=RunStatus.OK, trigger=Trigger.MANUAL)
    store.start_run(
        instruction_id="daily",
        definition_sha256="d" * 64,
        trigger=Trigger.SCHEDULE,
        scheduled_for=NOW,
        now=NOW,
    )

    health = store.health.instruction_health("daily", now=NOW)

    assert health.streak.count == 1
    assert health.streak.broken_by is None
    # The manual run is not counted in the window's statuses either (issue 30).
    assert health.statuses == {"running": 1, "ok": 1}
    assert health.ended == 1


def test_the_command_prints_the_same_figures(database_url: str, store: Store) -> None:
    history(store)
    now = datetime.now(UTC)
    expected = health_json(store.health.instruction_health("daily", now=now))

    proc = salvagelane("health", "--instruction", "daily", "--json", database=database_url)

    assert proc.returncode == 0, proc.stderr
    [printed] = json.loads(proc.stdout)
    del printed["until"], expected["until"]
    assert printed == expected
    text = salvagelane("health", database=database_url)
    assert text.returncode == 0, text.stderr
    assert "streak       3 clean scheduled runs in a row" in text.stdout
    assert "instruction  weekly" in text.stdout


def test_an_unknown_instruction_is_refused(database_url: str, store: Store) -> None:
    history(store)

    proc = salvagelane("health", "--instruction", "daly", database=database_url)

    assert proc.returncode == 2
    assert 'no stored run has instruction "daly"' in proc.stderr


def test_a_streak_longer_than_a_page_is_counted_to_its_end(store: Store) -> None:
    broken = seed(store, at=NOW - 80 * timedelta(hours=1), status=RunStatus.FAILED)
    for back in range(79, -1, -1):  # 80 clean hourly fires: the streak reads 2 pages
        seed(store, at=NOW - back * timedelta(hours=1), status=RunStatus.OK)

    health = store.health.instruction_health("daily", now=NOW)

    assert health.streak.count == 80
    assert health.streak.broken_by is not None
    assert health.streak.broken_by.id == broken
    assert len(health.recent) == 30
    assert all(run.clean for run in health.recent)


# --- health --gate N --------------------------------------------------------------------------


def test_the_gate_fails_with_fewer_scheduled_runs_than_asked(
    database_url: str, store: Store
) -> None:
    seed(store, at=NOW - 2 * DAY, status=RunStatus.OK)
    seed(store, at=NOW - DAY, status=RunStatus.OK)
    # Neither a manual run nor a backfill is the schedule running: they do not count.
    seed(store, at=NOW, status=RunStatus.OK, trigger=Trigger.MANUAL)
    seed(store, at=NOW, status=RunStatus.OK, trigger=Trigger.BACKFILL)

    proc = salvagelane("health", "--gate", "3", "--instruction", "daily", database=database_url)

    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "gate: daily: only 2 scheduled runs, 3 needed\n"


def test_the_gate_passes_on_n_clean_scheduled_runs(database_url: str, store: Store) -> None:
    seed(store, at=NOW - 4 * DAY, status=RunStatus.PARTIAL, reasons=("schema",))
    ids = [seed(store, at=NOW - back * DAY, status=RunStatus.OK) for back in (2, 1, 0)]

    proc = salvagelane("health", "--gate", "3", database=database_url)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"gate: daily: the last 3 scheduled runs were clean (newest: run {ids[-1][:8]} "
        "of 2026-11-21 12:00 UTC)\n"
    )
    # One more and the partial run falls inside the gate.
    four = salvagelane("health", "--gate", "4", "--json", database=database_url)
    assert four.returncode == 1
    document = json.loads(four.stdout)
    assert document["passed"] is False
    [gate] = document["instructions"]
    assert (gate["scheduled_runs"], gate["clean_runs"]) == (4, 3)
    assert [run["status"] for run in gate["runs"]] == ["ok", "ok", "ok", "partial"]


def test_the_gate_fails_on_a_partial_run_among_the_last_n(database_url: str, store: Store) -> None:
    seed(store, at=NOW - 3 * DAY, status=RunStatus.OK)
    partial = seed(
        store, at=NOW - DAY - timedelta(hours=6, minutes=40), status=RunStatus.PARTIAL,
        reasons=("schema",),
    )  # fmt: skip
    seed(store, at=NOW, status=RunStatus.OK)
    seed(store, at=NOW, status=RunStatus.FAILED, instruction_id="weekly")

    proc = salvagelane("health", "--gate", "3", database=database_url)

    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        f"gate: daily: 2 of the last 3 scheduled runs were clean; run {partial[:8]} "
        "(2026-11-20 05:20 UTC) was partial",
        "gate: weekly: 0 of the last 1 scheduled run were clean (3 needed); run "
        f"{store.list_runs(instruction_id='weekly')[0].id[:8]} (2026-11-21 12:00 UTC) was failed",
        "gate: 2 of 2 instructions failed: daily, weekly",
    ]


def test_a_gate_below_one_is_a_usage_error(database_url: str, store: Store) -> None:
    seed(store, at=NOW, status=RunStatus.OK)

    proc = salvagelane("health", "--gate", "0", database=database_url)

    assert proc.returncode == 2
    assert "--gate" in proc.stderr
    assert proc.stdout == ""
