"""webhooks: endpoints, the jobs that notify them, and the delivery outbox (with its trigger)

Revision ID: c5d6e7f8a920
Revises: b3c4d5e6f718
Create Date: 2026-11-29 16:21:14.811802+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c5d6e7f8a920"
down_revision: str | None = "b3c4d5e6f718"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The outbox: a delivery row for every endpoint of a job, written by the statement that
# moves the job -- in its transaction, whatever code path made the move. Events: the job
# reached a terminal state or `unresolved` (app.webhooks.WEBHOOK_EVENTS), or its result
# expired. Statement-level, like the NOTIFY triggers: one call per statement, and the
# join with job_webhooks finds nothing for jobs that notify no one.
ENQUEUE_DELIVERIES = """
CREATE FUNCTION atlas_enqueue_webhook_deliveries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (job_id, webhook_id, event)
    SELECT e.id, jw.webhook_id, e.event
      FROM (SELECT n.id,
                   CASE WHEN n.state <> o.state THEN 'job.' || n.state
                        ELSE 'job.result_expired' END AS event
              FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
             WHERE (n.state <> o.state
                    AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
      JOIN job_webhooks AS jw ON jw.job_id = e.id;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("seq", name=op.f("uq_webhooks_seq")),
    )
    op.create_index(
        "ix_webhooks_owner_seq", "webhooks", ["owner", sa.literal_column("seq DESC")], unique=False
    )
    op.create_table(
        "job_webhooks",
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("webhook_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_webhooks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_job_webhooks_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "webhook_id", name=op.f("pk_job_webhooks")),
    )
    op.create_index("ix_job_webhooks_webhook_id", "job_webhooks", ["webhook_id"], unique=False)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("webhook_id", sa.UUID(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
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
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "event IN ('job.canceled', 'job.failed', 'job.result_expired', 'job.succeeded', 'job.unresolved')",
            name=op.f("ck_webhook_deliveries_event_known"),
        ),
        sa.CheckConstraint(
            "state IN ('delivered', 'failed', 'pending', 'sending')",
            name=op.f("ck_webhook_deliveries_state_known"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_webhook_deliveries_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_deliveries_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("seq", name=op.f("uq_webhook_deliveries_seq")),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('pending', 'sending')"),
    )
    op.create_index(
        "ix_webhook_deliveries_job_id", "webhook_deliveries", ["job_id", "seq"], unique=False
    )
    op.create_index(
        "ix_webhook_deliveries_webhook_id", "webhook_deliveries", ["webhook_id"], unique=False
    )
    op.add_column("schedules", sa.Column("notify_webhook_id", sa.UUID(), nullable=True))
    op.create_foreign_key(
        op.f("fk_schedules_notify_webhook_id_webhooks"),
        "schedules",
        "webhooks",
        ["notify_webhook_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_index(
        "ix_schedules_notify_webhook_id", "schedules", ["notify_webhook_id"], unique=False
    )
    op.execute(ENQUEUE_DELIVERIES)
    op.execute(
        "CREATE TRIGGER jobs_enqueue_webhook_deliveries AFTER UPDATE ON jobs "
        "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION atlas_enqueue_webhook_deliveries()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS jobs_enqueue_webhook_deliveries ON jobs")
    op.execute("DROP FUNCTION IF EXISTS atlas_enqueue_webhook_deliveries()")
    op.drop_index("ix_schedules_notify_webhook_id", table_name="schedules")
    op.drop_constraint(
        op.f("fk_schedules_notify_webhook_id_webhooks"), "schedules", type_="foreignkey"
    )
    op.drop_column("schedules", "notify_webhook_id")
    op.drop_index("ix_webhook_deliveries_webhook_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_job_id", table_name="webhook_deliveries")
    op.drop_index(
        "ix_webhook_deliveries_due",
        table_name="webhook_deliveries",
        postgresql_where=sa.text("state IN ('pending', 'sending')"),
    )
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_job_webhooks_webhook_id", table_name="job_webhooks")
    op.drop_table("job_webhooks")
    op.drop_index("ix_webhooks_owner_seq", table_name="webhooks")
    op.drop_table("webhooks")
