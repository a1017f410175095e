"""Load: N instructions firing within one minute, in-process and on the task queue.

Run from the project root against a PostgreSQL server (a scratch database is created and
dropped per scenario; nothing else is touched):

    .venv/bin/python benchmarks/queue_load.py                    # 1,000 instructions
    .venv/bin/python benchmarks/queue_load.py --instructions 200 --workers 1,2,4
    .venv/bin/python benchmarks/queue_load.py --quick            # 24 instructions, 1 and 2 workers

Every instruction fires once, ``i % 60`` seconds after a start ``--lead`` seconds after
the processes are started (six-field cron: no wait for a whole minute), against a local
OpenAI-compatible fake provider in this process that answers after a uniform 1-2 s with
the daily-triage report, or with 429 (``Retry-After: 1``) 5% of the time (the connector
retries it). Scenarios: ``serve`` executing in-process (``--max-workers``, default 4),
then ``serve --dispatch queue`` with 1, 2 and 4 ``salvagelane worker`` processes
(``--concurrency`` each, default 4). For each: the time to drain (first fire time to
the last run's end), fire lag (run start minus fire time) p50 and p99, the peak memory
(VmHWM) of every process, and the checks: every fire has exactly one run (none lost),
no run was executed twice, every run ended ``partial``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa

# The checkout's src/ and its root: the scratch database comes from the tests' support.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.support.postgres import scratch_database

from salvagelane.runtime.dispatch import install_schema
from salvagelane.store import upgrade

ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "SALVAGELANE_LOAD_KEY"
REPORT = (ROOT / "tests" / "fixtures" / "daily-triage-truncated" / "complete.json").read_text(
    encoding="utf-8"
)
FINAL = ("ok", "partial", "failed", "interrupted", "cancelled", "missed")


# --- the fake provider -----------------------------------------------------------------------


class Provider(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, *, low: float, high: float, rate_429: float, seed: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.low, self.high, self.rate_429 = low, high, rate_429
        self.random = random.Random(seed)
        self.guard = threading.Lock()
        self.requests = 0
        self.throttled = 0
        self.body = json.dumps(
            {
                "id": "chatcmpl-load",
                "object": "chat.completion",
                "model": "load/model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": REPORT},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 1500, "total_tokens": 2400},
            }
        ).encode()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    server: Provider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.guard:
            self.server.requests += 1
            throttle = self.server.random.random() < self.server.rate_429
            self.server.throttled += throttle
            delay = self.server.random.uniform(self.server.low, self.server.high)
        if throttle:
            body = b'{"error": {"message": "rate limited", "code": 429}}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
        else:
            time.sleep(delay)
            body = self.server.body
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- the project -------------------------------------------------------------------------------


def write_project(root: Path, count: int, base_url: str, start_at: datetime) -> None:
    shutil.copytree(ROOT / "schemas", root / "schemas")
    (root / "instructions").mkdir()
    shutil.copytree(ROOT / "instructions" / "context", root / "instructions" / "context")
    text = (ROOT / "instructions" / "daily-triage.yaml").read_text(encoding="utf-8")
    connector = (
        "connector:\n  kind: openai\n"
        f"  base_url: {base_url}\n  model: load/model\n  api_key_env: {KEY_ENV}\n"
        "  max_output_tokens: 4096\n  temperature: 0.2\n  timeout_seconds: 60\n"
        "  structured_output: false\n"
    )
    start = text.index("connector:\n")
    end = text.index("\n\n", start) + 1
    text = text[:start] + connector + text[end:]
    for i in range(count):
        name = f"load-{i:04d}"
        fire = start_at + timedelta(seconds=i % 60)  # the fires spread over one minute
        cron = f"{fire.second} {fire.minute} {fire.hour} * * *"
        one = text.replace("id: daily-triage\n", f"id: {name}\n").replace(
            'cron: "20 5 * * *"', f'cron: "{cron}"'
        )
        assert f"id: {name}\n" in one
        assert f'cron: "{cron}"' in one
        (root / "instructions" / f"{name}.yaml").write_text(one, encoding="utf-8")


# --- one scenario ------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    drain_seconds: float
    lag_p50: float
    lag_p99: float
    memory_mb: dict[str, float]
    runs: int
    lost: int
    twice: int
    statuses: dict[str, int]
    requests: int
    throttled: int


def salvagelane(*args: str) -> list[str]:
    return [sys.executable, "-m", "salvagelane", "--log-format", "json", *args]


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_scenario(
    name: str, server: str, workers: int, args: argparse.Namespace, out: Path
) -> Result:
    provider = Provider(low=args.low, high=args.high, rate_429=args.rate_429, seed=args.seed)
    with (
        scratch_database(server, "salvagelane_load") as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        upgrade(url)
        install_schema(url)
        root = Path(tmp)
        env = {
            **os.environ,
            KEY_ENV: "sk-load",
            "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
            "SALVAGELANE_DATABASE_URL": url,
        }
        # The second the fires start at: once the processes have had --lead seconds to
        # start (the six-field cron names seconds, so no wait for a whole minute).
        now = datetime.now(UTC)
        target = (now + timedelta(seconds=args.lead + 1)).replace(microsecond=0)
        write_project(root, args.instructions, provider.base_url, target)
        common = ["--instructions", str(root / "instructions")]
        procs: dict[str, subprocess.Popen[bytes]] = {}
        logs = []

        def start(label: str, argv: list[str]) -> None:
            log = (out / f"{name}-{label}.log").open("wb")
            logs.append(log)
            procs[label] = subprocess.Popen(
                argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT
            )

        leader = ["serve", *common, "--poll", "2", "--max-workers", str(args.max_workers)]
        if workers:
            leader += ["--dispatch", "queue"]
            for k in range(1, workers + 1):
                start(
                    f"worker{k}",
                    salvagelane("worker", *common, "--concurrency", str(args.concurrency)),
                )
        start("serve", salvagelane(*leader))
        engine = sa.create_engine(url)
        memory: dict[str, float] = {}
        try:
            # Every process must be up before the first fire: a fire passed before the
            # leader started is not due (its schedule starts then), so it would never run.
            banners = {label: "worker: running" for label in procs if label != "serve"}
            banners["serve"] = "leader: scheduling"
            while not all(
                banner in (out / f"{name}-{label}.log").read_text(errors="replace")
                for label, banner in banners.items()
            ):
                if datetime.now(UTC) >= target:
                    raise SystemExit(
                        f"{name}: the processes were not up {args.lead:g} s after the start "
                        "(raise --lead)"
                    )
                time.sleep(0.5)
            while True:
                time.sleep(1)
                for label, proc in procs.items():
                    if proc.poll() is not None:
                        raise SystemExit(f"{name}: {label} exited {proc.returncode}, see {out}")
                    memory[label] = peak_mb(proc.pid)
                with engine.connect() as connection:
                    done = connection.execute(
                        sa.text("SELECT count(*) FROM runs WHERE status = ANY(:final)"),
                        {"final": list(FINAL)},
                    ).scalar_one()
                if done >= args.instructions:
                    break
                if datetime.now(UTC) > target + timedelta(seconds=args.timeout):
                    raise SystemExit(f"{name}: only {done} runs ended, see {out}")
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs.values():
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            for log in logs:
                log.close()
            provider.shutdown()
            provider.server_close()
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT instruction_id, scheduled_for, status, started_at, finished_at "
                    "FROM runs"
                )
            ).all()
        engine.dispose()
    # Executions: the run.started lines of every process (a run started twice shows).
    started: dict[str, int] = {}
    for path in out.glob(f"{name}-*.log"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"run.started"' in line:
                run_id = json.loads(line)["run_id"]
                started[run_id] = started.get(run_id, 0) + 1
    per_fire: dict[tuple[str, datetime], int] = {}
    for row in rows:
        per_fire[(row.instruction_id, row.scheduled_for)] = (
            per_fire.get((row.instruction_id, row.scheduled_for), 0) + 1
        )
    fired = {instruction for instruction, _ in per_fire}
    lags = sorted((r.started_at - r.scheduled_for).total_seconds() for r in rows)
    first_fire = min(r.scheduled_for for r in rows)
    last_end = max(r.finished_at for r in rows if r.finished_at is not None)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    return Result(
        name=name,
        drain_seconds=(last_end - first_fire).total_seconds(),
        lag_p50=statistics.median(lags),
        lag_p99=lags[min(len(lags) - 1, int(0.99 * len(lags)))],
        memory_mb=memory,
        runs=len(rows),
        lost=args.instructions - len(fired),
        twice=sum(n > 1 for n in per_fire.values()) + sum(n > 1 for n in started.values()),
        statuses=statuses,
        requests=provider.requests,
        throttled=provider.throttled,
    )


HEADER = (
    f"{'dispatch':<12} {'drain s':>8} {'lag p50':>8} {'lag p99':>8} {'runs':>5} "
    f"{'lost':>5} {'twice':>5} {'429s':>5}  statuses; peak memory per process (MB)"
)


def row(r: Result) -> str:
    memory = ", ".join(f"{k} {v:.0f}" for k, v in r.memory_mb.items())
    statuses = " ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
    return (
        f"{r.name:<12} {r.drain_seconds:>8.1f} {r.lag_p50:>8.1f} {r.lag_p99:>8.1f} "
        f"{r.runs:>5} {r.lost:>5} {r.twice:>5} {r.throttled:>5}  {statuses}; {memory}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get(
            "SALVAGELANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--instructions", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4", help="worker processes per queue run")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at once per worker")
    parser.add_argument("--max-workers", type=int, default=4, help="in-process serve's pool")
    parser.add_argument("--low", type=float, default=1.0)
    parser.add_argument("--high", type=float, default=2.0)
    parser.add_argument("--rate-429", type=float, default=0.05)
    parser.add_argument("--lead", type=float, default=90, help="seconds to start processes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per scenario")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--skip-inprocess", action="store_true")
    parser.add_argument("--quick", action="store_true", help="24 instructions, 1 and 2 workers")
    args = parser.parse_args()
    if args.quick:
        args.instructions, args.workers = 24, "1,2"
    from salvagelane.store import database_url

    server = database_url(args.server)
    out = Path(tempfile.mkdtemp(prefix="queue_load-"))
    scenarios = [] if args.skip_inprocess else [("inprocess", 0)]
    scenarios += [(f"queue-{n}w", n) for n in map(int, args.workers.split(","))]
    print(
        f"{args.instructions} instructions firing within one minute; provider latency "
        f"{args.low:g}-{args.high:g} s, {args.rate_429:.0%} 429; in-process --max-workers "
        f"{args.max_workers}; workers --concurrency {args.concurrency}; logs in {out}",
        flush=True,
    )
    results = []
    for name, workers in scenarios:
        result = run_scenario(name, server, workers, args, out)
        results.append(result)
        print(f"  {row(result)}", flush=True)
    print()
    print(HEADER)
    for r in results:
        print(row(r))
    bad = [r.name for r in results if r.lost or r.twice or not set(r.statuses) <= {"ok", "partial"}]
    if bad:
        print(f"CHECK FAILED: {', '.join(bad)} lost, repeated or failed a fire")
        sys.exit(1)
    print("check: every fire ran exactly once in every scenario")


if __name__ == "__main__":
    main()
