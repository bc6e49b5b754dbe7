"""High availability on an existing engine: a pg_auto_failover formation (monitor,
primary, synchronous secondary) loses its primary to ``kill -9`` under load.

A real API (``atlas-jobs api``, uvicorn) and two real worker processes run against the
multi-host ``DATABASE_URL`` that ``pg_autoctl show uri`` prints
(``target_session_attrs=read-write``). A load generator creates jobs and records every
id that got a 202. The primary's postgres and its keeper are killed; the monitor
promotes the secondary; nothing is restarted. Then:

- the API answered only 202 or 503 + ``Retry-After`` throughout -- never a 500 -- and
  creates jobs again after the promotion;
- the workers, never restarted, claim and finish jobs on the new primary;
- every job that got a 202 exists on the new primary and finishes: none was lost,
  because the primary committed nothing its synchronous standby had not received
  (``synchronous_standby_names`` is checked before the kill).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from atlas_jobs._app.lifecycle import TERMINAL_STATES
from tests.ha.formation import Formation
from tests.support import REPO, atlas_process, free_port
from tests.workers.dbwait import bundle_input

pytestmark = [pytest.mark.failover, pytest.mark.slow]

LOAD_CLIENTS = 4
BEFORE_KILL = 12  # jobs accepted before the kill
AFTER_PROMOTION = 12  # jobs accepted after the promotion
DEADLINE = 90.0  # generous: only a broken failover gets near it


@dataclass
class Load:
    """What the load generator saw: every accepted id, and every status by count."""

    accepted: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    missing_retry_after: int = 0
    transport_errors: Counter[str] = field(default_factory=Counter)


@pytest.fixture(scope="module")
def formation() -> Iterator[Formation]:
    with Formation.start() as built:
        yield built


@dataclass
class Service:
    api: str
    key: str
    processes: list[subprocess.Popen[bytes]]
    api_log: Path

    def unhandled_errors(self) -> list[str]:
        """The API's log lines for the requests it answered 500."""
        text = self.api_log.read_text(errors="replace") if self.api_log.exists() else ""
        return [line for line in text.splitlines() if "unhandled_error" in line]


def _cli(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"atlas-jobs {args[0]}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


@pytest.fixture
def service(formation: Formation, tmp_path: Path) -> Iterator[Service]:
    env = {
        **os.environ,
        "DATABASE_URL": formation.database_url(),
        "ATLAS_DATA_DIR": str(tmp_path / "data"),
        "ATLAS_SIGNING_SECRET": "failover-test-secret",
        "ATLAS_BUNDLE_TIME_SCALE": "0.05",
        "ATLAS_POLL_INTERVAL_SECONDS": "0.5",
        "ATLAS_LEASE_SECONDS": "6",
        "ATLAS_REAPER_INTERVAL_SECONDS": "1",
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "2",
        "ATLAS_SHUTDOWN_DRAIN_SECONDS": "0",
        "ATLAS_LOG_FORMAT": "json",
    }
    _cli(["migrate"], env)
    key = _cli(["keys", "create", "--owner", "alice"], env).splitlines()[0]
    with ExitStack() as stack:
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        processes = [
            stack.enter_context(
                atlas_process(
                    ["api", "--port", str(port)],
                    env=env,
                    log_path=tmp_path / "api.log",
                    ready_url=f"{api}/readyz",
                )
            )
        ]
        for n in range(2):
            metrics = free_port()
            processes.append(
                stack.enter_context(
                    atlas_process(
                        ["worker", "--concurrency", "2", "--metrics-port", str(metrics)],
                        env=env,
                        log_path=tmp_path / f"worker-{n}.log",
                        ready_url=f"http://127.0.0.1:{metrics}/metrics",
                    )
                )
            )
        yield Service(api, key, processes, tmp_path / "api.log")


async def _generate(http: httpx.AsyncClient, api: str, load: Load, stop: asyncio.Event) -> None:
    """One client creating jobs until ``stop``; a 503 is honoured (a short pause)."""
    while not stop.is_set():
        try:
            answer = await http.post(
                f"{api}/v1/jobs", json={"kind": "atlas.bundle", "input": bundle_input("coast")}
            )
        except httpx.TransportError as exc:  # the API process must stay up: counted
            load.transport_errors[type(exc).__name__] += 1
            await asyncio.sleep(0.2)
            continue
        load.statuses[answer.status_code] += 1
        if answer.status_code == 202:
            load.accepted.append(answer.json()["id"])
        elif answer.status_code == 503:
            if "retry-after" not in answer.headers:
                load.missing_retry_after += 1
            await asyncio.sleep(0.2)
        else:
            await asyncio.sleep(0.2)


async def _until(condition: object, what: str, seconds: float = DEADLINE) -> None:
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.1)


async def test_the_service_survives_the_primary_being_killed_under_load(
    formation: Formation, service: Service
) -> None:
    await _until(
        lambda: (
            sorted(reported for reported, _ in formation.states().values())
            == ["primary", "secondary"]
        ),
        "a settled formation",
    )
    old = formation.primary()
    standby_names, sync_states = formation.replication(old)
    assert standby_names.startswith("ANY 1"), standby_names  # commits wait for the standby
    assert sync_states == ["quorum"], sync_states

    load = Load()
    stop = asyncio.Event()
    headers = {"Authorization": f"Bearer {service.key}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        clients = [
            asyncio.create_task(_generate(http, service.api, load, stop))
            for _ in range(LOAD_CLIENTS)
        ]
        try:
            await _until(lambda: len(load.accepted) >= BEFORE_KILL, "jobs before the kill")
            formation.kill(old)
            killed_at = time.monotonic()
            accepted_at_kill = len(load.accepted)
            new = next(node for node in formation.nodes.values() if node is not old)
            await _until(lambda: formation.writable(new), "the secondary's promotion")
            promoted_after = time.monotonic() - killed_at
            accepted_at_promotion = len(load.accepted)
            await _until(
                lambda: len(load.accepted) >= accepted_at_promotion + AFTER_PROMOTION,
                "jobs after the promotion",
            )
        finally:
            stop.set()
            await asyncio.gather(*clients)

        # Never a 500 (or anything else): 202, or 503 + Retry-After while it failed over.
        assert set(load.statuses) <= {202, 503}, (load.statuses, service.unhandled_errors())
        assert load.missing_retry_after == 0
        assert not load.transport_errors, load.transport_errors

        # Every job that got a 202 is on the new primary and finishes there.
        finished: Counter[str] = Counter()
        deadline = time.monotonic() + DEADLINE
        for job_id in load.accepted:
            while True:
                answer = await http.get(
                    f"{service.api}/v1/jobs/{job_id}", headers={"Prefer": "wait=5"}
                )
                assert answer.status_code in {200, 503}, (job_id, answer.status_code)
                if answer.status_code == 200 and answer.json()["state"] in TERMINAL_STATES:
                    finished[answer.json()["state"]] += 1
                    break
                assert time.monotonic() < deadline, f"{job_id} never finished: {answer.text}"
        ready = await http.get(f"{service.api}/readyz")

    assert finished == {"succeeded": len(load.accepted)}, finished
    assert ready.status_code == 200, ready.text
    for process in service.processes:  # nothing was restarted, nothing died
        assert process.poll() is None
    assert formation.states()[new.name][0] in {"wait_primary", "primary"}
    print(
        f"\nfailover: {len(load.accepted)} jobs accepted ({accepted_at_kill} before the kill), "
        f"all succeeded; answers {dict(load.statuses)}; "
        f"the secondary took writes {promoted_after:.1f} s after the kill"
    )
