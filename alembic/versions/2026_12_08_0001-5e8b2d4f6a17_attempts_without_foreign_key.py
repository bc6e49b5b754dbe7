"""attempts without its foreign key to jobs

Revision ID: 5e8b2d4f6a17
Revises: 6d2f8a4c1e93
Create Date: 2026-12-08 00:50:00+00:00

``fk_attempts_job_id_jobs`` is dropped, as revision f1a2b3c4d5e6 dropped the history's.
Every attempts row is written by the claim, from the rows its own ``UPDATE`` just moved
(``opened``, from ``moved``): the job exists and that statement holds its row lock until
it commits. The key's check proved nothing more, and it was a third of the claim's
server time: per attempt an SPI query, a primary-key probe and a KEY SHARE lock of the
job row -- a row version the claim had just written, so the lock is one more WAL record
per claimed job. The key also deleted a job's attempts with it (ON DELETE CASCADE); the
pruner now does that itself, with the history (``PRUNE_RECORDS``, in the pruning
transaction). Downgrade deletes attempts whose job is gone, then restores the key.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "5e8b2d4f6a17"
down_revision: str | None = "6d2f8a4c1e93"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint("fk_attempts_job_id_jobs", "attempts", type_="foreignkey")


def downgrade() -> None:
    op.execute(
        "DELETE FROM attempts AS a WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = a.job_id)"
    )
    op.create_foreign_key(
        "fk_attempts_job_id_jobs", "attempts", "jobs", ["job_id"], ["id"], ondelete="CASCADE"
    )
