"""Random API calls against the live service while a real worker process runs: every
status observed follows the lifecycle table (:mod:`chaos.api_machine`;
chaos scenario 11). Bounded: a few examples of a few steps, about a minute."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from chaos.api_machine import ApiMachine, configure
from tests.acceptance.conftest import ServiceFactory

BOUNDED = settings(
    max_examples=6,
    stateful_step_count=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_random_api_calls_follow_the_lifecycle(
    service: ServiceFactory, engine: AsyncEngine
) -> None:
    svc = service(bundle_time_scale=0.02)
    async with engine.begin() as conn:
        operator = await create_key(conn, owner="ops", roles=[Role.OPERATOR])
    target = configure(svc.url, svc.key, operator)
    await asyncio.to_thread(run_state_machine_as_test, ApiMachine, settings=BOUNDED)
    assert target.jobs, "the machine created jobs"
    assert target.observations["status"] + target.observations["long-poll"] > 0
    assert svc.api.poll() is None, "the API never died"
    assert all(w.alive() for w in svc.fleet.processes), "the worker never died"
