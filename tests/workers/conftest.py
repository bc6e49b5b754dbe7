"""Fixtures for worker tests: a fleet of real worker processes on the test's database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.storage import FilesystemStore
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
