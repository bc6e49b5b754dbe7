"""The claim statement skips paused kinds: every version (version 0) or one, from the
pause's commit on, and takes them again once resumed -- against a real PostgreSQL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import pauses
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.transitions import Actor, NewJob, Transitions

KIND = "demo.paused"
HANDLERS = [f"{KIND}@1", f"{KIND}@2", "demo.other@1"]
CLIENT = Actor(ActorKind.CLIENT, "alice")


async def make(engine: AsyncEngine, transitions: Transitions, kind: str, version: int) -> None:
    new = NewJob(
        owner="alice",
        kind=kind,
        kind_version=version,
        input={},
        max_attempts=3,
        max_elapsed_seconds=600,
    )
    async with engine.begin() as conn:
        await transitions.create(conn, new, actor=CLIENT)


async def claim(engine: AsyncEngine, transitions: Transitions) -> list[str]:
    async with engine.begin() as conn:
        rows = await transitions.claim(conn, worker_id="w-1", handlers=HANDLERS, limit=10)
    return sorted(f"{row.kind}@{row.kind_version}" for row in rows)


async def test_the_claim_skips_a_paused_version_then_every_version_until_resumed(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    clock = Clock()
    async with engine.begin() as conn:
        await pauses.pause(conn, clock, kind=KIND, version=2, actor="operator:ops", note=None)
    for kind, version in ((KIND, 1), (KIND, 2), ("demo.other", 1)):
        await make(engine, transitions, kind, version)
    assert await claim(engine, transitions) == ["demo.other@1", f"{KIND}@1"]

    async with engine.begin() as conn:
        await pauses.pause(conn, clock, kind=KIND, version=None, actor="operator:ops", note="x")
        await pauses.resume(conn, clock, kind=KIND, version=2, actor="operator:ops", note=None)
    await make(engine, transitions, KIND, 1)
    assert await claim(engine, transitions) == []  # every version is paused now

    async with engine.begin() as conn:
        ended = await pauses.resume(
            conn, clock, kind=KIND, version=None, actor="operator:ops", note=None
        )
    assert ended is not None
    assert ended.note == "x"
    assert await claim(engine, transitions) == [f"{KIND}@1", f"{KIND}@2"]
