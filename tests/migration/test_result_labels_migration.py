"""Revision 8f3a2b1c4d5e (what the status says of a published result) on a database
with published results: the upgrade fills ``result_files`` and ``result_destination``
from each job's ``result_ref``, leaves jobs without a result empty, and the downgrade
drops both columns."""

from __future__ import annotations

import json

from sqlalchemy import text

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "8f3a2b1c4d5e"
PARENT = "5d1a9c3e7b20"
JOB = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, result_ref)
VALUES ('alice', 'atlas.noop', 1, '{}', 'queued', 'new', 3, 600, CAST(:ref AS jsonb))
RETURNING id
"""
REFERENCES = {
    "files": {"files": [{"name": "a.pdf"}, {"name": "b.pdf"}]},
    "pressed": {"files": [], "publication": {"destination": "press", "receipt": {"id": "R"}}},
    "none": None,
}
LABELS = "SELECT id, result_files, result_destination FROM jobs"
COLUMNS = """
SELECT column_name FROM information_schema.columns
 WHERE table_name = 'jobs' AND column_name LIKE 'result\\_%'
"""


async def test_upgrade_fills_the_labels_of_published_results_and_downgrades(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=1)
        try:
            ids = {}
            async with engine.begin() as conn:
                for name, ref in REFERENCES.items():
                    found = await conn.execute(
                        text(JOB), {"ref": None if ref is None else json.dumps(ref)}
                    )
                    ids[found.scalar_one()] = name
            await alembic(url, "upgrade", REVISION)
            async with engine.connect() as conn:
                labels = {
                    ids[r.id]: (r.result_files, r.result_destination)
                    for r in await conn.execute(text(LABELS))
                }
            assert labels == {"files": (2, None), "pressed": (0, "press"), "none": (None, None)}
            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                left = {r.column_name for r in await conn.execute(text(COLUMNS))}
            assert left == {"result_ref"}
        finally:
            await engine.dispose()
