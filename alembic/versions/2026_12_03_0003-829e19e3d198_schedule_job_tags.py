"""a schedule's job keeps its tags: ``schedules.job_tags``

A schedule's ``job`` is a creation body, and a creation body takes ``tags``; the schedule
stored every other field of it but not the tags, so the jobs its ticks created carried
none. ``schedules.job_tags`` keeps them (sorted, as ``jobs.tags`` stores a job's), and
every job a tick creates is created with them. ``'{}'`` for the schedules that exist: the
tags they were sent were never stored. A constant default: adding the column rewrites
nothing.

Revision ID: 829e19e3d198
Revises: 2c8e4a6f0b37
Create Date: 2026-12-03 23:00:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "829e19e3d198"
down_revision: str | None = "2c8e4a6f0b37"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "schedules",
        sa.Column(
            "job_tags",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
    )


def downgrade() -> None:
    op.drop_column("schedules", "job_tags")
