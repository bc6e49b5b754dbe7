"""A new user: the installed wheel, a project of their own, the public kind API only.

The wheel (``installed_wheel``: built from this tree, installed with its dependencies
into a virtualenv outside the checkout) is all there is of Atlas Jobs. A scratch
project whose own packages are called ``app`` and ``workers`` -- the names of Atlas's
internal folders, which must not get in their way -- declares ``thumbnail.render`` in
``app/jobs.py`` on ``atlas_jobs`` alone; a second distribution installed beside it
declares ``extra.echo``, found through its ``atlas_jobs.kinds`` entry point alone.

From the project directory, with the virtualenv's console script: ``migrate``, ``keys
create``, ``serve --kinds app.jobs``; then over HTTP a job that plans, expands its
plan, fails transiently once, retries and publishes files downloaded through signed
links; the entry point's kind; the OpenAPI document; and the two ways a user gets it
wrong (a kinds module that does not import, an input that does not match the model).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ops.wheel import InstalledWheel, run, users_env
from tests.support import REPO, free_port, stop_process_group

pytestmark = pytest.mark.slow

SIZES = (64, 128, 256)

JOBS_MODULE = '''
"""The user's own kinds, on the public API only."""

from __future__ import annotations

from pydantic import BaseModel

from atlas_jobs import Context, Result, RetryPolicy, Stage, kind
from workers import SIZES  # the project's own `workers` package, not Atlas's


class Thumbnail(BaseModel):
    """A thumbnail request: the image's URL (any string: nothing is fetched)."""

    url: str


def thumbnail(url: str, size: int) -> bytes:
    return f"thumbnail {size}x{size} of {url}\\n".encode()


@kind(
    "thumbnail.render",
    version=1,
    input=Thumbnail,
    description="Renders an image in three sizes.",
    stages=[Stage("fetch", "images"), Stage("render", "sizes")],
    retry=RetryPolicy(
        attempts=3,
        backoff_base_seconds=0.1,
        backoff_cap_seconds=0.2,
        transient={ConnectionError: "source_unreachable"},
    ),
    timeout=60,
)
async def render(ctx: Context[Thumbnail]) -> Result:
    await ctx.plan(fetch=1, render=2)
    await ctx.enter("fetch")
    if ctx.attempt == 1:
        raise ConnectionError("the image source did not answer")
    await ctx.unit_done("fetch", "source")
    await ctx.enter("render")
    for index, size in enumerate(SIZES):
        if index == 1:  # the first size shows the image needs a third one
            await ctx.expand_plan("render", len(SIZES))
        await ctx.safe_point()
        await ctx.sleep(0.4)
        await ctx.write_file(f"thumb-{size}.txt", thumbnail(ctx.input.url, size))
        await ctx.unit_done("render", str(size), outputs="partial")
    await ctx.outputs_complete()
    await ctx.begin_publication()
    return Result(files=True)
'''

BROKEN_MODULE = """
raise RuntimeError("thumbnail presets are missing")
"""

EXTRA_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "atlas-extra-kinds"
version = "0.1.0"
dependencies = ["atlas-jobs"]

[project.entry-points."atlas_jobs.kinds"]
extra = "extra_kinds"

[tool.setuptools]
packages = ["extra_kinds"]
"""

EXTRA_MODULE = '''
"""Kinds of another distribution, found through its entry point alone."""

from pydantic import BaseModel

from atlas_jobs import Context, Result, kind


class Echo(BaseModel):
    text: str


@kind("extra.echo", version=1, input=Echo)
async def echo(ctx: Context[Echo]) -> Result:
    """Says the text back."""
    await ctx.write_file("echo.txt", ctx.input.text.encode())
    return Result(files=True, reference={"said": ctx.input.text, "by": "extra_kinds"})
'''


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def user_project(root: Path) -> Path:
    project = root / "thumbs"
    write(project / "app" / "__init__.py", '"""The thumbnail service."""\n')
    write(project / "app" / "jobs.py", JOBS_MODULE)
    write(project / "app" / "broken.py", BROKEN_MODULE)
    write(project / "workers" / "__init__.py", f"SIZES = {SIZES!r}\n")
    return project


def extra_distribution(root: Path) -> Path:
    source = root / "atlas-extra-kinds"
    write(source / "pyproject.toml", EXTRA_PYPROJECT)
    write(source / "extra_kinds" / "__init__.py", EXTRA_MODULE)
    return source


class Watcher:
    """Reads a job's status until it is terminal, keeping what it saw on the way."""

    def __init__(self, http: httpx.Client, path: str) -> None:
        self.http = http
        self.path = path
        self.stages: set[str] = set()
        self.revisions: list[int] = []
        self.states: list[str] = []

    def until_terminal(self, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.http.get(self.path)
            assert answer.status_code == 200, answer.text
            status: dict[str, Any] = answer.json()
            progress = status["progress"]
            if progress["stage"]:
                self.stages.add(progress["stage"])
            self.revisions.append(progress["plan_revision"])
            if not self.states or self.states[-1] != status["state"]:
                self.states.append(status["state"])
            if status["state"] in {"succeeded", "failed", "canceled", "unresolved"}:
                return status
            assert time.monotonic() < deadline, f"still {status['state']}: {status}"
            time.sleep(0.05)


def test_a_new_user_declares_serves_and_runs_kinds(
    empty_database: str, installed_wheel: InstalledWheel, tmp_path: Path
) -> None:
    assert not tmp_path.is_relative_to(REPO)
    project = user_project(tmp_path)
    venv = installed_wheel.venv
    cli = installed_wheel.atlas_jobs
    env = users_env()
    env.update(
        DATABASE_URL=empty_database,
        ATLAS_DATA_DIR=str(tmp_path / "data"),
        ATLAS_POLL_INTERVAL_SECONDS="0.2",
        ATLAS_SHUTDOWN_GRACE_SECONDS="2",
    )

    # A second distribution: its kinds come through the entry point alone.
    run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", extra_distribution(tmp_path)],
        cwd=tmp_path,
        env=env,
    )
    try:
        _as_a_user(cli, project, env, tmp_path)
    finally:  # the virtualenv is the run's, shared with other tests
        run(
            [venv / "bin" / "python", "-m", "pip", "uninstall", "-q", "-y", "atlas-extra-kinds"],
            cwd=tmp_path,
            env=env,
        )


def _as_a_user(cli: Path, project: Path, env: dict[str, str], tmp_path: Path) -> None:
    assert "database migrated to head" in run([cli, "migrate"], cwd=project, env=env)
    key = run(
        [cli, "keys", "create", "--owner", "alice", "--role", "client"], cwd=project, env=env
    ).strip()
    assert key
    assert "\n" not in key

    # A kinds module that does not import: exit 1, one line naming it, nothing served.
    port = free_port()
    broken = subprocess.run(
        [str(cli), "serve", "--kinds", "app.broken", "--port", str(port)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert broken.returncode == 1, broken
    lines = broken.stderr.strip().splitlines()
    assert len(lines) == 1, broken.stderr
    assert "'app.broken'" in lines[0]
    assert "RuntimeError: thumbnail presets are missing" in lines[0]
    assert "Atlas Jobs: API" not in broken.stdout
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1)

    # The OpenAPI document knows the user's kind and its input schema.
    document = json.loads(run([cli, "openapi", "--kinds", "app.jobs"], cwd=project, env=env))
    schemas = document["components"]["schemas"]
    body = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    mapping = body["schema"]["discriminator"]["mapping"]
    create_ref = mapping["thumbnail.render"]
    assert {"$ref": create_ref} in body["schema"]["oneOf"]
    create = schemas[create_ref.rsplit("/", 1)[1]]
    assert create["properties"]["kind"]["const"] == "thumbnail.render"
    input_ref = create["properties"]["input"]["$ref"]
    thumbnail_input = schemas[input_ref.rsplit("/", 1)[1]]
    assert thumbnail_input["properties"] == {"url": {"title": "Url", "type": "string"}}
    assert thumbnail_input["required"] == ["url"]
    assert "extra.echo" in mapping  # the entry point's kind, too

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen(
            [str(cli), "serve", "--kinds", "app.jobs", "--port", str(port)],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _until_ready(serve, f"{base}/readyz", log_path)
        with httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as http:
            _thumbnail_job(http)
            _extra_job(http)
            _bad_input(http)
        assert serve.poll() is None, log_path.read_text()
    finally:
        stop_process_group(serve)


def _until_ready(serve: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert serve.poll() is None, log_path.read_text()
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.2)


def _thumbnail_job(http: httpx.Client) -> None:
    url = "https://images.example/cat.png"
    created = http.post("/v1/jobs", json={"kind": "thumbnail.render", "input": {"url": url}})
    assert created.status_code == 202, created.text
    location = created.headers["Location"]
    assert created.json()["kind"] == "thumbnail.render"
    assert created.json()["kind_version"] == 1

    watcher = Watcher(http, location)
    status = watcher.until_terminal()
    assert status["state"] == "succeeded", status
    assert status["attempt"] == 2
    assert "render" in watcher.stages, watcher.stages
    # The plan grew while the client watched: revision 1 (planned), then 2 (expanded).
    assert watcher.revisions == sorted(watcher.revisions)
    assert {1, 2} <= set(watcher.revisions), watcher.revisions
    assert status["progress"]["plan_revision"] == 2
    assert {s["name"]: (s["done"], s["total"]) for s in status["progress"]["stages"]} == {
        "fetch": (1, 1),
        "render": (3, 3),
    }

    history = http.get(f"{location}/history").json()["items"]
    retries = [item for item in history if item["transition"] == "retry_later"]
    assert len(retries) == 1, history
    [retry] = retries
    assert retry["error"]["code"] == "source_unreachable"
    assert retry["error"]["retryable"] is True
    assert "ConnectionError" in retry["error"]["message"]
    assert retry["attempt"] == 1

    result = http.get(f"{location}/result")
    assert result.status_code == 200, result.text
    assert result.json()["reference"] == {}
    files = {f["name"]: f for f in result.json()["files"]}
    assert sorted(files) == sorted(f"thumb-{size}.txt" for size in SIZES)
    for size in SIZES:
        listed = files[f"thumb-{size}.txt"]
        expected = f"thumbnail {size}x{size} of {url}\n".encode()
        downloaded = httpx.get(listed["url"], timeout=10)  # signed: no API key
        assert downloaded.status_code == 200, downloaded.text
        assert downloaded.content == expected
        assert listed["size"] == len(expected)
        assert listed["sha256"] == hashlib.sha256(expected).hexdigest()


def _extra_job(http: httpx.Client) -> None:
    created = http.post("/v1/jobs", json={"kind": "extra.echo", "input": {"text": "hello"}})
    assert created.status_code == 202, created.text
    status = Watcher(http, created.headers["Location"]).until_terminal()
    assert status["state"] == "succeeded", status
    result = http.get(f"{created.headers['Location']}/result").json()
    [echoed] = result["files"]
    assert httpx.get(echoed["url"], timeout=10).content == b"hello"
    # What the handler returned besides its files reaches the owner with them.
    assert result["reference"] == {"said": "hello", "by": "extra_kinds"}


def _bad_input(http: httpx.Client) -> None:
    before = http.get("/v1/jobs", params={"kind": "thumbnail.render", "limit": 100}).json()
    refused = http.post("/v1/jobs", json={"kind": "thumbnail.render", "input": {"uri": "x"}})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert any("url" in issue["loc"] for issue in problem["errors"]), problem
    after = http.get("/v1/jobs", params={"kind": "thumbnail.render", "limit": 100}).json()
    assert [j["id"] for j in after["items"]] == [j["id"] for j in before["items"]]
