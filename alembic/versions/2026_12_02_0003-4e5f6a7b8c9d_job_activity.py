"""job activity: the per-minute rollup behind the operators' charts

``job_activity`` holds, per minute and kind, the jobs created and finished by outcome
and the sampled queue (claimable queued jobs, the oldest one's age); the workers'
activity service maintains it from the history. ``ix_job_history_at`` (BRIN on
``job_history.at``) lets that service read the last minutes of history without a
B-tree insertion on every transition. Building a BRIN index reads ``job_history`` once
and holds writes to it meanwhile (seconds at millions of rows).

Revision ID: 4e5f6a7b8c9d
Revises: 9c1d2e3f4a5b
Create Date: 2026-12-02 06:20:00.000000+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "4e5f6a7b8c9d"
down_revision: str | None = "9c1d2e3f4a5b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_ACTIVITY = """
CREATE TABLE job_activity (
    minute timestamptz NOT NULL,
    kind text NOT NULL,
    created integer NOT NULL DEFAULT 0,
    succeeded integer NOT NULL DEFAULT 0,
    failed integer NOT NULL DEFAULT 0,
    canceled integer NOT NULL DEFAULT 0,
    queued integer NOT NULL DEFAULT 0,
    oldest_queued_seconds double precision,
    CONSTRAINT pk_job_activity PRIMARY KEY (minute, kind)
)
"""


def upgrade() -> None:
    op.execute(CREATE_ACTIVITY)
    op.execute("CREATE INDEX ix_job_history_at ON job_history USING brin (at)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_job_history_at")
    op.execute("DROP TABLE IF EXISTS job_activity")
