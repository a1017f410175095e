"""Notifications: telling someone when a run goes wrong, and when its clean streak breaks
or comes back (a definition's ``notify``).

A :class:`Notifier` subscribes to the run events (:mod:`salvagelane.events`): when a run
finishes, a fire is missed or a run is interrupted, it reads the stored run, decides which
of the definition's notifications apply, and writes each as one delivery of the outbox
(:meth:`~salvagelane.store.DeliveryOutbox.ensure`: one per run, event and target, however
often it is asked), then sends it. A send that fails is retried by the outbox's
redelivery like a report's (``serve``'s leader, ``runs redeliver``), through
:class:`Notification` sinks that build their message from the stored run. A process
killed between a run's commit and its notification leaves nothing undone:
:meth:`Notifier.sweep` (the leader runs it at each poll) writes what is missing.

The message (:func:`notification_payload`, pure) is JSON for a webhook, with a ``text``
field chat webhooks display, and the same text as an email.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from salvagelane.core.numbering import place_in_output
from salvagelane.definitions import Instruction
from salvagelane.definitions.model import NotifySpec
from salvagelane.errors import NotFoundError, SalvagelaneError
from salvagelane.events import Event, EventStream, Subscription, logged_stream
from salvagelane.events.kinds import FireMissed, RunFinished, RunInterrupted
from salvagelane.runtime.delivery import DEFAULT_POLICY, DeliveryPolicy, deliver_claimed
from salvagelane.safe_text import one_line
from salvagelane.sinks import Sink
from salvagelane.sinks.email import EmailSink
from salvagelane.sinks.webhook import WEBHOOK_SETTINGS, WebhookSink
from salvagelane.store import NOTIFICATION_KIND_PREFIX, RunDetail, Store
from salvagelane.store.health import SCHEDULED_TRIGGERS, StreakChange
from salvagelane.vocabulary import Clock, NotifyOn, RunStatus, utc_now

REASONS_SHOWN = 3
"""Quarantine reasons a message lists (the review page has the rest)."""
TEXT_CHARS = 300
"""Characters of an untrusted value (an error, a correction signal) a message quotes."""
SWEEP_HOURS = 48
"""How far back :meth:`Notifier.sweep` looks for runs whose notifications are missing."""

_BY_STATUS = {
    RunStatus.FAILED: NotifyOn.FAILED,
    RunStatus.PARTIAL: NotifyOn.PARTIAL,
    RunStatus.MISSED: NotifyOn.MISSED,
    RunStatus.INTERRUPTED: NotifyOn.INTERRUPTED,
}


# --- what a run's notifications say (pure) ----------------------------------------------------


def events_of(detail: RunDetail, change: StreakChange | None) -> list[NotifyOn]:
    """The notification events stored run ``detail`` gives rise to."""
    found = [_BY_STATUS[detail.status]] if detail.status in _BY_STATUS else []
    if change is not None:
        found.append(
            NotifyOn.STREAK_BROKEN if change.kind == "broken" else NotifyOn.STREAK_RESTORED
        )
    return found


def notification_payload(
    detail: RunDetail,
    event: NotifyOn,
    *,
    change: StreakChange | None = None,
    review_url: str | None = None,
) -> dict[str, Any]:
    """The message of ``event`` about run ``detail``: its figures, the first quarantine
    reasons, a link to the run on the review page, and ``text``, the same in words."""
    link = None if review_url is None else f"{review_url}/runs/{detail.id}"
    pending = [q for q in detail.quarantined if q.review_status == "pending"]
    reasons = [
        {
            "item": None if q.source_index is None else q.source_index + 1,
            "reason": q.reason,
            "message": one_line(str(q.error.get("message") or ""), TEXT_CHARS),
        }
        for q in pending[:REASONS_SHOWN]
    ]
    payload: dict[str, Any] = {
        "event": str(event),
        "instruction": detail.instruction_id,
        "run_id": detail.id,
        "status": str(detail.status),
        "trigger": str(detail.trigger),
        "scheduled_for": _iso(detail.scheduled_for),
        "kept": detail.kept_count,
        "candidates": detail.candidates,
        "quarantined": detail.quarantined_count,
        "quarantine_reasons": reasons,
        "finish_reason": detail.finish_reason,
        "error": None if detail.error is None else one_line(detail.error, TEXT_CHARS),
        "streak": None
        if change is None
        else {
            "change": change.kind,
            "length": change.streak,
            "previous_run": change.previous_run_id,
        },
        "review_url": link,
    }
    payload["text"] = _text(detail, event, payload, change, pending)
    return payload


def _text(
    detail: RunDetail,
    event: NotifyOn,
    payload: Mapping[str, Any],
    change: StreakChange | None,
    pending: Sequence[Any],
) -> str:
    who = f"{detail.instruction_id}: run {detail.id[:8]}"
    fire = "" if detail.scheduled_for is None else f" (fire {_iso(detail.scheduled_for)})"
    figures = (
        f"kept {detail.kept_count} of {detail.candidates} items, "
        f"{detail.quarantined_count} quarantined"
    )
    if event is NotifyOn.STREAK_BROKEN and change is not None:
        head = (
            f"{detail.instruction_id}: clean streak of {change.streak} scheduled run(s) broken "
            f"by run {detail.id[:8]}{fire}, {detail.status}: {figures}"
        )
    elif event is NotifyOn.STREAK_RESTORED:
        head = f"{who}{fire} is clean again: {figures}"
    elif event is NotifyOn.MISSED:
        head = f"{detail.instruction_id}: the fire of {_iso(detail.scheduled_for)} was missed"
    elif event is NotifyOn.PARTIAL:
        head = f"{who}{fire} ended partial: {figures}"
    else:
        head = f"{who}{fire} {detail.status}"
    lines = [head]
    if payload["error"]:
        lines.append(f"error: {payload['error']}")
    for held in pending[:REASONS_SHOWN]:
        message = one_line(str(held.error.get("message") or ""), TEXT_CHARS)
        lines.append(f"- {place_in_output(held.source_index)}: {held.reason}: {message}")
    if len(pending) > REASONS_SHOWN:
        lines.append(f"- and {len(pending) - REASONS_SHOWN} more")
    if payload["review_url"]:
        lines.append(f"review: {payload['review_url']}")
    return "\n".join(lines)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- notifications as sinks of the outbox -----------------------------------------------------


class Notification:
    """One notification of a definition for one event, as a sink of the outbox: its
    delivery's kind is ``notify-<channel>`` and its target ``<event>: <where>``."""

    def __init__(self, event: NotifyOn, channel: Sink, *, review_url: str | None = None):
        self.event = event
        self._channel = channel
        self.review_url = review_url
        self.kind = f"{NOTIFICATION_KIND_PREFIX}{getattr(channel, 'kind', 'sink')}"

    @property
    def target(self) -> str:
        return f"{self.event}: {self._channel.target}"

    def deliver(self, payload: Mapping[str, Any]) -> None:
        self._channel.deliver(payload)

    def payload_from(self, store: Store, run_id: str) -> Mapping[str, Any]:
        """The message, built from the stored run (the outbox's redelivery asks)."""
        detail = store.get_run(run_id)
        change = None
        if self.event in (NotifyOn.STREAK_BROKEN, NotifyOn.STREAK_RESTORED):
            change = store.health.streak_change(detail.id, detail.instruction_id)
        return notification_payload(detail, self.event, change=change, review_url=self.review_url)


def notifications_of(
    instruction: Instruction, client: httpx.Client, *, review_url: str | None = None
) -> list[Notification]:
    """Every (event, target) notification of ``instruction``'s definition."""
    found: list[Notification] = []
    for spec in instruction.notify:
        channel = _channel(spec, client)
        found.extend(Notification(event, channel, review_url=review_url) for event in spec.on)
    return found


def _channel(spec: NotifySpec, client: httpx.Client) -> Sink:
    if spec.webhook is not None:
        hook = spec.webhook
        return WebhookSink(
            client,
            url=hook.url,
            url_env=hook.url_env,
            token_env=hook.token_env,
            # One try per pass: the outbox retries (the run's thread waits for no backoff).
            settings=replace(
                WEBHOOK_SETTINGS, timeout_seconds=hook.timeout_seconds, max_attempts=1
            ),
        )
    assert spec.email is not None  # the schema requires one of the two
    return EmailSink(spec.email)


NotificationsFor = Callable[[Instruction], Sequence[Notification]]


# --- the notifier -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Sent:
    """A notification this process wrote and tried: ``error`` None when it went out."""

    run_id: str
    event: NotifyOn
    target: str
    error: str | None


class Notifier:
    """Writes and sends the notifications of runs as their events arrive (see the
    module docstring). ``definitions`` gives today's definitions by id (a ``serve`` node's
    reload changes them); ``notifications_for`` builds an instruction's notifications."""

    WATCHED: tuple[type[Event], ...] = (RunFinished, FireMissed, RunInterrupted)

    def __init__(
        self,
        store: Store,
        *,
        definitions: Callable[[], Mapping[str, Instruction]],
        notifications_for: NotificationsFor,
        clock: Clock = utc_now,
        policy: DeliveryPolicy = DEFAULT_POLICY,
        events: EventStream | None = None,
    ) -> None:
        self._store = store
        self._definitions = definitions
        self._notifications_for = notifications_for
        self._clock = clock
        self._policy = policy
        self._events = events or logged_stream()

    def subscribe(self, events: EventStream) -> Subscription:
        """Notify on the events of ``events`` from now on."""
        return events.subscribe(self.observe, self.WATCHED)

    def observe(self, event: Event) -> None:
        """A run ended, a fire was missed or a run interrupted: notify for its run."""
        run_id = getattr(event, "run_id", None)
        if not isinstance(run_id, str):
            return
        instruction_id = getattr(event, "instruction_id", None)
        if isinstance(instruction_id, str) and not self._notifies(instruction_id):
            # Most runs notify nobody: reading the whole run for them cost every run a
            # second read of its report (benchmarks/run_overhead.py).
            return
        self.notify(run_id)

    def _notifies(self, instruction_id: str) -> bool:
        instruction = self._definitions().get(instruction_id)
        return instruction is not None and bool(instruction.notify)

    def notify(self, run_id: str) -> list[Sent]:
        """Write and send the notifications run ``run_id`` gives rise to that are not
        written yet; those written before are left to the outbox's redelivery."""
        detail = self._store.get_run(run_id)
        instruction = self._definitions().get(detail.instruction_id)
        if instruction is None or not instruction.notify or detail.status == RunStatus.RUNNING:
            return []
        change = None
        if detail.trigger in SCHEDULED_TRIGGERS:
            change = self._store.health.streak_change(detail.id, detail.instruction_id)
        wanted = set(events_of(detail, change))
        sent: list[Sent] = []
        for notification in self._notifications_for(instruction):
            if notification.event not in wanted:
                continue
            now = self._clock()
            claim = self._store.deliveries.ensure(
                detail.id,
                kind=notification.kind,
                target=notification.target,
                now=now,
                lease_until=self._policy.lease_until(now),
            )
            if claim is None:
                continue  # written before: sent, or the outbox retries it
            payload = notification_payload(
                detail, notification.event, change=change, review_url=notification.review_url
            )
            (outcome,) = deliver_claimed(
                self._store,
                [(claim, notification)],
                payload,
                clock=self._clock,
                policy=self._policy,
                events=self._events,
            )
            sent.append(
                Sent(
                    run_id=detail.id,
                    event=notification.event,
                    target=notification.target,
                    error=outcome.error,
                )
            )
        return sent

    def sweep(self, now: datetime, *, hours: float = SWEEP_HOURS) -> list[Sent]:
        """Write and send what the runs that ended in the last ``hours`` are missing
        (a process killed between a run's commit and its notification)."""
        since = now - timedelta(hours=hours)
        sent: list[Sent] = []
        for instruction_id, instruction in sorted(self._definitions().items()):
            if not instruction.notify:
                continue
            for run in self._store.list_runs(instruction_id=instruction_id, limit=200):
                if run.created_at < since:
                    break
                if run.status in _BY_STATUS or run.trigger in SCHEDULED_TRIGGERS:
                    try:
                        sent.extend(self.notify(run.id))
                    except (NotFoundError, SalvagelaneError):
                        continue  # the next sweep tries again
        return sent
