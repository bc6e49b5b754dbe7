"""kind pauses: an operator stops a kind (or one of its versions) from being claimed

``kind_pauses`` holds the kinds paused now, one row per (kind, version) -- version 0
pauses every version -- with who paused it, when and why; the claim skips their queued
jobs. ``kind_pause_events`` appends every pause and resume with its actor and note.
Two new tables, nothing else changes: the upgrade takes no lock on ``jobs``.

Revision ID: 9c1d2e3f4a5b
Revises: b8fd571ff01f
Create Date: 2026-12-02 06:00:00.000000+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "9c1d2e3f4a5b"
down_revision: str | None = "b8fd571ff01f"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_PAUSES = """
CREATE TABLE kind_pauses (
    kind text NOT NULL,
    version integer NOT NULL DEFAULT 0,
    paused_by text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    note text,
    CONSTRAINT pk_kind_pauses PRIMARY KEY (kind, version),
    CONSTRAINT ck_kind_pauses_version_known CHECK (version >= 0)
)
"""

CREATE_EVENTS = """
CREATE TABLE kind_pause_events (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,
    version integer NOT NULL,
    action text NOT NULL,
    actor text NOT NULL,
    note text,
    CONSTRAINT pk_kind_pause_events PRIMARY KEY (seq),
    CONSTRAINT ck_kind_pause_events_action_known CHECK (action IN ('pause', 'resume'))
)
"""


def upgrade() -> None:
    op.execute(CREATE_PAUSES)
    op.execute(CREATE_EVENTS)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS kind_pause_events")
    op.execute("DROP TABLE IF EXISTS kind_pauses")
