"""``atlas-jobs schedules ...``: manage cron triggers over HTTP (``ATLAS_URL``,
``ATLAS_API_KEY``, as the other client verbs).

Each verb prints one line per schedule (``id  enabled  cron  tz  next  last  kind``), or
the raw JSON with ``--json``; a failure is one line on stderr and exit code 1 (2 when
the API cannot be reached).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from app.cli.client import _client, _fail

schedules_app = typer.Typer(
    help="Cron schedules: one job per tick, exactly once.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the raw JSON.")]


@contextmanager
def _api() -> Iterator[httpx.Client]:
    with _client() as http:
        try:
            yield http
        except httpx.TransportError as exc:
            typer.echo(f"cannot reach the API at {http.base_url}: {type(exc).__name__}", err=True)
            raise typer.Exit(2) from None


def _line(schedule: dict[str, Any]) -> str:
    state = "on " if schedule["enabled"] else "off"
    return "  ".join(
        [
            schedule["id"],
            state,
            f"{schedule['cron']!r}",
            schedule["timezone"],
            f"next={schedule['next_fire_at'] or '-'}",
            f"last={schedule['last_fire_at'] or '-'}",
            f"fired={schedule['fired_count']}",
            schedule["job"]["kind"],
        ]
    )


def _show(response: httpx.Response, raw: bool) -> None:
    if response.status_code >= 400:
        raise _fail(response)
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
    elif "items" in body:
        for item in body["items"]:
            typer.echo(_line(item))
    else:
        typer.echo(_line(body))


@schedules_app.command("create")
def create(
    cron: Annotated[str, typer.Option(help="Cron expression (5 fields, or 6 with seconds last).")],
    kind: Annotated[str, typer.Option(help="The job kind each tick creates.")],
    job_input: Annotated[
        str, typer.Option("--input", help="The job input: JSON, or @file.json.")
    ] = "{}",
    timezone: Annotated[str, typer.Option("--tz", help="IANA time zone.")] = "UTC",
    name: Annotated[str | None, typer.Option(help="A label.")] = None,
    catch_up: Annotated[
        int | None,
        typer.Option(help="Fire up to N missed ticks after downtime (default: skip them)."),
    ] = None,
    disabled: Annotated[bool, typer.Option("--disabled", help="Create it paused.")] = False,
    owner: Annotated[str | None, typer.Option(help="Operators: for this owner.")] = None,
    raw: JsonFlag = False,
) -> None:
    """Create a schedule."""
    text = Path(job_input[1:]).read_text() if job_input.startswith("@") else job_input
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        typer.echo(f"--input is not JSON: {exc}", err=True)
        raise typer.Exit(2) from None
    body: dict[str, Any] = {
        "cron": cron,
        "timezone": timezone,
        "job": {"kind": kind, "input": parsed},
        "enabled": not disabled,
    }
    if name is not None:
        body["name"] = name
    if owner is not None:
        body["owner"] = owner
    if catch_up is not None:
        body["misfire_policy"] = "catch_up"
        body["catch_up_limit"] = catch_up
    with _api() as http:
        _show(http.post("/v1/schedules", json=body), raw)


@schedules_app.command("list")
def list_schedules(raw: JsonFlag = False) -> None:
    """List schedules (operators: every owner's) with their next and last tick."""
    with _api() as http:
        _show(http.get("/v1/schedules", params={"limit": 100}), raw)


@schedules_app.command("show")
def show(schedule_id: str, raw: JsonFlag = False) -> None:
    """Show one schedule."""
    with _api() as http:
        _show(http.get(f"/v1/schedules/{schedule_id}"), raw)


@schedules_app.command("pause")
def pause(schedule_id: str, raw: JsonFlag = False) -> None:
    """Stop firing (no catch-up of the pause when resumed)."""
    with _api() as http:
        _show(http.patch(f"/v1/schedules/{schedule_id}", json={"enabled": False}), raw)


@schedules_app.command("resume")
def resume(schedule_id: str, raw: JsonFlag = False) -> None:
    """Fire again from the next tick."""
    with _api() as http:
        _show(http.patch(f"/v1/schedules/{schedule_id}", json={"enabled": True}), raw)


@schedules_app.command("delete")
def delete(schedule_id: str) -> None:
    """Delete a schedule (the jobs it created stay)."""
    with _api() as http:
        response = http.delete(f"/v1/schedules/{schedule_id}")
        if response.status_code >= 400:
            raise _fail(response)
    typer.echo(f"deleted {schedule_id}")


@schedules_app.command("fires")
def fires(schedule_id: str, raw: JsonFlag = False) -> None:
    """The last ticks fired and the job each created."""
    with _api() as http:
        response = http.get(f"/v1/schedules/{schedule_id}/fires", params={"limit": 100})
    if response.status_code >= 400:
        raise _fail(response)
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        typer.echo(f"{item['tick']}  {item['job_id'] or '-'}")
