"""The API-key cache (atlas_jobs._app.api.keycache): a revoked key is refused at most the TTL after
its revocation even when the revocation notice is lost, at once when it arrives, and
the cache never lets in a key the database would refuse."""

from __future__ import annotations

import asyncio
import time

import httpx
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.keycache import KeyCache
from atlas_jobs._app.apikeys import revoke_key
from atlas_jobs._app.db.schema import api_keys
from tests.api.support import Keys


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def key_id(engine: AsyncEngine, owner: str) -> object:
    async with engine.connect() as conn:
        return await conn.scalar(select(api_keys.c.id).where(api_keys.c.owner == owner))


async def test_a_revoked_key_is_refused_after_at_most_the_ttl_without_the_notice(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    ticks = Ticks()
    state = app.state.atlas
    state.keys = KeyCache(ttl_seconds=5, max_entries=100, now=ticks)
    state.notifier.on_keys_revoked = None  # the notice is lost: only the TTL is left
    assert (await client.get("/v1/jobs", headers=keys.b)).status_code == 200
    async with engine.begin() as conn:
        assert await revoke_key(conn, await key_id(engine, "bob"))  # type: ignore[arg-type]

    ticks.now += 4.9  # within the TTL the cached lookup still answers (the stated bound)
    assert (await client.get("/v1/jobs", headers=keys.b)).status_code == 200
    ticks.now += 0.1  # the TTL has passed: the database is asked again, and says no
    refused = await client.get("/v1/jobs", headers=keys.b)
    assert refused.status_code == 401
    assert refused.json()["type"].endswith("unauthorized")


async def test_the_revocation_notice_clears_the_cache_at_once(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    state = app.state.atlas
    state.keys = KeyCache(ttl_seconds=3600, max_entries=100)  # only the notice can help
    assert (await client.get("/v1/jobs", headers=keys.b)).status_code == 200
    assert len(state.keys) == 1
    async with engine.begin() as conn:
        assert await revoke_key(conn, await key_id(engine, "bob"))  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while len(state.keys) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert (await client.get("/v1/jobs", headers=keys.b)).status_code == 401


async def test_the_cache_never_lets_a_wrong_key_in(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    state = app.state.atlas
    assert (await client.get("/v1/jobs", headers=keys.a)).status_code == 200
    assert len(state.keys) == 1
    last = keys.alice[-1]
    near_miss = keys.alice[:-1] + ("A" if last != "A" else "B")  # one character off
    for wrong in (near_miss, keys.alice[:-1], keys.alice + "x", keys.alice.upper()):
        answer = await client.get("/v1/jobs", headers=Keys.header(wrong))
        assert answer.status_code == 401, wrong
    assert len(state.keys) == 1, "refused keys are never cached"
    assert (await client.get("/v1/jobs", headers=keys.a)).status_code == 200


def test_the_cache_is_bounded_and_forgets_the_oldest_first() -> None:
    ticks = Ticks()
    cache = KeyCache(ttl_seconds=5, max_entries=2, now=ticks)
    principal = object()
    for digest in ("a", "b", "c"):
        cache.put(digest, principal)  # type: ignore[arg-type]
    assert len(cache) == 2
    assert cache.get("a") is None
    assert cache.get("c") is principal
    disabled = KeyCache(ttl_seconds=0, max_entries=2, now=ticks)
    disabled.put("a", principal)  # type: ignore[arg-type]
    assert disabled.get("a") is None
