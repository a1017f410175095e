"""A callable sink target for the executor tests: fails while FAIL is set."""

from __future__ import annotations

from typing import Any

FAIL = False
RECEIVED: list[dict[str, Any]] = []


def flaky(payload: dict[str, Any]) -> None:
    if FAIL:
        raise ConnectionError("downstream is down")
    RECEIVED.append(payload)
