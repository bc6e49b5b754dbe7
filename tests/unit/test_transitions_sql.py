"""app/db/sql/transitions.sql is generated from the code (``make sql``) and cannot drift."""

from __future__ import annotations

from atlas_jobs._app.db import moves
from atlas_jobs._app.db.render_sql import blocks, executed, render
from atlas_jobs._app.lifecycle import TRANSITIONS, TransitionName
from tests.support import REPO

TRANSITIONS_SQL = REPO / "app" / "db" / "sql" / "transitions.sql"


def test_the_committed_transitions_sql_is_generated_from_the_code() -> None:
    committed = TRANSITIONS_SQL.read_text()
    assert committed == render(), (
        "app/db/sql/transitions.sql drifted from the statements the code generates: "
        "run `make sql` (python -m atlas_jobs._app.db.render_sql > app/db/sql/transitions.sql)"
    )


def test_every_block_is_named_once_and_described() -> None:
    found = blocks(TRANSITIONS_SQL.read_text())
    names = [block.name for block in found]
    assert len(names) == len(set(names))
    assert all(block.description and block.sql for block in found)


def test_every_move_of_the_executor_is_there_in_both_shapes_as_it_runs() -> None:
    """Read back from the file, each block is the executor's statement, character for
    character; only the transitions without a source state (creations) and claim (its own
    statement) are not the executor's."""
    found = {block.name: block.sql for block in blocks(TRANSITIONS_SQL.read_text())}
    for spec in executed():
        for shape, full_rows in (("full", True), ("brief", False)):
            statement = moves.statement(spec.name, full_rows=full_rows)
            assert found[f"{spec.name}_{shape}"] == statement.text.strip()
    left_out = {name for name in TRANSITIONS if name not in {s.name for s in executed()}}
    assert left_out == {TransitionName.CREATE, TransitionName.REPLAY, TransitionName.CLAIM}
    assert {"refusals", "create_one", "create_batch", "claim", "claim_to_run"} <= set(found)
