"""The serve node's decisions, in process, against a real database on both backends.

The clock is moved by hand ("the host was down from Monday to Wednesday"), so catch-up,
missed fires and stale-run recovery are checked without waiting for wall-clock time;
``tests/integration/test_serve_processes.py`` checks the same through real processes.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import load_definitions
from salvagelane.errors import ConfigurationError
from salvagelane.runtime.service import Fire, ServeSettings, Service
from salvagelane.store import Store, leader_lock_for, upgrade
from salvagelane.vocabulary import Trigger

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
MONDAY = datetime(2031, 3, 3, tzinfo=UTC)


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    """A moment in the week of MONDAY (day 0)."""
    return MONDAY + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    return tmp_path


def edit(project: Path, old: str, new: str, name: str = "daily-triage.yaml") -> Path:
    path = project / "instructions" / name
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


def make_service(project: Path, store: Store, **settings: object) -> Service:
    service = Service(
        ServeSettings(instructions_dir=project / "instructions", **settings),  # type: ignore[arg-type]
        store=store,
        lock=leader_lock_for(store.url) if store.url.startswith("postgresql") else _NoLock(),
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        sinks_for=lambda instruction: (),
    )
    service.load()
    return service


class _NoLock:
    """The lock is not under test here (see test_leadership.py)."""

    def try_acquire(self) -> bool:
        return True

    def acquire(self) -> None:
        pass

    def is_held(self) -> bool:
        return True

    def release(self) -> None:
        pass


def rows(store: Store) -> list[tuple[str, datetime | None, str, int]]:
    """(trigger, fire, status, fire_attempt) of every run, oldest fire first."""
    return sorted(
        (
            (run.trigger, run.scheduled_for, run.status, run.fire_attempt)
            for run in store.list_runs(limit=1000)
        ),
        key=lambda row: (row[1] or MONDAY, row[3]),
    )


# --- catch-up and missed fires ------------------------------------------------------------------


def test_first_start_catches_nothing_up(project: Path, store: Store) -> None:
    # 05:20 passed an hour ago, but no scheduler was ever asked to run it.
    service = make_service(project, store)

    assert service.catch_up(at(0, 5, 50)) == []
    assert rows(store) == []


def test_after_downtime_the_newest_fire_within_grace_runs_once_and_older_are_missed(
    project: Path, store: Store
) -> None:
    service = make_service(project, store)
    service.catch_up(at(0, 4))  # scheduled since Monday 04:00, then the host went down

    fires = service.catch_up(at(2, 5, 50))  # back on Wednesday, 30 min after 05:20

    assert fires == [
        Fire(instruction_id="daily-triage", scheduled_for=at(2, 5, 20), trigger=Trigger.CATCH_UP)
    ]
    for fire in fires:
        service.fire(fire.instruction_id, fire.scheduled_for, trigger=fire.trigger)
    assert rows(store) == [
        ("schedule", at(0, 5, 20), "missed", 1),
        ("schedule", at(1, 5, 20), "missed", 1),
        ("catch_up", at(2, 5, 20), "partial", 1),
    ]
    missed = store.get_run(store.runs_for_fire("daily-triage", at(0, 5, 20))[0].id)
    assert missed.error == (
        "missed: should have fired at 2031-03-03T05:20:00+00:00; "
        "no scheduler ran it in time, and a newer fire supersedes it"
    )
    # A second node settling the same past (or a restart) finds nothing left to do.
    assert service.catch_up(at(2, 5, 51)) == []
    assert len(rows(store)) == 3


def test_a_fire_outside_the_grace_is_missed_too(project: Path, store: Store) -> None:
    service = make_service(project, store)
    service.catch_up(at(0, 4))

    with capture_logs(processors=[merge_contextvars]) as logs:
        fires = service.catch_up(at(0, 6, 21))  # 61 minutes late; the grace is 3600 s

    assert fires == []
    assert rows(store) == [("schedule", at(0, 5, 20), "missed", 1)]
    (event,) = [e for e in logs if e["event"] == "fire.missed"]
    assert event["scheduled_for"] == "2031-03-03T05:20:00+00:00"
    assert event["reason"] == "no scheduler ran it within its 3600 s misfire grace"
    assert event["log_level"] == "warning"


def test_a_changed_schedule_never_makes_past_fires_missed(project: Path, store: Store) -> None:
    service = make_service(project, store)
    service.catch_up(at(0, 4))
    edit(project, 'cron: "20 5 * * *"', 'cron: "0 * * * *"')  # hourly from Wednesday on
    service = make_service(project, store)

    assert service.catch_up(at(2, 9, 30)) == []  # the hourly fires before now were never due
    assert rows(store) == []
    fires = service.catch_up(at(2, 11, 5))
    assert [fire.scheduled_for for fire in fires] == [at(2, 11)]
    assert rows(store) == [("schedule", at(2, 10), "missed", 1)]


def test_fires_after_the_last_recorded_one_only(project: Path, store: Store) -> None:
    service = make_service(project, store)
    service.catch_up(at(0, 4))
    service.fire("daily-triage", at(0, 5, 20))  # Monday's fire ran on time

    fires = service.catch_up(at(1, 5, 30))

    assert [fire.scheduled_for for fire in fires] == [at(1, 5, 20)]
    assert rows(store) == [("schedule", at(0, 5, 20), "partial", 1)]


def test_a_fire_the_new_scheduler_claimed_first_hides_no_gap(project: Path, store: Store) -> None:
    """Found in CI under load: the scheduler, started before the catch-up, claimed its
    first fire before the catch-up read the last recorded one; the gap before it was
    neither run nor recorded missed."""
    edit(project, 'cron: "20 5 * * *"', 'cron: "*/10 * * * *"')
    service = make_service(project, store)
    service.catch_up(at(0, 4))
    service.fire("daily-triage", at(0, 4, 10))  # the last fire before the node went down
    started = at(0, 4, 49, 59)  # back up; its scheduler fires 04:50 at once
    service.fire("daily-triage", at(0, 4, 50))

    fires = service.catch_up(at(0, 4, 50, 1), scheduler_since=started)

    assert rows(store) == [
        ("schedule", at(0, 4, 10), "partial", 1),
        ("schedule", at(0, 4, 20), "missed", 1),
        ("schedule", at(0, 4, 30), "missed", 1),
        ("schedule", at(0, 4, 40), "missed", 1),
        ("schedule", at(0, 4, 50), "partial", 1),
    ]
    # The newest fire up to now is the one the scheduler ran: nothing to catch up, and the
    # older ones are missed as superseded, as when a node comes back in time.
    assert fires == []


def test_a_schedule_is_owned_from_when_its_first_scheduler_started(
    project: Path, store: Store
) -> None:
    """Found in CI: the first leader's scheduler fired at once, before its catch-up
    registered the schedule, and died inside that fire's claim. The schedule counted from
    after the fire, so the next leader neither caught it up nor recorded it missed."""
    edit(project, 'cron: "20 5 * * *"', 'cron: "*/10 * * * *"')
    first = make_service(project, store)
    # Started 04:49:59; its scheduler fired 04:50 (never committed); catch-up ran at 04:50:01.
    first.catch_up(at(0, 4, 50, 1), scheduler_since=at(0, 4, 49, 59))

    fires = make_service(project, store).catch_up(at(0, 4, 55), scheduler_since=at(0, 4, 55))

    assert [fire.scheduled_for for fire in fires] == [at(0, 4, 50)]


def test_a_fire_a_dead_node_never_claimed_is_missed_below_newer_rows(
    project: Path, store: Store
) -> None:
    """Issue 11.1: the dead node logged a fire it never claimed, then claimed newer ones;
    the catch-up looked only past the newest row, so that fire had no outcome, ever."""
    edit(project, 'cron: "20 5 * * *"', 'cron: "*/10 * * * *"')
    service = make_service(project, store)
    service.catch_up(at(0, 4))
    for minute in (10, 30, 40):  # 04:20 waited for the instruction's lock when it died
        service.fire("daily-triage", at(0, 4, minute))

    fires = service.catch_up(at(0, 4, 45))

    assert fires == []
    assert rows(store) == [
        ("schedule", at(0, 4, 10), "partial", 1),
        ("schedule", at(0, 4, 20), "missed", 1),
        ("schedule", at(0, 4, 30), "partial", 1),
        ("schedule", at(0, 4, 40), "partial", 1),
    ]


def test_settle_records_a_fire_nobody_claimed_once_its_grace_passed(
    project: Path, store: Store
) -> None:
    edit(project, 'cron: "20 5 * * *"', 'cron: "*/10 * * * *"')
    edit(project, "misfire_grace_seconds: 3600", "misfire_grace_seconds: 60")
    service = make_service(project, store, poll_seconds=5)
    service.catch_up(at(0, 4))
    service.fire("daily-triage", at(0, 4, 10))  # 04:20 was lost; 04:30 is in its grace

    service.settle(at(0, 4, 30, 30))
    assert rows(store) == [
        ("schedule", at(0, 4, 10), "partial", 1),
        ("schedule", at(0, 4, 20), "missed", 1),
    ]
    service.settle(at(0, 4, 31, 6))  # 04:30's grace and a poll have passed
    assert [row[1:3] for row in rows(store)][-1] == (at(0, 4, 30), "missed")
    with capture_logs() as logs:
        service.settle(at(0, 4, 31, 7))  # nothing new: the watermark moved past it
    assert logs == []
    missed = [run for run in store.list_runs(limit=10) if run.status == "missed"]
    for run in missed:
        assert "within its 60 s misfire grace" in (store.get_run(run.id).error or "")
    # A fire the scheduler claims late after all is a duplicate, never a second outcome.
    service.fire("daily-triage", at(0, 4, 30))
    assert len(rows(store)) == 3


# --- one fire -----------------------------------------------------------------------------------


def test_a_fire_claimed_twice_runs_once_and_logs_the_duplicate(project: Path, store: Store) -> None:
    service = make_service(project, store)

    with capture_logs(processors=[merge_contextvars]) as logs:
        service.fire("daily-triage", at(0, 5, 20))
        service.fire("daily-triage", at(0, 5, 20), trigger=Trigger.CATCH_UP)

    assert rows(store) == [("schedule", at(0, 5, 20), "partial", 1)]
    events = [e["event"] for e in logs if e["event"].startswith("fire")]
    assert events == ["fire", "fire.claimed", "fire", "fire.duplicate"]
    duplicate = next(e for e in logs if e["event"] == "fire.duplicate")
    assert (duplicate["instruction"], duplicate["trigger"]) == ("daily-triage", "catch_up")
    assert service.in_flight == {}


def test_a_fire_of_an_unknown_instruction_runs_nothing(project: Path, store: Store) -> None:
    service = make_service(project, store)

    with capture_logs() as logs:
        service.fire("weekly-digest", at(0, 5, 20))

    assert rows(store) == []
    assert [e["event"] for e in logs] == ["fire.unknown"]


def test_no_fire_starts_once_stopping(project: Path, store: Store) -> None:
    service = make_service(project, store)
    service.request_stop("SIGTERM")

    service.fire("daily-triage", at(0, 5, 20))

    assert rows(store) == []  # unclaimed: the stop's settlement or the next start decides


class _LosingLock(_NoLock):
    """Grants the lead once, then reports it lost (a database connection that died)."""

    def __init__(self) -> None:
        self.held = True

    def try_acquire(self) -> bool:
        return self.held

    def is_held(self) -> bool:
        return self.held


def test_a_fire_thread_left_from_a_lost_lead_starts_no_run(project: Path, store: Store) -> None:
    """Issue 11.2: a fire thread of a lead that had ended (queued in the pool, or waiting
    for the instruction's lock) went on to claim and call the provider, with the HTTP
    client already closed under it in a stopping process."""
    lock = _LosingLock()
    announced: list[str] = []
    lost = threading.Event()

    def announce(line: str) -> None:
        announced.append(line)
        if line.startswith("lost the scheduler lock"):
            lost.set()

    service = Service(
        ServeSettings(instructions_dir=project / "instructions", poll_seconds=0.05),
        store=store,
        lock=lock,
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        sinks_for=lambda instruction: (),
        announce=announce,
    )
    service.load()
    serving = threading.Thread(target=service.serve, daemon=True)
    serving.start()
    try:
        while not any(line.startswith("leader:") for line in announced):
            assert serving.is_alive()
            time.sleep(0.01)
        lock.held = False
        assert lost.wait(30), announced

        with capture_logs() as logs:
            service.fire("daily-triage", at(0, 5, 20))
    finally:
        service.request_stop("test over")
        serving.join(30)

    assert not serving.is_alive()
    assert [run for run in store.list_runs() if run.scheduled_for == at(0, 5, 20)] == []
    assert [e["event"] for e in logs] == ["fire", "fire.skipped"]


# --- crash recovery -----------------------------------------------------------------------------


def _running(store: Store, *, fire: datetime | None, heartbeat: datetime, trigger: str) -> str:
    run_id = store.start_run(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger=trigger,
        scheduled_for=fire,
        now=heartbeat,
    )
    store.heartbeat(run_id, heartbeat)
    return run_id


def test_a_dead_nodes_run_is_interrupted_and_retried_once_within_grace(
    project: Path, store: Store
) -> None:
    service = make_service(project, store, stale_after_seconds=60, heartbeat_seconds=15)
    dead = _running(store, fire=at(0, 5, 20), heartbeat=at(0, 5, 21), trigger="schedule")
    alive = _running(store, fire=at(0, 5, 21), heartbeat=at(0, 5, 22), trigger="schedule")

    with capture_logs() as logs:
        retries = service.recover(at(0, 5, 22) + timedelta(seconds=30))

    assert retries == [
        Fire(
            instruction_id="daily-triage",
            scheduled_for=at(0, 5, 20),
            trigger=Trigger.SCHEDULE,
            retry_of=dead,
        )
    ]
    assert store.get_run(dead).status == "interrupted"
    assert store.get_run(alive).status == "running"  # its heartbeat is 30 s old: alive
    interrupted = [e for e in logs if e["event"] == "run.interrupted"]
    assert [(e["run_id"], e["reason"]) for e in interrupted] == [(dead, "no heartbeat")]

    for retry in retries:
        service.fire(
            retry.instruction_id,
            retry.scheduled_for,
            trigger=retry.trigger,
            retry_of=retry.retry_of,
        )
    (retry_run,) = [run for run in store.list_runs() if run.retry_of == dead]
    assert (retry_run.status, retry_run.fire_attempt) == ("partial", 2)
    # Asked once: the next maintenance pass, or a restart, does not retry it again.
    assert service.recover(at(0, 5, 23)) == []
    assert make_service(project, store).recover(at(0, 5, 23)) == []


@pytest.mark.parametrize(
    ("fire", "trigger", "why"),
    [
        (at(0, 5, 20), "schedule", "its fire is 61 minutes old: past the 3600 s grace"),
        (None, "manual", "a manual run has no fire to repeat"),
        (at(0, 6, 0), "replay", "a replayed fixture is not a fire to repeat"),
    ],
)
def test_interrupted_runs_that_are_not_retried(
    project: Path, store: Store, fire: datetime | None, trigger: str, why: str
) -> None:
    service = make_service(project, store)
    run_id = _running(store, fire=fire, heartbeat=at(0, 5, 20), trigger=trigger)

    assert service.recover(at(0, 6, 21)) == [], why
    assert store.get_run(run_id).status == "interrupted"


# --- settings and definitions -------------------------------------------------------------------


def test_settings_refuse_a_stale_threshold_a_heartbeat_could_cross(
    project: Path, store: Store
) -> None:
    with pytest.raises(ConfigurationError, match="at least twice the heartbeat"):
        make_service(project, store, heartbeat_seconds=15, stale_after_seconds=20)


def test_a_directory_without_a_loadable_definition_is_refused(project: Path, store: Store) -> None:
    edit(project, "id: daily-triage", "id: Daily Triage")
    with pytest.raises(ConfigurationError, match="no loadable instruction definition"):
        make_service(project, store)


def test_reloading_keeps_the_previous_version_of_a_broken_definition(project: Path) -> None:
    directory = project / "instructions"
    first = load_definitions(directory)
    original = first.instructions["daily-triage"]
    edit(project, "max_items: 8", "max_items: eight")

    second = load_definitions(directory, first.instructions)

    assert second.instructions == {"daily-triage": original}
    assert second.kept == ("daily-triage",)
    (problem,) = second.problems
    assert "guardrails.max_items" in problem
    assert problem.endswith("(keeping the previous version of daily-triage)")


def test_an_id_used_by_two_files_is_loaded_from_the_first_only(project: Path) -> None:
    directory = project / "instructions"
    shutil.copy(directory / "daily-triage.yaml", directory / "zz-copy.yaml")

    found = load_definitions(directory)

    assert found.instructions["daily-triage"].source.name == "daily-triage.yaml"
    (problem,) = found.problems
    assert "zz-copy.yaml: id: expected an id no other definition uses" in problem
    assert problem.endswith("(ignoring zz-copy.yaml)")


def test_reloading_drops_a_definition_whose_file_is_gone(project: Path) -> None:
    directory = project / "instructions"
    first = load_definitions(directory)
    (directory / "daily-triage.yaml").unlink()

    assert load_definitions(directory, first.instructions).instructions == {}


# --- what a reload says ---------------------------------------------------------------------


def test_a_takeover_says_on_the_console_what_its_log_says(project: Path, store: Store) -> None:
    """Issue 13: a standby taking over reloads its definitions first. The console said
    "0 (re)scheduled" while the ``definitions.reloaded`` event listed the instruction as
    ``scheduled``, though that reload scheduled nothing (the lead that follows does)."""
    other_node = leader_lock_for(store.url)
    assert other_node.try_acquire()
    announced: list[str] = []
    service = Service(
        ServeSettings(instructions_dir=project / "instructions", standby=True, poll_seconds=0.05),
        store=store,
        lock=leader_lock_for(store.url),
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        sinks_for=lambda instruction: (),
        announce=announced.append,
    )
    service.load()
    serving = threading.Thread(target=service.serve, daemon=True)
    with capture_logs() as logs:
        serving.start()
        try:
            _wait_for_line(announced, "standby:", serving)
            other_node.release()
            _wait_for_line(announced, "leader:", serving)
        finally:
            service.request_stop("test over")
            serving.join(30)
    assert not serving.is_alive()

    (reloaded,) = [line for line in announced if line.startswith("reloaded:")]
    (event,) = [e for e in logs if e["event"] == "definitions.reloaded"]
    # The reload happened before the node led: it scheduled nothing, and both say so.
    assert event["scheduled"] == []
    assert event["rescheduled"] == []
    assert event["instructions"] == ["daily-triage"]
    assert reloaded == (
        "reloaded: 1 instruction(s); 0 changed, 0 removed, 0 kept at their previous version; "
        "scheduled when this node leads"
    )
    # Then the lead schedules every instruction, on the console and in the log alike.
    leader = next(line for line in announced if line.startswith("leader:"))
    assert leader.startswith("leader: scheduling 1 instruction(s)")
    (acquired,) = [e for e in logs if e["event"] == "leader.acquired"]
    assert acquired["instructions"] == 1
    assert announced.index(reloaded) < announced.index(leader)


def test_a_reload_while_leading_lists_what_it_scheduled(project: Path, store: Store) -> None:
    announced: list[str] = []
    service = Service(
        ServeSettings(instructions_dir=project / "instructions", poll_seconds=0.05),
        store=store,
        lock=leader_lock_for(store.url),
        connector_for=lambda instruction: ReplayConnector(FIXTURE),
        sinks_for=lambda instruction: (),
        announce=announced.append,
    )
    service.load()
    serving = threading.Thread(target=service.serve, daemon=True)
    with capture_logs() as logs:
        serving.start()
        try:
            _wait_for_line(announced, "leader:", serving)
            edit(project, 'cron: "20 5 * * *"', 'cron: "25 5 * * *"')
            service.request_reload()
            _wait_for_line(announced, "reloaded:", serving)
        finally:
            service.request_stop("test over")
            serving.join(30)
    assert not serving.is_alive()

    (reloaded,) = [line for line in announced if line.startswith("reloaded:")]
    (event,) = [e for e in logs if e["event"] == "definitions.reloaded"]
    assert event["scheduled"] == ["daily-triage"]
    assert event["rescheduled"] == ["daily-triage"]
    assert event["updated"] == ["daily-triage"]
    assert reloaded == (
        "reloaded: 1 instruction(s); 1 changed, 1 (re)scheduled, 0 removed, "
        "0 kept at their previous version"
    )


def _wait_for_line(announced: list[str], prefix: str, serving: threading.Thread) -> None:
    deadline = time.monotonic() + 30
    while not any(line.startswith(prefix) for line in announced):
        assert serving.is_alive(), announced
        assert time.monotonic() < deadline, announced
        time.sleep(0.01)
