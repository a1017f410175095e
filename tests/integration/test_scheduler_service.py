"""The scheduler service on a real BackgroundScheduler, and ``salvagelane schedule``."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import _scheduler_targets
import pytest

from salvagelane.definitions import Instruction, Schedule, load_instruction
from salvagelane.errors import ConfigurationError, NotFoundError
from salvagelane.runtime.scheduler import CronScheduler

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "instructions" / "daily-triage.yaml"


def every_second(instruction_id: str) -> Instruction:
    schedule = Schedule(cron="* * * * * *", timezone="UTC", misfire_grace_seconds=5)
    return replace(load_instruction(BUNDLED), id=instruction_id, schedule=schedule)


@pytest.fixture
def targets() -> Iterator[None]:
    _scheduler_targets.reset()
    yield
    _scheduler_targets.reset()


def test_every_second_job_calls_the_target_with_whole_utc_seconds(targets: None) -> None:
    service = CronScheduler(target="_scheduler_targets:record")
    service.add_instruction(every_second("ticker"))
    assert set(service.next_fire_times()) == {"ticker"}
    service.start()
    try:
        time.sleep(3.2)
    finally:
        service.shutdown(wait=True)
    calls = list(_scheduler_targets.calls)
    assert 2 <= len(calls) <= 4, calls
    assert {call.instruction_id for call in calls} == {"ticker"}
    fired = [datetime.fromisoformat(call.scheduled_for) for call in calls]
    assert all(moment.utcoffset() == timedelta(0) and moment.microsecond == 0 for moment in fired)
    steps = [later - earlier for earlier, later in itertools.pairwise(fired)]
    assert steps == [timedelta(seconds=1)] * len(steps)  # every fire, each once
    assert _scheduler_targets.most_running == 1


def test_a_slow_job_never_overlaps_itself(targets: None) -> None:
    service = CronScheduler(target="_scheduler_targets:slow")
    service.add_instruction(every_second("slowpoke"))
    service.start()
    try:
        time.sleep(3.5)
    finally:
        service.shutdown(wait=True)
    calls = list(_scheduler_targets.calls)
    # Fires came every second, but each waited for the 2.5 s run before it: at most two.
    assert 1 <= len(calls) <= 2, calls
    assert _scheduler_targets.most_running == 1
    for earlier, later in itertools.pairwise(calls):
        assert later.started >= earlier.ended


def test_service_adds_replaces_and_removes_jobs() -> None:
    service = CronScheduler(target="_scheduler_targets:record")
    daily = load_instruction(BUNDLED)
    service.add_instruction(daily)
    service.add_instruction(daily)  # replace_existing: still one job
    fire = service.next_fire_times()["daily-triage"]
    assert (fire.hour, fire.minute, fire.second, fire.utcoffset()) == (5, 20, 0, timedelta(0))
    assert fire - datetime.now(UTC) <= timedelta(days=1)
    service.remove_instruction("daily-triage")
    assert service.next_fire_times() == {}
    with pytest.raises(NotFoundError, match="no scheduled instruction 'daily-triage'"):
        service.remove_instruction("daily-triage")


@pytest.mark.parametrize(
    "target", ["_scheduler_targets", "_scheduler_targets:absent", "nowhere_module:f"]
)
def test_service_refuses_an_unusable_target(target: str) -> None:
    with pytest.raises(ConfigurationError, match="scheduler target"):
        CronScheduler(target=target)


def test_schedule_command_prints_the_bundled_row() -> None:
    before = datetime.now(UTC)
    proc = subprocess.run(
        [sys.executable, "-m", "salvagelane", "schedule", "--instructions", "instructions"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    after = datetime.now(UTC)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["INSTRUCTION", "CRON", "TIMEZONE"]
    row = re.fullmatch(
        r"daily-triage +20 5 \* \* \* +UTC +(\S+ 05:20:00) +(\S+ 05:20:00) UTC", lines[1]
    )
    assert row is not None, lines
    utc_fire = datetime.fromisoformat(row[1]).replace(tzinfo=UTC)
    assert row[1] == row[2]
    assert before < utc_fire <= after + timedelta(days=1)
    assert len(lines) == 2


def test_schedule_command_without_the_directory_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "salvagelane", "schedule", "--instructions", "absent"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "no such directory" in proc.stderr
