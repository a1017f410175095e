"""The quarantine review lane of the store, on SQLite and PostgreSQL.

Runs are written through the store's own API with a hand-made raw output, so spans,
reasons, times and review states are exactly what each test needs.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.errors import NotFoundError, ReviewStateError
from salvagelane.store import (
    InputDigest,
    QuarantineFilter,
    QuarantineRecord,
    ReportItemRecord,
    ReportRecord,
    Store,
    upgrade,
)
from salvagelane.store import database_url as normalise_url

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
RAW = '{"items": [{"a": 1}, {"a": "x"}, {"a": 2, "b": 7}, {"a": 3, "b"'
# Spans into RAW: the kept item, a schema reject, an allow-list reject, a truncated one.
SCHEMA, ALLOW, CUT = (21, 31), (33, 49), (51, 63)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


def held(
    attempt_id: str, reason: str, span: tuple[int, int], index: int, **changes: Any
) -> QuarantineRecord:
    values: dict[str, Any] = {
        "attempt_id": attempt_id,
        "instruction_id": "daily",
        "source_index": index,
        "reason": reason,
        "error": {"code": reason, "path": "$.a", "message": f"{reason} at $.a"},
        "span_start": span[0],
        "span_end": span[1],
        "snippet": RAW[span[0] : span[1]],
        "sha256": "s" * 64,
        "repaired": None,
        "provenance": {"instruction": "daily", "model": "m", "attempt": 1},
        "review_status": "pending",
        **changes,
    }
    return QuarantineRecord(**values)


def seed_run(
    store: Store,
    *,
    at: datetime = T0,
    instruction_id: str = "daily",
    with_report: bool = True,
    reasons: Sequence[str] = ("schema", "allow_list", "truncated"),
    truncated: bool = True,
) -> tuple[str, str]:
    """A finished run of one attempt over RAW: one kept item and the rejects in ``reasons``
    (pending), plus a superseded reject of a second attempt that was not chosen.
    ``truncated``: whether the report says the output was cut off (RAW is)."""
    run_id = store.start_run(
        instruction_id=instruction_id,
        definition_sha256="d" * 64,
        trigger="manual",
        scheduled_for=None,
        now=at,
    )
    attempts = [
        store.add_attempt(
            run_id,
            number=number,
            started_at=at,
            request={},
            raw_output=RAW,
            finish_reason="length",
            native_finish_reason="length",
            usage=None,
            model="m",
            request_id=None,
            latency_seconds=None,
            http_status=200,
            provider_error=None,
            stream_error=None,
            finished_at=at,
        )
        for number in (1, 2)
    ]
    spans = {"schema": (SCHEMA, 1), "allow_list": (ALLOW, 2), "truncated": (CUT, 3)}
    quarantined = [
        held(attempts[0], reason, *spans[reason], instruction_id=instruction_id)
        for reason in reasons
    ]
    quarantined.append(held(attempts[1], "malformed", (0, 5), 0, review_status="superseded"))
    by_reason = dict.fromkeys(reasons, 1)
    report = ReportRecord(
        attempt_id=attempts[0],
        envelope={},
        partial=True,
        status="partial",
        document_valid=False,
        truncated=truncated,
        finish_reason="length",
        counts={
            "candidates": 1 + len(reasons),
            "accepted": 1,
            "quarantined": len(reasons),
            "by_reason": by_reason,
            "envelope_issues": 0,
        },
        items=[ReportItemRecord(source_index=0, data={"a": 1}, span_start=11, span_end=19)],
    )
    store.finish_run(
        run_id,
        status="partial",
        finished_at=at,
        error=None,
        report=report if with_report else None,
        quarantined=quarantined,
    )
    return run_id, attempts[0]


def ids_of(store: Store, run_id: str) -> dict[str, int]:
    """The run's quarantined item ids by reason."""
    return {q.reason: q.id for q in store.get_run(run_id).quarantined}


def operator_item(data: Any) -> ReportItemRecord:
    return ReportItemRecord(
        source_index=1, data=data, span_start=None, span_end=None, origin="operator"
    )


def test_list_is_newest_first_filtered_and_leaves_superseded_out(store: Store) -> None:
    old_run, _ = seed_run(store, at=T0)
    new_run, _ = seed_run(store, at=T0 + timedelta(days=1), instruction_id="weekly")
    lane = store.quarantine

    listed = lane.list_quarantine()

    assert [(q.run_id, q.reason) for q in listed] == [
        (new_run, "truncated"),
        (new_run, "allow_list"),
        (new_run, "schema"),
        (old_run, "truncated"),
        (old_run, "allow_list"),
        (old_run, "schema"),
    ]
    assert all(q.review_status == "pending" for q in listed)
    assert [q.run_id for q in lane.list_quarantine(QuarantineFilter(instruction_id="daily"))] == [
        old_run
    ] * 3
    by_reason = lane.list_quarantine(QuarantineFilter(reason="schema"))
    assert [q.run_id for q in by_reason] == [new_run, old_run]
    since = lane.list_quarantine(QuarantineFilter(since=T0 + timedelta(hours=1)))
    assert {q.run_id for q in since} == {new_run}
    assert len(lane.list_quarantine(QuarantineFilter(limit=2))) == 2
    superseded = lane.list_quarantine(QuarantineFilter(review_status="superseded"))
    assert [(q.run_id, q.attempt_number) for q in superseded] == [(new_run, 2), (old_run, 2)]


def test_get_shows_the_raw_text_around_the_span(store: Store) -> None:
    run_id, _ = seed_run(store)
    detail = store.quarantine.get_quarantine(ids_of(store, run_id)["schema"], context_chars=8)

    assert (detail.raw_before, detail.raw_span, detail.raw_after) == (
        'a": 1}, ',
        '{"a": "x"}',
        ', {"a": ',
    )
    assert (detail.run_status, detail.report_items, detail.attempt_number) == ("partial", 1, 1)
    assert detail.reviews == []


def rows_of(url: str, run_id: str) -> tuple[str, str, bool, Any]:
    """The run's and its report's stored status, partial flag and counts, as a query of
    the tables (not the store's views) sees them."""
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.connect() as connection:
            run_status = connection.execute(
                sa.text("SELECT status FROM runs WHERE id = :id"), {"id": run_id}
            ).scalar_one()
            status, partial, counts = connection.execute(
                sa.text("SELECT status, partial, counts FROM reports WHERE run_id = :id"),
                {"id": run_id},
            ).one()
    finally:
        engine.dispose()
    return run_status, status, bool(partial), json.loads(counts)


def test_approve_adds_the_item_updates_the_report_and_audits(
    store: Store, database_url: str
) -> None:
    run_id, _ = seed_run(store, reasons=("schema", "allow_list"), truncated=False)
    ids = ids_of(store, run_id)
    lane = store.quarantine

    first = lane.approve_quarantined(
        ids["schema"],
        item=operator_item({"a": 9}),
        expected_items=1,
        actor="alice",
        note="checked the source",
        now=T0 + timedelta(hours=1),
    )

    assert (first.position, first.items, first.partial, first.status) == (1, 2, True, "partial")
    assert (first.run.kept_count, first.run.quarantined_count) == (2, 1)  # allow_list pending
    report = store.get_run(run_id).report
    assert report is not None
    assert [(i.data, i.origin) for i in report.items] == [
        ({"a": 1}, "model"),
        ({"a": 9}, "operator"),
    ]
    assert report.counts == {
        "candidates": 3,
        "accepted": 2,
        "quarantined": 1,
        "by_reason": {"allow_list": 1},
        "envelope_issues": 0,
        "operator_approved": 1,
    }
    assert report.partial
    assert rows_of(database_url, run_id) == ("partial", "partial", True, report.counts)
    detail = lane.get_quarantine(ids["schema"])
    assert (detail.review_status, detail.reviewed_by, detail.review_note) == (
        "approved",
        "alice",
        "checked the source",
    )
    assert detail.reviewed_at == T0 + timedelta(hours=1)
    (audit,) = detail.reviews
    assert (audit.action, audit.actor, audit.at) == ("approve", "alice", T0 + timedelta(hours=1))
    assert audit.before["review_status"] == "pending"
    assert audit.after["item"] == {"a": 9}

    # The last item held back: the report and its run are ok, in every view and row,
    # and the operator's items still say whose they are.
    second = lane.approve_quarantined(
        ids["allow_list"],
        item=operator_item({"a": 2, "b": 0}),
        expected_items=2,
        actor="bob",
        note=None,
        now=T0 + timedelta(hours=2),
    )
    assert (second.position, second.items, second.partial, second.status) == (2, 3, False, "ok")
    payload = store.get_report_payload(run_id)
    assert (payload["status"], payload["partial"]) == ("ok", False)
    assert payload["counts"]["by_reason"] == {}
    assert payload["counts"]["operator_approved"] == 2
    assert payload["items"][-1] == {"a": 2, "b": 0}
    assert payload["item_origins"] == ["model", "operator", "operator"]
    (summary,) = store.list_runs()
    assert (summary.status, summary.partial, summary.kept_count, summary.quarantined_count) == (
        "ok",
        False,
        3,
        0,
    )
    assert second.run == summary
    assert rows_of(database_url, run_id)[:3] == ("ok", "ok", False)


def test_an_output_cut_off_stays_partial_when_every_item_is_approved(
    store: Store, database_url: str
) -> None:
    run_id, _ = seed_run(store, reasons=("truncated",), truncated=True)
    (quarantine_id,) = (q.id for q in store.get_run(run_id).quarantined if q.reason == "truncated")

    approval = store.quarantine.approve_quarantined(
        quarantine_id,
        item=operator_item({"a": 3, "b": 0}),
        expected_items=1,
        actor="alice",
        note=None,
        now=T0,
    )

    # Nothing is held back, but the model's output was cut off: more items may have
    # followed, which no approval can bring back.
    assert (approval.status, approval.partial, approval.run.quarantined_count) == (
        "partial",
        True,
        0,
    )
    assert approval.run.output_cut == ("truncated",)
    detail = store.get_run(run_id)
    assert detail.report is not None
    assert (detail.status, detail.report.status, detail.report.partial) == (
        "partial",
        "partial",
        True,
    )
    assert rows_of(database_url, run_id)[:3] == ("partial", "partial", True)


def test_a_rejected_item_keeps_the_report_partial(store: Store, database_url: str) -> None:
    run_id, _ = seed_run(store, reasons=("schema", "allow_list"), truncated=False)
    ids = ids_of(store, run_id)
    lane = store.quarantine
    lane.reject_quarantined(ids["allow_list"], actor="ops", note="made up", now=T0)

    approval = lane.approve_quarantined(
        ids["schema"], item=operator_item({}), expected_items=1, actor="ops", note=None, now=T0
    )

    assert (approval.status, approval.partial) == ("partial", True)
    assert (approval.run.quarantined_count, approval.run.quarantined_by_reason) == (
        1,
        {"allow_list": 1},
    )
    assert rows_of(database_url, run_id)[:3] == ("partial", "partial", True)


def test_refused_approval_changes_nothing_but_the_audit(store: Store) -> None:
    run_id, _ = seed_run(store)
    quarantine_id = ids_of(store, run_id)["schema"]
    before = store.get_run(run_id)

    store.quarantine.record_refused_approval(
        quarantine_id,
        received=InputDigest(size=20, sha256="c" * 64, head='{"a": "still wrong"}', clipped=False),
        error={"reason": "schema", "path": "$.a", "message": "schema at $.a"},
        actor="alice",
        note=None,
        now=T0,
    )
    # A head longer than the store keeps (a caller that did not clip it) is clipped at a
    # character boundary: "é" is two bytes, the 4096th byte is the first half of one.
    store.quarantine.record_refused_approval(
        quarantine_id,
        received=InputDigest(size=10**9, sha256="d" * 64, head="x" + "é" * 4000, clipped=True),
        error={"reason": "oversize", "path": "$", "message": "oversize at $"},
        actor="alice",
        note=None,
        now=T0,
    )

    after = store.get_run(run_id)
    assert after.report == before.report
    assert after.quarantined == before.quarantined
    first, second = store.quarantine.get_quarantine(quarantine_id).reviews
    assert (first.action, first.error["path"]) == ("approve_refused", "$.a")
    assert first.after["input"] == {
        "bytes": 20,
        "sha256": "c" * 64,
        "head": '{"a": "still wrong"}',
        "clipped": False,
    }
    assert second.after["input"]["head"] == "x" + "é" * 2047
    assert (second.after["input"]["bytes"], second.after["input"]["clipped"]) == (10**9, True)


def test_wrong_states_and_unknown_ids_are_clear_errors(store: Store) -> None:
    run_id, _ = seed_run(store)
    ids = ids_of(store, run_id)
    lane = store.quarantine
    lane.approve_quarantined(
        ids["schema"], item=operator_item({}), expected_items=1, actor="a", note=None, now=T0
    )
    lane.reject_quarantined(ids["truncated"], actor="a", note="no", now=T0)
    superseded = ids["malformed"]

    with pytest.raises(ReviewStateError, match=r"expected a pending item, it is approved"):
        lane.approve_quarantined(
            ids["schema"], item=operator_item({}), expected_items=2, actor="a", note=None, now=T0
        )
    with pytest.raises(ReviewStateError, match=r"cannot reject .* it is rejected"):
        lane.reject_quarantined(ids["truncated"], actor="a", note="again", now=T0)
    with pytest.raises(ReviewStateError, match="not chosen for the report"):
        lane.reject_quarantined(superseded, actor="a", note="x", now=T0)
    with pytest.raises(NotFoundError, match="no quarantined item with id 999999") as caught:
        lane.approve_quarantined(
            999999, item=operator_item({}), expected_items=2, actor="a", note=None, now=T0
        )
    assert not isinstance(caught.value, ReviewStateError)
    with pytest.raises(NotFoundError, match="no quarantined item"):
        lane.get_quarantine(999999)
    # The report changed since the guardrails counted its items: nothing is written.
    with pytest.raises(ReviewStateError, match=r"holds 2 items.* against 1"):
        lane.approve_quarantined(
            ids["allow_list"],
            item=operator_item({}),
            expected_items=1,
            actor="a",
            note=None,
            now=T0,
        )
    assert lane.get_quarantine(ids["allow_list"]).review_status == "pending"
    assert len(store.get_report_payload(run_id)["items"]) == 2


def test_a_run_without_report_refuses_approval(store: Store) -> None:
    run_id, _ = seed_run(store, with_report=False)
    quarantine_id = ids_of(store, run_id)["schema"]

    with pytest.raises(ReviewStateError, match="has no report"):
        store.quarantine.approve_quarantined(
            quarantine_id, item=operator_item({}), expected_items=0, actor="a", note=None, now=T0
        )

    detail = store.quarantine.get_quarantine(quarantine_id)
    assert (detail.review_status, detail.report_id, detail.reviews) == ("pending", None, [])


def test_reject_matching_rejects_exactly_the_matching_pending_items(store: Store) -> None:
    daily, _ = seed_run(store, at=T0)
    weekly, _ = seed_run(store, at=T0, instruction_id="weekly")
    lane = store.quarantine
    lane.approve_quarantined(
        ids_of(store, daily)["schema"],
        item=operator_item({}),
        expected_items=1,
        actor="a",
        note=None,
        now=T0,
    )

    rejected = lane.reject_matching(
        QuarantineFilter(instruction_id="daily"), actor="ops", note="noise day", now=T0
    )

    daily_ids = ids_of(store, daily)
    assert sorted(rejected) == sorted([daily_ids["allow_list"], daily_ids["truncated"]])
    statuses = {(q.run_id, q.reason): q.review_status for q in store.get_run(daily).quarantined}
    assert statuses == {
        (daily, "schema"): "approved",
        (daily, "allow_list"): "rejected",
        (daily, "truncated"): "rejected",
        (daily, "malformed"): "superseded",
    }
    assert all(q.review_status != "rejected" for q in store.get_run(weekly).quarantined)
    audit = lane.get_quarantine(daily_ids["truncated"]).reviews
    assert [(a.action, a.actor, a.note) for a in audit] == [("bulk_reject", "ops", "noise day")]
    with pytest.raises(ReviewStateError, match="pending items only"):
        lane.reject_matching(
            QuarantineFilter(review_status="approved"), actor="ops", note="x", now=T0
        )


def test_a_confirmed_bulk_reject_takes_only_the_items_it_showed(store: Store) -> None:
    """Issue 29.7: what arrives between the confirmation and the confirming action stays
    pending, and a confirmed list that changed otherwise rejects nothing."""
    shown_run, _ = seed_run(store, at=T0, reasons=("schema", "truncated"))
    lane = store.quarantine
    where = QuarantineFilter(instruction_id="daily")
    confirmed = lane.bulk_selection(where)
    shown = ids_of(store, shown_run)
    assert confirmed.count == 2
    assert confirmed.through_id == max(shown["schema"], shown["truncated"])
    later_run, _ = seed_run(store, at=T0 + timedelta(hours=1), reasons=("schema",))

    rejected = lane.reject_matching(where, actor="ops", note="noise", now=T0, confirmed=confirmed)

    assert sorted(rejected) == sorted([shown["schema"], shown["truncated"]])
    later = ids_of(store, later_run)["schema"]
    assert lane.get_quarantine(later).review_status == "pending"

    # One item reviewed meanwhile and another arrived: the count is the same, the items
    # are not. Nothing is rejected.
    again = lane.bulk_selection(where)
    assert again.count == 1
    lane.reject_quarantined(later, actor="carol", note="seen", now=T0)
    newest_run, _ = seed_run(store, at=T0 + timedelta(hours=2), reasons=("schema",))
    newest = ids_of(store, newest_run)["schema"]
    with pytest.raises(ReviewStateError, match="changed since they were confirmed"):
        lane.reject_matching(where, actor="ops", note="noise", now=T0, confirmed=again)
    assert lane.get_quarantine(newest).review_status == "pending"
    assert lane.get_quarantine(newest).reviews == []


def test_an_id_beyond_any_column_is_not_found(store: Store) -> None:
    """Issue 29.11: an id no database column can hold names nothing (it used to reach
    the driver, which cannot bind it: OverflowError on SQLite)."""
    lane = store.quarantine
    for huge in (2**31, 2**40, 2**63, 99999999999999999999999, -(2**70), 0):
        with pytest.raises(NotFoundError, match=f"no quarantined item with id {huge}"):
            lane.get_quarantine(huge)
        with pytest.raises(NotFoundError, match="no quarantined item"):
            lane.reject_quarantined(huge, actor="a", note="x", now=T0)
        with pytest.raises(NotFoundError, match="no quarantined item"):
            lane.neighbours(QuarantineFilter(), huge)


def test_a_note_keeps_the_status_and_is_audited(store: Store) -> None:
    run_id, _ = seed_run(store)
    quarantine_id = ids_of(store, run_id)["schema"]

    noted = store.quarantine.note_quarantined(
        quarantine_id, actor="carol", note="ask the data team", now=T0
    )

    assert (noted.review_status, noted.review_note) == ("pending", "ask the data team")
    (audit,) = store.quarantine.get_quarantine(quarantine_id).reviews
    assert (audit.action, audit.before, audit.after) == (
        "note",
        {"review_note": None},
        {"review_note": "ask the data team"},
    )
    with pytest.raises(ValueError, match="empty note"):
        store.quarantine.note_quarantined(quarantine_id, actor="carol", note=" ", now=T0)


@contextmanager
def writers_held(url: str, run_id: str) -> Iterator[Callable[[int], None]]:
    """Hold back every approval of ``run_id``'s report until the block ends.

    Yields ``wait_for(n)``, which returns once ``n`` approvals are waiting. On PostgreSQL
    the report row is locked ``FOR UPDATE`` and waiting means blocked on a lock (seen in
    pg_stat_activity), so the approvals meet exactly at the store's row locks; on SQLite
    the write lock is held (``BEGIN IMMEDIATE``), which is what serialises writers there.
    """
    if url.startswith("sqlite"):
        holder = sqlite3.connect(sa.make_url(url).database, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            # No lock table to read: give the threads time to call in and find the write
            # lock taken (their busy timeout is seconds, this wait is not).
            yield lambda count: time.sleep(0.3)
            holder.rollback()
        finally:
            holder.close()
        return
    engine = sa.create_engine(url)
    try:
        with engine.connect() as holder, engine.connect() as watcher:
            holder.execute(
                sa.text("SELECT id FROM reports WHERE run_id = :run FOR UPDATE"), {"run": run_id}
            )
            watcher.commit()

            def wait_for(count: int) -> None:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    waiting = watcher.scalar(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND wait_event_type = 'Lock'"
                        )
                    )
                    # Activity is read once per transaction: end it to see the next state.
                    watcher.rollback()
                    if waiting == count:
                        return
                    time.sleep(0.02)
                raise AssertionError(f"{count} approvals never waited on the report's lock")

            yield wait_for
            holder.rollback()
    finally:
        engine.dispose()


def approve_concurrently(
    store: Store, database_url: str, run_id: str, quarantine_ids: Sequence[int]
) -> list[BaseException | None]:
    """Approve each id from its own thread, all checked against the report's one item;
    returns what each approval raised (None if it went through)."""
    outcomes: list[BaseException | None] = [None] * len(quarantine_ids)

    def approve(slot: int, quarantine_id: int) -> None:
        try:
            store.quarantine.approve_quarantined(
                quarantine_id,
                item=operator_item({"a": slot}),
                expected_items=1,
                actor=f"operator-{slot}",
                note=None,
                now=T0,
            )
        except BaseException as exc:  # handed to the test to assert on
            outcomes[slot] = exc

    with writers_held(database_url, run_id) as wait_for:
        threads = [
            threading.Thread(target=approve, args=(slot, quarantine_id))
            for slot, quarantine_id in enumerate(quarantine_ids)
        ]
        for thread in threads:
            thread.start()
        wait_for(len(threads))
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    return outcomes


@pytest.mark.parametrize("same_item", [False, True], ids=["two-items", "one-item-twice"])
def test_concurrent_approvals_of_one_report_let_exactly_one_through(
    store: Store, database_url: str, same_item: bool
) -> None:
    run_id, _ = seed_run(store, reasons=("schema", "allow_list"))
    ids = ids_of(store, run_id)
    targets = [ids["schema"], ids["schema"] if same_item else ids["allow_list"]]

    outcomes = approve_concurrently(store, database_url, run_id, targets)

    passed = [slot for slot, raised in enumerate(outcomes) if raised is None]
    refused = [raised for raised in outcomes if raised is not None]
    assert len(passed) == 1, outcomes
    (error,) = refused
    assert isinstance(error, ReviewStateError)
    expected = "it is approved" if same_item else r"holds 2 items.* against 1"
    assert re.search(expected, str(error)), error
    # The report holds the winner's item once, and its counts agree with its items.
    payload = store.get_report_payload(run_id)
    assert payload["items"] == [{"a": 1}, {"a": passed[0]}]
    assert payload["counts"]["accepted"] == 2
    assert payload["counts"]["operator_approved"] == 1
    statuses = {q.id: q.review_status for q in store.get_run(run_id).quarantined}
    assert statuses[targets[passed[0]]] == "approved"
    if not same_item:
        assert statuses[targets[1 - passed[0]]] == "pending"
    audits = [
        review.action
        for quarantine_id in set(targets)
        for review in store.quarantine.get_quarantine(quarantine_id).reviews
    ]
    assert audits == ["approve"]
