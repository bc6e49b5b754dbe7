"""pruning of finished jobs; storage parameters of the churning tables

Revision ID: f9a0b1c2d014
Revises: f6248ed09853
Create Date: 2026-11-29 16:20:00+00:00

* ``ix_jobs_prunable``: the pruner's walk over finished jobs whose result is not
  downloadable, oldest first (partial: live work and published results are not in it,
  so claiming and publishing do not write to it).
* Storage parameters (kept in step with ``app.db.schema``'s ``JOBS_STORAGE`` and
  ``APPENDED_STORAGE``; the migration test compares ``pg_class.reloptions``): room per
  page and prompt, unthrottled autovacuum for ``jobs``; prompt autovacuum for
  ``job_history`` and ``attempts``, and room per page for the HOT updates that end an
  attempt. ``fillfactor`` applies to pages written from now on.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f9a0b1c2d014"
down_revision: str | None = "f6248ed09853"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STORAGE = {
    "jobs": {
        "fillfactor": "80",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_cost_delay": "0",
    },
    "job_history": {
        "autovacuum_vacuum_scale_factor": "0.05",
        "autovacuum_vacuum_cost_delay": "0",
    },
    "attempts": {
        "fillfactor": "70",
        "autovacuum_vacuum_scale_factor": "0.05",
        "autovacuum_vacuum_cost_delay": "0",
    },
}


def upgrade() -> None:
    op.create_index(
        "ix_jobs_prunable",
        "jobs",
        ["finished_at"],
        unique=False,
        postgresql_where=sa.text("finished_at IS NOT NULL AND delivery_state <> 'available'"),
    )
    for table, options in STORAGE.items():
        settings = ", ".join(f"{name} = {value}" for name, value in options.items())
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    for table, options in STORAGE.items():
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(options)})")
    op.drop_index("ix_jobs_prunable", table_name="jobs")
