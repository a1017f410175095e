"""The event stream (salvagelane.events): every event reaches every subscriber of its
type, once, in order; a failing subscriber is reported and never stops the others or the
publisher; and every event type is logged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.events import EVENT_TYPES, Event, EventStream
from salvagelane.events.kinds import (
    FireReceived,
    LeaderLost,
    RunEvent,
    RunFinished,
    RunStarted,
)
from salvagelane.events.log import LEVELS, log_fields
from salvagelane.vocabulary import RunStatus, Trigger

FIRE = datetime(2026, 11, 28, 5, 20, tzinfo=UTC)


def started(run: str = "r") -> RunStarted:
    return RunStarted(
        run_id=run,
        instruction_id="daily",
        trigger=Trigger.SCHEDULE,
        scheduled_for=FIRE,
        started_at=FIRE,
        retry_of=None,
    )


def finished(run: str = "r") -> RunFinished:
    return RunFinished(
        run_id=run, instruction_id="daily", status=RunStatus.OK, seconds=1.0, kept=3, quarantined=0
    )


SAMPLES: list[Event] = [
    started(),
    finished(),
    LeaderLost(),
    FireReceived(instruction_id="daily", scheduled_for=FIRE, trigger=Trigger.SCHEDULE),
]


@given(
    events=st.lists(st.sampled_from(SAMPLES), max_size=30),
    failing=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_every_event_reaches_every_subscriber_once_in_order_despite_failures(
    events: list[Event], failing: list[bool]
) -> None:
    reported: list[tuple[str, str]] = []
    stream = EventStream(on_failure=lambda e, s, x: reported.append((e.name, type(x).__name__)))
    seen: list[list[Event]] = [[] for _ in failing]
    for index, fails in enumerate(failing):

        def subscriber(event: Event, index: int = index, fails: bool = fails) -> None:
            seen[index].append(event)
            if fails:
                raise RuntimeError("a broken consumer")

        stream.subscribe(subscriber)
    for event in events:
        stream.publish(event)  # never raises
    assert all(got == events for got in seen)
    assert len(reported) == len(events) * sum(failing)


def test_a_subscription_takes_only_its_types_and_their_subclasses() -> None:
    stream = EventStream()
    runs: list[Event] = []
    fires: list[Event] = []
    stream.subscribe(runs.append, [RunEvent])
    stream.subscribe(fires.append, [FireReceived])
    for event in SAMPLES:
        stream.publish(event)
    assert runs == [started(), finished()]
    assert fires == [SAMPLES[3]]


def test_unsubscribed_callbacks_get_nothing_more() -> None:
    stream = EventStream()
    got: list[Event] = []
    subscription = stream.subscribe(got.append)
    stream.publish(started("one"))
    subscription.unsubscribe()
    stream.publish(started("two"))
    assert got == [started("one")]


def test_no_event_type_subscribes_to_nothing() -> None:
    with pytest.raises(ValueError, match="at least one event type"):
        EventStream().subscribe(lambda event: None, [])


def test_a_failing_failure_hook_still_does_not_fail_the_publisher() -> None:
    def hook(event: Event, subscriber: object, exc: Exception) -> None:
        raise RuntimeError("the hook too")

    stream = EventStream(on_failure=hook)
    stream.subscribe(lambda event: 1 / 0)
    got: list[Event] = []
    stream.subscribe(got.append)
    stream.publish(LeaderLost())
    assert got == [LeaderLost()]


def test_every_event_type_is_logged_at_a_level_and_named_once() -> None:
    assert set(LEVELS) == set(EVENT_TYPES)
    assert set(LEVELS.values()) <= {"debug", "info", "warning", "error"}
    names = [kind.name for kind in EVENT_TYPES]
    assert len(names) == len(set(names)), "two event types share a name"


def test_log_fields_are_plain_and_name_the_instruction() -> None:
    fields = log_fields(started())
    assert fields == {
        "run_id": "r",
        "instruction": "daily",
        "trigger": "schedule",
        "scheduled_for": "2026-11-28T05:20:00+00:00",
        "started_at": "2026-11-28T05:20:00+00:00",
        "retry_of": None,
    }


def test_events_are_frozen_and_their_exception_is_not_compared() -> None:
    event = started()
    with pytest.raises(AttributeError):
        event.run_id = "other"  # type: ignore[misc]
    assert RunFinished(**{**_fields(finished()), "exception": ValueError()}) == finished()


def _fields(event: Event) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
