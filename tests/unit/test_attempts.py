"""Deciding between attempts: retry triggers, token budgets, correction prompts, best attempt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from salvagelane.core.attempts import (
    RetryCause,
    Scored,
    best_attempt,
    correction_prompt,
    next_token_budget,
    retry_cause,
    wants_retry,
)
from salvagelane.core.finish import FinishReason
from salvagelane.core.records import SalvageResult
from salvagelane.definitions import RetryOn
from tests.support.builders import run, triage_item, triage_schema


def report(*items: Any) -> str:
    return json.dumps({"summary": "s", "recommendations": list(items)})


def salvaged(raw: str, finish_reason: str | None = None, **limits: Any) -> SalvageResult:
    return run(
        raw, ("recommendations",), schema=triage_schema(), finish_reason=finish_reason, **limits
    )


GOOD = [triage_item(rank=n) for n in (1, 2, 3)]


@pytest.mark.parametrize(
    ("raw", "finish", "max_items", "expected"),
    [
        pytest.param(report(*GOOD), "stop", 7, None, id="complete-report"),
        pytest.param(
            "I cannot help with that.", "stop", 7, RetryCause.NOTHING_SALVAGED, id="prose"
        ),
        pytest.param(report(), "stop", 7, RetryCause.NOTHING_SALVAGED, id="empty-list"),
        pytest.param(
            report(triage_item(confidence="high")),
            "stop",
            7,
            RetryCause.NOTHING_SALVAGED,
            id="every-item-rejected",
        ),
        pytest.param(report(*GOOD)[:-40], "length", 7, RetryCause.TRUNCATED, id="cut-below-cap"),
        pytest.param(
            report(*GOOD), "length", 7, RetryCause.TRUNCATED, id="length-finish-below-cap"
        ),
        pytest.param(report(*GOOD), "length", 3, None, id="cut-but-cap-filled"),
        pytest.param(report(*GOOD), "length", None, RetryCause.TRUNCATED, id="cut-no-cap"),
    ],
)
def test_retry_trigger(
    raw: str, finish: str, max_items: int | None, expected: RetryCause | None
) -> None:
    assert retry_cause(salvaged(raw, finish), max_items=max_items) is expected


@pytest.mark.parametrize(
    ("current", "finish", "factor", "ceiling", "expected"),
    [
        (1000, FinishReason.LENGTH, 2.0, 4000, 2000),
        (3000, FinishReason.LENGTH, 2.0, 4000, 4000),  # capped
        (4000, FinishReason.LENGTH, 2.0, 4000, 4000),
        (1000, FinishReason.STOP, 2.0, 4000, 1000),  # the budget was not the problem
        (1000, None, 2.0, 4000, 1000),
        (1000, FinishReason.LENGTH, 1.5, 4000, 1500),
        (5000, FinishReason.LENGTH, 2.0, 4000, 5000),  # never shrinks below the current budget
    ],
)
def test_next_token_budget(
    current: int, finish: FinishReason | None, factor: float, ceiling: int, expected: int
) -> None:
    assert (
        next_token_budget(current, finish_reason=finish, factor=factor, ceiling=ceiling) == expected
    )


def test_correction_names_each_rejected_item_with_path_expected_and_received() -> None:
    result = salvaged(
        report(triage_item(rank=1), triage_item(rank=2, confidence="very"), {"rank": 3})
    )
    text = correction_prompt(result, finish_reason=FinishReason.STOP, max_items=7)
    lines = text.splitlines()
    assert lines[0] == "Your previous answer could not be used as it was."
    assert any(
        line.startswith("- item 2, schema at $.confidence: expected") and 'received "very"' in line
        for line in lines
    ), text
    assert (
        "- item 3, schema at $.candidate: expected property 'candidate' (required), "
        "received nothing" in lines
    )
    assert "(at most 7 items)" in lines[-1]
    assert "If uncertain, emit fewer well-formed items rather than more." in lines[-1]
    assert "cut off" not in text


def test_correction_after_truncation_asks_for_a_shorter_closed_report() -> None:
    result = salvaged(report(*GOOD)[:-60], "length")
    text = correction_prompt(result, finish_reason=FinishReason.LENGTH)
    assert "It was cut off before it ended (2 complete item(s) survived)" in text


def test_correction_without_items_list_says_so() -> None:
    text = correction_prompt(salvaged("Sorry, no."), finish_reason=FinishReason.STOP)
    assert "No list of items was found where the output contract puts it." in text


def test_correction_for_a_provider_error_quotes_the_error_only() -> None:
    text = correction_prompt(None, finish_reason=None, provider_error="HTTP 200: upstream crashed")
    assert "The provider reported an error: HTTP 200: upstream crashed." in text


def test_correction_lists_at_most_twelve_errors_and_counts_the_rest() -> None:
    bad = [triage_item(rank=n, confidence="x") for n in range(1, 21)]
    text = correction_prompt(salvaged(report(*bad), max_items=40), finish_reason=FinishReason.STOP)
    assert sum(line.startswith("- item") for line in text.splitlines()) == 12
    assert "- and 8 more rejected item(s)" in text


def test_received_values_are_shortened() -> None:
    long = "z" * 500
    text = correction_prompt(
        salvaged(report(triage_item(action=long))), finish_reason=FinishReason.STOP
    )
    (line,) = [line for line in text.splitlines() if line.startswith("- item 1")]
    assert "z" * 40 in line
    assert long not in line
    assert len(line.split("received ", 1)[1]) <= 80


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        pytest.param([("prose", "stop"), ("good", "stop")], 2, id="ok-beats-failed"),
        pytest.param([("good", "stop"), ("prose", "stop")], 1, id="first-ok-kept"),
        pytest.param([("cut", "length"), ("one-bad", "stop")], 2, id="more-items-win"),
        pytest.param([("good", "stop"), ("good", "stop")], 2, id="tie-goes-to-latest"),
    ],
)
def test_best_attempt(attempts: list[tuple[str, str]], expected: int) -> None:
    raws = {
        "prose": "No.",
        "good": report(*GOOD),
        "cut": report(*GOOD)[:-60],
        "one-bad": report(*GOOD, triage_item(rank=4, confidence="x")),
    }
    scored = [
        Scored(number=n, result=salvaged(raws[kind], finish))
        for n, (kind, finish) in enumerate(attempts, 1)
    ]
    chosen = best_attempt(scored)
    assert chosen is not None
    assert chosen.number == expected


def test_best_attempt_of_nothing_is_none() -> None:
    assert best_attempt([]) is None


@pytest.mark.parametrize(
    ("trigger", "enabled", "left", "expected"),
    [
        (RetryCause.TRUNCATED, {"truncated"}, 1, True),
        (RetryCause.TRUNCATED, {"nothing_salvaged"}, 1, False),
        (RetryCause.TRUNCATED, {"truncated"}, 0, False),
        (None, {"truncated"}, 3, False),
    ],
)
def test_wants_retry(
    trigger: RetryCause | None, enabled: set[str], left: int, expected: bool
) -> None:
    assert wants_retry(trigger, enabled=enabled, attempts_left=left) is expected


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_an_output_over_the_byte_cap_is_its_own_trigger(finish: str) -> None:
    # Not nothing_salvaged (which the example definition retries): the same request tends
    # to bring the same flood, so it is retried only when retry.on lists oversize.
    result = salvaged(report(*GOOD), finish, max_bytes=100)
    trigger = retry_cause(result, max_items=7)
    assert trigger is RetryCause.OVERSIZE
    assert not wants_retry(trigger, enabled={"nothing_salvaged", "truncated"}, attempts_left=1)
    assert wants_retry(trigger, enabled={"oversize"}, attempts_left=1)
    assert retry_cause(salvaged(report(*GOOD), finish, max_bytes=10_000), max_items=7) in (
        None,
        RetryCause.TRUNCATED,
    )


def test_correction_after_an_oversize_output_asks_for_a_much_shorter_one() -> None:
    text = correction_prompt(
        salvaged(report(*GOOD), max_bytes=100), finish_reason=FinishReason.STOP
    )
    assert "It was over the size limit, so none of it was read." in text
    assert "- the output, oversize at $: expected at most 100 bytes of output" in text
    assert "No list of items was found" not in text  # nothing was looked for


def test_every_retry_trigger_can_be_listed_in_a_definition(repo_root: Path) -> None:
    schema = json.loads((repo_root / "schemas" / "instruction.schema.json").read_text("utf-8"))
    listed = schema["properties"]["retry"]["properties"]["on"]["items"]["enum"]
    assert {str(t) for t in RetryCause} == {str(o) for o in RetryOn} == set(listed)
