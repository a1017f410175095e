"""A delivery cut off by a crash is never silent: ``salvagelane run`` killed (``kill -9``)
while its webhook hangs leaves the report ``pending``, and ``runs redeliver --pending``
delivers it. Real processes, a real HTTP server, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _outbox_sinks import HOSTILE

from salvagelane.store import Store
from tests.support.cli import FIXTURE, ROOT, clean_env, command, salvagelane, upgraded

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))


@dataclass
class Hook:
    """What the webhook server does with the next POST: ``hang`` until released, or
    answer ``status`` with ``body``."""

    hang: bool = False
    status: int = 204
    body: bytes = b""
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    received: list[Any] = field(default_factory=list)


class HookServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hook = Hook()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/hooks/report"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """The killed client's connection is gone when the hung reply is released."""


class _Handler(BaseHTTPRequestHandler):
    server: HookServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        hook = self.server.hook
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        hook.received.append(json.loads(body))
        hook.arrived.set()
        if hook.hang:
            hook.release.wait(120)
            return
        self.close_connection = True
        self.send_response(hook.status)
        self.send_header("Content-Length", str(len(hook.body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(hook.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[HookServer]:
    srv = HookServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield srv
    srv.hook.release.set()
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


@pytest.fixture
def project(tmp_path: Path, server: HookServer) -> Path:
    """The daily-triage definition with a webhook sink aimed at ``server``, and a
    recorded output that salvages ``ok``."""
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    definition = tmp_path / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    sink = f"\nsinks:\n  - kind: webhook\n    url: {server.url}\n    timeout_seconds: 60\nretry:\n"
    definition.write_text(text.replace("\nretry:\n", sink), encoding="utf-8")
    replay = tmp_path / "replay"
    replay.mkdir()
    kept = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    output = {"summary": COMPLETE["summary"], "recommendations": kept}
    (replay / "raw.txt").write_text(json.dumps(output, indent=2), encoding="utf-8")
    (replay / "meta.json").write_text(
        json.dumps({"instruction": "daily-triage", "finish_reason": "stop", "model": "m"}),
        encoding="utf-8",
    )
    return tmp_path


def _run_killed_while_delivering(project: Path, database: str, server: HookServer) -> str:
    """``salvagelane run`` as a process, killed with SIGKILL once its webhook request is
    at the server (which does not answer); the run's id."""
    server.hook.hang = True
    log = project / "run.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command(
                "run",
                "daily-triage",
                "--replay",
                str(project / "replay"),
                "--instructions",
                str(project / "instructions"),
            ),
            cwd=ROOT,
            env=clean_env({"SALVAGELANE_DATABASE_URL": database}),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            arrived = server.hook.arrived.wait(120)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.kill()
            process.wait(30)
    assert arrived, log.read_text(encoding="utf-8")
    assert process.returncode == -signal.SIGKILL
    with Store.open(database, auto_upgrade=False) as store:
        [run] = store.list_runs()
    return run.id


def test_a_run_killed_while_delivering_is_left_pending_and_redelivered(
    database_url: str, project: Path, server: HookServer
) -> None:
    database = upgraded(database_url)
    run_id = _run_killed_while_delivering(project, database, server)

    with Store.open(database, auto_upgrade=False) as store:
        detail = store.get_run(run_id)
        payload = store.get_report_payload(run_id)
    assert (detail.status, detail.sink_status) == ("ok", "pending")
    [pending] = detail.deliveries
    assert (pending.kind, pending.target, pending.status, pending.attempts) == (
        "webhook",
        server.url,
        "pending",
        1,
    )
    assert detail.finished_at is not None
    assert pending.next_attempt_at == detail.finished_at + timedelta(seconds=600)  # the lease
    assert server.hook.received == [payload]  # what the killed process had sent

    listed = salvagelane("runs", "list", database=database)
    assert listed.returncode == 0, listed.stderr
    [row] = listed.stdout.splitlines()[1:]
    assert row.split()[0] == run_id[:8]
    assert "ok (sink pending)" in row
    as_json = json.loads(salvagelane("runs", "list", "--json", database=database).stdout)
    assert as_json[0]["sink_status"] == "pending"
    shown = salvagelane("runs", "show", run_id, database=database)
    assert shown.returncode == 0, shown.stderr
    assert "deliveries (1): pending" in shown.stdout
    assert f"  #{pending.id} webhook {server.url}" in shown.stdout
    assert "      pending since " in shown.stdout
    assert "(attempt 1), next attempt " in shown.stdout

    # The consumer answers again; the operator delivers what is left.
    server.hook.release.set()
    server.hook = type(server.hook)(status=204)
    instructions = ("--instructions", str(project / "instructions"))
    again = salvagelane("runs", "redeliver", "--pending", *instructions, database=database)

    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"{run_id[:8]}  webhook    {server.url}  delivered on attempt 2",
        "1 of 1 deliveries delivered",
    ]
    assert server.hook.received == [payload]
    with Store.open(database, auto_upgrade=False) as store:
        detail = store.get_run(run_id)
    assert detail.sink_status == "delivered"
    assert [(d.status, d.attempts, d.next_attempt_at) for d in detail.deliveries] == [
        ("delivered", 2, None)
    ]
    listed = salvagelane("runs", "list", database=database)
    assert "(sink" not in listed.stdout

    nothing = salvagelane("runs", "redeliver", "--pending", *instructions, database=database)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout == "nothing to deliver: every stored report reached its sinks\n"


def test_a_failed_redelivery_exits_1_and_prints_the_error_safely(
    database_url: str, project: Path
) -> None:
    database = upgraded(database_url)
    definition = project / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    start = text.index("\nsinks:\n")
    end = text.index("\nretry:\n")
    hostile = "\nsinks:\n  - kind: callable\n    callable: _outbox_sinks:hostile"
    definition.write_text(text[:start] + hostile + text[end:], encoding="utf-8")
    # The sink's module lives in tests/callables, as a user's would on their PYTHONPATH.
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "callables")])}
    instructions = ("--instructions", str(project / "instructions"))

    run = salvagelane(
        "run", "daily-triage", "--replay", str(project / "replay"), *instructions,
        database=database, env=env,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr  # stored, not delivered (issue 29.12)
    run_id = dict(line.split(None, 1) for line in run.stdout.splitlines())["run"].split()[0]
    failed = salvagelane(
        "runs", "redeliver", "--pending", *instructions, database=database, env=env
    )

    assert failed.returncode == 1, failed.stderr
    line, summary = failed.stdout.splitlines()
    assert line.startswith(
        f"{run_id[:8]}  callable   _outbox_sinks:hostile  failed on attempt 2, next attempt "
    )
    escaped = r"refused \x1b[2J\x1b]0;owned\x07 by\u202e the consumer"
    assert line.endswith(f"the function raised RuntimeError: {escaped}")
    assert summary == "0 of 1 deliveries delivered"
    shown = salvagelane("runs", "show", run_id, database=database)
    assert "deliveries (1): failed" in shown.stdout
    for output in (run.stdout, failed.stdout, shown.stdout):
        assert not {"\x1b", "\x07", "\u202e"} & set(output)
    with Store.open(database, auto_upgrade=False) as store:
        [delivery] = store.get_run(run_id).deliveries
    assert delivery.error is not None
    assert HOSTILE in delivery.error  # stored as received; only the terminal sees escapes
    assert delivery.next_attempt_at == delivery.attempted_at + timedelta(seconds=120)

    # The definition is gone from this directory: nothing is tried, nothing written.
    definition.unlink()
    skipped = salvagelane("runs", "redeliver", "--pending", *instructions, database=database)
    assert skipped.returncode == 1
    assert "not tried: the sinks of instruction 'daily-triage': no instruction" in skipped.stdout
    with Store.open(database, auto_upgrade=False) as store:
        [unchanged] = store.get_run(run_id).deliveries
    assert unchanged == delivery


def test_redeliver_wants_a_run_id_or_pending(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    for args in ((), ("deadbeef-0000", "--pending")):
        usage = salvagelane("runs", "redeliver", *args, database=database)
        assert usage.returncode == 2
        assert usage.stderr == (
            "salvagelane: error: expected a RUN_ID or --pending (one of them)\n"
        )
