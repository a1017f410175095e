"""Functions the callable-sink tests name as ``_sink_targets:<function>``."""

from __future__ import annotations

from typing import Any

received: list[dict[str, Any]] = []
"""Every payload a function here was given, in order (cleared by the tests)."""

not_callable = 42


def record(payload: dict[str, Any]) -> None:
    received.append(payload)


def tamper(payload: dict[str, Any]) -> None:
    """Alter everything it can reach, then keep it: the caller must not notice."""
    payload["status"] = "tampered"
    payload["items"].clear()
    payload["counts"]["kept"] = -1
    received.append(payload)


def refuse(payload: dict[str, Any]) -> None:
    raise RuntimeError(f"downstream refused run {payload['run_id']}")


class Consumer:
    @staticmethod
    def take(payload: dict[str, Any]) -> None:
        received.append(payload)
