"""``atlas-jobs schedules ...``: manage cron triggers over HTTP (``--url``/``ATLAS_URL``,
``--api-key``/``ATLAS_API_KEY``), through the client library like the other client verbs.

Each verb prints one row per schedule (id, name, on/off, cron, time zone, next and last
tick, counts, kind: a table on a terminal, tab-separated when piped), or the raw JSON
with ``--json``; a failure is one line on stderr with the client verbs'
exit codes (1 refused, 3 API unreachable, 4 key rejected).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from atlas_jobs._app.cli.client import (
    ConcurrencyKeyOption,
    JsonFlag,
    KeyOption,
    PriorityOption,
    UrlOption,
    _connected,
)
from atlas_jobs._app.cli.tables import print_table
from atlas_jobs._app.client.address import DEFAULT_URL

if TYPE_CHECKING:
    import httpx

schedules_app = typer.Typer(
    help="Cron schedules: one job per tick, exactly once.", no_args_is_help=True
)


SCHEDULE_COLUMNS = ("ID", "NAME", "ON", "CRON", "TZ", "NEXT", "LAST", "FIRED", "REFUSED", "KIND")


def _row(schedule: dict[str, Any]) -> list[str | int | None]:
    return [
        schedule["id"],
        schedule.get("name"),
        "on" if schedule["enabled"] else "off",
        schedule["cron"],
        schedule["timezone"],
        schedule["next_fire_at"] or "-",
        schedule["last_fire_at"] or "-",
        schedule["fired_count"],
        schedule.get("refused_count", 0),
        schedule["job"]["kind"],
    ]


def _show(response: httpx.Response, raw: bool) -> None:
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    items = body.get("items", [body])
    print_table(SCHEDULE_COLUMNS, [_row(item) for item in items], empty="no schedules")


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
    delay: Annotated[
        int | None, typer.Option(min=0, help="Each job not before its tick plus N s.")
    ] = None,
    start_within: Annotated[
        int | None,
        typer.Option(min=1, help="Each job fails unless a worker starts it by its tick plus N s."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A key=value tag every job carries (repeatable; not secret)."),
    ] = None,
    priority: PriorityOption = None,
    concurrency_key: ConcurrencyKeyOption = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
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
    job_fields = (
        ("delay_seconds", delay),
        ("start_within_seconds", start_within),
        ("tags", tag or None),
        ("priority", priority),
        ("concurrency_key", concurrency_key),
    )
    body["job"].update((field, value) for field, value in job_fields if value is not None)
    if name is not None:
        body["name"] = name
    if owner is not None:
        body["owner"] = owner
    if catch_up is not None:
        body["misfire_policy"] = "catch_up"
        body["catch_up_limit"] = catch_up
    with _connected(url, api_key) as api:
        _show(api.call("POST", "/v1/schedules", ok=frozenset({201}), json=body), raw)


@schedules_app.command("list")
def list_schedules(
    raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """List schedules (operators: every owner's) with their next and last tick."""
    with _connected(url, api_key) as api:
        _show(api.call("GET", "/v1/schedules", params={"limit": 100}), raw)


@schedules_app.command("show")
def show(
    schedule_id: str, raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """Show one schedule."""
    with _connected(url, api_key) as api:
        _show(api.call("GET", f"/v1/schedules/{schedule_id}"), raw)


@schedules_app.command("pause")
def pause(
    schedule_id: str, raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """Stop firing (no catch-up of the pause when resumed)."""
    with _connected(url, api_key) as api:
        _show(api.call("PATCH", f"/v1/schedules/{schedule_id}", json={"enabled": False}), raw)


@schedules_app.command("resume")
def resume(
    schedule_id: str, raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """Fire again from the next tick."""
    with _connected(url, api_key) as api:
        _show(api.call("PATCH", f"/v1/schedules/{schedule_id}", json={"enabled": True}), raw)


@schedules_app.command("delete")
def delete(schedule_id: str, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None) -> None:
    """Delete a schedule (the jobs it created stay)."""
    with _connected(url, api_key) as api:
        api.call("DELETE", f"/v1/schedules/{schedule_id}", ok=frozenset({204}))
    typer.echo(f"deleted {schedule_id}")


@schedules_app.command("fires")
def fires(
    schedule_id: str, raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """The last ticks fired and the job each created, or why none (``refused:<reason>``)."""
    with _connected(url, api_key) as api:
        response = api.call("GET", f"/v1/schedules/{schedule_id}/fires", params={"limit": 100})
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        refusal = item.get("refusal")
        typer.echo(
            f"{item['tick']}  {item['job_id'] or ('refused:' + refusal if refusal else '-')}"
        )
