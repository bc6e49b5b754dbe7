"""Webhook endpoints an owner registers, and the deliveries of one job's events.

Another owner's endpoint or job is refused exactly like an unknown one
(:class:`WebhookNotFound`, :class:`JobNotFound`); ``owner=None`` (an operator) sees
every owner's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db import reads
from atlas_jobs._app.db import webhooks as store
from atlas_jobs._app.services.paging import Page, fetch_size, page_of
from atlas_jobs._app.services.refusals import InvalidRequest, JobNotFound, WebhookNotFound
from atlas_jobs._app.webhooks import Resolver, UnsafeUrlError, check_url, new_secret


async def register(
    engine: AsyncEngine,
    *,
    owner: str,
    url: str,
    description: str | None,
    created_by: str,
    allowed_hosts: Iterable[str],
    internal_hosts: Iterable[str],
    resolve: Resolver,
) -> tuple[Row[Any], str]:
    """The registered endpoint and its new secret (shown once); a URL the service may
    not call is refused (:class:`InvalidRequest` naming ``url``)."""
    try:
        target = await check_url(
            url, allowed_hosts=allowed_hosts, internal_hosts=internal_hosts, resolve=resolve
        )
    except UnsafeUrlError as exc:
        raise InvalidRequest(
            str(exc), errors=[{"loc": ["body", "url"], "msg": str(exc), "type": "unsafe_url"}]
        ) from None
    secret = new_secret()
    async with engine.begin() as conn:
        row = await store.register(
            conn,
            owner=owner,
            url=target.url,
            secret=secret,
            description=description,
            created_by=created_by,
        )
    return row, secret


async def page(
    engine: AsyncEngine, *, owner: str | None, before_seq: int | None, limit: int
) -> Page[Row[Any]]:
    """One page of endpoints, newest first."""
    async with engine.connect() as conn:
        rows = await store.page(conn, owner=owner, before_seq=before_seq, limit=fetch_size(limit))
    return page_of(rows, limit)


async def read(engine: AsyncEngine, webhook_id: uuid.UUID, *, owner: str | None) -> Row[Any]:
    async with engine.connect() as conn:
        row = await store.get(conn, webhook_id, owner=owner)
    if row is None:
        raise WebhookNotFound()
    return row


async def remove(engine: AsyncEngine, webhook_id: uuid.UUID, *, owner: str | None) -> None:
    """Deletes the endpoint (its undelivered notifications are dropped)."""
    async with engine.begin() as conn:
        removed = await store.remove(conn, webhook_id, owner=owner)
    if not removed:
        raise WebhookNotFound()


async def deliveries(
    engine: AsyncEngine, job_id: uuid.UUID, *, owner: str | None
) -> list[Row[Any]]:
    """The deliveries of the job's events, oldest first."""
    async with engine.connect() as conn:
        if await reads.get_job(conn, job_id, owner=owner) is None:
            raise JobNotFound()
        return await store.deliveries_of(conn, job_id)


def next_attempt_at(delivery: Any) -> datetime | None:
    """When a delivery is tried again: only a ``pending`` one has a next attempt."""
    return delivery.next_attempt_at if delivery.state == "pending" else None
