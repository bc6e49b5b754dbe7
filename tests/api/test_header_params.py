"""The headers the create and status-read routes read themselves (``atlas_jobs._app.api.header_params``)
are validated as their OpenAPI parameters say: a value out of bounds is the same RFC 9457
problem FastAPI's own header parameters answered (``invalid-request``, the error located
at ``header.<Name>``), the name is matched in any case, and authentication still comes
first."""

from __future__ import annotations

import httpx
import pytest

from tests.api.support import BUNDLE_INPUT, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
PROBLEM = "application/problem+json"


def invalid_header(name: str, msg: str, kind: str) -> dict[str, object]:
    return {
        "type": "urn:atlas-jobs:problem:invalid-request",
        "title": "The request is invalid",
        "status": 422,
        "detail": "The request does not match the API schema",
        "errors": [{"loc": ["header", name], "msg": msg, "type": kind}],
    }


TOO_SHORT_KEY = invalid_header(
    "Idempotency-Key", "String should have at least 1 character", "string_too_short"
)
TOO_LONG_KEY = invalid_header(
    "Idempotency-Key", "String should have at most 255 characters", "string_too_long"
)


@pytest.mark.parametrize(("value", "problem"), [("", TOO_SHORT_KEY), ("k" * 256, TOO_LONG_KEY)])
async def test_an_idempotency_key_out_of_bounds_is_422_and_creates_nothing(
    client: httpx.AsyncClient, keys: Keys, value: str, problem: dict[str, object]
) -> None:
    refused = await client.post(
        "/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": value}
    )
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == PROBLEM
    assert refused.json() == problem
    listed = await client.get("/v1/jobs", headers=keys.a)
    assert listed.json()["items"] == []


async def test_an_idempotency_key_at_its_bound_is_honoured_in_any_case_of_the_name(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    key = "k" * 255
    first = await client.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": key})
    assert first.status_code == 202, first.text
    again = await client.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "idempotency-key": key})
    assert again.status_code == 202, again.text
    assert again.headers["Idempotency-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


@pytest.mark.parametrize("name", ["If-None-Match", "Prefer"])
async def test_a_read_header_longer_than_512_is_422(
    client: httpx.AsyncClient, keys: Keys, name: str
) -> None:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    job = created.json()["id"]
    refused = await client.get(f"/v1/jobs/{job}", headers={**keys.a, name: "x" * 513})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == PROBLEM
    assert refused.json() == invalid_header(
        name, "String should have at most 512 characters", "string_too_long"
    )
    at_bound = await client.get(f"/v1/jobs/{job}", headers={**keys.a, name: "x" * 512})
    assert at_bound.status_code == 200, at_bound.text


async def test_an_etag_list_in_if_none_match_is_304_in_any_case_of_the_name(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    tag = created.headers["ETag"]
    read = await client.get(
        created.headers["Location"], headers={**keys.a, "if-none-match": f'W/"0", {tag}'}
    )
    assert read.status_code == 304
    assert read.headers["ETag"] == tag


async def test_authentication_is_checked_before_a_bad_header(client: httpx.AsyncClient) -> None:
    refused = await client.post(
        "/v1/jobs", json=BUNDLE, headers={"Idempotency-Key": "", "Authorization": "Bearer nope"}
    )
    assert refused.status_code == 401, refused.text
