"""``atlas-jobs webhooks ...``: register and list completion-callback endpoints over HTTP
(``--url``/``ATLAS_URL``, ``--api-key``/``ATLAS_API_KEY``), through the client library.
``create`` prints the endpoint's id, and its signing secret once (on stderr)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from atlas_jobs._app.cli.client import JsonFlag, KeyOption, UrlOption, _connected
from atlas_jobs._app.cli.tables import print_table
from atlas_jobs._app.client.address import DEFAULT_URL

webhooks_app = typer.Typer(
    help="Webhook endpoints for job completion callbacks.", no_args_is_help=True
)


@webhooks_app.command("create")
def create(
    url: Annotated[str, typer.Argument(help="http(s) URL to POST deliveries to.")],
    description: Annotated[str | None, typer.Option(help="For people.")] = None,
    raw: JsonFlag = False,
    api_url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Register an endpoint: prints its id (on stdout, alone) and its signing secret (on
    stderr, shown only now)."""
    body = {"url": url, **({"description": description} if description else {})}
    with _connected(api_url, api_key) as api:
        made = api.call("POST", "/v1/webhooks", ok=frozenset({201}), json=body).json()
    if raw:
        typer.echo(json.dumps(made, indent=2))
    else:
        typer.echo(made["id"])  # alone on stdout: HOOK=$(atlas-jobs webhooks create URL)
        typer.echo(f"endpoint {made['id']} for {made['url']}", err=True)
        typer.echo(
            f"secret: {made['secret']}  (shown once: store it to verify signatures)", err=True
        )


@webhooks_app.command("list")
def list_webhooks(
    raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """List endpoints (never their secrets)."""
    with _connected(url, api_key) as api:
        body = api.call("GET", "/v1/webhooks", params={"limit": 100}).json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    rows = [[item["id"], item["url"], item["description"]] for item in body["items"]]
    print_table(("ID", "URL", "DESCRIPTION"), rows, empty="no webhook endpoints")


@webhooks_app.command("delete")
def delete(webhook_id: str, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None) -> None:
    """Delete an endpoint (its undelivered notifications are dropped)."""
    with _connected(url, api_key) as api:
        api.call("DELETE", f"/v1/webhooks/{webhook_id}", ok=frozenset({204}))
    typer.echo(f"deleted {webhook_id}")


@webhooks_app.command("deliveries")
def deliveries(
    job_id: str, raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """A job's notifications: event, state, attempts, last status or error."""
    with _connected(url, api_key) as api:
        body = api.call("GET", f"/v1/jobs/{job_id}/notifications").json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    rows = [
        [
            item["id"],
            item["event"],
            item["state"],
            item["attempts"],
            item["last_status_code"] or item["last_error"] or "-",
        ]
        for item in body["items"]
    ]
    print_table(
        ("ID", "EVENT", "STATE", "ATTEMPTS", "LAST ANSWER"),
        rows,
        empty="no notifications for this job (is a webhook endpoint registered?)",
    )
