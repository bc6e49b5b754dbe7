"""schedule fire refusals: a tick the owner's admission cap refused is recorded, not lost

``schedule_fires.refusal`` names why a tick created no job (``owner_at_capacity``: the
owner already had its cap of unfinished jobs); ``schedules`` counts its refused ticks
and keeps the last one (``refused_count``, ``last_refused_at``, ``last_refusal``), so
the schedule's own status shows what its fire history holds.

Revision ID: fb1ecd289857
Revises: 33017a7e68cb
Create Date: 2026-12-01 22:40:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "fb1ecd289857"
down_revision: str | None = "33017a7e68cb"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REFUSALS = "('owner_at_capacity')"


def upgrade() -> None:
    op.add_column("schedule_fires", sa.Column("refusal", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_schedule_fires_refusal_known"),
        "schedule_fires",
        f"refusal IS NULL OR refusal IN {REFUSALS}",
    )
    op.create_check_constraint(
        op.f("ck_schedule_fires_refused_has_no_job"),
        "schedule_fires",
        "refusal IS NULL OR job_id IS NULL",
    )
    op.add_column(
        "schedules",
        sa.Column("refused_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "schedules", sa.Column("last_refused_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("schedules", sa.Column("last_refusal", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_schedules_last_refusal_known"),
        "schedules",
        f"last_refusal IS NULL OR last_refusal IN {REFUSALS}",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_schedules_last_refusal_known"), "schedules", type_="check")
    op.drop_column("schedules", "last_refusal")
    op.drop_column("schedules", "last_refused_at")
    op.drop_column("schedules", "refused_count")
    op.drop_constraint(
        op.f("ck_schedule_fires_refused_has_no_job"), "schedule_fires", type_="check"
    )
    op.drop_constraint(op.f("ck_schedule_fires_refusal_known"), "schedule_fires", type_="check")
    op.drop_column("schedule_fires", "refusal")
