"""The figures and the verdict of ``salvagelane eval`` (:mod:`salvagelane.core.evaluation`)."""

from __future__ import annotations

import pytest

from salvagelane.core.evaluation import Comparison, Side, totals, verdict


def side(status: str = "ok", kept: int = 7, **more: object) -> Side:
    return Side(status=status, kept=kept, **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("baseline", "candidate", "change"),
    [
        pytest.param(side(), side(), "same", id="same"),
        pytest.param(side("partial", 6), side("ok", 7), "better", id="more-kept"),
        pytest.param(side("ok", 7), side("partial", 6), "worse", id="fewer-kept"),
        pytest.param(side("failed", 0), side("partial", 1), "better", id="no-longer-fails"),
        pytest.param(side("partial", 9), side("error", 0, error="503"), "worse", id="call-failed"),
        pytest.param(
            side("partial", 6, quarantined={"schema": 2}),
            side("partial", 6, quarantined={"schema": 1}),
            "better",
            id="fewer-quarantined",
        ),
    ],
)
def test_the_change_of_one_fixture(baseline: Side, candidate: Side, change: str) -> None:
    assert (
        Comparison(fixture="f", instruction="i", baseline=baseline, candidate=candidate).change
        == change
    )


def test_a_skipped_fixture_counts_for_neither_side() -> None:
    skipped = Comparison(
        fixture="old", instruction="i", baseline=side(), candidate=None, skipped="no prompt.json"
    )
    judged = verdict([skipped])
    assert skipped.change == "skipped"
    assert (judged.baseline.fixtures, judged.candidate.fixtures, judged.worse) == (0, 0, False)


def test_totals_sum_each_side_and_know_cost_only_when_every_fixture_does() -> None:
    summed = totals(
        [
            side(
                kept=3,
                quarantined={"schema": 1},
                prompt_tokens=10,
                completion_tokens=5,
                cost=0.5,
                latency_seconds=1.0,
            ),
            side(
                "failed",
                0,
                quarantined={"schema": 2, "truncated": 1},
                prompt_tokens=10,
                completion_tokens=0,
                cost=None,
                latency_seconds=2.0,
            ),
        ]
    )
    assert (summed.fixtures, summed.failed, summed.kept, summed.tokens) == (2, 1, 3, 25)
    assert summed.quarantined == {"schema": 3, "truncated": 1}
    assert summed.cost is None
    assert summed.latency_seconds == 3.0


@pytest.mark.parametrize(
    ("pairs", "reasons"),
    [
        pytest.param([(side(kept=5), side(kept=6))], [], id="better"),
        pytest.param(
            [(side(kept=7), side(kept=8)), (side(kept=7), side(kept=5))],
            ["the candidate kept 13 item(s), the baseline 14"],
            id="fewer-in-total",
        ),
        pytest.param(
            [(side(kept=1), side("failed", 0)), (side("failed", 0), side(kept=2))],
            [],
            id="as-many-failed-and-more-kept",
        ),
        pytest.param(
            [(side(kept=1), side("error", 0, error="x")), (side(kept=1), side(kept=3))],
            ["the candidate failed 1 fixture(s), the baseline 0"],
            id="more-failed",
        ),
    ],
)
def test_the_verdict_is_worse_on_fewer_items_or_more_failures(
    pairs: list[tuple[Side, Side]], reasons: list[str]
) -> None:
    comparisons = [
        Comparison(fixture=str(n), instruction="i", baseline=b, candidate=c)
        for n, (b, c) in enumerate(pairs)
    ]
    judged = verdict(comparisons)
    assert list(judged.reasons) == reasons
    assert judged.worse is bool(reasons)


def test_a_side_reads_back_as_written() -> None:
    written = side(
        "partial",
        6,
        quarantined={"schema": 1},
        prompt_tokens=3,
        completion_tokens=4,
        cost=0.01,
        latency_seconds=0.5,
    )
    assert Side.from_json(written.to_json()) == written
