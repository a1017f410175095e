"""The bound on quarantine records (issue 29.4): past ``Guardrails.max_quarantined`` the
rejected candidates are folded, counted by reason with no record. Folding changes what
is recorded, never a verdict: the same items are accepted, the same counted."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core import Guardrails, ItemSchema, SalvagePolicy, salvage
from salvagelane.core.attempts import correction_prompt
from salvagelane.core.outcome import DifferenceKind, Outcome, compare, outcome_of
from salvagelane.core.records import DEFAULT_MAX_QUARANTINED, SalvageResult
from salvagelane.errors import ConfigurationError

SCHEMA = ItemSchema.compile(
    {
        "type": "object",
        "required": ["id"],
        "properties": {"id": {"type": "integer"}, "tag": {"enum": ["a", "b"]}},
    }
)

# Each kind of candidate a model can write, and what salvage makes of it.
KINDS: dict[str, str] = {
    "good": '{"id": 1}',
    "schema": '{"id": "one"}',
    "not_object": "[1, 2]",
    "malformed": '{"id": 1 "x": 2}',
    "too_deep": '{"id": 1, "n": [[[[[[1]]]]]]}',
}


def report(kinds: list[str], *, cut: bool = False) -> str:
    text = '{"summary": "s", "items": [' + ", ".join(KINDS[kind] for kind in kinds)
    return text + (", " if cut else "]}")


def run(text: str, bound: int, **limits: Any) -> SalvageResult:
    guardrails = Guardrails(max_quarantined=bound, max_depth=4, **limits)
    return salvage(
        text, SalvagePolicy(items_path="items", item_schema=SCHEMA, guardrails=guardrails)
    )


def test_the_default_bound_is_a_thousand_records() -> None:
    assert Guardrails().max_quarantined == DEFAULT_MAX_QUARANTINED == 1000


@pytest.mark.parametrize("bound", [0, -1])
def test_a_bound_below_one_is_refused_by_name(bound: int) -> None:
    with pytest.raises(ConfigurationError, match="max_quarantined must be at least 1"):
        Guardrails(max_quarantined=bound)


@pytest.mark.parametrize(
    ("kinds", "bound", "recorded", "folded"),
    [
        (["good", "schema", "schema"], 5, 2, {}),
        (["good", "schema", "schema"], 2, 2, {}),
        (["good", "schema", "schema", "schema"], 2, 2, {"schema": 1}),
        (
            ["schema", "not_object", "good", "malformed", "schema", "too_deep", "not_object"],
            2,
            2,
            {"malformed": 1, "too_deep": 1, "not_object": 1, "schema": 1},
        ),
        (["schema"] * 50, 1, 1, {"schema": 49}),
    ],
)
def test_records_past_the_bound_are_counted_by_reason(
    kinds: list[str], bound: int, recorded: int, folded: dict[str, int]
) -> None:
    result = run(report(kinds), bound)
    rejected = [kind for kind in kinds if kind != "good"]
    assert len(result.quarantined) == recorded
    assert dict(result.folded) == folded
    # The records are the first rejected candidates, in order, each fully explained.
    assert [q.index for q in result.quarantined] == [
        n for n, kind in enumerate(kinds) if kind != "good"
    ][:recorded]
    assert all("not explained" not in q.error.received for q in result.quarantined)
    counts = result.counts()
    assert counts["quarantined"] == len(rejected) == result.quarantined_total
    assert counts["candidates"] == len(kinds)
    assert sum(counts["by_reason"].values()) == len(rejected)  # type: ignore[union-attr]
    if folded:
        assert counts["folded"] == sum(folded.values())
        assert counts["folded_by_reason"] == folded
    else:
        assert "folded" not in counts
        assert "folded_by_reason" not in counts


def test_items_over_max_items_are_folded_too() -> None:
    result = run(report(["good"] * 12), 3, max_items=4)
    assert (len(result.items), len(result.quarantined)) == (4, 3)
    assert dict(result.folded) == {"over_limit": 5}


def test_a_flood_of_32000_rejected_candidates_keeps_a_thousand_records() -> None:
    result = run(report(["good"] * 3 + ["schema"] * 32_000, cut=True), DEFAULT_MAX_QUARANTINED)
    assert (str(result.status), len(result.items), result.truncated) == ("partial", 3, True)
    assert len(result.quarantined) == 1000
    assert dict(result.folded) == {"schema": 31_000}
    assert result.counts()["candidates"] == 32_003


@settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), max_size=30),
    bound=st.integers(min_value=1, max_value=8),
    cut=st.booleans(),
    max_items=st.none() | st.integers(min_value=0, max_value=6),
)
def test_folding_changes_what_is_recorded_never_a_verdict(
    kinds: list[str], bound: int, cut: bool, max_items: int | None
) -> None:
    text = report(kinds, cut=cut)
    bounded = run(text, bound, max_items=max_items)
    whole = run(text, 10**9, max_items=max_items)
    assert not whole.folded
    assert bounded.status == whole.status
    assert [i.to_json() for i in bounded.items] == [i.to_json() for i in whole.items]
    # The records kept are the first of the unbounded ones, exactly; the rest are counted.
    kept = len(bounded.quarantined)
    assert kept == min(bound, len(whole.quarantined))
    assert [q.to_json() for q in bounded.quarantined] == [
        q.to_json() for q in whole.quarantined[:kept]
    ]
    assert Counter(dict(bounded.folded)) == Counter(str(q.reason) for q in whole.quarantined[kept:])
    assert bounded.counts()["by_reason"] == whole.counts()["by_reason"]
    assert bounded.counts()["quarantined"] == whole.counts()["quarantined"]


def test_the_retry_prompt_counts_the_folded_candidates() -> None:
    result = run(report(["good"] + ["schema"] * 30), 2)
    prompt = correction_prompt(result, finish_reason=None)
    assert "- and 28 more rejected item(s)" in prompt


def test_a_fixture_outcome_records_the_folded_counts_and_a_change_is_a_difference() -> None:
    text = report(["good"] + ["schema"] * 6 + ["not_object"] * 2)
    expected = outcome_of(run(text, 3))
    assert dict(expected.folded) == {"schema": 3, "not_object": 2}
    stored = json.loads(json.dumps(expected.to_json()))
    assert stored["folded"] == {"not_object": 2, "schema": 3}
    assert Outcome.from_json(stored) == expected
    assert compare(expected, outcome_of(run(text, 3))) == []

    wider = outcome_of(run(text, 5))  # two more records, two fewer folded
    kinds = [d.kind for d in compare(expected, wider)]
    assert DifferenceKind.FOLDED in kinds
    folded = next(d for d in compare(expected, wider) if d.kind is DifferenceKind.FOLDED)
    assert folded.message == (
        "folded quarantine changed: not_object 2, schema 3 -> not_object 2, schema 1"
    )


def test_an_outcome_recorded_before_folding_reads_as_nothing_folded() -> None:
    document = outcome_of(run(report(["good", "schema"]), 5)).to_json()
    assert "folded" not in document
    assert dict(Outcome.from_json(document).folded) == {}


@pytest.mark.parametrize("count", [-1, True, "3", 1.5])
def test_an_outcome_with_a_bad_folded_count_is_refused_by_path(count: object) -> None:
    document = outcome_of(run(report(["good", "schema"]), 5)).to_json()
    document["folded"] = {"schema": count}  # type: ignore[index]
    with pytest.raises(ValueError, match=r"folded\.schema"):
        Outcome.from_json(document)
