"""What a creation answers, pinned by shape: every creation statement --
plain, under admission, keyed; one job or a batch -- returns the job's status columns
(``JOB_STATUS_COLUMNS``) and the time it observed, never the whole row: not the input
the caller sent, not the result reference (both jsonb documents the client would decode
for nothing). The status read answers the same columns."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.schema import JOB_STATUS_COLUMNS, jobs
from atlas_jobs._app.transitions import Applied, NewJob, Transitions
from tests.factory import CLIENT
from tests.sent_statements import sent

NEW = NewJob(
    owner="alice",
    kind="test.columns",
    kind_version=1,
    input={"n": 1},
    max_attempts=3,
    max_elapsed_seconds=60,
    request_id="req-1",
)
STATUS = [c.name for c in JOB_STATUS_COLUMNS]
ANSWERED = [*STATUS, "observed_at"]
_RETURNING = re.compile(r"RETURNING ([^\n]*?), \(now\(\)[^)]*\)\) AS observed_at")


def returning(statement: str) -> list[str]:
    """The columns the statement's insert into ``jobs`` returns, before ``observed_at``."""
    [columns] = _RETURNING.findall(statement)
    return [name.strip() for name in columns.split(",")]


def test_the_status_columns_leave_out_the_documents_nobody_reads_there() -> None:
    # (``owner`` is answered: a queued job's fair-share lane, for ``waiting_for``.)
    assert {"input", "result_ref", "seq"}.isdisjoint(STATUS)
    assert len(STATUS) < len(jobs.c)
    assert len(set(STATUS)) == len(STATUS)


async def test_every_creation_statement_returns_the_status_columns(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    with sent(engine) as seen:
        async with engine.begin() as conn:
            plain = [
                *await transitions.create_many(conn, [NEW], actor=CLIENT),
                *await transitions.create_many(conn, [NEW, NEW], actor=CLIENT),
            ]
            admitted = [
                *await transitions.create_many(conn, [NEW], actor=CLIENT, admission_cap=100),
                *await transitions.create_many(conn, [NEW] * 2, actor=CLIENT, admission_cap=100),
            ]
            keyed = await transitions.create_keyed(
                conn,
                NEW._replace(idempotency_key="k-columns"),
                fingerprint="f",
                actor=CLIENT,
                admission_cap=100,
            )
    assert len(seen) == 5
    assert [returning(statement) for statement, _ in seen] == [STATUS] * 5
    assert isinstance(keyed, Applied)
    assert all(list(a.job._mapping) == ANSWERED for a in plain)
    assert all(list(a.job._mapping) == [*ANSWERED, "admission_unfinished"] for a in admitted)
    assert list(keyed.job._mapping) == ["key_free", "admission_unfinished", *ANSWERED]
    assert [a.job.state for a in plain + admitted] == ["queued"] * 6
    assert len({a.job.id for a in [*plain, *admitted, keyed]}) == 7


async def test_the_status_read_answers_the_same_columns(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        created = await transitions.create(conn, NEW, actor=CLIENT)
    async with engine.connect() as conn:
        row = await reads.get_job_now(conn, created.job.id, owner="alice", clock=Clock())
    assert row is not None
    assert list(row._mapping) == ANSWERED
    assert {k: v for k, v in row._mapping.items() if k != "observed_at"} == {
        k: v for k, v in created.job._mapping.items() if k != "observed_at"
    }
