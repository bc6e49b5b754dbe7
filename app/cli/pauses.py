"""``atlas-jobs pauses ...``: pause and resume a kind (operator key), and list the pauses,
over HTTP (``--url``/``ATLAS_URL``, ``--api-key``/``ATLAS_API_KEY``). A paused kind's
queued jobs are not claimed; running attempts finish."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from atlas_jobs._app.cli.client import JsonFlag, KeyOption, UrlOption, _connected
from atlas_jobs._app.client import DEFAULT_URL

pauses_app = typer.Typer(
    help="Pause a kind (its queued jobs are not claimed) and resume it (operator key).",
    no_args_is_help=True,
)

KindArgument = Annotated[str, typer.Argument(help="The job kind, e.g. document.publish.")]
VersionOption = Annotated[
    int | None,
    typer.Option("--version", min=1, help="Only this version (default: every version)."),
]
NoteOption = Annotated[str | None, typer.Option(help="Why; shown on each held job.")]


def _line(pause: dict[str, Any]) -> str:
    which = pause["kind"] if pause["version"] is None else f"{pause['kind']}@{pause['version']}"
    note = f"  {pause['note']}" if pause.get("note") else ""
    return f"{which}  paused by {pause['paused_by']} at {pause['paused_at']}{note}"


def _body(version: int | None, note: str | None) -> dict[str, Any]:
    return {k: v for k, v in (("version", version), ("note", note)) if v is not None}


@pauses_app.command("pause")
def pause(
    kind: KindArgument,
    version: VersionOption = None,
    note: NoteOption = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Pause a kind: no worker claims its queued jobs until it is resumed."""
    with _connected(url, api_key) as api:
        answer = api.call(
            "POST",
            f"/v1/kinds/{kind}/pause",
            ok=frozenset({200, 201}),
            json=_body(version, note),
        )
    made = answer.json()
    if raw:
        typer.echo(json.dumps(made, indent=2))
    elif answer.status_code == 200:
        typer.echo(f"already {_line(made)}")
    else:
        typer.echo(_line(made))


@pauses_app.command("resume")
def resume(
    kind: KindArgument,
    version: VersionOption = None,
    note: NoteOption = None,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """End a kind's pause (that version's, or the every-version one): its jobs run again."""
    with _connected(url, api_key) as api:
        ended = api.call("POST", f"/v1/kinds/{kind}/resume", json=_body(version, note)).json()
    which = ended["kind"] if ended["version"] is None else f"{ended['kind']}@{ended['version']}"
    typer.echo(f"resumed {which}")


@pauses_app.command("list")
def list_pauses(
    raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """The pauses in force."""
    with _connected(url, api_key) as api:
        body = api.call("GET", "/v1/pauses").json()
    if raw:
        typer.echo(json.dumps(body, indent=2))
        return
    for item in body["items"]:
        typer.echo(_line(item))
    if not body["items"]:
        typer.echo("no kind is paused", err=True)
