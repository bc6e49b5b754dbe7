"""Problems (RFC 9457), authentication, and answers to malformed client input."""

from __future__ import annotations

import uuid

import httpx

from tests.api.support import BUNDLE_INPUT, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
PROBLEM = "application/problem+json"


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, object] = response.json()
    assert body["type"] == f"urn:atlas-jobs:problem:{slug}"
    assert body["status"] == status
    assert body["title"]
    return body


async def test_missing_bad_or_revoked_key_is_401_with_www_authenticate(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer atlas_not-a-real-key-at-all-0000"},
        {"Authorization": "Basic YWxpY2U6cGFzcw=="},
        {"Authorization": "Bearer"},
    ):
        response = await client.post("/v1/jobs", json=BUNDLE, headers=headers)
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")
    listing = await client.get("/v1/jobs")
    assert_problem(listing, 401, "unauthorized")


async def test_unknown_kind_and_invalid_input_are_422_and_store_nothing(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    unknown = await client.post(
        "/v1/jobs", json={"kind": "atlas.nope", "input": {}}, headers=keys.a
    )
    assert_problem(unknown, 422, "unknown-kind")
    no_kind = await client.post("/v1/jobs", json={"input": {}}, headers=keys.a)
    assert no_kind.status_code == 422
    extra = await client.post(
        "/v1/jobs",
        json={"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "surprise": 1}},
        headers=keys.a,
    )
    body = assert_problem(extra, 422, "invalid-input")
    assert any("surprise" in ".".join(e["loc"]) for e in body["errors"])  # type: ignore[attr-defined]
    bad_preset = await client.post(
        "/v1/jobs",
        json={"kind": "atlas.bundle", "input": {"preset": "lagoon", "pages": ["cover"]}},
        headers=keys.a,
    )
    assert_problem(bad_preset, 422, "invalid-input")
    missing = await client.post("/v1/jobs", json={"kind": "atlas.bundle"}, headers=keys.a)
    assert_problem(missing, 422, "invalid-request")
    not_an_object = await client.post("/v1/jobs", json=[1, 2], headers=keys.a)
    assert_problem(not_an_object, 422, "invalid-request")
    extra_top = await client.post("/v1/jobs", json={**BUNDLE, "colour": "blue"}, headers=keys.a)
    assert_problem(extra_top, 422, "invalid-request")
    listing = await client.get("/v1/jobs", headers=keys.a)
    assert listing.json()["items"] == []


async def test_malformed_json_is_400(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.post(
        "/v1/jobs",
        content=b'{"kind": "atlas.bundle", "input": {',
        headers={**keys.a, "Content-Type": "application/json"},
    )
    assert_problem(response, 400, "malformed-json")


async def test_non_json_body_is_415(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.post(
        "/v1/jobs",
        content=b"kind=atlas.bundle",
        headers={**keys.a, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_problem(response, 415, "unsupported-media-type")


async def test_body_over_the_limit_is_413_from_content_length_and_from_a_stream(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    big = {"kind": "atlas.bundle", "input": {"pad": "x" * (70 * 1024)}}
    declared = await client.post("/v1/jobs", json=big, headers=keys.a)
    assert_problem(declared, 413, "payload-too-large")

    sent: list[int] = []

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(1000):  # up to 16 MiB if nobody stops reading
            sent.append(1)
            yield b"x" * 16384

    streamed = await client.post(
        "/v1/jobs",
        content=chunks(),
        headers={**keys.a, "Content-Type": "application/json"},
    )
    assert_problem(streamed, 413, "payload-too-large")
    assert len(sent) < 1000  # stopped reading at the limit, not after the whole body


async def test_bad_path_parameters_and_unknown_routes_are_problems(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    assert_problem(await client.get("/v1/jobs/not-a-uuid", headers=keys.a), 422, "invalid-request")
    assert_problem(await client.get("/v1/nothing-here", headers=keys.a), 404, "not-found")
    put = await client.put(f"/v1/jobs/{uuid.uuid4()}", headers=keys.a)
    assert_problem(put, 405, "method-not-allowed")
    assert put.headers["allow"] == "GET"
    options = await client.options("/v1/jobs", headers=keys.a)
    assert_problem(options, 405, "method-not-allowed")
    assert options.headers["allow"] == "GET, POST"


async def test_role_protected_routes_are_403_for_clients(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    job = str(uuid.uuid4())
    for method, path, body in (
        ("GET", "/v1/queue", None),
        ("POST", f"/v1/jobs/{job}/resume", {}),
        ("POST", f"/v1/jobs/{job}/fail", {}),
        ("POST", f"/v1/jobs/{job}/replay", {}),
        ("POST", f"/v1/jobs/{job}/review", {"decision": "approve"}),
    ):
        response = await client.request(method, path, json=body, headers=keys.a)
        assert_problem(response, 403, "forbidden")


async def test_request_id_is_echoed_or_generated(client: httpx.AsyncClient, keys: Keys) -> None:
    echoed = await client.get("/v1/jobs", headers={**keys.a, "X-Request-ID": "abc-123"})
    assert echoed.headers["x-request-id"] == "abc-123"
    generated = await client.get("/v1/jobs", headers={**keys.a, "X-Request-ID": "bad id\t!"})
    assert generated.headers["x-request-id"] not in {"", "bad id\t!"}
