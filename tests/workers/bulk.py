"""Jobs written straight into ``jobs`` in bulk, for tests that need a large table fast
(plans, pruning): one ``INSERT ... SELECT`` each, ids from the column default."""

from __future__ import annotations

from sqlalchemy import text

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
