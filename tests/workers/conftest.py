"""Fixtures for worker tests: a fleet of real worker processes on the test's database,
and the in-process harness (the engine's classes in the pytest process, fake handlers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from tests.workers.inprocess import Harness
from tests.workers.procs import Fleet, WorkerSettings

MakeFleet = Callable[..., Fleet]


@pytest.fixture
def make_fleet(database_url: str, data_dir: Path) -> Iterator[MakeFleet]:
    """``make_fleet(**settings)``: a fleet whose processes are killed at teardown."""
    made: list[Fleet] = []

    def make(**settings: float) -> Fleet:
        fleet = Fleet(database_url, data_dir, WorkerSettings(**settings))
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


@pytest.fixture
def store(data_dir: Path) -> FilesystemStore:
    return FilesystemStore(data_dir / "results")


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    """Worker settings for in-process tests: the fixtures' lease, no background timers
    that could act on their own during a test (maintenance runs via ``run_once``)."""
    return Settings(
        data_dir=data_dir,
        lease_seconds=30,
        poll_interval_seconds=0.2,
        reaper_interval_seconds=3600,
        sweeper_interval_seconds=3600,
        shutdown_grace_seconds=10,
    )


@pytest.fixture
def harness(
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
    store: FilesystemStore,
    settings: Settings,
) -> Harness:
    return Harness(engine, transitions, clock, store, settings)
