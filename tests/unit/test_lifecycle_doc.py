"""docs/lifecycle.md is generated from the code (``make docs``) and cannot drift."""

from __future__ import annotations

from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.lifecycle_doc import render, rows
from tests.support import REPO


def test_the_committed_lifecycle_doc_is_generated_from_the_code() -> None:
    committed = (REPO / "docs" / "lifecycle.md").read_text()
    assert committed == render(), "docs/lifecycle.md drifted: run `make docs`"


def test_the_matrix_covers_every_state_and_shows_a_link_only_for_an_available_result() -> None:
    table = list(rows())
    assert {state for state, *_ in table} == {s.value for s in JobState}
    linked = {(state, delivery) for state, _, delivery, _, link, _ in table if link == "yes"}
    assert linked == {("succeeded", "available")}
    assert not any("%" in label for _, _, _, label, _, _ in table)
    review = [acts for state, reason, *_, acts in table if (state, reason) == ("waiting", "review")]
    assert all("approve" in acts and "receive_event" not in acts for acts in review)
