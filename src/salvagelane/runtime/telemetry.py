"""What a run and a fire tell an observer as they happen: the seam the metrics hang on.

The executor and the service report events (a fire, a run's start and end, a model call,
a provider error, a retry, tokens) to a :class:`RunObserver`; :data:`NO_TELEMETRY`, the
default, ignores them. :mod:`salvagelane.runtime.metrics` implements the observer with Prometheus
counters and histograms, so neither the executor nor the service imports a metrics
library, and a process without ``--metrics-port`` pays nothing but a method call.

An observer is called from the run's own thread, in the middle of the run: it must be
quick and must not raise (a failing observer would fail the run it watches).

What the database holds (runs by status, the quarantine still pending, deliveries,
queue depth) is not reported here: :mod:`salvagelane.runtime.metrics` reads it from the database
when it is scraped, so it survives restarts and agrees with every other view.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Protocol

from salvagelane.vocabulary import RunStatus, Trigger

LAGGED_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})

NOTHING_FOLDED: Mapping[str, int] = MappingProxyType({})
"""No quarantined item past the bound (the default of ``run_finished``)."""
"""The triggers of a run that has a fire time to be late for."""


class RunObserver(Protocol):
    """Told what runs and fires do, as they do it (see the module docstring)."""

    def fired(self, *, instruction_id: str, trigger: Trigger) -> None:
        """A fire reached the service (the scheduler, a catch-up or a retry), before it
        claims its run: a duplicate fire is counted too."""

    def run_started(
        self,
        *,
        instruction_id: str,
        trigger: Trigger,
        scheduled_for: datetime | None,
        started_at: datetime,
        retry_of: str | None,
    ) -> None:
        """A run claimed its fire (or, unscheduled, started)."""

    def model_call(self, *, instruction_id: str, seconds: float, outcome: str) -> None:
        """One call of the model ended after ``seconds``; ``outcome`` is ``ok`` or
        ``error``."""

    def provider_error(self, *, instruction_id: str, kind: str) -> None:
        """A model call ended without a completion; ``kind`` from :func:`error_kind`."""

    def retry(self, *, instruction_id: str, cause: str) -> None:
        """The run asks the model again, for ``cause`` (a RetryCause word)."""

    def tokens(self, *, instruction_id: str, prompt: int, completion: int) -> None:
        """What one call used, as the provider reported it (0 when it did not)."""

    def run_finished(
        self,
        *,
        instruction_id: str,
        status: RunStatus,
        seconds: float,
        kept: int,
        quarantined: Mapping[str, int],
        folded: Mapping[str, int] = NOTHING_FOLDED,
    ) -> None:
        """A run ended with ``status`` after ``seconds``, keeping ``kept`` items and
        holding back ``quarantined`` (by reason) of its chosen attempt, ``folded`` of
        them past the quarantine bound (counted, not stored)."""


class NoTelemetry:
    """The observer that ignores everything: the default of the executor and service."""

    def fired(self, *, instruction_id: str, trigger: Trigger) -> None:
        return None

    def run_started(
        self,
        *,
        instruction_id: str,
        trigger: Trigger,
        scheduled_for: datetime | None,
        started_at: datetime,
        retry_of: str | None,
    ) -> None:
        return None

    def model_call(self, *, instruction_id: str, seconds: float, outcome: str) -> None:
        return None

    def provider_error(self, *, instruction_id: str, kind: str) -> None:
        return None

    def retry(self, *, instruction_id: str, cause: str) -> None:
        return None

    def tokens(self, *, instruction_id: str, prompt: int, completion: int) -> None:
        return None

    def run_finished(
        self,
        *,
        instruction_id: str,
        status: RunStatus,
        seconds: float,
        kept: int,
        quarantined: Mapping[str, int],
        folded: Mapping[str, int] = NOTHING_FOLDED,
    ) -> None:
        return None


NO_TELEMETRY: RunObserver = NoTelemetry()


# --- the calculations the observers share -----------------------------------------------------


def fire_lag_seconds(
    *,
    trigger: Trigger,
    scheduled_for: datetime | None,
    started_at: datetime,
    retry_of: str | None,
) -> float | None:
    """How late a run started for its fire (start minus fire time, never below 0), or
    None when it has no fire to be late for: manual and replay runs, and the retry of an
    interrupted run, whose lateness is mostly the first run's duration."""
    if trigger not in LAGGED_TRIGGERS or scheduled_for is None or retry_of is not None:
        return None
    return max(0.0, (started_at - scheduled_for).total_seconds())


def error_kind(status: int | None, *, provider: bool = True) -> str:
    """The label of a failed model call: the provider's HTTP status (``429``, ``503``;
    ``200`` for an error inside a successful response), ``no_response`` when none arrived
    (a timeout, a refused connection), ``connector`` when the call was not made at all
    (``provider`` false: a missing key, an unusable fixture)."""
    if not provider:
        return "connector"
    return "no_response" if status is None else str(status)


def usage_tokens(usage: Mapping[str, object], key: str) -> int:
    """A token count of a completion's usage (``prompt_tokens``, ``completion_tokens``),
    0 when the provider sent none or something that is not a count."""
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
