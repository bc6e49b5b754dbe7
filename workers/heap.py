"""A worker process's start-up heap, kept out of the garbage collector's full passes.

A worker process allocates a large, permanent heap before its first job: the modules
(SQLAlchemy, pydantic, asyncpg, the handlers), the engines and their caches, the
settings. None of it ever becomes garbage, yet every full (generation 2) collection
walks all of it: a drain of 20,000 no-op jobs ran four to six of them at ~75 ms each,
about a fifth of the process's CPU time. :func:`gc.freeze` moves everything alive at
that moment into the collector's permanent generation, so the full passes only walk
what the jobs allocate.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Freeze the objects alive now, once per process: when something is frozen already
    (a second pool in the same process, as in the tests) the collector is left as it is."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
