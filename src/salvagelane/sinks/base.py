"""The sink interface: a stored report, delivered somewhere as its consumer sees it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Sink(Protocol):
    """Delivers one report payload; raises :class:`~salvagelane.errors.SinkError` on failure.

    ``target`` says where it delivers (a path, URL or ``module:function``), never a secret.
    The payload is a JSON-ready mapping: ``run_id``, ``instruction``, ``status``,
    ``partial``, ``finish_reason``, ``counts``, ``envelope`` and ``items`` (kept items only).
    A sink must not alter the payload.

    A sink whose target is a template (a ``json_file`` path with ``{run_id}``) may also
    define ``target_for(payload) -> str``: where that payload goes. It may depend only on
    ``run_id`` and ``instruction`` (fixed for a run): the outbox records it with the
    report, before the payload is read, and logs and views show it instead of the template.
    """

    @property
    def target(self) -> str: ...

    def deliver(self, payload: Mapping[str, Any]) -> None: ...
