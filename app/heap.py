"""A long-running process's start-up heap, kept out of the garbage collector's full passes.

A service process allocates a large, permanent heap before its first request or job: the
modules (SQLAlchemy, pydantic, asyncpg, FastAPI, the handlers), the engines and their
caches, the settings. None of it ever becomes garbage, yet every full (generation 2)
collection walks all of it, in a worker's drain and in a process creating jobs in bulk
alike (what that cost: docs/performance.md, "Figures behind the code").
:func:`gc.freeze` moves everything alive at that moment into the collector's permanent
generation, so the full passes only walk what the requests and jobs allocate.

Both service processes call it once their start-up is done: the worker pool before its
first claim (:meth:`atlas_jobs._workers.pool.WorkerPool.run`), the API at the end of its lifespan's
start-up (:func:`atlas_jobs._app.api.main.create_app`), before it serves a request. A program using
the Python API (``Transitions``) calls it the same way once it is set up.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Freeze the objects alive now, once per process: when something is frozen already
    (a second pool or app in the same process, as in the tests) the collector is left as
    it is."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
