"""``salvagelane ui`` as a real process on a free port, for the tests that need a server
(the browser test, the command's own test)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import ROOT, clean_env, command
from tests.support.review_page import TOKEN


@dataclass(frozen=True, kw_only=True)
class RunningUi:
    url: str
    """The URL the command printed, with the token."""
    base: str
    """``http://127.0.0.1:PORT``."""
    banner: tuple[str, ...] = ()
    """The lines the command printed before its URL (``salvagelane ui on DATABASE``)."""


@contextmanager
def running_ui(
    database: str,
    *,
    cwd: Path,
    instructions: Path = ROOT / "instructions",
    extra: Sequence[str] = (),
) -> Iterator[RunningUi]:
    """Start ``salvagelane ui --port 0`` (the system picks the port; the command prints
    it), yield once it has printed its URL, stop it with SIGINT on the way out: it must
    end with exit 0, as docs/reference/cli.md ("Exit status") says of its stop signals."""
    proc = subprocess.Popen(
        command(
            "ui",
            "--port",
            "0",
            "--database",
            database,
            "--instructions",
            str(instructions),
            *extra,
        ),
        cwd=cwd,
        env=clean_env({"SALVAGELANE_UI_TOKEN": TOKEN}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        banner: list[str] = []
        for line in proc.stdout:
            if line.startswith("open "):
                url = line.split(" ", 1)[1].strip()
                break
            banner.append(line.rstrip("\n"))
        assert url, f"salvagelane ui printed no URL: {proc.stderr.read() if proc.stderr else ''}"
        yield RunningUi(url=url, base=url.split("/?", 1)[0], banner=tuple(banner))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors = proc.stderr.read() if proc.stderr is not None else ""
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == 0, f"salvagelane ui ended with {proc.returncode}: {errors}"
