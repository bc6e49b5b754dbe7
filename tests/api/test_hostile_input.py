"""Hostile or careless input is a 422 problem naming the field, never a 500 (issue 8)."""

from __future__ import annotations

import httpx

from tests.api.support import BUNDLE_INPUT, Keys
from tests.api.test_errors_auth import assert_problem


def _locs(body: dict[str, object]) -> list[str]:
    errors = body["errors"]
    assert isinstance(errors, list)
    return [".".join(error["loc"]) for error in errors]


async def test_duplicate_bundle_pages_are_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for pages in (["cover", "cover"], ["summary", "summary"]):
        response = await client.post(
            "/v1/jobs",
            json={"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "pages": pages}},
            headers=keys.a,
        )
        body = assert_problem(response, 422, "invalid-input")
        assert _locs(body) == ["body.atlas.bundle.input.pages"]
    listing = await client.get("/v1/jobs", headers=keys.a)
    assert listing.json()["items"] == []
