"""The delivery outbox on SQLite and PostgreSQL: pending deliveries written with the
report, results, backoff, giving up, leases, and claims that concurrent processes take once.

Time is injected: every ``now`` is a fixed moment, never the wall clock.
"""

from __future__ import annotations

import copy
import json
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _outbox_sinks
import _sink_targets
import httpx
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.errors import ConfigurationError, NotFoundError, StoreError
from salvagelane.runtime.delivery import (
    DeliveryPolicy,
    deliver_claimed,
    deliver_report,
    pending_deliveries,
    redeliver_due,
    redeliver_open,
    sinks_from_definitions,
)
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.service import ServeSettings, Service
from salvagelane.sinks import (
    CallableSink,
    DeliveryOutcome,
    JsonFileSink,
    Sink,
    build_sinks,
    run_address,
)
from salvagelane.store import (
    ClaimedDelivery,
    DeliveryRun,
    PendingDelivery,
    ReportItemRecord,
    ReportRecord,
    Store,
    leader_lock_for,
    make_engine,
    upgrade,
)
from tests.support.cli import FIXTURE, ROOT

NOW = datetime(2026, 11, 21, 5, 20, tzinfo=UTC)
POLICY = DeliveryPolicy(
    lease_seconds=600, first_retry_seconds=60, max_retry_seconds=240, max_attempts=5
)
TAKE = "_outbox_sinks:take"
OTHER = "_sink_targets:record"


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as opened:
        yield opened


@pytest.fixture(autouse=True)
def consumer(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The payloads ``_outbox_sinks:take`` received in this test; it accepts them."""
    monkeypatch.setattr(_outbox_sinks, "failing", False)
    monkeypatch.setattr(_outbox_sinks, "received", [])
    return _outbox_sinks.received


def finished_run(
    store: Store,
    sinks: Sequence[Sink],
    *,
    now: datetime = NOW,
    instruction_id: str = "daily-triage",
    fill_in: bool = True,
) -> tuple[str, list[ClaimedDelivery]]:
    """A run finished at ``now`` with a one-item report and a pending delivery per sink;
    ``fill_in=False`` records target templates as they are, as versions before issue 13
    did."""
    run_id = store.start_run(
        instruction_id=instruction_id,
        definition_sha256="d" * 64,
        trigger="manual",
        scheduled_for=None,
        now=now,
    )
    attempt_id = store.add_attempt(
        run_id,
        number=1,
        started_at=now,
        request={"model": "m"},
        raw_output='{"items": [{"rank": 1}]}',
        finish_reason="stop",
        native_finish_reason="stop",
        usage=None,
        model="m",
        request_id=None,
        latency_seconds=0.1,
        http_status=200,
        provider_error=None,
        stream_error=None,
        finished_at=now,
    )
    claims = store.finish_run(
        run_id,
        status="ok",
        finished_at=now,
        error=None,
        report=_report(attempt_id),
        quarantined=[],
        deliveries=pending_deliveries(
            sinks,
            now=now,
            policy=POLICY,
            address=run_address(run_id, instruction_id) if fill_in else None,
        ),
    )
    return run_id, claims


def _report(attempt_id: str) -> ReportRecord:
    return ReportRecord(
        attempt_id=attempt_id,
        envelope={"summary": "one"},
        partial=False,
        status="ok",
        document_valid=True,
        truncated=False,
        finish_reason="stop",
        counts={"candidates": 1, "accepted": 1},
        items=[ReportItemRecord(source_index=0, data={"rank": 1}, span_start=10, span_end=21)],
    )


def sinks_of(*sinks: Sink) -> Any:
    return lambda run: sinks


# --- written with the report ------------------------------------------------------------------


def test_the_deliveries_are_written_pending_with_the_report(store: Store) -> None:
    run_id, claims = finished_run(store, [CallableSink(TAKE), CallableSink(OTHER)])

    detail = store.get_run(run_id)
    assert detail.status == "ok"
    assert detail.report is not None
    assert detail.sink_status == "pending"
    assert store.list_runs()[0].sink_status == "pending"
    lease_end = NOW + timedelta(seconds=600)
    assert [
        (d.kind, d.target, d.status, d.attempts, d.next_attempt_at, d.error)
        for d in detail.deliveries
    ] == [
        ("callable", TAKE, "pending", 1, lease_end, None),
        ("callable", OTHER, "pending", 1, lease_end, None),
    ]
    # Returned claimed by the writer: its first try is leased to it.
    assert [(c.id, c.attempts, c.target) for c in claims] == [
        (d.id, 1, d.target) for d in detail.deliveries
    ]
    assert claims[0].run == DeliveryRun(
        id=run_id, instruction_id="daily-triage", definition_sha256="d" * 64
    )
    assert [o.delivery.id for o in store.deliveries.list_open()] == [c.id for c in claims]


def test_a_finish_that_fails_writes_neither_the_report_nor_a_delivery(store: Store) -> None:
    run_id = store.start_run(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger="manual",
        scheduled_for=None,
        now=NOW,
    )
    attempt_id = store.add_attempt(
        run_id,
        number=1,
        started_at=NOW,
        request={},
        raw_output="[]",
        finish_reason="stop",
        native_finish_reason=None,
        usage=None,
        model=None,
        request_id=None,
        latency_seconds=None,
        http_status=None,
        provider_error=None,
        stream_error=None,
        finished_at=NOW,
    )
    # The delivery is written last; its naive lease end fails the insert, after the
    # report's rows were added in the same transaction.
    naive = PendingDelivery(kind="callable", target=TAKE, next_attempt_at=datetime(2026, 11, 21))
    with pytest.raises(StoreError, match="naive datetime"):
        store.finish_run(
            run_id,
            status="ok",
            finished_at=NOW,
            error=None,
            report=_report(attempt_id),
            quarantined=[],
            deliveries=[naive],
        )

    detail = store.get_run(run_id)
    assert (detail.status, detail.report, detail.deliveries, detail.sink_status) == (
        "running",
        None,
        [],
        None,
    )
    assert store.deliveries.list_open() == []


def test_a_run_without_a_report_has_no_delivery(store: Store) -> None:
    run_id = store.start_run(
        instruction_id="x",
        definition_sha256="d" * 64,
        trigger="manual",
        scheduled_for=None,
        now=NOW,
    )
    pending = PendingDelivery(kind="callable", target=TAKE, next_attempt_at=NOW)
    with pytest.raises(ValueError, match="nothing to deliver"):
        store.finish_run(
            run_id,
            status="failed",
            finished_at=NOW,
            error="nothing usable",
            report=None,
            quarantined=[],
            deliveries=[pending],
        )
    assert store.get_run(run_id).status == "running"


# --- results ----------------------------------------------------------------------------------


def test_results_update_the_delivery_and_the_runs_sink_status(store: Store) -> None:
    run_id, (first, second) = finished_run(store, [CallableSink(TAKE), CallableSink(OTHER)])
    later = NOW + timedelta(seconds=3)

    delivered = store.deliveries.record_result(first, error=None, now=later)
    assert delivered is not None
    assert (delivered.status, delivered.attempts, delivered.next_attempt_at) == (
        "delivered",
        1,
        None,
    )
    assert delivered.attempted_at == later
    # One sink still pending: the report has not reached every consumer yet.
    assert store.get_run(run_id).sink_status == "pending"

    retry_at = later + timedelta(minutes=1)
    failed = store.deliveries.record_result(
        second, error="HTTP 503 \x1b[2J", now=later, retry_at=retry_at
    )
    assert failed is not None
    assert (failed.status, failed.error, failed.next_attempt_at) == (
        "failed",
        "HTTP 503 \x1b[2J",
        retry_at,
    )
    assert store.get_run(run_id).sink_status == "failed"
    assert [o.delivery.id for o in store.deliveries.list_open()] == [second.id]

    # A later successful try clears the failure.
    again = store.deliveries.claim(
        second.id, attempts=1, now=retry_at, lease_until=retry_at + timedelta(minutes=10)
    )
    assert again is not None
    assert again.attempts == 2
    assert store.deliveries.record_result(again, error=None, now=retry_at) is not None
    assert store.get_run(run_id).sink_status == "delivered"
    assert store.deliveries.list_open() == []


class _BrokenSink:
    """A sink with a bug: it raises something other than SinkError."""

    kind = "broken"

    @property
    def target(self) -> str:
        return "broken://sink"

    def deliver(self, payload: Mapping[str, Any]) -> None:
        raise KeyError("items")


def test_every_sink_is_tried_whatever_fails_before_it_and_each_result_recorded(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sink_targets, "received", [])
    sinks: list[Sink] = [
        CallableSink("_sink_targets:refuse"),
        _BrokenSink(),
        JsonFileSink(tmp_path / "{run_id}.json"),
        CallableSink(OTHER),
    ]
    run_id, claims = finished_run(store, sinks)
    payload = store.get_report_payload(run_id)
    sent = copy.deepcopy(payload)

    outcomes = deliver_claimed(
        store, zip(claims, sinks, strict=True), payload, clock=lambda: NOW, policy=POLICY
    )

    assert outcomes == (
        DeliveryOutcome(
            target="_sink_targets:refuse",
            kind="callable",
            ok=False,
            error="callable sink _sink_targets:refuse: the function raised "
            f"RuntimeError: downstream refused run {run_id}",
        ),
        DeliveryOutcome(target="broken://sink", kind="broken", ok=False, error="KeyError: 'items'"),
        # Where the report went, not the template.
        DeliveryOutcome(target=str(tmp_path / f"{run_id}.json"), kind="json_file", ok=True),
        DeliveryOutcome(target=OTHER, kind="callable", ok=True),
    )
    assert json.loads((tmp_path / f"{run_id}.json").read_text("utf-8")) == sent
    assert _sink_targets.received == [sent]
    assert payload == sent  # no sink changed what the next one gets
    assert [(d.target, d.status, d.error) for d in store.get_run(run_id).deliveries] == [
        (o.target, "delivered" if o.ok else "failed", o.error) for o in outcomes
    ]
    assert store.get_run(run_id).sink_status == "failed"


def test_only_a_crashing_sink_is_logged_with_its_traceback(store: Store) -> None:
    sinks: list[Sink] = [_BrokenSink(), CallableSink("_sink_targets:refuse"), CallableSink(OTHER)]
    run_id, claims = finished_run(store, sinks)

    with capture_logs() as entries:
        deliver_claimed(
            store,
            zip(claims, sinks, strict=True),
            store.get_report_payload(run_id),
            clock=lambda: NOW,
            policy=POLICY,
        )

    # A bug is logged where it is caught, with its traceback; every result, expected
    # failures included, is logged as it is recorded, without one.
    assert entries[0] == {
        "event": "sink.crashed",
        "log_level": "error",
        "exc_info": True,
        "target": "broken://sink",
        "kind": "broken",
    }
    assert [(e["event"], e["target"], "exc_info" in e) for e in entries[1:]] == [
        ("sink.failed", "broken://sink", False),
        ("sink.failed", "_sink_targets:refuse", False),
        ("sink.delivered", OTHER, False),
    ]


def test_the_executor_records_each_sinks_result_on_its_pending_delivery(
    store: Store, tmp_path: Path
) -> None:
    instruction = _with_sinks(tmp_path, [TAKE, "_sink_targets:refuse"])
    moments = iter(NOW + timedelta(seconds=s) for s in range(1000))
    with httpx.Client() as client:
        executor = Executor(
            store,
            connector_for=lambda _: ReplayConnector(FIXTURE),
            sinks_for=lambda spec: build_sinks(spec.sinks, client=client),
            clock=lambda: next(moments),
            delivery_policy=POLICY,
        )
        outcome = executor.run(instruction)

    assert [(d.target, d.ok) for d in outcome.deliveries] == [
        (TAKE, True),
        ("_sink_targets:refuse", False),
    ]
    detail = store.get_run(outcome.run_id)
    took, refused = detail.deliveries
    assert (took.status, took.attempts, took.next_attempt_at) == ("delivered", 1, None)
    assert (refused.status, refused.attempts) == ("failed", 1)
    assert refused.error is not None
    assert f"downstream refused run {outcome.run_id}" in refused.error
    assert refused.next_attempt_at == refused.attempted_at + timedelta(seconds=60)
    assert detail.sink_status == "failed"
    assert _outbox_sinks.received == [store.get_report_payload(outcome.run_id)]


def test_a_sink_that_cannot_be_built_fails_the_run_before_the_model_is_called(
    store: Store, tmp_path: Path
) -> None:
    instruction = _with_sinks(tmp_path, [TAKE])
    called: list[Instruction] = []

    def connector_for(spec: Instruction) -> ReplayConnector:
        called.append(spec)
        return ReplayConnector(FIXTURE)

    def broken_sinks(spec: Instruction) -> list[Sink]:
        raise ConfigurationError("sinks[0] (webhook): expected a url, got none")

    outcome = Executor(store, connector_for=connector_for, sinks_for=broken_sinks).run(instruction)

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "sinks: sinks[0] (webhook): expected a url, got none" in outcome.error
    assert called == []  # nothing paid for
    assert store.get_run(outcome.run_id).attempts == []


def _with_sinks(tmp_path: Path, callables: Sequence[str]) -> Instruction:
    """The daily-triage definition, copied under ``tmp_path``, with callable sinks."""
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    path = tmp_path / "instructions" / "daily-triage.yaml"
    sinks = "".join(f"  - kind: callable\n    callable: {name}\n" for name in callables)
    text = path.read_text(encoding="utf-8").replace("\nretry:\n", f"\nsinks:\n{sinks}retry:\n")
    path.write_text(text, encoding="utf-8")
    return load_instruction(path)


# --- retries ----------------------------------------------------------------------------------


def test_failed_deliveries_back_off_exponentially_to_a_cap_then_are_given_up(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = CallableSink(TAKE)
    run_id, [claim] = finished_run(store, [sink])
    monkeypatch.setattr(_outbox_sinks, "failing", True)
    store.deliveries.record_result(
        claim, error="down", now=NOW, retry_at=POLICY.retry_at(claim.attempts, NOW)
    )

    delays: list[float | None] = []
    now = NOW
    while True:
        (view,) = store.get_run(run_id).deliveries
        if view.next_attempt_at is None:
            break
        delays.append((view.next_attempt_at - view.attempted_at).total_seconds())
        # Not due a second early; due at the time.
        early = view.next_attempt_at - timedelta(seconds=1)
        assert redeliver_due(store, sinks_for_run=sinks_of(sink), now=early, policy=POLICY) == []
        now = view.next_attempt_at
        [result] = redeliver_due(store, sinks_for_run=sinks_of(sink), now=now, policy=POLICY)
        assert (result.status, result.attempted_at) == ("failed", now)

    assert delays == [60, 120, 240, 240]  # doubled, capped at max_retry_seconds
    (view,) = store.get_run(run_id).deliveries
    assert (view.status, view.attempts, view.next_attempt_at) == ("failed", 5, None)
    assert "the consumer is down" in (view.error or "")
    assert store.get_run(run_id).sink_status == "failed"
    # Given up: never due again, but still listed as undelivered for the operator.
    far = now + timedelta(days=30)
    assert redeliver_due(store, sinks_for_run=sinks_of(sink), now=far, policy=POLICY) == []
    assert [o.delivery.id for o in store.deliveries.list_open()] == [view.id]
    assert _outbox_sinks.received == []


def test_a_pending_delivery_whose_process_died_is_taken_over_when_its_lease_ends(
    store: Store, consumer: list[dict[str, Any]]
) -> None:
    sink = CallableSink(TAKE)
    run_id, _ = finished_run(store, [sink])  # the claim is dropped: its process "died"
    lease_end = NOW + timedelta(seconds=600)

    before = lease_end - timedelta(seconds=1)
    assert redeliver_due(store, sinks_for_run=sinks_of(sink), now=before, policy=POLICY) == []
    assert store.get_run(run_id).sink_status == "pending"

    [result] = redeliver_due(store, sinks_for_run=sinks_of(sink), now=lease_end, policy=POLICY)

    assert (result.status, result.attempts, result.next_attempt_at) == ("delivered", 2, None)
    assert consumer == [store.get_report_payload(run_id)]
    assert store.get_run(run_id).sink_status == "delivered"


def test_a_last_try_that_never_finished_is_given_up_saying_so(store: Store) -> None:
    sink = CallableSink(TAKE)
    run_id, [claim] = finished_run(store, [sink])
    now = NOW
    for attempts in range(1, POLICY.max_attempts):  # every try cut off by a dying process
        now = now + timedelta(seconds=POLICY.lease_seconds)
        taken = store.deliveries.claim(
            claim.id, attempts=attempts, now=now, lease_until=POLICY.lease_until(now)
        )
        assert taken is not None
    after = now + timedelta(seconds=POLICY.lease_seconds)

    [given_up] = redeliver_due(store, sinks_for_run=sinks_of(sink), now=after, policy=POLICY)

    assert (given_up.status, given_up.attempts, given_up.next_attempt_at) == ("failed", 5, None)
    assert given_up.error == (
        "try 5 never finished (the process delivering it stopped); given up after 5 tries"
    )
    assert store.get_run(run_id).sink_status == "failed"
    assert _outbox_sinks.received == []


def test_a_run_whose_sink_is_gone_records_a_failed_try(store: Store) -> None:
    gone_run, _ = finished_run(store, [CallableSink(TAKE)], instruction_id="gone")
    moved_run, _ = finished_run(store, [CallableSink(TAKE)], instruction_id="moved")
    definitions: dict[str, Any] = {}

    def sinks_for_run(run: DeliveryRun) -> Sequence[Sink]:
        if run.instruction_id == "gone":
            raise NotFoundError("no instruction 'gone' in instructions/")
        return [CallableSink(OTHER)]

    due = NOW + timedelta(seconds=600)
    results = redeliver_due(store, sinks_for_run=sinks_for_run, now=due, policy=POLICY)

    assert {r.run_id: (r.status, r.attempts, r.error) for r in results} == {
        gone_run: (
            "failed",
            2,
            "the sinks of instruction 'gone': no instruction 'gone' in instructions/",
        ),
        moved_run: (
            "failed",
            2,
            f"the definition of instruction 'moved' has no callable sink {TAKE!r} any more",
        ),
    }
    assert all(r.next_attempt_at == due + timedelta(seconds=120) for r in results)
    # What the serve loop passes: today's definitions, by instruction id.
    lookup = sinks_from_definitions(definitions, lambda spec: ())
    with pytest.raises(NotFoundError, match="'gone' of run r1 is no longer defined"):
        lookup(DeliveryRun(id="r1", instruction_id="gone", definition_sha256="d"))


def test_redelivery_by_hand_takes_every_undelivered_one_but_skips_an_unknown_sink(
    store: Store, consumer: list[dict[str, Any]]
) -> None:
    sink = CallableSink(TAKE)
    _, [done] = finished_run(store, [sink])
    store.deliveries.record_result(done, error=None, now=NOW)
    given_up_run, [cut] = finished_run(store, [sink])
    store.deliveries.record_result(cut, error="HTTP 500", now=NOW, retry_at=None)
    pending_run, _ = finished_run(store, [sink])
    unknown_run, _ = finished_run(store, [CallableSink(OTHER)])

    results = list(redeliver_open(store, sinks_for_run=sinks_of(sink), policy=POLICY))

    by_run = {r.delivery.run_id: r for r in results}
    assert set(by_run) == {given_up_run, pending_run, unknown_run}  # not the delivered one
    assert by_run[given_up_run].ok
    assert by_run[given_up_run].delivery.attempts == 2
    assert by_run[pending_run].ok  # not due yet (its lease runs): by hand it goes anyway
    skipped = by_run[unknown_run]
    assert not skipped.ok
    assert skipped.skipped is not None
    assert "no callable sink" in skipped.skipped
    # Skipped: nothing sent, nothing written.
    (unknown,) = store.get_run(unknown_run).deliveries
    assert (unknown.status, unknown.attempts, unknown.error) == ("pending", 1, None)
    assert sorted(p["run_id"] for p in consumer) == sorted([given_up_run, pending_run])


# --- targets ----------------------------------------------------------------------------------


def test_a_file_delivery_is_recorded_logged_and_retried_under_the_file_it_writes(
    store: Store, tmp_path: Path
) -> None:
    """Issue 13: deliveries were recorded and logged as the unexpanded template
    (``{instruction}-{run_id}.json``), not the file the report went to."""
    blocker = tmp_path / "out"
    blocker.write_text("a file where the sink wants a directory", encoding="utf-8")
    sink = JsonFileSink(blocker / "{instruction}-{run_id}.json")
    run_id, [claim] = finished_run(store, [sink])
    written = blocker / f"daily-triage-{run_id}.json"
    assert claim.target == str(written)

    with capture_logs() as logs:
        [failed] = redeliver_due(
            store, sinks_for_run=sinks_of(sink), now=NOW + timedelta(seconds=600), policy=POLICY
        )
        blocker.unlink()
        [delivered] = redeliver_due(
            store, sinks_for_run=sinks_of(sink), now=NOW + timedelta(days=1), policy=POLICY
        )

    assert (failed.status, failed.target) == ("failed", str(written))
    assert (delivered.status, delivered.target) == ("delivered", str(written))
    assert written.is_file()
    assert [(e["event"], e["target"]) for e in logs if e["event"].startswith("sink.")] == [
        ("sink.failed", str(written)),
        ("sink.delivered", str(written)),
    ]
    assert [d.target for d in store.get_run(run_id).deliveries] == [str(written)]
    # By hand, to the same file: a new delivery under the same name.
    [again] = deliver_report(store, run_id, [sink])
    assert (again.target, again.ok) == (str(written), True)
    assert [d.target for d in store.get_run(run_id).deliveries] == [str(written)] * 2


def test_a_delivery_recorded_under_its_template_is_still_found(
    store: Store, tmp_path: Path
) -> None:
    template = tmp_path / "{instruction}-{run_id}.json"
    sink = JsonFileSink(template)
    first, _ = finished_run(store, [sink], fill_in=False)
    assert [d.target for d in store.get_run(first).deliveries] == [str(template)]

    [result] = list(redeliver_open(store, sinks_for_run=sinks_of(sink), policy=POLICY))
    assert (result.delivery.run_id, result.ok) == (first, True)
    assert (tmp_path / f"daily-triage-{first}.json").is_file()
    second, _ = finished_run(store, [sink], fill_in=False)
    # The undelivered one is claimed in place, not doubled by a new delivery.
    [outcome] = deliver_report(store, second, [sink])
    assert outcome.target == str(tmp_path / f"daily-triage-{second}.json")
    [delivery] = store.get_run(second).deliveries
    assert (delivery.status, delivery.attempts) == ("delivered", 2)


# --- claims -----------------------------------------------------------------------------------


def test_an_overtaken_try_cannot_overwrite_the_newer_ones_result(store: Store) -> None:
    run_id, [slow] = finished_run(store, [CallableSink(TAKE)])
    lease_end = NOW + timedelta(seconds=600)
    [newer] = store.deliveries.claim_due(
        now=lease_end, lease_until=lease_end + timedelta(seconds=600), limit=10, max_attempts=5
    )
    assert newer.attempts == 2

    assert store.deliveries.record_result(newer, error=None, now=lease_end) is not None
    # The first process comes back from its hung sink with a failure: it is ignored.
    assert store.deliveries.record_result(slow, error="timed out", now=lease_end) is None

    (view,) = store.get_run(run_id).deliveries
    assert (view.status, view.attempts, view.error) == ("delivered", 2, None)
    assert store.get_run(run_id).sink_status == "delivered"


def test_concurrent_claims_of_one_delivery_take_it_once(database_url: str) -> None:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        _, [claim] = finished_run(store, [CallableSink(TAKE)])
    contenders = 6
    start = threading.Barrier(contenders)
    taken: list[ClaimedDelivery | None] = []

    def contend() -> None:
        with Store.open(database_url, auto_upgrade=False) as own:
            start.wait()
            taken.append(own.deliveries.claim(claim.id, attempts=1, now=NOW, lease_until=NOW))

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(taken) == contenders
    assert [c.attempts for c in taken if c is not None] == [2]
    with Store.open(database_url, auto_upgrade=False) as store:
        assert store.deliveries.get(claim.id).attempts == 2


def test_two_nodes_redelivering_at_once_send_each_delivery_once(
    database_url: str, consumer: list[dict[str, Any]]
) -> None:
    upgrade(database_url)
    sink = CallableSink(TAKE)
    with Store.open(database_url, auto_upgrade=False) as store:
        runs = [finished_run(store, [sink])[0] for _ in range(12)]
    due = NOW + timedelta(seconds=600)
    start = threading.Barrier(2)
    results: list[list[Any]] = []

    def node() -> None:
        with Store.open(database_url, auto_upgrade=False) as own:
            start.wait()
            # Small batches, so the two nodes' claims interleave.
            for _ in range(12):
                results.append(
                    redeliver_due(
                        own, sinks_for_run=sinks_of(sink), now=due, limit=2, policy=POLICY
                    )
                )

    threads = [threading.Thread(target=node) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(p["run_id"] for p in consumer) == sorted(runs)
    assert sorted(r.run_id for batch in results for r in batch) == sorted(runs)
    with Store.open(database_url, auto_upgrade=False) as store:
        for run_id in runs:
            (view,) = store.get_run(run_id).deliveries
            # One claim after the dead writer's: a second one would have counted.
            assert (view.status, view.attempts) == ("delivered", 2)


def test_a_claim_skips_a_delivery_another_transaction_holds(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no row locks: BEGIN IMMEDIATE serialises whole transactions")
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as store:
        _, [held] = finished_run(store, [CallableSink(TAKE)])
        _, [free] = finished_run(store, [CallableSink(TAKE)])
        due = NOW + timedelta(seconds=600)
        other = make_engine(database_url)
        try:
            with other.begin() as connection:
                connection.execute(
                    sa.text("SELECT id FROM sink_deliveries WHERE id = :id FOR UPDATE"),
                    {"id": held.id},
                )
                claimed = store.deliveries.claim_due(
                    now=due, lease_until=due + timedelta(seconds=600), limit=10, max_attempts=5
                )
                assert [c.id for c in claimed] == [free.id]  # not waiting for the lock
        finally:
            other.dispose()
        [after] = store.deliveries.claim_due(now=due, lease_until=due, limit=10, max_attempts=5)
        assert after.id == held.id


def test_the_policy_refuses_unusable_settings() -> None:
    with pytest.raises(ConfigurationError, match="positive lease"):
        DeliveryPolicy(lease_seconds=0)
    with pytest.raises(ConfigurationError, match="max_attempts of 1 or more"):
        DeliveryPolicy(max_attempts=0)
    # Far past the cap (a delivery retried by hand many times) the delay stays the cap.
    assert DeliveryPolicy(max_attempts=10_000).retry_at(5000, NOW) == NOW + timedelta(hours=1)


def test_the_serve_leader_takes_over_a_delivery_whose_process_died(
    store: Store, tmp_path: Path, consumer: list[dict[str, Any]]
) -> None:
    _with_sinks(tmp_path, [TAKE])
    run_id, _ = finished_run(store, [CallableSink(TAKE)])  # its process "died"
    clock = [NOW + timedelta(seconds=599)]
    client = httpx.Client()
    service = Service(
        ServeSettings(instructions_dir=tmp_path / "instructions"),
        store=store,
        lock=leader_lock_for(store.url),
        connector_for=lambda spec: ReplayConnector(FIXTURE),
        sinks_for=lambda spec: build_sinks(spec.sinks, client=client),
        clock=lambda: clock[0],
    )
    service.load()

    service.redeliver()  # within the 600 s lease: the dead process may still be sending
    assert consumer == []
    clock[0] = NOW + timedelta(seconds=600)
    service.redeliver()

    client.close()
    assert consumer == [store.get_report_payload(run_id)]
    assert store.get_run(run_id).sink_status == "delivered"
