"""Client verbs (``submit``, ``status``, ``watch``, ``cancel``, ``result``) that talk to
a running service over HTTP (``ATLAS_URL``, ``ATLAS_API_KEY``).

``submit`` always sends an Idempotency-Key (a fresh one unless given) and retries a
lost answer with the same key, so a network failure never creates a second job.
``submit --from-file jobs.jsonl`` sends a JSON Lines file through ``POST /v1/jobs:batch``
in batches of the server's limit, every item with its own key (the file's, or a fresh
one), and prints one job id per line; a bad line is reported with its line number.
``watch`` long-polls with ``Prefer: wait`` and shows the label of
:func:`app.presentation.present`; a failed read makes the view *stale*, never *failed*.

The API key is sent only to the origin (scheme, host, port) of ``ATLAS_URL``: a URL
the service hands back (a signed download link) may name another host, and those links
need no key anyway.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from app.presentation import STALE_AFTER_SECONDS, Observation, present

client_app = typer.Typer(help="Client verbs.")

TERMINAL = frozenset({"succeeded", "failed", "canceled"})
DEFAULT_URL = "http://127.0.0.1:8000"
SUBMIT_ATTEMPTS = 5
DEFAULT_BATCH = 100  # the server's default ATLAS_BATCH_MAX_JOBS; a 413 says when it is less


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default_port = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default_port


class OriginBoundKey(httpx.Auth):
    """``Authorization: Bearer <key>`` on requests to one origin, and nowhere else."""

    def __init__(self, key: str, origin: httpx.URL) -> None:
        self._header = f"Bearer {key}"
        self._origin = _origin(origin)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _origin(request.url) == self._origin:
            request.headers["Authorization"] = self._header
        else:
            request.headers.pop("Authorization", None)
        yield request


def _client() -> httpx.Client:
    key = os.environ.get("ATLAS_API_KEY")
    if not key:
        typer.echo("set ATLAS_API_KEY (create one with `atlas-jobs keys create`)", err=True)
        raise typer.Exit(2)
    base = httpx.URL(os.environ.get("ATLAS_URL", DEFAULT_URL))
    return httpx.Client(
        base_url=base,
        auth=OriginBoundKey(key, base),
        timeout=httpx.Timeout(10.0, read=40.0),
    )


def _fail(response: httpx.Response) -> typer.Exit:
    try:
        problem = response.json()
        text = f"{problem.get('title')}: {problem.get('detail')}"
    except ValueError:
        text = response.text
    typer.echo(f"HTTP {response.status_code} {text}", err=True)
    return typer.Exit(1)


def _print(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


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
    ] = DEFAULT_BATCH,
) -> None:
    """Create a job and print its status (the job id is in `id`), or create every job of
    a JSON Lines file (--from-file) and print their ids."""
    if from_file is not None:
        if kind is not None or idempotency_key is not None:
            typer.echo("--from-file takes kinds and keys from the file", err=True)
            raise typer.Exit(2)
        _submit_file(from_file, batch_size)
        return
    if kind is None:
        typer.echo("give --kind (one job) or --from-file (many)", err=True)
        raise typer.Exit(2)
    raw = Path(input_json[1:]).read_text() if input_json.startswith("@") else input_json
    try:
        payload = {"kind": kind, "input": json.loads(raw)}
    except json.JSONDecodeError as exc:
        typer.echo(f"--input is not valid JSON: {exc}", err=True)
        raise typer.Exit(2) from None
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    with _client() as http:
        response = _post_retrying(http, "/v1/jobs", payload, headers={"Idempotency-Key": key})
        if response.status_code != 202:
            raise _fail(response)
        _print(response.json())


def _post_retrying(
    http: httpx.Client, path: str, payload: Any, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST, repeating it on a lost answer or a 409 in flight -- safe because every job
    sent carries an idempotency key (a repeat returns what the lost answer created)."""
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            response = http.post(path, json=payload, headers=headers)
        except httpx.TransportError as exc:
            if attempt == SUBMIT_ATTEMPTS:
                typer.echo(f"could not reach the service: {type(exc).__name__}", err=True)
                raise typer.Exit(1) from None
            time.sleep(attempt)
            continue
        in_flight = response.status_code == 409 and "retry-after" in response.headers
        if in_flight and attempt < SUBMIT_ATTEMPTS:
            time.sleep(float(response.headers["retry-after"]))
            continue
        return response
    raise typer.Exit(1)  # pragma: no cover - the loop returns or exits


JOB_LINE_FIELDS = frozenset({"kind", "input", "idempotency_key"})


def _job_line(text: str) -> dict[str, Any]:
    """One line of a --from-file: the batch item, or ValueError saying what is wrong."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(item) - JOB_LINE_FIELDS)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)}; expected kind, input, idempotency_key"
        )
    if not isinstance(item.get("kind"), str) or not item["kind"]:
        raise ValueError('"kind" must be a non-empty string')
    if not isinstance(item.setdefault("input", {}), dict):
        raise ValueError('"input" must be a JSON object')
    key = item.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= 255):
        raise ValueError('"idempotency_key" must be a string of 1 to 255 characters')
    return item


def _read_job_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every job of the file with its line number; all bad lines reported, then exit 2.
    Lines without a key get a fresh one, so a lost answer can be repeated safely."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"{path}: cannot read: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(2) from None
    jobs: list[tuple[int, dict[str, Any]]] = []
    bad = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = _job_line(line)
        except ValueError as exc:
            typer.echo(f"{path}:{number}: {exc}", err=True)
            bad += 1
            continue
        item.setdefault("idempotency_key", None)
        if item["idempotency_key"] is None:
            item["idempotency_key"] = f"cli-{uuid.uuid4()}"
        jobs.append((number, item))
    if bad:
        typer.echo(f"{bad} bad line(s); nothing was sent", err=True)
        raise typer.Exit(2)
    if not jobs:
        typer.echo(f"{path}: no jobs", err=True)
        raise typer.Exit(2)
    return jobs


def _batch_problem(response: httpx.Response, lines: list[int], path: Path) -> typer.Exit:
    """A refused batch: each error located by the file's line number where it can be."""
    try:
        problem = response.json()
    except ValueError:
        return _fail(response)
    errors = problem.get("errors") if isinstance(problem, dict) else None
    located = False
    for error in errors if isinstance(errors, list) else []:
        loc = [str(part) for part in error.get("loc", [])]
        if loc[:2] == ["body", "jobs"] and len(loc) > 2 and loc[2].isdigit():
            index = int(loc[2])
            if index < len(lines):
                field = ".".join(loc[3:]) or "item"
                typer.echo(f"{path}:{lines[index]}: {field}: {error.get('msg')}", err=True)
                located = True
    if located:
        typer.echo(f"HTTP {response.status_code} {problem.get('title')}", err=True)
        return typer.Exit(1)
    return _fail(response)


def _submit_file(path: Path, batch_size: int) -> None:
    jobs = _read_job_lines(path)
    with _client() as http:
        start = 0
        while start < len(jobs):
            chunk = jobs[start : start + batch_size]
            response = _post_retrying(http, "/v1/jobs:batch", {"jobs": [item for _, item in chunk]})
            limit = _batch_limit(response)
            if limit is not None and limit < len(chunk):
                batch_size = limit  # the server allows fewer per batch: send smaller ones
                continue
            if response.status_code != 202:
                if start:
                    typer.echo(f"the first {start} job(s) were created (ids above)", err=True)
                raise _batch_problem(response, [number for number, _ in chunk], path)
            for created in response.json()["items"]:
                typer.echo(created["id"])
            start += len(chunk)


def _batch_limit(response: httpx.Response) -> int | None:
    """The server's batch limit from a 413 ``batch-too-large`` problem."""
    if response.status_code != 413:
        return None
    try:
        limit = response.json().get("max_jobs")
    except (ValueError, AttributeError):
        return None
    return limit if isinstance(limit, int) and limit > 0 else None


def status(job_id: Annotated[str, typer.Argument(help="The job id.")]) -> None:
    """Print the job's status (a successful read is not job success)."""
    with _client() as http:
        response = http.get(f"/v1/jobs/{job_id}")
        if response.status_code != 200:
            raise _fail(response)
        _print(response.json())


def watch(
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    wait: Annotated[int, typer.Option(help="Long-poll seconds per read.")] = 25,
) -> None:
    """Show the job's label as it changes until it finishes (Ctrl-C stops watching)."""
    last_label = ""
    last_ok = time.monotonic()
    job: dict[str, Any] | None = None
    etag: str | None = None

    def show(observation: Observation) -> None:
        nonlocal last_label
        seconds = time.monotonic() - last_ok
        shown = present(job, observation, seconds_since_read=seconds)
        if shown.label != last_label:
            link = "  (result: atlas-jobs result " + job_id + ")" if shown.show_result_link else ""
            typer.echo(shown.label + link)
            last_label = shown.label

    try:
        with _client() as http:
            while True:
                headers = {"Prefer": f"wait={wait}"}
                if etag:
                    headers["If-None-Match"] = etag
                try:
                    response = http.get(f"/v1/jobs/{job_id}", headers=headers)
                except httpx.TransportError:
                    stale = time.monotonic() - last_ok >= STALE_AFTER_SECONDS
                    show(Observation.STALE if stale else Observation.FRESH)
                    time.sleep(1)
                    continue
                if response.status_code == 404:
                    raise _fail(response)
                if response.status_code not in {200, 304}:
                    show(Observation.STALE)
                    time.sleep(1)
                    continue
                last_ok = time.monotonic()
                if response.status_code == 200:
                    job = response.json()
                    etag = response.headers.get("etag")
                show(Observation.FRESH)
                if job is not None and job["state"] in TERMINAL:
                    raise typer.Exit(0 if job["state"] == "succeeded" else 1)
    except KeyboardInterrupt:
        show(Observation.STOPPED)
        raise typer.Exit(130) from None


def cancel(job_id: Annotated[str, typer.Argument(help="The job id.")]) -> None:
    """Request cancellation (a server request; the job stops at a safe point)."""
    with _client() as http:
        response = http.post(f"/v1/jobs/{job_id}/cancel")
        if response.status_code == 409:
            problem = response.json()
            typer.echo(f"too late: the job is {problem.get('state')}", err=True)
            raise typer.Exit(1)
        if response.status_code != 202:
            raise _fail(response)
        typer.echo(response.json()["state"])


def result(
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    download: Annotated[
        Path | None, typer.Option(help="Download every file into this directory.")
    ] = None,
) -> None:
    """Print the result reference, or download its files (signed URLs)."""
    with _client() as http:
        response = http.get(f"/v1/jobs/{job_id}/result")
        if response.status_code != 200:
            raise _fail(response)
        reference = response.json()
        if download is None:
            for entry in reference["files"]:
                typer.echo(f"{entry['name']}  {entry['size']} bytes  sha256 {entry['sha256']}")
            return
        download.mkdir(parents=True, exist_ok=True)
        for entry in reference["files"]:
            target = download / Path(entry["name"]).name
            # Signed URLs are their own credential: no key, whatever host they name.
            with http.stream("GET", entry["url"], auth=None) as stream:
                if stream.status_code != 200:
                    stream.read()
                    raise _fail(stream)
                with target.open("wb") as handle:
                    for chunk in stream.iter_bytes():
                        handle.write(chunk)
            typer.echo(str(target))


def register_client_verbs(app: typer.Typer) -> None:
    """Attach the client verbs to the top-level command."""
    for verb in (submit, status, watch, cancel, result):
        app.command(verb.__name__)(verb)
        client_app.command(verb.__name__)(verb)


__all__ = ["client_app", "register_client_verbs"]
