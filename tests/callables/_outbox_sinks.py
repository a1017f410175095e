"""A callable sink target for the outbox tests (``_outbox_sinks:take``): it keeps every
payload it is given, or refuses while ``failing`` is set."""

from __future__ import annotations

import threading
from typing import Any

failing = False
received: list[dict[str, Any]] = []
_guard = threading.Lock()


def take(payload: dict[str, Any]) -> None:
    if failing:
        raise ConnectionError("the consumer is down")
    with _guard:
        received.append(payload)


HOSTILE = "refused \x1b[2J\x1b]0;owned\x07 by\u202e the consumer"
"""An error message that would clear the screen, retitle the terminal and reverse text."""


def hostile(payload: dict[str, Any]) -> None:
    raise RuntimeError(HOSTILE)
