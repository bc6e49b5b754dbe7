"""Templates and the view of one job the pages show.

Jinja2 with autoescaping on for every template (``.html``): job ids, owners, error
messages and history notes are data, never markup. What a page shows of a job is what
``GET /v1/jobs/{id}`` shows the same caller (the status body), its label from
:func:`atlas_jobs._app.presentation.present` -- the one presentation function -- download
links only when the API would hand them out, and the job's input to its owner alone.
Times read as people say them ("3 min ago", "ran 12 s") with the exact UTC time on
hover; ids show their first 8 characters with a button that copies the whole id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from atlas_jobs._app.lifecycle import (
    DeliveryState,
    JobState,
    is_terminal,
)
from atlas_jobs._app.presentation import Observation, attempt_line, present
from atlas_jobs._app.services.access import may_cancel
from atlas_jobs._app.services.schemas import HistoryItem, JobPublic, ResultFile
from atlas_jobs._app.services.views import settled
from atlas_jobs._app.ui.auth import Viewer

TEMPLATES_DIR: Final = Path(__file__).resolve().parent / "templates"
STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
HISTORY_SHOWN: Final = 100
"""The timeline shows the last this many transitions (the API pages through all)."""


def _when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


SHORT_ID: Final = 8
"""Characters of an id a page shows (the whole id is in the copy button and the link)."""


def duration(seconds: float) -> str:
    """A duration as people say it: "12 s", "3 min", "2 h 5 min", "4 d"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d"


def ago(value: datetime, now: datetime) -> str:
    """ "3 min ago", "just now", or "in 5 min" for a time still ahead."""
    delta = (now - value).total_seconds()
    if abs(delta) < 5:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def _time(value: datetime | None) -> Markup:
    """A ``<time>`` element: relative text, the exact UTC time on hover."""
    if value is None:
        return Markup("")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        value.astimezone(UTC).isoformat(), _when(value), ago(value, datetime.now(UTC))
    )


def _short_id(value: object) -> Markup:
    """The id's first characters, the whole id on hover and in a copy button."""
    whole = str(value)
    return Markup(
        '<span class="id"><code title="{whole}">{short}</code>'
        '<button type="button" class="copy" data-copy="{whole}" '
        'aria-label="Copy the id {whole}" title="Copy the whole id">Copy</button></span>'
    ).format(whole=escape(whole), short=escape(whole[:SHORT_ID]))


environment = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=select_autoescape(["html"], default=True),
    auto_reload=False,
)
environment.filters["when"] = _when
environment.filters["time"] = _time
environment.filters["short_id"] = _short_id
environment.filters["attempt_line"] = lambda status: attempt_line(status.model_dump(mode="json"))


def render(name: str, **context: Any) -> str:
    return environment.get_template(name).render(**context)


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as a page shows it."""

    status: JobPublic
    label: str
    files: Sequence[ResultFile]
    history: Sequence[HistoryItem]
    history_earlier: bool
    can_cancel: bool
    notice: str | None = None
    input_json: str | None = None
    """The job's input, pretty-printed: shown to the job's owner only."""

    @property
    def started_at(self) -> datetime | None:
        """When the first attempt started (its ``claim`` in the history shown)."""
        return next((h.at for h in self.history if h.to == JobState.RUNNING), None)

    @property
    def elapsed(self) -> str | None:
        """ "ran 12 s" once finished, "running for 12 s" while it runs, "queued for 3 s"
        before it started; ``None`` when the history shown does not say."""
        status = self.status
        started = self.started_at
        if started is None:
            if is_terminal(status.state):
                return None
            return f"queued for {duration((datetime.now(UTC) - status.created_at).total_seconds())}"
        if status.finished_at is not None:
            return f"ran {duration((status.finished_at - started).total_seconds())}"
        return f"running for {duration((datetime.now(UTC) - started).total_seconds())}"

    @property
    def id(self) -> str:
        return str(self.status.id)

    @property
    def live(self) -> bool:
        """Whether the page follows the job (until it is terminal and delivery settled)."""
        return not settled(self.status.state, self.status.delivery.state)


def label_of(status: JobPublic, result: Mapping[str, Any] | None = None) -> tuple[str, bool]:
    """The label and whether a result link is shown (docs/protocol.md §9.1), for a fresh
    read; ``result``: the result reference when the page has it (a result without files
    then reads as finished, not as a download)."""
    shown = present(status.model_dump(mode="json"), Observation.FRESH, result=result)
    return shown.label, shown.show_result_link


def job_view(
    status: JobPublic,
    history: Sequence[HistoryItem],
    files: Sequence[ResultFile],
    viewer: Viewer,
    *,
    notice: str | None = None,
    publication: Mapping[str, Any] | None = None,
    job_input: Any = None,
) -> JobView:
    result = None
    if status.delivery.state == DeliveryState.AVAILABLE:
        result = {"files": list(files), "publication": publication}
    label, show_link = label_of(status, result)
    shown = list(history[-HISTORY_SHOWN:])
    return JobView(
        status=status,
        label=label,
        files=files if show_link else (),
        history=shown,
        history_earlier=bool(shown) and shown[0].from_ is not None,
        can_cancel=may_cancel(status.state, viewer.principal),
        notice=notice,
        input_json=None if job_input is None else json.dumps(job_input, indent=2),
    )
