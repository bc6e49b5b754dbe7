"""Client verbs (``submit``, ``status``, ``watch``, ``list``, ``history``, ``events``,
``cancel``, ``result``, ``kinds``) over HTTP, through the client library
:mod:`atlas_jobs._app.client`.

Where: ``--url`` / ``ATLAS_URL`` and ``--api-key`` / ``ATLAS_API_KEY``. Every failure is
one line on stderr saying what to do, never a traceback, with a documented exit code:

==== ==========================================================================
0    done (``watch``: the job succeeded)
1    the service refused the request (a problem answer: 409, 410, 422, ...: its
     title, then one ``field: message`` line per error it lists);
     ``watch``: the job ended ``failed`` or ``canceled``
2    bad usage (missing key, bad ``--input``, a file that would be overwritten, a job
     id that is not one)
3    the API is unreachable at the URL given
4    the key was rejected (401) or lacks the role (403)
5    the job was not found (unknown, or another owner's)
6    a downloaded file does not match its sha256
7    ``result -o DIR``: the job finished without files, so there is nothing to download
     (``result`` without ``-o`` says so and exits 0)
130  stopped with Ctrl-C (``watch``: the job continues)
==== ==========================================================================

``watch`` shows :func:`atlas_jobs._app.presentation.present`'s label: rendered in place on a
terminal (rich), one line per change when piped. A failed read makes the view *stale*
(after 10 s without a successful read, by the client's own timer), never *failed*.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from atlas_jobs._app.cli.render import (
    facts,
    kinds_table,
    present_status,
    result_summary,
    watch_line,
    watch_panel,
)
from atlas_jobs._app.cli.tables import print_table
from atlas_jobs._app.client.address import DEFAULT_URL
from atlas_jobs._app.client.errors import ClientError, RefusedError

if TYPE_CHECKING:
    from atlas_jobs._app.client.http import JobsClient
    from atlas_jobs._app.client.observer import Observer

# httpx, the observer and rich's live view are imported by the verbs that use them, so
# `atlas-jobs --help` (and every verb's own help) loads neither.

client_app = typer.Typer(help="Client verbs.")

UrlOption = Annotated[
    str, typer.Option("--url", envvar="ATLAS_URL", help="Base URL of the Atlas API.")
]
KeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ATLAS_API_KEY", show_default=False, help="Your API key."),
]
JobId = Annotated[str, typer.Argument(help="The job id.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the raw JSON body.")]
EXIT_USAGE = 2
EXIT_NOTHING_TO_DOWNLOAD = 7
EXIT_INTERRUPTED = 130


def _say(text: str) -> None:
    typer.echo(text, err=True)


@contextmanager
def _connected(url: str, api_key: str | None) -> Iterator[JobsClient]:
    """A client for the verb; any :class:`ClientError` becomes one line and its exit code."""
    if not api_key:
        _say("no API key: pass --api-key or set ATLAS_API_KEY (`atlas-jobs keys create`)")
        raise typer.Exit(EXIT_USAGE)
    from atlas_jobs._app.client.http import JobsClient

    try:
        with JobsClient(url, api_key) as client:
            yield client
    except ClientError as error:
        _say(error.message)
        raise typer.Exit(error.exit_code) from None
    except (ValueError, KeyError, TypeError) as error:
        _say(f"unexpected answer from the API at {url}: {type(error).__name__}: {error}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


PriorityOption = Annotated[
    int | None,
    typer.Option(
        help="0 (lowest) to 9 (highest), default 4: higher starts first among an owner's jobs."
    ),
]
ConcurrencyKeyOption = Annotated[
    str | None,
    typer.Option(help="The concurrency key the job runs under (where its kind takes one)."),
]


def submit(
    kind: Annotated[str | None, typer.Option(help="Job kind, e.g. atlas.bundle.")] = None,
    input_json: Annotated[
        str, typer.Option("--input", help="The input as JSON, or @file.json.")
    ] = "{}",
    idempotency_key: Annotated[
        str | None, typer.Option(help="Reuse to make the submission safe to repeat.")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="JSON Lines: one job per line (kind, input, optional idempotency_key); "
            "sent with POST /v1/jobs:batch; prints one job id per line.",
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Jobs per batch request with --from-file.")
    ] = 100,
    run_at: Annotated[
        str | None, typer.Option(help="Not before this instant (RFC 3339, e.g. 2026-12-02T09:00Z).")
    ] = None,
    delay: Annotated[
        int | None, typer.Option(min=0, help="Not before this many seconds from now.")
    ] = None,
    start_by: Annotated[
        str | None, typer.Option(help="Fail unless a worker starts it by this instant.")
    ] = None,
    start_within: Annotated[
        int | None, typer.Option(min=1, help="Fail unless a worker starts it within N s.")
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A key=value tag to find the job by (repeatable; not secret)."),
    ] = None,
    priority: PriorityOption = None,
    concurrency_key: ConcurrencyKeyOption = None,
    notify: Annotated[
        str | None,
        typer.Option(
            help="A webhook endpoint's id (atlas-jobs webhooks create): called when the job ends."
        ),
    ] = None,
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Create a job and print its id (--json: its status), or create every job of a JSON
    Lines file (--from-file) and print their ids. A lost answer is repeated with the same
    Idempotency-Key, so it never creates a second job."""
    if from_file is not None:
        per_job = (kind, idempotency_key, notify, run_at, delay, start_by, start_within)
        if tag or any(v is not None for v in (*per_job, priority, concurrency_key)):
            _say("--from-file takes every job's fields from the file")
            raise typer.Exit(EXIT_USAGE)
        from atlas_jobs._app.cli.batchfile import submit_file

        with _connected(url, api_key) as client:
            submit_file(client, from_file, batch_size)
        return
    if kind is None:
        _say("give --kind (one job) or --from-file (many)")
        raise typer.Exit(EXIT_USAGE)
    try:
        raw = Path(input_json[1:]).read_text() if input_json.startswith("@") else input_json
        job_input = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        _say(f"--input is not readable JSON: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    if not isinstance(job_input, dict):
        _say("--input must be a JSON object")
        raise typer.Exit(EXIT_USAGE)
    with _connected(url, api_key) as client:
        timing = {
            name: value
            for name, value in (
                ("run_at", run_at),
                ("delay_seconds", delay),
                ("start_by", start_by),
                ("start_within_seconds", start_within),
            )
            if value is not None
        }
        created = client.submit(
            kind,
            job_input,
            idempotency_key=idempotency_key,
            notify=notify,
            tags=tag or (),
            timing=timing,
            priority=priority,
            concurrency_key=concurrency_key,
        )
    if as_json:
        _print_json(created)
        return
    typer.echo(created["id"])
    _say(f"{present_status(created).label}; follow it with: atlas-jobs watch {created['id']}")


def status(
    job_id: JobId,
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Print the job's label and key facts (a successful read is not job success)."""
    with _connected(url, api_key) as client:
        job = client.status(job_id)
        reference = None if as_json else _result_reference(client, job_id, job)
    if as_json:
        _print_json(job)
        return
    for line in facts(job, present_status(job, reference), reference):
        typer.echo(line)


StatesOption = Annotated[
    list[str] | None, typer.Option("--state", help="Only jobs in this state (repeatable).")
]
KindsOption = Annotated[
    list[str] | None, typer.Option("--kind", help="Only jobs of this kind (repeatable).")
]
TagsOption = Annotated[
    list[str] | None,
    typer.Option("--tag", help="Only jobs with this key=value tag (repeatable: all)."),
]
OwnersOption = Annotated[
    list[str] | None,
    typer.Option("--owner", help="Operators: only this owner's jobs (repeatable)."),
]
ReasonsOption = Annotated[
    list[str] | None, typer.Option("--reason", help="Only jobs with this reason (repeatable).")
]
ErrorCodesOption = Annotated[
    list[str] | None,
    typer.Option("--error-code", help="Only jobs whose (last) error has this code (repeatable)."),
]
TimeOption = Annotated[
    str | None, typer.Option(help="An ISO 8601 time with its zone (2026-12-01T09:00:00Z).")
]


def search_filters(
    *,
    state: list[str] | None = None,
    kind: list[str] | None = None,
    tag: list[str] | None = None,
    owner: list[str] | None = None,
    reason: list[str] | None = None,
    error_code: list[str] | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    finished_after: str | None = None,
    finished_before: str | None = None,
) -> dict[str, Any]:
    """The search fields given (``GET /v1/jobs`` names), as a filter document."""
    given: dict[str, Any] = {
        "state": state,
        "kind": kind,
        "tag": tag,
        "owner": owner,
        "reason": reason,
        "error_code": error_code,
        "created_after": created_after,
        "created_before": created_before,
        "finished_after": finished_after,
        "finished_before": finished_before,
    }
    return {name: value for name, value in given.items() if value}


def _result_reference(
    client: JobsClient, job_id: str, job: dict[str, Any]
) -> dict[str, Any] | None:
    """The result reference when the delivery is ``available`` (whether there are files
    to download decides the label), else ``None``."""
    if (job.get("delivery") or {}).get("state") != "available":
        return None
    try:
        return client.result(job_id)
    except RefusedError:  # expired between the two reads: the status alone tells it
        return None


def _tags_cell(job: dict[str, Any]) -> str:
    tags = job.get("tags") or []
    return f"[{' '.join(tags)}]" if tags else ""


def list_jobs(
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
    limit: Annotated[int, typer.Option(min=1, max=100, help="Jobs per page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Continue after a previous page.")] = None,
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Search jobs, newest first: id, kind, state, label and tags. Your own jobs;
    operators every owner's (``--owner`` narrows it)."""
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
    with _connected(url, api_key) as client:
        page = client.list_jobs(limit=limit, cursor=cursor, filters=filters)
    if as_json:
        _print_json(page)
        return
    rows = [
        [job["id"], job["kind"], job["state"], present_status(job).label, _tags_cell(job)]
        for job in page["items"]
    ]
    print_table(("ID", "KIND", "STATE", "LABEL", "TAGS"), rows, empty="no jobs")
    if page.get("next_cursor"):
        _say(f"more: atlas-jobs list ... --cursor {page['next_cursor']}")


def history(
    job_id: JobId,
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Print every recorded transition of the job, oldest first."""
    with _connected(url, api_key) as client:
        items = client.history(job_id)
    if as_json:
        _print_json(items)
        return
    print_table(
        ("SEQ", "AT", "MOVE", "TRANSITION", "REASON", "ACTOR", "ATTEMPT", "DETAIL"),
        [_history_row(item) for item in items],
        empty="no recorded transitions",
    )


def _history_row(item: dict[str, Any]) -> list[str | int | None]:
    """One transition: a missing reason or attempt is an empty cell; the detail is the
    error (for a retry: its cause), the note and the repeat count."""
    details = []
    error = item.get("error")
    if error:
        details.append(f"error: {error.get('message')}")
    if item.get("note"):
        details.append(f"note: {item['note']}")
    if int(item.get("count", 1)) > 1:
        details.append(f"x{item['count']}")
    return [
        item["seq"],
        item["at"],
        f"{item.get('from') or '∅'} → {item['to']}",
        item["transition"],
        item.get("reason"),
        item["actor"],
        item.get("attempt"),
        "; ".join(details),
    ]


def events(
    job_id: JobId,
    last_event_id: Annotated[
        str | None, typer.Option(help="Resume after this event id (a history seq).")
    ] = None,
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Follow the job's event stream (SSE) until it ends: one line per transition (a
    retry or failure with its cause), a progress line when the label changes."""
    with _connected(url, api_key) as client:
        stream = client.events(job_id, last_event_id=last_event_id)
        if as_json:
            for event in stream:
                typer.echo(json.dumps({"event": event.event, "id": event.id, "data": event.json()}))
            return
        for line in event_lines((event.event, event.id, event.json()) for event in stream):
            typer.echo(line)


def event_lines(events: Iterable[tuple[str, str, dict[str, Any]]]) -> Iterator[str]:
    """The lines of ``events`` for (event name, id, data) in stream order: one per
    transition (with the cause of a retry or failure), and one per progress event
    only when the label it shows differs from the last one printed."""
    shown = ""
    for name, event_id, data in events:
        if name == "transition":
            yield _transition_line(event_id, data)
            continue
        label = present_status(data).label
        if label != shown:
            yield f"    ·  {data['updated_at']}  {label}"
            shown = label


def _transition_line(event_id: str, data: dict[str, Any]) -> str:
    """One transition of the stream, with its reason and, when the move was caused by
    an error (a retry, a failure), the error's code and message."""
    why = ", ".join(str(part) for part in (data["transition"], data.get("reason")) if part)
    line = f"{event_id:>5}  {data['at']}  {data.get('from') or '∅'} → {data['to']}  ({why})"
    error = data.get("error")
    if error:
        line += f"  cause: {error.get('code')}: {error.get('message')}"
    if data.get("note"):
        line += f"  note: {data['note']}"
    return line


def watch(
    job_id: JobId,
    wait: Annotated[
        int,
        typer.Option(
            min=1,
            max=9,
            help="Long-poll seconds per read; below the 10 s after which the view turns "
            "stale, so a quiet job on a healthy connection never looks stale.",
        ),
    ] = 8,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Show the job's label as it changes until it finishes (Ctrl-C stops watching; the
    job continues). In place on a terminal, one line per change when piped."""
    from atlas_jobs._app.client.observer import Observer

    observer = Observer()
    final: dict[str, Any] | None = None
    with _connected(url, api_key) as client:
        try:
            if sys.stdout.isatty():
                final = _watch_live(client, job_id, observer, wait)
            else:
                final = _watch_lines(client, job_id, observer, wait)
        except KeyboardInterrupt:
            observer.stop()
            typer.echo(observer.view().label)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(0 if final is not None and final.get("state") == "succeeded" else 1)


def _watch_lines(
    client: JobsClient, job_id: str, observer: Observer, wait: int
) -> dict[str, Any] | None:
    from atlas_jobs._app.client.observer import follow

    printed = ""

    def render(current: Observer) -> None:
        nonlocal printed
        key, line = watch_line(current, job_id)
        if key != printed:
            typer.echo(line)
            printed = key

    return follow(client, job_id, observer, render, wait=wait)


def _watch_live(
    client: JobsClient, job_id: str, observer: Observer, wait: int
) -> dict[str, Any] | None:
    from rich.console import Console
    from rich.live import Live

    from atlas_jobs._app.client.observer import follow

    console = Console()
    with Live(
        watch_panel(observer, job_id), console=console, auto_refresh=False, transient=False
    ) as live:
        shown = ""

        def render(current: Observer) -> None:
            nonlocal shown
            panel = watch_panel(current, job_id)
            with console.capture() as capture:
                console.print(panel)
            if capture.get() != shown:
                shown = capture.get()
                live.update(panel, refresh=True)

        try:
            return follow(client, job_id, observer, render, wait=wait)
        except KeyboardInterrupt:
            observer.stop()
            live.update(watch_panel(observer, job_id), refresh=True)
            raise


def cancel(job_id: JobId, url: UrlOption = DEFAULT_URL, api_key: KeyOption = None) -> None:
    """Request cancellation (a server request; the job stops at a safe point)."""
    with _connected(url, api_key) as client:
        try:
            answer = client.cancel(job_id)
        except RefusedError as refused:
            if refused.status_code != 409:
                raise
            _say(f"too late: the job already ended as {refused.problem.get('state')}")
            raise typer.Exit(1) from None
    typer.echo(answer["state"])


def reschedule(
    job_id: JobId,
    run_at: Annotated[str | None, typer.Option(help="Not before this instant (RFC 3339).")] = None,
    delay: Annotated[
        int | None, typer.Option(min=0, help="Not before this many seconds from now.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Move a queued job's delay (--run-at or --delay), or drop it (neither); prints the
    new label."""
    with _connected(url, api_key) as client:
        try:
            answer = client.reschedule(job_id, run_at=run_at, delay_seconds=delay)
        except RefusedError as refused:
            if refused.status_code != 409:
                raise
            _say(f"not rescheduled: {refused.problem.get('detail')}")
            raise typer.Exit(1) from None
    typer.echo(present_status(answer).label)


def result(
    job_id: JobId,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", "--download", help="Download every file into this directory."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite files that already exist.")] = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """Print the result's files, or download them (-o DIR) with their sha256 checked."""
    with _connected(url, api_key) as client:
        reference = client.result(job_id)
        if not reference["files"]:
            _say(f"nothing to download: {result_summary(reference)}")
            raise typer.Exit(0 if output is None else EXIT_NOTHING_TO_DOWNLOAD)
        if output is None:
            print_table(
                ("NAME", "BYTES", "SHA256"),
                [[e["name"], e["size"], e["sha256"]] for e in reference["files"]],
                empty="no files",
            )
            return
        targets = [(entry, output / Path(entry["name"]).name) for entry in reference["files"]]
        existing = [str(target) for _, target in targets if target.exists()]
        if existing and not force:
            _say(f"{existing[0]} exists; pass --force to overwrite (nothing was downloaded)")
            raise typer.Exit(EXIT_USAGE)
        output.mkdir(parents=True, exist_ok=True)
        for entry, target in targets:
            client.download(entry, target, force=force)
            typer.echo(str(target))


def kinds(
    as_json: JsonFlag = False,
    url: UrlOption = DEFAULT_URL,
    api_key: KeyOption = None,
) -> None:
    """List the job kinds: each version (the one new jobs get marked *), the live
    workers serving it now, and the kind's description. A version no API accepts but
    live workers serve is marked "(workers only)"."""
    with _connected(url, api_key) as client:
        found = client.kinds()
    if as_json:
        _print_json(found)
        return
    for line in kinds_table(found):
        typer.echo(line)
    if not found:
        _say("no kinds")


VERBS: dict[str, Callable[..., None]] = {
    "submit": submit,
    "status": status,
    "watch": watch,
    "list": list_jobs,
    "history": history,
    "events": events,
    "cancel": cancel,
    "reschedule": reschedule,
    "result": result,
    "kinds": kinds,
}


def register_client_verbs(app: typer.Typer) -> None:
    """Attach the client verbs to the top-level command."""
    for name, verb in VERBS.items():
        app.command(name)(verb)
        client_app.command(name)(verb)


__all__ = ["client_app", "register_client_verbs"]
