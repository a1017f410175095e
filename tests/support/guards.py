"""A hang guard shared by tests that push hostile input through the scanner."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def time_limit(seconds: int, what: str) -> Iterator[None]:
    """Fail (instead of blocking CI) when the body runs longer than ``seconds``.

    Not a timing assertion: callers pick a limit orders of magnitude above what
    linear work needs. SIGALRM interrupts Python code; a hang inside one C call
    is interrupted when it returns. Where SIGALRM is missing, the body runs unguarded.
    """
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"{what} still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
