"""The one LISTEN helper (``atlas_jobs._app.db.listen``) against a real PostgreSQL: it delivers
payloads, survives its backend being killed, keeps retrying a target that does not
answer yet, and both of its users (the API notifier, the worker listener) re-read after
a reconnect.

Nothing here asserts timings: every wait is on an event or a counter, with a generous
deadline that only a broken listener reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.db.listen import Backoff, Listener
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.services.notifier import APPLICATION_NAME as API_LISTENER
from atlas_jobs._app.services.notifier import JobChangeNotifier
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.listener import APPLICATION_NAME as WORKER_LISTENER
from atlas_jobs._workers.listener import WorkListener
from tests.factory import CLIENT, JobFactory
from tests.support import Server, free_port, with_database

CHANNEL = "atlas_test_listen"
APP = "atlas-test-listen"
FAST = Backoff(initial_seconds=0.05, max_seconds=0.2)  # quick tests; same policy code
DEADLINE = 20.0  # only a broken listener gets near it


class Recorder:
    """What a listener reported, and a way to wait until a condition over it holds."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.connects = 0
        self._changed = asyncio.Event()

    def on_payload(self, payload: str) -> None:
        self.payloads.append(payload)
        self._changed.set()

    def on_connected(self) -> None:
        self.connects += 1
        self._changed.set()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(DEADLINE):
                while not condition():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"never {what}: connects={self.connects} payloads={self.payloads}"
            ) from None


async def until_true(probe: Callable[[], bool], what: str) -> None:
    """For counters without an event of their own (failed attempts)."""
    try:
        async with asyncio.timeout(DEADLINE):
            while not probe():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"never {what}") from None


@contextlib.asynccontextmanager
async def running(listener: Listener) -> AsyncIterator[asyncio.Task[None]]:
    task = listener.start()
    try:
        yield task
    finally:
        await listener.stop()


def make_listener(dsn: str, recorder: Recorder, channel: str = CHANNEL) -> Listener:
    return Listener(
        dsn,
        channel,
        on_payload=recorder.on_payload,
        on_connected=recorder.on_connected,
        application_name=APP,
        backoff=FAST,
    )


async def notify(dsn: str, channel: str, payload: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
    finally:
        await conn.close()


async def terminate(dsn: str, application_name: str) -> int:
    """Kill this database's backends with that application name, as an admin would."""
    conn = await asyncpg.connect(dsn)
    try:
        killed: int = await conn.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = current_database() "
            "AND pid <> pg_backend_pid()",
            application_name,
        )
        return killed
    finally:
        await conn.close()


def reconnect_warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == "listen.reconnecting"]


@pytest.fixture
def dsn(database_url: str) -> str:
    return libpq_url(database_url)


async def test_a_notification_reaches_on_payload(dsn: str) -> None:
    recorder = Recorder()
    listener = make_listener(dsn, recorder)
    async with running(listener):
        await recorder.until(lambda: recorder.connects == 1, "connected")
        assert listener.connected
        await notify(dsn, CHANNEL, "first")
        await notify(dsn, "some_other_channel", "not for us")
        await notify(dsn, CHANNEL, "second")
        await recorder.until(lambda: len(recorder.payloads) == 2, "heard both payloads")
    assert recorder.payloads == ["first", "second"]
    assert not listener.connected
    assert listener.failures == 0


async def test_a_killed_backend_is_replaced_and_on_connected_runs_again(dsn: str) -> None:
    recorder = Recorder()
    listener = make_listener(dsn, recorder)
    with capture_logs() as logs:
        async with running(listener) as task:
            await recorder.until(lambda: recorder.connects == 1, "connected")
            await notify(dsn, CHANNEL, "canary-before")
            await recorder.until(lambda: recorder.payloads == ["canary-before"], "heard it")

            assert await terminate(dsn, APP) == 1

            await recorder.until(lambda: recorder.connects == 2, "reconnected by itself")
            await notify(dsn, CHANNEL, "after")
            await recorder.until(lambda: "after" in recorder.payloads, "heard after reconnect")
            assert not task.done()
    assert listener.failures == 1
    assert listener.connections == 2
    (warning,) = reconnect_warnings(logs)
    assert warning["log_level"] == "warning"
    assert warning["channel"] == CHANNEL
    assert warning["was_listening"] is True
    assert warning["error_class"]  # ConnectionLostError, or asyncpg's own on a race
    assert not any("canary" in repr(entry) for entry in logs), "a payload was logged"


async def test_a_refused_connection_keeps_retrying(dsn: str) -> None:
    """Nothing listens on the port: every attempt fails, the task logs and tries again."""
    nowhere = f"postgresql://atlas@127.0.0.1:{free_port()}/atlas"
    recorder = Recorder()
    listener = make_listener(nowhere, recorder)
    with capture_logs() as logs:
        async with running(listener) as task:
            await until_true(lambda: listener.failures >= 3, "failed three times")
            assert not task.done(), "the listener gave up"
    assert recorder.connects == 0
    warnings = reconnect_warnings(logs)
    assert len(warnings) >= 3
    assert all(not w["was_listening"] and w["error_class"] for w in warnings)
    attempts = [w["consecutive_failures"] for w in warnings]
    assert attempts == list(range(1, len(attempts) + 1)), "backoff counts every failure"


async def test_a_missing_database_is_retried_until_it_exists(
    database_url: str, pg_server: Server
) -> None:
    name = f"t_late_{uuid.uuid4().hex[:10]}"
    late = libpq_url(with_database(database_url, name))
    recorder = Recorder()
    listener = make_listener(late, recorder)
    try:
        with capture_logs() as logs:
            async with running(listener) as task:
                await until_true(lambda: listener.failures >= 2, "failed twice")
                assert recorder.connects == 0
                await pg_server.create_database(name)

                await recorder.until(lambda: recorder.connects == 1, "connected once it existed")
                await notify(late, CHANNEL, "hello")
                await recorder.until(lambda: recorder.payloads == ["hello"], "heard it")
                assert not task.done()
        assert {w["error_class"] for w in reconnect_warnings(logs)} == {"InvalidCatalogNameError"}
    finally:
        await pg_server.drop_database(name)


async def test_a_failing_on_connected_is_one_more_failure_then_a_reconnect(dsn: str) -> None:
    """Any exception after the connection is up (here the owner's hook) ends that
    connection with a warning and a new one -- never a silently ended task."""
    recorder = Recorder()

    def fails_once() -> None:
        recorder.on_connected()
        if recorder.connects == 1:
            raise RuntimeError("owner bug")

    listener = Listener(
        dsn,
        CHANNEL,
        on_payload=recorder.on_payload,
        on_connected=fails_once,
        application_name=APP,
        backoff=FAST,
    )
    with capture_logs() as logs:
        async with running(listener):
            await recorder.until(lambda: recorder.connects == 2, "reconnected")
            await notify(dsn, CHANNEL, "still here")
            await recorder.until(lambda: recorder.payloads == ["still here"], "heard it")
    assert [w["error_class"] for w in reconnect_warnings(logs)] == ["RuntimeError"]


async def test_an_exception_from_a_handler_keeps_the_connection(dsn: str) -> None:
    recorder = Recorder()

    def fragile(payload: str) -> None:
        if payload == "boom":
            raise ValueError("handler bug")
        recorder.on_payload(payload)

    listener = Listener(
        dsn,
        CHANNEL,
        on_payload=fragile,
        on_connected=recorder.on_connected,
        application_name=APP,
        backoff=FAST,
    )
    with capture_logs() as logs:
        async with running(listener):
            await recorder.until(lambda: recorder.connects == 1, "connected")
            await notify(dsn, CHANNEL, "boom")
            await notify(dsn, CHANNEL, "fine")
            await recorder.until(lambda: recorder.payloads == ["fine"], "heard the next one")
    assert recorder.connects == 1, "a handler error must not cost a reconnect"
    assert [e["error_class"] for e in logs if e["event"] == "listen.handler_failed"] == [
        "ValueError"
    ]


async def test_the_api_notifier_wakes_subscribers_after_its_connection_is_killed(
    dsn: str, engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.QUEUED)
    notifier = JobChangeNotifier(dsn)
    await notifier.start(wait_seconds=DEADLINE)
    try:
        assert notifier.connected
        async with notifier.subscribe(made.id) as changes:
            assert await terminate(dsn, API_LISTENER) == 1
            # No change was made: only the reconnect can wake this reader.
            assert await changes.wait(DEADLINE), "the reconnect did not wake the subscriber"
            assert notifier.listener.connections == 2
            assert notifier.connected

            async with engine.begin() as conn:  # a real change, through the trigger
                await transitions.request_cancel(conn, made.id, actor=CLIENT)
            assert await changes.wait(DEADLINE), "a change after the reconnect was not heard"
    finally:
        await notifier.stop()
    assert not notifier.connected


async def test_the_worker_listener_wakes_its_claimer_after_reconnecting(dsn: str) -> None:
    wakes = Recorder()
    listener = WorkListener(dsn, kinds={"atlas.noop"}, wake=wakes.on_connected)
    task = asyncio.create_task(listener.run())
    try:
        await wakes.until(lambda: wakes.connects == 1, "woken on the first connect")
        assert await terminate(dsn, WORKER_LISTENER) == 1
        # Nothing was queued: only the reconnect can wake the claimer.
        await wakes.until(lambda: wakes.connects == 2, "woken after the reconnect")
        assert listener.listener.connections == 2

        await notify(dsn, "atlas_work", "some.other.kind")  # not ours: no wake
        await notify(dsn, "atlas_work", "atlas.noop")  # ours, and a sentinel
        await wakes.until(lambda: wakes.connects >= 3, "woken by new work")
        assert wakes.connects == 3, "a kind without a handler woke the claimer"
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
