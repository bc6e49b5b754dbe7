"""Server-side status-page sessions, key holders, and the key behind each submission

Revision ID: c7d8e9f0a1b2
Revises: a3b4c5d6e7f8
Create Date: 2026-12-01 22:30:00.000000+00:00

* ``ui_sessions``: one row per status-page login, keyed by the SHA-256 of the random
  token in its signed cookie. A logout deletes the row, so the cookie is dead at once
  (before, a signed cookie stayed valid until its TTL whatever the logout said); revoking
  the key, or an operator's "log out everywhere", deletes its rows (and the foreign key
  cascades if a key row is ever deleted). Sessions opened before this revision are
  signed cookies without a row: they are refused, and their users log in again.
* ``api_keys.holder``: who holds the key (optional, trimmed, 1-200 characters).
* ``job_history.key_id``: the API key that made a move, on the moves a key makes (a
  client's creation): the four-eyes rule of reviews compares the submitter's holder
  with the approver's. Nullable and without a default: adding it rewrites nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "c7d8e9f0a1b2"
down_revision: str | None = "a3b4c5d6e7f8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("holder", sa.Text(), nullable=True))
    op.create_check_constraint(
        "holder_trimmed",
        "api_keys",
        "holder IS NULL OR (holder = btrim(holder) AND length(holder) BETWEEN 1 AND 200)",
    )
    op.add_column("job_history", sa.Column("key_id", postgresql.UUID(as_uuid=True)))
    op.create_table(
        "ui_sessions",
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("key_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name="fk_ui_sessions_key_id_api_keys",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("token_hash", name="pk_ui_sessions"),
    )
    op.create_index("ix_ui_sessions_key_id", "ui_sessions", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_key_id", table_name="ui_sessions")
    op.drop_table("ui_sessions")
    op.drop_column("job_history", "key_id")
    op.drop_constraint("holder_trimmed", "api_keys", type_="check")
    op.drop_column("api_keys", "holder")
