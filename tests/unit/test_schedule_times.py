"""Fire-time arithmetic: crontab meaning on APScheduler, DST, next fires, catch-up plans."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from salvagelane.cli.tables import render_schedule_table
from salvagelane.definitions import Schedule, load_instruction
from salvagelane.errors import ConfigurationError
from salvagelane.runtime.scheduler import (
    MISSED_LIMIT,
    CatchUpPlan,
    cron_trigger,
    fire_times,
    latest_fire_time,
    newest_fire_times,
    next_fire_time,
    plan_catch_up,
    schedule_table,
)

ROOT = Path(__file__).resolve().parents[2]
BERLIN = ZoneInfo("Europe/Berlin")
SUNDAY = datetime(2025, 6, 1, tzinfo=UTC)  # 2025-06-01 is a Sunday


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type,misc]


def daily(cron: str, timezone: str = "UTC", grace: int = 3600) -> Schedule:
    return Schedule(cron=cron, timezone=timezone, misfire_grace_seconds=grace)


def weekdays_of(cron: str) -> set[str]:
    """The weekday names a schedule fires on over two weeks from a Sunday."""
    fires = fire_times(daily(cron), SUNDAY - timedelta(seconds=1), SUNDAY + timedelta(days=14))
    return {f"{fire:%a}".lower() for fire in fires}


# --- Crontab meaning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "days"),
    [
        ("0 9 * * 1", {"mon"}),
        ("0 9 * * 0", {"sun"}),
        ("0 9 * * 7", {"sun"}),
        ("0 9 * * 1-5", {"mon", "tue", "wed", "thu", "fri"}),
        ("0 9 * * mon-fri", {"mon", "tue", "wed", "thu", "fri"}),
        ("0 9 * * 5-7", {"fri", "sat", "sun"}),
        ("0 9 * * 0,6", {"sat", "sun"}),
        ("0 9 * * */2", {"sun", "tue", "thu", "sat"}),  # crontab: 0,2,4,6
        ("0 9 * * sun", {"sun"}),
        ("0 9 * * 0-7", {"mon", "tue", "wed", "thu", "fri", "sat", "sun"}),
    ],
)
def test_day_of_week_means_what_crontab_means(cron: str, days: set[str]) -> None:
    assert weekdays_of(cron) == days


def test_monday_job_fires_at_nine_on_mondays() -> None:
    fires = fire_times(daily("0 9 * * 1"), SUNDAY, SUNDAY + timedelta(days=16))
    assert fires == [utc(2025, 6, 2, 9), utc(2025, 6, 9, 9), utc(2025, 6, 16, 9)]


def test_day_of_month_or_day_of_week_as_in_crontab() -> None:
    # Both restricted: the 1st of the month OR a Monday, not only Mondays that are the 1st.
    fires = fire_times(daily("0 0 1 * 1"), SUNDAY - timedelta(days=1), utc(2025, 7, 1))
    assert fires == [
        utc(2025, 6, 1),
        utc(2025, 6, 2),
        utc(2025, 6, 9),
        utc(2025, 6, 16),
        utc(2025, 6, 23),
        utc(2025, 6, 30),
        utc(2025, 7, 1),
    ]


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        ("20 5 * * *", utc(2025, 6, 1, 5, 19, 59), utc(2025, 6, 1, 5, 20)),
        ("20 5 * * *", utc(2025, 6, 1, 5, 20), utc(2025, 6, 2, 5, 20)),  # strictly after
        ("*/15 * * * *", utc(2025, 6, 1, 10, 7, 30), utc(2025, 6, 1, 10, 15)),
        ("0 0 1 jan,jul *", utc(2025, 2, 1), utc(2025, 7, 1)),
        ("0 0 29 2 *", utc(2025, 3, 1), utc(2028, 2, 29)),
        ("* * * * * *", utc(2025, 6, 1, 10, 0, 0, 500_000), utc(2025, 6, 1, 10, 0, 1)),
        ("30 20 5 * * *", utc(2025, 6, 1, 5, 20), utc(2025, 6, 1, 5, 20, 30)),
        ("*/10 * * * * *", utc(2025, 6, 1, 5, 20, 11), utc(2025, 6, 1, 5, 20, 20)),
    ],
)
def test_next_fire_time(cron: str, after: datetime, expected: datetime) -> None:
    fire = next_fire_time(daily(cron), after)
    assert fire == expected
    assert fire.utcoffset() == timedelta(0)


def test_next_fire_time_reads_the_cron_in_its_time_zone() -> None:
    # 09:00 in Berlin is 07:00 UTC in summer (CEST) and 08:00 UTC in winter (CET).
    schedule = daily("0 9 * * *", "Europe/Berlin")
    assert next_fire_time(schedule, utc(2025, 6, 1)) == utc(2025, 6, 1, 7)
    assert next_fire_time(schedule, utc(2025, 1, 1)) == utc(2025, 1, 1, 8)


def test_fire_times_is_half_open_and_bounded() -> None:
    schedule = daily("* * * * * *")
    start = utc(2025, 6, 1, 12)
    fires = fire_times(schedule, start, start + timedelta(seconds=3))
    assert fires == [start + timedelta(seconds=n) for n in (1, 2, 3)]
    assert fire_times(schedule, start, start + timedelta(hours=1), limit=5) == [
        *fires,
        start + timedelta(seconds=4),
        start + timedelta(seconds=5),
    ]
    assert fire_times(schedule, start, start) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: next_fire_time(daily("0 9 * * *"), datetime(2025, 6, 1)), "naive datetime"),
        (lambda: fire_times(daily("0 9 * * *"), utc(2025, 1, 1), datetime(2025, 2, 1)), "naive"),
    ],
)
def test_naive_datetimes_are_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (daily("0 25 * * *"), "expected hour values from 0 to 23, got 25"),
        (daily("0 9 * * *", "Mars/Olympus"), "expected an IANA time zone name"),
    ],
)
def test_unusable_schedule_is_a_configuration_error(schedule: Schedule, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        cron_trigger(schedule)


# --- Daylight saving time --------------------------------------------------------------------


def test_berlin_0230_fires_once_on_the_day_the_clocks_skip_it() -> None:
    # 2025-03-30: 02:00 CET jumps to 03:00 CEST, so 02:30 never happens. The fire is not
    # lost: it comes one gap later, at 03:30 CEST (01:30 UTC).
    schedule = daily("30 2 * * *", "Europe/Berlin")
    fires = fire_times(schedule, utc(2025, 3, 28, 12), utc(2025, 4, 1, 12))
    assert fires == [
        utc(2025, 3, 29, 1, 30),  # 02:30 CET
        utc(2025, 3, 30, 1, 30),  # the skipped day: 03:30 CEST
        utc(2025, 3, 31, 0, 30),  # 02:30 CEST
        utc(2025, 4, 1, 0, 30),
    ]
    assert [f"{fire.astimezone(BERLIN):%d %H:%M}" for fire in fires] == [
        "29 02:30",
        "30 03:30",
        "31 02:30",
        "01 02:30",
    ]


def test_berlin_0230_fires_once_on_the_day_the_clocks_repeat_it() -> None:
    # 2025-10-26: 03:00 CEST goes back to 02:00 CET, so 02:30 happens twice; it fires once.
    schedule = daily("30 2 * * *", "Europe/Berlin")
    fires = fire_times(schedule, utc(2025, 10, 24, 12), utc(2025, 10, 27, 12))
    assert fires == [utc(2025, 10, 25, 0, 30), utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]
    assert next_fire_time(schedule, utc(2025, 10, 26, 0, 30)) == utc(2025, 10, 27, 1, 30)


def test_wildcard_jobs_run_through_both_passes_of_a_repeated_hour() -> None:
    # Elapsed-time jobs keep their rhythm: every 30 minutes means 6 fires in 02:00-04:00 CEST.
    schedule = daily("*/30 * * * *", "Europe/Berlin")
    fires = fire_times(schedule, utc(2025, 10, 25, 23, 59), utc(2025, 10, 26, 2, 0))
    assert len(fires) == 5  # 00:00, 00:30, 01:00, 01:30, 02:00 UTC: the 02:xx hour twice
    assert fires == [utc(2025, 10, 26, h, m) for h, m in ((0, 0), (0, 30), (1, 0), (1, 30), (2, 0))]


# --- Catch-up plans --------------------------------------------------------------------------

NOW = utc(2025, 6, 5, 6, 0)  # 40 minutes after the 05:20 fire
DAILY = daily("20 5 * * *", grace=3600)


def plan(
    schedule: Schedule,
    *,
    recorded: set[datetime],
    since: datetime,
    now: datetime = NOW,
    scheduler_since: datetime | None = None,
) -> CatchUpPlan:
    due = newest_fire_times(schedule, after=since, until=now, count=MISSED_LIMIT + 1)
    return plan_catch_up(
        due,
        recorded=recorded,
        now=now,
        grace_seconds=schedule.misfire_grace_seconds,
        scheduler_since=scheduler_since,
    )


@pytest.mark.parametrize(
    ("name", "schedule", "last_recorded", "since", "expected"),
    [
        (
            "within grace: run the newest once",
            DAILY,
            utc(2025, 6, 4, 5, 20),
            NOW - timedelta(days=7),
            CatchUpPlan(catch_up=utc(2025, 6, 5, 5, 20), missed=()),
        ),
        (
            "within grace, two days down: run the newest, record the other as missed",
            DAILY,
            utc(2025, 6, 3, 5, 20),
            NOW - timedelta(days=7),
            CatchUpPlan(catch_up=utc(2025, 6, 5, 5, 20), missed=(utc(2025, 6, 4, 5, 20),)),
        ),
        (
            "outside grace: everything is missed",
            daily("20 5 * * *", grace=600),
            utc(2025, 6, 3, 5, 20),
            NOW - timedelta(days=7),
            CatchUpPlan(catch_up=None, missed=(utc(2025, 6, 4, 5, 20), utc(2025, 6, 5, 5, 20))),
        ),
        (
            "nothing recorded: since bounds the look-back",
            DAILY,
            None,
            NOW - timedelta(days=1),
            CatchUpPlan(catch_up=utc(2025, 6, 5, 5, 20), missed=()),
        ),
        (
            "nothing recorded, a longer look-back",
            DAILY,
            None,
            NOW - timedelta(days=3),
            CatchUpPlan(
                catch_up=utc(2025, 6, 5, 5, 20),
                missed=(utc(2025, 6, 3, 5, 20), utc(2025, 6, 4, 5, 20)),
            ),
        ),
        (
            "latest fire already recorded: nothing to do",
            DAILY,
            utc(2025, 6, 5, 5, 20),
            NOW - timedelta(days=7),
            CatchUpPlan(catch_up=None, missed=()),
        ),
        (
            "recorded before since: since wins",
            DAILY,
            utc(2025, 5, 1, 5, 20),
            NOW - timedelta(days=1),
            CatchUpPlan(catch_up=utc(2025, 6, 5, 5, 20), missed=()),
        ),
        (
            "no fire in the window",
            DAILY,
            None,
            NOW - timedelta(minutes=30),
            CatchUpPlan(catch_up=None, missed=()),
        ),
    ],
)
def test_plan_catch_up(
    name: str,
    schedule: Schedule,
    last_recorded: datetime | None,
    since: datetime,
    expected: CatchUpPlan,
) -> None:
    # Every fire up to last_recorded has a row, as when nodes never lost one.
    every = fire_times(schedule, since, NOW)
    recorded = {fire for fire in every if last_recorded is not None and fire <= last_recorded}
    assert plan(schedule, recorded=recorded, since=since) == expected, name


def test_a_hole_below_a_recorded_fire_is_missed_not_lost() -> None:
    """Issue 11.1: a dead node decided to run a fire but never claimed it, and newer
    fires have rows. Only the newest recorded fire used to bound the look-back, so the
    hole stayed without an outcome forever."""
    every_second = daily("* * * * * *", grace=30)
    now = utc(2025, 6, 5, 6, 0, 10)
    recorded = {now - timedelta(seconds=n) for n in (1, 2, 3, 5, 6)}  # 4 s ago: the hole

    result = plan(every_second, recorded=recorded, since=now - timedelta(seconds=6), now=now)

    assert result == CatchUpPlan(catch_up=now, missed=(now - timedelta(seconds=4),))


def test_unrun_fires_after_the_scheduler_started_are_its_own() -> None:
    every_second = daily("* * * * * *", grace=30)
    now = utc(2025, 6, 5, 6, 0, 10)
    started = now - timedelta(seconds=2.5)

    result = plan(
        every_second,
        recorded=set(),
        since=now - timedelta(seconds=5),
        now=now,
        scheduler_since=started,
    )

    # 2 and 1 s ago are the scheduler's (it may be claiming one right now); the newest is
    # offered as the catch-up either way (the claim decides who runs it).
    assert result == CatchUpPlan(
        catch_up=now, missed=(now - timedelta(seconds=4), now - timedelta(seconds=3))
    )


def test_the_newest_fire_recorded_means_no_catch_up() -> None:
    result = plan(DAILY, recorded={utc(2025, 6, 5, 5, 20)}, since=NOW - timedelta(days=3))
    assert result == CatchUpPlan(
        catch_up=None, missed=(utc(2025, 6, 3, 5, 20), utc(2025, 6, 4, 5, 20))
    )


def test_plan_catch_up_keeps_the_newest_missed_fires_only() -> None:
    now = utc(2025, 6, 5, 6, 0, 0)
    result = plan(
        daily("* * * * * *", grace=1),
        recorded=set(),
        now=now,
        since=now - timedelta(days=1),  # 86,400 fires in the window
    )
    assert result.catch_up == now
    assert len(result.missed) == MISSED_LIMIT
    assert result.missed[0] == now - timedelta(seconds=MISSED_LIMIT)
    assert result.missed[-1] == now - timedelta(seconds=1)


def test_newest_fire_times_is_half_open() -> None:
    start = utc(2025, 6, 5, 6, 0, 0)
    assert newest_fire_times(
        daily("* * * * * *"), after=start, until=start + timedelta(seconds=3), count=2
    ) == [start + timedelta(seconds=2), start + timedelta(seconds=3)]
    assert newest_fire_times(daily("* * * * * *"), after=start, until=start, count=5) == []


def test_latest_fire_time_is_at_or_before_now() -> None:
    schedule = daily("20 5 * * *")
    assert latest_fire_time(schedule, utc(2025, 6, 5, 5, 20)) == utc(2025, 6, 5, 5, 20)
    assert latest_fire_time(schedule, utc(2025, 6, 5, 5, 19)) == utc(2025, 6, 4, 5, 20)
    assert latest_fire_time(schedule, utc(2025, 6, 5, 5, 19), look_back=timedelta(hours=1)) is None


# --- The schedule table ----------------------------------------------------------------------


def test_schedule_table_shows_the_next_fire_in_utc_and_local() -> None:
    bundled = load_instruction(ROOT / "instructions" / "daily-triage.yaml")
    berlin = replace(bundled, id="berlin-weekly", schedule=daily("0 9 * * 1", "Europe/Berlin"))
    rows = schedule_table([bundled, berlin], utc(2025, 6, 1, 6))
    assert [(row.instruction_id, row.next_fire_utc) for row in rows] == [
        ("daily-triage", utc(2025, 6, 2, 5, 20)),
        ("berlin-weekly", utc(2025, 6, 2, 7)),
    ]
    assert rows[1].next_fire_local is not None
    assert f"{rows[1].next_fire_local:%H:%M %Z}" == "09:00 CEST"
    lines = render_schedule_table(rows).splitlines()
    assert lines[0].split() == [
        "INSTRUCTION",
        "CRON",
        "TIMEZONE",
        "NEXT",
        "(UTC)",
        "NEXT",
        "(LOCAL)",
    ]
    assert lines[1].split() == [
        "daily-triage", "20", "5", "*", "*", "*", "UTC",
        "2025-06-02", "05:20:00", "2025-06-02", "05:20:00", "UTC",
    ]  # fmt: skip
    assert lines[2].endswith("2025-06-02 07:00:00  2025-06-02 09:00:00 CEST")
    assert render_schedule_table([]) == "no instructions"
