"""The pure halves of run health (store/health.py) and of the review page (ui/views.py,
ui/security.py): streaks, rates, per-day buckets, numbered raw lines, chart bars, access."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.store.health import (
    HealthRun,
    by_day,
    clean,
    days_between,
    rate,
    streak_of,
    tokens_of,
)
from salvagelane.ui.security import Access, is_loopback
from salvagelane.ui.views import raw_lines, stacked
from salvagelane.vocabulary import RunStatus, Trigger

T0 = datetime(2026, 11, 21, 5, 20, tzinfo=UTC)


def run(
    status: str = "ok",
    trigger: str = "schedule",
    *,
    quarantined: int = 0,
    approved: int = 0,
    back: int = 0,
) -> HealthRun:
    return HealthRun(
        id=f"run-{back}",
        trigger=Trigger(trigger),
        scheduled_for=T0 - timedelta(days=back),
        created_at=T0 - timedelta(days=back),
        status=RunStatus(status),
        quarantined=quarantined,
        operator_approved=approved,
        finish_reason="stop",
    )


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (run(), True),
        (run(trigger="catch_up"), True),
        (run(trigger="manual"), False),
        (run(trigger="replay"), False),
        (run("partial", quarantined=1), False),
        (run("ok", approved=1), False),  # an operator had to repair it
        (run("failed"), False),
        (run("missed"), False),
        (run("interrupted"), False),
    ],
)
def test_what_counts_as_a_clean_run(candidate: HealthRun, expected: bool) -> None:
    assert clean(candidate) is expected


@pytest.mark.parametrize(
    ("statuses", "count", "broken_at"),
    [
        ([], 0, None),
        (["ok", "ok", "ok"], 3, None),
        (["ok", "ok", "missed", "ok"], 2, 2),
        (["running", "ok", "interrupted"], 1, 2),  # a running run is skipped
        (["partial", "ok"], 0, 0),
    ],
)
def test_the_streak_counts_from_the_newest(
    statuses: list[str], count: int, broken_at: int | None
) -> None:
    runs = [run(status, back=n) for n, status in enumerate(statuses)]

    streak = streak_of(runs)

    assert streak.count == count
    assert (streak.broken_by and streak.broken_by.id) == (
        None if broken_at is None else f"run-{broken_at}"
    )
    if count:
        assert streak.since == T0 - timedelta(days=count if statuses[0] == "running" else count - 1)


def test_the_streak_reads_no_further_than_it_must() -> None:
    read = []

    def runs() -> object:
        for n in range(1000):
            read.append(n)
            yield run("ok" if n < 5 else "failed", back=n)

    assert streak_of(runs()).count == 5  # type: ignore[arg-type]
    assert read == list(range(6))


def test_rates_buckets_and_tokens() -> None:
    assert rate(1, 3) == 0.3333
    assert rate(0, 0) is None
    assert by_day([("2026-11-21", "schema", 2), ("2026-11-20", "truncated", 1),
                   ("2026-11-21", "schema", 3), ("2026-11-21", "allow_list", 1)]) == {
        "2026-11-20": {"truncated": 1},
        "2026-11-21": {"allow_list": 1, "schema": 5},
    }  # fmt: skip
    late = datetime(2026, 11, 21, 23, 30, tzinfo=UTC)
    east = late.astimezone(ZoneInfo("Asia/Tokyo"))  # the next day there
    tokens = tokens_of(
        [
            (late, {"prompt_tokens": 10, "completion_tokens": 5}),
            (east, {"prompt_tokens": 1, "completion_tokens": None}),
            (late, None),
            (late, {"prompt_tokens": True, "completion_tokens": -3}),  # not counts
        ]
    )
    assert list(tokens) == ["2026-11-21"]  # bucketed by the UTC day
    day = tokens["2026-11-21"]
    assert (day.prompt, day.completion, day.total, day.attempts, day.unreported) == (
        11,
        5,
        16,
        4,
        2,
    )
    assert days_between(late - timedelta(days=2), late) == [
        "2026-11-19",
        "2026-11-20",
        "2026-11-21",
    ]


def test_raw_lines_number_and_mark_the_span() -> None:
    lines = raw_lines('{"items": [\n  {"a": 1},\n  ', '{"a": \x1b[2J\n"x"}', "\n]")

    assert [line.number for line in lines] == [1, 2, 3, 4, 5]
    assert [line.marked for line in lines] == [False, False, True, True, False]
    third = lines[2]
    assert [(s.text, s.marked) for s in third.segments] == [("  ", False), ('{"a": \\x1b[2J', True)]
    assert [(s.text, s.marked) for s in lines[3].segments] == [('"x"}', True)]


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_raw_lines_keep_every_character_in_order(before: str, span: str, after: str) -> None:
    from salvagelane.safe_text import block

    lines = raw_lines(before, span, after)

    shown = "\n".join("".join(s.text for s in line.segments) for line in lines)
    assert shown == block(before) + block(span) + block(after)
    assert "".join(s.text for line in lines for s in line.segments if s.marked) == block(
        span
    ).replace("\n", "")


def test_stacked_bars_scale_to_the_tallest_day() -> None:
    chart = stacked(
        ["2026-11-20", "2026-11-21"],
        {"2026-11-20": {"schema": 1}, "2026-11-21": {"schema": 2, "truncated": 2}},
    )

    assert chart.peak == 4
    assert chart.keys == ("truncated", "schema")  # the guardrails' order
    heights = {(bar.x, bar.key): bar.height for bar in chart.bars}
    assert heights == {(0, "schema"): 30.0, (18, "truncated"): 60.0, (18, "schema"): 60.0}
    assert stacked(["2026-11-21"], {}).empty


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("127.1.2.3", True), ("0.0.0.0", False), ("192.0.2.1", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("header", "allowed"),
    [("127.0.0.1:8765", True), ("localhost:8765", True), ("[::1]:8765", True),
     ("evil.example:8765", False), ("evil.example", False), (None, False),
     ("127.0.0.1.evil.example", False)],
)  # fmt: skip
def test_on_loopback_only_loopback_hosts_are_answered(header: str | None, allowed: bool) -> None:
    assert Access(token="t", loopback=True).host_allowed(header) is allowed
    assert Access(token="t", loopback=False).host_allowed(header) is True


def test_the_csrf_token_is_derived_and_not_the_token() -> None:
    one, other = Access(token="a", loopback=True), Access(token="b", loopback=True)
    assert one.csrf() == Access(token="a", loopback=False).csrf()
    assert one.csrf() != other.csrf()
    assert one.csrf() != "a"
