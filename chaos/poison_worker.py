"""A worker process with two poison handlers, for the chaos suite only.

``python -m chaos.poison_worker worker --concurrency N --worker-id NAME`` runs the real
worker pool (:class:`atlas_jobs._workers.pool.WorkerPool`) with the production handlers, except that
an ``atlas.noop`` job tagged

* ``chaos-poison-raise`` always raises a recoverable (unexpected) error, and
* ``chaos-poison-kill`` always ``kill -9``'s its own worker process.

Production handlers and the ``atlas-jobs`` command are unchanged: this module lives
outside ``app/`` and ``workers/`` and is started only by :mod:`chaos.scenarios`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal

from atlas_jobs._app.db.engine import resolve_database_url
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.logs import configure_logging
from atlas_jobs._app.settings import get_settings
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers import HANDLERS, Handler, PublishPlan, registry
from atlas_jobs._workers.pool import WorkerPool

RAISE_TAG = "chaos-poison-raise"
KILL_TAG = "chaos-poison-kill"


class PoisonError(RuntimeError):
    """Always raised by a ``chaos-poison-raise`` job: recoverable, never succeeds."""


def poisoned(real: Handler) -> Handler:
    async def run(ctx: JobContext) -> PublishPlan:
        tag = ctx.input.get("tag")
        if tag == RAISE_TAG:
            raise PoisonError("this job always fails")
        if tag == KILL_TAG:
            os.kill(os.getpid(), signal.SIGKILL)
        return await real(ctx)

    return run


async def serve(concurrency: int, worker_id: str) -> None:
    settings = get_settings()
    configure_logging(settings)
    handlers = dict(HANDLERS)
    key = handler_key("atlas.noop", 1)
    handlers[key] = poisoned(handlers[key])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pool = WorkerPool(
        settings,
        database_url=resolve_database_url(settings),
        concurrency=concurrency,
        worker_id=worker_id,
        handlers=registry(handlers),
    )
    try:
        await pool.run(stop)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--worker-id", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.concurrency, args.worker_id))


if __name__ == "__main__":
    main()
