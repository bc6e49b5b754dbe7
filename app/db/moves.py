"""The one executor of transitions: a declared :class:`~atlas_jobs._app.lifecycle.Transition` and a
batch of :class:`Step` s become ONE statement (the way River's completer feeds every
``JobSetState...`` into one batched ``...Many`` query).

The statement, generated once per transition from its declaration and cached:

* ``input`` -- the steps as rows (``unnest`` of one array per field);
* ``locked`` -- the steps' job rows, locked ``FOR UPDATE`` in id order whatever their
  state (``SKIP LOCKED`` for heartbeats): the jobs row first, as everywhere. A cancel
  therefore waits for a publication that holds the row, and then sees its outcome. Each
  row carries its step's fields, so ``moved`` joins nothing else;
* ``moved`` -- the compare-and-set: the ``UPDATE`` of everything the declaration says,
  only where the state is a source of the move and the fence (attempt id + live lease),
  guard and delivery rule hold -- checked on the row as it is once locked. It reaches
  each job by its primary key: the source states and the delivery rule are tested on
  the state and delivery as locked (equal to the row's), so no partial index's predicate
  is implied. It ``RETURNING`` s the new row: the answer (routes never re-read what
  they wrote);
* ``ended`` -- the attempt that held the job gets its outcome (or its lease extended);
* ``recorded`` -- one history row per moved job.

A step whose job did not move gets a :class:`Rejected`, classified by one read of the
jobs that did not move (rare: only refused moves pay for it), using the same
declaration. The Python classifier and the SQL conditions are written side by side in
:data:`_GUARDS` so the two cannot drift apart unnoticed.

Every statement generated here, as text: ``app/db/sql/transitions.sql`` (``make sql``,
:mod:`atlas_jobs._app.db.render_sql`); a test fails when it and this module disagree.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, cast

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app import metrics
from atlas_jobs._app.clock import NOW_SQL, Clock
from atlas_jobs._app.db import driver
from atlas_jobs._app.db.records import JobRow, RefusedJobRow, job_row, refused_job_row
from atlas_jobs._app.db.row_rules import sql_list
from atlas_jobs._app.lifecycle import (
    ACTIVE_STATES,
    STATE_REASONS,
    TERMINAL_STATES,
    TRANSITIONS,
    ActorKind,
    AttemptOutcome,
    DeliveryState,
    Effect,
    Guard,
    HandOver,
    JobState,
    Reason,
    Transition,
    TransitionName,
)

NOW = NOW_SQL


class RejectReason(StrEnum):
    NOT_FOUND = "not_found"
    ILLEGAL = "illegal"
    STALE_ATTEMPT = "stale_attempt"
    REPEATED = "repeated"
    """The same decision took effect before: the request is a replay of it."""
    CONFLICTING = "conflicting"
    """Another decision took effect before (an approval asked of a rejected job)."""


@dataclass(frozen=True, slots=True)
class Applied:
    """The move happened; ``job`` is the row after it (the statement's ``RETURNING``:
    the whole row, or what a brief move or a creation answers -- see :class:`JobRow`)."""

    transition: str
    from_state: JobState | None
    to_state: JobState
    job: JobRow

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Rejected:
    """The move matched no row. ``current`` is the job's state when it exists, and
    ``job`` its row as the refusal found it (for the answer; not compared)."""

    transition: str
    reason: RejectReason
    current: JobState | None = None
    job: JobRow | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return False

    @property
    def took_effect(self) -> bool:
        """The job is where this move takes it already (its declaration's ``settled``):
        a repeat, answered like the move itself."""
        return TRANSITIONS[TransitionName(self.transition)].took_effect(self.current)


MoveResult = Applied | Rejected
"""What a transition answers: it happened (with the new row), or why not."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a move: ``client:alice``, ``operator:ops``, ``worker:w-1``, ``system:reaper``."""

    kind: ActorKind
    name: str
    key_id: uuid.UUID | None = None
    """The API key that made the move, when one did (recorded with a creation)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ActorKind(self.kind))

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class Step:
    """One job's part in a move. Which fields a transition reads is in its declaration
    (:class:`~atlas_jobs._app.lifecycle.Effect`); the others stay ``None``."""

    job_id: uuid.UUID
    attempt_id: uuid.UUID | None = None
    """The caller's fencing token (fenced transitions)."""
    reason: Reason | None = None
    """Overrides the declared reason (e.g. ``give_up`` with ``time_exhausted``)."""
    error: Mapping[str, Any] | None = None
    seconds: float | None = None
    """The move's duration: retry backoff, wait deadline or result retention."""
    rule: str | None = None
    """What happens when a wait's deadline passes: ``fail`` or ``escalate``."""
    stage: str | None = None
    delivery: DeliveryState | None = None
    result_ref: Mapping[str, Any] | None = None
    data: Mapping[str, Any] | None = None
    """Recorded in the history row."""
    note: str | None = None
    event_id: str | None = None
    at: datetime | None = None
    """A moment the move sets (a reschedule's new ``run_at``; ``None``: no delay)."""


# -- the statement --------------------------------------------------------------------

_INPUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "uuid"),
    ("attempt_id", "uuid"),
    ("reason", "text"),
    ("error", "jsonb"),
    ("seconds", "float8"),
    ("rule", "text"),
    ("stage", "text"),
    ("delivery", "text"),
    ("result_ref", "jsonb"),
    ("data", "jsonb"),
    ("note", "text"),
    ("event_id", "text"),
    ("at", "timestamptz"),
)

_STEP_AT = f"COALESCE(i.at, {NOW} + make_interval(secs => i.seconds))"
"""A step's moment: ``at``, or ``seconds`` from now (NULL: neither)."""

_GUARDS: dict[Guard, tuple[str, str]] = {
    # guard: (the SQL condition on j, the column of the refusal read that tells it)
    Guard.AWAITING_REVIEW: (
        f"j.reason = '{Reason.REVIEW}' AND j.wait_deadline_at > {NOW}",
        "awaiting_review",
    ),
    Guard.AWAITING_EVENT: (
        f"j.reason = '{Reason.EXTERNAL}' AND j.wait_deadline_at > {NOW}",
        "awaiting_event",
    ),
    Guard.LEASE_EXPIRED: (f"j.lease_expires_at <= {NOW}", "lease_expired"),
    Guard.DEADLINE_RULE_FAIL: (
        f"j.wait_deadline_at <= {NOW} AND j.wait_on_deadline = 'fail'",
        "deadline_fail",
    ),
    Guard.DEADLINE_RULE_ESCALATE: (
        f"j.wait_deadline_at <= {NOW} AND j.wait_on_deadline = 'escalate'",
        "deadline_escalate",
    ),
    # The refusal read has no step: it tells whether the deadline still lets the job
    # start; a refusal with it open is a new run_at after start_by (the caller's 422).
    Guard.START_OPEN: (
        f"(j.start_by IS NULL OR j.attempt > 0 OR (j.start_by > {NOW}"
        f" AND ({_STEP_AT} IS NULL OR {_STEP_AT} < j.start_by)))",
        "start_open",
    ),
    Guard.START_MISSED: (f"j.attempt = 0 AND j.start_by <= {NOW}", "start_missed"),
}
_START_OPEN_NOW = f"(j.start_by IS NULL OR j.attempt > 0 OR j.start_by > {NOW})"

_FENCE = f"j.current_attempt_id = i.attempt_id AND j.lease_expires_at > {NOW}"
_OWNER = "(CAST(:owner AS text) IS NULL OR j.owner = CAST(:owner AS text))"

# Read for the steps that did not move: the facts each refusal is classified by.
_REFUSALS = text(f"""
SELECT j.*,
       (j.lease_expires_at > {NOW}) IS TRUE AS lease_live,
       ({_GUARDS[Guard.AWAITING_REVIEW][0]}) IS TRUE AS awaiting_review,
       ({_GUARDS[Guard.AWAITING_EVENT][0]}) IS TRUE AS awaiting_event,
       (j.state = '{JobState.WAITING}' AND j.wait_deadline_at <= {NOW}) IS TRUE
           AS deadline_passed,
       ({_GUARDS[Guard.LEASE_EXPIRED][0]}) IS TRUE AS lease_expired,
       ({_GUARDS[Guard.DEADLINE_RULE_FAIL][0]}) IS TRUE AS deadline_fail,
       ({_GUARDS[Guard.DEADLINE_RULE_ESCALATE][0]}) IS TRUE AS deadline_escalate,
       {_START_OPEN_NOW} IS TRUE AS start_open,
       ({_GUARDS[Guard.START_MISSED][0]}) IS TRUE AS start_missed
  FROM jobs AS j
 WHERE j.id = ANY(CAST(:job_ids AS uuid[]))
""")


def _case(arms: Mapping[JobState, str], otherwise: str, source: JobState | None = None) -> str:
    """``CASE i.from_state WHEN ... END`` over the sources that differ; the one
    arm itself when the statement moves from one known ``source``."""
    if source is not None:
        return arms.get(source, otherwise)
    if not arms:
        return otherwise
    whens = " ".join(f"WHEN '{source}' THEN {value}" for source, value in sorted(arms.items()))
    return f"CASE i.from_state {whens} ELSE {otherwise} END"


def _sets(spec: Transition, *, source: JobState | None = None) -> list[str]:
    """The ``SET`` list of a move. With ``source`` (a selection's move, see
    :func:`selected_writes`) every row moves from that one state and no step is bound:
    the columns get the values of that source's arm, without ``CASE`` or step fields."""
    moves = {s: target for s, target in spec.moves.items() if s is not None}
    if source is not None:
        moves = {source: moves[source]}
    sets: list[str] = []
    if spec.visible:
        sets += ["version = j.version + 1", f"updated_at = {NOW}"]
    if spec.changes_state:
        sets.append("state = " + _case({s: f"'{t}'" for s, t in moves.items()}, "j.state", source))
        reasons = _case(
            {s: f"'{spec.reason_for(t)}'" for s, t in moves.items()}, "j.reason", source
        )
        sets.append(f"reason = {reasons}" if source else f"reason = COALESCE(i.reason, {reasons})")
    finishing = {s: NOW for s, t in moves.items() if t in TERMINAL_STATES and s != t}
    if finishing:
        sets.append("finished_at = " + _case(finishing, "j.finished_at", source))
    leaving_lease = {s for s, t in moves.items() if s in ACTIVE_STATES and t not in ACTIVE_STATES}
    for column in ("current_attempt_id", "lease_expires_at", "worker_id"):
        if leaving_lease:
            cleared = _case(dict.fromkeys(leaving_lease, "NULL"), f"j.{column}", source)
            sets.append(f"{column} = {cleared}")
    leaving_wait = {s for s, t in moves.items() if s == JobState.WAITING and t != s}
    if leaving_wait:
        for column in ("wait_deadline_at", "wait_on_deadline"):
            cleared = _case(dict.fromkeys(leaving_wait, "NULL"), f"j.{column}", source)
            sets.append(f"{column} = {cleared}")
    abandoning = {
        s
        for s, t in moves.items()
        if t in {JobState.FAILED, JobState.CANCELED} and s not in TERMINAL_STATES
    }
    if spec.delivery:
        sets.append(
            "delivery_state = "
            + (
                f"'{next(iter(spec.delivery))}'"
                if len(spec.delivery) == 1
                else "COALESCE(i.delivery, j.delivery_state)"
            )
        )
    elif abandoning:
        private = sql_list([DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE])
        blocked = (
            f"CASE WHEN j.delivery_state IN ({private}) "
            f"THEN '{DeliveryState.BLOCKED}' ELSE j.delivery_state END"
        )
        sets.append(
            "delivery_state = "
            + _case(dict.fromkeys(abandoning, blocked), "j.delivery_state", source)
        )
    sets += [_EFFECTS[effect] for effect in sorted(spec.effects)]
    return sets


_EFFECTS: dict[Effect, str] = {
    Effect.AVAILABLE_NOW: f"available_at = {NOW}",
    Effect.AVAILABLE_AFTER: f"available_at = {NOW} + make_interval(secs => i.seconds)",
    Effect.LAST_ERROR: "last_error = i.error",
    Effect.ERROR: "error = i.error",
    Effect.WAIT_DEADLINE: (
        f"wait_deadline_at = {NOW} + make_interval(secs => i.seconds), wait_on_deadline = i.rule"
    ),
    Effect.UNCHARGE: "charged_attempts = greatest(j.charged_attempts - 1, 0)",
    Effect.NEW_BUDGET: f"charged_attempts = 0, budget_started_at = {NOW}",
    Effect.RESULT: (
        "result_ref = i.result_ref, "
        "result_files = jsonb_array_length(i.result_ref -> 'files'), "
        "result_destination = i.result_ref -> 'publication' ->> 'destination', "
        f"delivery_expires_at = {NOW} + make_interval(secs => i.seconds)"
    ),
    Effect.CANCEL_MARK: (
        f"cancel = jsonb_build_object('requested_at', {NOW}, 'requested_by', CAST(:actor AS text))"
    ),
    Effect.STAGE: "current_stage = COALESCE(i.stage, j.current_stage)",
    Effect.PLAN_DECLARED: "plan_revision = greatest(j.plan_revision, 1)",
    Effect.PLAN_REVISED: (
        "plan_revision = j.plan_revision + 1, current_stage = COALESCE(i.stage, j.current_stage)"
    ),
    Effect.EXTEND_LEASE: (
        f"lease_expires_at = {NOW} + make_interval(secs => :lease_seconds), heartbeat_at = {NOW}"
    ),
    Effect.RUN_AT: (
        f"run_at = CASE WHEN {_STEP_AT} IS NOT NULL THEN greatest({_STEP_AT}, {NOW}) END, "
        f"available_at = greatest({_STEP_AT}, {NOW}), budget_started_at = CASE "
        f"WHEN j.attempt = 0 THEN greatest({_STEP_AT}, {NOW}) ELSE j.budget_started_at END"
    ),
    Effect.OPEN_ATTEMPT: (
        "attempt = j.attempt + 1, charged_attempts = j.charged_attempts + 1, "
        "current_attempt_id = atlas_uuid_v7(), worker_id = :worker_id"
    ),
}


def _conditions(spec: Transition) -> list[str]:
    # On the state and delivery as locked (``moved`` also requires them equal to the
    # row's), as arrays: a condition on ``j.state`` or ``j.delivery_state``, or an
    # equality the planner could carry over to them (an ``IN`` of one value is one), lets
    # it prove the predicate of a partial index (the leases', the waits', the results')
    # and scan that index -- every entry, dead ones of finished jobs included -- instead
    # of probing the primary key once per step (docs/performance.md, "Figures behind the
    # code").
    found = [f"i.from_state = ANY (ARRAY[{sql_list(spec.sources)}])"]
    if spec.fenced:
        found.append(_FENCE)
    if spec.guard is not None:
        found.append(_GUARDS[spec.guard][0])
    if len(spec.delivery) == 1:
        [wanted] = spec.delivery
        allowed = [current for current in DeliveryState if spec.delivery_allows(current, wanted)]
        found.append(f"i.from_delivery = ANY (ARRAY[{sql_list(allowed)}])")
    elif spec.delivery:
        pairs = [
            f"('{current}', '{wanted}')"
            for wanted in sorted(spec.delivery)
            for current in sorted(DeliveryState)
            if spec.delivery_allows(current, wanted)
        ]
        found.append(
            f"(i.delivery IS NULL OR (i.from_delivery, i.delivery) IN (VALUES {', '.join(pairs)}))"
        )
    return found


@cache
def statement(name: TransitionName, *, full_rows: bool = True) -> TextClause:
    """The batched statement of one transition, generated from its declaration.

    ``full_rows=False`` answers only what a batch caller needs (id, state, version, the
    source state and the attempt) and what the metrics count (kind, ``created_at``,
    ``finished_at``): the client then decodes no ``jsonb`` column per job."""
    spec = TRANSITIONS[name]
    columns = ", ".join(f"CAST(:p_{field_name} AS {kind}[])" for field_name, kind in _INPUT_FIELDS)
    aliases = ", ".join(field_name for field_name, _ in _INPUT_FIELDS)
    sets = ",\n           ".join(_sets(spec))
    lock = "FOR UPDATE OF j SKIP LOCKED" if spec.skip_locked else "FOR UPDATE OF j"
    held = "i.held_attempt_id" if spec.fenced or spec.ends_attempt else "NULL::uuid"
    parts = [
        f"""
WITH input AS (
    SELECT * FROM unnest({columns}) AS i({aliases})
), locked AS (
    SELECT j.id, j.state AS from_state, j.delivery_state AS from_delivery,
           j.current_attempt_id AS held_attempt_id, i.*
      FROM jobs AS j
      JOIN input AS i ON i.job_id = j.id
     WHERE {_OWNER}
     ORDER BY j.id
       {lock}
), moved AS (
    UPDATE jobs AS j
       SET {sets}
      FROM locked AS i
     WHERE j.id = i.id
       -- The row as locked is the row as updated (see Executor.apply).
       AND j.state = i.from_state
       AND j.delivery_state = i.from_delivery
       AND j.current_attempt_id IS NOT DISTINCT FROM i.held_attempt_id
       AND {" AND ".join(_conditions(spec))}
 RETURNING j.*, i.from_state AS moved_from, {held} AS moved_attempt_id,
           i.error AS step_error, i.data AS step_data, i.note AS step_note,
           i.event_id AS step_event_id, {NOW} AS observed_at
)"""
    ]
    if spec.ends_attempt is not None:
        charged = ", charged = 0" if Effect.UNCHARGE in spec.effects else ""
        parts.append(f""", ended AS (
    UPDATE attempts AS a
       SET outcome = '{spec.ends_attempt}', ended_at = {NOW}, error = moved.step_error{charged}
      FROM moved
     WHERE a.id = moved.moved_attempt_id
)""")
    elif Effect.EXTEND_LEASE in spec.effects:
        parts.append(""", extended AS (
    UPDATE attempts AS a
       SET lease_expires_at = moved.lease_expires_at, heartbeat_at = moved.heartbeat_at
      FROM moved
     WHERE a.id = moved.current_attempt_id
)""")
    if spec.records:
        parts.append(f""", recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id, event_id, note, data)
    SELECT id, {NOW}, '{spec.name}', moved_from, state, reason, CAST(:actor AS text),
           moved_attempt_id, step_event_id, step_note, step_data
      FROM moved
)""")
    parts.append(
        "\nSELECT * FROM moved"
        if full_rows
        else "\nSELECT id, state, version, moved_from, moved_attempt_id, observed_at,"
        " kind, created_at, finished_at FROM moved"
    )
    return text("".join(parts))


def selected_writes(name: TransitionName, selection: str, *, lead: str = "") -> str:
    """The head of a statement that makes ``name`` on the rows ``selection`` picks (the
    claim): ``WITH [<lead>,] picked AS (<selection>), moved AS (...), ...`` -- the caller
    appends its ``SELECT ... FROM moved``.

    ``selection`` is the body of a ``SELECT id ...`` of locked ``jobs`` rows (WHICH
    rows, in which order), and ``lead`` the CTEs it reads (the claim's lanes and keys,
    and the write that moves the visited lanes back): both are the caller's. Everything
    after it comes from the declaration, as in :func:`statement`: ``moved`` (the
    ``UPDATE`` of its one source state; under READ COMMITTED a row changed since it was
    picked is re-checked and drops out), ``opened`` (the new attempt's row,
    :attr:`Effect.OPEN_ATTEMPT`) and ``recorded`` (one history row per moved job)."""
    spec = TRANSITIONS[name]
    [source] = spec.sources
    sets = ",\n           ".join(_sets(spec, source=source))
    parts = [
        f"""
WITH {lead.strip() + ", " if lead else ""}picked AS ({selection}
), moved AS (
    UPDATE jobs AS j
       SET {sets}
      FROM picked
     WHERE j.id = picked.id AND j.state = '{source}'
 RETURNING j.*
)"""
    ]
    if Effect.OPEN_ATTEMPT in spec.effects:
        parts.append(f""", opened AS (
    INSERT INTO attempts (id, job_id, number, worker_id, claimed_at, lease_expires_at,
                          heartbeat_at, outcome)
    SELECT current_attempt_id, id, attempt, worker_id, {NOW}, lease_expires_at,
           heartbeat_at, '{AttemptOutcome.RUNNING}'
      FROM moved
)""")
    if spec.records:
        parts.append(f""", recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, {NOW}, '{spec.name}', '{source}', state, reason, CAST(:actor AS text),
           current_attempt_id
      FROM moved
)""")
    return "".join(parts) + "\n"


def _json(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(dict(value), default=str)


def _jsons(values: Sequence[Mapping[str, Any] | None]) -> list[str | None]:
    """:func:`_json` of each; a document shared by many steps (a batch's one empty
    result) is serialized once."""
    done: dict[int, str | None] = {}
    out: list[str | None] = []
    for value in values:
        key = id(value)  # the values are alive for the whole call: ids stay unique
        if key not in done:
            done[key] = _json(value)
        out.append(done[key])
    return out


def _params(steps: Sequence[Step]) -> dict[str, list[Any]]:
    return {
        "p_job_id": [s.job_id for s in steps],
        "p_attempt_id": [s.attempt_id for s in steps],
        "p_reason": [None if s.reason is None else s.reason.value for s in steps],
        "p_error": _jsons([s.error for s in steps]),
        "p_seconds": [s.seconds for s in steps],
        "p_rule": [s.rule for s in steps],
        "p_stage": [s.stage for s in steps],
        "p_delivery": [None if s.delivery is None else s.delivery.value for s in steps],
        "p_result_ref": _jsons([s.result_ref for s in steps]),
        "p_data": _jsons([s.data for s in steps]),
        "p_note": [s.note for s in steps],
        "p_event_id": [s.event_id for s in steps],
        "p_at": [s.at for s in steps],
    }


# -- running it -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Executor:
    """Runs declared transitions against one clock and lease length."""

    clock: Clock
    lease_seconds: float

    async def apply(
        self,
        conn: AsyncConnection,
        spec: Transition,
        steps: Sequence[Step],
        *,
        actor: Actor,
        owner: str | None = None,
        explain_refusals: bool = True,
        full_rows: bool = True,
    ) -> list[MoveResult]:
        """Apply ``spec`` to every step in ONE statement; one result per step, in order.

        ``owner`` scopes the move to one owner's jobs (another owner's job is "not
        found"). ``explain_refusals=False`` skips the refusal read (a batch caller that
        only needs to know which jobs moved); refused steps then come back as
        ``Rejected(..., STALE_ATTEMPT)`` without a current state. ``full_rows=False``:
        an ``Applied``'s row carries only id, state, version, ``moved_from``,
        ``moved_attempt_id``, ``observed_at``, kind, ``created_at`` and ``finished_at``."""
        if not steps:
            return []
        check_actor(spec, actor)
        targets = set(spec.moves.values())
        for step in steps:
            if step.reason is not None and not any(
                step.reason in STATE_REASONS[t] for t in targets
            ):
                raise ValueError(f"{spec.name}: reason {step.reason} fits none of its targets")

        async def run(batch: Sequence[Step]) -> dict[uuid.UUID, Any]:
            rows = await driver.rows(
                conn,
                statement(spec.name, full_rows=full_rows),
                {
                    **_params(batch),
                    **self.clock.bind(),
                    "actor": str(actor),
                    "owner": owner,
                    "lease_seconds": self.lease_seconds,
                },
            )
            return {row.id: row for row in rows}

        moved = await run(steps)
        # A row another transaction changed after this statement's snapshot was taken
        # but before its lock was granted (a claim racing a cancel) comes out of the
        # locking read with the values of the snapshot, not those it was locked with:
        # the statement then refuses to move it rather than move it from a state (or a
        # delivery) it is no longer in. The lock is held now, so the same steps again,
        # under a fresh snapshot, see the row as it is; what they still refuse is a real
        # refusal.
        again = [s for s in steps if s.job_id not in moved]
        if again:
            moved |= await run(again)
        refused = [s.job_id for s in steps if s.job_id not in moved]
        facts: dict[uuid.UUID, RefusedJobRow] = {}
        if refused and explain_refusals:
            facts = {
                row.id: refused_job_row(row)
                for row in await conn.execute(_REFUSALS, {"job_ids": refused, **self.clock.bind()})
            }
        results: list[MoveResult] = []
        for step in steps:
            row = moved.get(step.job_id)
            if row is not None:
                source = JobState(row.moved_from)
                results.append(Applied(spec.name, source, JobState(row.state), job_row(row)))
            elif not explain_refusals:
                results.append(Rejected(spec.name, RejectReason.STALE_ATTEMPT))
            else:
                results.append(refusal(spec, step, facts.get(step.job_id), owner=owner))
        metrics.record_applied((spec.name, row) for row in moved.values())
        if spec.hands_over:
            results = await self._hand_over(conn, spec, steps, results, actor=actor, owner=owner)
        return results

    async def _hand_over(
        self,
        conn: AsyncConnection,
        spec: Transition,
        steps: Sequence[Step],
        results: list[MoveResult],
        *,
        actor: Actor,
        owner: str | None,
    ) -> list[MoveResult]:
        """The steps refused in a state ``spec`` hands over, made as the transition it
        names when that one's actors include ``actor``: the job and the note go over
        (the declared note when the caller gave none), nothing else of the step."""
        handed: dict[HandOver, list[int]] = {}
        for index, result in enumerate(results):
            if isinstance(result, Rejected) and result.current is not None:
                hand = spec.hands_over.get(result.current)
                other = None if hand is None else TRANSITIONS[hand.transition]
                if hand is not None and other is not None and actor.kind in other.actors:
                    handed.setdefault(hand, []).append(index)
        for hand, indexes in handed.items():
            made = await self.apply(
                conn,
                TRANSITIONS[hand.transition],
                [Step(steps[i].job_id, note=steps[i].note or hand.note) for i in indexes],
                actor=actor,
                owner=owner,
            )
            for index, result in zip(indexes, made, strict=True):
                results[index] = result
        return results

    async def apply_one(
        self,
        conn: AsyncConnection,
        spec: Transition,
        step: Step,
        *,
        actor: Actor,
        owner: str | None = None,
    ) -> MoveResult:
        [result] = await self.apply(conn, spec, [step], actor=actor, owner=owner)
        return result


def check_actor(spec: Transition, actor: Actor) -> None:
    """A move made by an actor its declaration does not name is a programming error
    (roles are answered 403 at the edge long before)."""
    if spec.actors and actor.kind not in spec.actors:
        raise PermissionError(f"{spec.name} is not made by a {actor.kind}")


def refusal(
    spec: Transition, step: Step, row: RefusedJobRow | None, *, owner: str | None
) -> Rejected:
    """Why ``step`` did not move, from the job's row as the refusal read found it: the
    same conditions as the statement's, in the order a caller can act on them."""
    if row is None or (owner is not None and row.owner != owner):
        return Rejected(spec.name, RejectReason.NOT_FOUND)
    current = JobState(row.state)
    if current not in spec.sources:
        return Rejected(spec.name, RejectReason.ILLEGAL, current, row)
    if spec.fenced and (row.current_attempt_id != step.attempt_id or not row.lease_live):
        return Rejected(spec.name, RejectReason.STALE_ATTEMPT, current, row)
    if spec.guard is not None and not getattr(row, _GUARDS[spec.guard][1]):
        return Rejected(spec.name, RejectReason.ILLEGAL, current, row)
    wanted = step.delivery if len(spec.delivery) != 1 else next(iter(spec.delivery))
    if wanted is not None and not spec.delivery_allows(DeliveryState(row.delivery_state), wanted):
        # e.g. publishing a partial package: partial outputs are never published.
        return Rejected(spec.name, RejectReason.ILLEGAL, current, row)
    # Matched every condition yet did not move: a SKIP LOCKED batch passed it over.
    return Rejected(spec.name, RejectReason.STALE_ATTEMPT, current, row)


def held_by(row: JobRow, attempt_id: uuid.UUID) -> bool:
    """Whether ``attempt_id`` still holds the job, from the refusal read's facts: ``row``
    is the job of a :class:`Rejected` that :meth:`Executor.apply` classified (with its
    refusals explained), which carries them."""
    facts = cast("RefusedJobRow", row)
    return (
        facts.current_attempt_id == attempt_id
        and bool(facts.lease_live)
        and JobState(facts.state) in ACTIVE_STATES
    )


__all__ = [
    "Actor",
    "Applied",
    "Executor",
    "MoveResult",
    "RejectReason",
    "Rejected",
    "Step",
    "check_actor",
    "held_by",
    "refusal",
    "selected_writes",
    "statement",
]
