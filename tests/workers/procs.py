"""Real worker processes for tests: spawn ``python -m atlas_jobs._app.cli worker``, signal, reap.

Every process a test starts is registered with a :class:`Fleet`, whose ``close()``
kills whatever is still alive (SIGCONT first, in case it was stopped), so a failing
test leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness import processes


@dataclass(frozen=True)
class WorkerSettings:
    """The environment knobs the worker tests turn (small leases, fast time)."""

    # Long enough that a live worker starved of CPU (the suite beside other work) keeps
    # its lease; tests about rescue set their own short lease.
    lease_seconds: float = 10.0
    reaper_interval_seconds: float = 0.5
    poll_interval_seconds: float = 0.5
    sweeper_interval_seconds: float = 0.5
    bundle_time_scale: float = 0.02
    shutdown_grace_seconds: float = 5.0
    result_ttl_seconds: float = 3600.0
    scheduler_interval_seconds: float = 0.25
    prefetch: int | None = None  # ATLAS_WORKER_PREFETCH; None: the service's default
    admission_max_active_per_owner: int | None = None  # None: the service's default

    def env(self) -> dict[str, str]:
        prefetch = {} if self.prefetch is None else {"ATLAS_WORKER_PREFETCH": str(self.prefetch)}
        if self.admission_max_active_per_owner is not None:
            cap = str(self.admission_max_active_per_owner)
            prefetch["ATLAS_ADMISSION_MAX_ACTIVE_PER_OWNER"] = cap
        return prefetch | {
            "ATLAS_LEASE_SECONDS": str(self.lease_seconds),
            "ATLAS_REAPER_INTERVAL_SECONDS": str(self.reaper_interval_seconds),
            "ATLAS_POLL_INTERVAL_SECONDS": str(self.poll_interval_seconds),
            "ATLAS_SWEEPER_INTERVAL_SECONDS": str(self.sweeper_interval_seconds),
            "ATLAS_BUNDLE_TIME_SCALE": str(self.bundle_time_scale),
            "ATLAS_SHUTDOWN_GRACE_SECONDS": str(self.shutdown_grace_seconds),
            "ATLAS_RESULT_TTL_SECONDS": str(self.result_ttl_seconds),
            "ATLAS_SCHEDULER_INTERVAL_SECONDS": str(self.scheduler_interval_seconds),
        }


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """``kill -9``: no chance to release anything."""
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the exit code (graceful shutdown)."""
        self.signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Fleet:
    """Worker processes of one test, all sharing one database and one data dir."""

    database_url: str
    data_dir: Path
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    processes: list[WorkerProcess] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = processes.base_env(self.database_url, self.data_dir)
        env.update(self.settings.env())
        env.update(self.extra_env)
        return env

    def start(
        self, name: str, *, concurrency: int = 4, metrics_port: int | None = None
    ) -> WorkerProcess:
        """A worker process; with ``metrics_port``, serving its metrics there."""
        metrics = [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
        log_path = self.data_dir / f"worker-{name}-{len(self.processes)}.log"
        # In the test's own session: a signal reaches the worker process alone.
        process = processes.spawn(
            [*processes.worker_args(name, concurrency=concurrency), *metrics],
            env=self.env(),
            log_path=log_path,
            own_session=False,
        )
        worker = WorkerProcess(name, process, log_path, metrics_port)
        self.processes.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.processes:
            if worker.alive():
                worker.signal(signal.SIGCONT)
                worker.signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        for worker in self.processes:
            worker.process.wait(timeout=max(deadline - time.monotonic(), 0.1))

    def logs(self) -> str:
        return "\n".join(f"--- {w.name} ({w.pid})\n{w.log()[-4000:]}" for w in self.processes)


@contextmanager
def fleet(
    database_url: str, data_dir: Path, settings: WorkerSettings | None = None
) -> Iterator[Fleet]:
    workers = Fleet(database_url, data_dir, settings or WorkerSettings())
    try:
        yield workers
    finally:
        workers.close()
