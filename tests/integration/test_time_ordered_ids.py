"""Time-ordered ids in the database (revision f1a2b3c4d5e6): ``atlas_uuid_v7()`` makes
UUIDv7 on every supported PostgreSQL (15 has no ``uuidv7()``), the claim gives each
attempt one, and creation stores the caller's UUIDv7 job ids, so new rows append at the
right edge of ``pk_jobs`` and ``pk_attempts``."""

from __future__ import annotations

import asyncio
import itertools
import uuid

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import attempts, job_history
from atlas_jobs._app.lifecycle import JobState
from tests.factory import JobFactory

NOW_MS = "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint)"
ONE = text(f"SELECT {NOW_MS} AS before_ms, atlas_uuid_v7() AS id, {NOW_MS} AS after_ms")


def _millis(value: uuid.UUID) -> int:
    return value.int >> 80


async def test_atlas_uuid_v7_has_version_7_the_rfc_variant_and_rises_across_milliseconds(
    engine: AsyncEngine,
) -> None:
    rows = []
    async with engine.connect() as conn:
        for _ in range(5):
            rows.append((await conn.execute(ONE)).one())
            await asyncio.sleep(0.002)  # the next call falls in a later millisecond
        many = (
            await conn.execute(
                text("SELECT count(DISTINCT atlas_uuid_v7()) FROM generate_series(1, 10000)")
            )
        ).scalar_one()
    made = [uuid.UUID(str(r.id)) for r in rows]
    assert all(m.version == 7 and m.variant == uuid.RFC_4122 for m in made)
    assert all(b > a for a, b in itertools.pairwise(made))  # strictly increasing
    # The first 48 bits are the server's clock in milliseconds, at the call.
    assert all(r.before_ms <= _millis(m) <= r.after_ms for m, r in zip(made, rows, strict=True))
    assert all(_millis(b) > _millis(a) for a, b in itertools.pairwise(made))
    assert many == 10000  # the random part: no collisions within one millisecond


async def test_created_jobs_and_claimed_attempts_get_time_ordered_ids(
    engine: AsyncEngine, jobs: JobFactory
) -> None:
    first = await jobs.make(JobState.RUNNING)
    second = await jobs.make(JobState.RUNNING)
    job_ids = [first.id, second.id]
    attempt_ids = [first.attempt_id, second.attempt_id]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in job_ids)
    assert all(a is not None and a.version == 7 and a.variant == uuid.RFC_4122 for a in attempt_ids)
    assert _millis(first.id) <= _millis(second.id)
    async with engine.connect() as conn:
        stored = (
            await conn.execute(select(attempts.c.id).where(attempts.c.job_id == second.id))
        ).scalar_one()
        claim_rows = (
            (
                await conn.execute(
                    select(job_history.c.attempt_id).where(
                        job_history.c.job_id == second.id, job_history.c.transition == "claim"
                    )
                )
            )
            .scalars()
            .all()
        )
    # The attempt row, the job's current attempt and the claim's history row agree.
    assert stored == second.attempt_id
    assert claim_rows == [second.attempt_id]
