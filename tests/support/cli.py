"""Running ``salvagelane`` as a real process, as the CLI tests do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"

# A valid eighth recommendation for the truncated fixture (whose eighth item was cut):
# what an operator approves in its place.
EIGHTH = {
    "rank": 8,
    "candidate": "postgres-15-upgrade",
    "action": "defer",
    "why": "The cut-over needs a maintenance window; the team is stretched by billing.",
    "confidence": 0.6,
    "wsjf": {
        "business_value": 6,
        "time_criticality": 4,
        "risk_reduction": 8,
        "job_size": 8,
        "score": 2.25,
    },
}


def command(*args: str) -> list[str]:
    """The argv of ``salvagelane ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "salvagelane", *args]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the variables that would choose the database, the spool
    directory or the log format for the command, unbuffered, plus ``extra``."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {"SALVAGELANE_DATABASE_URL", "SALVAGELANE_LOG_FORMAT", "SALVAGELANE_SPOOL_DIR"}
    }
    environ["PYTHONUNBUFFERED"] = "1"
    environ.update(extra or {})
    return environ


def salvagelane(
    *args: str,
    database: str | None = None,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``salvagelane ARGS`` to completion (on ``database`` when given, with ``input``
    on stdin, e.g. a confirmation prompt's reply)."""
    extra = dict(env or {})
    if database is not None:
        extra["SALVAGELANE_DATABASE_URL"] = database
    return subprocess.run(
        command(*args),
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(extra),
        timeout=timeout,
        check=False,
    )


def upgraded(database_url: str) -> str:
    proc = salvagelane("db", "upgrade", database=database_url)
    assert proc.returncode == 0, proc.stderr
    return database_url
