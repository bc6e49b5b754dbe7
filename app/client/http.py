"""``JobsClient``: the service's HTTP protocol as plain method calls (synchronous httpx).

Importable without the server (it imports nothing of ``atlas_jobs._app.api``, ``atlas_jobs._app.db``
or the settings: an import-linter contract keeps it so). Every answer that is not the one asked for
becomes a :mod:`atlas_jobs._app.client.errors` exception naming what to do; a transport failure is
:class:`~atlas_jobs._app.client.errors.ApiUnreachableError`, never a statement about the job.

The API key is sent only to the origin (scheme, host, port) of the base URL: a link the
service hands back (a signed download URL) may name another host, and needs no key.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
from httpx_sse import ServerSentEvent, connect_sse

from atlas_jobs._app.client.address import DEFAULT_URL
from atlas_jobs._app.client.errors import (
    ApiUnreachableError,
    ClientError,
    IntegrityError,
    InvalidJobIdError,
    JobNotFoundError,
    KeyRejectedError,
    NotAllowedError,
    RefusedError,
    describe_problem,
)

SUBMIT_ATTEMPTS: Final = 5
TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "canceled"})


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


@dataclass(frozen=True, slots=True)
class StatusRead:
    """One successful status read: the body (None on ``304 Not Modified``), its ETag,
    the server's ``Retry-After`` hint and whether it held the read (``Prefer: wait``)."""

    status: dict[str, Any] | None
    etag: str | None
    retry_after: float | None
    held: bool


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (the delta form the service sends), else None."""
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"title": response.reason_phrase or "error", "detail": response.text[:200]}
    return body if isinstance(body, dict) else {"title": str(body)[:200]}


def _names_the_job_id(problem: Mapping[str, Any]) -> bool:
    """A 422 whose errors point at the path's job id (not a UUID)."""
    errors = problem.get("errors")
    return isinstance(errors, list) and any(
        isinstance(error, Mapping) and list(error.get("loc") or [])[:1] == ["path"]
        for error in errors
    )


class JobsClient:
    """One API base URL and key; use as a context manager (it owns a connection pool)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        read_timeout: float = 40.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        base = httpx.URL(self.url)
        self._http = httpx.Client(
            base_url=base,
            auth=OriginBoundKey(api_key, base) if api_key else None,
            timeout=httpx.Timeout(timeout, read=read_timeout),
            transport=transport,
        )

    def __enter__(self) -> JobsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plumbing -------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiUnreachableError(self.url, exc) from exc

    def _check(
        self, response: httpx.Response, ok: frozenset[int], job_id: str | None = None
    ) -> httpx.Response:
        if response.status_code in ok:
            return response
        if response.status_code == 401:
            raise KeyRejectedError()
        if response.status_code == 404 and job_id is not None:
            raise JobNotFoundError(job_id)
        problem = _problem(response)
        if response.status_code == 422 and job_id is not None and _names_the_job_id(problem):
            raise InvalidJobIdError(job_id)
        if response.status_code == 403:
            raise NotAllowedError(describe_problem(403, problem))
        raise RefusedError(response.status_code, problem, retry_after(response))

    def call(
        self, method: str, path: str, *, ok: frozenset[int] = frozenset({200}), **kwargs: Any
    ) -> httpx.Response:
        """Any other route (schedules, webhooks): the answer when its status is in ``ok``,
        else the typed error (unreachable, key rejected, not allowed, refused)."""
        return self._check(self._send(method, path, **kwargs), ok)

    # -- creation -------------------------------------------------------------------

    def post_idempotent(
        self,
        path: str,
        payload: Any,
        headers: Mapping[str, str] | None = None,
        *,
        attempts: int = SUBMIT_ATTEMPTS,
        pause: float = 1.0,
    ) -> httpx.Response:
        """POST a creation, repeating it on a lost answer or a ``409`` in flight -- safe
        because it carries an idempotency key: a repeat returns what the lost answer
        created, so recovering never makes a second job."""
        for attempt in range(1, attempts + 1):
            try:
                response = self._http.post(path, json=payload, headers=dict(headers or {}))
            except httpx.TransportError as exc:
                if attempt == attempts:
                    raise ApiUnreachableError(self.url, exc) from exc
                time.sleep(pause * attempt)
                continue
            wait = retry_after(response)
            if response.status_code == 409 and wait is not None and attempt < attempts:
                time.sleep(wait)
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def submit(
        self,
        kind: str,
        job_input: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        notify: str | None = None,
        attempts: int = SUBMIT_ATTEMPTS,
        timing: Mapping[str, Any] | None = None,
        tags: Sequence[str] = (),
        priority: int | None = None,
        concurrency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create a job (``202``); every retry sends the same ``Idempotency-Key``.
        ``notify``: one of the owner's webhook endpoints, called when the job ends.
        ``timing``: any of ``run_at``, ``delay_seconds``, ``start_by``,
        ``start_within_seconds``. ``priority`` and ``concurrency_key``: as the creation
        body's (unset: the kind's defaults)."""
        key = idempotency_key or f"cli-{uuid.uuid4()}"
        payload: dict[str, Any] = {"kind": kind, "input": dict(job_input), **(timing or {})}
        if tags:
            payload["tags"] = list(tags)
        if priority is not None:
            payload["priority"] = priority
        if concurrency_key is not None:
            payload["concurrency_key"] = concurrency_key
        if notify is not None:
            payload["notify"] = notify
        response = self.post_idempotent(
            "/v1/jobs",
            payload,
            {"Idempotency-Key": key},
            attempts=attempts,
        )
        body: dict[str, Any] = self._check(response, frozenset({202})).json()
        return body

    # -- reads ----------------------------------------------------------------------

    def read_status(
        self, job_id: str, *, etag: str | None = None, wait: int | None = None
    ) -> StatusRead:
        """One status read: plain, or conditional and held (``If-None-Match`` +
        ``Prefer: wait=N``)."""
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if wait:
            headers["Prefer"] = f"wait={wait}"
        response = self._check(
            self._send("GET", f"/v1/jobs/{job_id}", headers=headers),
            frozenset({200, 304}),
            job_id,
        )
        return StatusRead(
            status=response.json() if response.status_code == 200 else None,
            etag=response.headers.get("etag", etag),
            retry_after=retry_after(response),
            held="preference-applied" in response.headers,
        )

    def status(self, job_id: str) -> dict[str, Any]:
        read = self.read_status(job_id)
        assert read.status is not None
        return read.status

    def list_jobs(
        self,
        *,
        states: list[str] | None = None,
        kinds: list[str] | None = None,
        limit: int = 20,
        cursor: str | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One page of the jobs the caller may search (``items``, ``next_cursor``);
        ``filters`` are further ``GET /v1/jobs`` parameters (``tag``, ``owner``,
        ``reason``, ``error_code``, ``created_after``, ...), lists for repeated ones."""
        params: dict[str, Any] = {"limit": limit}
        params.update({k: v for k, v in (filters or {}).items() if v not in (None, [], ())})
        if states:
            params["state"] = states
        if kinds:
            params["kind"] = kinds
        if cursor:
            params["cursor"] = cursor
        body: dict[str, Any] = self._check(
            self._send("GET", "/v1/jobs", params=params), frozenset({200})
        ).json()
        return body

    def start_bulk_operation(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/bulk-operations``: the accepted operation (``202``), or with
        ``dry_run`` the count and sample (``200``)."""
        answer: dict[str, Any] = self._check(
            self._send("POST", "/v1/bulk-operations", json=dict(body)), frozenset({200, 202})
        ).json()
        return answer

    def bulk_operation(self, operation_id: str, *, wait: int | None = None) -> dict[str, Any]:
        """A bulk operation; with ``wait``, held until it ends or ``wait`` seconds pass."""
        headers = {"Prefer": f"wait={wait}"} if wait else {}
        answer: dict[str, Any] = self._check(
            self._send("GET", f"/v1/bulk-operations/{operation_id}", headers=headers),
            frozenset({200}),
        ).json()
        return answer

    def cancel_bulk_operation(self, operation_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._check(
            self._send("POST", f"/v1/bulk-operations/{operation_id}/cancel"), frozenset({202})
        ).json()
        return answer

    def kinds(self) -> list[dict[str, Any]]:
        """Every job kind (``GET /v1/kinds``): versions, live workers per version,
        description and input schema."""
        body: dict[str, Any] = self._check(self._send("GET", "/v1/kinds"), frozenset({200})).json()
        kinds: list[dict[str, Any]] = body["kinds"]
        return kinds

    def history(self, job_id: str) -> list[dict[str, Any]]:
        """Every recorded transition, oldest first (all pages)."""
        items: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self._check(
                self._send("GET", f"/v1/jobs/{job_id}/history", params={"after": after}),
                frozenset({200}),
                job_id,
            ).json()
            items.extend(page["items"])
            if page.get("next_after") is None:
                return items
            after = int(page["next_after"])

    def events(self, job_id: str, *, last_event_id: str | None = None) -> Iterator[ServerSentEvent]:
        """The job's Server-Sent Events (``transition``, ``progress``) until it ends."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        try:
            with connect_sse(
                self._http, "GET", f"/v1/jobs/{job_id}/events", headers=headers
            ) as source:
                if source.response.status_code != 200:
                    source.response.read()
                    self._check(source.response, frozenset({200}), job_id)
                for event in source.iter_sse():
                    if event.data:  # a `retry:`-only block carries no event
                        yield event
        except httpx.TransportError as exc:
            raise ApiUnreachableError(self.url, exc) from exc

    # -- actions --------------------------------------------------------------------

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Request cancellation: the status (``cancel_requested`` or ``canceled``), or
        :class:`RefusedError` 409 when the job ended another way (``problem["state"]``)."""
        body: dict[str, Any] = self._check(
            self._send("POST", f"/v1/jobs/{job_id}/cancel"), frozenset({202}), job_id
        ).json()
        return body

    def reschedule(
        self, job_id: str, *, run_at: str | None = None, delay_seconds: int | None = None
    ) -> dict[str, Any]:
        """Move a queued job's not-before (``run_at`` or ``delay_seconds`` from now), or
        drop it (neither): the status, or :class:`RefusedError` (409: no longer queued,
        or its start deadline passed; 422: a bad time)."""
        body: dict[str, Any] = {} if run_at is None else {"run_at": run_at}
        if delay_seconds is not None:
            body["delay_seconds"] = delay_seconds
        answer: dict[str, Any] = self._check(
            self._send("POST", f"/v1/jobs/{job_id}/reschedule", json=body),
            frozenset({200}),
            job_id,
        ).json()
        return answer

    def result(self, job_id: str) -> dict[str, Any]:
        """The result reference (files with signed URLs and sha256) once available."""
        body: dict[str, Any] = self._check(
            self._send("GET", f"/v1/jobs/{job_id}/result"), frozenset({200}), job_id
        ).json()
        return body

    def download(self, entry: Mapping[str, Any], target: Path, *, force: bool = False) -> Path:
        """Fetch one file of a result reference into ``target`` (a file path), checking
        its sha256; written beside the target first, so a bad download leaves nothing.
        An existing file is kept unless ``force``."""
        if target.exists() and not force:
            raise ClientError(f"{target} exists; pass --force to overwrite it")
        partial = target.with_name(f".{target.name}.part")
        digest = hashlib.sha256()
        try:
            # A signed URL is its own credential: no key, whatever host it names.
            with self._http.stream("GET", str(entry["url"]), auth=None) as stream:
                if stream.status_code != 200:
                    stream.read()
                    self._check(stream, frozenset({200}))
                with partial.open("wb") as handle:
                    for chunk in stream.iter_bytes():
                        digest.update(chunk)
                        handle.write(chunk)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise ApiUnreachableError(self.url, exc) from exc
        if digest.hexdigest() != entry["sha256"]:
            partial.unlink(missing_ok=True)
            raise IntegrityError(
                f"{entry['name']}: sha256 {digest.hexdigest()} does not match the result "
                f"reference ({entry['sha256']}); nothing was written"
            )
        partial.replace(target)
        return target


__all__ = ["DEFAULT_URL", "TERMINAL_STATES", "JobsClient", "OriginBoundKey", "StatusRead"]
