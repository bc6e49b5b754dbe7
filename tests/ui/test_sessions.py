"""Status-page sessions live on the server: a logout, the key's revocation and an
operator's "log out everywhere" end them at once -- the same cookie, replayed, is
refused at its next request (not at its expiry)."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import list_keys, revoke_key
from atlas_jobs._app.db.schema import ui_sessions
from atlas_jobs._app.ui.session import COOKIE_NAME
from tests.api.support import Keys
from tests.ui.conftest import BASE, SAME_ORIGIN, log_in


def browser(app: FastAPI, cookie: str | None = None) -> httpx.AsyncClient:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)
    if cookie is not None:
        http.cookies.set(COOKIE_NAME, cookie, domain="atlas.test", path="/ui")
    return http


async def logged_in(app: FastAPI, key: str) -> tuple[httpx.AsyncClient, str, str]:
    """A browser logged in with ``key``, its cookie value and its CSRF token."""
    http = browser(app)
    token = await log_in(http, key)
    cookie = http.cookies.get(COOKIE_NAME)
    assert cookie is not None
    return http, cookie, token


async def answers(app: FastAPI, cookie: str) -> int:
    """What ``GET /ui/jobs`` answers to a fresh browser presenting ``cookie``."""
    async with browser(app, cookie) as http:
        return (await http.get("/ui/jobs")).status_code


async def session_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(ui_sessions))).scalar_one())


async def test_a_logged_out_cookie_is_refused_at_once(
    app: FastAPI, engine: AsyncEngine, keys: Keys
) -> None:
    http, cookie, token = await logged_in(app, keys.alice)
    other, other_cookie, _ = await logged_in(app, keys.alice)  # a second browser
    assert await session_rows(engine) == 2
    out = await http.post("/ui/logout", data={"csrf_token": token}, headers=SAME_ORIGIN)
    assert out.status_code == 303
    await http.aclose()
    assert await answers(app, cookie) == 303  # the replayed cookie: back to the login
    assert await session_rows(engine) == 1
    assert await answers(app, other_cookie) == 200  # only that browser was logged out
    await other.aclose()


async def test_revoking_the_key_ends_its_sessions(
    app: FastAPI, engine: AsyncEngine, keys: Keys
) -> None:
    http, cookie, _ = await logged_in(app, keys.bob)
    await http.aclose()
    async with engine.begin() as conn:
        [bob] = await list_keys(conn, owner="bob")
        assert await revoke_key(conn, bob.id)
    assert await session_rows(engine) == 0
    assert await answers(app, cookie) == 303


async def test_a_session_past_its_expiry_is_refused(
    app: FastAPI, engine: AsyncEngine, keys: Keys
) -> None:
    http, cookie, _ = await logged_in(app, keys.alice)
    await http.aclose()
    async with engine.begin() as conn:
        await conn.execute(update(ui_sessions).values(expires_at=func.now()))
    assert await answers(app, cookie) == 303
    again, _, _ = await logged_in(app, keys.alice)  # a new login sweeps the key's dead rows
    await again.aclose()
    assert await session_rows(engine) == 1


async def test_an_operator_logs_an_owner_out_everywhere(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine, keys: Keys
) -> None:
    cookies = {}
    for name, key in (("a1", keys.alice), ("a2", keys.alice), ("rev", keys.reviewer)):
        http, cookies[name], _ = await logged_in(app, key)
        await http.aclose()
    http, bobs, _ = await logged_in(app, keys.bob)
    await http.aclose()
    refused = await client.post("/v1/ui-sessions:end", json={"owner": "alice"}, headers=keys.a)
    assert refused.status_code == 403
    assert refused.json()["type"] == "urn:atlas-jobs:problem:forbidden"
    ended = await client.post("/v1/ui-sessions:end", json={"owner": "alice"}, headers=keys.op)
    assert ended.status_code == 200, ended.text
    assert ended.json() == {"ended": 3}  # both of alice's keys' sessions
    for cookie in cookies.values():
        assert await answers(app, cookie) == 303
    assert await answers(app, bobs) == 200
    async with engine.connect() as conn:
        [bob] = await list_keys(conn, owner="bob")
    one = await client.post("/v1/ui-sessions:end", json={"key_id": str(bob.id)}, headers=keys.op)
    assert one.json() == {"ended": 1}
    assert await answers(app, bobs) == 303
    bad = await client.post("/v1/ui-sessions:end", json={"owner": ""}, headers=keys.op)
    assert bad.status_code == 422
    assert (await client.post("/v1/ui-sessions:end", json={}, headers=keys.op)).json() == {
        "ended": 0
    }
