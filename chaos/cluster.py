"""Real processes for the chaos scenarios: one throwaway embedded PostgreSQL per run, a
fresh database per scenario, ``atlas-jobs api`` and ``atlas-jobs worker`` processes, and
the figures every scenario reports (read back from the database, never from logs).

Every process is started in its own session and registered with its :class:`Cluster`,
whose :meth:`Cluster.close` kills what is still alive, so a failing scenario leaves
nothing behind. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.ext.asyncio import create_async_engine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.db import embedded
from harness import processes
from harness.processes import free_port

REPO = Path(__file__).resolve().parent.parent
TERMINAL = frozenset({"succeeded", "failed", "canceled"})
SIGNING_SECRET = "chaos-signing-secret"  # noqa: S105 - a throwaway run's secret


@dataclass(frozen=True)
class Timing:
    """Worker and API knobs: short leases and fast simulated work."""

    lease_seconds: float = 2.0
    reaper_interval_seconds: float = 0.5
    poll_interval_seconds: float = 0.5
    sweeper_interval_seconds: float = 1.0
    bundle_time_scale: float = 0.02
    shutdown_grace_seconds: float = 2.0

    def env(self) -> dict[str, str]:
        return {
            "ATLAS_LEASE_SECONDS": str(self.lease_seconds),
            "ATLAS_REAPER_INTERVAL_SECONDS": str(self.reaper_interval_seconds),
            "ATLAS_POLL_INTERVAL_SECONDS": str(self.poll_interval_seconds),
            "ATLAS_SWEEPER_INTERVAL_SECONDS": str(self.sweeper_interval_seconds),
            "ATLAS_BUNDLE_TIME_SCALE": str(self.bundle_time_scale),
            "ATLAS_SHUTDOWN_GRACE_SECONDS": str(self.shutdown_grace_seconds),
        }


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill9(self) -> None:
        """``kill -9`` of the whole process group: no chance to release anything."""
        processes.kill_process_group(self.process)

    def stop(self) -> None:
        processes.stop_process_group(self.process)

    def log(self) -> str:
        return processes.log_of(self.log_path)


class Server:
    """The run's own embedded PostgreSQL, under a throwaway data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.embedded = embedded.ensure_running(data_dir)

    def stop_immediate(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies, no checkpoint (crash recovery
        at the next start)."""
        embedded.stop(self.data_dir, mode="immediate")

    def start_again(self) -> None:
        """Start on the same port (``pg_ctl restart`` replays ``postmaster.opts``)."""
        embedded.restart(self.data_dir)

    def close(self) -> None:
        embedded.stop(self.data_dir, mode="immediate")


@dataclass
class Tally:
    """What clients saw: status codes, unanswered requests, and what a 5xx carried."""

    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    bad_5xx: int = 0  # a 5xx other than 503 + Retry-After
    shed: int = 0  # 429/503 with Retry-After
    shed_without_retry_after: int = 0

    def record(self, response: httpx.Response) -> None:
        status = response.status_code
        self.statuses[status] += 1
        if status in (429, 503):
            if "retry-after" in response.headers:
                self.shed += 1
            else:
                self.shed_without_retry_after += 1
        if status >= 500 and not (status == 503 and "retry-after" in response.headers):
            self.bad_5xx += 1

    def error(self, exc: Exception) -> None:
        self.errors[type(exc).__name__] += 1

    def merge(self, other: Tally) -> None:
        self.statuses.update(other.statuses)
        self.errors.update(other.errors)
        self.bad_5xx += other.bad_5xx
        self.shed += other.shed
        self.shed_without_retry_after += other.shed_without_retry_after

    def describe(self) -> str:
        codes = " ".join(f"{k}x{v}" for k, v in sorted(self.statuses.items()))
        errs = " ".join(f"{k}x{v}" for k, v in sorted(self.errors.items()))
        return f"[{codes}{' ' + errs if errs else ''}]"


@dataclass
class Figures:
    """The table's columns for one scenario, read back from the database."""

    accepted: int = 0
    lost: int = 0
    published_twice: int = 0
    max_rescue_seconds: float | None = None
    bad_5xx: int = 0


class Cluster:
    """One scenario's database and processes."""

    def __init__(self, server: Server, name: str, timing: Timing, work_dir: Path) -> None:
        self.server = server
        self.name = name
        self.timing = timing
        self.work_dir = work_dir / name
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.database = f"chaos_{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        self.database_url = server.embedded.url(self.database)
        self.libpq_url = server.embedded.libpq_url(self.database)
        self.procs: list[Proc] = []
        self.extra_env: dict[str, str] = {}
        self.api_url = ""

    # -- set-up ---------------------------------------------------------------------

    async def create(self) -> None:
        admin = await asyncpg.connect(self.server.embedded.libpq_url("postgres"))
        try:
            await admin.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            await admin.close()
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "atlas_jobs._app.cli", "migrate"],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed: {done.stderr[-2000:]}")

    async def key(self, owner: str, roles: Iterable[Role] = (Role.CLIENT,)) -> str:
        engine = create_async_engine(self.database_url)
        try:
            async with engine.begin() as conn:
                return await create_key(conn, owner=owner, roles=roles)
        finally:
            await engine.dispose()

    def env(self) -> dict[str, str]:
        env = processes.base_env(self.database_url, self.work_dir / "data")
        env["ATLAS_SIGNING_SECRET"] = SIGNING_SECRET
        env.update(self.timing.env())
        env.update(self.extra_env)
        return env

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        *,
        wrapper: list[str] | None = None,
    ) -> Proc:
        log_path = self.work_dir / f"{name}.log"
        process = processes.spawn(
            argv, env=env, log_path=log_path, append=True, wrapper=wrapper or ()
        )
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    async def start_api(self, **env: str) -> Proc:
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        proc = self._spawn(
            "api", ["-m", processes.CLI, "api", "--port", str(port)], {**self.env(), **env}
        )
        await processes.until_ready(proc.process, f"{self.api_url}/readyz", proc.log_path)
        return proc

    def start_worker(
        self,
        name: str,
        *,
        concurrency: int = 4,
        module: str = "atlas_jobs._app.cli",
        database_port: int | None = None,
        wrapper: list[str] | None = None,
    ) -> Proc:
        """A worker process; ``database_port`` points it at another port of 127.0.0.1
        (a proxy), ``wrapper`` runs it under a command (``faketime -f +10s``)."""
        argv = processes.worker_args(name, concurrency=concurrency, module=module)
        env = self.env()
        if database_port is not None:
            env["DATABASE_URL"] = self.server.embedded.url(self.database).replace(
                f"127.0.0.1:{self.server.embedded.port}", f"127.0.0.1:{database_port}"
            )
        return self._spawn(name, argv, env, wrapper=wrapper)

    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.name != "api"]

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.stop()
            except Exception:  # noqa: S112 - keep stopping the others
                continue

    def worker_logs(self) -> str:
        return "\n".join(p.log() for p in self.workers())

    # -- reading the outcome --------------------------------------------------------

    async def db(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.libpq_url)

    async def states(self, ids: Iterable[str]) -> dict[str, str]:
        conn = await self.db()
        try:
            rows = await conn.fetch(
                "SELECT id::text, state FROM jobs WHERE id = ANY($1::uuid[])", list(ids)
            )
        finally:
            await conn.close()
        return {r["id"]: r["state"] for r in rows}

    async def settle(
        self,
        ids: Iterable[str],
        *,
        within: float,
        done: frozenset[str] = TERMINAL,
        stall: float | None = None,
    ) -> dict[str, str]:
        """Wait (bounded) until every job is in ``done``; the last states read.

        With ``stall``, stop earlier once no further job has finished for that long: a
        starved machine drains slowly, and only a drain that stopped is a finding."""
        wanted = list(ids)
        deadline = time.monotonic() + within
        finished_count, progressed = -1, time.monotonic()
        while True:
            states = await self.states(wanted)
            count = sum(1 for s in states.values() if s in done)
            if count > finished_count:
                finished_count, progressed = count, time.monotonic()
            now = time.monotonic()
            stalled = stall is not None and now - progressed > stall
            if count == len(wanted) or now > deadline or stalled:
                return states
            await asyncio.sleep(0.5)

    async def figures(
        self, ids: Iterable[str], tally: Tally, *, done: frozenset[str] = TERMINAL
    ) -> Figures:
        wanted = set(ids)
        states = await self.states(wanted)
        lost = len(wanted - states.keys()) + sum(1 for s in states.values() if s not in done)
        conn = await self.db()
        try:
            twice = await conn.fetchval(
                "SELECT count(*) FROM (SELECT job_id FROM job_history"
                " WHERE transition = 'publish' GROUP BY job_id HAVING count(*) > 1) AS t"
            )
            rescue = await conn.fetchval(
                "SELECT extract(epoch FROM max(ended_at - lease_expires_at))"
                " FROM attempts WHERE outcome = 'lost'"
            )
        finally:
            await conn.close()
        return Figures(
            accepted=len(wanted),
            lost=lost,
            published_twice=int(twice),
            max_rescue_seconds=None if rescue is None else float(rescue),
            bad_5xx=tally.bad_5xx,
        )

    async def scalar(self, sql: str, *args: Any) -> Any:
        conn = await self.db()
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()


def bundle_body(preset: str = "coast") -> dict[str, Any]:
    return {"kind": "atlas.bundle", "input": {"preset": preset, "pages": ["cover", "summary"]}}


def noop_body(tag: str | None = None) -> dict[str, Any]:
    return {"kind": "atlas.noop", "input": {"tag": tag} if tag else {}}


def client(url: str, key: str, *, timeout: float = 10, connections: int = 100) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


async def post_job(http: httpx.AsyncClient, body: dict[str, Any], tally: Tally) -> str | None:
    """One create with a fresh Idempotency-Key; the id when it was accepted (202)."""
    try:
        response = await http.post(
            "/v1/jobs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
        )
    except httpx.HTTPError as exc:
        tally.error(exc)
        return None
    tally.record(response)
    if response.status_code == 202:
        job_id: str = response.json()["id"]
        return job_id
    return None


async def post_batch(
    http: httpx.AsyncClient, bodies: list[dict[str, Any]], tally: Tally
) -> list[str]:
    items = [{**b, "idempotency_key": uuid.uuid4().hex} for b in bodies]
    try:
        response = await http.post("/v1/jobs:batch", json={"jobs": items})
    except httpx.HTTPError as exc:
        tally.error(exc)
        return []
    tally.record(response)
    if response.status_code == 202:
        return [item["id"] for item in response.json()["items"]]
    return []
