"""The chaos scenarios, each with its pass criteria.

A scenario gets a fresh :class:`~chaos.cluster.Cluster` (its own database on the run's
embedded PostgreSQL), starts the processes it needs, injects its fault, waits (bounded)
for the jobs it got a 202 for to settle, and returns a :class:`Row`: the table's figures
and the named checks that decide its verdict. Every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.asyncio import create_async_engine

from atlas_jobs._app.apikeys import Role
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import WORKER_SESSION_SETTINGS
from atlas_jobs._app.db.queries import CLAIM
from atlas_jobs._app.lifecycle import ActorKind, Reason
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from chaos.cluster import (
    TERMINAL,
    Cluster,
    Figures,
    Tally,
    Timing,
    bundle_body,
    client,
    noop_body,
    post_batch,
    post_job,
)
from chaos.poison_worker import KILL_TAG, RAISE_TAG
from chaos.proxy import TcpProxy
from chaos.steady import steady_client


@dataclass(frozen=True)
class Config:
    """Sizes and durations of one configuration (``short`` for CI, ``full``)."""

    name: str
    outage_load_seconds: float  # scenario 1: load before and after the outage
    outage_seconds: float
    storm_jobs: int
    storm_seconds: float
    storm_workers: int
    storm_kill_every: float
    listener_jobs: int
    poison_bystanders: int
    duplicate_fanout: int  # concurrent copies of each create / cancel / review
    duplicate_subjects: int
    watchers_per_key: int
    watch_keys: int
    proxy_jobs: int  # scenario 3: jobs created while the proxy misbehaves
    proxy_seconds: float
    skew_jobs: int  # scenario 4
    idle_tx_seconds: float  # scenario 7: how long the idle transaction is held
    model_examples: int  # scenario 11: Hypothesis examples
    hostile_watchers: int  # scenario 10
    hostile_idle: int
    hostile_hold_seconds: float


SHORT = Config(
    name="short",
    outage_load_seconds=4,
    outage_seconds=4,
    storm_jobs=1_000,
    storm_seconds=45,
    storm_workers=3,
    storm_kill_every=3,
    listener_jobs=12,
    poison_bystanders=60,
    duplicate_fanout=20,
    duplicate_subjects=5,
    watchers_per_key=60,
    watch_keys=3,
    proxy_jobs=120,
    proxy_seconds=15,
    skew_jobs=20,
    idle_tx_seconds=10,
    model_examples=5,
    hostile_watchers=600,
    hostile_idle=2_000,
    hostile_hold_seconds=5,
)
FULL = Config(
    name="full",
    outage_load_seconds=10,
    outage_seconds=12,
    storm_jobs=10_000,
    storm_seconds=240,
    storm_workers=4,
    storm_kill_every=4,
    listener_jobs=30,
    poison_bystanders=300,
    duplicate_fanout=50,
    duplicate_subjects=10,
    watchers_per_key=150,
    watch_keys=4,
    proxy_jobs=1_000,
    proxy_seconds=60,
    skew_jobs=200,
    idle_tx_seconds=45,
    model_examples=40,
    hostile_watchers=3_000,
    hostile_idle=20_000,
    hostile_hold_seconds=15,
)
CONFIGS = {c.name: c for c in (SHORT, FULL)}


@dataclass
class Row:
    scenario: str
    figures: Figures = field(default_factory=Figures)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def check(self, what: str, ok: bool) -> None:
        self.checks.append((what, bool(ok)))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok in self.checks)

    def standard_checks(self, rescue_bound: float | None = None) -> None:
        f = self.figures
        self.check("0 accepted jobs lost or unsettled", f.lost == 0)
        self.check("0 published twice", f.published_twice == 0)
        self.check("no 5xx other than 503 + Retry-After", f.bad_5xx == 0)
        if rescue_bound is not None and f.max_rescue_seconds is not None:
            self.check(f"rescue within {rescue_bound:.1f} s", f.max_rescue_seconds <= rescue_bound)


Scenario = Callable[[Cluster, Config, Row], Awaitable[None]]
RESCUE_SLACK_SECONDS = 3.0


def rescue_bound(timing: Timing) -> float:
    """A lost lease must be rescued within a reaper interval (plus slack for a busy
    machine) of its expiry: ``attempts.ended_at - attempts.lease_expires_at``."""
    return timing.reaper_interval_seconds + RESCUE_SLACK_SECONDS


def live_lease_losses(cluster: Cluster) -> int:
    return cluster.worker_logs().count("lease.lost_while_alive")


# -- 1. PostgreSQL stopped (immediate) under load ----------------------------------------


async def pg_stop(cluster: Cluster, config: Config, row: Row) -> None:
    """``pg_ctl stop -m immediate`` while clients POST and workers drain, then restart."""
    key = await cluster.key("outage")
    await cluster.start_api()
    for n in range(2):
        cluster.start_worker(f"w{n}", concurrency=4)
    accepted: list[str] = []
    phases = {p: Tally() for p in ("before", "outage", "after")}
    phase = "before"
    stop = asyncio.Event()
    outage_timeouts = 0

    async def load(http: httpx.AsyncClient) -> None:
        nonlocal outage_timeouts
        for _ in range(100_000):
            if stop.is_set():
                return
            current = phase
            try:
                job = await post_job(http, bundle_body(), phases[current])
            except Exception:
                job = None
            if job:
                accepted.append(job)
            if phases[current].errors.get("ReadTimeout") and current == "outage":
                outage_timeouts = phases[current].errors["ReadTimeout"]
            await asyncio.sleep(0.05 if current != "outage" else 0.2)

    async with client(cluster.api_url, key, timeout=10) as http:
        clients = [asyncio.create_task(load(http)) for _ in range(4)]
        try:
            await asyncio.sleep(config.outage_load_seconds)
            phase = "outage"
            await asyncio.to_thread(cluster.server.stop_immediate)
            await asyncio.sleep(config.outage_seconds)
            ready_during = (await http.get("/readyz")).status_code
            restarting = time.monotonic()
            await asyncio.to_thread(cluster.server.start_again)  # crash recovery included
            restarted = time.monotonic()
            restart_took = restarted - restarting
            phase = "after"
            recovered_after = None
            for _ in range(600):
                if phases["after"].statuses.get(202):
                    recovered_after = time.monotonic() - restarted
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(config.outage_load_seconds)
        finally:
            stop.set()
            await asyncio.gather(*clients, return_exceptions=True)
        ready_after = (await http.get("/readyz")).status_code

    states = await cluster.settle(accepted, within=60)
    total = Tally()
    for tally in phases.values():
        total.merge(tally)
    row.figures = await cluster.figures(accepted, total)
    stuck = await cluster.scalar(
        "SELECT count(*) FROM jobs WHERE state IN ('running', 'cancel_requested')"
        " AND lease_expires_at < now()"
    )
    outage = phases["outage"]
    # A lease that expired during the outage can only be rescued once the database is
    # back: after the outage and the restart (crash recovery; slow on a busy machine).
    row.standard_checks(rescue_bound(cluster.timing) + config.outage_seconds + restart_took)
    row.check("during the outage: only 503 + Retry-After or no answer", outage.bad_5xx == 0)
    row.check("during the outage: 503 carried Retry-After", outage.shed_without_retry_after == 0)
    row.check("during the outage: some answers were 503 + Retry-After", outage.shed > 0)
    row.check("/readyz said 503 during the outage", ready_during == 503)
    row.check("recovered alone: a 202 after the restart", recovered_after is not None)
    row.check("/readyz 200 after the restart", ready_after == 200)
    row.check("no job stuck running past its lease", stuck == 0)
    row.check("every accepted job succeeded", all(s == "succeeded" for s in states.values()))
    row.check("no process died", all(p.alive() for p in cluster.procs))
    row.notes.append(
        f"outage {outage.describe()}; restart took {restart_took:.1f} s;"
        f" first 202 {recovered_after or -1:.1f} s after restart;"
        f" outage timeouts {outage_timeouts}"
    )


# -- 2. kill -9 storm ------------------------------------------------------------------


async def kill_storm(cluster: Cluster, config: Config, row: Row) -> None:
    """Workers are ``kill -9``'d (one holding jobs, at random) and restarted while jobs
    flow in; every job must end exactly once."""
    key = await cluster.key("storm")
    await cluster.start_api()
    live = {
        f"w{n}": cluster.start_worker(f"w{n}", concurrency=8) for n in range(config.storm_workers)
    }
    accepted: list[str] = []
    tally = Tally()
    kills = 0
    stop = asyncio.Event()
    rng = random.Random(8)  # noqa: S311 - chaos, not cryptography

    async def produce(http: httpx.AsyncClient) -> None:
        batches = max(1, config.storm_jobs // 50)
        pause = config.storm_seconds / batches
        started = time.monotonic()
        for n in range(batches):
            bodies = [
                bundle_body() if (n + i) % 2 == 0 else noop_body(f"storm-{n}-{i}")
                for i in range(50)
            ]
            for _ in range(20):  # a 429/503 is retried with a new batch key set
                ids = await post_batch(http, bodies, tally)
                if ids:
                    accepted.extend(ids)
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(max(0.0, started + (n + 1) * pause - time.monotonic()))

    async def killer() -> None:
        nonlocal kills
        for generation in range(10_000):
            await asyncio.sleep(config.storm_kill_every)
            if stop.is_set():
                return
            holders = await cluster.scalar(
                "SELECT array_agg(DISTINCT worker_id) FROM jobs WHERE state = 'running'"
            )
            names = [n for n in (holders or []) if n in live and live[n].alive()]
            if not names:
                continue
            victim = rng.choice(names)
            await asyncio.to_thread(live.pop(victim).kill9)
            kills += 1
            fresh = f"w{generation}-r{kills}"
            live[fresh] = cluster.start_worker(fresh, concurrency=8)

    async with client(cluster.api_url, key, timeout=30) as http:
        killing = asyncio.create_task(killer())
        try:
            await produce(http)
        finally:
            stop.set()
            await asyncio.gather(killing, return_exceptions=True)
    # However slowly a starved machine drains, the jobs must keep finishing: what fails
    # is a drain that stops (nothing finished for a minute), or one over 15 minutes.
    settle_started = time.monotonic()
    states = await cluster.settle(accepted, within=900, stall=60)
    settle_seconds = time.monotonic() - settle_started
    row.figures = await cluster.figures(accepted, tally)
    rescued = await cluster.scalar("SELECT count(*) FROM attempts WHERE outcome = 'lost'")
    row.standard_checks(rescue_bound(cluster.timing))
    row.check(f"accepted >= {config.storm_jobs}", row.figures.accepted >= config.storm_jobs)
    want = max(5, int(config.storm_seconds / config.storm_kill_every / 3))
    row.check(f"at least {want} workers killed while holding jobs", kills >= want)
    row.check("every accepted job succeeded", all(s == "succeeded" for s in states.values()))
    row.notes.append(
        f"{kills} kill -9, {rescued} attempts rescued, live-worker lease losses"
        f" {live_lease_losses(cluster)}, drained {settle_seconds:.0f} s after the last create,"
        f" answers {tally.describe()}"
    )


# -- 5. the LISTEN connection killed -----------------------------------------------------


async def listener_killed(cluster: Cluster, config: Config, row: Row) -> None:
    """The workers' LISTEN connections are terminated again and again; jobs must still
    be claimed within the polling interval."""
    key = await cluster.key("listen")
    await cluster.start_api()
    cluster.start_worker("w0", concurrency=4)
    tally = Tally()
    accepted: list[str] = []
    terminated = 0
    stop = asyncio.Event()

    async def terminate_listeners() -> None:
        nonlocal terminated
        conn = await cluster.db()
        try:
            for _ in range(10_000):
                if stop.is_set():
                    return
                terminated += await conn.fetchval(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM"
                    " pg_stat_activity WHERE application_name = 'atlas-listener') AS t"
                )
                await asyncio.sleep(0.1)
        finally:
            await conn.close()

    async with client(cluster.api_url, key) as http:
        await asyncio.sleep(2)  # the worker is up and listening
        killing = asyncio.create_task(terminate_listeners())
        try:
            await asyncio.sleep(0.5)
            for n in range(config.listener_jobs):
                job = await post_job(http, noop_body(f"listen-{n}"), tally)
                if job:
                    accepted.append(job)
                await asyncio.sleep(0.37)
        finally:
            stop.set()
            await asyncio.gather(killing, return_exceptions=True)
    await cluster.settle(accepted, within=30)
    row.figures = await cluster.figures(accepted, tally)
    conn = await cluster.db()
    try:
        pickups = [
            float(r["pickup"])
            for r in await conn.fetch(
                "SELECT extract(epoch FROM min(a.claimed_at) - j.created_at) AS pickup"
                " FROM jobs j JOIN attempts a ON a.job_id = j.id"
                " WHERE j.id = ANY($1::uuid[]) GROUP BY j.id, j.created_at",
                accepted,
            )
        ]
    finally:
        await conn.close()
    # The slack for one claim round trip grows with the machine's load (a starved box
    # runs the worker late, not wrongly): 1 s per unit of run-queue length per core.
    slack = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    bound = cluster.timing.poll_interval_seconds + slack
    worst = max(pickups, default=float("inf"))
    row.standard_checks()
    row.check("the LISTEN connection was terminated", terminated >= 3)
    row.check(
        f"every job claimed within poll interval + {slack:.1f} s ({bound:.1f} s)", worst <= bound
    )
    row.check("every job was claimed", len(pickups) == len(accepted) > 0)
    row.check("the worker survived", all(p.alive() for p in cluster.procs))
    row.notes.append(
        f"{terminated} LISTEN backends terminated; create->claim max {worst:.2f} s,"
        f" median {statistics.median(pickups) if pickups else -1:.2f} s"
    )


# -- 8. a poison job ---------------------------------------------------------------------


async def poison(cluster: Cluster, config: Config, row: Row) -> None:
    """One job that always raises, one that always kills its worker: both end
    ``unresolved`` after their budget while the other jobs complete."""
    key = await cluster.key("poison")
    await cluster.start_api()
    live = [
        cluster.start_worker(f"p{n}", concurrency=4, module="chaos.poison_worker") for n in range(2)
    ]
    tally = Tally()
    restarts = 0
    stop = asyncio.Event()

    async def supervise() -> None:
        nonlocal restarts
        for _ in range(10_000):
            if stop.is_set():
                return
            for i, proc in enumerate(live):
                if not proc.alive():
                    restarts += 1
                    live[i] = cluster.start_worker(
                        f"p{i}-r{restarts}", concurrency=4, module="chaos.poison_worker"
                    )
            await asyncio.sleep(0.2)

    async with client(cluster.api_url, key) as http:
        supervisor = asyncio.create_task(supervise())
        try:
            poison_ids = [
                j
                for j in [
                    await post_job(http, noop_body(RAISE_TAG), tally),
                    await post_job(http, noop_body(KILL_TAG), tally),
                ]
                if j
            ]
            others: list[str] = []
            for n in range(config.poison_bystanders):
                job = await post_job(
                    http, bundle_body() if n % 2 else noop_body(f"bystander-{n}"), tally
                )
                if job:
                    others.append(job)
                await asyncio.sleep(0.05)
            poison_states = await cluster.settle(
                poison_ids, within=90, done=frozenset({"unresolved"})
            )
            other_states = await cluster.settle(others, within=90)
        finally:
            stop.set()
            await asyncio.gather(supervisor, return_exceptions=True)
    row.figures = await cluster.figures(
        [*poison_ids, *others], tally, done=TERMINAL | {"unresolved"}
    )
    attempts = await cluster.scalar(
        "SELECT array_agg(attempt ORDER BY id) FROM jobs WHERE id = ANY($1::uuid[])", poison_ids
    )
    row.standard_checks(rescue_bound(cluster.timing))
    row.check("both poison jobs accepted", len(poison_ids) == 2)
    row.check(
        "poison jobs unresolved",
        all(poison_states.get(j) == "unresolved" for j in poison_ids),
    )
    # A job running beside the killer in the same worker process dies with it: its
    # lost attempt is charged like any crash (nobody can tell which job crashed the
    # process), and a job rescued and claimed together with the killer every time can
    # exhaust its budget too -- visibly `unresolved`, not lost. What must not happen is
    # a job starved or failed for any other reason.
    unsettled = [j for j in others if other_states.get(j) != "succeeded"]
    collateral = await cluster.scalar(
        "SELECT count(DISTINCT a.job_id) FROM attempts AS a"
        " JOIN jobs AS j ON j.id = a.job_id AND j.state = 'unresolved'"
        " WHERE a.job_id = ANY($1::uuid[]) AND NOT EXISTS ("
        "   SELECT 1 FROM attempts AS b WHERE b.job_id = a.job_id AND NOT ("
        "     b.outcome = 'lost' AND EXISTS (SELECT 1 FROM attempts AS k"
        "       WHERE k.job_id = $2::uuid AND k.worker_id = b.worker_id AND k.outcome = 'lost')))",
        unsettled,
        poison_ids[1] if len(poison_ids) == 2 else None,
    )
    row.check(
        "every other job succeeded (or died only beside the killer, every attempt)",
        len(other_states) == len(others) and len(unsettled) == collateral,
    )
    row.check("the kill poison killed its worker (restarted)", restarts >= 1)
    row.notes.append(
        f"poison attempts {attempts}; {restarts} worker restarts;"
        f" {collateral} bystanders unresolved beside the killer"
    )


# -- 9. duplicate delivery ---------------------------------------------------------------


async def duplicates(cluster: Cluster, config: Config, row: Row) -> None:
    """The same creates, cancels and review decisions, many copies at once: each is
    recorded once. No worker runs, so created jobs stay ``queued`` for the cancels."""
    creator = await cluster.key("dup-create")
    canceler = await cluster.key("dup-cancel")
    reviewer = await cluster.key("dup-review", roles=(Role.CLIENT, Role.REVIEWER))
    await cluster.start_api()
    tally = Tally()
    fan = config.duplicate_fanout
    ok = True
    accepted: set[str] = set()

    async def send(
        http: httpx.AsyncClient, method: str, path: str, **kw: Any
    ) -> httpx.Response | None:
        try:
            response = await http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            tally.error(exc)
            return None
        tally.record(response)
        return response

    # Creates: one job per Idempotency-Key, whatever the number of copies.
    async with client(cluster.api_url, creator, connections=fan) as http:
        for n in range(config.duplicate_subjects):
            idem = f"dup-{n}-{uuid.uuid4().hex}"
            answers = await asyncio.gather(
                *(
                    send(
                        http,
                        "POST",
                        "/v1/jobs",
                        json=noop_body(f"dup-{n}"),
                        headers={"Idempotency-Key": idem},
                    )
                    for _ in range(fan)
                )
            )
            ids = {a.json()["id"] for a in answers if a is not None and a.status_code == 202}
            statuses = {a.status_code for a in answers if a is not None}
            ok &= len(ids) == 1 and statuses <= {202, 409}
            accepted |= ids
    created = await cluster.scalar("SELECT count(*) FROM jobs WHERE owner = 'dup-create'")
    row.check("creates: one job per Idempotency-Key, answers 202/409 only", ok)
    row.check("creates: the database holds one job per key", created == config.duplicate_subjects)

    # Cancels: one transition to canceled; the repeats recorded once, with a count.
    cancel_ok = True
    counts: list[int] = []
    async with client(cluster.api_url, canceler, connections=fan) as http:
        for n in range(config.duplicate_subjects):
            job = await post_job(http, noop_body(f"cancel-{n}"), tally)
            if job is None:
                cancel_ok = False
                continue
            accepted.add(job)
            answers = await asyncio.gather(
                *(send(http, "POST", f"/v1/jobs/{job}/cancel") for _ in range(fan))
            )
            cancel_ok &= all(a is not None and a.status_code == 202 for a in answers)
            history = (await http.get(f"/v1/jobs/{job}/history")).json()["items"]
            into_canceled = [
                h for h in history if h["to"] == "canceled" and h["from"] != "canceled"
            ]
            repeats = [h for h in history if h["from"] == "canceled"]
            cancel_ok &= len(into_canceled) == 1 and len(repeats) <= 1
            counts.append(sum(h["count"] for h in repeats))
            cancel_ok &= counts[-1] == fan - 1  # every repeat counted, none recorded twice
    row.check("cancels: 202 to every copy, one transition, repeats in one counted row", cancel_ok)

    # Review decisions on jobs waiting for review (put there by the real transitions).
    review_ok = True
    waiting = await _waiting_for_review(cluster, "dup-review", config.duplicate_subjects)
    accepted |= set(waiting)
    async with client(cluster.api_url, reviewer, connections=fan) as http:
        for job in waiting:
            answers = await asyncio.gather(
                *(
                    send(
                        http,
                        "POST",
                        f"/v1/jobs/{job}/review",
                        json={"decision": "approve" if i % 2 else "reject"},
                    )
                    for i in range(fan)
                )
            )
            codes = [a.status_code for a in answers if a is not None]
            review_ok &= codes.count(202) == 1 and all(c in (200, 202, 409) for c in codes)
            # The same decision again is a replay of the one that took effect; the
            # other decision conflicts with it.
            review_ok &= all(
                a.headers.get("Idempotency-Replayed") == "true"
                for a in answers
                if a is not None and a.status_code == 200
            )
            history = (await http.get(f"/v1/jobs/{job}/history")).json()["items"]
            review_ok &= sum(1 for h in history if h["from"] == "waiting") == 1
    row.check(
        "reviews: exactly one decision accepted (202), the same one again a replay (200), "
        "the other 409",
        review_ok,
    )

    final = await cluster.states(accepted)
    row.figures = await cluster.figures(
        accepted, tally, done=frozenset({"queued", "canceled", "failed"})
    )
    row.standard_checks()
    row.notes.append(
        f"{fan} copies each; repeat-cancel counts {counts}; states"
        f" {sorted(set(final.values()))}; answers {tally.describe()}"
    )


async def _waiting_for_review(cluster: Cluster, owner: str, count: int) -> list[str]:
    return await _made_jobs(cluster, owner, count, waiting=True)


async def _made_jobs(cluster: Cluster, owner: str, count: int, *, waiting: bool) -> list[str]:
    """Jobs of a kind no worker runs, through the real transitions: ``queued`` (they
    stay so), or ``waiting`` for review (no kind in the registry has a review gate yet:
    create, claim, wait)."""
    engine = create_async_engine(cluster.database_url)
    t = Transitions(Clock(), lease_seconds=cluster.timing.lease_seconds)
    actor = Actor(ActorKind.WORKER, "chaos-review-gate")
    made: list[str] = []
    try:
        for n in range(count):
            kind = f"chaos.parked{n}"
            async with engine.begin() as conn:
                created = await t.create(
                    conn,
                    NewJob(owner, kind, 1, {}, max_attempts=3, max_elapsed_seconds=3600),
                    actor=Actor(ActorKind.CLIENT, owner),
                )
                if waiting:
                    [claimed] = await t.claim(
                        conn, worker_id=actor.name, handlers=[f"{kind}@1"], limit=1
                    )
                    await t.wait(
                        conn,
                        created.job.id,
                        claimed.current_attempt_id,
                        reason=Reason.REVIEW,
                        deadline_seconds=3600,
                        on_deadline="fail",
                        actor=actor,
                    )
            made.append(str(created.job.id))
    finally:
        await engine.dispose()
    return made


# -- 6. pool exhaustion: many long-polls and event streams -------------------------------


async def pool_exhaustion(cluster: Cluster, config: Config, row: Row) -> None:
    """Many concurrent long-polls and event streams from several keys beside steady
    work: the API sheds with 429/503 + Retry-After, never 500; a steady client is still
    served; live workers lose no lease."""
    per_key, total = 40, 100
    cluster.extra_env.update(
        {"ATLAS_WATCH_MAX_PER_KEY": str(per_key), "ATLAS_WATCH_MAX_TOTAL": str(total)}
    )
    keys = [await cluster.key(f"watch-{n}") for n in range(config.watch_keys)]
    steady_key = await cluster.key("steady")
    await cluster.start_api()
    cluster.start_worker("w0", concurrency=4)
    cluster.start_worker("w1", concurrency=4)
    tally = Tally()
    stop = asyncio.Event()

    async def watch(http: httpx.AsyncClient, job: str, n: int) -> None:
        try:
            if n % 3 == 0:
                async with http.stream(
                    "GET", f"/v1/jobs/{job}/events", timeout=httpx.Timeout(30, read=15)
                ) as response:
                    tally.record(response)
                    async for _ in response.aiter_bytes():
                        if stop.is_set():
                            break
            else:
                response = await http.get(
                    f"/v1/jobs/{job}", headers={"Prefer": "wait=10"}, timeout=30
                )
                tally.record(response)
        except httpx.HTTPError as exc:
            tally.error(exc)

    clients = [client(cluster.api_url, k, connections=config.watchers_per_key) for k in keys]
    try:
        # One queued job per watching key, of a kind no worker runs: it never changes,
        # so every watcher really waits.
        targets = [
            (await _made_jobs(cluster, f"watch-{n}", 1, waiting=False))[0] for n in range(len(keys))
        ]
        async with steady_client(
            cluster.api_url, steady_key, "create-read", cluster.work_dir / "steady.log"
        ) as steady:
            await asyncio.sleep(1)
            waves = []
            for _ in range(2):
                waves.append(
                    asyncio.gather(
                        *(
                            watch(http, job, n)
                            for http, job in zip(clients, targets, strict=True)
                            for n in range(config.watchers_per_key)
                        )
                    )
                )
                await asyncio.sleep(3)
            await asyncio.sleep(5)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*waves), timeout=60)
            seen = await steady.stop()
    finally:
        stop.set()
        for http in clients:
            await http.aclose()
    tally.merge(seen.tally)
    accepted = seen.accepted
    await cluster.settle(accepted, within=60)
    row.figures = await cluster.figures(accepted, tally)
    losses = live_lease_losses(cluster)
    p99 = seen.p99
    row.standard_checks(rescue_bound(cluster.timing))
    row.check("watchers beyond the caps shed with 429/503 + Retry-After", tally.shed > 0)
    row.check("every 429/503 carried Retry-After", tally.shed_without_retry_after == 0)
    row.check("no lease lost by a live worker (lease.lost_while_alive)", losses == 0)
    row.check("steady client served (create + read p99 < 2 s)", p99 < 2.0)
    row.notes.append(
        f"caps {per_key}/key {total}/process; {len(keys)}x{config.watchers_per_key}x2 watchers;"
        f" steady p99 {p99:.2f} s; answers {tally.describe()}"
    )


# -- 3. a misbehaving network between the workers and PostgreSQL -----------------------

PUBLISH_MARKER = b"'publish'"  # the history literal of the publication statement only


async def flaky_network(cluster: Cluster, config: Config, row: Row) -> None:
    """Every worker reaches PostgreSQL through :class:`~chaos.proxy.TcpProxy`, which
    resets every connection now and then (mid-transaction), stalls all traffic for
    longer than a lease, and cuts a connection right after forwarding a ``COMMIT``
    (the transaction commits; the worker never hears so) -- publications included.
    The outcome is read back from the database: nothing lost, nothing published twice."""
    key = await cluster.key("network")
    await cluster.start_api()
    proxy = TcpProxy(
        "127.0.0.1",
        cluster.server.embedded.port,
        drop_commit_ack=0.02,
        drop_marked_commit_ack=0.25,
        watch_marker=PUBLISH_MARKER,
        always_drop_first_marked=True,  # the check below must not depend on chance
    )
    await proxy.start()
    for n in range(3):
        cluster.start_worker(f"w{n}", concurrency=4, database_port=proxy.port)
    tally = Tally()
    accepted: list[str] = []
    stop = asyncio.Event()
    resets = 0
    rng = random.Random(3)  # noqa: S311 - chaos, not cryptography # nosec B311

    async def produce(http: httpx.AsyncClient) -> None:
        pause = config.proxy_seconds / config.proxy_jobs
        for n in range(config.proxy_jobs):
            job = await post_job(http, bundle_body() if n % 2 else noop_body(f"net-{n}"), tally)
            if job:
                accepted.append(job)
            await asyncio.sleep(pause)

    async def misbehave() -> None:
        nonlocal resets
        for n in range(10_000):
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            if stop.is_set():
                return
            if n % 4 == 3:
                await proxy.stall(cluster.timing.lease_seconds * 1.5)
            else:
                resets += proxy.drop_all()

    try:
        async with client(cluster.api_url, key) as http:
            await asyncio.sleep(2)  # the workers are up
            chaos_task = asyncio.create_task(misbehave())
            try:
                await produce(http)
            finally:
                stop.set()
                await asyncio.gather(chaos_task, return_exceptions=True)
        proxy.drop_commit_ack = proxy.drop_marked_commit_ack = 0.0
        states = await cluster.settle(accepted, within=120, done=TERMINAL | {"unresolved"})
    finally:
        await proxy.close()
    row.figures = await cluster.figures(accepted, tally, done=TERMINAL | {"unresolved"})
    unresolved = sum(1 for v in states.values() if v == "unresolved")
    counters = proxy.counters
    row.standard_checks()
    row.check("connections reset mid-transaction", resets >= 3)
    row.check("traffic stalled for longer than a lease", counters.stalls >= 1)
    row.check("commit acknowledgements lost", counters.commit_acks_dropped >= 1)
    row.check(
        "a publication's commit acknowledgement lost", counters.marked_commit_acks_dropped >= 1
    )
    row.check(
        "every accepted job ended succeeded (or visibly unresolved)",
        all(s in ("succeeded", "unresolved") for s in states.values()),
    )
    row.check("no worker died", all(p.alive() for p in cluster.procs))
    row.notes.append(
        f"{resets} connections reset, {counters.stalls} stalls of"
        f" {cluster.timing.lease_seconds * 1.5:.1f} s, {counters.commit_acks_dropped} commit"
        f" acks lost ({counters.marked_commit_acks_dropped} of {counters.marked_commits}"
        f" publications, {counters.autocommit_marked_commits} of them autocommit) out of"
        f" {counters.commits} commits; {unresolved} unresolved;"
        f" answers {tally.describe()}"
    )


# -- 4. clock skew: workers under libfaketime --------------------------------------------

SKEW_LEASES = 5  # the skew, in leases: "more than a lease" with room to spare


def faketime_command() -> str:
    """``faketime`` (Debian package ``faketime``), installed with apt-get when missing."""
    found = shutil.which("faketime")
    if found is None and shutil.which("apt-get") is not None:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "faketime"],  # noqa: S607
            check=False,
            capture_output=True,
            timeout=600,
        )
        found = shutil.which("faketime")
    if found is None:
        raise RuntimeError("faketime is missing and could not be installed (apt-get)")
    return found


def measured_skew(faketime: str, offset: str) -> float:
    """How far ``faketime -f offset`` moves a Python process's wall clock, measured."""
    done = subprocess.run(  # noqa: S603 - our interpreter, fixed code
        [faketime, "-f", offset, sys.executable, "-c", "import time; print(time.time())"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return float(done.stdout.strip()) - time.time()


async def clock_skew(cluster: Cluster, config: Config, row: Row) -> None:
    """Two workers whose clocks are off by +/- several leases (libfaketime), beside one
    with the right time. Leases, heartbeats and rescue use database time, so: no live
    job is reclaimed early (the fast clock would see every lease expired), and when the
    right-time worker is killed -9 the slow-clock worker alone rescues its jobs within
    a reaper interval of the leases' expiry (its clock would see them expire late)."""
    faketime = await asyncio.to_thread(faketime_command)
    skew = cluster.timing.lease_seconds * SKEW_LEASES
    ahead, behind = f"+{skew:g}s", f"-{skew:g}s"
    seen_ahead = await asyncio.to_thread(measured_skew, faketime, ahead)
    seen_behind = await asyncio.to_thread(measured_skew, faketime, behind)
    key = await cluster.key("skew")
    await cluster.start_api()
    fast = cluster.start_worker("fast", concurrency=4, wrapper=[faketime, "-f", ahead])
    slow = cluster.start_worker("slow", concurrency=4, wrapper=[faketime, "-f", behind])
    right = cluster.start_worker("right", concurrency=4)
    tally = Tally()
    accepted: list[str] = []
    async with client(cluster.api_url, key) as http:
        await asyncio.sleep(2)
        # Phase 1: jobs longer than a lease, all three workers running them.
        for _ in range(config.skew_jobs):
            job = await post_job(http, bundle_body(), tally)
            if job:
                accepted.append(job)
            await asyncio.sleep(0.05)
        phase1 = await cluster.settle(accepted, within=180)
        # An early reclaim is a rescue before the lease ran out, in database time.
        early = await cluster.scalar(
            "SELECT count(*) FROM attempts WHERE outcome = 'lost' AND ended_at < lease_expires_at"
        )
        lost_phase1 = await cluster.scalar("SELECT count(*) FROM attempts WHERE outcome = 'lost'")
        # Phase 2: only the slow clock reaps; the right-time worker dies holding jobs.
        await asyncio.to_thread(fast.stop)
        second: list[str] = []
        for _ in range(16):
            job = await post_job(http, bundle_body(), tally)
            if job:
                second.append(job)
        victim_held = 0
        for _ in range(200):
            victim_held = await cluster.scalar(
                "SELECT count(*) FROM jobs WHERE worker_id = 'right' AND state = 'running'"
            )
            if victim_held:
                break
            await asyncio.sleep(0.05)
        await asyncio.to_thread(right.kill9)
        accepted.extend(second)
        await cluster.settle(second, within=120)
    row.figures = await cluster.figures(accepted, tally)
    rescued_by = await cluster.scalar(
        "SELECT array_agg(DISTINCT actor) FROM job_history WHERE transition = 'rescue'"
    )
    rescued = await cluster.scalar("SELECT count(*) FROM attempts WHERE outcome = 'lost'")
    longest = await cluster.scalar(
        "SELECT extract(epoch FROM max(ended_at - claimed_at)) FROM attempts"
        " WHERE outcome <> 'lost'"
    )
    bound = rescue_bound(cluster.timing)
    row.standard_checks(bound)
    row.check(
        f"faketime moved the wall clocks ({seen_ahead:+.1f} s, {seen_behind:+.1f} s)",
        abs(seen_ahead - skew) < skew / 2 and abs(seen_behind + skew) < skew / 2,
    )
    row.check(
        "jobs outlived a lease (so an early reclaim could show)",
        float(longest or 0) > cluster.timing.lease_seconds,
    )
    row.check("no early reclaim: no lease rescued before its expiry (database time)", early == 0)
    row.check("phase 1: every job succeeded", all(s == "succeeded" for s in phase1.values()))
    row.check("the killed worker held jobs", victim_held > 0)
    row.check(
        "the victim's jobs were rescued, with the slow-clock worker the only reaper alive",
        rescued >= victim_held and not fast.alive() and not right.alive(),
    )
    row.check(
        f"no late rescue: every rescue within {bound:.1f} s of the lease's expiry",
        row.figures.max_rescue_seconds is not None and row.figures.max_rescue_seconds <= bound,
    )
    row.check("the slow-clock worker survived", slow.alive())
    row.notes.append(
        f"skew {ahead}/{behind} (measured {seen_ahead:+.1f}/{seen_behind:+.1f} s), lease"
        f" {cluster.timing.lease_seconds:g} s; longest attempt {float(longest or 0):.1f} s;"
        f" victim held {victim_held}; rescued by {rescued_by}; phase 1 leases lost"
        f" {lost_phase1} (heartbeats late, rescued after expiry); live-worker lease losses"
        f" {live_lease_losses(cluster)}"
    )


# -- 7. an idle-in-transaction session during steady load -------------------------------


IDLE_TX_BACKLOG = 20_000


async def idle_in_transaction(cluster: Cluster, config: Config, row: Row) -> None:
    """A session opens a transaction, reads ``jobs`` and goes idle (holding its snapshot,
    so VACUUM can remove nothing newer) while jobs flow. The claim, on the plan a worker
    session runs it on, must stay on the lanes' index (ix_jobs_lanes, never a scan of
    jobs) and work must continue; after the session ends, VACUUM reclaims the dead rows.
    Then ``idle_in_transaction_session_timeout`` (the recommended guard) ends such a
    session by itself."""
    key = await cluster.key("idle-tx")
    await cluster.start_api()
    cluster.start_worker("w0", concurrency=4)
    cluster.start_worker("w1", concurrency=4)
    tally = Tally()
    accepted: list[str] = []
    # A table of a realistic size first (on a near-empty one a sequential scan is the
    # planner's right choice): a backlog of jobs no worker runs, due tomorrow.
    setup = await cluster.db()
    try:
        await setup.execute(
            "INSERT INTO jobs (owner, kind, kind_version, input, state, reason,"
            " max_attempts, max_elapsed_seconds, available_at)"
            " SELECT 'backlog', 'chaos.backlog', 1, '{}'::jsonb, 'queued', 'new', 3, 600,"
            " now() + interval '1 day' FROM generate_series(1, $1)",
            IDLE_TX_BACKLOG,
        )
        await setup.execute("ANALYZE jobs")
    finally:
        await setup.close()
    hog = await cluster.db()
    await hog.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await hog.fetchval("SELECT count(*) FROM jobs")  # the snapshot is taken: xmin held
    plans: list[list[tuple[str, str | None]]] = []

    async def claim_plan() -> list[tuple[str, str | None]]:
        """The plan a worker's session runs the claim on -- its generic plan (the
        session's settings, ``WORKER_SESSION_SETTINGS``: bitmap scans off, generic plans
        forced), read with EXPLAIN (not ANALYZE: nothing is claimed) EXECUTE of the
        PREPAREd statement: the (node type, index) of each of its reads of ``jobs`` (the
        UPDATE itself, a ModifyTable, is not a read)."""
        compiled = CLAIM.compile(dialect=asyncpg_dialect.dialect())  # type: ignore[no-untyped-call]
        arguments = {
            "worker_id": "'explain'",
            "actor": "'worker:explain'",
            "handlers": "'{atlas.noop@1}'",
            "limit": "4",
            "lease_seconds": "30.0",
            "clock_offset": "0.0",
        }
        listed = ", ".join(arguments[name] for name in compiled.positiontup or ())
        conn = await asyncpg.connect(cluster.libpq_url, server_settings=WORKER_SESSION_SETTINGS)
        try:
            await conn.execute(f"PREPARE claim AS {compiled.string}")
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE claim({listed})")
        finally:
            await conn.close()
        nodes, reads = [json.loads(plan)[0]["Plan"]], []
        while nodes:
            node = nodes.pop()
            nodes.extend(node.get("Plans", []))
            if node.get("Relation Name") == "jobs" and node["Node Type"] != "ModifyTable":
                reads.append((str(node["Node Type"]), node.get("Index Name")))
        return reads

    try:
        async with client(cluster.api_url, key) as http:
            deadline = time.monotonic() + config.idle_tx_seconds
            n = 0
            while time.monotonic() < deadline:
                job = await post_job(http, noop_body(f"idle-{n}"), tally)
                if job:
                    accepted.append(job)
                n += 1
                if n % 50 == 0:
                    plans.append(await claim_plan())
                await asyncio.sleep(0.02)
            plans.append(await claim_plan())
            during = await cluster.settle(accepted, within=60)
            dead_during = await cluster.scalar(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'"
            )
        await hog.execute("ROLLBACK")
    finally:
        await hog.close()
    vacuum = await cluster.db()
    try:
        await vacuum.execute("VACUUM jobs")
        dead_after = await vacuum.fetchval(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'"
        )
        # The guard: a database-level timeout ends the next idle transaction by itself.
        await vacuum.execute(
            f'ALTER DATABASE "{cluster.database}" SET idle_in_transaction_session_timeout = 1000'
        )
    finally:
        await vacuum.close()
    guarded = await cluster.db()
    ended_by_server = False
    try:
        await guarded.execute("BEGIN")
        await guarded.fetchval("SELECT count(*) FROM jobs")
        await asyncio.sleep(3)
        try:
            await guarded.fetchval("SELECT 1")
        except Exception:
            ended_by_server = True
    finally:
        await guarded.close()
    after: list[str] = []
    async with client(cluster.api_url, key) as http:
        for n in range(20):
            job = await post_job(http, noop_body(f"after-{n}"), tally)
            if job:
                after.append(job)
    await cluster.settle([*accepted, *after], within=60)
    row.figures = await cluster.figures([*accepted, *after], tally)
    # The claim reads jobs only by index: the per-lane walks of ix_jobs_lanes (in the
    # lanes probe and the candidates) and the UPDATE's join back to the locked
    # candidates by id (pk_jobs) -- never a Seq Scan (nor a bitmap heap scan) of jobs.
    on_index = all(
        any(index == "ix_jobs_lanes" for _, index in reads)
        and all(
            kind in {"Index Scan", "Index Only Scan"} and index in {"ix_jobs_lanes", "pk_jobs"}
            for kind, index in reads
        )
        for reads in plans
    )
    row.standard_checks()
    row.check(f"claim plan on ix_jobs_lanes in all {len(plans)} EXPLAINs", on_index)
    if not on_index:
        row.notes.append(f"claim reads of jobs: {sorted({r for p in plans for r in p})}")
    row.check(
        "work continued during the idle transaction (all settled)",
        len(during) == len(accepted) and all(s == "succeeded" for s in during.values()),
    )
    row.check("recovered: VACUUM reclaimed the dead rows afterwards", dead_after < dead_during)
    row.check("idle_in_transaction_session_timeout ended the next idle session", ended_by_server)
    row.notes.append(
        f"held {config.idle_tx_seconds:.0f} s beside {IDLE_TX_BACKLOG} queued jobs due"
        f" tomorrow; {len(accepted)} jobs during;"
        f" jobs dead tuples {dead_during} while held, {dead_after} after VACUUM"
    )


# -- 10. hostile clients -------------------------------------------------------------------

FD_WANTED = 65_536


def raise_fd_limit(wanted: int = FD_WANTED) -> int:
    """Raise this process's open-file limit (children inherit it): to ``wanted`` when
    allowed (root may raise the hard limit), else to the hard limit. The limit reached."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (wanted, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), max(hard, target)))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _raw(
    port: int, payload: bytes, *, hold: float, trickle: bytes = b"", every: float = 1.0
) -> str:
    """One raw HTTP/1.1 exchange: send ``payload`` (then ``trickle`` byte by byte), read
    the status line within ``hold`` seconds; the code seen, or what ended it."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout=30
        )
    except (OSError, TimeoutError) as exc:
        return type(exc).__name__
    try:
        writer.write(payload)
        await writer.drain()

        async def dribble() -> None:
            for byte in trickle:
                await asyncio.sleep(every)
                writer.write(bytes([byte]))
                await writer.drain()

        dribbling = asyncio.create_task(dribble())
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=hold)
        finally:
            dribbling.cancel()
            await asyncio.gather(dribbling, return_exceptions=True)
        parts = line.split()
        return parts[1].decode() if len(parts) >= 2 else "closed"
    except TimeoutError:
        return "held"
    except OSError as exc:
        return type(exc).__name__
    finally:
        writer.transport.abort()


async def _huge_header(port: int, megabytes: int) -> str:
    """A request head of ``megabytes`` MB: the server must answer or close long before."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return type(exc).__name__
    try:
        writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Junk: ")
        chunk = b"a" * 65_536
        for _ in range(megabytes * 16):
            writer.write(chunk)
            await writer.drain()
        writer.write(b"\r\n\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout=30)
        parts = line.split()
        return parts[1].decode() if len(parts) >= 2 else "closed"
    except (OSError, TimeoutError) as exc:
        return f"closed ({type(exc).__name__})"
    finally:
        writer.transport.abort()


async def hostile_clients(cluster: Cluster, config: Config, row: Row) -> None:
    """At once: 3,000 event streams and long-polls from three keys, slow bodies, huge
    headers and 20,000 connections that never send a byte (from child processes: one
    process may not hold them all), while a steady client -- in a process of its own,
    :mod:`chaos.steady` -- reads and creates jobs on its own connection. The API sheds
    what is over its limits (429/503 + Retry-After, 408, 431), closes the idle
    connections itself (the request-head timeout), and the steady client is answered
    within 1 s at p99."""
    limit = await asyncio.to_thread(raise_fd_limit)
    body_timeout = 5.0
    cluster.extra_env.update(
        {
            "ATLAS_HTTP_BODY_TIMEOUT_SECONDS": str(body_timeout),
            # Shorter than the hold, so that the run sees the API close them.
            "ATLAS_HTTP_HEAD_TIMEOUT_SECONDS": str(config.hostile_hold_seconds / 2),
            # Connections count against uvicorn's limit_concurrency until the head timeout
            # closes them: a host that must stay up beside tens of thousands of them
            # raises it (docs/http-api.md "HTTP limits").
            "ATLAS_HTTP_LIMIT_CONCURRENCY": str(config.hostile_idle + 5_000),
        }
    )
    keys = [await cluster.key(f"hostile-{n}") for n in range(3)]
    steady_key = await cluster.key("steady")
    api = await cluster.start_api()
    cluster.start_worker("w0", concurrency=4)
    port = int(cluster.api_url.rsplit(":", 1)[1])
    tally = Tally()
    targets = [(await _made_jobs(cluster, f"hostile-{n}", 1, waiting=False))[0] for n in range(3)]
    rss_before = rss_mb(api.pid)
    rss_peak = rss_before
    stop = asyncio.Event()

    def watch_request(job: str, key: str, n: int) -> bytes:
        path = f"/v1/jobs/{job}/events" if n % 2 else f"/v1/jobs/{job}"
        return (
            f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Prefer: wait=20\r\nIf-None-Match: *\r\n\r\n"
        ).encode()

    slow_head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + keys[0].encode() + b"\r\nContent-Length: 500\r\n\r\n"
    )

    async def sample_rss() -> None:
        nonlocal rss_peak
        while not stop.is_set():
            rss_peak = max(rss_peak, rss_mb(api.pid))
            await asyncio.sleep(0.5)

    per_process = 10_000
    shares = [
        min(per_process, config.hostile_idle - start)
        for start in range(0, config.hostile_idle, per_process)
    ]
    idlers: list[asyncio.subprocess.Process] = []
    opened_idle = closed_idle = 0
    sampler = asyncio.create_task(sample_rss())
    try:
        async with steady_client(
            cluster.api_url, steady_key, "read-mostly", cluster.work_dir / "steady.log"
        ) as steady:
            await asyncio.sleep(2)
            watchers = [
                asyncio.create_task(
                    _raw(port, watch_request(targets[n % 3], keys[n % 3], n), hold=25)
                )
                for n in range(config.hostile_watchers)
            ]
            slow = [
                asyncio.create_task(
                    _raw(port, slow_head, hold=body_timeout + 20, trickle=b"{" * 500, every=1.0)
                )
                for _ in range(50)
            ]
            huge = [asyncio.create_task(_huge_header(port, 16)) for _ in range(10)]
            for share in shares:
                idlers.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "chaos.idle_connections",
                        "--port",
                        str(port),
                        "--count",
                        str(share),
                        stdout=asyncio.subprocess.PIPE,
                    )
                )
            for idler in idlers:
                assert idler.stdout is not None
                line = await asyncio.wait_for(idler.stdout.readline(), timeout=180)
                opened_idle += json.loads(line)["opened"]
            await asyncio.sleep(config.hostile_hold_seconds)
            for idler in idlers:
                idler.send_signal(signal.SIGTERM)
                assert idler.stdout is not None
                line = await asyncio.wait_for(idler.stdout.readline(), timeout=60)
                closed_idle += json.loads(line)["closed_by_server"]
                await idler.wait()
            watch_codes = Counter(await asyncio.gather(*watchers))
            slow_codes = Counter(await asyncio.gather(*slow))
            huge_codes = Counter(await asyncio.gather(*huge))
            await asyncio.sleep(3)
            seen = await steady.stop()
    finally:
        stop.set()
        await asyncio.gather(sampler, return_exceptions=True)
        for idler in idlers:
            if idler.returncode is None:
                idler.kill()
                await idler.wait()
    tally.merge(seen.tally)
    await cluster.settle(seen.accepted, within=60)
    row.figures = await cluster.figures(seen.accepted, tally)
    steady_ok = all(code in (200, 202) for code in seen.tally.statuses) and not seen.tally.errors
    row.standard_checks()
    row.check(
        f"steady client p99 < 1 s (p99 {seen.p99:.2f} s over {len(seen.latencies)} calls)",
        seen.p99 < 1.0,
    )
    row.check("steady client: every answer 200/202, no transport error", steady_ok)
    row.check(
        "watchers beyond the caps shed 429/503, none 500",
        watch_codes.get("429", 0) + watch_codes.get("503", 0) > 0
        and not any(c.startswith("5") and c != "503" for c in watch_codes),
    )
    row.check("slow bodies cut with 408", slow_codes.get("408", 0) == len(slow))
    row.check(
        "huge headers refused (431/400 or closed), never served",
        not any(c.startswith("2") for c in huge_codes),
    )
    row.check(f"API memory bounded (peak RSS {rss_peak:.0f} MB < 600 MB)", rss_peak < 600)
    row.check(f"{opened_idle} of {config.hostile_idle} idle connections opened", opened_idle > 0)
    row.check(
        f"the API closed idle connections itself (head timeout): {closed_idle}", closed_idle > 0
    )
    row.check("the API survived", api.alive())
    row.notes.append(
        f"fd limit {limit} per process; {opened_idle} idle connections from {len(shares)}"
        f" processes, {closed_idle} closed by the API within {config.hostile_hold_seconds} s;"
        f" watchers {dict(watch_codes)}; slow bodies {dict(slow_codes)}; huge headers"
        f" {dict(huge_codes)}; API RSS {rss_before:.0f} -> peak {rss_peak:.0f} MB;"
        f" steady p99 {seen.p99:.3f} s; steady answers {seen.tally.describe()}"
    )


# -- 11. random API calls checked against the lifecycle model ---------------------------


async def api_model(cluster: Cluster, config: Config, row: Row) -> None:
    """:class:`chaos.api_machine.ApiMachine` (Hypothesis, stateful) against the live API
    with two real worker processes: every observed status follows ``atlas_jobs._app.lifecycle``."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from chaos.api_machine import ApiMachine, configure

    client_key = await cluster.key("model")
    operator_key = await cluster.key("model-ops", roles=(Role.OPERATOR,))
    await cluster.start_api()
    cluster.start_worker("w0", concurrency=4)
    cluster.start_worker("w1", concurrency=4)
    target = configure(cluster.api_url, client_key, operator_key)
    budget = settings(
        max_examples=config.model_examples,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    failure = ""
    try:
        await asyncio.to_thread(run_state_machine_as_test, ApiMachine, settings=budget)
    except Exception as exc:  # the falsifying example is printed by Hypothesis
        failure = f"{type(exc).__name__}: {str(exc)[:300]}"
        # A flaky verdict hides the failure that started it: print the whole chain.
        traceback.print_exception(exc, file=sys.stderr)
    states = await cluster.settle(target.jobs, within=120, done=TERMINAL | {"unresolved"})
    row.figures = await cluster.figures(target.jobs, Tally(), done=TERMINAL | {"unresolved"})
    row.standard_checks(rescue_bound(cluster.timing))
    row.check(
        f"every observation followed the lifecycle{' — ' + failure if failure else ''}", not failure
    )
    row.check("jobs were created and observed", bool(target.jobs) and bool(target.observations))
    row.check("no process died", all(p.alive() for p in cluster.procs))
    seen = " ".join(f"{k} {v}" for k, v in sorted(target.observations.items()))
    row.notes.append(
        f"{config.model_examples} examples x 25 steps; checked: {seen};"
        f" final states {dict(Counter(states.values()))}"
    )


SCENARIOS: dict[str, tuple[str, Scenario, Timing]] = {
    "pg-stop": ("1 PostgreSQL stop -m immediate", pg_stop, Timing(bundle_time_scale=0.02)),
    "kill-storm": ("2 kill -9 storm", kill_storm, Timing(bundle_time_scale=0.02)),
    "network": ("3 network resets, stalls, lost acks", flaky_network, Timing()),
    "skew": ("4 clock skew (faketime)", clock_skew, Timing(bundle_time_scale=0.3)),
    "listener": ("5 LISTEN connection killed", listener_killed, Timing(poll_interval_seconds=1.0)),
    "watchers": ("6 pool exhaustion (watchers)", pool_exhaustion, Timing(bundle_time_scale=0.05)),
    "idle-tx": ("7 idle in transaction", idle_in_transaction, Timing()),
    "poison": ("8 poison job", poison, Timing(bundle_time_scale=0.02)),
    "duplicates": ("9 duplicate delivery", duplicates, Timing()),
    "hostile": ("10 hostile clients", hostile_clients, Timing()),
    "api-model": ("11 random API calls vs the lifecycle", api_model, Timing()),
}
