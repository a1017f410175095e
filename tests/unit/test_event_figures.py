"""The figures the run events carry and the metrics count, pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from salvagelane.events.kinds import fire_lag_seconds
from salvagelane.runtime.attempt_loop import error_kind, usage_tokens
from salvagelane.vocabulary import Trigger

FIRE = datetime(2026, 11, 23, 5, 20, tzinfo=UTC)


@pytest.mark.parametrize("trigger", [Trigger.SCHEDULE, Trigger.CATCH_UP])
def test_fire_lag_is_start_minus_fire_time(trigger: Trigger) -> None:
    started = FIRE + timedelta(seconds=2.5)
    assert fire_lag_seconds(
        trigger=trigger, scheduled_for=FIRE, started_at=started, retry_of=None
    ) == pytest.approx(2.5)


def test_a_run_that_started_before_its_fire_time_is_not_late() -> None:
    # A forced `run --scheduled-for` in the future, or clocks of two hosts that differ.
    early = FIRE - timedelta(seconds=3)
    assert (
        fire_lag_seconds(
            trigger=Trigger.SCHEDULE, scheduled_for=FIRE, started_at=early, retry_of=None
        )
        == 0
    )


@pytest.mark.parametrize(
    ("trigger", "scheduled_for", "retry_of"),
    [
        (Trigger.MANUAL, None, None),
        (Trigger.REPLAY, None, None),
        (Trigger.MANUAL, FIRE, None),  # `run --scheduled-for` by hand: manual, no lag
        (Trigger.SCHEDULE, FIRE, "an-interrupted-run"),  # its lateness is the first run's
        (Trigger.SCHEDULE, None, None),
    ],
)
def test_runs_without_a_fire_to_be_late_for_have_no_lag(
    trigger: Trigger, scheduled_for: datetime | None, retry_of: str | None
) -> None:
    started = FIRE + timedelta(hours=1)
    assert (
        fire_lag_seconds(
            trigger=trigger, scheduled_for=scheduled_for, started_at=started, retry_of=retry_of
        )
        is None
    )


@pytest.mark.parametrize(
    ("status", "provider", "kind"),
    [
        (429, True, "429"),
        (503, True, "503"),
        (200, True, "200"),
        (None, True, "no_response"),
        (None, False, "connector"),
    ],
)
def test_error_kind_is_the_http_status_or_why_there_is_none(
    status: int | None, provider: bool, kind: str
) -> None:
    assert error_kind(status, provider=provider) == kind


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 12, "completion_tokens": 3}, 12),
        ({"prompt_tokens": None}, 0),
        ({}, 0),
        ({"prompt_tokens": True}, 0),
        ({"prompt_tokens": -5}, 0),
        ({"prompt_tokens": "12"}, 0),
    ],
)
def test_usage_tokens_counts_only_counts(usage: dict[str, object], expected: int) -> None:
    assert usage_tokens(usage, "prompt_tokens") == expected
