"""schedules: cron triggers (``schedules``) and one row per fired tick (``schedule_fires``)

Revision ID: b3c4d5e6f718
Revises: a1b2c3d4e510
Create Date: 2026-11-29 16:00:13.019453+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b3c4d5e6f718"
down_revision: str | None = "a1b2c3d4e510"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("kind_version", sa.Integer(), nullable=False),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("misfire_policy", sa.Text(), nullable=False),
        sa.Column("misfire_grace_seconds", sa.Integer(), nullable=False),
        sa.Column("catch_up_limit", sa.Integer(), nullable=False),
        sa.Column("overlap", sa.Text(), server_default=sa.text("'allow'"), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_job_id", sa.UUID(), nullable=True),
        sa.Column("fired_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "misfire_policy IN ('catch_up', 'skip')", name=op.f("ck_schedules_policy_known")
        ),
        sa.CheckConstraint(
            "catch_up_limit BETWEEN 1 AND 1000", name=op.f("ck_schedules_catch_up_limit_bounded")
        ),
        sa.CheckConstraint("misfire_grace_seconds >= 1", name=op.f("ck_schedules_grace_positive")),
        sa.CheckConstraint("overlap IN ('allow', 'skip')", name=op.f("ck_schedules_overlap_known")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
        sa.UniqueConstraint("seq", name=op.f("uq_schedules_seq")),
    )
    op.create_index(
        "ix_schedules_next_fire_at",
        "schedules",
        ["next_fire_at"],
        unique=False,
        postgresql_where="enabled",
    )
    op.create_index(
        "ix_schedules_owner_seq",
        "schedules",
        ["owner", sa.literal_column("seq DESC")],
        unique=False,
    )
    op.create_table(
        "schedule_fires",
        sa.Column("schedule_id", sa.UUID(), nullable=False),
        sa.Column("fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_schedule_fires_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_fires_schedule_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("schedule_id", "fire_at", name=op.f("pk_schedule_fires")),
    )
    op.create_index("ix_schedule_fires_fire_at", "schedule_fires", ["fire_at"], unique=False)
    op.create_index("ix_schedule_fires_job_id", "schedule_fires", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_schedule_fires_job_id", table_name="schedule_fires")
    op.drop_index("ix_schedule_fires_fire_at", table_name="schedule_fires")
    op.drop_table("schedule_fires")
    op.drop_index("ix_schedules_owner_seq", table_name="schedules")
    op.drop_index("ix_schedules_next_fire_at", table_name="schedules", postgresql_where="enabled")
    op.drop_table("schedules")
