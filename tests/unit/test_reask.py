"""The per-item re-ask's pure core: what is asked, how the follow-up reads, and how its
answer joins the report (:mod:`salvagelane.core.reask`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core.outcome import outcome_of
from salvagelane.core.reask import (
    DEFAULT_REASONS,
    MAX_ITEM_CHARS,
    REASKABLE,
    items_to_reask,
    merge_reask,
    reask_prompt,
)
from salvagelane.core.records import Reason, SalvageResult, Status
from tests.support.builders import assert_partition, run, triage_item, triage_schema


def report(*items: Any) -> str:
    return json.dumps({"summary": "s", "recommendations": list(items)})


def salvaged(raw: str, **limits: Any) -> SalvageResult:
    return run(raw, ("recommendations",), schema=triage_schema(), **limits)


GOOD = [triage_item(rank=n, candidate=f"ws-{n}") for n in range(1, 7)]
BAD_ENUM = triage_item(rank=7, candidate="ws-7", action="panic")
FIXED = triage_item(rank=7, candidate="ws-7")


# --- what is asked ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reasons", "limits", "asked"),
    [
        pytest.param(report(*GOOD, BAD_ENUM), DEFAULT_REASONS, {}, [6], id="one-bad-enum"),
        pytest.param(report(*GOOD), DEFAULT_REASONS, {}, [], id="nothing-rejected"),
        pytest.param(report(BAD_ENUM), DEFAULT_REASONS, {}, [], id="nothing-accepted"),
        pytest.param(report(*GOOD, BAD_ENUM), {Reason.TOO_LONG}, {}, [], id="reason-not-listed"),
        pytest.param(
            report(*GOOD, BAD_ENUM)[:-60], REASKABLE, {}, [], id="only-a-truncated-tail-item"
        ),
        pytest.param(
            report(GOOD[0], BAD_ENUM, *GOOD[1:])[:-60],
            REASKABLE,
            {},
            [1, 6],
            id="truncated-beside-another-reason",
        ),
        pytest.param(
            report(*GOOD[:2], BAD_ENUM, *GOOD[2:]),
            REASKABLE | {Reason.OVER_LIMIT},
            {"max_items": 3},
            [2],
            id="never-over-limit",
        ),
    ],
)
def test_items_to_reask(
    raw: str, reasons: set[Reason], limits: dict[str, Any], asked: list[int]
) -> None:
    result = salvaged(raw, **limits)
    if limits:
        assert Reason.OVER_LIMIT in {q.reason for q in result.quarantined}
    assert [q.index for q in items_to_reask(result, reasons=reasons)] == asked


def test_the_follow_up_lists_only_the_rejected_items_with_their_signal_and_text() -> None:
    raw = report(*GOOD, BAD_ENUM)
    result = salvaged(raw)
    asked = items_to_reask(result)

    prompt = reask_prompt(asked, raw=raw)

    assert "exactly 1 item(s)" in prompt
    assert "1. item 7 of your previous answer: schema at $.action: expected one of" in prompt
    assert 'received "panic"' in prompt
    quoted = prompt.split("its text was (as a JSON string): ", 1)[1]
    assert json.loads(json.loads(quoted)) == BAD_ENUM  # quoted whole, as a JSON string
    assert all(item["candidate"] not in prompt for item in GOOD)


def test_a_long_rejected_item_is_quoted_bounded() -> None:
    long = triage_item(rank=7, candidate="ws-7", action="panic", why="x" * 5000)
    raw = report(*GOOD, long)
    asked = items_to_reask(salvaged(raw, max_string_length=10_000))
    prompt = reask_prompt(asked, raw=raw)
    quoted = json.loads(prompt.split("its text was (as a JSON string): ", 1)[1])
    assert quoted.endswith(" [cut]")
    assert len(quoted) == MAX_ITEM_CHARS + len(" [cut]")


# --- joining the answer -----------------------------------------------------------------------


def test_an_accepted_answer_takes_the_asked_items_place() -> None:
    base = salvaged(report(*GOOD, BAD_ENUM))
    asked = items_to_reask(base)
    answer_raw = report(FIXED)

    merged = merge_reask(base, asked, salvaged(answer_raw))

    assert merged.result.status is Status.OK
    assert [i.data for i in merged.result.items] == [*GOOD, FIXED]
    assert [i.index for i in merged.result.items] == list(range(7))
    (mended,) = merged.accepted
    assert mended.asked == 6
    assert json.loads(answer_raw[mended.item.span.start : mended.item.span.end]) == FIXED
    assert merged.counts() == {"asked": 1, "accepted": 1, "still_quarantined": 0, "extra": 0}
    outcome = outcome_of(merged.result, reasked={6})
    assert [i.origin for i in outcome.items] == ["model"] * 6 + ["reask"]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        pytest.param(report(triage_item(rank=7, confidence=9)), "schema", id="broken-again"),
        pytest.param(report(), "unanswered", id="no-item"),
        pytest.param(report(FIXED, GOOD[0]), "unanswered", id="more-than-asked"),
        pytest.param(report(GOOD[0]), "unanswered", id="repeats-an-accepted-item"),
        pytest.param("I cannot help with that.", "unanswered", id="prose"),
        pytest.param(None, "unanswered", id="the-call-failed"),
    ],
)
def test_an_unmended_item_stays_rejected_with_both_signals(answer: str | None, why: str) -> None:
    base = salvaged(report(*GOOD, BAD_ENUM))
    asked = items_to_reask(base)

    merged = merge_reask(base, asked, None if answer is None else salvaged(answer))

    assert merged.accepted == ()
    assert [i.data for i in merged.result.items] == GOOD
    assert merged.result.status is Status.PARTIAL
    (still,) = merged.still
    assert still.original.reason is Reason.SCHEMA
    (signal,) = still.signals()
    assert signal["reason"] == why
    assert signal["message"]


def test_a_replay_skips_an_asked_item_the_definition_no_longer_rejects() -> None:
    base = salvaged(report(*GOOD, BAD_ENUM))
    merged = merge_reask(base, [None], salvaged(report(FIXED)))
    assert merged.accepted == ()
    assert merged.still == ()
    assert merged.result == base


# --- the invariant ----------------------------------------------------------------------------

ACTIONS = ["start", "continue", "panic"]


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=8),
    second=st.lists(st.sampled_from(ACTIONS), max_size=8),
)
def test_every_candidate_is_kept_once_or_stays_quarantined(
    first: list[str], second: list[str]
) -> None:
    """Whatever the follow-up answers, every candidate of the first answer ends in the
    report exactly once or in the quarantine exactly once; no answer is joined unless
    it was accepted, and nothing is joined when the counts differ."""
    items = [triage_item(rank=n + 1, candidate=f"w{n}", action=a) for n, a in enumerate(first)]
    base = salvaged(report(*items))
    asked = items_to_reask(base)
    answers = [triage_item(rank=90 + n, candidate=f"r{n}", action=a) for n, a in enumerate(second)]

    merged = merge_reask(base, asked, salvaged(report(*answers)))

    assert_partition(merged.result)
    indices = sorted(
        [i.index for i in merged.result.items]
        + [q.index for q in merged.result.quarantined if q.index is not None]
    )
    assert indices == list(range(len(first)))
    if len(second) != len(asked):
        assert merged.accepted == ()
    for mended in merged.accepted:
        position = [q.index for q in asked].index(mended.asked)
        assert mended.item.data == answers[position]
        assert answers[position]["action"] != "panic"
    assert len(merged.accepted) + len(merged.still) == len(asked)
