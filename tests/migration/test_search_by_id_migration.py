"""Revision 6e2b4c8d0f13 (search across owners by id) on a database with jobs of two
owners and bulk operations in flight: the upgrade drops ``ix_jobs_seq``, rebuilds
``ix_jobs_attention`` on ``(state, id)``, and moves a running operation across owners
onto the id walk without skipping any job it has still to act on (one owner's, and an
ended one, keep their seq walk); the downgrade restores both indexes and the seq walk,
again covering every job the operation has still to act on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "6e2b4c8d0f13"
PARENT = "8a4c6e2f1b3d"
JOBS = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT CASE WHEN g % 2 = 0 THEN 'alice' ELSE 'bob' END, 'atlas.noop', 1, '{}', 'queued',
       'new', 3, 600
  FROM generate_series(1, 40) AS g
"""
OPERATION = """
INSERT INTO bulk_operations (id, action, state, filter, requested_by, through_seq, position,
                             finished_at)
VALUES (CAST(:id AS uuid), 'cancel', :state, CAST(:filter AS jsonb), 'operator:ops',
        :through_seq, :position, CASE WHEN :state = 'succeeded' THEN now() END)
"""
EVERY = "00000000-0000-4000-8000-000000000001"
ONE = "00000000-0000-4000-8000-000000000002"
ENDED = "00000000-0000-4000-8000-000000000003"
INDEXES = """
SELECT indexname, split_part(indexdef, ' WHERE ', 1) FROM pg_indexes
 WHERE indexname IN ('ix_jobs_seq', 'ix_jobs_attention')
"""
WALK = """
SELECT position, through_seq, through_id::text, after_id::text FROM bulk_operations
 WHERE id = CAST(:id AS uuid)
"""


async def _indexes(conn: AsyncConnection) -> dict[str, str]:
    return {name: d.rsplit(" USING btree ", 1)[1] for name, d in await conn.execute(text(INDEXES))}


async def _walk(conn: AsyncConnection, operation: str) -> Any:
    return (await conn.execute(text(WALK), {"id": operation})).one()


async def test_upgrade_moves_running_operations_to_the_id_walk_and_downgrades(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(JOBS))
                seqs = [s for (s,) in await conn.execute(text("SELECT seq FROM jobs ORDER BY seq"))]
                position, through = seqs[14], seqs[34]  # 15 done, 20 to go, 5 created later
                for operation, state, scope in (
                    (EVERY, "running", {}),
                    (ONE, "running", {"owners": ["bob"]}),
                    (ENDED, "succeeded", {}),
                ):
                    filter_json = '{"owner": null, "owners": %s}' % ('["bob"]' if scope else "[]")
                    await conn.execute(
                        text(OPERATION),
                        {
                            "id": operation,
                            "state": state,
                            "filter": filter_json,
                            "through_seq": through,
                            "position": position,
                        },
                    )
                to_go = {
                    i
                    for (i,) in await conn.execute(
                        text("SELECT id::text FROM jobs WHERE seq > :p AND seq <= :t"),
                        {"p": position, "t": through},
                    )
                }
                assert len(to_go) == 20

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                assert await _indexes(conn) == {"ix_jobs_attention": "(state, id)"}
                every = await _walk(conn, EVERY)
                assert every.through_seq is None
                assert every.through_id == max(to_go)  # uuid order is the text's order
                assert every.after_id is None or every.after_id < min(to_go)
                walked = {
                    i
                    for (i,) in await conn.execute(
                        text(
                            "SELECT id::text FROM jobs WHERE id <= CAST(:t AS uuid)"
                            " AND (CAST(:a AS uuid) IS NULL OR id > CAST(:a AS uuid))"
                        ),
                        {"t": every.through_id, "a": every.after_id},
                    )
                }
                assert to_go <= walked
                for kept in (ONE, ENDED):
                    walk = await _walk(conn, kept)
                    assert (walk.position, walk.through_seq) == (position, through)
                    assert (walk.through_id, walk.after_id) == (None, None)

            await alembic(url, "downgrade", PARENT)
            async with engine.begin() as conn:
                assert await _indexes(conn) == {
                    "ix_jobs_seq": "(seq)",
                    "ix_jobs_attention": "(state, seq)",
                }
                every = (
                    await conn.execute(
                        text(
                            "SELECT position, through_seq FROM bulk_operations"
                            " WHERE id = CAST(:id AS uuid)"
                        ),
                        {"id": EVERY},
                    )
                ).one()
                again = {
                    i
                    for (i,) in await conn.execute(
                        text("SELECT id::text FROM jobs WHERE seq > :p AND seq <= :t"),
                        {"p": every.position, "t": every.through_seq},
                    )
                }
                assert to_go <= again
                nullable = await conn.scalar(
                    text(
                        "SELECT is_nullable FROM information_schema.columns"
                        " WHERE table_name = 'bulk_operations' AND column_name = 'through_seq'"
                    )
                )
                assert nullable == "NO"
        finally:
            await engine.dispose()
