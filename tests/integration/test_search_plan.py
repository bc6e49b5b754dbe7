"""The search's pages (:func:`atlas_jobs._app.db.reads.list_jobs`, the WHERE of
:func:`~atlas_jobs._app.db.reads.job_conditions`) never scan the table: every owner's
jobs and one owner's walk ``ix_jobs_seq`` / ``ix_jobs_owner_seq`` in seq order and stop
after the page (no sort); the states an operator looks for are read from the partial
``ix_jobs_attention`` (walked in order, or -- when few jobs match -- a bitmap of them,
sorted), also with a kind and on a later page. A tag filter repeats the partial GIN
index's predicate, so the planner may use it; only tagged jobs are in it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.reads import JobFilter, job_conditions, list_jobs
from atlas_jobs._app.db.schema import jobs
from benchmarks.operators import SEARCH_FILL


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


async def _plan(engine: AsyncEngine, page: JobFilter) -> dict[str, Any]:
    query = listing_query(page, select(jobs))
    async with engine.connect() as conn:
        compiled = query.compile(conn.sync_engine, compile_kwargs={"literal_binds": True})
        raw = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {compiled}"))).scalar_one()
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


@pytest.fixture
async def filled(engine: AsyncEngine) -> AsyncEngine:
    async with single_statements(engine).connect() as conn:
        await conn.execute(SEARCH_FILL, {"start": 1, "stop": 60_000})
        await conn.execute(text("VACUUM ANALYZE jobs"))
    return engine


@pytest.mark.parametrize(
    ("page", "index", "ordered"),
    [
        (JobFilter(owner=None), {"ix_jobs_seq"}, True),
        # one owner in forty: its own index, or every owner's walked with a filter
        (JobFilter(owner=None, owners=["owner-3"]), {"ix_jobs_owner_seq", "ix_jobs_seq"}, True),
        (
            JobFilter(owner="owner-3", states=["succeeded"]),
            {"ix_jobs_owner_seq", "ix_jobs_seq"},
            True,
        ),
        (JobFilter(owner=None, states=["unresolved"]), {"ix_jobs_attention"}, False),
        (
            JobFilter(owner=None, states=["unresolved"], kinds=["document.publish"]),
            {"ix_jobs_attention"},
            False,
        ),
        (
            JobFilter(owner=None, states=["unresolved", "canceled"], before_seq=30_000),
            {"ix_jobs_attention"},
            False,
        ),
    ],
)
async def test_a_search_page_reads_an_index_never_the_table(
    filled: AsyncEngine, page: JobFilter, index: set[str], ordered: bool
) -> None:
    plan = await _plan(filled, page)
    nodes = list(_nodes(plan))
    assert not any(n["Node Type"] == "Seq Scan" for n in nodes), plan
    assert index & {n.get("Index Name") for n in nodes}, plan
    if ordered:
        assert not any(n["Node Type"] == "Sort" for n in nodes), plan
    async with filled.connect() as conn:
        rows = await list_jobs(conn, page)
    seqs = [row.seq for row in rows]
    assert len(seqs) == page.limit + 1
    assert seqs == sorted(seqs, reverse=True)


async def test_a_tag_search_reads_only_tagged_jobs(filled: AsyncEngine) -> None:
    plan = await _plan(filled, JobFilter(owner=None, tags=["batch=7"]))
    used = {n.get("Index Name") for n in _nodes(plan)} - {None}
    assert used <= {"ix_jobs_tags", "ix_jobs_seq"}, plan
    assert used
    async with filled.connect() as conn:
        rows = await list_jobs(conn, JobFilter(owner=None, tags=["batch=7"]))
    assert rows
    assert all("batch=7" in row.tags for row in rows)
