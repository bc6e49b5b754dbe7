"""Following one job as a person watches it: what the client knows, and how fresh.

:class:`Observer` is the client-side observation of docs/protocol.md §1 (``unknown`` before
the first successful read, ``fresh``, ``stale``, ``stopped``), driven by its own clock:
*stale* comes from the time since the last successful read, measured by a timer, not
from a read timing out. A failed read keeps the last known status -- it is an
observation problem, never a job failure.

:func:`follow` is the read loop of ``atlas-jobs watch`` and of tests: a first read
without ``Prefer`` (answered at once), then conditional held reads (``If-None-Match`` +
``Prefer: wait``), ``Retry-After`` honoured, and a render call at every change and at
every tick while a read is outstanding -- so the view turns stale on time even while a
read hangs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from atlas_jobs._app.client.errors import ApiUnreachableError, ClientError, RefusedError
from atlas_jobs._app.client.http import TERMINAL_STATES, JobsClient, StatusRead
from atlas_jobs._app.presentation import STALE_AFTER_SECONDS, Observation, Presentation, present

Clock = Callable[[], float]
MAX_PAUSE_SECONDS: Final = 5.0
UNSETTLED_DELIVERY: Final = frozenset({"partial_private", "staged_private"})
TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
"""Answers that say "not now" about the read itself: the job is not concerned."""


class Observer:
    """The last known status and the age of the last successful read."""

    def __init__(self, clock: Clock = time.monotonic, stale_after: float = STALE_AFTER_SECONDS):
        self._clock = clock
        self.stale_after = stale_after
        self.status: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.last_read_at: float | None = None
        self.last_failure: str | None = None
        self.failures = 0
        self.stopped = False

    def read_succeeded(self, status: dict[str, Any] | None) -> None:
        """A read answered (``None``: 304, the known status still holds)."""
        if status is not None:
            self.status = status
        self.last_read_at = self._clock()
        self.last_failure = None
        self.failures = 0

    def read_failed(self, cause: str) -> None:
        """A read got no usable answer; the last known status is kept as it was."""
        self.last_failure = cause
        self.failures += 1

    def stop(self) -> None:
        self.stopped = True

    def seconds_since_read(self) -> float | None:
        if self.last_read_at is None:
            return None
        return max(0.0, self._clock() - self.last_read_at)

    def observation(self) -> Observation:
        if self.stopped:
            return Observation.STOPPED
        age = self.seconds_since_read()
        if age is None or self.status is None:
            return Observation.UNKNOWN
        return Observation.STALE if age >= self.stale_after else Observation.FRESH

    def view(self, now: datetime | None = None) -> Presentation:
        """The label and link as a person should see them right now."""
        return present(
            self.status,
            self.observation(),
            seconds_since_read=self.seconds_since_read(),
            now=now,
            result=self.result,
        )

    @property
    def finished(self) -> bool:
        """Terminal, with the delivery settled (nothing more will change but expiry)."""
        status = self.status or {}
        delivery = (status.get("delivery") or {}).get("state")
        return status.get("state") in TERMINAL_STATES and delivery not in UNSETTLED_DELIVERY


def _result_reference(
    client: JobsClient, job_id: str, status: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The result reference of a finished job whose delivery is ``available`` (so its
    label can say whether there is anything to download), else ``None``; a failed read
    of it leaves the label as the status alone makes it."""
    if ((status or {}).get("delivery") or {}).get("state") != "available":
        return None
    try:
        return client.result(job_id)
    except ClientError:
        return None


def _pause_after_failure(failures: int) -> float:
    return float(min(MAX_PAUSE_SECONDS, 0.5 * 2 ** max(0, failures - 1)))


def follow(
    client: JobsClient,
    job_id: str,
    observer: Observer,
    render: Callable[[Observer], None],
    *,
    wait: int = 8,
    tick: float = 0.5,
    clock: Clock = time.monotonic,
    keep_going: Callable[[], bool] = lambda: True,
) -> dict[str, Any] | None:
    """Read the job until it is finished (returns its last status) or ``keep_going()``
    turns false (returns None). When the very first read finds no API at all it raises
    :class:`ApiUnreachableError` (there is nothing to show); after that, failures only age
    the observation. Each read runs on a daemon thread so that a hung
    connection never blocks the timer; ``JobNotFoundError``/``KeyRejectedError`` are answers, not
    outages, and are raised."""
    answers: queue.Queue[StatusRead | BaseException] = queue.Queue()
    etag: str | None = None
    first = True
    outstanding = False
    not_before = 0.0

    def read(tag: str | None, held: int | None) -> None:
        try:
            answers.put(client.read_status(job_id, etag=tag, wait=held))
        except BaseException as exc:  # handed to the loop, which decides
            answers.put(exc)

    render(observer)
    while keep_going():
        if not outstanding and clock() >= not_before:
            thread = threading.Thread(
                target=read, args=(etag, None if first else wait), daemon=True
            )
            thread.start()
            outstanding = True
        try:
            answer = answers.get(
                timeout=tick if outstanding else min(tick, max(0.0, not_before - clock()))
            )
        except queue.Empty:
            render(observer)
            continue
        outstanding = False
        if isinstance(answer, StatusRead):
            observer.read_succeeded(answer.status)
            etag = answer.etag or etag
            first = False
            if observer.finished:
                observer.result = _result_reference(client, job_id, observer.status)
                render(observer)
                return observer.status
            if not answer.held and answer.retry_after:
                not_before = clock() + min(answer.retry_after, MAX_PAUSE_SECONDS)
        elif isinstance(answer, ApiUnreachableError) and observer.status is None:
            raise answer  # nothing known yet to keep showing: say the API is unreachable
        elif isinstance(answer, ApiUnreachableError):
            observer.read_failed(answer.cause_name)
            not_before = clock() + _pause_after_failure(observer.failures)
        elif isinstance(answer, RefusedError) and answer.status_code in TRANSIENT_STATUSES:
            observer.read_failed(f"HTTP {answer.status_code}")
            pause = answer.retry_after
            if pause is None:
                pause = _pause_after_failure(observer.failures)
            not_before = clock() + min(pause, MAX_PAUSE_SECONDS)
        else:
            raise answer
        render(observer)
    return None


__all__ = ["Observer", "follow"]
