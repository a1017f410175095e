"""How long the ``salvagelane`` command takes to start, per command, against Python's floor.

Run from the project root:

    .venv/bin/python benchmarks/startup.py            # 15 runs per command
    .venv/bin/python benchmarks/startup.py --runs 40

Each command runs as a fresh process (as cron or a shell runs it) and its wall time
is measured from spawn to exit, with compiled bytecode as a wheel install has it.
Printed per command: the best and the median run, and the median minus a baseline's
median. The baselines are the interpreter alone (``python -c pass``) and
``python -c "import jsonschema"``, the one heavy library that ``salvage`` cannot
avoid. The targets (issue 13): ``--help`` under 150 ms, ``salvage`` on a small file
within 100 ms of ``import jsonschema``. The verdict column says whether the median
met them; the script exits 1 when one was missed, so a slow start is visible.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated" / "raw.txt"
SCHEMA = ROOT / "schemas" / "daily-triage-item.schema.json"


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    argv: list[str]
    baseline: str | None = None
    target_ms: float | None = None
    """Median limit in ms: absolute, or over the baseline's median when there is one."""


def salvagelane_argv() -> list[str]:
    """The console script beside this interpreter (what users run), else ``-m``."""
    script = Path(sys.executable).parent / "salvagelane"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "salvagelane"]


def cases() -> list[Case]:
    cli = salvagelane_argv()
    return [
        Case(name="python -c pass", argv=[sys.executable, "-c", "pass"]),
        Case(name="import jsonschema", argv=[sys.executable, "-c", "import jsonschema"]),
        Case(name="salvagelane --help", argv=[*cli, "--help"], target_ms=150),
        Case(name="salvagelane --version", argv=[*cli, "--version"]),
        Case(
            name="salvagelane salvage (7 items)",
            argv=[
                *cli,
                "salvage",
                str(FIXTURE),
                "--schema",
                str(SCHEMA),
                "--items",
                "recommendations",
            ],
            baseline="import jsonschema",
            target_ms=100,
        ),
        Case(
            name="salvagelane check",
            argv=[*cli, "check", str(ROOT / "instructions")],
            baseline="import jsonschema",
        ),
        Case(name="import salvagelane", argv=[sys.executable, "-c", "import salvagelane"]),
    ]


def time_runs(argv: list[str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` fresh processes (one warm-up run first, not counted)."""
    # Bytecode as an installed wheel has it (pip compiles it at install): the warm-up
    # run writes the checkout's __pycache__ even where PYTHONDONTWRITEBYTECODE is set,
    # which would otherwise make every run compile salvagelane from source.
    env = {**os.environ, "SALVAGELANE_LOG_FORMAT": "json"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times = []
    for number in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, env=env, cwd=ROOT, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{argv}: exit {done.returncode}\n{done.stderr.decode()[-2000:]}")
        if number:
            times.append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    args = parser.parse_args()
    if shutil.which("nproc"):
        cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        print(f"{cores} cores; load average {os.getloadavg()[0]:.2f}; {args.runs} runs each")
    medians: dict[str, float] = {}
    missed = 0
    header = f"{'command':32} {'best':>8} {'median':>8} {'over base':>10}  verdict"
    print(header)
    print("-" * len(header))
    for case in cases():
        times = time_runs(case.argv, args.runs)
        best, median = min(times) * 1000, statistics.median(times) * 1000
        medians[case.name] = median
        base = case.baseline or "python -c pass"
        over = median - medians[base] if base in medians and case.name != base else None
        verdict = ""
        if case.target_ms is not None:
            measured = over if case.baseline else median
            assert measured is not None
            met = measured <= case.target_ms
            missed += not met
            relative = f" over {case.baseline}" if case.baseline else ""
            verdict = f"{'ok' if met else 'MISSED'} (target {case.target_ms:.0f} ms{relative})"
        shown_over = f"{over:8.1f}ms" if over is not None else f"{'':10}"
        print(f"{case.name:32} {best:6.1f}ms {median:6.1f}ms {shown_over}  {verdict}")
    print("over base: median minus the median of `python -c pass`, or of its baseline")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
