"""How the client verbs print a job: the label of :func:`atlas_jobs._app.presentation.present`
first, then the facts a person needs (stages with counts and the plan revision, delivery,
attempt, error, the link) -- plain lines, or a rich renderable for ``watch`` on a TTY."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from atlas_jobs._app.presentation import Observation, Presentation, attempt_line, present

if TYPE_CHECKING:
    from atlas_jobs._app.client.observer import Observer


def stage_cells(status: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(stage, "done of total", unit) per stage, in plan order."""
    stages = (status.get("progress") or {}).get("stages") or []
    return [(s["name"], f"{s['done']} of {s['total']}", str(s["unit"])) for s in stages]


def delivery_text(status: Mapping[str, Any]) -> str:
    delivery = status.get("delivery") or {}
    text = str(delivery.get("state", "none"))
    if delivery.get("expires_at"):
        text += f" (expires {delivery['expires_at']})"
    return text


def result_hint(job_id: str) -> str:
    return f"atlas-jobs result {job_id} -o DIR"


def facts(
    status: Mapping[str, Any],
    shown: Presentation,
    result: Mapping[str, Any] | None = None,
) -> list[str]:
    """The status as a few labelled lines (the label first; never a percentage);
    ``result``: the result reference, when read (its files or its publication)."""
    job_id = str(status.get("id"))
    lines = [
        shown.label,
        f"job       {job_id}  {status.get('kind')} v{status.get('kind_version')}",
        f"state     {status.get('state')} ({status.get('reason')}); attempt {attempt_line(status)}",
    ]
    progress = status.get("progress") or {}
    cells = stage_cells(status)
    if cells:
        joined = " · ".join(f"{name} {counts} {unit}" for name, counts, unit in cells)
        lines.append(f"stages    {joined} (plan revision {progress.get('plan_revision')})")
    lines.append(f"delivery  {delivery_text(status)}")
    for name in ("error", "last_error"):
        error = status.get(name)
        if error:
            lines.append(f"{name.replace('_', ' '):<9} {error.get('code')}: {error.get('message')}")
    if status.get("next_attempt_at"):
        lines.append(f"next try  {status['next_attempt_at']}")
    lines += timing_lines(status)
    if shown.show_result_link:
        lines.append(f"result    {result_hint(job_id)}")
    elif result is not None:
        lines.append(f"result    {result_summary(result)}")
    lines.append(f"updated   {status.get('updated_at')} (created {status.get('created_at')})")
    return lines


def timing_lines(status: Mapping[str, Any]) -> list[str]:
    """When the job may start (``run_at``) and its start deadline (``start_by``), while
    they still matter: before its first start."""
    if status.get("state") != "queued" or status.get("attempt"):
        return []
    found = []
    if status.get("run_at"):
        found.append(f"run at    {status['run_at']}")
    if status.get("start_by"):
        found.append(f"start by  {status['start_by']}")
    return found


def result_summary(result: Mapping[str, Any]) -> str:
    """A result reference in one line: its files, else its publication or reference."""
    files = result.get("files") or []
    if files:
        return f"{len(files)} file(s): " + ", ".join(str(f["name"]) for f in files)
    publication = result.get("publication")
    if publication:
        receipt = json.dumps(publication.get("receipt") or {}, sort_keys=True)
        return f"no files; published to {publication.get('destination')}, receipt {receipt}"
    reference = result.get("reference") or {}
    if reference:
        return f"no files; reference {json.dumps(reference, sort_keys=True)}"
    return "the job finished without files"


def watch_line(observer: Observer, job_id: str) -> tuple[str, str]:
    """(change key, line) for piped output: a new line only when the key changes, so an
    outage prints one stale line, not one per second."""
    shown = observer.view()
    observation = observer.observation()
    line = shown.label
    if shown.show_result_link:
        line += f"  (result: {result_hint(job_id)})"
    if observation == Observation.UNKNOWN:
        return "", line  # nothing read yet: print nothing rather than a placeholder
    key = "stale" if observation == Observation.STALE else line
    return key, line


def watch_panel(observer: Observer, job_id: str) -> RenderableType:
    """The in-place view of ``watch`` on a terminal: label, stages, delivery, link."""
    shown = observer.view()
    parts: list[RenderableType] = [Text(shown.label, style="bold")]
    status = observer.status
    if status is not None:
        progress = status.get("progress") or {}
        cells = stage_cells(status)
        if cells:
            table = Table(
                title=f"plan revision {progress.get('plan_revision')}",
                title_justify="left",
                box=None,
                show_header=True,
            )
            for column in ("stage", "done", "unit"):
                table.add_column(column)
            for row in cells:
                table.add_row(*row)
            parts.append(table)
        parts.append(Text(f"delivery: {delivery_text(status)}"))
        parts += [Text(line) for line in timing_lines(status)]
        if shown.show_result_link:
            parts.append(Text(f"result: {result_hint(job_id)}"))
    return Group(*parts)


def present_status(
    status: Mapping[str, Any], result: Mapping[str, Any] | None = None
) -> Presentation:
    """A status just read: a fresh observation (``result``: its result reference, when
    read too)."""
    return present(status, Observation.FRESH, result=result)


def kind_rows(kinds: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(kind, version, live workers, description) per version of each kind, as the
    CLI and the status page show them: the version new jobs get marked ``*``, a version
    the API does not accept (only live workers serve it) marked ``(workers only)``."""
    rows: list[tuple[str, str, str, str]] = []
    for kind in kinds:
        description = str(kind.get("description") or "")
        for version in kind.get("versions") or []:
            shown = f"v{version['version']}"
            if version["version"] == kind.get("version"):
                shown += " *"
            elif not version.get("accepted", True):
                shown += " (workers only)"
            rows.append((str(kind["name"]), shown, str(version["live_workers"]), description))
    return rows


def kinds_table(kinds: Sequence[Mapping[str, Any]]) -> list[str]:
    """:func:`kind_rows` as aligned columns under a header."""
    header = ("KIND", "VERSION", "LIVE WORKERS", "DESCRIPTION")
    rows = [header, *kind_rows(kinds)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [
        f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}".rstrip()
        for row in rows
    ]
