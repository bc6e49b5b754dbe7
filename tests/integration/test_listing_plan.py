"""The owner's listing (:func:`atlas_jobs._app.db.reads.list_jobs`) walks ix_jobs_owner_seq --
ascending since revision d3c4d5e6f7a8, read backwards for newest first -- and stops
after the page, with many owners' jobs in the table; and the ascending index stays
compact where the descending one it replaced was left half empty by its page splits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.reads import JobFilter, list_jobs, listing_query
from atlas_jobs._app.db.schema import jobs
from atlas_jobs._app.transitions import Actor, NewJob, Transitions


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _new(owner: str) -> NewJob:
    return NewJob(
        owner=owner,
        kind="atlas.noop",
        kind_version=1,
        input={},
        max_attempts=3,
        max_elapsed_seconds=3600,
    )


async def test_the_listing_walks_the_owner_index_backwards_and_pages_by_seq(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        for owner in ("acme", "globex", "initech"):
            await transitions.create_many(conn, [_new(owner)] * 5000, actor=Actor("client", owner))
    async with single_statements(engine).connect() as conn:
        await conn.execute(text("ANALYZE jobs"))

    page = JobFilter(owner="globex", before_seq=12_000, limit=20)
    query = listing_query(page, select(jobs.c.id))
    async with engine.connect() as conn:
        compiled = query.compile(conn.sync_engine, compile_kwargs={"literal_binds": True})
        raw = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {compiled}"))).scalar_one()
        rows = await list_jobs(conn, page)
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs"]
    assert [(n["Node Type"], n.get("Index Name"), n.get("Scan Direction")) for n in scans] == [
        ("Index Scan", "ix_jobs_owner_seq", "Backward")
    ], plan
    assert not any(n["Node Type"] == "Sort" for n in _nodes(plan))

    seqs = [row.seq for row in rows]
    assert len(seqs) == 21
    assert seqs == sorted(seqs, reverse=True)  # newest first
    assert seqs[0] < 12_000
    assert {row.owner for row in rows} == {"globex"}


async def test_the_ascending_owner_index_stays_compact_under_rising_seq(
    engine: AsyncEngine,
) -> None:
    async with single_statements(engine).connect() as conn:
        await conn.execute(text("CREATE TABLE rising (owner text, seq bigint)"))
        await conn.execute(text("CREATE INDEX rising_asc ON rising (owner, seq)"))
        await conn.execute(text("CREATE INDEX rising_desc ON rising (owner, seq DESC)"))
        for start in range(0, 50_000, 5_000):  # rows arrive in seq order, as jobs do
            await conn.execute(
                text(
                    "INSERT INTO rising SELECT 'acme', g"
                    "  FROM generate_series(CAST(:a AS bigint), CAST(:a AS bigint) + 4999) g"
                ),
                {"a": start},
            )
        sizes = (
            await conn.execute(
                text("SELECT pg_relation_size('rising_asc'), pg_relation_size('rising_desc')")
            )
        ).one()
    ascending, descending = int(sizes[0]), int(sizes[1])
    assert descending > 1.5 * ascending  # half-empty pages left by the descending splits
