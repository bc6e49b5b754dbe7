"""The status page's job view of a delayed job with a start deadline: the label of the
one presentation function, and when it may start and must have started by."""

from __future__ import annotations

import html

import httpx
from fastapi import FastAPI

from atlas_jobs._app.presentation import Observation, present
from tests.api.support import BUNDLE_INPUT, Keys
from tests.ui.conftest import BASE, log_in


async def test_a_delayed_job_shows_its_schedule_and_its_start_deadline(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    answer = await client.post(
        "/v1/jobs",
        json={
            "kind": "atlas.bundle",
            "input": BUNDLE_INPUT,
            "delay_seconds": 3600,
            "start_within_seconds": 7200,
        },
        headers=keys.a,
    )
    assert answer.status_code == 202, answer.text
    status = answer.json()
    expected = present(status, Observation.FRESH).label
    assert expected.startswith("Queued — scheduled for ")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        await log_in(http, keys.alice)
        page = await http.get(f"/ui/jobs/{status['id']}")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert f'data-testid="label">{expected}<' in text
    assert 'data-testid="run-at">' in text
    assert 'data-testid="start-by">' in text
    assert 'data-testid="cancel"' in text
