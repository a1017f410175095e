"""Helpers for the definition-safety tests: a copy of the project, edits, and running
``salvagelane`` as a real process under resource limits, measuring what it used."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import clean_env

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = Path("instructions") / "daily-triage.yaml"

# A small launcher between the test and `salvagelane`: Linux starts a forked child's peak
# RSS at its parent's size, so a child forked straight from a grown pytest process would
# report pytest's size. The launcher (a few MB) forks `salvagelane` and reports what that
# used. Its limits (inherited) protect the machine and CI from a regression; RLIMIT_CPU is
# the hang guard. They are not what the tests measure.
_LAUNCH = """\
import json, os, resource, subprocess, sys
report, memory, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
child = subprocess.Popen([sys.executable, "-m", "salvagelane", *sys.argv[4:]])
_, status, usage = os.wait4(child.pid, 0)
child.returncode = os.waitstatus_to_exitcode(status)
with open(report, "w") as out:
    json.dump({"returncode": child.returncode, "maxrss_kb": usage.ru_maxrss,
               "cpu": usage.ru_utime + usage.ru_stime}, out)
"""


def copy_project(destination: Path) -> Path:
    """instructions/ and schemas/ copied into ``destination``: the bundled definition's
    relative paths work there as in the repository."""
    shutil.copytree(ROOT / "instructions", destination / "instructions")
    shutil.copytree(ROOT / "schemas", destination / "schemas")
    return destination


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def add_context(definition: Path, yaml_entries: str) -> None:
    """Insert context entries (YAML indented by two spaces) at the top of ``context:``."""
    edit(definition, "\ncontext:\n", "\ncontext:\n" + yaml_entries)


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_bytes: int
    cpu_seconds: float


def run_measured(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    memory_limit_bytes: int = 1024 * 1024 * 1024,
    cpu_limit_seconds: int = 60,
) -> Measured:
    """Run ``salvagelane ARGS`` to completion under memory and CPU limits; its exit status,
    output, peak RSS and CPU time."""
    environ = clean_env(env)
    with (
        tempfile.TemporaryDirectory() as scratch,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        report = Path(scratch) / "usage.json"
        argv = [
            sys.executable,
            "-c",
            _LAUNCH,
            str(report),
            str(memory_limit_bytes),
            str(cpu_limit_seconds),
            *args,
        ]
        launcher = subprocess.run(
            argv, cwd=cwd, env=environ, stdout=out, stderr=err, timeout=300, check=False
        )
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
        assert launcher.returncode == 0, f"the launcher failed: {stderr}"
        usage = json.loads(report.read_text(encoding="utf-8"))
    return Measured(
        returncode=usage["returncode"],
        stdout=stdout,
        stderr=stderr,
        peak_rss_bytes=usage["maxrss_kb"] * 1024,  # kilobytes on Linux
        cpu_seconds=usage["cpu"],
    )
