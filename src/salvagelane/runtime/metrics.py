"""Prometheus metrics of a ``serve`` (or worker) process: the one module that imports
prometheus_client (ADR 0014).

Two kinds, on one registry per process (:class:`Metrics`; never prometheus_client's global
one, so tests and several services in one process each have their own):

- **Event metrics**, counted as the process sees them happen: :class:`Metrics`
  subscribes to the process's run events (:mod:`salvagelane.events`: fires, fire lag,
  run and model-call durations, provider errors, retries, tokens, items kept and
  quarantined). They start at zero with the process, as counters do;
  ``rate()`` and ``increase()`` handle the restarts.
- **State metrics**, read from the database at every scrape (:class:`StateCollector`,
  through :attr:`Store.state <salvagelane.store.Store.state>`): runs by instruction and
  status, the quarantine pending review, open deliveries, queue depth, the newest clean
  scheduled run, how long the oldest queued run has waited, the workers consuming the task
  queue and whether it is stalled. They equal what the database holds, whichever process
  wrote it, and survive restarts. Beside them, the newest fire time of each instruction the
  process serves (from its schedule, not the database), so that an alert rule can compare
  the two for any instruction. When the database does not answer,
  ``salvagelane_state_up`` is 0 and the state gauges are left out of that scrape (a gauge
  of 0 would be a lie).

:func:`expose` serves a registry over HTTP (``/metrics``), on loopback unless told
otherwise: ``serve --metrics-port`` calls it, and a worker command calls it the same way.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from salvagelane.errors import ConfigurationError, MissingExtraError, StoreError

try:
    from prometheus_client import (
        GC_COLLECTOR,
        CollectorRegistry,
        Counter,
        Histogram,
        disable_created_metrics,
        start_http_server,
    )
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector
    from prometheus_client.registry import Collector
except ImportError as exc:
    # Imported by `serve` and `worker` only when --metrics-port is given.
    raise MissingExtraError(
        "--metrics-port needs the metrics packages (prometheus-client)", extra="metrics"
    ) from exc

from salvagelane.events import Event, EventStream, Subscription
from salvagelane.events.kinds import (
    BudgetExhausted,
    FireReceived,
    ModelCalled,
    ReaskSettled,
    RetryAsked,
    RunFinished,
    RunStarted,
)
from salvagelane.logs import get_logger
from salvagelane.runtime.scheduler import nearest_fire_times
from salvagelane.runtime.settings import DEFAULT_QUEUE_STALL_SECONDS
from salvagelane.vocabulary import Clock, utc_now

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from salvagelane.definitions.model import Schedule
    from salvagelane.store import StateReader, StoreState

__all__ = [
    "DEFAULT_HOST",
    "Metrics",
    "MetricsEndpoint",
    "StateCollector",
    "expose",
]

log = get_logger("salvagelane.metrics")

DEFAULT_HOST = "127.0.0.1"
"""Where the endpoint listens unless told otherwise: loopback, since the metrics name
instructions and the endpoint has no authentication."""

PREFIX = "salvagelane"

# Bucket bounds in seconds. Fire lag: a healthy node starts a fire within a second; a busy
# pool queues fires for minutes; a catch-up is hours late.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600, 14400, 86400)
# Runs and model calls: seconds for a short answer, up to the default 600 s deadline.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200)


class Metrics:
    """The metrics of one process: its registry, the event metrics (counted from the
    events it is subscribed to: :meth:`subscribe`) and, given a store's
    :class:`~salvagelane.store.StateReader`, the state metrics.

    ``process``: also register prometheus_client's process, platform and garbage
    collector metrics (``process_resident_memory_bytes``, ...); off in tests that make
    several registries in one process, where they would only repeat each other.
    ``queue_stall_seconds`` and ``clock``: when the task queue counts as stalled, and the
    clock queued runs' waits are measured with (``--queue-stall-after``).
    ``schedules``: the schedules of the instructions the process serves, by instruction id,
    asked at each scrape (a reload changes them); each one's newest fire at or before
    ``clock()`` is ``salvagelane_last_fire_timestamp_seconds``.
    """

    def __init__(
        self,
        *,
        state: StateReader | None = None,
        process: bool = True,
        queue_stall_seconds: float = DEFAULT_QUEUE_STALL_SECONDS,
        clock: Clock = utc_now,
        schedules: Callable[[], Mapping[str, Schedule]] | None = None,
    ) -> None:
        # No `_created` series beside each counter and histogram: they double the lines
        # of a scrape and say only when the process first counted. (A switch of the
        # library, for the process: this module is its only user.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self._fires = Counter(
            f"{PREFIX}_fires",
            "Fires that reached the service, by instruction and trigger (schedule, "
            "catch_up; a retry of an interrupted run has its fire's trigger).",
            ["instruction", "trigger"],
            registry=registry,
        )
        self._fire_lag = Histogram(
            f"{PREFIX}_fire_lag_seconds",
            "Run start minus its fire time, for scheduled and catch-up runs (not retries).",
            ["trigger"],
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self._run_duration = Histogram(
            f"{PREFIX}_run_duration_seconds",
            "Run duration from claim to the end of its deliveries, by instruction and "
            "final status.",
            ["instruction", "status"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._model_call = Histogram(
            f"{PREFIX}_model_call_duration_seconds",
            "Duration of one model call (the connector's own HTTP retries included), by "
            "instruction and outcome (ok, error).",
            ["instruction", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._provider_errors = Counter(
            f"{PREFIX}_provider_errors",
            "Model calls that ended without a completion, by instruction and HTTP status "
            "(no_response: none arrived; connector: the call was not made).",
            ["instruction", "status"],
            registry=registry,
        )
        self._retries = Counter(
            f"{PREFIX}_retries",
            "Run-level retries (another attempt asked of the model), by instruction and cause "
            "(quarantined: a follow-up for the rejected items only).",
            ["instruction", "cause"],
            registry=registry,
        )
        self._reasked = Counter(
            f"{PREFIX}_reasked_items",
            "Rejected items asked for again by a follow-up request, by instruction and what "
            "became of them (accepted: joined the report; still_quarantined: in review).",
            ["instruction", "outcome"],
            registry=registry,
        )
        self._tokens = Counter(
            f"{PREFIX}_tokens",
            "Tokens the providers reported, by instruction and type (input: prompt, "
            "output: completion).",
            ["instruction", "type"],
            registry=registry,
        )
        self._cost = Counter(
            f"{PREFIX}_cost",
            "What model calls cost by the definition's price table (budget.prices, or "
            "prices.json beside it), by instruction and currency; nothing without a table.",
            ["instruction", "currency"],
            registry=registry,
        )
        self._budget_stops = Counter(
            f"{PREFIX}_budget_exhausted",
            "Model calls not made because the instruction's daily budget was spent (the run "
            "ends failed with a 'budget: ' error, or keeps the attempts it made), by "
            "instruction and limit (tokens, cost).",
            ["instruction", "limit"],
            registry=registry,
        )
        self._kept = Counter(
            f"{PREFIX}_items_kept",
            "Items kept in the reports of finished runs, by instruction.",
            ["instruction"],
            registry=registry,
        )
        self._quarantined = Counter(
            f"{PREFIX}_items_quarantined",
            "Items of finished runs' chosen attempts held back in quarantine, by "
            "instruction and reason.",
            ["instruction", "reason"],
            registry=registry,
        )
        self._folded = Counter(
            f"{PREFIX}_items_folded",
            "Of the items quarantined, those past guardrails.max_quarantined: counted by "
            "instruction and reason, with no stored record to review.",
            ["instruction", "reason"],
            registry=registry,
        )
        if state is not None:
            registry.register(
                StateCollector(
                    state,
                    queue_stall_seconds=queue_stall_seconds,
                    clock=clock,
                    schedules=schedules,
                )
            )
        if process:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            if GC_COLLECTOR is not None:
                GCCollector(registry=registry)

    # --- the event metrics -----------------------------------------------------------------

    COUNTED: tuple[type[Event], ...] = (
        FireReceived,
        RunStarted,
        ModelCalled,
        RetryAsked,
        ReaskSettled,
        BudgetExhausted,
        RunFinished,
    )
    """The events the metrics count (a test holds every counted fact to be an event)."""

    def subscribe(self, events: EventStream) -> Subscription:
        """Count the events of ``events`` from now on."""
        return events.subscribe(self.observe, self.COUNTED)

    def observe(self, event: Event) -> None:
        """Count one event (the stream calls it in the run's thread: it must be quick)."""
        if isinstance(event, FireReceived):
            self._fires.labels(event.instruction_id, str(event.trigger)).inc()
        elif isinstance(event, RunStarted):
            lag = event.fire_lag_seconds
            if lag is not None:
                self._fire_lag.labels(str(event.trigger)).observe(lag)
        elif isinstance(event, ModelCalled):
            self._model_call.labels(event.instruction_id, event.outcome).observe(
                max(0.0, event.seconds)
            )
            if event.outcome == "error" and event.error_kind is not None:
                self._provider_errors.labels(event.instruction_id, event.error_kind).inc()
            elif event.outcome == "ok":
                # Both series exist after the first call, even at 0: rate() needs a start.
                self._tokens.labels(event.instruction_id, "input").inc(max(0, event.prompt_tokens))
                self._tokens.labels(event.instruction_id, "output").inc(
                    max(0, event.completion_tokens)
                )
                if event.cost is not None and event.currency is not None:
                    self._cost.labels(event.instruction_id, event.currency).inc(
                        max(0.0, event.cost)
                    )
        elif isinstance(event, RetryAsked):
            self._retries.labels(event.instruction_id, event.cause).inc()
        elif isinstance(event, ReaskSettled):
            self._reasked.labels(event.instruction_id, "accepted").inc(max(0, event.accepted))
            self._reasked.labels(event.instruction_id, "still_quarantined").inc(
                max(0, event.still_quarantined)
            )
        elif isinstance(event, BudgetExhausted):
            self._budget_stops.labels(event.instruction_id, event.limit_kind).inc()
        elif isinstance(event, RunFinished):
            instruction = event.instruction_id
            self._run_duration.labels(instruction, str(event.status)).observe(
                max(0.0, event.seconds)
            )
            self._kept.labels(instruction).inc(max(0, event.kept))
            for reason, count in event.by_reason.items():
                self._quarantined.labels(instruction, reason).inc(max(0, count))
            for reason, count in event.folded.items():
                self._folded.labels(instruction, reason).inc(max(0, count))


# --- the state, from the database ---------------------------------------------------------------


class StateCollector(Collector):
    """The state gauges, read from the database at every scrape (one
    :meth:`StateReader.read <salvagelane.store.StateReader.read>`: a few aggregate queries),
    and the newest fire of each of ``schedules()`` (see :class:`Metrics`)."""

    def __init__(
        self,
        state: StateReader,
        *,
        queue_stall_seconds: float = DEFAULT_QUEUE_STALL_SECONDS,
        clock: Clock = utc_now,
        schedules: Callable[[], Mapping[str, Schedule]] | None = None,
    ) -> None:
        self._state = state
        self._stall_seconds = queue_stall_seconds
        self._clock = clock
        self._schedules = schedules
        # Per instruction: its schedule, newest fire and the fire after it. A scrape between
        # the two reuses them instead of working the cron expression out again.
        self._fires: dict[str, tuple[Schedule, datetime | None, datetime | None]] = {}
        # One scrape at a time reads the database: two Prometheus servers scraping at once
        # do not double the load on it.
        self._reading = threading.Lock()

    def describe(self) -> list[Metric]:
        # What collect() yields, without reading the database at registration.
        return list(_families(None, up=False, seconds=0.0, now=None, stall_seconds=0.0, fires={}))

    def collect(self) -> Iterator[Metric]:
        with self._reading:
            began = time.monotonic()
            try:
                state: StoreState | None = self._state.read()
            except StoreError as exc:  # translated once, by the store
                log.warning("metrics.state_unreadable", error=str(exc))
                state = None
            seconds = time.monotonic() - began
            now = self._clock()
            fires = self._newest_fires(now)
        yield from _families(
            state,
            up=state is not None,
            seconds=seconds,
            now=now,
            stall_seconds=self._stall_seconds,
            fires=fires,
        )

    def _newest_fires(self, now: datetime) -> dict[str, datetime]:
        """Each served instruction's newest fire at or before ``now`` (none: left out)."""
        if self._schedules is None:
            return {}
        schedules = dict(self._schedules())
        found: dict[str, datetime] = {}
        for instruction, schedule in schedules.items():
            known = self._fires.get(instruction)
            if known is not None and known[0] == schedule and _between(now, known[1], known[2]):
                newest = known[1]
            else:
                try:
                    newest, following = nearest_fire_times(schedule, now)
                except (ConfigurationError, ValueError) as exc:
                    # A loaded definition's schedule has been checked; never fail a scrape.
                    log.warning(
                        "metrics.schedule_unreadable", instruction=instruction, error=str(exc)
                    )
                    continue
                self._fires[instruction] = (schedule, newest, following)
            if newest is not None:
                found[instruction] = newest
        for gone in self._fires.keys() - schedules.keys():
            del self._fires[gone]
        return found


def _between(now: datetime, newest: datetime | None, following: datetime | None) -> bool:
    # Whether ``now`` still has ``newest`` as its newest fire: not before it (a clock set
    # back) and before the next one.
    return (newest is None or newest <= now) and (following is None or now < following)


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=labels)


def _families(
    state: StoreState | None,
    *,
    up: bool,
    seconds: float,
    now: datetime | None,
    stall_seconds: float,
    fires: Mapping[str, datetime],
) -> Iterator[Metric]:
    """The state metrics of ``state`` (None: only whether the database answered, and
    how long it took to say so); queued runs' waits are measured up to ``now``; ``fires``
    are the served instructions' newest fires."""
    yield GaugeMetricFamily(
        f"{PREFIX}_state_up",
        "1 when the database answered the last scrape's state queries, else 0.",
        value=1.0 if up else 0.0,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_state_read_seconds",
        "How long the last scrape's state queries took.",
        value=seconds,
    )
    runs = _gauge(
        "runs", "Runs the database holds, by instruction and status.", ["instruction", "status"]
    )
    pending = _gauge(
        "quarantine_pending",
        "Quarantined items awaiting review, by instruction and reason.",
        ["instruction", "reason"],
    )
    deliveries = _gauge(
        "deliveries", "Deliveries not delivered yet, by status (pending, failed).", ["status"]
    )
    depth = _gauge(
        "queue_depth",
        "Runs waiting to execute: source runs counts runs with status queued, source "
        "procrastinate the todo jobs in procrastinate_jobs (when the table exists).",
        ["source"],
    )
    clean = _gauge(
        "last_clean_run_timestamp_seconds",
        "Fire time (Unix seconds) of the newest clean scheduled run per instruction: "
        "status ok, trigger schedule or catch_up, no item approved by an operator.",
        ["instruction"],
    )
    last_fire = _gauge(
        "last_fire_timestamp_seconds",
        "Newest fire time (Unix seconds) at or before now of each instruction this process "
        "serves, by its schedule (cron and timezone); compare with "
        "salvagelane_last_clean_run_timestamp_seconds.",
        ["instruction"],
    )
    oldest_wait = _gauge(
        "queue_oldest_wait_seconds",
        "How long the oldest queued run (waiting for a worker) has waited; 0 when none waits.",
        [],
    )
    workers = _gauge(
        "queue_workers",
        "procrastinate workers consuming the task queue (heartbeat within the last minute); "
        "absent when the database has no queue tables.",
        [],
    )
    stalled = _gauge(
        "queue_stalled",
        "1 when the oldest queued run has waited longer than the stall time "
        "(--queue-stall-after) and no worker consumes the task queue, else 0.",
        [],
    )
    if state is not None and now is not None:
        queue = state.queue
        oldest = queue.oldest
        oldest_wait.add_metric(
            [], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        )
        if queue.live_workers is not None:
            workers.add_metric([], queue.live_workers)
        stalled_now = queue.stalled(None, now=now, after_seconds=stall_seconds)
        stalled.add_metric([], 1.0 if stalled_now else 0.0)
        for (instruction, status), count in sorted(state.runs.items()):
            runs.add_metric([instruction, status], count)
        for (instruction, reason), count in sorted(state.quarantine_pending.items()):
            pending.add_metric([instruction, reason], count)
        for status, count in sorted(state.deliveries.items()):
            deliveries.add_metric([status], count)
        depth.add_metric(["runs"], state.queued_runs)
        if state.queue_jobs is not None:
            depth.add_metric(["procrastinate"], sum(state.queue_jobs.values()))
        for instruction, moment in sorted(state.last_clean.items()):
            clean.add_metric([instruction], moment.timestamp())
        # With the state only: a rule compares it with the newest clean run of the same
        # scrape, and an unreadable database (salvagelane_state_up 0, its own alert) must
        # not read as "no clean run since the fire" for every instruction.
        for instruction, moment in sorted(fires.items()):
            last_fire.add_metric([instruction], moment.timestamp())
    # Without a state the families are empty (HELP and TYPE, no sample): a gauge of 0
    # would claim what the database did not say.
    yield from (runs, pending, deliveries, depth, clean, last_fire, oldest_wait, workers, stalled)


# --- the endpoint ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MetricsEndpoint:
    """A running ``/metrics`` HTTP server; :meth:`close` stops it."""

    host: str
    port: int
    server: WSGIServer
    thread: threading.Thread

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the endpoint."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def expose(port: int, host: str = DEFAULT_HOST, *, registry: CollectorRegistry) -> MetricsEndpoint:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread (port 0:
    one the system picks; :attr:`MetricsEndpoint.port` says which).

    ConfigurationError when the address cannot be listened on (in use, not this host's).
    """
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"metrics: cannot listen on {host}:{port}: {exc.strerror or exc} "
            "(expected a free port on an address of this host)"
        ) from exc
    return MetricsEndpoint(host=host, port=int(server.server_port), server=server, thread=thread)
