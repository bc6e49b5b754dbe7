"""Client verbs (``submit``, ``status``, ``watch``, ``cancel``, ``result``) that talk to
a running service over HTTP (``ATLAS_URL``, ``ATLAS_API_KEY``).

``submit`` always sends an Idempotency-Key (a fresh one unless given) and retries a
lost answer with the same key, so a network failure never creates a second job.
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
    kind: Annotated[str, typer.Option(help="Job kind, e.g. atlas.bundle.")],
    input_json: Annotated[
        str, typer.Option("--input", help="The input as JSON, or @file.json.")
    ] = "{}",
    idempotency_key: Annotated[
        str | None, typer.Option(help="Reuse to make the submission safe to repeat.")
    ] = None,
) -> None:
    """Create a job and print its status (the job id is in `id`)."""
    raw = Path(input_json[1:]).read_text() if input_json.startswith("@") else input_json
    try:
        payload = {"kind": kind, "input": json.loads(raw)}
    except json.JSONDecodeError as exc:
        typer.echo(f"--input is not valid JSON: {exc}", err=True)
        raise typer.Exit(2) from None
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    with _client() as http:
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            try:
                response = http.post("/v1/jobs", json=payload, headers={"Idempotency-Key": key})
            except httpx.TransportError as exc:
                if attempt == SUBMIT_ATTEMPTS:
                    typer.echo(f"could not reach the service: {type(exc).__name__}", err=True)
                    raise typer.Exit(1) from None
                time.sleep(attempt)
                continue  # same key: a repeat returns the job the lost answer created
            if response.status_code == 409 and "retry-after" in response.headers:
                time.sleep(float(response.headers["retry-after"]))
                continue
            if response.status_code != 202:
                raise _fail(response)
            _print(response.json())
            return
    raise typer.Exit(1)


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
