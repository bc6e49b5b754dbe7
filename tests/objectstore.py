"""A real S3-compatible server for the tests: moto in server mode, one per session,
started as its own process on a free loopback port (stopped at the end)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "atlas-test",
    "AWS_SECRET_ACCESS_KEY": "atlas-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class ObjectServer:
    endpoint: str

    def client(self) -> Any:
        import boto3

        return boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        ).client("s3", endpoint_url=self.endpoint)

    def new_bucket(self) -> str:
        name = f"atlas-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        listed = self.client().list_objects_v2(Bucket=bucket)
        return sorted(item["Key"] for item in listed.get("Contents", []))

    def env(self, bucket: str) -> dict[str, str]:
        """What a process needs to use this server as its result store."""
        return {
            **CREDENTIALS,
            "ATLAS_RESULT_STORE": "s3",
            "ATLAS_S3_BUCKET": bucket,
            "ATLAS_S3_ENDPOINT_URL": self.endpoint,
        }


@contextmanager
def moto_server(log_path: Path) -> Iterator[ObjectServer]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"moto exited early:\n{log_path.read_text()}")
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto never answered:\n{log_path.read_text()}") from None
                time.sleep(0.1)
        yield ObjectServer(endpoint)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
