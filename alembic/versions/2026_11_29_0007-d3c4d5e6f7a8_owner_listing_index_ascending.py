"""ix_jobs_owner_seq ascending: the owner's listing walks it backwards

Revision ID: d3c4d5e6f7a8
Revises: e8f9a0b1c2d3
Create Date: 2026-11-29 23:05:00+00:00

``seq`` only grows. In the descending index every new entry lands on the first leaf page
of its owner's range, and a page that is not the rightmost splits half and half: the
left half never receives another entry, so the index stays about half empty (200,000
rising ``seq`` values: 11.3 MiB descending, 6.3 MiB ascending, one owner or three).
Ascending, new entries land at the end of the owner's range, where PostgreSQL's split
keeps the pages full. ``ORDER BY seq DESC`` reads it backwards (same plan, same cost).
The gain is for new jobs (a backlog: the queue's rows); the later versions of a job
(its updates are not HOT) land mid-range either way, so under a steady churn both
shapes measured alike (~15 MiB after two autovacuum cycles at ~2,000 jobs/s).

Built concurrently under a temporary name, then swapped: ``jobs`` stays writable.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "d3c4d5e6f7a8"
down_revision: str | None = "e8f9a0b1c2d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _swap(columns: str) -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_owner_seq_new")
        op.execute(f"CREATE INDEX CONCURRENTLY ix_jobs_owner_seq_new ON jobs ({columns})")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_owner_seq")
        op.execute("ALTER INDEX ix_jobs_owner_seq_new RENAME TO ix_jobs_owner_seq")


def upgrade() -> None:
    _swap("owner, seq")


def downgrade() -> None:
    _swap("owner, seq DESC")
