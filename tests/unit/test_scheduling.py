"""The tick rules of :mod:`atlas_jobs._app.scheduling`: validation, DST, misfire policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from atlas_jobs._app.scheduling import InvalidScheduleError, MisfirePolicy, due_ticks, parse


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "timezone", "field"),
    [
        ("bad", "UTC", "cron"),
        ("* * * *", "UTC", "cron"),
        ("* * * * * * *", "UTC", "cron"),
        ("61 * * * *", "UTC", "cron"),
        ("0 0 31 2 *", "UTC", "cron"),  # never fires
        ("0 2 * * *", "Mars/Olympus", "timezone"),
        ("0 2 * * *", "../../etc/passwd", "timezone"),
    ],
)
def test_unschedulable_expressions_name_the_field(
    expression: str, timezone: str, field: str
) -> None:
    with pytest.raises(InvalidScheduleError) as caught:
        parse(expression, timezone)
    assert caught.value.field == field


def test_six_fields_mean_seconds_last() -> None:
    cron = parse("* * * * * */10", "UTC")
    assert cron.next_after(utc(2026, 1, 1, 0, 0, 3)) == utc(2026, 1, 1, 0, 0, 10)


def test_whitespace_is_normalized() -> None:
    assert parse("  0   2 * * * ", "UTC").expression == "0 2 * * *"


def test_a_fixed_time_fires_once_on_the_night_clocks_go_back() -> None:
    """croniter alone fires 02:30 twice in Berlin on 2025-10-26 (+02:00 and +01:00)."""
    cron = parse("30 2 * * *", "Europe/Berlin")
    ticks = [cron.next_after(utc(2025, 10, 25, 12))]
    for _ in range(2):
        ticks.append(cron.next_after(ticks[-1]))
    assert ticks == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30), utc(2025, 10, 28, 1, 30)]
    # walking backwards gives the same series
    assert cron.previous_before(utc(2025, 10, 27, 1, 30)) == utc(2025, 10, 26, 0, 30)


def test_a_wildcard_hour_runs_through_both_occurrences_of_the_repeated_hour() -> None:
    cron = parse("0 * * * *", "Europe/Berlin")
    tick = utc(2025, 10, 25, 23)
    series = []
    for _ in range(4):
        tick = cron.next_after(tick)
        series.append(tick)
    # 02:00+02:00 (00:00Z) and 02:00+01:00 (01:00Z) both fire: one per UTC hour
    assert series == [utc(2025, 10, 26, h) for h in range(0, 4)]


def test_a_time_skipped_by_spring_forward_fires_at_the_first_instant_after() -> None:
    cron = parse("30 2 * * *", "Europe/Berlin")
    assert cron.next_after(utc(2025, 3, 29, 12)) == utc(2025, 3, 30, 1, 0)  # 03:00+02:00


EVERY_SECOND = parse("* * * * * *", "UTC")
T0 = utc(2026, 1, 1, 0, 0, 0)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_nothing_is_due_before_the_next_tick() -> None:
    plan = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(5),
        now=at(4),
        policy=MisfirePolicy.SKIP,
        misfire_grace_seconds=60,
        catch_up_limit=10,
    )
    assert plan.fire == ()
    assert plan.next_fire_at == at(5)
    assert plan.skipped_from is None


def test_skip_fires_the_ticks_within_grace_and_skips_older_ones() -> None:
    plan = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(1),
        now=at(10),
        policy=MisfirePolicy.SKIP,
        misfire_grace_seconds=3,
        catch_up_limit=100,
    )
    assert plan.fire == (at(7), at(8), at(9), at(10))
    assert plan.skipped_from == at(1)
    assert plan.next_fire_at == at(11)


def test_skip_within_grace_fires_every_tick_in_order() -> None:
    plan = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(8),
        now=at(10),
        policy=MisfirePolicy.SKIP,
        misfire_grace_seconds=60,
        catch_up_limit=1,
    )
    assert plan.fire == (at(8), at(9), at(10))
    assert plan.skipped_from is None


def test_catch_up_fires_every_missed_tick_up_to_the_limit() -> None:
    plan = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(1),
        now=at(5),
        policy=MisfirePolicy.CATCH_UP,
        misfire_grace_seconds=1,
        catch_up_limit=10,
    )
    assert plan.fire == (at(1), at(2), at(3), at(4), at(5))
    assert plan.skipped_from is None
    bounded = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(1),
        now=at(5),
        policy=MisfirePolicy.CATCH_UP,
        misfire_grace_seconds=1,
        catch_up_limit=2,
    )
    assert bounded.fire == (at(4), at(5))
    assert bounded.skipped_from == at(1)


def test_a_year_of_downtime_is_not_walked_tick_by_tick() -> None:
    """The work is bounded by what fires, not by how long the schedule was missed."""
    plan = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(0),
        now=at(365 * 24 * 3600),
        policy=MisfirePolicy.CATCH_UP,
        misfire_grace_seconds=1,
        catch_up_limit=3,
    )
    assert len(plan.fire) == 3
    assert plan.fire[-1] == at(365 * 24 * 3600)
    skip = due_ticks(
        EVERY_SECOND,
        next_fire_at=at(0),
        now=at(365 * 24 * 3600),
        policy=MisfirePolicy.SKIP,
        misfire_grace_seconds=2,
        catch_up_limit=3,
    )
    assert len(skip.fire) == 3


def test_the_series_follows_the_target_ticks_not_the_evaluation_time() -> None:
    cron = parse("*/15 * * * *", "UTC")
    plan = due_ticks(
        cron,
        next_fire_at=utc(2026, 1, 1, 0, 15),
        now=utc(2026, 1, 1, 0, 16, 59),  # evaluated late
        policy=MisfirePolicy.SKIP,
        misfire_grace_seconds=300,
        catch_up_limit=1,
    )
    assert plan.fire == (utc(2026, 1, 1, 0, 15),)
    assert plan.next_fire_at == utc(2026, 1, 1, 0, 30)
