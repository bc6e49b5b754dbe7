"""Limits for clients without a key, against a real ``atlas-jobs api`` process (a
reliability finding): huge headers refused, late request heads and slow bodies cut, client
disconnects not 500s."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import SIGNING_SECRET, LiveApi
from tests.support import atlas_process, free_port

BODY_TIMEOUT = 1.5
HEAD_TIMEOUT = 1.0


@pytest.fixture
def limited_api(database_url: str, data_dir: Path, tmp_path: Path) -> Iterator[LiveApi]:
    port = free_port()
    log_path = tmp_path / "api.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SIGNING_SECRET,
        "ATLAS_LOG_FORMAT": "json",
        "ATLAS_HTTP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "ATLAS_HTTP_HEAD_TIMEOUT_SECONDS": str(HEAD_TIMEOUT),
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "1",
    }
    url = f"http://127.0.0.1:{port}"
    args = ["api", "--port", str(port)]
    with atlas_process(args, env=env, log_path=log_path, ready_url=f"{url}/livez") as process:
        yield LiveApi(url, process, log_path)


def _connect(api: LiveApi) -> socket.socket:
    host, port = api.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 10 s pass)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return received


def _partial_post(sock: socket.socket) -> None:
    sock.sendall(
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer atlas_whatever\r\nContent-Length: 1000\r\n\r\n"
        b'{"kind": "atlas.noop", '
    )


def test_a_100_kb_header_is_refused(limited_api: LiveApi) -> None:
    with _connect(limited_api) as sock:
        try:
            sock.sendall(
                b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
            )
        except (BrokenPipeError, ConnectionResetError):
            return  # closed before we finished sending it: not accepted
        answer = _read_all(sock)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line == b"" or status_line.split()[1] in {b"400", b"431"}, answer[:200]
    assert b"200 OK" not in answer
    assert httpx.get(f"{limited_api.url}/livez").status_code == 200  # still serving


def test_a_slow_partial_body_is_cut_with_408(limited_api: LiveApi) -> None:
    with _connect(limited_api) as sock:
        started = time.monotonic()
        _partial_post(sock)
        answer = _read_all(sock)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"request-timeout" in answer
    assert BODY_TIMEOUT - 0.2 <= elapsed < BODY_TIMEOUT + 5


def test_a_disconnect_mid_body_is_logged_as_such_not_as_a_500(limited_api: LiveApi) -> None:
    with _connect(limited_api) as sock:
        _partial_post(sock)
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while "client_disconnected" not in limited_api.logs():
        assert time.monotonic() < deadline, limited_api.logs()
        time.sleep(0.1)
    events = [json.loads(line) for line in limited_api.logs().splitlines() if line[:1] == "{"]
    [gone] = [e for e in events if e.get("event") == "client_disconnected"]
    assert (gone["level"], gone["route"], gone["status"]) == ("info", "/v1/jobs", 499)
    assert not [e for e in events if e.get("status") == 500 or e.get("level") == "error"]
    metrics = httpx.get(f"{limited_api.url}/metrics").text
    assert 'status="500"' not in metrics
    assert 'route="/v1/jobs",status="499"' in metrics


def _one_response(sock: socket.socket) -> bytes:
    """One whole response (head and Content-Length body) from a kept-alive connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return received


def _closed_unanswered_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` without sending a byte (asserted)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    answer = _read_all(sock)
    elapsed = time.monotonic() - started
    assert answer == b"", answer[:200]
    assert elapsed < seconds, f"still open after {seconds} s"
    return elapsed


def test_a_connection_that_never_sends_a_request_is_closed(limited_api: LiveApi) -> None:
    # Before the head timeout such a connection was held for ever: 20,000 of them took
    # every file descriptor of the process (a reliability finding).
    with _connect(limited_api) as sock:
        elapsed = _closed_unanswered_within(sock, 10)
    assert elapsed >= HEAD_TIMEOUT - 0.2
    assert httpx.get(f"{limited_api.url}/livez").status_code == 200


def test_a_request_head_trickled_byte_by_byte_is_cut(limited_api: LiveApi) -> None:
    head = b"GET /livez HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 40
    with _connect(limited_api) as sock:
        started = time.monotonic()
        closed = False
        for byte in head:  # one byte every 0.1 s: 4 s for the whole head, never finished
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.1)
        if not closed:
            _closed_unanswered_within(sock, 10)
        assert time.monotonic() - started < HEAD_TIMEOUT + 10


def test_a_late_second_head_on_a_kept_alive_connection_is_cut(limited_api: LiveApi) -> None:
    with _connect(limited_api) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        first = _one_response(sock)
        assert first.startswith(b"HTTP/1.1 200"), first[:200]
        # The keep-alive timer stops at the first byte of the next request; without the
        # head timer nothing would ever close this connection, so any close proves it
        # (the bound only guards against hanging: a busy machine may close it late).
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
        elapsed = _closed_unanswered_within(sock, 10)
    assert elapsed >= HEAD_TIMEOUT - 0.2


def test_a_prompt_client_is_not_affected_by_the_head_timeout(limited_api: LiveApi) -> None:
    with httpx.Client(base_url=limited_api.url) as http:  # one kept-alive connection
        for _ in range(3):
            assert http.get("/livez").status_code == 200
            time.sleep(HEAD_TIMEOUT + 0.3)  # idle between requests: keep-alive rules
        assert http.get("/livez").status_code == 200


def _raw(api: LiveApi, head: bytes) -> tuple[bytes, dict[str, str], bytes]:
    with _connect(api) as sock:
        sock.sendall(head)
        answer = _read_all(sock)
    head_part, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head_part.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status_line.encode(), headers, body


def test_a_request_h11_refuses_is_answered_with_a_problem(limited_api: LiveApi) -> None:
    """A raw NUL in a header or a malformed Content-Length never reaches the app: the
    server answered uvicorn's ``400 text/plain``; now a problem+json like every answer,
    without echoing the offending bytes."""
    for head, detail in (
        (b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Canary: a\x00secret\r\n\r\n", "header"),
        (
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 12abc\r\n\r\n{}",
            "Content-Length",
        ),
        (
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            b"Content-Length: 3\r\n\r\n{}",
            "Content-Length",
        ),
    ):
        status_line, headers, body = _raw(limited_api, head)
        assert status_line.startswith(b"HTTP/1.1 400"), (head, status_line, body)
        assert headers["content-type"] == "application/problem+json"
        assert headers["connection"] == "close"
        problem = json.loads(body)
        assert problem["type"] == "urn:atlas-jobs:problem:malformed-request"
        assert problem["status"] == 400
        assert detail in problem["detail"], problem
        assert b"secret" not in body
    assert httpx.get(f"{limited_api.url}/livez").status_code == 200  # still serving
