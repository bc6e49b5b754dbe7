"""Cron schedules: which ticks are due -- decided here and nowhere else.

A schedule is a cron expression read in an IANA time zone (croniter does the calendar
arithmetic on time-zone-aware datetimes). Five fields are the classic minute-resolution
cron; an optional sixth field, last, gives seconds (croniter's convention).

Rules this module owns (the scheduler and the API only call it):

- **A tick is an instant.** Ticks are keyed by their UTC instant (``schedule_fires``'s
  primary key is ``(schedule_id, fire_at)``), so a tick fires at most once, whatever
  number of processes evaluate the schedule.
- **A fixed-time schedule fires once on the night the clocks go back** (Vixie cron's
  rule): croniter alone would fire ``30 2 * * *`` at 02:30+02:00 *and* 02:30+01:00; the
  second is skipped. Schedules with a wildcard minute or hour run through both
  occurrences of the repeated hour, as in cron. A time skipped by a spring-forward fires at
  the first existing instant after it (croniter's behaviour, e.g. 03:00).
- **Missed ticks** (no process evaluated the schedule in time) follow the schedule's
  :class:`MisfirePolicy`: ``skip`` fires a tick only within ``misfire_grace_seconds`` of
  its time; ``catch_up`` fires every missed tick, at most ``catch_up_limit`` of them (the
  most recent), late.
- The next tick is computed from the previous *target* tick, never from "now", so a late
  evaluation does not shift the series.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

MAX_YEARS_BETWEEN_TICKS = 5
"""An expression whose next tick is further away than this is refused (``0 0 31 2 *``
never matches): it also bounds croniter's search on every evaluation."""

MAX_CATCH_UP_LIMIT = 1000


class MisfirePolicy(StrEnum):
    """What happens to ticks that no process evaluated in time (downtime)."""

    SKIP = "skip"
    """Fire a tick only within ``misfire_grace_seconds`` of its time; older ones are
    skipped."""
    CATCH_UP = "catch_up"
    """Fire every missed tick late, the ``catch_up_limit`` most recent of them."""


class OverlapPolicy(StrEnum):
    """What a tick does while the job of the schedule's previous tick is unfinished."""

    ALLOW = "allow"
    """Create the job anyway: runs may overlap."""
    SKIP = "skip"
    """Skip the tick (no job; logged): at most one unfinished job per schedule."""


class FireRefusal(StrEnum):
    """Why a due tick created no job (recorded on the tick, counted on the schedule)."""

    OWNER_AT_CAPACITY = "owner_at_capacity"
    """The owner already had its cap of unfinished jobs (ATLAS_ADMISSION_MAX_ACTIVE_PER_OWNER):
    the tick is refused as ``POST /v1/jobs`` would be (429), not queued beyond the cap."""


class InvalidScheduleError(ValueError):
    """A cron expression or time zone that cannot be scheduled; ``field`` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Cron:
    """A validated cron expression in a time zone."""

    expression: str
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def fixed_time(self) -> bool:
        """Whether minute and hour are fixed (Vixie cron's "fixed-time job"): only such a
        schedule skips the repeated hour of a DST fall-back; ``*/5 * * * *`` runs through
        both occurrences, as wall-clock-wildcard jobs do in cron."""
        fields = self.expression.split()
        return not (fields[0].startswith("*") or fields[1].startswith("*"))

    def _series(self, local: datetime) -> croniter:
        return croniter(self.expression, local, max_years_between_matches=MAX_YEARS_BETWEEN_TICKS)

    def _repeat(self, tick: datetime) -> bool:
        """``tick`` is the second occurrence of a wall-clock time (DST fall-back) of a
        fixed-time schedule, whose first occurrence is also a tick."""
        if not self.fixed_time:
            return False
        first = tick.replace(tzinfo=None).replace(tzinfo=self.zone, fold=0)
        return first.utcoffset() != tick.utcoffset()

    def next_after(self, instant: datetime) -> datetime:
        """The first tick strictly after ``instant``, in UTC."""
        series = self._series(instant.astimezone(self.zone))
        tick: datetime = series.get_next(datetime)
        while self._repeat(tick):
            tick = series.get_next(datetime)
        return tick.astimezone(UTC)

    def previous_before(self, instant: datetime) -> datetime:
        """The last tick strictly before ``instant``, in UTC."""
        series = self._series(instant.astimezone(self.zone))
        tick: datetime = series.get_prev(datetime)
        while self._repeat(tick):
            tick = series.get_prev(datetime)
        return tick.astimezone(UTC)

    def first_at_or_after(self, instant: datetime) -> datetime:
        return self.next_after(instant - timedelta(microseconds=1))


def parse(expression: str, timezone: str) -> Cron:
    """Validate ``expression`` in ``timezone``; :class:`InvalidScheduleError` names the field."""
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidScheduleError("timezone", f"Unknown IANA time zone {timezone!r}") from None
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise InvalidScheduleError(
            "cron",
            "A cron expression has 5 fields, or 6 with seconds last; got " + str(len(fields)),
        )
    normalized = " ".join(fields)
    if not croniter.is_valid(normalized, strict=True):
        raise InvalidScheduleError("cron", f"Not a valid cron expression: {normalized!r}")
    cron = Cron(normalized, timezone)
    try:
        cron.next_after(datetime.now(UTC))
    except CroniterBadDateError:
        raise InvalidScheduleError(
            "cron", f"The expression never fires within {MAX_YEARS_BETWEEN_TICKS} years"
        ) from None
    return cron


def _field_values(field: list[Any], size: int) -> list[int]:
    """The values a croniter-expanded time-of-day field takes (``*`` is all of them)."""
    return list(range(size)) if field == ["*"] else sorted({int(v) for v in field})


def shortest_interval_seconds(cron: Cron) -> int:
    """The shortest time between two consecutive ticks of ``cron``, in seconds.

    Computed from the time-of-day fields (seconds, minutes, hours): the ticks of one day
    are at most 86,400 instants, and the shortest gap is between two consecutive ones,
    or across midnight (assumed possible: the day fields can only make ticks further
    apart). A daylight-saving shift aside (a skipped hour fires its ticks at the first
    instant after it), no two ticks are closer than this."""
    expanded = croniter(cron.expression).expanded
    minutes = _field_values(expanded[0], 60)
    hours = _field_values(expanded[1], 24)
    seconds = _field_values(expanded[5], 60) if len(expanded) > 5 else [0]
    day = sorted(h * 3600 + m * 60 + sec for h in hours for m in minutes for sec in seconds)
    gaps = [later - earlier for earlier, later in pairwise(day)]
    gaps.append(86_400 - day[-1] + day[0])  # across midnight (one tick a day: 86,400)
    return min(gaps)


def check_interval(cron: Cron, minimum_seconds: float) -> None:
    """:class:`InvalidScheduleError` (field ``cron``) when ticks come more often than
    ``minimum_seconds`` (the ``ATLAS_SCHEDULE_MIN_INTERVAL_SECONDS`` setting)."""
    shortest = shortest_interval_seconds(cron)
    if shortest < minimum_seconds:
        raise InvalidScheduleError(
            "cron",
            f"Ticks {shortest} s apart; schedules fire at most every "
            f"{minimum_seconds:g} s (ATLAS_SCHEDULE_MIN_INTERVAL_SECONDS)",
        )


@dataclass(frozen=True, slots=True)
class DueTicks:
    """One evaluation of a schedule at ``now``."""

    fire: tuple[datetime, ...]
    """The ticks to fire now, oldest first."""
    skipped_from: datetime | None
    """The first tick not fired (missed beyond the policy), if any."""
    next_fire_at: datetime
    """The first tick after ``now``: where the next evaluation starts."""


def due_ticks(
    cron: Cron,
    *,
    next_fire_at: datetime,
    now: datetime,
    policy: MisfirePolicy,
    misfire_grace_seconds: int,
    catch_up_limit: int,
) -> DueTicks:
    """The ticks in ``[next_fire_at, now]`` to fire under ``policy``.

    Never walks more ticks than it fires (plus one): a schedule off for a year is not
    replayed second by second to find its last ``catch_up_limit`` ticks.
    """
    following = cron.next_after(now)
    if next_fire_at > now:
        return DueTicks((), None, next_fire_at)
    if policy is MisfirePolicy.SKIP:
        start = max(next_fire_at, now - timedelta(seconds=misfire_grace_seconds))
        fire: list[datetime] = []
        tick = next_fire_at if start == next_fire_at else cron.first_at_or_after(start)
        while tick <= now:
            fire.append(tick)
            tick = cron.next_after(tick)
        return DueTicks(tuple(fire), next_fire_at if start > next_fire_at else None, following)
    backwards: list[datetime] = []
    cursor = now + timedelta(microseconds=1)  # ``now`` itself may be a tick
    while len(backwards) < catch_up_limit:
        tick = cron.previous_before(cursor)
        if tick < next_fire_at:
            break
        backwards.append(tick)
        cursor = tick
    fire = list(reversed(backwards))
    missed = bool(fire) and fire[0] > next_fire_at
    return DueTicks(tuple(fire), next_fire_at if missed else None, following)
