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


def command_env(database: str | None, env: dict[str, str] | None) -> dict[str, str]:
    """The environment of a command run on ``database`` (when given), plus ``env``."""
    extra = dict(env or {})
    if database is not None:
        extra["SALVAGELANE_DATABASE_URL"] = database
    return clean_env(extra)


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
    return subprocess.run(
        command(*args),
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=command_env(database, env),
        timeout=timeout,
        check=False,
    )


def upgraded(database_url: str) -> str:
    """``database_url`` after ``salvagelane db upgrade`` (run in this process)."""
    proc = salvagelane_here("db", "upgrade", database=database_url)
    assert proc.returncode == 0, proc.stderr
    return database_url


def salvagelane_here(
    *args: str,
    database: str | None = None,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """:func:`salvagelane`, run by ``salvagelane.cli.app.main`` in this process.

    For the tests that read what a command printed and stored: a process of its own
    costs about a second here, most of it importing SQLAlchemy again. The command
    sees what it would in a process: the same environment (replaced, then restored),
    working directory, standard streams (pipes, not terminals) and exit status; the
    log and signal setup it makes is undone afterwards. Signals, start-up imports and
    crashes are tested with :func:`salvagelane`."""
    del timeout  # a command run here cannot be stopped from outside; pytest's own limits hold
    import io
    import signal

    import structlog

    from salvagelane.cli.app import main

    environ = command_env(database, env)
    streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_logs = structlog.get_config()
    saved_signals = {sig: signal.getsignal(sig) for sig in _HANDLED_SIGNALS}
    out, err = io.BytesIO(), io.BytesIO()
    wrappers: tuple[io.TextIOWrapper, ...] = ()
    code: int
    try:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.stdin = io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
        wrappers = (sys.stdout, sys.stderr)
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:  # pragma: no cover - main always exits
            code = 0
    finally:
        for wrapper in wrappers:
            wrapper.flush()
            wrapper.detach()  # a wrapper closed with it would close the buffer read below
        sys.stdin, sys.stdout, sys.stderr = streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
        structlog.configure(**saved_logs)
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(
        command(*args),
        code,
        out.getvalue().decode("utf-8", errors="replace"),
        err.getvalue().decode("utf-8", errors="replace"),
    )


_HANDLED_SIGNALS = (2, 15, 1)  # SIGINT, SIGTERM, SIGHUP: what serve and ui install
