"""Running ``salvagelane`` as a real process, as the CLI tests do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"


def salvagelane(
    *args: str, database: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SALVAGELANE_DATABASE_URL", "SALVAGELANE_LOG_FORMAT"}
    }
    environ.update({"SALVAGELANE_DATABASE_URL": database, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "salvagelane", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=120,
        check=False,
    )


def upgraded(database_url: str) -> str:
    proc = salvagelane("db", "upgrade", database=database_url)
    assert proc.returncode == 0, proc.stderr
    return database_url
