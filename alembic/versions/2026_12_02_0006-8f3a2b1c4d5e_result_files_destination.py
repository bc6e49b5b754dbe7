"""result labels: what the status says of a published result

``jobs.result_files`` (how many files the published result holds) and
``jobs.result_destination`` (where the kind's publish step published it) are written
with ``result_ref`` by the publication, so a status -- and every row of a listing --
can say "Finished (no files)" or "Finished — published to press" without reading the
result reference, which can be large. Existing published results are filled in from
their ``result_ref``: one pass over the jobs that have one.

Revision ID: 8f3a2b1c4d5e
Revises: 5d1a9c3e7b20
Create Date: 2026-12-02 18:10:00.000000+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "8f3a2b1c4d5e"
down_revision: str | None = "5d1a9c3e7b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILL = """
UPDATE jobs
   SET result_files = CASE jsonb_typeof(result_ref -> 'files')
                          WHEN 'array' THEN jsonb_array_length(result_ref -> 'files')
                      END,
       result_destination = result_ref -> 'publication' ->> 'destination'
 WHERE result_ref IS NOT NULL
"""


def upgrade() -> None:
    op.execute(
        "ALTER TABLE jobs ADD COLUMN result_files integer, ADD COLUMN result_destination text"
    )
    op.execute(FILL)


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN result_destination, DROP COLUMN result_files")
