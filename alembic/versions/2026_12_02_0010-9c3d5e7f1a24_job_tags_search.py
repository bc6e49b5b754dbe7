"""job tags: a side table the tag search walks in id order

Revision ID: 9c3d5e7f1a24
Revises: 7e2b4c6d8f10
Create Date: 2026-12-02 19:20:00.000000+00:00

A tag search across owners used the partial GIN index ``ix_jobs_tags``, which cannot
return rows in order: every job carrying the tag was read (a bitmap heap scan) and sorted
for one page, so the page's cost grew with the table. ``job_tags`` holds one row per tag
of a tagged job, primary key ``(tag, job_id)``: a search walks it backwards from its
cursor and joins each job by its primary key, reading one page.

The rows are written by the job's creation statement (tags are set once) and deleted by
the pruner's statement, so no transition pays for them; with no query left for it,
``ix_jobs_tags`` is dropped (the drain no longer writes a GIN entry per version of a
tagged job). The upgrade backfills the table from ``jobs.tags``; the downgrade restores
the GIN index and drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9c3d5e7f1a24"
down_revision: str | None = "7e2b4c6d8f10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_tags",
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.PrimaryKeyConstraint("tag", "job_id", name=op.f("pk_job_tags")),
    )
    # First: DROP INDEX locks ``jobs`` (ACCESS EXCLUSIVE, to the end of the migration),
    # so no job is created between the backfill and the commit without its rows.
    op.drop_index(op.f("ix_jobs_tags"), table_name="jobs")
    op.execute(
        "INSERT INTO job_tags (tag, job_id)"
        " SELECT DISTINCT unnest(tags), id FROM jobs WHERE tags <> '{}'::text[]"
    )
    op.execute("ANALYZE job_tags")


def downgrade() -> None:
    op.create_index(
        op.f("ix_jobs_tags"),
        "jobs",
        ["tags"],
        postgresql_using="gin",
        postgresql_where=sa.text("tags <> '{}'::text[]"),
    )
    op.drop_table("job_tags")
