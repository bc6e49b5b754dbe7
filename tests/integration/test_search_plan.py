"""The search's pages (:func:`atlas_jobs._app.db.reads.list_jobs`, the WHERE of
:func:`~atlas_jobs._app.db.reads.job_conditions`) never scan the table: every owner's
jobs walk ``pk_jobs`` backwards in id order, one owner's ``ix_jobs_owner_seq`` in seq
order, and both stop after the page (no sort); the states an operator looks for are read
from the partial ``ix_jobs_attention`` ``(state, id)`` (walked in order, or -- when few
jobs match -- a bitmap of them, sorted: only those jobs, never the table), also with a
kind and on a later page. A tag search across owners walks ``job_tags`` backwards for its
first tag and joins each job by ``pk_jobs``. There is no index on ``seq`` alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.bulk import filter_batch_query
from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.reads import JobFilter, list_jobs, listing_query, walks_by_id
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
        await conn.execute(SEARCH_FILL, {"start": 1, "stop": 60_000, "extra_unresolved": 0})
        await conn.execute(text("VACUUM ANALYZE jobs, job_tags"))
    return engine


LATER = "later"
"""A page after a cursor in the middle of the table (the id of the 30,000th job)."""


async def _later(engine: AsyncEngine, page: JobFilter) -> JobFilter:
    async with engine.connect() as conn:
        middle = await conn.scalar(select(jobs.c.id).order_by(jobs.c.id).offset(30_000).limit(1))
    return replace(page, before_id=middle)


@pytest.mark.parametrize(
    ("page", "index", "ordered"),
    [
        (JobFilter(owner=None), {"pk_jobs"}, True),
        # one owner in forty: its own index, in (owner, seq) order
        (JobFilter(owner=None, owners=["owner-3"]), {"ix_jobs_owner_seq"}, True),
        (JobFilter(owner="owner-3", states=["succeeded"]), {"ix_jobs_owner_seq"}, True),
        (JobFilter(owner=None, states=["unresolved"]), {"ix_jobs_attention"}, False),
        (
            JobFilter(owner=None, states=["unresolved"], kinds=["document.publish"]),
            {"ix_jobs_attention"},
            False,
        ),
        (
            JobFilter(owner=None, states=["unresolved", "canceled"], reasons=[LATER]),
            {"ix_jobs_attention"},
            False,
        ),
        (JobFilter(owner=None, reasons=[LATER]), {"pk_jobs"}, True),
    ],
)
async def test_a_search_page_reads_an_index_never_the_table(
    filled: AsyncEngine, page: JobFilter, index: set[str], ordered: bool
) -> None:
    if LATER in page.reasons:
        page = await _later(filled, replace(page, reasons=[]))
    plan = await _plan(filled, page)
    nodes = list(_nodes(plan))
    assert not any(n["Node Type"] == "Seq Scan" for n in nodes), plan
    assert index & {n.get("Index Name") for n in nodes}, plan
    if ordered:
        assert not any(n["Node Type"] == "Sort" for n in nodes), plan
    for sort in (n for n in nodes if n["Node Type"] == "Sort"):
        # a sort only of jobs the partial index holds (alone, or ANDed with another
        # bitmap), never of a walk of the table
        below = {n.get("Index Name") for n in _nodes(sort)}
        assert "ix_jobs_attention" in below, plan
        assert not below & {"pk_jobs", "ix_jobs_owner_seq"}, plan
    async with filled.connect() as conn:
        rows = await list_jobs(conn, page)
    assert len(rows) == page.limit + 1
    if walks_by_id(page):
        keys = [row.id for row in rows]
        if page.before_id is not None:
            assert keys[0] < page.before_id
    else:
        keys = [row.seq for row in rows]
    assert keys == sorted(keys, reverse=True)


@pytest.mark.parametrize("later", [False, True])
async def test_a_tag_search_walks_job_tags_backwards_for_one_page(
    filled: AsyncEngine, later: bool
) -> None:
    """One job in 1,000 carries ``batch=7``: the page walks that tag's rows of
    ``job_tags`` backwards from the cursor and joins each job by ``pk_jobs`` -- a nested
    loop that stops after the page, never a bitmap of every tagged job, never a sort."""
    page = JobFilter(owner=None, tags=["batch=7"])
    if later:
        page = await _later(filled, page)
    plan = await _plan(filled, page)
    nodes = list(_nodes(plan))
    assert not any(n["Node Type"] in {"Sort", "Seq Scan", "Bitmap Heap Scan"} for n in nodes), plan
    walks = [n for n in nodes if n.get("Index Name") == "pk_job_tags"]
    assert walks, plan
    assert all(n["Scan Direction"] == "Backward" for n in walks), plan
    assert any(n["Node Type"] == "Nested Loop" for n in nodes), plan
    assert {n.get("Index Name") for n in nodes} - {None} <= {"pk_job_tags", "pk_jobs"}, plan
    async with filled.connect() as conn:
        rows = await list_jobs(conn, page)
        expected = list(
            await conn.scalars(
                select(jobs.c.id)
                .where(jobs.c.tags.contains(["batch=7"]))
                .where(jobs.c.id < page.before_id if page.before_id else text("true"))
                .order_by(jobs.c.id.desc())
                .limit(page.limit + 1)
            )
        )
    assert [row.id for row in rows] == expected
    assert len(rows) == page.limit + 1
    assert all("batch=7" in row.tags for row in rows)


async def test_a_tag_search_with_more_tags_checks_the_others_on_the_job(
    filled: AsyncEngine,
) -> None:
    """The walk follows the first tag; another one is checked on the job's row."""
    async with filled.connect() as conn:
        rows = await list_jobs(conn, JobFilter(owner=None, tags=["batch=7", "nope=1"]))
        both = await list_jobs(conn, JobFilter(owner=None, tags=["batch=7", "batch=7"]))
    assert rows == []
    assert both
    assert all("batch=7" in row.tags for row in both)


async def test_a_bulk_walk_of_a_tag_reads_job_tags_forwards(filled: AsyncEngine) -> None:
    """A bulk operation's tag filter across owners walks the tag's ``job_tags`` rows in
    the other direction (oldest first, after its ``after_id``): no sort, no bitmap."""
    page = JobFilter(owner=None, tags=["batch=7"])
    async with filled.connect() as conn:
        ordered = list(await conn.scalars(select(jobs.c.id).order_by(jobs.c.id)))
    op = SimpleNamespace(after_id=ordered[20_000], through_id=ordered[-1])
    query = filter_batch_query(page, op, limit=5)
    async with filled.connect() as conn:
        compiled = query.compile(conn.sync_engine, compile_kwargs={"literal_binds": True})
        raw = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {compiled}"))).scalar_one()
        rows = list(await conn.execute(query))
        expected = list(
            await conn.scalars(
                select(jobs.c.id)
                .where(jobs.c.tags.contains(["batch=7"]), jobs.c.id > op.after_id)
                .order_by(jobs.c.id)
                .limit(5)
            )
        )
    nodes = list(_nodes((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]))
    assert not any(n["Node Type"] in {"Sort", "Seq Scan", "Bitmap Heap Scan"} for n in nodes)
    walks = [n for n in nodes if n.get("Index Name") == "pk_job_tags"]
    assert walks, nodes
    assert all(n["Scan Direction"] == "Forward" for n in walks), nodes
    assert [row.id for row in rows] == expected
    assert len(expected) == 5


async def test_there_is_no_index_on_seq_alone(filled: AsyncEngine) -> None:
    """Every job version costs each index on ``jobs`` an entry: searches across owners
    walk ``pk_jobs`` instead of a full index of their own."""
    async with filled.connect() as conn:
        indexes = dict(
            (
                await conn.execute(
                    text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'jobs'")
                )
            ).all()
        )
    assert "ix_jobs_seq" not in indexes
    assert not [d for d in indexes.values() if d.endswith("(seq)")], indexes
    assert indexes["ix_jobs_attention"].split(" WHERE ")[0].endswith("(state, id)")
