"""Delivering stored reports to sinks through the outbox, so no delivery is ever lost silently.

A run's deliveries are written ``pending`` with its report (one per sink), their first try
leased to the process that runs it (:func:`pending_deliveries`). That process then sends
them (:func:`deliver_claimed`) and records each as ``delivered`` or ``failed``. A failed
delivery is due again after an exponential backoff, up to
:attr:`DeliveryPolicy.max_attempts` tries; a pending one whose process died becomes due
when its lease ends. :func:`redeliver_due` (the ``serve`` leader, every poll) takes the
due ones; ``salvagelane runs redeliver`` takes them by hand (:func:`redeliver_open`,
:func:`deliver_report`).

Delivery is at least once: a process that stops between a sink's answer and recording it
leaves the delivery pending, and it is sent again. The payload is always the stored
report, read again for each pass, never recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from salvagelane.definitions import Instruction
from salvagelane.errors import ConfigurationError, NotFoundError, SalvagelaneError
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import (
    DeliveryDone,
    DeliveryFailed,
    DeliveryGivenUp,
    DeliveryOvertaken,
)
from salvagelane.logs import bound
from salvagelane.sinks import DeliveryOutcome, Sink, deliver_one, describe, run_address
from salvagelane.store import (
    ClaimedDelivery,
    DeliveryRun,
    OpenDelivery,
    PendingDelivery,
    SinkDeliveryView,
    Store,
)
from salvagelane.vocabulary import Clock, DeliveryStatus, utc_now

SinkFactory = Callable[[Instruction], Sequence[Sink]]
SinksForRun = Callable[[DeliveryRun], Sequence[Sink]]
"""The sinks a run's report goes to, from the run's instruction definition. Raises a
SalvagelaneError (e.g. NotFoundError) when they cannot be had: the definition is gone."""

DEFAULT_LIMIT = 50
"""Deliveries one :func:`redeliver_due` pass takes at most."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryPolicy:
    """How deliveries are retried.

    ``lease_seconds``: how long a try is left to the process making it before another
    may take the delivery over (longer than a sink's own deadline and retries: a webhook
    gives up after 120 s by default). A failed try ``n`` is retried after
    ``first_retry_seconds * 2 ** (n - 1)``, at most ``max_retry_seconds``; after
    ``max_attempts`` tries the delivery is given up (``salvagelane runs redeliver
    --pending`` still delivers it by hand).
    """

    lease_seconds: float = 600.0
    first_retry_seconds: float = 60.0
    max_retry_seconds: float = 3600.0
    max_attempts: int = 8

    def __post_init__(self) -> None:
        if not all(
            math.isfinite(value) and value > 0
            for value in (self.lease_seconds, self.first_retry_seconds, self.max_retry_seconds)
        ):
            raise ConfigurationError(
                "delivery policy: expected positive lease and retry seconds, got "
                f"{self.lease_seconds!r}, {self.first_retry_seconds!r}, {self.max_retry_seconds!r}"
            )
        if self.max_attempts < 1:
            raise ConfigurationError(
                f"delivery policy: expected max_attempts of 1 or more, got {self.max_attempts}"
            )

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    def retry_at(self, attempts: int, now: datetime) -> datetime | None:
        """When a delivery whose try ``attempts`` failed at ``now`` is due again; None
        once ``max_attempts`` tries were made."""
        if attempts >= self.max_attempts:
            return None
        # The exponent is capped before it can overflow; the delay is capped anyway.
        delay = self.first_retry_seconds * 2.0 ** min(max(attempts - 1, 0), 60)
        return now + timedelta(seconds=min(delay, self.max_retry_seconds))


DEFAULT_POLICY = DeliveryPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class Redelivery:
    """One undelivered delivery taken by hand: ``delivery`` as stored afterwards.
    ``skipped`` says why it was not tried (then nothing was sent nor written)."""

    delivery: SinkDeliveryView
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.delivery.status == DeliveryStatus.DELIVERED


# --- the run's own deliveries ----------------------------------------------------------------


def pending_deliveries(
    sinks: Sequence[Sink],
    *,
    now: datetime,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    address: Mapping[str, Any] | None = None,
) -> list[PendingDelivery]:
    """The deliveries to write with a report finished at ``now``, one per sink, leased to
    the process that writes them. ``address`` (:func:`~salvagelane.sinks.run_address`)
    fills in target templates: each delivery records where the report goes."""
    lease_until = policy.lease_until(now)
    return [
        PendingDelivery(kind=kind, target=target, next_attempt_at=lease_until)
        for kind, target in (describe(sink, address) for sink in sinks)
    ]


def deliver_claimed(
    store: Store,
    claimed: Iterable[tuple[ClaimedDelivery, Sink]],
    payload: Mapping[str, Any],
    *,
    clock: Clock = utc_now,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    events: EventStream | None = None,
) -> tuple[DeliveryOutcome, ...]:
    """Send ``payload`` (a stored report) to each claimed delivery's sink, in order, and
    record each result."""
    stream = events or logged_stream()
    outcomes: list[DeliveryOutcome] = []
    for claim, sink in claimed:
        outcome = deliver_one(sink, payload)
        _record(store, claim, outcome.error, clock=clock, policy=policy, events=stream)
        outcomes.append(outcome)
    return tuple(outcomes)


def deliver_report(
    store: Store,
    run_id: str,
    sinks: Sequence[Sink],
    *,
    clock: Clock = utc_now,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    events: EventStream | None = None,
) -> tuple[DeliveryOutcome, ...]:
    """Deliver a stored run's report, as stored, to ``sinks`` (``salvagelane runs
    redeliver RUN_ID``). Each sink's undelivered delivery is claimed, due or not; a sink
    the report already reached (or never tried) gets a new delivery."""
    payload = store.get_report_payload(run_id)
    full_id = str(payload["run_id"])
    outcomes: list[DeliveryOutcome] = []
    for sink in sinks:
        kind, target = describe(sink, payload)
        now = clock()
        claim = store.deliveries.claim_target(
            full_id,
            kind=kind,
            target=target,
            also=_legacy_targets(sink, target),
            now=now,
            lease_until=policy.lease_until(now),
        )
        outcomes.extend(
            deliver_claimed(
                store, [(claim, sink)], payload, clock=clock, policy=policy, events=events
            )
        )
    return tuple(outcomes)


# --- deliveries left undelivered ---------------------------------------------------------------


def redeliver_due(
    store: Store,
    *,
    sinks_for_run: SinksForRun,
    now: datetime,
    limit: int = DEFAULT_LIMIT,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    clock: Clock | None = None,
    events: EventStream | None = None,
) -> list[SinkDeliveryView]:
    """Deliver the deliveries due at ``now``, at most ``limit``; returns them as stored
    afterwards (a result another process overtook is left out).

    Due: ``failed`` with its backoff passed, or ``pending`` with the lease of the process
    that was delivering it passed (it stopped). Each is claimed first, so concurrent
    callers on several nodes never send one twice. Deliveries that had their
    ``max_attempts`` tries are given up instead. A run whose sinks cannot be had (its
    definition is gone) or that no longer has the delivery's sink records a failed try.
    Results are recorded at ``clock()`` (default: ``now``).
    """
    timed = clock or (lambda: now)
    stream = events or logged_stream()
    results = store.deliveries.give_up_exhausted(
        now=now, max_attempts=policy.max_attempts, limit=limit
    )
    for view in results:
        stream.publish(
            DeliveryGivenUp(
                run_id=view.run_id,
                target=view.target,
                kind=view.kind,
                attempt=view.attempts,
                error=view.error,
            )
        )
    claims = store.deliveries.claim_due(
        now=now,
        lease_until=policy.lease_until(now),
        limit=limit,
        max_attempts=policy.max_attempts,
    )
    runs = _RunSinks(store, sinks_for_run)
    for claim in claims:
        with bound(run_id=claim.run.id, instruction=claim.run.instruction_id):
            recorded = _record(
                store, claim, runs.send(claim), clock=timed, policy=policy, events=stream
            )
        if recorded is not None:
            results.append(recorded)
    return results


def redeliver_open(
    store: Store,
    *,
    sinks_for_run: SinksForRun,
    clock: Clock = utc_now,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    events: EventStream | None = None,
) -> Iterator[Redelivery]:
    """Deliver every undelivered delivery by hand, due or not, given up or not
    (``salvagelane runs redeliver --pending``), yielding each as it is done.

    One whose sink cannot be had (the definition is gone, or no longer has that sink), or
    that another process claims meanwhile, is skipped: nothing is sent, nothing written,
    so an operator's mistake (a wrong ``--instructions``) costs no try.
    """
    stream = events or logged_stream()
    runs = _RunSinks(store, sinks_for_run)
    for entry in store.deliveries.list_open():
        with bound(run_id=entry.run.id, instruction=entry.run.instruction_id):
            yield _redeliver(store, entry, runs, clock=clock, policy=policy, events=stream)


def _redeliver(
    store: Store,
    entry: OpenDelivery,
    runs: _RunSinks,
    *,
    clock: Clock,
    policy: DeliveryPolicy,
    events: EventStream,
) -> Redelivery:
    view = entry.delivery
    sink, problem = runs.sink_for(entry)
    if sink is None:
        return Redelivery(delivery=view, skipped=problem)
    try:
        payload = runs.payload_for(sink, entry.run)
    except NotFoundError as exc:
        return Redelivery(delivery=view, skipped=str(exc))
    now = clock()
    claim = store.deliveries.claim(
        view.id, attempts=view.attempts, now=now, lease_until=policy.lease_until(now)
    )
    if claim is None:
        return Redelivery(
            delivery=store.deliveries.get(view.id), skipped="another process claimed it meanwhile"
        )
    error = deliver_one(sink, payload).error
    recorded = _record(store, claim, error, clock=clock, policy=policy, events=events)
    # Overtaken after sending: what the newer try recorded is what stands.
    return Redelivery(delivery=recorded or store.deliveries.get(view.id))


def sinks_from_definitions(
    definitions: Mapping[str, Instruction],
    sinks_for: SinkFactory,
    notifications_for: SinkFactory | None = None,
) -> SinksForRun:
    """A :data:`SinksForRun` reading each run's sinks from today's ``definitions`` (by
    instruction id) with ``sinks_for`` (as the executor builds them), and its
    notifications with ``notifications_for``; NotFoundError for an instruction that is no
    longer defined."""

    def sinks_for_run(run: DeliveryRun) -> Sequence[Sink]:
        instruction = definitions.get(run.instruction_id)
        if instruction is None:
            raise NotFoundError(
                f"instruction {run.instruction_id!r} of run {run.id} is no longer defined"
            )
        sinks = list(sinks_for(instruction)) if instruction.sinks else []
        if notifications_for is not None and instruction.notify:
            sinks.extend(notifications_for(instruction))
        return sinks

    return sinks_for_run


# --- helpers ---------------------------------------------------------------------------------


class _RunSinks:
    """The sinks and the stored payload of each run, asked for once per pass."""

    def __init__(self, store: Store, sinks_for_run: SinksForRun) -> None:
        self._store = store
        self._sinks_for_run = sinks_for_run
        self._sinks: dict[str, Sequence[Sink] | str] = {}
        self._payloads: dict[str, Mapping[str, Any]] = {}

    def sink_for(self, delivery: ClaimedDelivery | OpenDelivery) -> tuple[Sink | None, str]:
        """The run's sink this delivery goes to, or None and why there is none."""
        run = delivery.run
        kind, target = (
            (delivery.kind, delivery.target)
            if isinstance(delivery, ClaimedDelivery)
            else (delivery.delivery.kind, delivery.delivery.target)
        )
        if run.id not in self._sinks:
            try:
                self._sinks[run.id] = tuple(self._sinks_for_run(run))
            except SalvagelaneError as exc:
                self._sinks[run.id] = f"the sinks of instruction {run.instruction_id!r}: {exc}"
        sinks = self._sinks[run.id]
        if isinstance(sinks, str):
            return None, sinks
        address = run_address(run.id, run.instruction_id)
        for sink in sinks:
            # A delivery records the target filled in for its run; one recorded before
            # targets were filled in holds the template.
            if (kind, target) in (describe(sink, address), describe(sink)):
                return sink, ""
        return None, (
            f"the definition of instruction {run.instruction_id!r} has no {kind} sink "
            f"{target!r} any more"
        )

    def send(self, claim: ClaimedDelivery) -> str | None:
        """Deliver the claimed delivery's payload to its sink: None, or what went wrong."""
        sink, problem = self.sink_for(claim)
        if sink is None:
            return problem
        try:
            payload = self.payload_for(sink, claim.run)
        except NotFoundError as exc:
            return str(exc)
        return deliver_one(sink, payload).error

    def payload_for(self, sink: Sink, run: DeliveryRun) -> Mapping[str, Any]:
        """What ``sink`` is sent: a notification builds its message from the stored run
        (which may have no report); a report's sink gets the report."""
        payload_from = getattr(sink, "payload_from", None)
        if callable(payload_from):
            built: Mapping[str, Any] = payload_from(self._store, run.id)
            return built
        return self.payload(run)

    def payload(self, run: DeliveryRun) -> Mapping[str, Any]:
        if run.id not in self._payloads:
            self._payloads[run.id] = self._store.get_report_payload(run.id)
        return self._payloads[run.id]


def _legacy_targets(sink: Sink, target: str) -> tuple[str, ...]:
    """The sink's template, when deliveries recorded before templates were filled in
    may hold it instead of ``target``."""
    template = describe(sink)[1]
    return () if template == target else (template,)


def _record(
    store: Store,
    claim: ClaimedDelivery,
    error: str | None,
    *,
    clock: Clock,
    policy: DeliveryPolicy,
    events: EventStream,
) -> SinkDeliveryView | None:
    now = clock()
    retry_at = None if error is None else policy.retry_at(claim.attempts, now)
    recorded = store.deliveries.record_result(claim, error=error, now=now, retry_at=retry_at)
    fields: dict[str, Any] = {
        "run_id": claim.run.id,
        "target": claim.target,
        "kind": claim.kind,
        "attempt": claim.attempts,
    }
    if recorded is None:
        # Its lease ran out and another process took the delivery over: its result stands.
        events.publish(DeliveryOvertaken(**fields, error=error))
    elif error is None:
        events.publish(DeliveryDone(**fields))
    else:
        events.publish(DeliveryFailed(**fields, error=error, next_attempt_at=retry_at))
    return recorded
