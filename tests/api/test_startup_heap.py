"""The API process freezes its start-up heap once its lifespan has started (atlas_jobs._app.heap).

In a fresh interpreter: nothing is frozen before the lifespan, the start-up objects are
frozen once it has started (before the first request), and a second app in the same
process leaves the collector as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, gc, sys
from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.settings import Settings

async def main() -> None:
    settings = Settings(DATABASE_URL=sys.argv[1], data_dir=sys.argv[2])
    app = create_app(settings)
    before = gc.get_freeze_count()
    async with app.router.lifespan_context(app):
        started = gc.get_freeze_count()
        again = create_app(settings)
        async with again.router.lifespan_context(again):
            second = gc.get_freeze_count()
    print(before, started, second)

asyncio.run(main())
"""


def test_the_lifespan_freezes_the_startup_heap_once(database_url: str, data_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, database_url, str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    before, started, second = (int(n) for n in done.stdout.split())
    assert before == 0
    assert started > 10_000  # the modules, the engine, the app: the whole start-up heap
    # frozen once per process: a second freeze would add the second app's objects (frozen
    # ones can still be freed, so the count may only fall)
    assert second <= started
