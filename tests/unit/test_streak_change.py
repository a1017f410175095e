"""How one ended scheduled run changes the clean streak (store.health.streak_change):
the facts the streak notifications are sent on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from salvagelane.store.health import HealthRun, StreakChange, streak_change
from salvagelane.vocabulary import RunStatus, Trigger

FIRE = datetime(2026, 11, 20, 5, 20, tzinfo=UTC)


def run(name: str, status: str, *, quarantined: int = 0, approved: int = 0) -> HealthRun:
    return HealthRun(
        id=name,
        trigger=Trigger.SCHEDULE,
        scheduled_for=FIRE,
        created_at=FIRE + timedelta(minutes=1),
        status=RunStatus(status),
        quarantined=quarantined,
        operator_approved=approved,
        finish_reason="stop",
    )


OK = "ok"
CASES: list[tuple[str, list[HealthRun], StreakChange | None]] = [
    # newest first; the run asked about is "this"
    (
        "a partial after three clean",
        [run("this", "partial"), run("c3", OK), run("c2", OK), run("c1", OK)],
        StreakChange(kind="broken", streak=3, previous_run_id="c3"),
    ),
    (
        "a missed fire after one clean",
        [run("this", "missed"), run("c1", OK)],
        StreakChange(kind="broken", streak=1, previous_run_id="c1"),
    ),
    (
        "an ok run with an item held back is not clean",
        [run("this", OK, quarantined=1), run("c1", OK)],
        StreakChange(kind="broken", streak=1, previous_run_id="c1"),
    ),
    (
        "a second unclean run changes nothing",
        [run("this", "failed"), run("p", "partial"), run("c1", OK)],
        None,
    ),
    (
        "clean after unclean restores",
        [run("this", OK), run("p", "partial"), run("c1", OK)],
        StreakChange(kind="restored", streak=1, previous_run_id="p"),
    ),
    (
        "clean after an approved run restores",
        [run("this", OK), run("a", OK, approved=1)],
        StreakChange(kind="restored", streak=1, previous_run_id="a"),
    ),
    ("clean after clean changes nothing", [run("this", OK), run("c1", OK)], None),
    ("the first run has no streak to change", [run("this", "partial")], None),
    ("a run that is not there changes nothing", [run("other", "partial"), run("c1", OK)], None),
    (
        "an older run is compared with the one before it",
        [run("new", OK), run("this", "interrupted"), run("c1", OK)],
        StreakChange(kind="broken", streak=1, previous_run_id="c1"),
    ),
]


@pytest.mark.parametrize(("case", "runs", "expected"), CASES, ids=[c[0] for c in CASES])
def test_streak_change(case: str, runs: list[HealthRun], expected: StreakChange | None) -> None:
    assert streak_change("this", runs) == expected
