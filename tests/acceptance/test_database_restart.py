"""A PostgreSQL restart drops every connection of the API and the workers. Nothing is
restarted by hand: the API's pool and LISTEN connection and the worker's claim loop,
heartbeat and listener reconnect on their own, and no accepted job is lost.

The test restarts a server of its own (an embedded one in a temporary directory): the
suite's server is shared by every test running in parallel."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest

from atlas_jobs._app.db import embedded
from tests.acceptance.conftest import ServiceFactory
from tests.acceptance.test_seed_histories import TERMINAL, observe, submit
from tests.support import Server, alembic


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("restarted-db")
    started = embedded.ensure_running(data_dir)
    yield Server(started.url("postgres"), embedded_data_dir=data_dir)
    embedded.stop(data_dir, mode="immediate")


@pytest.fixture
def pg_server(own_server: Server) -> Server:
    return own_server


@pytest.fixture
async def database_url(own_server: Server) -> AsyncIterator[str]:
    async with own_server.scratch_database() as url:
        await alembic(url, "upgrade", "head")
        yield url


async def test_api_and_workers_survive_a_database_restart(
    service: ServiceFactory, pg_server: Server
) -> None:
    svc = service(bundle_time_scale=0.02)
    async with svc.client() as http:
        before = await submit(http, "coast")
        assert (await observe(http, before, until=lambda s: s["state"] in TERMINAL))[-1][
            "state"
        ] == "succeeded"

        pg_server.restart()

        deadline = time.monotonic() + 30
        while (await http.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, "the API never became ready again"
        after = await submit(http, "coast")  # the pool replaced its dead connections
        final = (await observe(http, after, until=lambda s: s["state"] in TERMINAL))[-1]
        assert final["state"] == "succeeded", svc.logs()
        assert (await http.get(f"/v1/jobs/{before}")).json()["state"] == "succeeded"
    assert all(w.alive() for w in svc.fleet.processes), "the worker must not have died"
    assert svc.api.poll() is None, "the API must not have died"
