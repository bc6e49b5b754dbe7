"""Hostile or careless input is a 422 problem naming the field, never a 500."""

from __future__ import annotations

import uuid

import httpx

from tests.api.support import BUNDLE_INPUT, Driver, Keys
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
        assert _locs(body) == ["body.input.pages"]
    listing = await client.get("/v1/jobs", headers=keys.a)
    assert listing.json()["items"] == []


# -- text PostgreSQL cannot store (finding 3) ----------------------------------------


async def _bundle(client: httpx.AsyncClient, keys: Keys) -> str:
    created = await client.post(
        "/v1/jobs", json={"kind": "atlas.bundle", "input": BUNDLE_INPUT}, headers=keys.a
    )
    assert created.status_code == 202
    job_id: str = created.json()["id"]
    return job_id


async def test_nul_or_lone_surrogate_in_job_input_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    nul = await client.post(
        "/v1/jobs",
        json={"kind": "atlas.noop", "input": {"tag": "before\u0000after"}},
        headers={**keys.a, "Idempotency-Key": "nul-in-input"},
    )
    body = assert_problem(nul, 422, "invalid-input")
    assert _locs(body) == ["body.input.tag"]
    assert "before" not in nul.text  # the value is never echoed
    surrogate = await client.post(
        "/v1/jobs",
        content=b'{"kind": "atlas.noop", "input": {"tag": "\\ud800"}}',
        headers={**keys.a, "content-type": "application/json"},
    )
    assert _locs(assert_problem(surrogate, 422, "invalid-input")) == ["body.input.tag"]
    paired = await client.post(  # an escaped surrogate *pair* is ordinary text
        "/v1/jobs",
        content=b'{"kind": "atlas.noop", "input": {"tag": "\\ud83d\\ude00 \\\\u0000"}}',
        headers={**keys.a, "content-type": "application/json"},
    )
    assert paired.status_code == 202, paired.text
    listing = await client.get("/v1/jobs", headers=keys.a)
    assert [job["id"] for job in listing.json()["items"]] == [paired.json()["id"]]


async def test_nul_in_a_list_filter_is_422_naming_the_parameter(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for query in ("kind=atlas.bundle%00", "state=queued&kind=%00"):
        response = await client.get(f"/v1/jobs?{query}", headers=keys.a)
        body = assert_problem(response, 422, "invalid-request")
        assert _locs(body) == ["query.kind"]
    assert (await client.get("/v1/jobs?kind=atlas.bundle", headers=keys.a)).status_code == 200


async def test_nul_in_an_operator_or_review_note_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    unresolved = await _bundle(client, keys)
    await driver.unresolve(uuid.UUID(unresolved))
    resume = await client.post(
        f"/v1/jobs/{unresolved}/resume", json={"note": "ok\u0000"}, headers=keys.op
    )
    assert _locs(assert_problem(resume, 422, "invalid-request")) == ["body.note"]
    reviewed = await _bundle(client, keys)
    await driver.await_review(uuid.UUID(reviewed))
    review = await client.post(
        f"/v1/jobs/{reviewed}/review",
        json={"decision": "approve", "note": "\u0000"},
        headers=keys.rev,
    )
    assert _locs(assert_problem(review, 422, "invalid-request")) == ["body.note"]
    # Nothing moved: both jobs are where they were.
    for job_id, state in ((unresolved, "unresolved"), (reviewed, "waiting")):
        assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()["state"] == state


async def test_an_optional_body_is_absent_or_an_object_never_null(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """The schema leaves ``null`` out of the cancel and operator bodies (so generated
    clients can omit them); the server holds to it."""
    created = await client.post(
        "/v1/jobs", json={"kind": "atlas.bundle", "input": BUNDLE_INPUT}, headers=keys.a
    )
    job_id = created.json()["id"]
    null = await client.post(
        f"/v1/jobs/{job_id}/cancel",
        content=b"null",
        headers={**keys.a, "Content-Type": "application/json"},
    )
    assert null.status_code == 422
    assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()["state"] == "queued"
    absent = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert absent.status_code == 202
    assert absent.json()["state"] == "canceled"


async def test_a_json_body_that_is_not_utf8_is_415(client: httpx.AsyncClient, keys: Keys) -> None:
    """JSON is UTF-8 (RFC 8259 section 8.1); a UTF-16 body used to be decoded and
    accepted. UTF-8 itself, and charset=utf-8, still are."""
    text = '{"kind": "atlas.noop", "input": {}}'
    json_type = {**keys.a, "Content-Type": "application/json"}
    for encoded, headers in (
        (text.encode("utf-16"), json_type),  # with its byte order mark
        (text.encode("utf-16-le"), json_type),
        (text.encode("utf-32"), json_type),
        (text.encode(), {**keys.a, "Content-Type": "application/json; charset=utf-16"}),
    ):
        refused = await client.post("/v1/jobs", content=encoded, headers=headers)
        assert_problem(refused, 415, "unsupported-charset")
    assert (await client.get("/v1/jobs", headers=keys.a)).json()["items"] == []
    for charset in ("", "; charset=utf-8", '; charset="UTF-8"'):
        headers = {**keys.a, "Content-Type": "application/json" + charset}
        accepted = await client.post("/v1/jobs", content=text.encode(), headers=headers)
        assert accepted.status_code == 202, (charset, accepted.text)


async def test_a_method_not_allowed_is_405_whatever_the_body(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """The body guard answered a PUT with a body and no Content-Type 415 before the
    router could say the method is not allowed."""
    for headers in ({}, {"Content-Type": "text/plain"}):
        put = await client.put(
            f"/v1/jobs/{uuid.uuid4()}", content=b"hello", headers={**keys.a, **headers}
        )
        assert_problem(put, 405, "method-not-allowed")
        assert put.headers["allow"] == "GET"
    patch = await client.patch("/v1/jobs", content=b"x" * 100_000, headers=keys.a)
    assert_problem(patch, 405, "method-not-allowed")
    # where the method is allowed the guard still speaks first
    wrong_type = await client.post("/v1/jobs", content=b"hello", headers=keys.a)
    assert_problem(wrong_type, 415, "unsupported-media-type")
