"""The lifecycle tables agree with themselves and with docs/protocol.md §2.

``atlas_jobs._app.lifecycle`` is the one place that decides which moves are legal, so its tables
must be closed: every named transition moves along an edge of the edge table, every
edge is reachable through some named transition, and terminal states stay terminal.
"""

from __future__ import annotations

import uuid
from collections import deque

import pytest

from atlas_jobs._app.lifecycle import (
    ACTIVE_STATES,
    DEFAULT_REASONS,
    DELIVERY_DOCS,
    DELIVERY_MOVES,
    EDGES,
    STATE_DOCS,
    STATE_REASONS,
    TERMINAL_STATES,
    TRANSITIONS,
    DeliveryState,
    JobState,
    Reason,
    TransitionName,
    budget_verdict,
)

NAMED_MOVES = {
    (name, source, target) for name, t in TRANSITIONS.items() for source, target in t.moves.items()
}


def test_every_named_move_is_an_edge_of_the_table() -> None:
    strays = {(name, s, t) for name, s, t in NAMED_MOVES if (s, t) not in EDGES}
    assert strays == set()


def test_every_edge_is_produced_by_some_named_transition() -> None:
    produced = {(s, t) for _, s, t in NAMED_MOVES}
    assert EDGES - produced == set()


def test_terminal_states_only_allow_result_expiry() -> None:
    """Terminal states never change; expiring a result keeps ``succeeded`` as it is."""
    leaving = {(name, s, t) for name, s, t in NAMED_MOVES if s in TERMINAL_STATES}
    assert leaving == {("expire_result", JobState.SUCCEEDED, JobState.SUCCEEDED)}
    edges_out = {(s, t) for s, t in EDGES if s in TERMINAL_STATES}
    assert edges_out <= {(JobState.SUCCEEDED, JobState.SUCCEEDED)}


def test_only_creation_and_replay_start_a_job() -> None:
    starters = {name for name, s, _ in NAMED_MOVES if s is None}
    assert starters == {"create", "replay"}
    assert {t for name, s, t in NAMED_MOVES if s is None} == {JobState.QUEUED}


@pytest.mark.parametrize("state", list(JobState))
def test_every_state_has_a_doc_and_reasons(state: JobState) -> None:
    assert STATE_DOCS[state].strip()
    assert STATE_REASONS[state]


def test_docs_and_reasons_cover_exactly_the_vocabularies() -> None:
    assert set(STATE_DOCS) == set(JobState)
    assert set(STATE_REASONS) == set(JobState)
    assert set(DELIVERY_DOCS) == set(DeliveryState)
    assert all(doc.strip() for doc in DELIVERY_DOCS.values())
    used = set().union(*STATE_REASONS.values())
    assert used == set(Reason), "every reason belongs to at least one state"


@pytest.mark.parametrize("state", list(JobState))
def test_default_reason_is_allowed_for_its_state(state: JobState) -> None:
    assert DEFAULT_REASONS[state] in STATE_REASONS[state]


@pytest.mark.parametrize("name", list(TRANSITIONS))
def test_declared_reasons_go_with_their_targets(name: str) -> None:
    spec = TRANSITIONS[name]
    assert set(spec.reasons) <= set(spec.moves.values()), "a reason for a state never reached"
    for target in set(spec.moves.values()):
        assert spec.reason_for(target) in STATE_REASONS[target]


def test_every_transition_is_named_by_the_enum() -> None:
    assert set(TRANSITIONS) == set(TransitionName)
    assert all(isinstance(name, TransitionName) for name in TRANSITIONS)


def test_declared_delivery_moves_follow_the_delivery_table() -> None:
    for spec in TRANSITIONS.values():
        for wanted in spec.delivery:
            allowed = [c for c in DeliveryState if spec.delivery_allows(c, wanted)]
            assert allowed, f"{spec.name} can never reach {wanted}"
            for current in allowed:
                assert (current, wanted) in DELIVERY_MOVES or (
                    current == wanted and spec.delivery_may_stay
                )


def test_only_bookkeeping_moves_keep_the_state() -> None:
    """Heartbeats, progress and staging keep the state -- and, outside a lease, a result's
    expiry and a queued job's reschedule; the executor relies on every state-changing
    move changing it from every source (reason and ``finished_at``)."""
    outside_a_lease = {TransitionName.EXPIRE_RESULT, TransitionName.RESCHEDULE}
    for spec in TRANSITIONS.values():
        kept = [s for s, t in spec.moves.items() if s == t]
        if kept:
            assert set(kept) == spec.sources, spec.name
        if kept and spec.name not in outside_a_lease:
            assert spec.sources <= ACTIVE_STATES, spec.name
        if not spec.visible:
            assert not spec.records, spec.name
            assert not spec.changes_state, spec.name


@pytest.mark.parametrize(
    ("charged", "elapsed", "delay", "verdict"),
    [
        (1, 0.0, 0.0, None),
        (3, 0.0, 0.0, Reason.RETRIES_EXHAUSTED),
        (4, 0.0, 0.0, Reason.RETRIES_EXHAUSTED),
        (1, 99.0, 0.0, None),
        (1, 100.0, 0.0, Reason.TIME_EXHAUSTED),
        (1, 95.0, 5.0, Reason.TIME_EXHAUSTED),
        (3, 100.0, 0.0, Reason.RETRIES_EXHAUSTED),
    ],
)
def test_one_budget_rule(charged: int, elapsed: float, delay: float, verdict: Reason) -> None:
    assert (
        budget_verdict(
            charged_attempts=charged,
            max_attempts=3,
            elapsed_seconds=elapsed,
            max_elapsed_seconds=100,
            delay_seconds=delay,
        )
        == verdict
    )


def test_fenced_transitions_start_where_a_worker_holds_the_lease() -> None:
    fenced = [t for t in TRANSITIONS.values() if t.fenced]
    assert fenced, "worker moves are fenced by the attempt id"
    for t in fenced:
        assert t.sources <= ACTIVE_STATES, t.name
    assert not ACTIVE_STATES & TERMINAL_STATES


def test_claim_is_the_only_way_into_running() -> None:
    into_running = {name for name, s, t in NAMED_MOVES if t == JobState.RUNNING and s != t}
    assert into_running == {"claim"}


def _reachable(start: JobState | None) -> set[JobState]:
    seen: set[JobState] = set()
    todo: deque[JobState | None] = deque([start])
    while todo:
        here = todo.popleft()
        for s, t in EDGES:
            if s == here and t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_every_state_is_reachable_from_creation() -> None:
    assert _reachable(None) == set(JobState)


@pytest.mark.parametrize("state", sorted(set(JobState) - TERMINAL_STATES))
def test_no_live_state_is_a_dead_end(state: JobState) -> None:
    """Every non-terminal state can still reach a terminal one: nothing is stuck."""
    assert _reachable(state) & TERMINAL_STATES


def test_delivery_moves_start_from_none_and_end_in_absorbing_states() -> None:
    reachable = {DeliveryState.NONE}
    frontier = [DeliveryState.NONE]
    while frontier:
        here = frontier.pop()
        for s, t in DELIVERY_MOVES:
            if s == here and t not in reachable:
                reachable.add(t)
                frontier.append(t)
    assert reachable == set(DeliveryState)
    sources = {s for s, _ in DELIVERY_MOVES}
    assert DeliveryState.EXPIRED not in sources
    assert DeliveryState.BLOCKED not in sources
    assert (DeliveryState.AVAILABLE, DeliveryState.BLOCKED) not in DELIVERY_MOVES


def test_every_transition_says_who_makes_it() -> None:
    known = {"worker", "system", "operator", "reviewer", "client"}
    for spec in TRANSITIONS.values():
        assert spec.actors, f"{spec.name} names no actor"
        assert spec.actors <= known, spec.name
        if spec.fenced:
            assert spec.actors == {"worker"}, spec.name
    operator_decisions = [n for n, t in TRANSITIONS.items() if t.actors == {"operator"}]
    assert sorted(operator_decisions) == ["operator_cancel", "operator_fail", "replay", "resume"]


def test_a_move_by_an_actor_it_does_not_name_is_refused_before_any_sql() -> None:
    import asyncio

    from atlas_jobs._app.clock import Clock
    from atlas_jobs._app.db.moves import Actor, Executor, Step

    executor = Executor(Clock(), 30)
    with pytest.raises(PermissionError):
        # No connection is needed: the declaration refuses first.
        asyncio.run(
            executor.apply(
                None,  # type: ignore[arg-type]
                TRANSITIONS["resume"],
                [Step(uuid.uuid4())],
                actor=Actor("client", "mallory"),
            )
        )


def test_settled_states_and_hand_overs_fit_the_table() -> None:
    """A repeat is recognised in a state the move does not start from; a hand-over goes
    from a state the move does not start from to a transition that does, made by actors
    the first one names."""
    handed = 0
    for spec in TRANSITIONS.values():
        assert not spec.settled & spec.sources, spec.name
        for state, hand in spec.hands_over.items():
            other = TRANSITIONS[hand.transition]
            assert state not in spec.sources, spec.name
            assert state in other.sources, spec.name
            assert other.actors <= spec.actors, spec.name
            handed += 1
    assert handed >= 1
    assert TRANSITIONS["request_cancel"].settled == {
        JobState.CANCEL_REQUESTED,
        JobState.CANCELED,
    }


def test_the_claims_writes_come_from_its_declaration() -> None:
    """The claim statement is the lanes' lead (which lanes, which keys) and the named
    selection, followed by what the executor generates from the ``claim`` declaration: the
    target and reason, the new attempt, the lease, the attempts row and the history row."""
    from atlas_jobs._app.db import moves, queries

    claim = TRANSITIONS["claim"]
    writes = moves.selected_writes(
        TransitionName.CLAIM, queries.CLAIM_SELECTION, lead=queries.CLAIM_LEAD
    )
    for statement in (queries.CLAIM.text, queries.CLAIM_TO_RUN.element.text):
        assert statement.startswith(writes)
        assert queries.CLAIM_SELECTION in statement
        assert queries.CLAIM_LEAD.strip() in statement
    assert f"state = '{claim.target(JobState.QUEUED)}'" in writes
    assert f"reason = '{claim.reason_for(JobState.RUNNING)}'" in writes
    assert "current_attempt_id = atlas_uuid_v7()" in writes
    assert "INSERT INTO attempts" in writes
    assert "INSERT INTO job_history" in writes
