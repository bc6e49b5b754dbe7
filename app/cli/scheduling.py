"""``atlas-jobs scheduling ...``: operators' fair-share weights and concurrency-key limits
over HTTP (``--url``/``ATLAS_URL``, ``--api-key``/``ATLAS_API_KEY``, an operator key).

Every change is recorded with the operator who made it (``scheduling changes``) and holds
from the next claim on. A failure is one line on stderr with the client verbs' exit codes
(1 refused, 3 API unreachable, 4 key rejected).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from atlas_jobs._app.cli.client import JsonFlag, KeyOption, UrlOption, _connected
from atlas_jobs._app.client import DEFAULT_URL

scheduling_app = typer.Typer(
    help="Fair share and concurrency keys (operators).", no_args_is_help=True
)

NoteOption = Annotated[str | None, typer.Option(help="Why: recorded with the change.")]


def _echo(body: Any, raw: bool, line: str) -> None:
    typer.echo(json.dumps(body, indent=2) if raw else line)


def _key_line(key: dict[str, Any]) -> str:
    limit = key["max_running"] if key["max_running"] is not None else key["declared_limit"]
    rate = f"{key['rate']}/{key['per_seconds']:g}s" if key["rate"] is not None else "-"
    shown = "-" if limit is None else limit
    return f"{key['key']}  running={key['running']}  limit={shown}  rate={rate}"


@scheduling_app.command("show")
def show(raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None) -> None:
    """The shares operators set (every other owner has 1) and the known keys."""
    with _connected(url, api_key) as api:
        body = api.call("GET", "/v1/scheduling").json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for owner in body["owners"]:
        typer.echo(f"owner {owner['owner']}  share={owner['share']}  by {owner['updated_by']}")
    for key in body["keys"]:
        typer.echo(f"key {_key_line(key)}")


@scheduling_app.command("set-share")
def set_share(
    owner: str,
    share: Annotated[int, typer.Argument(help="A weight, 1-1000 (default for everyone: 1).")],
    note: NoteOption = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Set an owner's weight in the fair share."""
    with _connected(url, api_key) as api:
        body = api.call(
            "PUT", f"/v1/scheduling/owners/{owner}", json={"share": share, "note": note}
        ).json()
    _echo(body, raw, f"owner {body['owner']}  share={body['share']}")


@scheduling_app.command("set-key")
def set_key(
    key: str,
    limit: Annotated[
        int | None,
        typer.Option(help="At most this many jobs of the key run at once (omit: the kind's)."),
    ] = None,
    rate: Annotated[
        int | None, typer.Option(help="At most this many starts per --per seconds.")
    ] = None,
    per: Annotated[float, typer.Option(help="The rate's period, in seconds.")] = 1.0,
    note: NoteOption = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Set a concurrency key's limit and start rate."""
    payload: dict[str, Any] = {"max_running": limit, "note": note}
    payload["rate"] = None if rate is None else {"starts": rate, "per_seconds": per}
    with _connected(url, api_key) as api:
        body = api.call("PUT", f"/v1/scheduling/keys/{key}", json=payload).json()
    _echo(body, raw, f"key {_key_line(body)}")


@scheduling_app.command("changes")
def changes(raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None) -> None:
    """Who changed which share or key, newest first."""
    with _connected(url, api_key) as api:
        body = api.call("GET", "/v1/scheduling/changes").json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        typer.echo(
            f"{item['at']}  {item['actor']}  {item['setting']} {item['subject']}  "
            f"{json.dumps(item['before'])} -> {json.dumps(item['after'])}"
        )
