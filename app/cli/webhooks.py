"""``atlas-jobs webhooks ...``: register and list completion-callback endpoints over HTTP
(``ATLAS_URL``, ``ATLAS_API_KEY``). ``create`` prints the signing secret, once."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.cli.client import _fail
from app.cli.schedules import JsonFlag, _api

webhooks_app = typer.Typer(
    help="Webhook endpoints for job completion callbacks.", no_args_is_help=True
)


@webhooks_app.command("create")
def create(
    url: Annotated[str, typer.Argument(help="http(s) URL to POST deliveries to.")],
    description: Annotated[str | None, typer.Option(help="For people.")] = None,
    raw: JsonFlag = False,
) -> None:
    """Register an endpoint; prints its id and its secret (shown only now)."""
    body = {"url": url, **({"description": description} if description else {})}
    with _api() as http:
        response = http.post("/v1/webhooks", json=body)
    if response.status_code >= 400:
        raise _fail(response)
    made = response.json()
    if raw:
        typer.echo(json.dumps(made, indent=2))
    else:
        typer.echo(f"{made['id']}  {made['url']}")
        typer.echo(f"secret: {made['secret']}  (shown once: store it to verify signatures)")


@webhooks_app.command("list")
def list_webhooks(raw: JsonFlag = False) -> None:
    """List endpoints (never their secrets)."""
    with _api() as http:
        response = http.get("/v1/webhooks", params={"limit": 100})
    if response.status_code >= 400:
        raise _fail(response)
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        typer.echo(f"{item['id']}  {item['url']}  {item['description'] or ''}".rstrip())


@webhooks_app.command("delete")
def delete(webhook_id: str) -> None:
    """Delete an endpoint (its undelivered notifications are dropped)."""
    with _api() as http:
        response = http.delete(f"/v1/webhooks/{webhook_id}")
    if response.status_code >= 400:
        raise _fail(response)
    typer.echo(f"deleted {webhook_id}")


@webhooks_app.command("deliveries")
def deliveries(job_id: str, raw: JsonFlag = False) -> None:
    """A job's notifications: event, state, attempts, last status or error."""
    with _api() as http:
        response = http.get(f"/v1/jobs/{job_id}/notifications")
    if response.status_code >= 400:
        raise _fail(response)
    body = response.json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        last = item["last_status_code"] or item["last_error"] or "-"
        typer.echo(f"{item['id']}  {item['event']}  {item['state']}  {item['attempts']}  {last}")
