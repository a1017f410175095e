"""What a run's attempts become in the store (salvagelane.runtime.run_records), decided
without a store: the report, the quarantine, the status, the error and the outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from salvagelane.connectors import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.errors import ProviderError
from salvagelane.runtime.plan import plan_run
from salvagelane.runtime.run_records import (
    StoredAttempt,
    attempt_outcome,
    completion_fields,
    failed_call_fields,
    failed_outcome,
    reported_outcome,
    settle,
)
from salvagelane.vocabulary import ItemOrigin, ReviewStatus, RunStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def instruction() -> Instruction:
    return load_instruction(ROOT / "instructions" / "daily-triage.yaml")


def item(number: int, **changes: object) -> dict[str, object]:
    data = json.loads((ROOT / "tests/fixtures/daily-triage-truncated/expected.json").read_text())
    first = dict(data["items"][0]["data"])
    first.update({"rank": number}, **changes)
    return first


def answered(
    instruction: Instruction, number: int, text: str, finish: FinishReason = FinishReason.STOP
) -> StoredAttempt:
    completion = Completion(
        text=text,
        finish_reason=finish,
        native_finish_reason=str(finish),
        usage={"prompt_tokens": 10, "completion_tokens": 20},
        model="model-x",
        request_id=None,
        latency_seconds=0.1,
        http_status=200,
    )
    plan = plan_run(instruction)
    result = plan.salvage(completion)
    return StoredAttempt(
        number=number, attempt_id=f"a{number}", completion=completion, result=result
    )


def report(*items: object, summary: str = "s") -> str:
    return json.dumps({"summary": summary, "recommendations": list(items)})


def failed(number: int, error: str) -> StoredAttempt:
    return StoredAttempt(number=number, attempt_id=f"a{number}", provider_error=error)


def test_no_attempt_is_a_failure_that_says_so(instruction: Instruction) -> None:
    settled = settle(instruction, [])
    assert (settled.status, settled.error, settled.report, settled.chosen) == (
        RunStatus.FAILED,
        "no attempt was made",
        None,
        None,
    )


def test_only_failed_calls_fail_with_the_last_provider_error(instruction: Instruction) -> None:
    settled = settle(instruction, [failed(1, "503 first"), failed(2, "429 second")])
    assert settled.status is RunStatus.FAILED
    assert settled.error == "429 second"
    assert settled.quarantined == ()


def test_a_passed_deadline_prefixes_the_error(instruction: Instruction) -> None:
    settled = settle(instruction, [failed(1, "no answer")], deadline_passed=True)
    assert settled.error is not None
    assert settled.error.startswith("deadline: the run's ")
    assert settled.error.endswith("deadline passed; no answer")


def test_a_clean_answer_is_an_ok_report_of_model_items(instruction: Instruction) -> None:
    attempt = answered(instruction, 1, report(item(1), item(2)))
    settled = settle(instruction, [attempt])
    assert settled.status is RunStatus.OK
    assert settled.error is None
    assert settled.report is not None
    assert settled.report.attempt_id == "a1"
    assert [i.origin for i in settled.report.items] == [ItemOrigin.MODEL] * 2
    assert [i.source_index for i in settled.report.items] == [0, 1]
    assert settled.report.counts["envelope_issues"] == 0
    outcome = reported_outcome("run-1", instruction, settled, attempts=1)
    assert (outcome.status, outcome.kept, outcome.best_attempt, outcome.quarantined) == (
        RunStatus.OK,
        2,
        1,
        {},
    )


def test_the_best_attempt_is_chosen_and_the_others_quarantine_is_superseded(
    instruction: Instruction,
) -> None:
    broken = item(3, action="panic")
    first = answered(instruction, 1, report(item(1), broken))
    second = answered(instruction, 2, report(item(1), item(2), broken))
    settled = settle(instruction, [first, second])
    assert settled.chosen is second
    assert settled.status is RunStatus.PARTIAL
    statuses = [(q.attempt_id, q.review_status) for q in settled.quarantined]
    assert statuses == [("a1", ReviewStatus.SUPERSEDED), ("a2", ReviewStatus.PENDING)]
    provenance = settled.quarantined[1].provenance
    assert provenance["attempt"] == 2
    assert provenance["model"] == "model-x"
    assert provenance["instruction"] == instruction.id


def test_a_failed_outcome_keeps_the_last_attempts_finish_reason(instruction: Instruction) -> None:
    cut = answered(instruction, 1, '{"summary": "s", "recommendations": [', FinishReason.LENGTH)
    outcome = failed_outcome("run-1", instruction.id, [cut, failed(2, "boom")], "boom")
    assert (outcome.finish_reason, outcome.attempts, outcome.kept) == ("error", 2, 0)
    assert failed_outcome("run-1", instruction.id, [], "x").finish_reason is None
    assert failed_outcome("run-1", instruction.id, [cut], "x").finish_reason == "length"


def test_attempt_fields_say_what_was_stored(instruction: Instruction) -> None:
    request = CompletionRequest(system="s", user="u", max_output_tokens=100, temperature=0)
    attempt = answered(instruction, 1, report(item(1)))
    assert attempt.completion is not None
    fields = completion_fields(instruction, request, attempt.completion, redactions=2)
    assert fields["raw_output"] == attempt.completion.text
    assert fields["request"]["redactions"] == [{"kind": "secret", "count": 2}]
    assert fields["max_raw_bytes"] == instruction.guardrails.max_output_bytes
    error = ProviderError("429 slow down", status=429)
    failed_fields = failed_call_fields(instruction, request, error, "429 slow down")
    assert (failed_fields["raw_output"], failed_fields["http_status"]) == (None, 429)
    assert failed_fields["finish_reason"] == "error"
    assert attempt.result is not None
    assert attempt_outcome(attempt.result, None)["retry_trigger"] is None
