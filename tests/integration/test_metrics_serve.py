"""``salvagelane serve --metrics-port`` as a real process: its fires happen, its endpoint
is scraped over HTTP, and what it shows is what the database holds (SQLite and PostgreSQL).

The definition fires three times, on three consecutive seconds of one minute of one day
(a cron with every field fixed), so that once those fires have their runs nothing more
happens and the scrape can be compared with the database exactly. A node that started
late catches the newest of them up and records the others missed: the comparison holds
for any mix.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from salvagelane.store import upgrade
from tests.support.metrics import Scrape, database_figures, scrape
from tests.support.serve import Processes, Project, all_runs, wait_for_runs

LEAD = timedelta(seconds=6)
"""How far ahead of the test's start the first fire is: enough for a node to start."""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


def three_fires_once(start: datetime) -> str:
    """A cron (seconds first) that fires at three consecutive seconds from ``start`` on,
    within one minute, and never again for a year."""
    if start.second > 57:
        start = (start + timedelta(minutes=1)).replace(second=0)
    s = start.second
    return f"{s},{s + 1},{s + 2} {start.minute} {start.hour} {start.day} {start.month} *"


def scrape_until(url: str, done: int, timeout: float = 30) -> Scrape:
    """Scrape until the node has counted ``done`` finished runs (it counts a run just
    after the database has it)."""
    deadline = time.monotonic() + timeout
    while True:
        scraped = scrape(url)
        counted = scraped.total("salvagelane_run_duration_seconds_count")
        if counted >= done or time.monotonic() > deadline:
            return scraped
        time.sleep(0.1)


def test_serve_exposes_metrics_that_equal_the_database(
    project: Project, processes: Processes, database_url: str
) -> None:
    upgrade(database_url)
    project.write_definition(cron=three_fires_once(datetime.now(UTC) + LEAD), grace=3600)
    serve = processes.serve(project, "--metrics-port", "0", database=database_url)
    line = serve.wait_for_line(r"^metrics: ", timeout=30)
    found = re.fullmatch(r"metrics: (http://127\.0\.0\.1:(\d+)/metrics)", line)
    assert found, serve.describe()
    url = found.group(1)
    banner = serve.stdout_lines.index(line) - 1
    assert serve.stdout_lines[banner].startswith("salvagelane serve: "), serve.describe()

    # Every fire has its row, and every run has ended.
    runs = wait_for_runs(
        database_url,
        lambda runs: len(runs) == 3 and all(r.status != "running" for r in runs),
        timeout=60,
        what="three fires with ended runs",
    )
    executed = [r for r in runs if r.status != "missed"]
    assert executed, [(r.trigger, r.status) for r in runs]
    scraped = scrape_until(url, done=len(executed))
    held = database_figures(database_url)
    assert all_runs(database_url) == runs  # nothing happened since: the figures stand

    assert scraped.total("salvagelane_state_up") == 1
    assert scraped.by("salvagelane_runs", "instruction", "status") == held.runs
    assert scraped.by("salvagelane_quarantine_pending", "instruction", "reason") == held.pending
    assert held.pending  # the replayed report is truncated: its cut item is pending
    assert scraped.by("salvagelane_fires_total", "instruction", "trigger") == dict(
        Counter(("daily-triage", str(r.trigger)) for r in executed)
    )
    assert scraped.by("salvagelane_run_duration_seconds_count", "instruction", "status") == {
        key: count for key, count in held.runs.items() if key[1] != "missed"
    }
    assert scraped.total("salvagelane_fire_lag_seconds_count") == len(executed)
    assert scraped.by("salvagelane_tokens_total", "instruction", "type") == held.tokens
    assert scraped.total("salvagelane_model_call_duration_seconds_count") == held.attempts
    assert scraped.by("salvagelane_items_kept_total", "instruction") == held.kept
    assert scraped.by("salvagelane_items_quarantined_total", "instruction", "reason") == (
        held.pending
    )
    assert scraped.total("process_resident_memory_bytes") > 0
    # The newest fire of the node's schedule: its third and last fire, which has its row.
    newest = max(r.scheduled_for for r in runs if r.scheduled_for is not None)
    assert scraped.by("salvagelane_last_fire_timestamp_seconds", "instruction") == {
        ("daily-triage",): newest.timestamp()
    }

    assert serve.stop(signal.SIGINT) == 0, serve.describe()
    serve.assert_quiet("fire.missed")


def test_a_metrics_port_in_use_stops_serve_before_its_banner(
    project: Project, processes: Processes
) -> None:
    project.write_definition()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = processes.serve(project, "--metrics-port", str(port))
        assert serve.wait(timeout=60) == 2, serve.describe()
    assert serve.stdout == "", serve.describe()  # not even the start-up banner
    assert (
        f"salvagelane: error: metrics: cannot listen on 127.0.0.1:{port}: Address already in use"
        in "\n".join(serve.stderr_lines)
    ), serve.describe()
    assert all_runs(project.database_url) == []
