"""What one run costs the runtime, in process, against an earlier commit.

Run from the project root:

    .venv/bin/python benchmarks/run_overhead.py                      # this checkout only
    .venv/bin/python benchmarks/run_overhead.py --baseline 2ac09fe   # and against a commit

A run here is ``salvagelane run daily-triage --replay fixtures/daily-triage-truncated``
in a project ``salvagelane init`` wrote, on SQLite: render, the replay "call", the raw
output stored, salvage, the report, the quarantine and the outbox committed, events
published and logged. The command's ``main`` is called again and again in one child
process, so the figure is the runtime's work per run with the interpreter's start and
the imports paid once, outside the timing (``benchmarks/startup.py`` measures those).

``--baseline REV`` checks REV out in a temporary git worktree and runs the same
command with that source first on ``PYTHONPATH``, from the same virtualenv. The
compiled scan loops are copied across only when REV's C source is this checkout's;
otherwise the baseline runs without them and the header says so. Sides alternate
round by round (A B A B ...), and the ratio is taken round by round, so a drift in
the machine's speed moves both sides of a ratio alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEEDUPS_SOURCE = "src/salvagelane/core/_speedups.c"

# The child: `init` once, then `run --replay` N times through the CLI's own main.
# SystemExit is how main returns; logs are JSON lines at info level into a string,
# so the figure is not a terminal's.
CHILD = r"""
import contextlib, io, json, os, sys, time
from salvagelane.cli.app import main

def call(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()

runs, warmup = int(sys.argv[1]), int(sys.argv[2])
if not os.path.exists("instructions"):
    code, out, err = call(["init"])
    if code != 0:
        sys.exit(f"init exited {code}: {err[-2000:]}")
fixture = "fixtures/daily-triage-truncated"
argv = ["--log-format", "json", "run", "daily-triage", "--replay", fixture]
wall, cpu = [], []
for index in range(warmup + runs):
    w0, c0 = time.perf_counter(), time.process_time()
    code, out, err = call(argv)
    w1, c1 = time.perf_counter(), time.process_time()
    # The demo's replay ends partial: exit 1 is its answer, anything else is broken.
    if code not in (0, 1) or "partial" not in out:
        sys.exit(f"run exited {code}: {err[-2000:]}")
    if index >= warmup:
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
print(json.dumps({"wall": wall, "cpu": cpu}))
"""


@dataclass(frozen=True, kw_only=True)
class Side:
    name: str
    label: str
    src: Path
    project: Path


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _round(side: Side, *, runs: int, warmup: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=str(side.src), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(runs), str(warmup)],
        cwd=side.project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{side.name} ({side.label}) failed: {done.stderr[-3000:]}")
    figures: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return figures


def _baseline_worktree(rev: str, into: Path) -> tuple[Path, str]:
    commit = _git("rev-parse", "--short", rev)
    _git("worktree", "add", "--quiet", "--detach", str(into), commit)
    speedups = "without the compiled scan loops"
    same_c = subprocess.run(
        ["git", "diff", "--quiet", commit, "--", SPEEDUPS_SOURCE], cwd=ROOT, check=False
    )
    if same_c.returncode == 0:
        for built in (ROOT / "src/salvagelane/core").glob("_speedups*.so"):
            shutil.copy2(built, into / "src/salvagelane/core" / built.name)
            speedups = "with the compiled scan loops (same C source)"
    return into / "src", f"{commit}, {speedups}"


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="a commit to compare with")
    parser.add_argument("--runs", type=int, default=40, help="timed runs per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per side")
    args = parser.parse_args()

    dirty = " (uncommitted changes in src/)" if _git("status", "--porcelain", "src") else ""
    with tempfile.TemporaryDirectory(prefix="salvagelane-bench-") as tmp:
        scratch = Path(tmp)
        sides = [
            Side(
                name="A",
                label=f"{_git('rev-parse', '--short', 'HEAD')}{dirty}",
                src=ROOT / "src",
                project=scratch / "project-a",
            )
        ]
        worktree = scratch / "baseline"
        try:
            if args.baseline:
                src, label = _baseline_worktree(args.baseline, worktree)
                sides.append(Side(name="B", label=label, src=src, project=scratch / "project-b"))
            for side in sides:
                side.project.mkdir()
            print(f"run overhead: {args.rounds} rounds x {args.runs} runs (+{args.warmup} warm-up)")
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            for side in sides:
                print(f"  {side.name}: {side.label}")
            results: dict[str, list[dict[str, list[float]]]] = {s.name: [] for s in sides}
            for _ in range(args.rounds):
                for side in sides:
                    results[side.name].append(_round(side, runs=args.runs, warmup=args.warmup))
        finally:
            if worktree.exists():
                _git("worktree", "remove", "--force", str(worktree))

    print()
    print("side   wall ms/run   cpu ms/run   (median of every timed run; per round: wall)")
    for side in sides:
        rounds = results[side.name]
        wall = [v for r in rounds for v in r["wall"]]
        cpu = [v for r in rounds for v in r["cpu"]]
        per_round = " ".join(_ms(r["wall"]).strip() for r in rounds)
        print(f"{side.name:4} {_ms(wall):>12} {_ms(cpu):>12}   {per_round}")
    if len(sides) == 2:
        ratios = [
            statistics.median(a["wall"]) / statistics.median(b["wall"])
            for a, b in zip(results["A"], results["B"], strict=True)
        ]
        cpu_ratios = [
            statistics.median(a["cpu"]) / statistics.median(b["cpu"])
            for a, b in zip(results["A"], results["B"], strict=True)
        ]
        print()
        print(
            f"A/B wall: median {statistics.median(ratios):.3f} "
            f"(rounds {min(ratios):.3f} .. {max(ratios):.3f})"
        )
        print(
            f"A/B cpu:  median {statistics.median(cpu_ratios):.3f} "
            f"(rounds {min(cpu_ratios):.3f} .. {max(cpu_ratios):.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
