"""``submit --from-file jobs.jsonl``: a JSON Lines file sent through
``POST /v1/jobs:batch`` in batches of the server's limit, every item with its own key
(the file's, or a fresh one), one job id printed per line; a bad line is reported with
its line number and nothing is sent."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from atlas_jobs._app.client.errors import KeyRejectedError, describe_problem

if TYPE_CHECKING:
    import httpx

    from atlas_jobs._app.client.http import JobsClient

JOB_LINE_FIELDS = (
    "kind",
    "input",
    "idempotency_key",
    "notify",
    "tags",
    "priority",
    "concurrency_key",
    "run_at",
    "delay_seconds",
    "start_by",
    "start_within_seconds",
)
"""The fields of a line: those of a ``POST /v1/jobs:batch`` item, checked by the server
(a refusal names the line)."""


def _job_line(text: str) -> dict[str, Any]:
    """One line of a --from-file: the batch item, or ValueError saying what is wrong."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(item) - set(JOB_LINE_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)}; expected {', '.join(JOB_LINE_FIELDS)}"
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


def _fail(response: httpx.Response) -> typer.Exit:
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict):
        text = describe_problem(response.status_code, problem)
    else:
        text = f"HTTP {response.status_code} {response.text[:200]}"
    typer.echo(text, err=True)
    return typer.Exit(1)


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


def submit_file(client: JobsClient, path: Path, batch_size: int) -> None:
    """Every job of the file through ``POST /v1/jobs:batch``; one id per line."""
    jobs = _read_job_lines(path)
    start = 0
    while start < len(jobs):
        chunk = jobs[start : start + batch_size]
        response = client.post_idempotent("/v1/jobs:batch", {"jobs": [item for _, item in chunk]})
        limit = _batch_limit(response)
        if limit is not None and limit < len(chunk):
            batch_size = limit  # the server allows fewer per batch: send smaller ones
            continue
        if response.status_code == 401:
            raise KeyRejectedError()
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


__all__ = ["submit_file"]
