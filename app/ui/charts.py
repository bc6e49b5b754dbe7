"""The operators' charts as server-rendered SVG (no script, no library): jobs created,
finished by outcome, and the queue's oldest claimable age per kind, over the last hour
(per minute) or day (per 24 minutes), from the rollup
(:func:`atlas_jobs._app.services.activity.chart`).

Each chart is a fixed-size ``<svg>`` with a title, a y axis labelled at 0 and at its
maximum, time labels at both ends and the middle, and a legend in words, so a
screenshot reads without hovering. Colours are presentation attributes (the page's
Content-Security-Policy allows no inline style).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from markupsafe import Markup, escape

from atlas_jobs._app.services.activity import Chart, Point

WIDTH: Final = 560
HEIGHT: Final = 200
LEFT: Final = 48
RIGHT: Final = 12
TOP: Final = 28
BOTTOM: Final = 44
OUTCOME_COLOURS: Final = (("succeeded", "#2f8f46"), ("failed", "#c23b3b"), ("canceled", "#8a8f98"))
CREATED_COLOUR: Final = "#3567b5"
LINE_COLOURS: Final = ("#3567b5", "#d9822b", "#7a4fb3", "#2f8f9d", "#b5357a", "#6b8e23")
MAX_KINDS: Final = len(LINE_COLOURS)

WINDOWS: Final = {"hour": (60, 1), "day": (1440, 24)}
"""The windows a page can ask for: (minutes, minutes per bucket)."""


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    colour: str
    values: list[float]


def _clock(value: datetime, window_minutes: int) -> str:
    utc = value.astimezone(UTC)
    return utc.strftime("%H:%M") if window_minutes <= 60 else utc.strftime("%d %b %H:%M")


def _nice(value: float) -> float:
    """The axis maximum: ``value`` rounded up to 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if value <= factor * step:
            return factor * step
    return 10 * step


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _frame(title: str, chart: Chart, top: float, unit: str, legend: Sequence[Series]) -> list[str]:
    """Title, axes, y labels, time labels and the legend."""
    plot_w = WIDTH - LEFT - RIGHT
    base = HEIGHT - BOTTOM
    parts = [
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="600" fill="#1d2330">'
        f"{escape(title)}</text>",
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="#555"/>',
        f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + plot_w}" y2="{base}" stroke="#555"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT + plot_w}" y2="{TOP}" stroke="#d8dde6"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" font-size="11" text-anchor="end" fill="#333">'
        f"{escape(_number(top))}{escape(unit)}</text>",
        f'<text x="{LEFT - 4}" y="{base + 4}" font-size="11" text-anchor="end" '
        'fill="#333">0</text>',
    ]
    buckets = chart.buckets
    if buckets:
        marks = {0: "start", len(buckets) // 2: "middle", len(buckets) - 1: "end"}
        for index, anchor in marks.items():
            x = LEFT + plot_w * (index + 0.5) / len(buckets)
            parts.append(
                f'<text x="{x:.1f}" y="{base + 14}" font-size="11" text-anchor="{anchor}" '
                f'fill="#333">{escape(_clock(buckets[index], chart.window_minutes))}</text>'
            )
    x = float(LEFT)
    for series in legend:
        parts.append(
            f'<rect x="{x:.1f}" y="{HEIGHT - 14}" width="10" height="10" fill="{series.colour}"/>'
        )
        parts.append(
            f'<text x="{x + 14:.1f}" y="{HEIGHT - 5}" font-size="11" fill="#1d2330">'
            f"{escape(series.name)}</text>"
        )
        x += 22 + 6.5 * len(series.name)
    return parts


def _svg(test_id: str, label: str, parts: list[str]) -> Markup:
    body = "".join(parts)
    return Markup(  # noqa: S704  # nosec B704 - every text above went through escape()
        f'<svg class="chart" data-testid="{escape(test_id)}" role="img" '
        f'aria-label="{escape(label)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def _per_bucket(chart: Chart, value: Callable[[Point], float]) -> list[float]:
    index = {bucket: i for i, bucket in enumerate(chart.buckets)}
    values = [0.0] * len(chart.buckets)
    for point in chart.points:
        if point.bucket in index:
            values[index[point.bucket]] += value(point)
    return values


def stacked_bars(
    test_id: str, title: str, chart: Chart, series: Sequence[Series], unit: str = ""
) -> Markup:
    """One bar per bucket, the series stacked from the axis up."""
    totals = [sum(s.values[i] for s in series) for i in range(len(chart.buckets))]
    top = _nice(max(totals, default=0))
    parts = _frame(title, chart, top, unit, series)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - BOTTOM - TOP
    width = plot_w / max(1, len(chart.buckets))
    for i in range(len(chart.buckets)):
        y = float(HEIGHT - BOTTOM)
        for s in series:
            h = plot_h * s.values[i] / top
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect x="{LEFT + i * width + 0.5:.1f}" y="{y:.1f}" '
                f'width="{max(width - 1, 1):.1f}" height="{h:.1f}" fill="{s.colour}">'
                f"<title>{escape(s.name)}: {s.values[i]:.0f}</title></rect>"
            )
    total = sum(totals)
    summary = ", ".join(f"{s.name} {sum(s.values):.0f}" for s in series)
    return _svg(test_id, f"{title}: {summary} (total {total:.0f})", parts)


def lines(test_id: str, title: str, chart: Chart, series: Sequence[Series], unit: str) -> Markup:
    """One line per series (a dot where a bucket has a value)."""
    top = _nice(max((v for s in series for v in s.values), default=0))
    parts = _frame(title, chart, top, unit, series)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - BOTTOM - TOP
    count = max(1, len(chart.buckets))
    for s in series:
        points = [
            (LEFT + plot_w * (i + 0.5) / count, HEIGHT - BOTTOM - plot_h * v / top)
            for i, v in enumerate(s.values)
        ]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{s.colour}" stroke-width="2"/>'
        )
    latest = ", ".join(f"{s.name} {s.values[-1]:.0f}{unit}" for s in series if s.values)
    return _svg(test_id, f"{title}: now {latest or 'nothing queued'}", parts)


def _field(name: str) -> Callable[[Point], float]:
    return lambda point: float(getattr(point, name))


def _age_of(kind: str) -> Callable[[Point], float]:
    return lambda point: (point.oldest_queued_seconds or 0.0) if point.kind == kind else 0.0


def created_chart(chart: Chart) -> Markup:
    created = Series("created", CREATED_COLOUR, _per_bucket(chart, lambda p: p.created))
    return stacked_bars("chart-created", "Jobs created", chart, [created])


def finished_chart(chart: Chart) -> Markup:
    series = [
        Series(name, colour, _per_bucket(chart, _field(name))) for name, colour in OUTCOME_COLOURS
    ]
    return stacked_bars("chart-finished", "Jobs finished, by outcome", chart, series)


def queue_age_chart(chart: Chart) -> Markup:
    """The oldest claimable queued job's age per kind: the kinds with the oldest job in the
    window first, at most :data:`MAX_KINDS` of them (the rest are listed in the table)."""
    oldest: dict[str, float] = {}
    for point in chart.points:
        age = point.oldest_queued_seconds or 0.0
        oldest[point.kind] = max(oldest.get(point.kind, 0.0), age)
    shown = sorted((k for k, age in oldest.items() if age > 0), key=lambda k: -oldest[k])
    series = [
        Series(kind, LINE_COLOURS[i], _per_bucket(chart, _age_of(kind)))
        for i, kind in enumerate(shown[:MAX_KINDS])
    ]
    return lines("chart-queue-age", "Oldest queued job, per kind", chart, series, " s")


__all__ = ["WINDOWS", "created_chart", "finished_chart", "queue_age_chart"]
