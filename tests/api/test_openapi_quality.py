"""The committed OpenAPI document as an SDK user meets it: described in plain
prose, typed problems, the event stream as text, and docs pages that work offline."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from atlas_jobs._app.api.errors import problem_type_uris
from atlas_jobs._app.lifecycle import TERMINAL_STATES
from tests.support import REPO

DOCUMENT: dict[str, Any] = json.loads((REPO / "openapi" / "openapi.json").read_text())
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]


def operations() -> list[tuple[str, dict[str, Any]]]:
    return [
        (op["operationId"], op)
        for item in DOCUMENT["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    ]


def test_every_schema_and_property_is_described_in_plain_prose() -> None:
    undocumented = [name for name, schema in SCHEMAS.items() if not schema.get("description")]
    undocumented += [
        f"{name}.{prop}"
        for name, schema in SCHEMAS.items()
        for prop, spec in schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undocumented == []
    text = json.dumps(DOCUMENT)
    assert "``" not in text
    assert not re.search(r":(func|meth|class|mod|data|attr):`", text)


def test_problems_are_typed() -> None:
    assert SCHEMAS["ProblemType"]["enum"] == problem_type_uris()
    assert all(uri.startswith("urn:atlas-jobs:problem:") for uri in problem_type_uris())
    for name in ("Problem", "JobStateProblem", "ValidationProblem", "BatchTooLargeProblem"):
        assert SCHEMAS[name]["properties"]["type"]["$ref"].endswith("/ProblemType")
    assert SCHEMAS["JobStateProblem"]["properties"]["state"]["$ref"].endswith("/JobState")
    assert "errors" in SCHEMAS["ValidationProblem"]["properties"]
    for operation_id, op in operations():
        for code, answer in op["responses"].items():
            if code[0] in "45" and operation_id not in {"health-readyz", "health-livez"}:
                assert list(answer["content"]) == ["application/problem+json"], operation_id
    cancel = dict(operations())["jobs-cancel"]["responses"]
    assert cancel["409"]["content"]["application/problem+json"]["schema"]["$ref"].endswith(
        "/JobStateProblem"
    )
    create = dict(operations())["jobs-create"]["responses"]
    assert "in flight" in create["409"]["description"]
    download = dict(operations())["results-download"]["responses"]
    assert "signature" in download["403"]["description"]


def test_the_protocol_is_in_the_document() -> None:
    ops = dict(operations())
    assert DOCUMENT["servers"]
    assert set(SCHEMAS["JobState"]["x-terminal-states"]) == {s.value for s in TERMINAL_STATES}
    assert "Terminal" in SCHEMAS["JobState"]["description"]
    get = ops["jobs-get"]
    assert "content" not in get["responses"]["304"]
    headers = {p["name"]: p for p in get["parameters"] if p["in"] == "header"}
    assert set(headers) == {"If-None-Match", "Prefer"}
    assert all("anyOf" not in p["schema"] for p in headers.values())  # never sent as None
    assert "wait=" in headers["Prefer"]["description"]
    stream = ops["events-stream"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]
    assert "type" not in stream["text/event-stream"]["schema"]  # no JSON model to parse
    assert "token" in SCHEMAS["ResultFile"]["required"]
    bundle = SCHEMAS["BundleInput"]
    assert "format" not in bundle["required"]
    assert "default" not in bundle["properties"]["format"]
    assert SCHEMAS["HistoryItem"]["properties"]["transition"]["$ref"].endswith("/TransitionName")
    assert ops["jobs-create"]["requestBody"]["content"]["application/json"]["example"]
    assert ops["jobs-get"]["responses"]["200"]["content"]["application/json"]["example"]


async def test_docs_pages_need_no_internet(client: httpx.AsyncClient) -> None:
    for page in ("/docs", "/redoc"):
        html = (await client.get(page)).text
        sources = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        sources += re.findall(r"""url: ?['"]([^'"]+)['"]""", html)
        assert sources, html
        for source in sources:
            assert not source.startswith(("http:", "https:", "//")), (page, source)
            if source.startswith("/docs-assets/"):
                assert (await client.get(source)).status_code == 200, source
        assert "cdn" not in html.lower()
    redoc = (await client.get("/redoc")).text
    (script,) = re.findall(r'<script src="([^"]+redoc[^"]*)"', redoc)
    bundle = await client.get(script)
    assert bundle.status_code == 200
    assert "https://cdn." not in bundle.text  # its sidebar's logo included
    assert "validatorUrl" in (await client.get("/docs")).text  # no online validator


def _keys(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        found = [(path, key) for key in node if key in {"ge", "le", "gt", "lt"}]
        for key, child in node.items():
            found += _keys(child, f"{path}/{key}")
        return found
    if isinstance(node, list):
        return [hit for index, child in enumerate(node) for hit in _keys(child, f"{path}/{index}")]
    return []


def test_bounds_are_json_schema_keywords_the_server_enforces() -> None:
    """pydantic's ``ge``/``le`` on an optional field used to leak into the document as
    unknown keys: ScheduleChange showed catch_up_limit and misfire_grace_seconds
    unbounded while the server refused 0."""
    assert _keys(DOCUMENT) == []
    change = SCHEMAS["ScheduleChange"]["properties"]
    assert (change["catch_up_limit"]["minimum"], change["catch_up_limit"]["maximum"]) == (1, 1000)
    grace = change["misfire_grace_seconds"]
    assert (grace["minimum"], grace["maximum"]) == (1, 86_400)


def test_every_error_answer_shows_a_fitting_problem_example() -> None:
    """Each 4xx/5xx answer carries a real instance of what it answers: a problem of its
    own status whose type the API answers with it (Swagger shows the example instead of
    inventing `additionalProp1` or the first enum member), extension members included."""
    known = set(problem_type_uris())
    seen: dict[tuple[str, str], str] = {}
    for path, item in DOCUMENT["paths"].items():
        for method, op in item.items():
            for code, answer in op["responses"].items():
                if code[0] not in "45" or (code == "503" and path == "/readyz"):
                    continue
                example = answer["content"]["application/problem+json"]["example"]
                assert example["status"] == int(code), (method, path, code)
                assert example["type"] in known, (method, path, code)
                assert "additionalProp1" not in json.dumps(example)
                seen[(op["operationId"], code)] = example["type"].rsplit(":", 1)[1]
    assert seen[("jobs-get", "401")] == "unauthorized"
    assert seen[("jobs-create", "400")] == "malformed-json"
    assert seen[("jobs-create", "422")] == "invalid-input"
    assert seen[("results-download", "403")] == "bad-download-signature"
    assert seen[("jobs-get", "404")] == "job-not-found"
    assert seen[("schedules-read", "404")] == "schedule-not-found"
    assert seen[("jobs-cancel", "409")] == "cancel-too-late"
    create = DOCUMENT["paths"]["/v1/jobs"]["post"]["responses"]
    issue = create["422"]["content"]["application/problem+json"]["example"]["errors"][0]
    assert issue["loc"] == ["body", "input", "pages"]
    cancel = DOCUMENT["paths"]["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    conflict = cancel["409"]["content"]["application/problem+json"]["example"]
    assert (conflict["state"], conflict["delivery"]) == ("succeeded", "available")
