"""Every refusal a service can answer has its problem (one mapping, in the API layer),
and the cursor-paging helper pages as the listings promise."""

from __future__ import annotations

import dataclasses
import re
import uuid
from typing import Any

import pytest

from atlas_jobs._app.api.errors import ApiError, problem_of
from atlas_jobs._app.db.reads import JobFilter
from atlas_jobs._app.services import refusals
from atlas_jobs._app.services.paging import (
    JOB_CURSOR,
    WEBHOOK_CURSOR,
    CursorMismatchError,
    SeqCursor,
    fetch_size,
    page_of,
)


def _example(cls: type[refusals.Refusal]) -> refusals.Refusal:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kind = str(f.type)
        values[f.name] = (
            7 if "int" in kind else 2.5 if "float" in kind else [] if "list" in kind else "x"
        )
    if cls is refusals.UnknownKind:
        values["known"] = ["atlas.noop"]
    return cls(**values)


@pytest.mark.parametrize("cls", refusals.Refusal.__subclasses__(), ids=lambda c: c.__name__)
def test_every_refusal_has_its_problem(cls: type[refusals.Refusal]) -> None:
    problem = problem_of(_example(cls))
    assert isinstance(problem, ApiError)
    assert type(problem) is not ApiError  # a problem of its own, never the 500
    assert 400 <= problem.status < 600


def test_refusals_that_say_when_to_retry_keep_retry_after() -> None:
    capped = problem_of(refusals.AtCapacity(3, adding=2, limit=4, retry_after=5))
    assert capped.status == 429
    assert capped.headers["Retry-After"] == "5"
    assert capped.detail == "3 unfinished jobs, 2 more asked (limit 4); wait for some to finish"
    assert problem_of(refusals.KeyInFlight()).headers["Retry-After"] == "1"


def test_a_page_names_the_next_cursor_only_while_more_follow() -> None:
    rows = list(range(100, 89, -1))  # 11 rows fetched for a page of 10
    assert fetch_size(10) == 11
    page = page_of(rows, 10)
    assert page.shown == rows[:10]
    assert WEBHOOK_CURSOR.after(page, lambda seq: seq) == "w91"
    last = page_of(rows[:10], 10)
    assert last.shown == rows[:10]
    assert WEBHOOK_CURSOR.after(last, lambda seq: seq) is None
    assert page_of([], 10).next(lambda seq: seq) is None


def test_a_cursor_pattern_accepts_exactly_what_it_parses() -> None:
    cursor = SeqCursor("w")
    assert re.fullmatch(cursor.pattern, "w123")
    assert not re.fullmatch(cursor.pattern, "c123")
    assert not re.fullmatch(cursor.pattern, "w")
    assert cursor.parse(cursor.make(42)) == 42
    assert cursor.parse(None) is None


@dataclasses.dataclass
class _Job:
    id: uuid.UUID
    seq: int


def test_a_job_cursor_names_its_walk_and_continues_only_that_walk() -> None:
    """One owner's search pages by ``c<seq>``; a search across owners by ``i<id hex>``;
    each cursor continues only its own walk (the other's is a mismatch, a 422)."""
    job_id = uuid.UUID("0192f1c2-0000-7000-8000-00000000002a")
    rows = [_Job(job_id, 41), _Job(uuid.uuid4(), 40)]
    mine, everyone = JobFilter(owner="alice", limit=1), JobFilter(owner=None, limit=1)
    one_of_many = JobFilter(owner=None, owners=["bob"], limit=1)
    assert JOB_CURSOR.after(mine, page_of(rows, 1)) == "c41"
    assert JOB_CURSOR.after(one_of_many, page_of(rows, 1)) == "c41"
    by_id = JOB_CURSOR.after(everyone, page_of(rows, 1))
    assert by_id == "i" + job_id.hex
    assert JOB_CURSOR.after(everyone, page_of(rows[:1], 1)) is None
    for cursor in ("c41", by_id):
        assert re.fullmatch(JOB_CURSOR.pattern, cursor)
    for bad in ("41", "i" + job_id.hex[:-1], "i" + job_id.hex.upper(), "c", "x1", "c-1"):
        assert not re.fullmatch(JOB_CURSOR.pattern, bad), bad
    assert JOB_CURSOR.apply(mine, "c41") == dataclasses.replace(mine, before_seq=41)
    assert JOB_CURSOR.apply(everyone, by_id) == dataclasses.replace(everyone, before_id=job_id)
    assert JOB_CURSOR.apply(everyone, None) == everyone
    with pytest.raises(CursorMismatchError):
        JOB_CURSOR.apply(everyone, "c41")
    with pytest.raises(CursorMismatchError):
        JOB_CURSOR.apply(mine, by_id)
