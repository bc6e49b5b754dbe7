"""Each state the factory can make is reachable through the real transitions."""

from __future__ import annotations

import pytest

from atlas_jobs._app.lifecycle import JobState
from tests.factory import JobFactory


@pytest.mark.parametrize("state", list(JobState))
async def test_factory_reaches_every_state(jobs: JobFactory, state: JobState) -> None:
    made = await jobs.make(state)
    row = await jobs.row(made.id)
    assert row.state == state.value
