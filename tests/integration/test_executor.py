"""The executor against a real database (SQLite and PostgreSQL) and the real connectors.

Model answers come from the replay fixture or from the OpenAI-compatible connector calling
the shared scripted provider (a real server on 127.0.0.1, one reply per attempt), so
retries, budgets and correction prompts are asserted on the requests the connector really
sent over HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _executor_sinks as sink_targets
import httpx
import pytest
from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs

from salvagelane.connectors import Connector
from salvagelane.definitions import Instruction
from salvagelane.errors import DuplicateFireError, StoreError
from salvagelane.runtime import attempt_loop, run_records
from salvagelane.runtime.delivery import deliver_report
from salvagelane.runtime.executor import Executor
from salvagelane.sinks import build_sinks
from salvagelane.store import RunDetail, Store
from salvagelane.vocabulary import Trigger
from tests.support.cli import FIXTURE
from tests.support.provider import Recorded, Scripted, ScriptedServer
from tests.support.run_setup import (
    COMPLETE,
    JSON_HEADERS,
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    replay_executor,
    store,
)

__all__ = ["provider", "store"]

SECRET = "sk-executor-test-4c1d9e7f-never-stored"


# --- set-up ------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


def report(items: list[dict[str, Any]], summary: str = "Two things matter today.") -> str:
    return json.dumps({"summary": summary, "recommendations": items}, indent=2)


def chat(content: str, finish: str = "stop") -> Scripted:
    return chat_answer(content, finish=finish)


def answer(status: int, body: dict[str, Any]) -> Scripted:
    return Scripted(status=status, body=body, headers=JSON_HEADERS)


@pytest.fixture
def connector_for(provider: ScriptedServer) -> Iterator[Callable[[Instruction], Connector]]:
    """The definition's OpenAI-compatible connector, calling the scripted ``provider`` once
    per attempt with the test key; every request it sent must have carried that key."""
    with httpx.Client() as client:
        yield openai_connector_for(
            client, provider.base_url, key=SECRET, sleep=lambda seconds: None, max_attempts=1
        )
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in provider.requests)


def asked(provider: ScriptedServer, attempt: int) -> str:
    """The user message of the ``attempt``-th request (0-based) the provider got."""
    content: str = provider.requests[attempt].body["messages"][1]["content"]
    return content


# --- the main job ------------------------------------------------------------------------------


def test_replayed_truncated_report_is_stored_partial_with_the_cut_item_quarantined(
    project: Project, store: Store
) -> None:
    instruction = project.instruction()
    outcome = replay_executor(store).run(instruction, trigger=Trigger.REPLAY)

    assert (outcome.status, outcome.kept, outcome.candidates) == ("partial", 7, 8)
    assert dict(outcome.quarantined) == {"truncated": 1}
    assert (outcome.finish_reason, outcome.attempts, outcome.best_attempt) == ("length", 1, 1)

    detail = store.get_run(outcome.run_id)
    assert (detail.status, detail.trigger, detail.error) == ("partial", "replay", None)
    assert detail.definition_sha256 == instruction.definition_sha256
    assert detail.finished_at is not None
    (attempt,) = detail.attempts
    assert attempt.raw_output == (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    assert (attempt.finish_reason, attempt.native_finish_reason) == ("length", "length")
    assert attempt.usage == {"prompt_tokens": 2874, "completion_tokens": 1400}
    assert attempt.request["max_output_tokens"] == 4096
    assert SECRET not in json.dumps(attempt.request)

    assert detail.report is not None
    assert detail.report.partial
    assert detail.report.truncated
    assert [item.data["rank"] for item in detail.report.items] == [1, 2, 3, 4, 5, 6, 7]
    assert detail.report.items[0].data == COMPLETE["recommendations"][0]
    assert detail.report.envelope["summary"] == COMPLETE["summary"]

    (held,) = detail.quarantined
    assert (held.reason, held.source_index, held.review_status) == ("truncated", 7, "pending")
    assert held.provenance["instruction"] == "daily-triage"
    assert held.provenance["finish_reason"] == "length"
    assert held.provenance["schema_sha256"] == instruction.output.item_schema.sha256
    assert held.provenance["definition_sha256"] == instruction.definition_sha256
    assert held.repaired is not None
    assert held.repaired["candidate"]
    raw = attempt.raw_output
    assert raw[held.span_start : held.span_end].lstrip().startswith("{")


def test_two_runs_are_two_rows(project: Project, store: Store) -> None:
    instruction = project.instruction()
    first = replay_executor(store).run(instruction)
    second = replay_executor(store).run(instruction)
    listed = [run.id for run in store.list_runs(instruction_id="daily-triage", limit=50)]
    assert first.run_id != second.run_id
    assert listed.index(second.run_id) < listed.index(first.run_id)  # newest first


# --- retries -----------------------------------------------------------------------------------


def test_nothing_salvaged_is_retried_with_a_correction_and_the_better_attempt_wins(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction()
    broken = items(3)
    broken[0]["candidate"] = "made-up-workstream"
    broken[1]["confidence"] = "very"
    broken[2].pop("why")
    provider.script.extend([chat(report(broken)), chat(report(items(3)))])
    executor = Executor(store, connector_for=connector_for)

    outcome = executor.run(instruction)

    assert (outcome.status, outcome.kept, outcome.attempts, outcome.best_attempt) == ("ok", 3, 2, 2)
    correction = asked(provider, 1)
    original = asked(provider, 0)
    assert correction.startswith(original.rstrip())
    assert "item 1, allow_list at $.candidate" in correction
    assert "item 2, schema at $.confidence: expected" in correction
    assert "item 3, schema at $" in correction
    assert "made-up-workstream" in correction  # the received value, for the model to fix
    detail = store.get_run(outcome.run_id)
    assert [a.number for a in detail.attempts] == [1, 2]
    assert detail.attempts[0].outcome is not None
    assert detail.attempts[0].outcome["retry_trigger"] == "nothing_salvaged"
    assert detail.report is not None
    assert detail.report.attempt_id == detail.attempts[1].id
    # The first attempt's rejects are kept, marked superseded: never dropped, never pending.
    assert sorted(q.reason for q in detail.quarantined) == ["allow_list", "schema", "schema"]
    assert {q.review_status for q in detail.quarantined} == {"superseded"}


def test_truncation_grows_the_token_budget_up_to_the_ceiling(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction(
        **{
            "attempts: 2\n": "attempts: 3\n  length_budget_factor: 3\n"
            "  max_output_tokens_ceiling: 10000\n",
            "on: [nothing_salvaged]": "on: [nothing_salvaged, truncated]",
        },
    )
    cut = report(items(5))[:1500]
    provider.script.extend([chat(cut, "length"), chat(cut, "length"), chat(report(items(5)))])
    outcome = Executor(store, connector_for=connector_for).run(instruction)
    assert [r.body["max_tokens"] for r in provider.requests] == [4096, 10000, 10000]
    assert "It was cut off before it ended" in asked(provider, 1)
    assert (outcome.status, outcome.kept, outcome.best_attempt) == ("ok", 5, 3)


def test_a_truncated_report_that_filled_the_cap_is_not_retried(
    project: Project, store: Store
) -> None:
    # The bundled definition keeps a cut-off answer without asking again.
    assert replay_executor(store).run(project.instruction()).attempts == 1
    # Asked to retry truncated answers, under the cap of 8 the cut-off 8th is missing...
    asked = project.instruction(**{"on: [nothing_salvaged]": "on: [nothing_salvaged, truncated]"})
    assert replay_executor(store).run(asked).attempts == 2
    # ... but the fixture's 7 complete items fill a cap of 7: nothing a retry could win back.
    filled = project.instruction(**{"max_items: 8": "max_items: 7"})
    assert filled.retry.attempts == 2
    assert replay_executor(store).run(filled).attempts == 1


def test_a_refused_call_fails_the_run_with_the_error_and_no_report(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction(**{"on: [nothing_salvaged]": "on: [provider_error]"})
    provider.script.append(
        answer(401, {"error": {"message": f"bad key {SECRET}", "code": "invalid_api_key"}})
    )
    outcome = Executor(store, connector_for=connector_for).run(instruction)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "HTTP 401" in outcome.error
    assert SECRET not in outcome.error
    assert len(provider.requests) == 1  # a refused key is never worth another attempt
    detail = store.get_run(outcome.run_id)
    assert (detail.status, detail.report) == ("failed", None)
    (attempt,) = detail.attempts
    assert attempt.raw_output is None
    assert attempt.http_status == 401
    assert attempt.provider_error is not None
    assert SECRET not in attempt.provider_error


def test_an_error_inside_a_successful_response_is_retried_when_asked(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction(**{"on: [nothing_salvaged]": "on: [provider_error]"})
    upstream = answer(200, {"error": {"message": "upstream model crashed", "code": 502}})
    provider.script.extend([upstream, chat(report(items(2)))])
    outcome = Executor(store, connector_for=connector_for).run(instruction)
    assert (outcome.status, outcome.attempts, outcome.best_attempt) == ("ok", 2, 2)
    assert "upstream model crashed" in asked(provider, 1)


def test_output_with_no_usable_item_fails_the_run_but_keeps_every_reject(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction(**{"attempts: 2\n": "attempts: 1\n"})
    bad = items(2)
    for item in bad:
        item["candidate"] = "not-a-workstream"
    provider.script.extend([chat(report(bad))])
    outcome = Executor(store, connector_for=connector_for).run(instruction)
    assert outcome.status == "failed"
    assert outcome.error == "nothing usable: all 2 candidate(s) quarantined (allow_list 2)"
    detail = store.get_run(outcome.run_id)
    assert detail.report is not None
    assert detail.report.items == []
    assert [q.review_status for q in detail.quarantined] == ["pending", "pending"]


# --- crashes and database failures -------------------------------------------------------------


def test_a_crash_right_after_the_raw_output_is_stored_keeps_it_and_leaves_the_run_unfinished(
    project: Project, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # what a killed process looks like from inside

    monkeypatch.setattr(attempt_loop, "salvage", crash)
    with pytest.raises(KeyboardInterrupt):
        replay_executor(store).run(project.instruction())
    (run,) = store.list_runs(instruction_id="daily-triage", limit=1)
    detail = store.get_run(run.id)
    assert detail.status == "running"
    assert detail.finished_at is None
    assert detail.attempts[0].raw_output == (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    assert detail.report is None
    assert detail.quarantined == []


def test_a_bug_in_salvage_is_recorded_as_a_failed_run_and_surfaces(
    project: Project, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("scanner bug")

    monkeypatch.setattr(attempt_loop, "salvage", broken)
    with pytest.raises(RuntimeError, match="scanner bug"):
        replay_executor(store).run(project.instruction())
    (run,) = store.list_runs(instruction_id="daily-triage", limit=1)
    detail = store.get_run(run.id)
    assert detail.status == "failed"
    assert detail.error == "internal error: RuntimeError: scanner bug"
    assert detail.attempts[0].raw_output is not None


def test_a_database_error_while_persisting_leaves_no_half_written_report(
    project: Project, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = run_records.quarantine_records

    def unstorable(*args: Any, **kwargs: Any) -> list[Any]:
        records = real(*args, **kwargs)
        # Not JSON: the write fails inside the transaction, after the report row.
        return [type(r)(**{**_as_dict(r), "repaired": object()}) for r in records]

    monkeypatch.setattr(run_records, "quarantine_records", unstorable)
    with pytest.raises(StoreError, match="finish run"):
        replay_executor(store).run(project.instruction())
    (run,) = store.list_runs(instruction_id="daily-triage", limit=1)
    detail = store.get_run(run.id)
    assert detail.report is None
    assert detail.quarantined == []
    assert detail.status == "failed"
    assert detail.error is not None
    assert detail.error.startswith("internal error: StoreError")
    assert detail.attempts[0].raw_output is not None


def _as_dict(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


# --- sinks and logs ----------------------------------------------------------------------------


def test_sinks_get_the_stored_report_and_a_failing_one_is_recorded_and_redelivered(
    project: Project, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    instruction = project.instruction(
        **{
            "\nretry:\n": f"""
sinks:
  - kind: json_file
    path: {out}/{{instruction}}-{{run_id}}.json
  - kind: callable
    callable: _executor_sinks:flaky
retry:
"""
        },
    )
    monkeypatch.setattr(sink_targets, "FAIL", True)
    executor = replay_executor(
        store, sinks_for=lambda spec: build_sinks(spec.sinks, client=httpx.Client())
    )
    outcome = executor.run(instruction)

    assert [(d.kind, d.ok) for d in outcome.deliveries] == [
        ("json_file", True),
        ("callable", False),
    ]
    written = json.loads((out / f"daily-triage-{outcome.run_id}.json").read_text(encoding="utf-8"))
    assert written == store.get_report_payload(outcome.run_id)
    assert (written["run_id"], written["partial"], written["status"]) == (
        outcome.run_id,
        True,
        "partial",
    )
    assert [item["rank"] for item in written["items"]] == [1, 2, 3, 4, 5, 6, 7]
    detail = store.get_run(outcome.run_id)
    assert detail.sink_status == "failed"
    assert detail.report is not None
    assert len(detail.report.items) == 7

    monkeypatch.setattr(sink_targets, "FAIL", False)
    with httpx.Client() as client:
        again = deliver_report(store, outcome.run_id, build_sinks(instruction.sinks, client=client))
    assert [d.ok for d in again] == [True, True]
    assert sink_targets.RECEIVED[-1] == written
    detail = store.get_run(outcome.run_id)
    assert detail.sink_status == "delivered"
    # The failed delivery was tried again in place (its second attempt); the one that had
    # arrived was sent again as a new delivery.
    assert [(d.kind, d.status, d.attempts, d.error) for d in detail.deliveries] == [
        ("json_file", "delivered", 1, None),
        ("callable", "delivered", 2, None),
        ("json_file", "delivered", 1, None),
    ]


def test_every_log_line_of_a_run_carries_its_id_and_no_secret(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction()
    provider.script.extend([chat(report(items(2)))])
    with capture_logs(processors=[merge_contextvars]) as logs:
        outcome = Executor(store, connector_for=connector_for).run(instruction)
    events = [entry["event"] for entry in logs]
    assert events[0] == "run.started"
    assert events[-1] == "run.finished"
    assert {"attempt.stored", "attempt.salvaged"} <= set(events)
    assert all(entry.get("run_id") == outcome.run_id for entry in logs)
    assert all(entry.get("instruction") == "daily-triage" for entry in logs)
    assert SECRET not in json.dumps(logs, default=str)
    finished = logs[-1]
    assert (finished["status"], finished["kept"], finished["quarantined"]) == ("ok", 2, 0)


def test_the_executors_triggers_are_the_ones_the_store_accepts(store: Store) -> None:
    now = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    for trigger in Trigger:
        run_id = store.start_run(
            instruction_id="x", definition_sha256="d", trigger=trigger, scheduled_for=None, now=now
        )
        assert store.get_run(run_id).trigger is trigger


# --- heartbeats and deadlines --------------------------------------------------------------------


def test_a_run_beats_while_the_provider_is_slow(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    seen: list[tuple[Any, Any]] = []

    def hold_until_beaten(request: Recorded) -> None:
        # The reply waits for the run's heartbeat to move (or gives up after 30 s, and
        # the assertion below fails): the executor must beat while a call is pending.
        (run,) = store.list_runs(limit=1)
        give_up = time.monotonic() + 30.0
        detail = store.get_run(run.id)
        while not _beaten(detail) and time.monotonic() < give_up:
            time.sleep(0.02)
            detail = store.get_run(run.id)
        seen.append((detail.started_at, detail.heartbeat_at))

    provider.on_request = hold_until_beaten
    provider.script.append(chat(report(items(2))))
    executor = Executor(store, connector_for=connector_for, heartbeat_seconds=0.05)
    outcome = executor.run(project.instruction())
    assert outcome.status == "ok"
    ((started_at, heartbeat_at),) = seen
    assert heartbeat_at > started_at  # beaten during the call, before any attempt was stored


def _beaten(detail: RunDetail) -> bool:
    return detail.heartbeat_at is not None and detail.heartbeat_at > detail.started_at


def test_the_run_deadline_stops_asking_again_and_says_so(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    now = [1000.0]

    def late(request: Recorded) -> None:
        now[0] += 31.0  # this call took 31 s of a 30 s deadline

    instruction = project.instruction(**{"deadline_seconds: 600": "deadline_seconds: 30"})
    provider.on_request = late
    provider.script.extend([chat("I could not produce the report."), chat(report(items(2)))])
    executor = Executor(
        store,
        connector_for=connector_for,
        monotonic=lambda: now[0],
    )
    outcome = executor.run(instruction)
    assert len(provider.requests) == 1  # the retry nothing_salvaged asked for never happened
    assert outcome.status == "failed"
    assert outcome.error == (
        "deadline: the run's 30 s deadline passed; "
        "nothing usable: no items list was found in the output"
    )
    assert store.get_run(outcome.run_id).error == outcome.error


def test_a_hanging_provider_ends_the_run_failed_at_its_deadline(
    project: Project, store: Store, provider: ScriptedServer
) -> None:
    server = provider
    # A real local server that accepts the request and never answers. The connector's
    # own limits (120 s per call, 300 s overall) are far longer: the run's 2 s deadline
    # is what ends the call, and no second attempt starts after it.
    server.script.extend([Scripted(delay=30.0), Scripted(delay=30.0)])
    instruction = project.instruction(**{"deadline_seconds: 600": "deadline_seconds: 2"})
    with httpx.Client() as client:
        connector_for = openai_connector_for(
            client, server.base_url, key=SECRET, timeout_seconds=120.0, deadline_seconds=300.0
        )
        executor = Executor(store, connector_for=connector_for)
        began = time.monotonic()
        with capture_logs(processors=[merge_contextvars]) as logs:
            outcome = executor.run(instruction)
        elapsed = time.monotonic() - began

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("deadline: the run's 2 s deadline passed; "), outcome.error
    assert 2.0 <= elapsed < 4.0, elapsed
    assert len(server.requests) == 1
    detail = store.get_run(outcome.run_id)
    assert (detail.status, detail.error) == ("failed", outcome.error)
    assert [a.provider_error is not None for a in detail.attempts] == [True]
    assert [e["event"] for e in logs if e["event"] == "run.deadline"] == ["run.deadline"]


def test_a_scheduled_run_claims_its_fire_and_renders_the_fire_date(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    fire = datetime(2031, 2, 3, 5, 20, tzinfo=UTC)  # not today, whenever the test runs
    provider.script.extend([chat(report(items(2)))])
    claimed: list[str] = []
    executor = Executor(store, connector_for=connector_for, on_claimed=claimed.append)

    outcome = executor.run(project.instruction(), trigger=Trigger.SCHEDULE, scheduled_for=fire)

    assert claimed == [outcome.run_id]
    (request,) = provider.requests
    assert "Today is 2031-02-03." in request.body["messages"][-1]["content"]
    detail = store.get_run(outcome.run_id)
    assert (detail.trigger, detail.scheduled_for, detail.fire_attempt) == ("schedule", fire, 1)
    with pytest.raises(DuplicateFireError):
        executor.run(project.instruction(), trigger=Trigger.SCHEDULE, scheduled_for=fire)
    assert claimed == [outcome.run_id]  # the duplicate claimed nothing and called nothing
    assert len(provider.requests) == 1


def test_a_retry_of_an_interrupted_fire_is_its_second_fire_attempt(
    project: Project, store: Store
) -> None:
    fire = datetime(2031, 2, 3, 5, 20, tzinfo=UTC)
    first = store.start_run(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger=Trigger.CATCH_UP,
        scheduled_for=fire,
        now=fire,
    )
    assert store.mark_interrupted(first, now=fire, error="stopped")

    outcome = replay_executor(store).run(
        project.instruction(), trigger=Trigger.CATCH_UP, scheduled_for=fire, retry_of=first
    )

    detail = store.get_run(outcome.run_id)
    assert (detail.status, detail.fire_attempt, detail.retry_of) == ("partial", 2, first)
