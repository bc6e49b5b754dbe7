"""``document.publish`` end to end: the review gate, its deadline rules and
late decisions, external operations reconciled before any repeat, signals, the
per-destination limit across processes, kill -9 between applying and recording, and
the roles. Real processes only: the API, worker processes, the test destination."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._workers.external import MAX_SENDS_PER_ATTEMPT
from tests.acceptance.publishing import (
    Keys,
    World,
    document,
    operations,
    start_world,
    worker_metrics,
)
from tests.ops.metrics_text import samples

Start = Callable[..., World]


@pytest.fixture
async def world(database_url: str, data_dir: Path, engine: AsyncEngine) -> AsyncIterator[Start]:
    async with engine.begin() as conn:
        keys = Keys(
            client=await create_key(conn, owner="alice", roles=[Role.CLIENT]),
            reviewer=await create_key(conn, owner="alice", roles=[Role.REVIEWER]),
            operator=await create_key(conn, owner="ops", roles=[Role.OPERATOR]),
        )
    with ExitStack() as stack:

        def start(**options: Any) -> World:
            return start_world(database_url, data_dir, keys, stack, **options)

        yield start


def entries(history: list[dict[str, Any]], transition: str) -> list[dict[str, Any]]:
    return [h for h in history if h["transition"] == transition]


async def test_review_gate_outcomes_and_roles(world: Start) -> None:
    w = world()
    stats0 = await w.stats()
    assert stats0["applications"] == {}

    # approve -> published exactly once at the destination
    approved = await w.submit(document(sections=3))
    waiting = await w.waiting_for_review(approved)
    extract = {s["name"]: s for s in waiting["progress"]["stages"]}["extract"]
    assert (extract["done"], extract["total"], extract["unit"]) == (3, 3, "sections")
    assert waiting["wait"]["on_deadline"] == "fail"

    # client keys get 403 on review and operator routes, and nothing changes
    before = await w.status(approved)
    history_before = await w.history(approved)
    async with w.client() as http:
        for path, body in [
            ("review", {"decision": "approve"}),
            ("resume", {"note": "x"}),
            ("fail", {"note": "x"}),
            ("replay", None),
        ]:
            answer = await http.post(f"/v1/jobs/{approved}/{path}", json=body)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")
        assert (await http.get("/v1/queue")).status_code == 403
    after = await w.status(approved)
    assert (after["state"], after["reason"], after["updated_at"]) == (
        before["state"],
        before["reason"],
        before["updated_at"],
    )
    assert await w.history(approved) == history_before

    answer = await w.review(approved, "approve", "ship it")
    assert answer.status_code == 202, answer.text
    final = await w.finished(approved)
    assert final["state"] == "succeeded", w.logs()
    assert final["delivery"]["state"] == "available"
    stats = await w.stats()
    [operation_id] = stats["applications"]
    assert stats["applications"][operation_id] == 1
    assert stats["posts"] == 1
    history = await w.history(approved)
    [approval] = entries(history, "approve")
    assert (approval["actor"], approval["note"]) == ("reviewer:alice", "ship it")
    assert operations(history) == ["attempted", "confirmed"]
    for entry in entries(history, "record_operation"):
        assert entry["data"]["operation_id"] == operation_id
        assert entry["event_id"] == operation_id
        assert "canary" not in str(entry)  # never the payload
    async with w.client() as http:
        result = (await http.get(f"/v1/jobs/{approved}/result")).json()
    assert result["files"] == []
    # the result reference says where it went: the destination, the operation id and
    # the destination's receipt (before: no route served it)
    publication = result["publication"]
    assert publication["destination"] == "press"
    assert publication["operation_id"] == operation_id
    assert publication["settled"] == "confirmed"
    assert publication["receipt"], publication

    # reject -> failed with the reviewer's note as the error
    rejected = await w.submit(document())
    await w.waiting_for_review(rejected)
    answer = await w.review(rejected, "reject", "the figures are from last year")
    assert answer.status_code == 202, answer.text
    failed = await w.status(rejected)
    assert (failed["state"], failed["reason"]) == ("failed", "review_rejected")
    assert failed["error"]["message"] == "the figures are from last year"

    # the deadline: each rule; then an approval after the deadline loses (409, recorded)
    fail_rule = await w.submit(document(review_deadline_seconds=1, on_review_deadline="fail"))
    escalate = await w.submit(document(review_deadline_seconds=1, on_review_deadline="escalate"))
    late = await w.submit(document(review_deadline_seconds=1))
    late_wait = await w.until(late, lambda s: s["state"] in {"waiting", "failed"})
    ended = await w.finished(fail_rule)
    assert (ended["state"], ended["reason"]) == ("failed", "deadline_passed")
    escalated = await w.until(escalate, lambda s: s["state"] == "unresolved")
    assert escalated["reason"] == "deadline_escalated"
    if late_wait["state"] == "waiting":  # let its deadline pass (the sweeper may act first)
        await asyncio.sleep(max(0.0, _epoch(late_wait["wait"]["deadline"]) - time.time()) + 0.3)
    answer = await w.review(late, "approve", "sorry, late")
    assert answer.status_code == 409, answer.text
    assert answer.json()["type"].endswith("decision-too-late")
    lost = await w.status(late)
    assert (lost["state"], lost["reason"]) == ("failed", "deadline_passed")
    [recorded] = [h for h in await w.history(late) if h["reason"] == "decision_too_late"]
    assert (recorded["transition"], recorded["actor"]) == ("approve", "reviewer:alice")
    assert recorded["from"] == recorded["to"] == "failed"
    assert recorded["note"] == "sorry, late"
    assert len((await w.stats())["applications"]) == 1  # only the approved job published

    # 50 concurrent duplicate review decisions: recorded once; the 49 that find it
    # decided are replays of it (200, Idempotency-Replayed), not errors
    crowd = await w.submit(document())
    await w.waiting_for_review(crowd)
    answers = await asyncio.gather(*(w.review(crowd, "approve", "dup") for _ in range(50)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * 49 + [202]
    assert all(
        a.headers.get("idempotency-replayed") == "true" for a in answers if a.status_code == 200
    )
    await w.finished(crowd)
    history = await w.history(crowd)
    assert len(entries(history, "approve")) == 1
    assert not [h for h in history if h["reason"] == "decision_too_late"]

    # operator cancel of waiting work takes a note; audited with actor and role
    canceled = await w.submit(document())
    await w.waiting_for_review(canceled)
    async with w.client(w.keys.operator) as http:
        answer = await http.post(
            f"/v1/jobs/{canceled}/cancel", json={"note": "destination retired"}
        )
    assert answer.status_code == 202, answer.text
    assert answer.json()["state"] == "canceled"
    [cancel] = entries(await w.history(canceled), "request_cancel")
    assert (cancel["actor"], cancel["note"]) == ("operator:ops", "destination retired")


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


@pytest.mark.parametrize("mode", ["apply_then_hang", "apply_then_reset", "fail_503"])
async def test_uncertain_outcomes_are_reconciled_before_any_repeat(world: Start, mode: str) -> None:
    w = world()
    await w.control(script=[mode], hang_seconds=5)
    job = await w.submit(document())
    await w.approve(job)
    final = await w.finished(job)
    assert final["state"] == "succeeded", w.logs()
    stats = await w.stats()
    [operation_id] = stats["applications"]
    assert stats["applications"][operation_id] == 1  # the destination's own record
    outcomes = operations(await w.history(job))
    assert outcomes[:2] == ["attempted", "uncertain"]
    if mode == "fail_503":  # nothing applied: the lookup says so, then one more send
        assert outcomes[2:] == ["not_applied_found", "attempted", "confirmed"]
        assert stats["posts"] == 2
    else:  # applied: adopted from the lookup, never sent again
        assert outcomes[2:] == ["adopted"]
        assert stats["posts"] == 1


async def test_refused_publication_fails_without_retry(world: Start) -> None:
    w = world()
    await w.control(script=["refuse"])
    job = await w.submit(document())
    await w.approve(job)
    final = await w.finished(job)
    assert (final["state"], final["error"]["code"]) == ("failed", "destination_refused")
    assert "422" in final["error"]["message"]
    assert operations(await w.history(job)) == ["attempted", "refused"]
    assert (await w.stats())["posts"] == 1


async def test_destination_down_past_the_budget_then_operator_resume(world: Start) -> None:
    w = world()
    await w.control(script=["apply_then_down"])
    job = await w.submit(document())
    await w.approve(job)
    stuck = await w.until(job, lambda s: s["state"] == "unresolved")
    assert stuck["reason"] == "unreconciled"
    evidence = stuck["last_error"]["evidence"]
    [operation_id] = (await w.stats())["applications"]
    assert evidence["operation_id"] == operation_id
    assert evidence["destination"] == "press"
    assert evidence["checks"] == 3
    assert evidence["last_error_class"]

    assert stuck["last_error"]["code"] == "unreconciled"

    # docs/operations.md, "a destination was down": the runbook's search finds the job
    # across owners, and one bulk resume over the same filter brings it back
    await w.control(down=False)
    runbook = {
        "state": ["unresolved"],
        "kind": ["document.publish"],
        "reason": ["unreconciled"],
        "created_after": stuck["created_at"],
    }
    async with w.client(w.keys.operator) as http:
        found = await http.get("/v1/jobs", params=runbook)
        assert found.status_code == 200, found.text
        assert [j["id"] for j in found.json()["items"]] == [job]  # alice's, found by ops
        answer = await http.post(
            "/v1/bulk-operations",
            json={"action": "resume", "filter": runbook, "note": "press is back"},
        )
        assert answer.status_code == 202, answer.text
        bulk = answer.json()
    final = await w.finished(job)
    assert final["state"] == "succeeded", w.logs()
    stats = await w.stats()
    assert stats["applications"] == {operation_id: 1}
    assert stats["posts"] == 1
    history = await w.history(job)
    story = [
        h["data"]["outcome"] if h["transition"] == "record_operation" else h["transition"]
        for h in history
    ]
    assert story[story.index("approve") :] == [
        "approve",
        "claim",
        "attempted",
        "uncertain",
        "undecided",
        "undecided",
        "undecided",
        "give_up",
        "resume",
        "claim",
        "adopted",
        "publish",
    ], story
    [resumed] = entries(history, "resume")
    assert (resumed["actor"], resumed["note"]) == ("operator:ops", "press is back")
    assert resumed["data"] == {"bulk_operation": bulk["id"]}
    async with w.client(w.keys.operator) as http:
        ended = (await http.get(bulk["links"]["self"], headers={"Prefer": "wait=30"})).json()
    assert (ended["state"], ended["counts"]["matched"], ended["counts"]["done"]) == (
        "succeeded",
        1,
        1,
    )

    # atlas_external_operations_total counts what the history records, by destination
    # and outcome, and the verdict that sent the job to an operator (one worker did all).
    text = await worker_metrics(w.workers[0])
    counted = {
        (dict(labels)["destination"], dict(labels)["outcome"]): count
        for (name, labels), count in samples(text).items()
        if name == "atlas_external_operations_total"
    }
    recorded = {**Counter(operations(history)), "unresolved": 1}
    assert counted == {("press", outcome): n for outcome, n in recorded.items()}, counted


async def test_a_review_wait_does_not_spend_an_attempt(world: Start) -> None:
    """A business wait is not a failed attempt: after waiting for review, a job whose
    destination always answers 503 still makes all max_attempts (5) publishing attempts
    (before: 4, the attempt that reached the gate was charged)."""
    w = world()
    await w.control(default="fail_503")
    job = await w.submit(document())
    await w.approve(job)
    stuck = await w.until(job, lambda s: s["state"] == "unresolved")
    assert (stuck["reason"], stuck["attempt"], stuck["max_attempts"]) == (
        "retries_exhausted",
        6,
        5,
    )
    history = await w.history(job)
    after_review = history[[h["transition"] for h in history].index("approve") :]
    story = [h["transition"] for h in after_review]
    assert story.count("claim") == 5, story
    # each attempt sends up to MAX_SENDS_PER_ATTEMPT times (a 503 is "not applied")
    assert (await w.stats())["posts"] == 5 * MAX_SENDS_PER_ATTEMPT


async def test_signals_resume_an_external_wait_once(world: Start) -> None:
    w = world()
    await w.control(script=["async"])
    job = await w.submit(document())
    await w.approve(job)
    waiting = await w.until(job, lambda s: s["state"] == "waiting" and s["reason"] == "external")
    assert waiting["wait"]["on_deadline"] == "escalate"

    async with w.client() as http:
        answers = await asyncio.gather(
            *(
                http.post(
                    f"/v1/jobs/{job}/signals",
                    json={"event_id": "press-confirmed-1", "data": {"status": "live"}},
                )
                for _ in range(50)
            )
        )
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * 49 + [202]
    bodies = {tuple(sorted(a.json().items())) for a in answers}
    assert len(bodies) == 1  # every repeat answers the first outcome
    [body] = [a.json() for a in answers[:1]]
    assert (body["state"], body["reason"], body["actor"]) == (
        "queued",
        "event_received",
        "client:alice",
    )
    final = await w.finished(job)
    assert final["state"] == "succeeded", w.logs()
    history = await w.history(job)
    [received] = entries(history, "receive_event")
    assert received["event_id"] == "press-confirmed-1"
    assert operations(history) == ["attempted", "awaiting_confirmation", "adopted"]
    stats = await w.stats()
    assert list(stats["applications"].values()) == [1]

    # a signal for a job that is not waiting for one: 409, nothing recorded
    async with w.client() as http:
        answer = await http.post(f"/v1/jobs/{job}/signals", json={"event_id": "another"})
        assert answer.status_code == 409, answer.text
        assert answer.json()["type"].endswith("not-awaiting-signal")
        unknown = await http.post(f"/v1/jobs/{uuid.uuid4()}/signals", json={"event_id": "x"})
        assert unknown.status_code == 404
    assert len(entries(await w.history(job), "receive_event")) == 1


async def test_destination_limit_holds_across_three_worker_processes(world: Start) -> None:
    w = world(destination={"concurrency": 2}, workers=3, concurrency=4)
    await w.control(delay_seconds=0.4, reset_counters=True)
    jobs = [await w.submit(document(sections=1)) for _ in range(9)]
    await asyncio.gather(*(w.approve(job) for job in jobs))
    finals = await asyncio.gather(*(w.finished(job, timeout=150) for job in jobs))
    assert {f["state"] for f in finals} == {"succeeded"}, w.logs()
    stats = await w.stats()
    assert 1 <= stats["max_in_flight"] <= 2, stats  # the destination's own counter
    assert sorted(stats["applications"].values()) == [1] * 9
    workers = {
        h["actor"] for job in jobs for h in await w.history(job) if h["transition"] == "claim"
    }
    assert len(workers) >= 1


async def _attempt_story(engine: AsyncEngine, job_ids: list[str]) -> str:
    """Each job's attempts and history, for a failure message: which worker claimed
    it when, how each attempt ended and whether it was charged."""
    async with engine.connect() as conn:
        tries = (
            await conn.execute(
                text(
                    "SELECT job_id, number, worker_id, claimed_at, ended_at, outcome, charged"
                    " FROM attempts WHERE job_id = ANY(CAST(:ids AS uuid[]))"
                    " ORDER BY job_id, number"
                ),
                {"ids": job_ids},
            )
        ).all()
        moves = (
            await conn.execute(
                text(
                    "SELECT job_id, seq, transition, to_state, reason, actor,"
                    " data ->> 'outcome' AS operation"
                    " FROM job_history WHERE job_id = ANY(CAST(:ids AS uuid[]))"
                    " ORDER BY job_id, seq"
                ),
                {"ids": job_ids},
            )
        ).all()
    return "\n".join(["attempts:", *map(str, tries), "history:", *map(str, moves)])


@pytest.mark.timeout(900)  # 20 worker processes start one after another (~90 s when idle)
async def test_kill_9_between_applying_and_recording_never_applies_twice(
    world: Start, engine: AsyncEngine
) -> None:
    """20 rounds: a worker is killed -9 while the destination has applied its
    publication and holds the answer; the next attempt reconciles and adopts.

    The workers hold no claimed job beyond the one they run (prefetch 0): a kill -9
    charges an attempt to every job its worker holds (docs/operations.md section 3), and
    a job held behind the killed one in several rounds ran out of its five attempts
    without being at fault (a CI flake). Only the attempts this test kills count here."""
    rounds = 20
    w = world(destination={"timeout_seconds": 60}, workers=0, lease_seconds=3.0, prefetch=0)
    await w.control(default="apply_then_hang", hang_seconds=120)
    jobs = [await w.submit(document(sections=1)) for _ in range(rounds)]
    spare = 0

    def spawn() -> None:
        nonlocal spare
        spare += 1
        w.start_worker(f"k-{spare}", concurrency=1)

    for _ in range(4):  # kills overlap with the replacements' start-up
        spawn()
    approvals = asyncio.gather(*(w.approve(job) for job in jobs))
    seen: set[str] = set()
    kills = 0
    deadline = time.monotonic() + 600  # bounds a broken run only (~90 s when idle)
    while len(seen) < rounds:
        applied = set((await w.stats())["applications"]) - seen
        if not applied:
            assert time.monotonic() < deadline, (
                f"{len(seen)} of {rounds} publications applied\n"
                + await _attempt_story(engine, jobs)
            )
            await asyncio.sleep(0.1)
            continue
        for operation_id in applied:
            seen.add(operation_id)
            async with engine.connect() as conn:  # the worker that sent it (and hangs)
                sender = (
                    await conn.execute(
                        text(
                            "SELECT actor FROM job_history WHERE transition = 'record_operation'"
                            " AND event_id = :id AND data ->> 'outcome' = 'attempted'"
                            " ORDER BY seq DESC LIMIT 1"
                        ),
                        {"id": operation_id},
                    )
                ).scalar_one()
            victims = [p for p in w.workers if f"worker:{p.name}" == sender and p.alive()]
            for victim in victims:  # it holds the call the destination applied
                victim.kill()
                kills += 1
                spawn()
    await approvals
    await w.control(default="ok")
    # Settled: terminal, or handed to an operator (which must not happen: then say why
    # at once instead of waiting for a terminal state that never comes).
    finals = await asyncio.gather(
        *(
            w.until(
                job, lambda s: s["state"] in {"succeeded", "failed", "canceled", "unresolved"}, 180
            )
            for job in jobs
        )
    )
    unsettled = [job for job, f in zip(jobs, finals, strict=True) if f["state"] != "succeeded"]
    assert not unsettled, (
        [(f["id"], f["state"], f["reason"]) for f in finals if f["state"] != "succeeded"],
        await _attempt_story(engine, unsettled),
    )
    stats = await w.stats()
    assert len(stats["applications"]) == rounds
    assert set(stats["applications"].values()) == {1}  # never two applications
    assert stats["posts"] == rounds
    assert kills == rounds, kills
    for job in jobs:
        assert "adopted" in operations(await w.history(job))


async def test_publication_that_cannot_be_established_is_blocked(
    world: Start, data_dir: Path
) -> None:
    from atlas_jobs._app.storage import _owner_dir_name

    w = world()
    published = data_dir / "results" / "published"
    published.mkdir(parents=True, exist_ok=True)
    (published / _owner_dir_name("alice")).write_text("not a directory")
    async with w.client() as http:
        answer = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.bundle", "input": {"preset": "coast", "pages": ["cover"]}},
        )
        assert answer.status_code == 202, answer.text
        job = answer.json()["id"]
    final = await w.finished(job)
    assert (final["state"], final["delivery"]["state"]) == ("failed", "blocked"), w.logs()
    assert final["error"]["code"] == "publication_failed"
    assert final["error"]["retryable"] is False
    assert final["attempt"] == 1  # no silent retry loop


async def test_document_input_is_validated(world: Start) -> None:
    w = world(workers=0)
    cases = [
        ({**document(), "sections": []}, "sections"),
        ({**document(), "title": ""}, "title"),
        (document(destination="http://169.254.169.254/"), "destination"),
        (document(destination="nowhere"), "destination"),
        (
            {**document(), "sections": [{"heading": "big", "text": "x" * 20_001}]},
            "sections",
        ),
        (document(review_deadline_seconds=0), "review_deadline_seconds"),
        ({**document(), "sections": [{"heading": "h"}]}, "sections"),
    ]
    async with w.client() as http:
        for doc, field in cases:
            answer = await http.post("/v1/jobs", json={"kind": "document.publish", "input": doc})
            assert answer.status_code == 422, (field, answer.text)
            locs = [".".join(map(str, e["loc"])) for e in answer.json()["errors"]]
            assert any(loc.startswith(f"body.input.{field}") for loc in locs), (field, locs)
