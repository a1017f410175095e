"""The store on SQLite and PostgreSQL: round trips, atomicity, NUL, ids, schema checks."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.errors import NotFoundError, StoreError
from salvagelane.store import (
    ClaimedDelivery,
    DeliveryRun,
    PendingDelivery,
    QuarantineRecord,
    ReportItemRecord,
    ReportRecord,
    Store,
    current_revision,
    head_revision,
    make_engine,
    repository,
    upgrade,
)
from salvagelane.store import (
    database_url as normalise_url,
)
from salvagelane.vocabulary import Trigger as VocabularyTrigger

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=2)
RAW = '{"items": [{"title": "a"}, {"title": "b"}, {"tit'
ATTEMPT: dict[str, Any] = {
    "request": {"model": "m-1", "prompt_sha256": "p" * 64, "prompt": "Rank.", "temperature": 0.2},
    "finish_reason": "length",
    "native_finish_reason": "max_tokens",
    "usage": {"input_tokens": 10, "output_tokens": 256},
    "model": "m-1",
    "request_id": "req-1",
    "latency_seconds": 1.25,
    "http_status": 200,
    "provider_error": None,
    "stream_error": None,
}


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url, auto_upgrade=False) as opened:
        yield opened


def start(store: Store, *, instruction_id: str = "daily-triage", now: datetime = NOW) -> str:
    return store.start_run(
        instruction_id=instruction_id,
        definition_sha256="d" * 64,
        trigger="schedule",
        scheduled_for=now - timedelta(seconds=5),
        now=now,
    )


def attempt(
    store: Store, run_id: str, *, number: int = 1, raw: str | None = RAW, **changes: Any
) -> str:
    values = {**ATTEMPT, **changes}
    return store.add_attempt(
        run_id, number=number, started_at=NOW, raw_output=raw, finished_at=LATER, **values
    )


def report_of(attempt_id: str, *items: ReportItemRecord, envelope: Any = None) -> ReportRecord:
    return ReportRecord(
        attempt_id=attempt_id,
        envelope={"summary": "two kept"} if envelope is None else envelope,
        partial=True,
        status="partial",
        document_valid=False,
        truncated=True,
        finish_reason="length",
        counts={"candidates": 3, "accepted": len(items), "quarantined": 1},
        items=items,
    )


def item(data: Any, index: int = 0) -> ReportItemRecord:
    return ReportItemRecord(
        source_index=index, data=data, span_start=10 * index, span_end=10 * index + 9
    )


def finish(
    store: Store,
    run_id: str,
    *,
    status: str = "partial",
    error: str | None = None,
    report: ReportRecord | None = None,
    quarantined: Sequence[QuarantineRecord] = (),
    deliveries: Sequence[PendingDelivery] = (),
) -> list[ClaimedDelivery]:
    """``finish_run`` at LATER; unless told, partial, without error, report, quarantine or
    delivery. Returns the deliveries, claimed."""
    return store.finish_run(
        run_id,
        status=status,
        finished_at=LATER,
        error=error,
        report=report,
        quarantined=quarantined,
        deliveries=deliveries,
    )


def delivery_to(target: str, kind: str = "webhook") -> PendingDelivery:
    """A delivery to ``target``, leased until LATER."""
    return PendingDelivery(kind=kind, target=target, next_attempt_at=LATER)


def quarantine(attempt_id: str, **changes: Any) -> QuarantineRecord:
    values: dict[str, Any] = {
        "attempt_id": attempt_id,
        "instruction_id": "daily-triage",
        "source_index": 2,
        "reason": "truncated",
        "error": {"path": "$[2]", "expected": "}", "received": "end of input", "message": "cut"},
        "span_start": 40,
        "span_end": 47,
        "snippet": '{"tit',
        "sha256": "s" * 64,
        "repaired": {"tit": None},
        "provenance": {"instruction": "daily-triage", "model": "m-1", "finish_reason": "length"},
        "review_status": "pending",
        **changes,
    }
    return QuarantineRecord(**values)


# --- round trips -------------------------------------------------------------------------------


def test_a_run_round_trips_through_every_write(store: Store) -> None:
    run_id = start(store)
    first = attempt(store, run_id, number=1, raw="not json", finish_reason="stop")
    second = attempt(store, run_id, number=2)
    store.set_attempt_outcome(second, {"status": "partial", "accepted": 2})
    store.heartbeat(run_id, NOW + timedelta(minutes=1))
    kept = (
        item({"title": "a", "rank": 1}, 0),
        ReportItemRecord(
            source_index=None,
            data={"title": "b"},
            span_start=None,
            span_end=None,
            coercions=[{"path": "$.rank", "from": "2", "to": 2}],
            origin="operator",
        ),
    )
    (claim,) = finish(
        store,
        run_id,
        report=report_of(second, *kept),
        quarantined=[quarantine(second), quarantine(first, review_status="superseded")],
        deliveries=[delivery_to("file:out.json", kind="file")],
    )
    store.deliveries.record_result(claim, error=None, now=LATER)

    detail = store.get_run(run_id)

    assert (detail.id, detail.instruction_id, detail.trigger, detail.status) == (
        run_id,
        "daily-triage",
        "schedule",
        "partial",
    )
    assert detail.definition_sha256 == "d" * 64
    assert detail.scheduled_for == NOW - timedelta(seconds=5)
    assert (detail.created_at, detail.started_at, detail.finished_at) == (NOW, NOW, LATER)
    assert detail.heartbeat_at == LATER
    assert detail.error is None
    assert detail.best_attempt_id == second
    assert (detail.kept_count, detail.quarantined_count) == (2, 1)
    assert detail.finish_reason == "length"
    assert detail.sink_status == "delivered"

    assert [a.id for a in detail.attempts] == [first, second]
    stored = detail.attempts[1]
    assert stored.raw_output == RAW
    assert stored.request == ATTEMPT["request"]
    assert stored.usage == ATTEMPT["usage"]
    assert stored.outcome == {"status": "partial", "accepted": 2}
    assert (stored.finish_reason, stored.native_finish_reason) == ("length", "max_tokens")
    assert (stored.model, stored.request_id, stored.http_status) == ("m-1", "req-1", 200)
    assert stored.latency_seconds == 1.25
    assert (stored.started_at, stored.finished_at) == (NOW, LATER)
    assert detail.attempts[0].raw_output == "not json"
    assert detail.attempts[0].outcome is None

    assert detail.report is not None
    assert detail.report.attempt_id == second
    assert detail.report.envelope == {"summary": "two kept"}
    assert (detail.report.partial, detail.report.document_valid, detail.report.truncated) == (
        True,
        False,
        True,
    )
    # The counts every view shows: what was stored, with the figures of the run's rows
    # (an operator's item among the kept, the pending reject by reason).
    assert detail.report.counts == {
        "candidates": 3,
        "accepted": 2,
        "quarantined": 1,
        "by_reason": {"truncated": 1},
        "operator_approved": 1,
    }
    assert (detail.partial, detail.candidates, detail.operator_approved) == (True, 3, 1)
    assert detail.quarantined_by_reason == {"truncated": 1}
    assert detail.output_cut == ("truncated",)
    assert detail.native_finish_reason == "max_tokens"
    assert [(i.position, i.source_index, i.data, i.origin) for i in detail.report.items] == [
        (0, 0, {"title": "a", "rank": 1}, "model"),
        (1, None, {"title": "b"}, "operator"),
    ]
    assert detail.report.items[0].coercions is None
    assert detail.report.items[1].coercions == [{"path": "$.rank", "from": "2", "to": 2}]
    assert (detail.report.items[0].span_start, detail.report.items[0].span_end) == (0, 9)

    pending, superseded = detail.quarantined
    expected = quarantine(second)
    assert (pending.attempt_id, pending.attempt_number, pending.review_status) == (
        second,
        2,
        "pending",
    )
    assert (superseded.attempt_id, superseded.attempt_number, superseded.review_status) == (
        first,
        1,
        "superseded",
    )
    assert pending.run_id == run_id
    assert pending.error == expected.error
    assert pending.provenance == expected.provenance
    assert pending.repaired == {"tit": None}
    assert (pending.source_index, pending.span_start, pending.span_end) == (2, 40, 47)
    assert (pending.reason, pending.snippet, pending.sha256) == ("truncated", '{"tit', "s" * 64)
    assert pending.created_at == LATER

    (delivery,) = detail.deliveries
    assert (delivery.target, delivery.kind, delivery.status, delivery.error) == (
        "file:out.json",
        "file",
        "delivered",
        None,
    )
    assert (delivery.attempted_at, delivery.attempts, delivery.next_attempt_at) == (LATER, 1, None)

    assert store.get_report_payload(run_id) == {
        "run_id": run_id,
        "instruction": "daily-triage",
        "status": "partial",
        "partial": True,
        "finish_reason": "length",
        "counts": {
            "candidates": 3,
            "accepted": 2,
            "quarantined": 1,
            "by_reason": {"truncated": 1},
            "operator_approved": 1,
        },
        "envelope": {"summary": "two kept"},
        "items": [{"title": "a", "rank": 1}, {"title": "b"}],
        "item_origins": ["model", "operator"],
    }


def test_timestamps_come_back_as_the_same_instant_in_utc(store: Store) -> None:
    tokyo = datetime(2025, 3, 1, 18, 0, tzinfo=timezone(timedelta(hours=9)))
    run_id = start(store, now=tokyo)

    created = store.get_run(run_id).created_at

    assert created == tokyo
    assert created.tzinfo == UTC
    assert created.hour == 9


def test_a_naive_timestamp_is_refused_naming_database_and_operation(store: Store) -> None:
    with pytest.raises(StoreError, match="naive datetime") as caught:
        start(store, now=datetime(2025, 3, 1, 9, 0))
    assert store.url in str(caught.value)
    assert "start a run of daily-triage" in str(caught.value)
    assert store.list_runs() == []


def test_list_runs_is_newest_first_filtered_and_limited(store: Store) -> None:
    old = start(store, instruction_id="a", now=NOW)
    new = start(store, instruction_id="b", now=NOW + timedelta(hours=1))
    newest = start(store, instruction_id="a", now=NOW + timedelta(hours=2))

    assert [run.id for run in store.list_runs()] == [newest, new, old]
    assert [run.id for run in store.list_runs(instruction_id="a")] == [newest, old]
    assert [run.id for run in store.list_runs(limit=1)] == [newest]
    summary = store.list_runs(instruction_id="b")[0]
    assert (summary.status, summary.kept_count, summary.quarantined_count) == ("running", 0, 0)
    assert (summary.finished_at, summary.finish_reason, summary.sink_status) == (None, None, None)


def test_fail_run_ends_a_run_without_report(store: Store) -> None:
    run_id = start(store)
    attempt(store, run_id, raw=None, finish_reason="error", provider_error="HTTP 503")

    store.fail_run(run_id, finished_at=LATER, error="provider unavailable")

    detail = store.get_run(run_id)
    assert (detail.status, detail.error, detail.finished_at) == (
        "failed",
        "provider unavailable",
        LATER,
    )
    assert detail.report is None
    assert detail.best_attempt_id is None
    assert detail.finish_reason == "error"  # no report: the last attempt's
    assert detail.attempts[0].raw_output is None
    assert detail.attempts[0].provider_error == "HTTP 503"
    with pytest.raises(NotFoundError, match="has no report"):
        store.get_report_payload(run_id)


def test_a_run_is_finished_only_once(store: Store) -> None:
    run_id = start(store)
    store.fail_run(run_id, finished_at=LATER, error="worker died", status="interrupted")

    with pytest.raises(StoreError, match="already interrupted"):
        finish(store, run_id, status="ok")
    with pytest.raises(StoreError, match="already interrupted"):
        store.fail_run(run_id, finished_at=LATER, error="again")
    assert store.get_run(run_id).error == "worker died"


def test_statuses_outside_the_vocabulary_are_refused(store: Store) -> None:
    run_id = start(store)
    ok: Any = "ok"  # Any: the point is a caller that type checking does not protect
    running: Any = "running"
    with pytest.raises(ValueError, match="expected one of cancelled, failed, interrupted"):
        store.fail_run(run_id, finished_at=LATER, error="x", status=ok)
    with pytest.raises(ValueError, match="expected one of"):
        finish(store, run_id, status=running)
    assert store.get_run(run_id).status == "running"
    with pytest.raises(ValueError, match="trigger 'cron': expected one of"):
        store.start_run(
            instruction_id="x", definition_sha256="d", trigger="cron", scheduled_for=None, now=NOW
        )
    assert [run.id for run in store.list_runs()] == [run_id]


def test_string_enum_members_are_accepted_and_stored_as_text(
    store: Store, database_url: str
) -> None:
    class Trigger(enum.StrEnum):
        CATCH_UP = "catch_up"

    run_id = store.start_run(
        instruction_id="x",
        definition_sha256="d",
        trigger=Trigger.CATCH_UP,
        scheduled_for=None,
        now=NOW,
    )
    stored = store.get_run(run_id).trigger
    assert stored == "catch_up"
    assert stored is VocabularyTrigger.CATCH_UP  # read back as the vocabulary's word
    with _engine(database_url) as engine, engine.connect() as connection:
        text = connection.execute(
            sa.text("SELECT trigger FROM runs WHERE id = :id"), {"id": run_id}
        ).scalar_one()
    assert text == "catch_up"
    assert type(text) is str


def test_a_stored_word_this_version_does_not_know_is_a_store_error(
    store: Store, database_url: str
) -> None:
    run_id = start(store)
    with _engine(database_url) as engine, engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE runs SET status = 'paused' WHERE id = :id"), {"id": run_id}
        )

    with pytest.raises(StoreError, match=r"holds 'paused' where a RunStatus is expected \("):
        store.get_run(run_id)


def test_report_and_quarantine_must_name_attempts_of_the_run(store: Store) -> None:
    run_id = start(store)
    other_attempt = attempt(store, start(store, instruction_id="other"))

    with pytest.raises(NotFoundError, match=f"run {run_id} has no attempt {other_attempt}"):
        finish(store, run_id, quarantined=[quarantine(other_attempt)])
    assert store.get_run(run_id).status == "running"


def test_sink_status_follows_the_latest_delivery_per_target(store: Store) -> None:
    run_id = start(store)
    a, b = finish(
        store,
        run_id,
        report=report_of(attempt(store, run_id), item({"title": "a"})),
        deliveries=[delivery_to("https://a"), delivery_to("https://b")],
    )
    moments = iter(LATER + timedelta(minutes=minutes) for minutes in range(1, 100))

    def result(claim: ClaimedDelivery, error: str | None) -> str | None:
        assert store.deliveries.record_result(claim, error=error, now=next(moments)) is not None
        return store.get_run(run_id).sink_status

    def again(target: str) -> ClaimedDelivery:
        """The delivery to ``target`` claimed by hand (``runs redeliver``)."""
        now = next(moments)
        return store.deliveries.claim_target(
            run_id, kind="webhook", target=target, now=now, lease_until=now
        )

    assert store.get_run(run_id).sink_status == "pending"
    assert result(b, None) == "pending"  # a is still on its way
    assert result(a, "HTTP 500") == "failed"
    assert result(again("https://a"), None) == "delivered"  # the retry worked
    # Sent to b again by hand: a new delivery, pending, then failed: the latest one
    # to b counts, not b's earlier success.
    resent = again("https://b")
    assert store.get_run(run_id).sink_status == "pending"
    assert result(resent, "HTTP 500") == "failed"
    deliveries = store.get_run(run_id).deliveries
    assert [(d.target, d.status, d.attempts, d.error) for d in deliveries] == [
        ("https://a", "delivered", 2, None),
        ("https://b", "delivered", 1, None),
        ("https://b", "failed", 1, "HTTP 500"),
    ]


# --- atomicity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(
            lambda a: {"report": report_of(a, item({"at": object()}))}, id="item-not-json"
        ),
        pytest.param(
            lambda a: {"quarantined": [quarantine(a, repaired={"score": float("nan")})]},
            id="quarantine-nan",
        ),
    ],
)
def test_finish_run_writes_all_or_nothing(
    store: Store, database_url: str, break_it: Callable[[str], dict[str, Any]]
) -> None:
    run_id = start(store)
    attempt_id = attempt(store, run_id)
    writes: dict[str, Any] = {
        "report": report_of(attempt_id, item({"title": "a"}), item({"title": "b"}, 1)),
        "quarantined": [quarantine(attempt_id)],
    }
    writes.update(break_it(attempt_id))

    with pytest.raises(StoreError, match=f"finish run {run_id} failed"):
        finish(store, run_id, **writes)

    detail = store.get_run(run_id)
    assert detail.status == "running"
    assert detail.finished_at is None
    assert detail.best_attempt_id is None
    assert detail.report is None
    assert detail.quarantined == []
    assert detail.attempts[0].raw_output == RAW  # stored before parsing, and kept
    assert _count_rows(database_url, "reports", "report_items", "quarantined_items") == 0

    # The failed transaction left nothing behind that blocks the retry.
    finish(store, run_id, report=report_of(attempt_id, item({"title": "a"})))
    assert store.get_report_payload(run_id)["items"] == [{"title": "a"}]


@contextmanager
def _engine(url: str, **options: Any) -> Iterator[sa.Engine]:
    """An engine of its own, beside any store, disposed afterwards."""
    engine = make_engine(url, **options)
    try:
        yield engine
    finally:
        engine.dispose()


def _count_rows(url: str, *tables: str) -> int:
    with _engine(url) as engine, engine.connect() as connection:
        return sum(
            connection.execute(sa.select(sa.func.count()).select_from(sa.table(t))).scalar_one()
            for t in tables
        )


# --- text the model produced -------------------------------------------------------------------


def test_nul_and_undecodable_bytes_are_stored_without_aborting(store: Store) -> None:
    raw = '[{"t": "a\x00b"}, {"t": "\x00' + b"\xff\xfe".decode("utf-8", "surrogateescape")
    run_id = start(store)
    attempt_id = attempt(store, run_id, raw=raw, provider_error="bad\x00byte", stream_error="\x00")
    data = {"t": "a\x00b", "lone": "\udcff", "nested": ["\x00", {"k\x00": 1}]}
    envelope = {"note": "\x00 in envelope"}
    finish(
        store,
        run_id,
        error="run error \x00",
        report=report_of(attempt_id, item(data), envelope=envelope),
        quarantined=[
            quarantine(
                attempt_id,
                snippet='{"t": "\x00\udcff',
                repaired={"t": "\x00"},
                error={"path": "$[1].t", "expected": "string", "received": "\x00", "message": "x"},
            )
        ],
    )

    detail = store.get_run(run_id)
    assert detail.attempts[0].raw_output == raw  # the exact text, NUL and bytes included
    assert detail.attempts[0].provider_error == "bad\u2400byte"
    assert detail.attempts[0].stream_error == "\u2400"
    assert detail.error == "run error \u2400"
    assert detail.report is not None
    assert detail.report.items[0].data == data  # JSON comes back exactly
    assert detail.report.envelope == envelope
    (stored,) = detail.quarantined
    assert stored.snippet == '{"t": "\u2400\ufffd'  # readable; the exact bytes are in raw_output
    assert stored.repaired == {"t": "\x00"}
    assert stored.error["received"] == "\x00"
    assert store.get_report_payload(run_id)["items"] == [data]


def test_a_lone_surrogate_in_raw_output_is_kept_as_its_utf8_form(store: Store) -> None:
    # Not from undecodable bytes (surrogateescape cannot encode it): stored, not refused.
    run_id = start(store)
    attempt(store, run_id, raw="x\ud800")

    (stored,) = store.get_run(run_id).attempts
    assert stored.raw_output is not None
    assert stored.raw_output.encode("utf-8", "surrogateescape") == b"x\xed\xa0\x80"


# --- ids ---------------------------------------------------------------------------------------


def test_runs_are_found_by_a_unique_prefix(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = iter(
        [
            "abcdef01-0000-4000-8000-000000000001",
            "abcdef01-0000-4000-8000-000000000002",
            "12345678-0000-4000-8000-000000000003",
        ]
    )
    monkeypatch.setattr(repository, "new_id", lambda: next(ids))
    first, second, third = (start(store, instruction_id=name) for name in ("a", "b", "c"))

    assert store.get_run(third).id == third
    assert store.get_run("12345678").id == third
    assert store.get_run("ABCDEF01-0000-4000-8000-000000000001").id == first
    assert store.get_run("abcdef01-0000-4000-8000-000000000002").id == second
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.get_run("abcdef01")
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.get_report_payload("abcdef01-0000")
    with pytest.raises(NotFoundError, match="at least 8 characters"):
        store.get_run("1234567")
    with pytest.raises(NotFoundError, match="no run"):
        store.get_run("%%%%%%%%")  # LIKE wildcards are taken literally


UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.get_run(UNKNOWN), id="get_run"),
        pytest.param(lambda s: s.get_report_payload(UNKNOWN), id="get_report_payload"),
        pytest.param(lambda s: s.heartbeat(UNKNOWN, NOW), id="heartbeat"),
        pytest.param(lambda s: attempt(s, UNKNOWN), id="add_attempt"),
        pytest.param(lambda s: s.set_attempt_outcome(UNKNOWN, {}), id="set_attempt_outcome"),
        pytest.param(lambda s: s.fail_run(UNKNOWN, finished_at=NOW, error="x"), id="fail_run"),
        pytest.param(
            lambda s: s.finish_run(
                UNKNOWN, status="ok", finished_at=NOW, error=None, report=None, quarantined=[]
            ),
            id="finish_run",
        ),
        pytest.param(
            lambda s: s.deliveries.claim_target(
                UNKNOWN, kind="k", target="t", now=NOW, lease_until=NOW
            ),
            id="deliveries.claim_target",
        ),
        pytest.param(
            lambda s: s.deliveries.record_result(
                ClaimedDelivery(
                    id=1,
                    run=DeliveryRun(id=UNKNOWN, instruction_id="x", definition_sha256="d"),
                    kind="k",
                    target="t",
                    attempts=1,
                ),
                error=None,
                now=NOW,
            ),
            id="deliveries.record_result",
        ),
    ],
)
def test_unknown_ids_are_not_found(store: Store, call: Callable[[Store], object]) -> None:
    with pytest.raises(NotFoundError, match=UNKNOWN):
        call(store)


# --- schema revision ---------------------------------------------------------------------------


def test_a_database_not_at_head_is_refused(database_url: str) -> None:
    with pytest.raises(StoreError, match=r"at revision \(none\)") as caught:
        Store.open(database_url, auto_upgrade=False)
    assert f"needs {head_revision()}" in str(caught.value)
    assert "run `salvagelane db upgrade`" in str(caught.value)

    # An older revision this salvagelane knows (one it does not know is a newer
    # salvagelane's, which `db upgrade` cannot migrate: tests/integration/test_migrations.py).
    upgrade(database_url, "0007")
    with pytest.raises(
        StoreError, match=rf"at revision 0007, this salvagelane needs {head_revision()}"
    ):
        Store.open(database_url, auto_upgrade=True)


def test_a_new_sqlite_file_is_created_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with Store.open(url) as store:
        assert store.list_runs() == []
    assert current_revision(url) == head_revision()


def test_an_unmigrated_sqlite_file_with_tables_is_not_touched(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    with _engine(url) as engine, engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE unrelated (x INTEGER)")
    with pytest.raises(StoreError, match="salvagelane db upgrade"):
        Store.open(url)
    assert current_revision(url) is None


@pytest.mark.postgres
def test_postgres_is_never_upgraded_implicitly_and_passwords_are_masked(
    postgres_database: Any,
) -> None:
    postgres_database.reset()
    with_password = sa.make_url(postgres_database.url).set(password="s3cret-pw")
    url = with_password.render_as_string(hide_password=False)

    with pytest.raises(StoreError, match="salvagelane db upgrade") as caught:
        Store.open(url, auto_upgrade=True)
    assert "s3cret-pw" not in str(caught.value)
    assert "***" in str(caught.value)
    assert current_revision(url) is None

    upgrade(url)
    with Store.open(url) as store:
        assert "s3cret-pw" not in store.url
        assert store.url.startswith("postgresql+psycopg://postgres:***@")


# --- engines and URLs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgres://u:p@db:5432/x", "postgresql+psycopg://u:p@db:5432/x"),
        ("postgresql://u@db/x", "postgresql+psycopg://u@db/x"),
        ("postgresql+psycopg://u@db/x", "postgresql+psycopg://u@db/x"),
        ("sqlite:///salvagelane.db", "sqlite:///salvagelane.db"),
    ],
)
def test_database_urls_are_normalised(given: str, expected: str) -> None:
    assert normalise_url(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (None, "no database URL given"),
        ("", "no database URL given"),
        ("not a url", "not well formed"),
        ("mysql://root:hunter2@db/x", r"mysql://root:\*\*\*@db/x: unsupported database"),
    ],
)
def test_unusable_database_urls_are_refused(given: str | None, message: str) -> None:
    with pytest.raises(StoreError, match=message) as caught:
        normalise_url(given)
    assert "hunter2" not in str(caught.value)


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    with _engine(f"sqlite:///{tmp_path / 'p.db'}") as engine, engine.connect() as connection:
        pragma = connection.exec_driver_sql
        assert pragma("PRAGMA journal_mode").scalar_one() == "wal"
        assert pragma("PRAGMA busy_timeout").scalar_one() == 30_000
        assert pragma("PRAGMA foreign_keys").scalar_one() == 1


def test_sqlite_transactions_take_the_write_lock_when_they_begin(tmp_path: Path) -> None:
    # BEGIN IMMEDIATE: even a transaction that has only read holds the write lock, so a
    # second writer waits (here: 0.1 s) and then fails instead of deadlocking later.
    with (
        _engine(f"sqlite:///{tmp_path / 'lock.db'}", busy_timeout=0.1) as engine,
        engine.connect() as first,
        engine.connect() as second,
    ):
        first.exec_driver_sql("SELECT 1")
        assert first.in_transaction()
        with pytest.raises(sa.exc.OperationalError, match="database is locked"):
            second.exec_driver_sql("SELECT 1")
        first.rollback()
        assert second.exec_driver_sql("SELECT 1").scalar_one() == 1


def test_two_stores_on_one_sqlite_file_write_concurrently(tmp_path: Path) -> None:
    # Both open a file that does not exist yet: one creates the schema, the other waits
    # (BEGIN IMMEDIATE + busy timeout) and then finds it at head.
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    runs_per_thread = 20
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def work(instruction_id: str) -> None:
        try:
            barrier.wait()
            with Store.open(url) as store:
                for number in range(runs_per_thread):
                    # A fire of its own each: (instruction, fire time) is claimed once.
                    fire_time = NOW + timedelta(minutes=number)
                    run_id = start(store, instruction_id=instruction_id, now=fire_time)
                    attempt_id = attempt(store, run_id)
                    store.heartbeat(run_id, LATER)
                    finish(
                        store,
                        run_id,
                        report=report_of(attempt_id, item({"title": "a"})),
                        quarantined=[quarantine(attempt_id)],
                    )
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert failures == []
    with Store.open(url) as store:
        for name in ("left", "right"):
            runs = store.list_runs(instruction_id=name, limit=100)
            assert len(runs) == runs_per_thread
            assert {(r.status, r.kept_count, r.quarantined_count) for r in runs} == {
                ("partial", 1, 1)
            }


def test_processes_opening_a_new_sqlite_file_at_once_all_succeed(tmp_path: Path) -> None:
    # Three openers of a brand-new file race to switch it to WAL; SQLite answers some of
    # them "database is locked" without waiting (about 1 in 12 files before the retry).
    failures: list[BaseException] = []
    for number in range(40):
        url = f"sqlite:///{tmp_path / f'new-{number}.db'}"
        barrier = threading.Barrier(3)

        def open_and_read(url: str = url, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                with Store.open(url) as store:
                    store.list_runs()
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        threads = [threading.Thread(target=open_and_read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert failures == []
