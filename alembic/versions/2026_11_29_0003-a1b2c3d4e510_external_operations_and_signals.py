"""external operations and signals

Revision ID: a1b2c3d4e510
Revises: f9a0b1c2d014
Create Date: 2026-11-29 16:10:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a1b2c3d4e510"
down_revision: str | None = "f9a0b1c2d014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "external_operations",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("step", sa.Text(), nullable=False),
        sa.Column("destination", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("sends", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("checks", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_http_status", sa.Integer(), nullable=True),
        sa.Column("last_error_class", sa.Text(), nullable=True),
        sa.Column("receipt", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
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
            "state IN ('awaiting_confirmation', 'confirmed', 'intended', 'refused', 'uncertain')",
            name=op.f("ck_external_operations_state_known"),
        ),
        sa.CheckConstraint(
            "sends >= 0 AND checks >= 0", name=op.f("ck_external_operations_counters_nonnegative")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_external_operations_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_external_operations")),
        sa.UniqueConstraint("job_id", "step", name=op.f("uq_external_operations_job_id_step")),
    )
    op.create_table(
        "job_signals",
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("data", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("outcome", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_signals_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "event_id", name=op.f("pk_job_signals")),
    )


def downgrade() -> None:
    op.drop_table("job_signals")
    op.drop_table("external_operations")
