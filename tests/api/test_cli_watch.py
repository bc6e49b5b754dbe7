"""The client verbs as a person meets them: one clear line when the API is down, a lost
answer never creating a second job, and ``watch`` on a terminal (a pseudo-terminal)
showing the label at once and one stale line, updated in place, during an outage."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.db.schema import jobs
from tests.api.conftest import SIGNING_SECRET, LiveApi
from tests.proxy import TcpProxy, tcp_proxy
from tests.support import REPO, atlas_process, free_port

VERBS: list[list[str]] = [
    ["submit", "--kind", "atlas.noop"],
    ["status", "J"],
    ["watch", "J"],
    ["list"],
    ["history", "J"],
    ["events", "J"],
    ["cancel", "J"],
    ["result", "J"],
    ["result", "J", "-o", "OUT"],
]


def cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v[:3]))
def test_every_verb_with_the_api_down_prints_one_line(verb: list[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = [str(tmp_path) if a == "OUT" else str(uuid.uuid4()) if a == "J" else a for a in verb]
    done = cli(*args, env={"ATLAS_URL": url, "ATLAS_API_KEY": "atlas_whatever"})
    assert done.returncode == 3
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"cannot reach the Atlas API at {url} (ConnectError); is it running? "
        "(set --url or ATLAS_URL)"
    ]


def test_the_url_flag_beats_the_environment(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli(
        "status", "x", "--url", url, "--api-key", "k", env={"ATLAS_URL": "http://192.0.2.1:1"}
    )
    assert done.returncode == 3
    assert url in done.stderr


@pytest.fixture
async def key(engine: AsyncEngine) -> str:
    async with engine.begin() as conn:
        return await create_key(conn, owner="erin", roles=[Role.CLIENT])


async def test_submit_repeats_a_lost_answer_with_the_same_key(
    live_api: LiveApi, engine: AsyncEngine, key: str
) -> None:
    with tcp_proxy(httpx.URL(live_api.url).port or 80) as proxy:
        proxy.lose_answers(2)  # the API creates the job; the client never hears it twice
        done = cli(
            "submit", "--kind", "atlas.noop",
            env={"ATLAS_URL": proxy.url, "ATLAS_API_KEY": key},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        keys = re.findall(rb"idempotency-key: (\S+)", b"".join(proxy.sent).lower())
    assert len(keys) == 3
    assert len(set(keys)) == 1
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 1
        assert str(await conn.scalar(select(jobs.c.id))) == done.stdout.strip()


class Terminal:
    """A process on a pseudo-terminal, its output collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        leader, follower = pty.openpty()
        self.process = subprocess.Popen(
            args,
            stdin=follower,
            stdout=follower,
            stderr=follower,
            cwd=REPO,
            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", **env},
            close_fds=True,
        )
        os.close(follower)
        self._fd = leader
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 4096)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._chunks.append(data)

    @property
    def output(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output)
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} never appeared; output: {self.output!r}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        os.close(self._fd)


@pytest.fixture
def held_api(database_url: str, data_dir: Path, tmp_path: Path) -> Iterator[str]:
    """The API holding ``Prefer: wait`` reads up to 30 s (longer than watch's wait)."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SIGNING_SECRET,
        "ATLAS_MAX_WAIT_SECONDS": "30",
    }
    url = f"http://127.0.0.1:{port}"
    with atlas_process(
        ["api", "--port", str(port)],
        env=env,
        log_path=tmp_path / "api.log",
        ready_url=f"{url}/livez",
    ):
        yield url


def _requests_for(proxy: TcpProxy, path: str) -> list[str]:
    """The header blocks of every ``GET path`` sent through the proxy, in order."""
    text = b"".join(proxy.sent).decode(errors="replace")
    heads = re.finditer(r"GET (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", text, re.S)
    return [head.group(2) for head in heads if head.group(1) == path]


async def test_watch_on_a_terminal_shows_the_label_then_one_stale_line_in_place(
    held_api: str, key: str
) -> None:
    env = {"ATLAS_API_KEY": key}
    with tcp_proxy(httpx.URL(held_api).port or 80) as proxy:
        env["ATLAS_URL"] = proxy.url
        created = cli("submit", "--kind", "atlas.noop", env=env)  # no worker: stays queued
        job_id = created.stdout.strip()
        terminal = Terminal([sys.executable, "-m", "atlas_jobs._app.cli", "watch", job_id], env)
        try:
            terminal.wait_for(r"Queued")
            # The label came from a first read without Prefer (answered at once); only
            # then does watch hold conditional reads.
            reads = _requests_for(proxy, f"/v1/jobs/{job_id}")
            assert reads
            assert "prefer:" not in reads[0].lower()
            assert "if-none-match:" not in reads[0].lower()
            terminal.wait_for(r"(?s)Queued.*Queued")  # any later redraw is fine too
            proxy.down()
            first = terminal.wait_for(r"Last update (\d+) s ago — reconnecting")
            later = terminal.wait_for(
                rf"Last update (?!{first.group(1)} )(\d+) s ago — reconnecting"
            )
            assert int(later.group(1)) > int(first.group(1)) >= 10
            # In place: the stale line is redrawn (cursor moved back up, line erased),
            # not printed again below: no stale text is followed by a newline.
            between = terminal.output[first.start() : later.start()]
            assert "\x1b[" in between
            assert not re.search(r"reconnecting\r?\n", terminal.output)
            assert "ail" not in terminal.output  # never "failed"
            proxy.up()
            terminal.wait_for(r"(?s)reconnecting.*Queued", timeout=60)
            held = _requests_for(proxy, f"/v1/jobs/{job_id}")[-1].lower()
            assert "prefer: wait=8" in held
            assert "if-none-match:" in held
        finally:
            terminal.close()
