"""Optional OpenTelemetry tracing (``ATLAS_OTEL_ENABLED=1``, the ``otel`` extra): a real
API process and a real worker process export OTLP/HTTP to a collector played by this
test. A job created with a W3C ``traceparent`` header is traced end to end: the API's
request span continues the caller's trace, the creation's history records the trace
context, and the worker's attempt span carries the same trace id, parented to the
request's span -- with SQL spans beneath both and no payload in any attribute.

Off by default, nothing of the SDK is imported (a normal install has no extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.support import make_keys
from tests.support import REPO, atlas_process, free_port
from tests.workers.dbwait import bundle_input

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CANARY = "confidential-canary-tag"


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


class Collector:
    """An OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf) keeping every span."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                collector.receive(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Span(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={
                                a.key: getattr(a.value, a.value.WhichOneof("value") or "")
                                for a in span.attributes
                                if a.value.WhichOneof("value")
                            },
                        )
                    )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    found.close()


@pytest.fixture
def traced(database_url: str, collector: Collector, tmp_path: Path) -> Iterator[str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(tmp_path / "data"),
        "ATLAS_SIGNING_SECRET": "tracing-secret",
        "ATLAS_POLL_INTERVAL_SECONDS": "0.5",
        "ATLAS_BUNDLE_TIME_SCALE": "0.01",
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "2",
        "ATLAS_OTEL_ENABLED": "1",
        "ATLAS_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with ExitStack() as stack:
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        stack.enter_context(
            atlas_process(
                ["api", "--port", str(port)],
                env=env,
                log_path=tmp_path / "api.log",
                ready_url=f"{api}/readyz",
            )
        )
        metrics = free_port()
        stack.enter_context(
            atlas_process(
                ["worker", "--concurrency", "1", "--metrics-port", str(metrics)],
                env=env,
                log_path=tmp_path / "worker.log",
                ready_url=f"http://127.0.0.1:{metrics}/metrics",
            )
        )
        yield api


async def test_a_jobs_attempt_continues_the_trace_of_the_request_that_created_it(
    traced: str, collector: Collector, engine: AsyncEngine, tmp_path: Path
) -> None:
    keys = await make_keys(engine)
    async with httpx.AsyncClient(base_url=traced, headers=keys.a, timeout=30) as http:
        # One request, one trace, two jobs: a bundle (its attempt writes progress) and a
        # noop whose input carries a canary no span may repeat.
        created = await http.post(
            "/v1/jobs:batch",
            json={
                "jobs": [
                    {"kind": "atlas.bundle", "input": bundle_input("coast")},
                    {"kind": "atlas.noop", "input": {"tag": CANARY}},
                ]
            },
            headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
        )
        assert created.status_code == 202, created.text
        job_ids = [item["id"] for item in created.json()["items"]]
        histories = {}
        for job_id in job_ids:
            for _ in range(60):
                answer = await http.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=5"})
                if answer.json()["state"] == "succeeded":
                    break
            assert answer.json()["state"] == "succeeded", answer.text
            answer = await http.get(f"/v1/jobs/{job_id}/history?limit=100&x={CANARY}")
            histories[job_id] = answer.json()["items"]

    def attempt_spans() -> list[Span]:
        return [s for s in collector.spans if s.name.startswith("attempt ")]

    def history_reads() -> list[Span]:
        return [
            s for s in collector.spans if s.attributes.get("http.route", "").endswith("history")
        ]

    deadline = time.monotonic() + 30
    while len(attempt_spans()) < 2 or len(history_reads()) < 2:
        assert time.monotonic() < deadline, [(s.service, s.name) for s in collector.spans]
        time.sleep(0.1)
    attempts = {s.attributes["atlas.job_id"]: s for s in attempt_spans()}
    assert set(attempts) == set(job_ids)
    traceparents = set()
    for job_id, history in histories.items():
        # The creation recorded the request's trace context (ids only) ...
        creation = history[0]
        assert creation["transition"] == "create"
        traceparent = creation["data"]["traceparent"]
        assert traceparent.startswith(f"00-{TRACE_ID}-")
        traceparents.add(traceparent)
        # ... and the attempt's span continues it: same trace, the request's span as parent.
        [claim] = [item for item in history if item["transition"] == "claim"]
        attempt = attempts[job_id]
        assert attempt.service == "atlas-jobs-worker"
        assert attempt.trace_id == TRACE_ID
        assert attempt.parent_span_id == traceparent.split("-")[2]
        assert attempt.attributes["atlas.attempt_id"] == claim["attempt_id"]
        assert attempt.attributes["atlas.attempt"] == 1
    [traceparent] = traceparents  # one request: one span both jobs continue
    bundle = attempts[job_ids[0]]
    assert bundle.name == "attempt atlas.bundle"
    # The attempt's log lines carry the trace id too.
    lines = [json.loads(line) for line in (tmp_path / "worker.log").read_text().splitlines()]
    done = [line for line in lines if line.get("event") == "job.succeeded"]
    assert (job_ids[0], TRACE_ID) in {(line["job_id"], line.get("trace_id")) for line in done}

    ours = [s for s in collector.spans if s.trace_id == TRACE_ID]
    request = [s for s in ours if s.service == "atlas-jobs-api" and s.parent_span_id == CALLER_SPAN]
    assert request, [(s.service, s.name) for s in ours]  # the server span continues ours
    assert any(s.span_id == traceparent.split("-")[2] for s in ours)  # what the job kept
    statements = [s for s in collector.spans if "db.system" in s.attributes]
    # The request's SQL is in its trace; the attempt's SQL is beneath the attempt's span.
    assert [s for s in statements if s.service == "atlas-jobs-api" and s.trace_id == TRACE_ID]
    assert [s for s in statements if s.parent_span_id == bundle.span_id]
    # A statement outside any request or attempt (the claim loop polling) is not traced.
    assert all(s.parent_span_id for s in statements), [s.name for s in statements]
    # No payload in any attribute of any span (the input's tag is a canary), and no
    # query string (where a download URL carries its signature).
    assert not [s for s in collector.spans if CANARY in repr(s.attributes)]


def test_tracing_is_off_by_default_and_imports_nothing_of_the_sdk() -> None:
    probe = (
        "import sys, atlas_jobs._app.api.main, atlas_jobs._workers.pool, atlas_jobs._app.tracing as t; "
        "from atlas_jobs._app.settings import Settings; "
        "assert not t.configure(Settings(), 'probe'); "
        "assert t.current_traceparent() is None; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
