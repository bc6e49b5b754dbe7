"""Jobs in bulk for tests that need a large table fast (plans, pruning, maintenance):
``INSERT ... SELECT`` straight into ``jobs`` (ids from the column default), or one new
job to create many of through the real creation path."""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.transitions import Actor, NewJob

PRODUCER = Actor("client", "acme")
NOOP = NewJob(
    owner="acme",
    kind="atlas.noop",
    kind_version=1,
    input={},
    max_attempts=3,
    max_elapsed_seconds=3600,
)
"""One ``atlas.noop`` job of owner ``acme``, for ``create_many(conn, [NOOP] * n, ...)``."""

BULK_QUEUED = text("""
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT 'bulk', :kind, 1, '{}'::jsonb, 'queued', 'new', 3, 600
  FROM generate_series(1, :n)
""")
"""``:n`` queued jobs of ``:kind``, version 1."""

BULK_FINISHED = text("""
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, finished_at, error, delivery_state)
SELECT 'bulk', 'atlas.noop', 1, '{}'::jsonb, 'failed', 'error', 3, 600,
       now() - make_interval(secs => g), '{"code": "x"}'::jsonb, 'none'
  FROM generate_series(1, :n) AS g
""")
"""``:n`` failed ``atlas.noop`` jobs, finished 1 to ``:n`` seconds ago: prunable."""

BULK_UNRESOLVED = text("""
WITH made AS (
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, attempt, charged_attempts, last_error, tags)
SELECT 'owner-' || (g % 40), :kind, 1, '{}'::jsonb, 'unresolved', 'retries_exhausted', 3,
       600, 3, 3,
       '{"code": "destination_down", "message": "timed out", "retryable": true}'::jsonb,
       ARRAY[CAST(:tag AS text)]
  FROM generate_series(1, :n) AS g
RETURNING id, tags
)
INSERT INTO job_tags (tag, job_id) SELECT unnest(tags), id FROM made
""")
"""``:n`` unresolved jobs of ``:kind`` (version 1) over forty owners, tagged ``:tag``,
their last error ``destination_down``: what a destination's outage leaves behind (with
their ``job_tags`` rows, as a creation writes them)."""
