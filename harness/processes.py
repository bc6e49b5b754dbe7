"""Real Atlas Jobs processes: ``python -m atlas_jobs._app.cli ...`` spawned, awaited, stopped.

One way to start an API or a worker process for every caller (tests, chaos runs): the
repository as working directory, the output (stdout and stderr) in a log file, and on
request a session of its own, so the whole process group can be signalled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
CLI = "atlas_jobs._app.cli"


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def base_env(database_url: str, data_dir: Path) -> dict[str, str]:
    """This environment without its ``ATLAS_*`` variables, pointed at one database and
    one data directory, logging at INFO, unbuffered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATLAS_")}
    env.update(
        {
            "DATABASE_URL": database_url,
            "ATLAS_DATA_DIR": str(data_dir),
            "ATLAS_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def worker_args(name: str, *, concurrency: int, module: str = CLI) -> list[str]:
    """The arguments of a worker process named ``name``."""
    return ["-m", module, "worker", "--concurrency", str(concurrency), "--worker-id", name]


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    append: bool = False,
    own_session: bool = True,
    wrapper: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``python ARGV`` (under ``wrapper``, e.g. ``faketime -f +10s``) from the repository,
    its output into ``log_path`` (appended to with ``append``); with ``own_session`` in
    a session (and process group) of its own."""
    with log_path.open("ab" if append else "wb") as log:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [*wrapper, sys.executable, *argv],
            cwd=REPO,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )


def log_of(log_path: Path) -> str:
    return log_path.read_text(errors="replace") if log_path.exists() else ""


def wait_ready(
    process: subprocess.Popen[bytes],
    ready_url: str,
    log_path: Path,
    *,
    timeout: float = 60,
    name: str = "the process",
) -> None:
    """Until ``ready_url`` answers 200; raises if the process (called ``name`` in the
    error) exits first or the time runs out, with its log."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited early:\n{log_of(log_path)}")
        try:
            if httpx.get(ready_url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} never became ready:\n{log_of(log_path)}")
        time.sleep(0.1)


async def until_ready(
    process: subprocess.Popen[bytes], ready_url: str, log_path: Path, *, seconds: float = 60
) -> None:
    """:func:`wait_ready` without blocking the event loop."""
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=1) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the process exited early:\n{log_of(log_path)[-3000:]}")
            try:
                if (await http.get(ready_url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the process never became ready:\n{log_of(log_path)[-3000:]}")
            await asyncio.sleep(0.1)


def stop_process_group(process: subprocess.Popen[bytes], *, timeout: float = 10) -> None:
    """SIGTERM to the process's group, SIGKILL after ``timeout`` seconds."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def kill_process_group(process: subprocess.Popen[bytes], *, timeout: float = 10) -> None:
    """``kill -9`` of the whole group: no chance to release anything."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=timeout)
