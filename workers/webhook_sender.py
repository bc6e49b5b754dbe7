"""The webhook sender: delivers the outbox rows that job transitions wrote.

Runs in every worker process every ``ATLAS_WEBHOOK_INTERVAL_SECONDS``. A pass claims a
bounded batch of due deliveries (``FOR UPDATE SKIP LOCKED``; the attempt is counted and a
lease taken in the same statement, before anything is sent), sends them concurrently,
then records every outcome in one statement, fenced by the attempt number.

Delivery is at least once: a response lost on the way back (the receiver applied it and
the connection dropped), or a worker killed mid-send, means the same delivery is sent
again -- with the same ``webhook-id``, so the receiver can tell. Each attempt is signed
anew (``webhook-timestamp`` is the attempt's). A 2xx is delivered; anything else (an
error status, a timeout, a refused connection) is retried with full-jitter exponential
backoff until ``ATLAS_WEBHOOK_MAX_ATTEMPTS``, then ``failed``. The job itself is never
touched.

Every attempt checks its URL again (:func:`atlas_jobs._app.webhooks.check_url`: the host resolved
once per pass, off the event loop, every address it resolves to allowed) and connects to
the addresses that check passed, never to a second resolution of the name
(:class:`atlas_jobs._workers.pinned_transport.PinnedTransport`): a name that now resolves to an
internal address -- or to a mix of public and internal ones -- fails the delivery
(``unsafe_url``), and a DNS answer that changes between the check and the connection
cannot redirect it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db import webhooks as store
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.webhooks import (
    DeliveryAttemptState,
    Resolver,
    Target,
    UnsafeUrlError,
    backoff_seconds,
    check_url,
    check_url_form,
    sign,
    system_resolve,
)
from atlas_jobs._workers.pinned_transport import PinnedTransport

log = get_logger("atlas.worker.webhooks")

RenderStatus = Callable[[JobRow, Sequence[Any]], Mapping[str, Any]]
"""The job's status representation from its row and stage rows: the HTTP API's own
(injected by the command that starts the worker, so workers do not import the API)."""

SENDS_AT_ONCE = 16
USER_AGENT = "atlas-jobs-webhooks/1"


class WebhookSender:
    def __init__(
        self,
        engine: AsyncEngine,
        clock: Clock,
        settings: Settings,
        render: RenderStatus,
        *,
        batch_size: int = 50,
        resolve: Resolver = system_resolve,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.settings = settings
        self.render = render
        self.batch_size = batch_size
        self._allowed, self._internal = settings.webhook_hosts
        self._lease = settings.webhook_timeout_seconds * 2 + 5
        self.resolve = resolve

    async def run_once(self) -> int:
        """Send what is due; returns how many were delivered."""
        offset = self.clock.offset.total_seconds()
        async with self.engine.begin() as conn:
            claimed = await store.claim_due(
                conn, limit=self.batch_size, lease_seconds=self._lease, clock_offset=offset
            )
        if not claimed:
            return 0
        bodies = await self._bodies(claimed)
        limit = asyncio.Semaphore(SENDS_AT_ONCE)
        transport = PinnedTransport()
        checks: dict[tuple[str, int], asyncio.Task[Target]] = {}
        async with httpx.AsyncClient(
            transport=transport,
            timeout=self.settings.webhook_timeout_seconds,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT},
        ) as http:

            async def one(row: Any) -> store.Outcome:
                async with limit:
                    body = bodies.get(row.job_id)
                    if body is None:  # the job is gone (pruned): nothing left to say
                        return self._outcome(row, DeliveryAttemptState.FAILED, None, "job_gone")
                    try:
                        target = transport.pin(await self._check(checks, row.url))
                    except UnsafeUrlError:
                        return self._outcome(row, DeliveryAttemptState.FAILED, None, "unsafe_url")
                    return await self._send(http, row, target, body)

            outcomes = await asyncio.gather(*(one(row) for row in claimed))
        async with self.engine.begin() as conn:
            await store.record(conn, outcomes, offset)
        for row, outcome in zip(claimed, outcomes, strict=True):
            log.info(
                "webhook.attempt",
                delivery_id=str(row.id),
                job_id=str(row.job_id),
                webhook_event=row.event,
                attempt=row.attempts,
                outcome=outcome.state,
                status_code=outcome.status_code,
                error_class=outcome.error,
            )
        return sum(o.state == DeliveryAttemptState.DELIVERED for o in outcomes)

    async def _bodies(self, claimed: Sequence[Any]) -> dict[Any, str]:
        """Each job's status representation, serialized once: the signed bytes."""
        ids = list({row.job_id for row in claimed})
        async with self.engine.connect() as conn:  # two queries for the whole batch
            found = await reads.get_jobs(conn, ids, now=self.clock.now())
            stages = await reads.stages_for(conn, [job.id for job in found])
        return {
            job.id: json.dumps(
                self.render(job, stages[job.id] if job.plan_revision else []),
                separators=(",", ":"),
                ensure_ascii=False,
            )
            for job in found
        }

    async def _check(self, checks: dict[tuple[str, int], asyncio.Task[Target]], url: str) -> Target:
        """``url`` checked, its host resolved at most once per pass (the deliveries of
        one pass to one host share the check, and so the addresses they connect to)."""
        key = check_url_form(url, allowed_hosts=self._allowed)
        task = checks.get(key)
        if task is None:
            task = asyncio.create_task(
                check_url(
                    url,
                    allowed_hosts=self._allowed,
                    internal_hosts=self._internal,
                    resolve=self.resolve,
                )
            )
            checks[key] = task
        target = await asyncio.shield(task)
        return Target(url, target.host, target.port, target.addresses)

    async def _send(
        self, http: httpx.AsyncClient, row: Any, target: Target, body: str
    ) -> store.Outcome:
        delivery_id = str(row.id)
        sent_at = store.sent_at(row)
        headers = {
            "content-type": "application/json",
            "webhook-id": delivery_id,
            "webhook-timestamp": str(int(sent_at.timestamp())),
            "webhook-signature": sign(row.secret, delivery_id, sent_at, body),
        }
        try:
            response = await http.post(target.url, content=body.encode(), headers=headers)
        except httpx.HTTPError as exc:
            return self._retry(row, None, type(exc).__name__)
        if 200 <= response.status_code < 300:
            return self._outcome(row, DeliveryAttemptState.DELIVERED, response.status_code, None)
        return self._retry(row, response.status_code, f"http_{response.status_code}")

    def _retry(self, row: Any, status: int | None, error: str) -> store.Outcome:
        if row.attempts >= self.settings.webhook_max_attempts:
            return self._outcome(row, DeliveryAttemptState.FAILED, status, error)
        delay = backoff_seconds(
            row.attempts,
            base=self.settings.webhook_backoff_base_seconds,
            cap=self.settings.webhook_backoff_cap_seconds,
        )
        return self._outcome(row, DeliveryAttemptState.PENDING, status, error, delay)

    @staticmethod
    def _outcome(
        row: Any,
        state: DeliveryAttemptState,
        status: int | None,
        error: str | None,
        delay: float = 0,
    ) -> store.Outcome:
        return store.Outcome(row.id, row.attempts, state.value, status, error, delay)
