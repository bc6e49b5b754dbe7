"""jobs_updated joins its transition tables with FULL JOIN: no nested loop after a one-row call

Revision ID: b4c5d6e7f8a9
Revises: f2a3b4c5d6e7
Create Date: 2026-11-30 07:50:00.000000+00:00

PL/pgSQL plans a trigger's query once per session, at its first call, with the row
counts its transition tables have then, and keeps that plan. A connection whose first
UPDATE of ``jobs`` touched ONE row (a worker's first claim or publication when the queue
was idle, a heartbeat of one job) planned ``new_rows JOIN old_rows`` as a nested loop,
and every later batch on that connection compared every new row with every old one: a
100-job claim or publication spent ~1.1 ms in ``jobs_updated`` instead of ~0.2 ms
(PostgreSQL 15, EXPLAIN ANALYZE's trigger time, the same statements after a first call
of one row and of 100 rows). A FULL JOIN cannot be a nested loop (only a hash or merge
join), so the plan scales whatever the first call was; for these tables it is the same
join, since every updated row is in both. One-row calls cost the same (median trigger
time of 40 one-row updates 0.064 against 0.061-0.065 ms).

The upgrade rewrites the function in place -- its joins of ``new_rows`` with
``old_rows``, and nothing else -- and refuses to run if it does not find them as
revision f2a3b4c5d6e7 wrote them; the downgrade rewrites them back.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "b4c5d6e7f8a9"
down_revision: str | None = "f2a3b4c5d6e7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The joins of atlas_jobs_updated (revision f2a3b4c5d6e7), as written there: the first
# aggregate and the webhook outbox join new_rows to old_rows, the several-owners upsert
# old_rows to new_rows.
JOINS = {
    "FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id": (
        "FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id"
    ),
    "FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id": (
        "FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id"
    ),
}
EXPECTED = 3  # join sites in the function


def _rewrite(pairs: list[tuple[str, str]]) -> None:
    """Replace ``pairs`` in the function's definition and create it again."""
    replacements = ", ".join(f"('{old}', '{new}')" for old, new in pairs)
    op.execute(f"""
DO $$
DECLARE
    definition text := pg_get_functiondef('atlas_jobs_updated()'::regprocedure);
    found integer := 0;
    pair record;
BEGIN
    FOR pair IN SELECT * FROM (VALUES {replacements}) AS p (old, new) LOOP
        found := found + (length(definition) - length(replace(definition, pair.old, '')))
                         / length(pair.old);
        definition := replace(definition, pair.old, pair.new);
    END LOOP;
    IF found <> {EXPECTED} THEN
        RAISE EXCEPTION 'atlas_jobs_updated: % of % joins found as expected', found, {EXPECTED};
    END IF;
    EXECUTE definition;
END
$$
""")


def upgrade() -> None:
    _rewrite(list(JOINS.items()))


def downgrade() -> None:
    _rewrite([(new, old) for old, new in JOINS.items()])
