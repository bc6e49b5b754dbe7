"""Templates and the view of one job the pages show.

Jinja2 with autoescaping on for every template (``.html``): job ids, owners, error
messages and history notes are data, never markup. What a page shows of a job is what
``GET /v1/jobs/{id}`` shows the same caller (the status body, never the job's input),
its label from :func:`atlas_jobs._app.presentation.present` -- the one presentation function -- and
download links only when the API would hand them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jinja2 import Environment, FileSystemLoader, select_autoescape

from atlas_jobs._app.lifecycle import (
    JobState,
    TransitionName,
    transition,
)
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.services.schemas import HistoryItem, JobPublic, ResultFile
from atlas_jobs._app.services.views import settled
from atlas_jobs._app.ui.auth import Viewer

TEMPLATES_DIR: Final = Path(__file__).resolve().parent / "templates"
STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
HISTORY_SHOWN: Final = 100
"""The timeline shows the last this many transitions (the API pages through all)."""

_CANCELABLE: Final = frozenset(transition(TransitionName.REQUEST_CANCEL).moves)


def _when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


environment = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=select_autoescape(["html"], default=True),
    auto_reload=False,
)
environment.filters["when"] = _when


def render(name: str, **context: Any) -> str:
    return environment.get_template(name).render(**context)


def cancel_allowed(status: JobPublic, viewer: Viewer) -> bool:
    """Whether the Cancel button is shown: the states ``request_cancel`` moves from, and
    ``unresolved`` for an operator (whose cancel there is an operator decision)."""
    if status.state in _CANCELABLE:
        return True
    return status.state == JobState.UNRESOLVED and viewer.is_operator


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

    @property
    def id(self) -> str:
        return str(self.status.id)

    @property
    def live(self) -> bool:
        """Whether the page follows the job (until it is terminal and delivery settled)."""
        return not settled(self.status.state, self.status.delivery.state)


def label_of(status: JobPublic) -> tuple[str, bool]:
    """The label and whether a result link is shown (docs/protocol.md §9.1), for a fresh read."""
    shown = present(status.model_dump(mode="json"), Observation.FRESH)
    return shown.label, shown.show_result_link


def job_view(
    status: JobPublic,
    history: Sequence[HistoryItem],
    files: Sequence[ResultFile],
    viewer: Viewer,
    *,
    notice: str | None = None,
) -> JobView:
    label, show_link = label_of(status)
    shown = list(history[-HISTORY_SHOWN:])
    return JobView(
        status=status,
        label=label,
        files=files if show_link else (),
        history=shown,
        history_earlier=bool(shown) and shown[0].from_ is not None,
        can_cancel=cancel_allowed(status, viewer),
        notice=notice,
    )
