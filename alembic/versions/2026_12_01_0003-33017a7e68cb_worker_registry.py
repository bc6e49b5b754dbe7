"""The worker registry: one row per running worker process

Revision ID: 33017a7e68cb
Revises: c7d8e9f0a1b2
Create Date: 2026-12-01 09:00:00.000000+00:00

Each worker process upserts its row when it starts and on a short interval
(``ATLAS_WORKER_HEARTBEAT_SECONDS``): its id, host, pid, concurrency and the
``kind@version`` keys it serves; it deletes the row on a clean shutdown. A row whose
heartbeat is older than the live window is a dead process's; the sweeper deletes it
later. ``GET /v1/kinds`` counts the live workers per version from it, and a queued job
no live worker can run says so (``waiting_for``). Nothing on the claim path reads it.
A new table, nothing else changes: the upgrade takes no lock on ``jobs``.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "33017a7e68cb"
down_revision: str | None = "c7d8e9f0a1b2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_TABLE = """
CREATE TABLE worker_processes (
    worker_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    serves text[] NOT NULL,
    concurrency integer NOT NULL,
    CONSTRAINT pk_worker_processes PRIMARY KEY (worker_id),
    CONSTRAINT ck_worker_processes_concurrency_positive CHECK (concurrency > 0)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05,
        autovacuum_vacuum_cost_delay = 0)
"""


def upgrade() -> None:
    op.execute(CREATE_TABLE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS worker_processes")
