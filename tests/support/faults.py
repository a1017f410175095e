"""Fault injection for ``salvagelane serve``: kill -9 at chosen moments, restart, check.

A campaign runs real ``serve`` processes against a real database, a local provider that
answers after a random delay and a local webhook sink that takes a random time to
accept a delivery. Each cycle starts a node, waits for one moment of a run's life (the
catch-up after taking the lead, a model call in flight, an output just stored, a salvage
just done, a delivery in flight, or a random time), kills the node with SIGKILL and
sometimes leaves a gap before the next one. A last node settles, then stops cleanly.

:func:`check` then states what must hold whatever the kills hit (ADR 0003):

* every fire of every instruction between the first lead and the last stop has exactly
  one outcome: one first-attempt run row (any status, ``missed`` included);
* no run is left ``running``; a fire is retried (attempt 2) only after its first run was
  interrupted, and never more than once;
* every attempt holds its raw output (or the provider's error); every run with a report
  has the output it was salvaged from; every salvage a node logged has its output stored;
* every report has its sink delivery recorded (pending, delivered or failed).
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from salvagelane.definitions import Schedule
from salvagelane.runtime.scheduler import fire_times
from salvagelane.store import make_engine
from tests.support.serve import (
    COMPLETE,
    KEY_ENV,
    Processes,
    Project,
    ServeProcess,
    openai_connector,
)

FAST = ("--heartbeat", "0.2", "--stale-after", "1", "--poll", "0.5", "--shutdown-timeout", "1")
PHASES = ("catch_up", "model_call", "stored", "salvaged", "delivery", "random")
INSTRUCTIONS = {
    # id: (cron, misfire grace)
    "every-second": ("* * * * * *", 30),
    "every-2s": ("*/2 * * * * *", 4),
}
_GOOD = json.dumps(COMPLETE, indent=2)


# --- the peers ---------------------------------------------------------------------------------


class _Peer(ThreadingHTTPServer):
    """A local HTTP server that answers each POST after a random delay, counting arrivals."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, rng: random.Random, max_delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _PeerHandler)
        self._rng = rng
        self._rng_guard = threading.Lock()
        self.max_delay = max_delay
        self.arrivals = 0
        self._arrived = threading.Condition()
        self.closing = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def arrive(self) -> tuple[int, float]:
        with self._arrived:
            self.arrivals += 1
            number = self.arrivals
            self._arrived.notify_all()
        with self._rng_guard:
            return number, self._rng.uniform(0, self.max_delay)

    def wait_for_arrival(self, after: int, timeout: float) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: self.arrivals > after, timeout)

    def reply(self, number: int, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A killed client is the point of the exercise; stay quiet."""

    def __enter__(self) -> _Peer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class FaultProvider(_Peer):
    """Chat completions: a good report, or (one in four) one cut at the token limit."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng, max_delay=0.8)

    def reply(self, number: int, body: dict[str, Any]) -> dict[str, Any]:
        truncated = number % 4 == 0
        content = _GOOD[: len(_GOOD) * 2 // 3] if truncated else _GOOD
        return {
            "id": f"gen-{number}",
            "model": "test/model",
            "choices": [
                {
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "length" if truncated else "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50},
        }


class FaultSink(_Peer):
    """A webhook that accepts every delivery, after a while."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng, max_delay=0.6)
        self.delivered: list[str] = []
        self._guard = threading.Lock()

    def reply(self, number: int, body: dict[str, Any]) -> dict[str, Any]:
        with self._guard:
            self.delivered.append(str(body.get("run_id")))
        return {"ok": True}


class _PeerHandler(BaseHTTPRequestHandler):
    server: _Peer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        number, delay = self.server.arrive()
        if self.server.closing.wait(delay):
            return
        payload = json.dumps(self.server.reply(number, body)).encode()
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- the campaign ------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Figures:
    """What a campaign did and found."""

    backend: str
    seed: int
    cycles: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    fires_checked: int = 0
    runs: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    deliveries: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kills = ", ".join(f"{phase} {n}" for phase, n in sorted(self.kills.items()))
        runs = ", ".join(f"{status} {n}" for status, n in sorted(self.runs.items()))
        return (
            f"{self.backend}: seed {self.seed}, {self.cycles} cycles, "
            f"{sum(self.kills.values())} kills ({kills}); {self.fires_checked} fires checked; "
            f"runs: {runs}; {self.attempts} attempts; {self.deliveries} deliveries; "
            f"violations: {len(self.violations)}"
        )


def write_definitions(project: Project, provider: FaultProvider, sink: FaultSink) -> None:
    (project.instructions / "daily-triage.yaml").unlink()
    for instruction_id, (cron, grace) in INSTRUCTIONS.items():
        text = project.definition_text(
            instruction_id=instruction_id,
            cron=cron,
            grace=grace,
            connector=openai_connector(provider.url + "/v1", timeout_seconds=10),
            deadline=8,
        )
        text += f"\nsinks:\n  - kind: webhook\n    url: {sink.url}/hook\n    timeout_seconds: 5\n"
        (project.instructions / f"{instruction_id}.yaml").write_text(text, encoding="utf-8")


def _kill_moment(
    node: ServeProcess,
    phase: str,
    rng: random.Random,
    provider: FaultProvider,
    sink: FaultSink,
    arrivals: tuple[int, int],
) -> bool:
    """Wait for ``phase`` in ``node``'s life; False when it did not come in time."""
    timeout = 10.0
    try:
        if phase == "catch_up":
            node.wait_for_event("leader.acquired", timeout=timeout)
            time.sleep(rng.uniform(0, 0.3))
        elif phase == "model_call":
            if not provider.wait_for_arrival(arrivals[0], timeout):
                return False
            time.sleep(rng.uniform(0, 0.4))
        elif phase == "stored":
            node.wait_for_event("attempt.stored", timeout=timeout)
        elif phase == "salvaged":
            node.wait_for_event("attempt.salvaged", timeout=timeout)
        elif phase == "delivery":
            if not sink.wait_for_arrival(arrivals[1], timeout):
                return False
        else:
            time.sleep(rng.uniform(0.2, 3.0))
    except AssertionError:
        return False
    return True


def run_campaign(
    tmp_path: Path, *, database_url: str, backend: str, cycles: int, seed: int
) -> Figures:
    """``cycles`` kill/restart cycles, a last clean stop, then :func:`check`."""
    rng = random.Random(seed)
    figures = Figures(backend=backend, seed=seed)
    project = Project.create(tmp_path)
    processes = Processes()
    env = {KEY_ENV: "sk-fault-test"}
    nodes: list[ServeProcess] = []
    with (
        FaultProvider(random.Random(seed + 1)) as provider,
        FaultSink(random.Random(seed + 2)) as sink,
    ):
        assert isinstance(provider, FaultProvider)
        assert isinstance(sink, FaultSink)
        write_definitions(project, provider, sink)
        try:
            for cycle in range(cycles):
                phase = rng.choice(PHASES)
                arrivals = (provider.arrivals, sink.arrivals)
                node = processes.serve(
                    project, *FAST, database=database_url, env=env, name=f"cycle-{cycle}"
                )
                nodes.append(node)
                reached = _kill_moment(node, phase, rng, provider, sink, arrivals)
                node.kill()
                figures.kills[phase if reached else f"{phase} (not reached)"] += 1
                figures.cycles += 1
                if rng.random() < 0.4:
                    time.sleep(rng.uniform(0.5, 2.5))  # fires pass with nobody leading
            last = processes.serve(project, *FAST, database=database_url, env=env, name="last")
            nodes.append(last)
            last.wait_for_line("^leader:", timeout=30)
            # Long enough for the stale runs of the dead nodes to be interrupted and
            # retried; the checks below hold however far they got.
            time.sleep(2.5)
            stop_at = datetime.now(UTC)
            code = last.stop(signal.SIGTERM, timeout=30)
            if code != 0:
                figures.violations.append(f"the last node exited {code}: {last.describe()}")
        finally:
            processes.cleanup()
    check(database_url, figures, stop_at=stop_at, nodes=nodes)
    return figures


# --- the checks --------------------------------------------------------------------------------


def check(
    database_url: str, figures: Figures, *, stop_at: datetime, nodes: list[ServeProcess]
) -> None:
    """Fill ``figures`` with what the database holds and every violation found."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            _check_rows(connection, figures, stop_at)
            _check_logs(connection, figures, nodes)
    finally:
        engine.dispose()


def _rows(connection: sa.Connection, sql: str) -> list[Any]:
    return list(connection.execute(sa.text(sql)).all())


def _as_utc(moment: Any) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    assert isinstance(moment, datetime)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _check_rows(connection: sa.Connection, figures: Figures, stop_at: datetime) -> None:
    violations = figures.violations
    runs = _rows(
        connection,
        "SELECT id, instruction_id, scheduled_for, fire_attempt, retry_of, status FROM runs",
    )
    figures.runs.update(run.status for run in runs)
    since = {
        row.instruction_id: _as_utc(row.effective_since)
        for row in _rows(connection, "SELECT instruction_id, effective_since FROM schedules")
    }
    by_fire: dict[tuple[str, datetime], list[Any]] = {}
    for run in runs:
        if run.scheduled_for is not None:
            by_fire.setdefault((run.instruction_id, _as_utc(run.scheduled_for)), []).append(run)
    for instruction_id, (cron, _grace) in INSTRUCTIONS.items():
        if instruction_id not in since:
            violations.append(f"{instruction_id}: never scheduled")
            continue
        expected = fire_times(
            Schedule(cron=cron, timezone="UTC"), since[instruction_id], stop_at, limit=10**6
        )
        figures.fires_checked += len(expected)
        for moment in expected:
            firsts = [r for r in by_fire.get((instruction_id, moment), []) if r.fire_attempt == 1]
            if len(firsts) != 1:
                violations.append(
                    f"{instruction_id} fire {moment.isoformat()}: {len(firsts)} outcomes"
                )
    status = {run.id: run.status for run in runs}
    for run in runs:
        if run.status == "running":
            violations.append(f"run {run.id} left running")
        if run.fire_attempt > 2:
            violations.append(f"run {run.id}: fire attempt {run.fire_attempt}")
        if run.fire_attempt == 2 and status.get(run.retry_of) != "interrupted":
            violations.append(f"run {run.id} retries {run.retry_of}, which was not interrupted")

    attempts = _rows(
        connection,
        "SELECT run_id, number, raw_output IS NOT NULL AS has_raw, provider_error FROM attempts",
    )
    figures.attempts = len(attempts)
    numbers: dict[str, list[int]] = {}
    for attempt in attempts:
        numbers.setdefault(attempt.run_id, []).append(attempt.number)
        if not attempt.has_raw and attempt.provider_error is None:
            violations.append(f"run {attempt.run_id} attempt {attempt.number}: no output kept")
    for run_id, seen in numbers.items():
        if sorted(seen) != list(range(1, len(seen) + 1)):
            violations.append(f"run {run_id}: attempts {sorted(seen)}")
    reports = _rows(
        connection,
        "SELECT r.run_id, a.raw_output IS NOT NULL AS has_raw FROM reports r "
        "JOIN attempts a ON a.id = r.attempt_id",
    )
    with_report = {report.run_id for report in reports}
    for report in reports:
        if not report.has_raw:
            violations.append(f"run {report.run_id}: report without its raw output")
    for run in runs:
        if run.status in {"ok", "partial"} and run.id not in with_report:
            violations.append(f"run {run.id} is {run.status} without a report")
    delivered = {
        row.run_id for row in _rows(connection, "SELECT DISTINCT run_id FROM sink_deliveries")
    }
    figures.deliveries = len(delivered)
    for run_id in sorted(with_report - delivered):
        violations.append(f"run {run_id}: a report with no delivery recorded")


def _check_logs(connection: sa.Connection, figures: Figures, nodes: list[ServeProcess]) -> None:
    stored = {
        (row.run_id, row.number)
        for row in _rows(
            connection, "SELECT run_id, number FROM attempts WHERE raw_output IS NOT NULL"
        )
    }
    for node in nodes:
        for event in node.events("attempt.salvaged"):
            key = (str(event.get("run_id")), int(event.get("attempt", 0)))
            if key not in stored:
                violations = figures.violations
                violations.append(f"{node.name}: salvaged {key} without its output stored")
