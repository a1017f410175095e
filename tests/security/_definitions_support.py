"""Helpers for the definition-safety tests: a copy of the project, edits, and running
``salvagelane`` as a real process under resource limits, measuring what it used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = Path("instructions") / "daily-triage.yaml"

# Runs in the child before it becomes `salvagelane`: the limits protect the machine (and CI)
# from a regression, they are not what the tests measure. RLIMIT_CPU is the hang guard.
_LAUNCH = (
    "import os, resource, sys\n"
    "memory, cpu = int(sys.argv[1]), int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'salvagelane', *sys.argv[3:]])\n"
)


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
    """Run ``salvagelane ARGS`` to completion; its own peak RSS and CPU time (from wait4,
    so no earlier child of this test process can inflate them)."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {"SALVAGELANE_DATABASE_URL", "SALVAGELANE_LOG_FORMAT", "SALVAGELANE_SPOOL_DIR"}
    }
    environ["PYTHONUNBUFFERED"] = "1"
    environ.update(env or {})
    argv = [
        sys.executable,
        "-c",
        _LAUNCH,
        str(memory_limit_bytes),
        str(cpu_limit_seconds),
        *args,
    ]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, cwd=cwd, env=environ, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        # Reaped here, not by Popen: tell it, so it does not wait (or warn) again.
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return Measured(
        returncode=process.returncode,
        stdout=stdout,
        stderr=stderr,
        peak_rss_bytes=usage.ru_maxrss * 1024,  # kilobytes on Linux
        cpu_seconds=usage.ru_utime + usage.ru_stime,
    )
