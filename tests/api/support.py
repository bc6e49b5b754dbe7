"""Helpers for the API tests: keys, driving a job through real transitions, SSE parsing,
a change committed in the middle of a read."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import DeliveryState, Reason
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, Applied, Transitions, error_doc

WORKER = Actor("worker", "w-api-test")
BUNDLE_HANDLER = handler_key("atlas.bundle", 1)
BUNDLE_INPUT: dict[str, Any] = {
    "preset": "coast",
    "pages": ["cover", "summary"],
    "format": "text-bundle-v1",
}


@dataclass(frozen=True)
class Keys:
    alice: str
    bob: str
    operator: str
    reviewer: str

    @staticmethod
    def header(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @property
    def a(self) -> dict[str, str]:
        return self.header(self.alice)

    @property
    def b(self) -> dict[str, str]:
        return self.header(self.bob)

    @property
    def op(self) -> dict[str, str]:
        return self.header(self.operator)

    @property
    def rev(self) -> dict[str, str]:
        return self.header(self.reviewer)


async def make_keys(engine: AsyncEngine) -> Keys:
    async with engine.begin() as conn:
        return Keys(
            alice=await create_key(conn, owner="alice", roles=[Role.CLIENT]),
            bob=await create_key(conn, owner="bob", roles=[Role.CLIENT]),
            operator=await create_key(conn, owner="ops", roles=[Role.OPERATOR, Role.CLIENT]),
            # Reviewers decide their own owner's jobs (ATLAS_REVIEW_SCOPE=owner).
            reviewer=await create_key(conn, owner="alice", roles=[Role.REVIEWER]),
        )


class Driver:
    """Plays the worker's part through the real transition service (no worker pool)."""

    def __init__(self, engine: AsyncEngine, transitions: Transitions, data_dir: Path) -> None:
        self.engine = engine
        self.t = transitions
        self.store = FilesystemStore(data_dir / "results")

    async def claim(self, job_id: uuid.UUID) -> uuid.UUID:
        """Claim one job -- the oldest queued one, which must be ``job_id``."""
        async with self.engine.begin() as conn:
            claimed = await self.t.claim(
                conn, worker_id="w-api-test", handlers=[BUNDLE_HANDLER], limit=1
            )
        ids = {row.id: row.current_attempt_id for row in claimed}
        assert job_id in ids, "claim took another job: drive jobs in creation order"
        attempt: uuid.UUID = ids[job_id]
        return attempt

    async def progress(self, job_id: uuid.UUID, attempt: uuid.UUID) -> None:
        async with self.engine.begin() as conn:
            assert (
                await self.t.set_plan(
                    conn,
                    job_id,
                    attempt,
                    [("validate", "checks", 4), ("build", "tiles", 4)],
                    actor=WORKER,
                )
            ).ok
            assert (
                await self.t.record_progress(
                    conn, job_id, attempt, "validate", "schema", actor=WORKER
                )
            ).ok

    async def publish(
        self, job_id: uuid.UUID, attempt: uuid.UUID, owner: str, files: dict[str, bytes]
    ) -> Any:
        stored = [self.store.write_staged(job_id, name, data) for name, data in files.items()]
        async with self.engine.begin() as conn:
            assert (
                await self.t.stage_output(
                    conn, job_id, attempt, DeliveryState.STAGED_PRIVATE, actor=WORKER
                )
            ).ok
        async with self.engine.begin() as conn:
            assert await self.t.lock_for_publication(conn, job_id, attempt)
            published = self.store.publish(owner, job_id)
            assert {f.name for f in published} == {f.name for f in stored}
            outcome = await self.t.publish(
                conn,
                job_id,
                attempt,
                result_ref={"files": [f.as_dict() for f in published]},
                ttl_seconds=60,
                actor=WORKER,
            )
        assert isinstance(outcome, Applied), outcome
        return outcome.job

    async def succeed(self, job_id: uuid.UUID, owner: str, files: dict[str, bytes]) -> Any:
        attempt = await self.claim(job_id)
        return await self.publish(job_id, attempt, owner, files)

    async def fail(self, job_id: uuid.UUID) -> None:
        attempt = await self.claim(job_id)
        async with self.engine.begin() as conn:
            outcome = await self.t.fail(
                conn,
                job_id,
                attempt,
                error=error_doc("cannot_build", "summary-source cannot be built", retryable=False),
                actor=WORKER,
            )
        assert outcome.ok

    async def unresolve(self, job_id: uuid.UUID) -> None:
        attempt = await self.claim(job_id)
        async with self.engine.begin() as conn:
            outcome = await self.t.give_up(
                conn,
                job_id,
                attempt,
                error=error_doc("flaky", "the tile service kept timing out", retryable=True),
                reason=Reason.RETRIES_EXHAUSTED,
                actor=WORKER,
            )
        assert outcome.ok

    async def await_review(self, job_id: uuid.UUID) -> None:
        attempt = await self.claim(job_id)
        async with self.engine.begin() as conn:
            outcome = await self.t.wait(
                conn,
                job_id,
                attempt,
                reason=Reason.REVIEW,
                deadline_seconds=3600,
                on_deadline="fail",
                actor=WORKER,
            )
        assert outcome.ok

    async def expire(self, job_id: uuid.UUID, owner: str) -> None:
        async with self.engine.begin() as conn:
            assert (await self.t.expire_result(conn, job_id)).ok
        self.store.remove_published(owner, job_id)


def parse_sse(text: str) -> list[dict[str, str]]:
    """Events of a text/event-stream body (comments and retry lines dropped)."""
    events: list[dict[str, str]] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line or line.startswith(":") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if "event" in fields:
            events.append(fields)
    return events


async def streamed_events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The events of a streamed text/event-stream response, each as soon as it has
    arrived (:func:`parse_sse` of every complete block)."""
    buffer = ""
    async for chunk in response.aiter_text():
        buffer += chunk
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            for event in parse_sse(block + "\n\n"):
                yield event


def commit_before(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    name: str,
    change: Callable[[], Awaitable[object]],
) -> list[bool]:
    """Run ``change`` (its own transaction) once, right before the first call of
    ``module.name`` -- a read's later statement -- so it commits between two statements
    of that read. The list returned holds ``True`` once it has run."""
    read = getattr(module, name)
    done: list[bool] = []

    async def change_then_read(*args: Any, **kwargs: Any) -> Any:
        if not done:
            await change()
            done.append(True)
        return await read(*args, **kwargs)

    monkeypatch.setattr(module, name, change_then_read)
    return done
