"""Absolute links come from the configured public base URL, never from the request's
``Host`` header, and the CLI sends its key only to its own ``ATLAS_URL`` (a
reliability finding)."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings, bind_url
from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, Driver, Keys
from tests.api.test_cli import cli

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
EVIL = {"Host": "evil.example"}


async def _published(client: httpx.AsyncClient, keys: Keys, driver: Driver) -> uuid.UUID:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    job_id = uuid.UUID(created.json()["id"])
    await driver.succeed(job_id, "alice", {"bundle.zip": b"zip"})
    return job_id


async def test_download_links_use_the_configured_public_url_not_the_host_header(
    api_settings: Settings, clock: Clock, keys: Keys, driver: Driver
) -> None:
    settings = api_settings.model_copy(update={"public_url": "https://jobs.example.com/atlas"})
    app = create_app(settings, clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://evil.example"
        ) as http,
    ):
        job_id = await _published(http, keys, driver)
        result = await http.get(f"/v1/jobs/{job_id}/result", headers={**keys.a, **EVIL})
        assert result.status_code == 200
        urls = [entry["url"] for entry in result.json()["files"]]
        assert urls
        assert all(url.startswith("https://jobs.example.com/atlas/v1/downloads/") for url in urls)


async def test_live_api_derives_links_from_its_bind_address(
    live_api: LiveApi, keys: Keys, driver: Driver
) -> None:
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        job_id = await _published(http, keys, driver)
        result = await http.get(f"/v1/jobs/{job_id}/result", headers={**keys.a, **EVIL})
        url = result.json()["files"][0]["url"]
        assert url.startswith(f"{live_api.url}/v1/downloads/"), url
        assert (await http.get(url)).content == b"zip"


def test_public_url_setting_is_validated_and_bind_addresses_are_safe() -> None:
    assert Settings(public_url="https://a.example/x/").public_url == "https://a.example/x"
    for bad in ("ftp://a.example", "https://", "https://u:p@a.example", "https://a.example/?q"):
        with pytest.raises(ValueError, match="ATLAS_PUBLIC_URL"):
            Settings(public_url=bad)
    assert bind_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert bind_url("::", 9) == "http://[::1]:9"
    assert bind_url("api.internal", 80) == "http://api.internal:80"


# -- the CLI's key stays home ---------------------------------------------------------


@dataclass
class Recorder:
    """A tiny HTTP server on 127.0.0.1 that answers from a table and records headers."""

    answers: dict[str, tuple[int, bytes]]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def recorders() -> Iterator[tuple[Recorder, Recorder]]:
    made: list[ThreadingHTTPServer] = []

    def start(recorder: Recorder) -> Recorder:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, body = recorder.answers.get(self.path, (404, b"{}"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
        return recorder

    yield start(Recorder({})), start(Recorder({}))
    for server in made:
        server.shutdown()
        server.server_close()


def test_cli_download_sends_the_key_only_to_its_own_atlas_url(
    recorders: tuple[Recorder, Recorder], tmp_path: Path
) -> None:
    api, elsewhere = recorders
    job_id = str(uuid.uuid4())
    reference = {
        "job_id": job_id,
        "delivery": {"state": "available", "expires_at": None},
        "files": [
            {
                "name": name,
                "size": 3,
                "sha256": hashlib.sha256(body).hexdigest(),  # the CLI checks it
                "url": f"{base}/v1/downloads/{name}-token",
                "url_expires_at": "2030-01-01T00:00:00Z",
            }
            for name, base, body in (
                ("away.zip", elsewhere.url, b"two"),
                ("home.zip", api.url, b"one"),
            )
        ],
    }
    api.answers[f"/v1/jobs/{job_id}/result"] = (200, json.dumps(reference).encode())
    api.answers["/v1/downloads/home.zip-token"] = (200, b"one")
    elsewhere.answers["/v1/downloads/away.zip-token"] = (200, b"two")
    key = "atlas_cli-canary-" + uuid.uuid4().hex
    done = cli(
        "result",
        job_id,
        "--download",
        str(tmp_path / "out"),
        env={"ATLAS_URL": api.url, "ATLAS_API_KEY": key},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "away.zip").read_bytes() == b"two"
    assert (tmp_path / "out" / "home.zip").read_bytes() == b"one"
    [(path, headers)] = elsewhere.seen
    assert path == "/v1/downloads/away.zip-token"
    assert "authorization" not in headers
    seen = dict(api.seen)
    assert seen[f"/v1/jobs/{job_id}/result"]["authorization"] == f"Bearer {key}"
    assert "authorization" not in seen["/v1/downloads/home.zip-token"]  # signed: no key
