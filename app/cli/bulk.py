"""``atlas-jobs bulk ...``: an operator's bulk operations over HTTP -- ``create`` (with
``--dry-run`` to count and sample first), ``status`` (``--wait`` holds until it ends),
``cancel``, ``list``. The filter options are those of ``atlas-jobs list``; ``--id``
names jobs instead. Failures are one line with the client verbs' exit codes."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from atlas_jobs._app.cli.client import (
    ErrorCodesOption,
    JsonFlag,
    KeyOption,
    KindsOption,
    OwnersOption,
    ReasonsOption,
    StatesOption,
    TagsOption,
    TimeOption,
    UrlOption,
    _connected,
    search_filters,
)
from atlas_jobs._app.client import DEFAULT_URL

bulk_app = typer.Typer(
    help="Bulk operations: cancel, resume, fail or replay many jobs (operators).",
    no_args_is_help=True,
)
EXIT_USAGE = 2


def _line(op: dict[str, Any]) -> str:
    counts = op["counts"]
    skipped = ", ".join(f"{k}={v}" for k, v in sorted(counts["skipped_by_reason"].items()))
    return (
        f"{op['id']}  {op['action']:<7} {op['state']:<10} matched={counts['matched']} "
        f"done={counts['done']} skipped={counts['skipped']}" + (f" ({skipped})" if skipped else "")
    )


def _show(body: dict[str, Any], raw: bool) -> None:
    if raw:
        typer.echo(json.dumps(body, indent=2))
    elif "items" in body:
        for item in body["items"]:
            typer.echo(_line(item))
    else:
        typer.echo(_line(body))


@bulk_app.command("create")
def create(
    action: Annotated[str, typer.Option(help="cancel, resume, fail or replay.")],
    state: StatesOption = None,
    kind: KindsOption = None,
    tag: TagsOption = None,
    owner: OwnersOption = None,
    reason: ReasonsOption = None,
    error_code: ErrorCodesOption = None,
    created_after: TimeOption = None,
    created_before: TimeOption = None,
    finished_after: TimeOption = None,
    finished_before: TimeOption = None,
    job_id: Annotated[
        list[str] | None, typer.Option("--id", help="These jobs instead of a filter (repeatable).")
    ] = None,
    note: Annotated[str | None, typer.Option(help="Why; recorded on every job touched.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count the matching jobs and show some.")
    ] = False,
    wait: Annotated[
        int | None, typer.Option(help="Hold until it ends (at most this many seconds).")
    ] = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Start a bulk operation (prints its id and counts), or count it with --dry-run."""
    filters = search_filters(
        state=state,
        kind=kind,
        tag=tag,
        owner=owner,
        reason=reason,
        error_code=error_code,
        created_after=created_after,
        created_before=created_before,
        finished_after=finished_after,
        finished_before=finished_before,
    )
    if job_id and filters:
        typer.echo("give a filter or --id, not both", err=True)
        raise typer.Exit(EXIT_USAGE)
    body: dict[str, Any] = {"action": action, "dry_run": dry_run}
    if job_id:
        body["job_ids"] = job_id
    else:
        body["filter"] = filters
    if note is not None:
        body["note"] = note
    with _connected(url, api_key) as api:
        answer = api.start_bulk_operation(body)
        if dry_run:
            if raw:
                typer.echo(json.dumps(answer, indent=2))
                return
            more = "+" if answer["matched_capped"] else ""
            typer.echo(f"would {action} among {answer['matched']}{more} matching jobs; newest:")
            for job in answer["sample"]:
                typer.echo(f"  {job['id']}  {job['kind']:<16} {job['state']}")
            return
        if wait:
            answer = api.bulk_operation(answer["id"], wait=wait)
    _show(answer, raw)


@bulk_app.command("status")
def status(
    operation_id: str,
    wait: Annotated[
        int | None, typer.Option(help="Hold until it ends (at most this many seconds).")
    ] = None,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """A bulk operation's state and counts (skipped, with why)."""
    with _connected(url, api_key) as api:
        _show(api.bulk_operation(operation_id, wait=wait), raw)


@bulk_app.command("cancel")
def cancel(
    operation_id: str,
    raw: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Cancel it: queued, it never runs; running, it stops before its next batch."""
    with _connected(url, api_key) as api:
        _show(api.cancel_bulk_operation(operation_id), raw)


@bulk_app.command("list")
def list_operations(
    raw: JsonFlag = False, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None
) -> None:
    """The latest bulk operations, newest first."""
    with _connected(url, api_key) as api:
        _show(api.call("GET", "/v1/bulk-operations", params={"limit": 100}).json(), raw)
