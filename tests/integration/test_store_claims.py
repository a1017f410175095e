"""Fire claims, missed fires and stale runs: the scheduler's side of the store, on both
backends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from salvagelane.errors import DuplicateFireError, NotFoundError, StoreError
from salvagelane.store import Store, make_engine, upgrade

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
FIRE = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)
SHA = "d" * 64


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as opened:
        yield opened


def claim(
    store: Store,
    *,
    instruction_id: str = "daily",
    scheduled_for: datetime | None = FIRE,
    now: datetime = NOW,
    trigger: str = "schedule",
) -> str:
    return store.start_run(
        instruction_id=instruction_id,
        definition_sha256=SHA,
        trigger=trigger,
        scheduled_for=scheduled_for,
        now=now,
    )


def add_attempt(store: Store, run_id: str, raw: str) -> str:
    return store.add_attempt(
        run_id,
        number=1,
        started_at=NOW,
        request={"model": "m"},
        raw_output=raw,
        finish_reason=None,
        native_finish_reason=None,
        usage=None,
        model="m",
        request_id=None,
        latency_seconds=None,
        http_status=200,
        provider_error=None,
        stream_error=None,
        finished_at=None,
    )


def count_runs(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.exec_driver_sql("SELECT count(*) FROM runs").scalar_one())
    finally:
        engine.dispose()


# --- claims -------------------------------------------------------------------------------------


def test_a_fire_is_claimed_once(store: Store, database_url: str) -> None:
    first = claim(store)

    with pytest.raises(DuplicateFireError) as raised:
        claim(store, now=NOW + timedelta(seconds=1))

    error = raised.value
    assert error.instruction_id == "daily"
    assert error.scheduled_for == FIRE
    assert "'daily'" in str(error)
    assert FIRE.isoformat() in str(error)
    assert isinstance(error.__cause__, sa.exc.IntegrityError)
    assert count_runs(database_url) == 1
    assert [run.id for run in store.list_runs()] == [first]


def test_the_same_fire_time_of_another_instruction_is_another_fire(store: Store) -> None:
    claim(store, instruction_id="a")
    claim(store, instruction_id="b")
    claim(store, instruction_id="a", scheduled_for=FIRE + timedelta(hours=1))

    assert len(store.list_runs()) == 3


def test_the_claim_compares_instants_not_zones(store: Store) -> None:
    claim(store)
    tokyo = timezone(timedelta(hours=9))
    with pytest.raises(DuplicateFireError):
        claim(store, scheduled_for=FIRE.astimezone(tokyo))


def test_manual_runs_never_collide(store: Store) -> None:
    ids = {claim(store, scheduled_for=None, trigger="manual") for _ in range(3)}

    assert len(ids) == 3
    assert len(store.list_runs()) == 3
    assert store.recorded_fires("daily", start=FIRE - timedelta(days=1), end=NOW) == set()


def test_other_integrity_errors_stay_store_errors(store: Store) -> None:
    run_id = claim(store)
    add_attempt(store, run_id, "[]")

    # A second attempt number 1 violates another unique constraint: not a fire conflict.
    with pytest.raises(StoreError) as raised:
        add_attempt(store, run_id, "[]")
    assert not isinstance(raised.value, DuplicateFireError)


def test_concurrent_claims_of_one_fire_have_one_winner(database_url: str) -> None:
    upgrade(database_url)
    contenders = 4
    barrier = threading.Barrier(contenders)
    won: list[str] = []
    lost: list[DuplicateFireError] = []
    failures: list[BaseException] = []

    def contend() -> None:
        try:
            with Store.open(database_url, auto_upgrade=False) as own:
                barrier.wait()
                try:
                    won.append(claim(own))
                except DuplicateFireError as exc:
                    lost.append(exc)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert failures == []
    assert len(won) == 1
    assert len(lost) == contenders - 1
    assert count_runs(database_url) == 1


# --- missed fires -------------------------------------------------------------------------------


def test_record_missed_stores_a_finished_missed_run(store: Store) -> None:
    run_id = store.record_missed(
        instruction_id="daily",
        definition_sha256=SHA,
        scheduled_for=FIRE,
        now=NOW,
        reason="no scheduler was running; past the catch-up window",
    )

    assert run_id is not None
    detail = store.get_run(run_id)
    assert detail.status == "missed"
    assert detail.trigger == "schedule"
    assert detail.scheduled_for == FIRE
    assert detail.finished_at == NOW
    assert detail.error is not None
    assert FIRE.isoformat() in detail.error
    assert "no scheduler was running" in detail.error
    assert detail.attempts == []


def test_record_missed_of_a_claimed_fire_is_none(store: Store) -> None:
    run_id = claim(store)

    missed = store.record_missed(
        instruction_id="daily", definition_sha256=SHA, scheduled_for=FIRE, now=NOW, reason="x"
    )

    assert missed is None
    assert [run.id for run in store.list_runs()] == [run_id]
    assert store.get_run(run_id).status == "running"


def test_a_missed_fire_cannot_be_claimed_again(store: Store) -> None:
    store.record_missed(
        instruction_id="daily", definition_sha256=SHA, scheduled_for=FIRE, now=NOW, reason="x"
    )
    with pytest.raises(DuplicateFireError):
        claim(store)


def test_recorded_fires_are_the_fires_with_a_row_of_any_status(store: Store) -> None:
    older = claim(store, scheduled_for=FIRE - timedelta(hours=1))
    store.fail_run(older, finished_at=NOW, error="boom")
    claim(store, scheduled_for=None, trigger="manual", now=NOW + timedelta(hours=5))
    store.record_missed(
        instruction_id="daily",
        definition_sha256=SHA,
        scheduled_for=FIRE + timedelta(hours=2),
        now=NOW,
        reason="x",
    )
    claim(store, scheduled_for=FIRE)
    claim(store, instruction_id="other", scheduled_for=FIRE + timedelta(days=1))

    window = {"start": FIRE - timedelta(hours=1), "end": FIRE + timedelta(hours=2)}
    assert store.recorded_fires("daily", **window) == {
        FIRE - timedelta(hours=1),
        FIRE,
        FIRE + timedelta(hours=2),
    }
    # Bounds are inclusive; another instruction's fires are not this one's.
    assert store.recorded_fires("daily", start=FIRE, end=FIRE) == {FIRE}
    assert store.recorded_fires("other", **window) == set()


def test_reclaim_stale_fire_interrupts_a_dead_claim_and_offers_its_retry(store: Store) -> None:
    dead = claim(store, scheduled_for=FIRE)
    store.heartbeat(dead, NOW)

    alive = store.reclaim_stale_fire(
        "daily", FIRE, stale_before=NOW - timedelta(seconds=1), now=NOW + timedelta(seconds=30)
    )
    assert alive is None
    assert store.get_run(dead).status == "running"

    taken = store.reclaim_stale_fire(
        "daily", FIRE, stale_before=NOW + timedelta(seconds=1), now=NOW + timedelta(seconds=90)
    )
    assert taken is not None
    assert (taken.id, taken.status) == (dead, "interrupted")
    retry = store.start_run(
        instruction_id="daily",
        definition_sha256=SHA,
        trigger="schedule",
        scheduled_for=FIRE,
        now=NOW,
        retry_of=dead,
    )
    # With the retry claimed there is nothing left to take over, even once it is stale.
    assert (
        store.reclaim_stale_fire("daily", FIRE, stale_before=NOW + timedelta(days=1), now=NOW)
        is None
    )
    assert store.get_run(retry).status == "interrupted"


# --- stale and abandoned runs -------------------------------------------------------------------


def test_interrupt_stale_runs_takes_only_stale_running_runs(store: Store) -> None:
    stale_before = NOW + timedelta(minutes=10)
    stale = claim(store, scheduled_for=FIRE)
    add_attempt(store, stale, '[{"a": 1}, {"b"')
    store.heartbeat(stale, NOW + timedelta(minutes=5))
    alive = claim(store, scheduled_for=FIRE + timedelta(hours=1))
    store.heartbeat(alive, NOW + timedelta(minutes=11))
    finished = claim(store, scheduled_for=FIRE + timedelta(hours=2))
    store.fail_run(finished, finished_at=NOW, error="boom")
    later = NOW + timedelta(minutes=20)

    interrupted = store.interrupt_stale_runs(stale_before=stale_before, now=later)

    assert [run.id for run in interrupted] == [stale]
    assert interrupted[0].status == "interrupted"
    assert interrupted[0].finished_at == later
    detail = store.get_run(stale)
    assert detail.status == "interrupted"
    assert detail.finished_at == later
    assert detail.error == (
        f"no heartbeat since {(NOW + timedelta(minutes=5)).isoformat()}: "
        "the process running it stopped"
    )
    assert [a.raw_output for a in detail.attempts] == ['[{"a": 1}, {"b"']
    assert store.get_run(alive).status == "running"
    assert store.get_run(finished).status == "failed"
    assert store.get_run(finished).error == "boom"
    # Done once: a second sweep finds nothing.
    assert store.interrupt_stale_runs(stale_before=stale_before, now=later) == []


def test_a_run_without_heartbeat_is_judged_by_its_start(store: Store, database_url: str) -> None:
    run_id = claim(store)
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("UPDATE runs SET heartbeat_at = NULL")
    finally:
        engine.dispose()

    assert store.interrupt_stale_runs(stale_before=NOW, now=NOW) == []
    (interrupted,) = store.interrupt_stale_runs(stale_before=NOW + timedelta(seconds=1), now=NOW)

    assert interrupted.id == run_id
    assert store.get_run(run_id).error == (
        f"no heartbeat since {NOW.isoformat()}: the process running it stopped"
    )


def test_mark_interrupted_ends_only_a_running_run(store: Store) -> None:
    running = claim(store)
    add_attempt(store, running, "partial outp")
    done = claim(store, scheduled_for=FIRE + timedelta(hours=1))
    store.fail_run(done, finished_at=NOW, error="boom")
    later = NOW + timedelta(minutes=1)

    assert store.mark_interrupted(running, now=later, error="shutting down") is True
    assert store.mark_interrupted(done, now=later, error="shutting down") is False
    assert store.mark_interrupted(running, now=later, error="again") is False

    detail = store.get_run(running)
    assert (detail.status, detail.finished_at, detail.error) == (
        "interrupted",
        later,
        "shutting down",
    )
    assert [a.raw_output for a in detail.attempts] == ["partial outp"]
    assert store.get_run(done).status == "failed"
    with pytest.raises(NotFoundError):
        store.mark_interrupted("00000000-0000-4000-8000-000000000000", now=later, error="x")


def retry(store: Store, retry_of: str, *, scheduled_for: datetime = FIRE) -> str:
    return store.start_run(
        instruction_id="daily",
        definition_sha256=SHA,
        trigger="schedule",
        scheduled_for=scheduled_for,
        now=NOW,
        retry_of=retry_of,
    )


def test_an_interrupted_fire_is_retried_once(store: Store) -> None:
    first = claim(store)
    assert store.mark_interrupted(first, now=NOW, error="stopped")

    second = retry(store, first)

    detail = store.get_run(second)
    assert (detail.fire_attempt, detail.retry_of, detail.scheduled_for) == (2, first, FIRE)
    with pytest.raises(DuplicateFireError):
        retry(store, first)  # another node retrying the same fire loses the claim
    with pytest.raises(DuplicateFireError):
        claim(store)  # and the fire itself stays claimed


def test_a_retry_needs_a_fire_time(store: Store) -> None:
    with pytest.raises(ValueError, match="only a scheduled fire is retried"):
        store.start_run(
            instruction_id="daily",
            definition_sha256=SHA,
            trigger="manual",
            scheduled_for=None,
            now=NOW,
            retry_of="x" * 36,
        )


def test_unretried_interrupted_fires_lists_what_a_restart_may_retry(store: Store) -> None:
    older = claim(store, scheduled_for=FIRE - timedelta(hours=2))
    retried = claim(store, scheduled_for=FIRE - timedelta(minutes=30))
    waiting = claim(store, scheduled_for=FIRE)
    finished = claim(store, scheduled_for=FIRE + timedelta(minutes=1))
    manual = claim(store, scheduled_for=None, trigger="manual")
    for run_id in (older, retried, waiting, manual):
        assert store.mark_interrupted(run_id, now=NOW, error="stopped")
    store.fail_run(finished, finished_at=NOW, error="boom")
    retry_run = retry(store, retried, scheduled_for=FIRE - timedelta(minutes=30))
    assert store.mark_interrupted(retry_run, now=NOW, error="stopped again")

    found = store.unretried_interrupted_fires(since=FIRE - timedelta(hours=1))

    # Not: the fire before `since`, the retried one, the retry itself (a fire is retried
    # once), a failed run, a manual run (no fire).
    assert [(run.id, run.scheduled_for) for run in found] == [(waiting, FIRE)]


def test_register_schedule_keeps_its_start_until_the_schedule_changes(store: Store) -> None:
    later = NOW + timedelta(hours=5)

    assert store.register_schedule("daily", cron="20 5 * * *", timezone="UTC", now=NOW) == NOW
    assert store.register_schedule("daily", cron="20 5 * * *", timezone="UTC", now=later) == NOW
    changed = store.register_schedule("daily", cron="0 6 * * *", timezone="UTC", now=later)
    moved = store.register_schedule(
        "daily", cron="0 6 * * *", timezone="Europe/Berlin", now=later + timedelta(hours=1)
    )

    assert changed == later
    assert moved == later + timedelta(hours=1)
    assert store.register_schedule("other", cron="* * * * *", timezone="UTC", now=later) == later


def test_a_heartbeat_never_touches_a_run_that_ended(store: Store) -> None:
    run_id = claim(store)
    assert store.heartbeat(run_id, NOW + timedelta(seconds=5)) is True
    assert store.mark_interrupted(run_id, now=NOW + timedelta(seconds=6), error="stopped")

    assert store.heartbeat(run_id, NOW + timedelta(seconds=20)) is False

    detail = store.get_run(run_id)
    # Ending a run stamps its last sign of life; the late beat did not move it.
    assert (detail.status, detail.heartbeat_at) == ("interrupted", NOW + timedelta(seconds=6))
