"""The one line a server prints for each schema state names what to do."""

from __future__ import annotations

from atlas_jobs._app.db.migrations import SchemaState, SchemaStatus


def test_each_schema_state_has_its_own_line() -> None:
    expected = frozenset({"b2"})
    lines = {
        state: SchemaStatus(state, frozenset({"a1"}), expected).problem() for state in SchemaState
    }
    assert lines[SchemaState.CURRENT] is None
    assert "run `atlas-jobs migrate`" in str(lines[SchemaState.UNMIGRATED])
    assert "older (a1) than this version needs (b2): run `atlas-jobs migrate`" in str(
        lines[SchemaState.BEHIND]
    )
    assert "unknown to this version (expects b2)" in str(lines[SchemaState.UNKNOWN])
