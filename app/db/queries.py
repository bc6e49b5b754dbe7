"""Named SQL that is not a single transition, each with a one-line description.

Where SQL lives (and nowhere else):

* :mod:`atlas_jobs._app.db.moves` -- every transition of a job, generated from its declaration;
* this module -- creation, claiming and the maintenance selections (reaper, sweeper),
  whose literals also come from :mod:`atlas_jobs._app.lifecycle`;
* :mod:`atlas_jobs._app.db.reads` -- reads for the API and the workers (never locking);
* :mod:`atlas_jobs._app.transitions` -- the side tables a move writes with it (stages,
  checkpoints), in the move's transaction;
* :mod:`atlas_jobs._app.apikeys` -- API keys;
* ``app/db/sql/transitions.sql`` -- the text of every statement generated from the
  declarations (the moves, and the creation and claim statements here), for review:
  rendered by :mod:`atlas_jobs._app.db.render_sql` (``make sql``), checked by a test;
* ``app/db/sql/functions.sql`` -- the schema's functions and triggers as the head
  migration leaves them.

States here are interpolated constants from :mod:`atlas_jobs._app.lifecycle`, never input.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    Dialect,
    Integer,
    Text,
    TextualSelect,
    TypeDecorator,
    column,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import NOW_SQL
from atlas_jobs._app.db.moves import selected_writes
from atlas_jobs._app.db.schema import JOB_STATUS_COLUMNS, TZ, jobs, lane_hash
from atlas_jobs._app.fairness import DEFAULT_PRIORITY
from atlas_jobs._app.lifecycle import (
    CANCEL_TOO_LATE,
    TRANSITIONS,
    DeliveryState,
    JobState,
    Reason,
    TransitionName,
)

_NOW = NOW_SQL

# create: new jobs (queued, reason new) and their history rows in ONE statement, for one
# job or a batch. Ids come from the caller so the history rows join on them. Each
# statement comes in two shapes, chosen by the caller (atlas_jobs._app.transitions.requests): a
# batch binds one array per field (``unnest ... WITH ORDINALITY``, rows in batch order); ONE job
# binds scalars -- no arrays to encode in the client (asyncpg checks every element) or to parse and
# unnest in the server, no sort. The answer's rows come in no particular order (no sort either): the
# caller matches them to its batch by id. ``_CREATION_FIELDS`` are the bound fields, in the order of
# the input's columns; ``:p_<field>`` is bound to a value or an array of them -- but a batch's
# inputs, bound as ONE JSON array of them (``_BATCH_DOCUMENT``): encoded in one call in the client
# instead of one per job, and no array of documents for the driver to check element by element.
_CREATION_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("owner", "text"),
    ("kind", "text"),
    ("kind_version", "int"),
    ("input", "jsonb"),
    ("max_attempts", "int"),
    ("max_elapsed_seconds", "int"),
    ("request_id", "text"),
    ("idempotency_key", "text"),
    ("replay_of", "uuid"),
    ("data", "jsonb"),
    ("priority", "smallint"),
    ("concurrency_key", "text"),
    ("concurrency_limit", "int"),
    ("concurrency_rate", "int"),
    ("concurrency_period_seconds", "float8"),
    ("run_at", "timestamptz"),
    ("run_after", "float8"),
    ("start_by", "timestamptz"),
    ("start_within", "float8"),
)
# A job's tags travel as one JSON array per job (a batch's arrays of arrays would be
# flattened by unnest). Only the ``tagged`` shapes bind, write and answer them: a
# creation without tags leaves the column to its default ('{}'), so its statement is
# the one it was before tags existed (and runs on a schema older than the column).
_TAG_FIELD = ("tags", "jsonb")
_TAGS = "ARRAY(SELECT jsonb_array_elements_text(input.tags))"


def _fields(tagged: bool) -> tuple[tuple[str, str], ...]:
    return (*_CREATION_FIELDS, _TAG_FIELD) if tagged else _CREATION_FIELDS


_BATCH_DOCUMENT = "input"
"""The field a batch binds as one JSON array (the batch's documents in batch order)."""


def _batch_input(tagged: bool) -> str:
    """The batch's rows: the fields' arrays zipped in batch order (``ROWS FROM``, as a
    many-argument ``unnest``; a NULL array, a field no job has, pads with NULLs)."""
    fields = _fields(tagged)
    return f"""
    SELECT *
      FROM ROWS FROM ({", ".join(_batch_column(n, t) for n, t in fields)})
           WITH ORDINALITY
           AS i({", ".join(n for n, _ in fields)}, ord)"""


def _batch_column(name: str, sql_type: str) -> str:
    if name == _BATCH_DOCUMENT:
        return f"jsonb_array_elements(CAST(:p_{name} AS jsonb))"
    return f"unnest(CAST(:p_{name} AS {sql_type}[]))"


def _one_input(tagged: bool) -> str:
    return f"""
    SELECT {", ".join(f"CAST(:p_{n} AS {t}) AS {n}" for n, t in _fields(tagged))}"""


def _creation_writes(*, one: bool, by_key: bool = True, tagged: bool = False) -> str:
    in_order = "" if one else "\n     ORDER BY ord"
    # by_key: the history row records the API key that submitted (:actor_key; revision
    # c7d8e9f0a1b2). The shape without it serves creations no key made (schedules,
    # tests, tools) and so runs on a schema older than that column, too.
    key_column, key_value = (
        (", key_id", ",\n           CAST(:actor_key AS uuid)") if by_key else ("", "")
    )
    # when: the job's not-before (run_at, or now + run_after seconds; one in the past is
    # now; NULL: no delay) and start deadline (start_by, or now + start_within). The job
    # is claimable from its not-before, and its elapsed-time budget starts then.
    tag_column, tag_value = (", tags", f", {_TAGS}") if tagged else ("", "")
    # job_tags: the search's side table (one row per tag, schema.job_tags), written here
    # with the job and never again -- tags are set once, so no transition touches it.
    job_tags = (
        """, tagged AS (
    INSERT INTO job_tags (tag, job_id)
    SELECT DISTINCT t.tag, c.id FROM created AS c CROSS JOIN LATERAL unnest(c.tags) AS t(tag)
)"""
        if tagged
        else ""
    )
    return f"""
created AS (
    INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                      max_elapsed_seconds, created_at, updated_at, available_at,
                      budget_started_at, request_id, idempotency_key, replay_of, priority,
                      concurrency_key, concurrency_limit, concurrency_rate,
                      concurrency_period_seconds, run_at, start_by{tag_column})
    SELECT id, owner, kind, kind_version, input, '{JobState.QUEUED}', '{Reason.NEW}',
           max_attempts, max_elapsed_seconds, {_NOW}, {_NOW},
           COALESCE(when_.not_before, {_NOW}), COALESCE(when_.not_before, {_NOW}),
           request_id, idempotency_key, replay_of, COALESCE(priority, {DEFAULT_PRIORITY}),
           COALESCE(concurrency_key, ''), concurrency_limit, concurrency_rate,
           concurrency_period_seconds, when_.not_before,
           when_.start_by{tag_value}
      FROM input
           CROSS JOIN LATERAL (
               SELECT CASE WHEN input.run_at IS NOT NULL OR input.run_after IS NOT NULL
                           THEN greatest(COALESCE(input.run_at, {_NOW}
                                                  + make_interval(secs => input.run_after)),
                                         {_NOW})
                      END AS not_before,
                      COALESCE(input.start_by,
                               {_NOW} + make_interval(secs => input.start_within)) AS start_by
           ) AS when_{in_order}
 RETURNING {_returned(tagged)}, {_NOW} AS observed_at
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             event_id, note, data{key_column})
    SELECT i.id, {_NOW}, CAST(:transition AS text), NULL, '{JobState.QUEUED}',
           '{Reason.NEW}', CAST(:actor AS text), i.request_id, CAST(:note AS text),
           i.data{key_value}
      FROM input AS i
){job_tags}"""


# The creation statements answer with typed columns (``TextClause.columns``): SQLAlchemy
# then builds the result's metadata once, with the compiled statement, instead of merging
# the cursor's description of untyped columns into new metadata on every execution.
# Typed columns are matched by position: every answer spells them out in this order.
# They are the status columns (JOB_STATUS_COLUMNS), all that any caller reads of a job
# it created (the 202's body and headers; the id to link a schedule's fire or a webhook
# to): not the input it sent nor the empty result reference, documents the client would
# decode for nothing. (The figures: docs/performance.md, "Figures behind the code".)
# Every shape answers them all, ``tags`` included (an untagged shape only binds none).
def _status_columns(tagged: bool) -> tuple[Any, ...]:
    return JOB_STATUS_COLUMNS


class _DriverTextArray(TypeDecorator[list[str]]):
    """``text[]`` as the driver answers it: asyncpg already decodes it to a list of
    ``str``, so the answer of a creation (one row per job) skips SQLAlchemy's per-row
    array processing."""

    impl = ARRAY(Text)
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


_CREATED_TAGS = column("tags", _DriverTextArray())


def _created_columns(tagged: bool) -> tuple[Any, ...]:
    status = tuple(_CREATED_TAGS if c.name == "tags" else c for c in _status_columns(tagged))
    return (*status, column("observed_at", TZ))


def _returned(tagged: bool) -> str:
    return ", ".join(c.name for c in _status_columns(tagged))


def _created(tagged: bool) -> str:
    return ", ".join(f"created.{c.name}" for c in _created_columns(tagged))


@dataclass(frozen=True, slots=True)
class Creation:
    """One creation statement in its shapes: ``one`` binds one job's fields as scalars,
    a batch as arrays (see ``_CREATION_FIELDS``); ``by_key`` records the submitting API
    key (``:actor_key``) on the history rows; ``tagged`` writes the jobs' tags."""

    shapes: Mapping[tuple[bool, bool, bool], TextualSelect]

    def shape(self, *, one: bool, by_key: bool, tagged: bool = False) -> TextualSelect:
        return self.shapes[(one, by_key, tagged)]

    @property
    def one(self) -> TextualSelect:
        return self.shape(one=True, by_key=False)

    @property
    def batch(self) -> TextualSelect:
        return self.shape(one=False, by_key=False)


def _create(*, one: bool, by_key: bool, tagged: bool) -> TextualSelect:
    return text(f"""
WITH input AS ({_one_input(tagged) if one else _batch_input(tagged)}
), {_creation_writes(one=one, by_key=by_key, tagged=tagged)}
SELECT {_created(tagged)} FROM created
""").columns(*_created_columns(tagged))


def _creation(build: Callable[..., TextualSelect]) -> Creation:
    return Creation(
        {
            (one, by_key, tagged): build(one=one, by_key=by_key, tagged=tagged)
            for one in (True, False)
            for by_key in (True, False)
            for tagged in (True, False)
        }
    )


CREATE = _creation(_create)


# create_admitted: CREATE under the per-owner admission cap -- THE admission rule (see
# atlas_jobs._app.services.admission): the batch (every job of one owner, :admit_owner) is made only
# if the owner's unfinished jobs plus the batch stay within :admit_cap, else nothing is.
# atlas_admission_count (migrations e8f9a0b1c2d3, c4d5e6f7a8b9) takes the owner's
# admission lock, held to the end of the transaction, then sums the owner's rows of
# owner_backlog (the count of its unfinished jobs, kept exact by triggers on jobs; at
# most :admit_cap is reported) with a snapshot taken after the lock was granted (a
# VOLATILE function's queries each get a fresh one), so concurrent creations of one
# owner cannot both take the last place -- also when this statement is its own transaction
# (autocommit): the lock then ends with it. The count is one InitPlan, run before any
# row is written. Answer: the created rows, each with the count; refused, ONE row with
# ``id`` NULL and only ``admission_unfinished`` (the count).
def _create_admitted(*, one: bool, by_key: bool, tagged: bool) -> TextualSelect:
    size = "1" if one else "cardinality(CAST(:p_id AS uuid[]))"
    return text(f"""
WITH admission AS (
    SELECT atlas_admission_count(CAST(:admit_owner AS text), CAST(:admit_cap AS integer))
           AS unfinished
), input AS ({_one_input(tagged) if one else _batch_input(tagged)}
     WHERE (SELECT unfinished FROM admission) + {size} <= CAST(:admit_cap AS integer)
), {_creation_writes(one=one, by_key=by_key, tagged=tagged)}
SELECT {_created(tagged)}, admission.unfinished AS admission_unfinished
  FROM admission LEFT JOIN created ON true
""").columns(*_created_columns(tagged), column("admission_unfinished", Integer))


CREATE_ADMITTED = _creation(_create_admitted)


# create_keyed: ONE job with an Idempotency-Key in ONE statement (its own transaction
# when run in autocommit) -- what CREATE_ADMITTED does, behind the key's two guards:
# * guard: the key's in-flight lock (the one IDEMPOTENCY_LOCKS takes, same scope), try-only:
#   not taken (``key_free`` false) -> nothing else runs; the caller answers 409;
# * admission: the per-owner rule as in CREATE_ADMITTED (no count when :admit_cap is NULL);
# * keyed: the key row, inserted ON CONFLICT DO NOTHING only when admitted. The job is
#   written only when the key row was (EXISTS keyed): a key already stored creates nothing
#   -- the caller reads it (reads.idempotency_keys_seen) and replays its job or answers 422.
#   ON CONFLICT sees a key committed after this statement's snapshot was taken (READ
#   COMMITTED), and one in flight holds the guard, so a key never gets two jobs.
# The key row references the job written later in the same statement: foreign keys are
# checked at the end of the statement. Answer: ONE row with ``key_free``,
# ``admission_unfinished`` (NULL without the guard) and the created job's columns (``id``
# NULL when nothing was created). One job: its fields are bound as scalars.
def _create_keyed(tagged: bool) -> TextualSelect:
    return text(f"""
WITH guard AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended(CAST(:key_scope AS text), 0)) AS free
), admission AS (
    SELECT CASE WHEN NOT guard.free THEN NULL
                WHEN CAST(:admit_cap AS integer) IS NULL THEN 0
                ELSE atlas_admission_count(CAST(:admit_owner AS text),
                                           CAST(:admit_cap AS integer))
           END AS unfinished
      FROM guard
), keyed AS (
    INSERT INTO idempotency_keys (owner, key, fingerprint, job_id)
    SELECT CAST(:admit_owner AS text), CAST(:key AS text), CAST(:fingerprint AS text),
           CAST(:p_id AS uuid)
      FROM admission
     WHERE admission.unfinished + 1
           <= COALESCE(CAST(:admit_cap AS integer), admission.unfinished + 1)
        ON CONFLICT DO NOTHING
    RETURNING job_id
), input AS ({_one_input(tagged)}
     WHERE EXISTS (SELECT 1 FROM keyed)
), {_creation_writes(one=True, tagged=tagged)}
SELECT guard.free AS key_free, admission.unfinished AS admission_unfinished, {_created(tagged)}
  FROM guard CROSS JOIN admission LEFT JOIN created ON true
""").columns(
        column("key_free", Boolean),
        column("admission_unfinished", Integer),
        *_created_columns(tagged),
    )


CREATE_KEYED = _create_keyed(tagged=False)
CREATE_KEYED_TAGGED = _create_keyed(tagged=True)

# late_cancel: a cancel that found the job finished changes nothing but is recorded
# (from = to = the final state), so the late request is visible in the history. The same
# actor repeating it while it is still the job's last history row only counts up
# (data.count): a client retrying a cancel cannot grow the history without bound. The
# caller holds the job row lock (the cancel's), so repeats are serialized.
LATE_CANCEL = text(f"""
WITH last AS (
    SELECT seq
      FROM job_history
     WHERE job_id = :job_id
     ORDER BY seq DESC
     LIMIT 1
), repeated AS (
    UPDATE job_history AS h
       SET data = jsonb_build_object(
               'count', COALESCE(CAST(h.data ->> 'count' AS integer), 1) + 1,
               'last_at', {_NOW})
      FROM last
     WHERE h.job_id = :job_id
       AND h.seq = last.seq
       AND h.reason = '{CANCEL_TOO_LATE}'
       AND h.actor = :actor
 RETURNING h.seq
)
INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                         event_id, note)
SELECT :job_id, {_NOW}, '{TransitionName.REQUEST_CANCEL}', :state, :state,
       '{CANCEL_TOO_LATE}', :actor, :event_id, :note
 WHERE NOT EXISTS (SELECT 1 FROM repeated)
""")

# claim: queued -> running for up to :limit jobs, each with a new attempt id (the fencing
# token), an attempts row and a history row, in ONE statement and one short transaction.
# CLAIM_SELECTION says WHICH rows; what a claim writes on them (the job row, the new
# attempt's row, the history row) is generated by the executor from the ``claim``
# declaration (atlas_jobs._app.db.moves.selected_writes).
#
# * Attempt ids are time-ordered (atlas_uuid_v7, revision f1a2b3c4d5e6), like job ids
#   (atlas_jobs._app.ids): the new attempts rows append at the right edge of pk_attempts.
#
# WHICH jobs (``_CLAIM_SELECTION``, atlas_jobs._app.fairness) -- fair share across lanes (an
# owner's queued jobs of one kind@version and concurrency key), priority within a lane,
# concurrency keys -- at a cost set by the batch, not by the backlog:
# * lanes: up to :limit lanes this worker has handlers for, least-served first (the
#   ``ix_claim_lanes_served`` walk of a table of one row per lane); a lane whose key is at
#   its limit (or out of start tokens) as last committed, or with no claimable job (one
#   ``ix_jobs_lanes`` probe in the index's order, kept one by OFFSET 0: emptied, or only
#   retries waiting out their backoff), is passed over, not taken; so is a paused kind
#   (kind_pauses: every version, 0, or one), in the claim itself, so no process claims it
#   once the pause has committed, whatever its cache;
# * keys: the rows of those lanes' keys, locked FOR UPDATE SKIP LOCKED -- a locked row reads
#   its latest committed version, so what claims counted up (``running``) and the start
#   tokens are exact, and no other claim can spend the room before this one commits; a key
#   another claim holds is skipped for now. Ends never lock the key's row (they count up
#   ``concurrency_key_releases``, KEY_RUNNING): read with this statement's snapshot, a
#   release committed since is missed, so ``room`` (limit - running) may be short for a
#   moment, never too large;
# * a job never started past its start deadline (start_by) is never claimed, in the lanes'
#   probe and the candidates' scan: the database clock decides, whenever the sweeper gets
#   to end it (miss_start);
# * candidates: per open lane in that order, an ``ix_jobs_lanes`` scan (priority DESC,
#   available_at, seq) of at most its key's room, FOR UPDATE SKIP LOCKED so concurrent
#   workers never wait on each other and never pick the same row; the nested loop stops
#   after :limit rows. The handler filter is the lanes': a job no running worker can
#   handle stays visibly queued;
# * picked: at most ``room`` jobs per key when several lanes share one (only keyed
#   candidates are numbered: the jobs of lanes without a key are taken as they are);
# * turned: each lane visited (up to the last one that gave a job; all of them when the
#   batch was not filled) moves back by the jobs it gave (at least 1) over its owner's
#   share (``gave``: the candidates counted per lane, so each lane probes its owner's
#   share once) -- only lanes no other claim holds (SKIP LOCKED: no waiting; the other claim
#   moves it).
# The UPDATE re-checks state = 'queued': under READ COMMITTED a row locked after a
# concurrent change is re-evaluated, and a changed row simply drops out. ``running`` of a
# key is counted up by the jobs update trigger in this statement, under the key's row lock
# (which folds in the releases committed by then).
_KEY_ROOM = f"""(CASE
               WHEN k.rate IS NULL THEN 2147483647
               ELSE floor(LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                     * extract(epoch FROM {_NOW} - COALESCE(k.refilled_at, {_NOW}))
                     / k.period_seconds))::integer
           END)"""
_KEY_LIMIT = "COALESCE(k.max_running, k.declared_limit, 2147483647)"
# The jobs of key ``k`` running now: what claims counted up on its row, less the releases
# (ends, expired leases, deletions: concurrency_key_releases, one slot per connection)
# not yet folded into it (``folded``: their sum a claim already took off ``running``).
# Releases read with an older snapshot than the row only make it larger: never too small.
KEY_RUNNING = """(k.running - GREATEST(COALESCE((SELECT sum(c.released)
                                                  FROM concurrency_key_releases AS c
                                                 WHERE c.key = k.key), 0)
                                  - k.folded, 0))::integer"""
CLAIM_LEAD = f"""
lanes AS MATERIALIZED (
    SELECT l.owner, l.kind, l.kind_version, l.concurrency_key, l.served
      FROM claim_lanes AS l
     WHERE (l.kind || '@' || l.kind_version) = ANY(CAST(:handlers AS text[]))
       AND (l.concurrency_key = ''
            OR EXISTS (SELECT 1 FROM concurrency_keys AS k
                        WHERE k.key = l.concurrency_key
                          AND {KEY_RUNNING} < {_KEY_LIMIT} AND {_KEY_ROOM} > 0))
       AND EXISTS (SELECT 1 FROM jobs AS q
                    WHERE {lane_hash("q")} = {lane_hash("l")}
                      AND q.owner = l.owner AND q.kind = l.kind
                      AND q.kind_version = l.kind_version
                      AND q.concurrency_key = l.concurrency_key
                      AND q.state = '{JobState.QUEUED}' AND q.available_at <= {_NOW}
                      AND (q.start_by IS NULL OR q.start_by > {_NOW} OR q.attempt > 0)
                    ORDER BY q.priority DESC, q.available_at, q.seq
                   OFFSET 0 LIMIT 1)
       AND NOT EXISTS (SELECT FROM kind_pauses AS p
                        WHERE p.kind = l.kind AND p.version IN (0, l.kind_version))
     ORDER BY l.served
     LIMIT :limit
), keys AS MATERIALIZED (
    SELECT k.key, GREATEST(LEAST({_KEY_LIMIT} - {KEY_RUNNING}, {_KEY_ROOM}), 0) AS room
      FROM concurrency_keys AS k
     WHERE k.key IN (SELECT concurrency_key FROM lanes WHERE concurrency_key <> '')
       FOR NO KEY UPDATE SKIP LOCKED
), open AS MATERIALIZED (
    SELECT l.owner, l.kind, l.kind_version, l.concurrency_key,
           row_number() OVER (ORDER BY l.served) AS pos,
           LEAST(COALESCE(k.room, :limit), :limit) AS room
      FROM lanes AS l LEFT JOIN keys AS k ON k.key = l.concurrency_key
     WHERE l.concurrency_key = '' OR k.room > 0
     ORDER BY l.served
), candidates AS MATERIALIZED (
    SELECT c.id, c.seq, o.concurrency_key, o.pos
      FROM open AS o
     CROSS JOIN LATERAL (
        SELECT j.id, j.seq
          FROM jobs AS j
         WHERE {lane_hash("j")} = {lane_hash("o")}
           AND j.owner = o.owner
           AND j.kind = o.kind
           AND j.kind_version = o.kind_version
           AND j.concurrency_key = o.concurrency_key
           AND j.state = '{JobState.QUEUED}'
           AND j.available_at <= {_NOW}
           AND (j.start_by IS NULL OR j.start_by > {_NOW} OR j.attempt > 0)
         ORDER BY j.priority DESC, j.available_at, j.seq
         LIMIT o.room
           FOR UPDATE SKIP LOCKED
     ) AS c
     LIMIT :limit
), gave AS (
    SELECT c.pos, count(*) AS jobs FROM candidates AS c GROUP BY c.pos
), visited AS (
    SELECT o.owner, o.kind, o.kind_version, o.concurrency_key,
           GREATEST(COALESCE(g.jobs, 0), 1)::float8 / COALESCE(s.share, 1) AS step
      FROM open AS o
      LEFT JOIN gave AS g ON g.pos = o.pos
      LEFT JOIN owner_shares AS s ON s.owner = o.owner
     WHERE o.pos <= (SELECT CASE WHEN count(*) < :limit THEN :limit ELSE max(pos) END
                       FROM candidates)
), held AS (
    SELECT t.owner, t.kind, t.kind_version, t.concurrency_key
      FROM claim_lanes AS t
      JOIN visited AS v
        ON (t.owner, t.kind, t.kind_version, t.concurrency_key)
           = (v.owner, v.kind, v.kind_version, v.concurrency_key)
       FOR NO KEY UPDATE OF t SKIP LOCKED
), turned AS (
    UPDATE claim_lanes AS l
       SET served = l.served + v.step
      FROM held AS h
      JOIN visited AS v
        ON (h.owner, h.kind, h.kind_version, h.concurrency_key)
           = (v.owner, v.kind, v.kind_version, v.concurrency_key)
     WHERE (l.owner, l.kind, l.kind_version, l.concurrency_key)
           = (h.owner, h.kind, h.kind_version, h.concurrency_key)
)"""
CLAIM_SELECTION = """
    SELECT c.id FROM candidates AS c WHERE c.concurrency_key = ''
    UNION ALL
    SELECT c.id
      FROM (SELECT c.id, c.concurrency_key,
                   row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.pos, c.seq) AS nth
              FROM candidates AS c
             WHERE c.concurrency_key <> '') AS c
      JOIN keys AS k ON k.key = c.concurrency_key
     WHERE c.nth <= k.room"""

_CLAIM_WRITES = selected_writes(TransitionName.CLAIM, CLAIM_SELECTION, lead=CLAIM_LEAD)
CLAIM = text(f"{_CLAIM_WRITES}SELECT *, {_NOW} AS observed_at FROM moved ORDER BY seq")

# claim_to_run: the same claim, answering only what a worker needs to start each attempt
# (atlas_jobs._app.db.records.ClaimedJob, and the claim metrics: state, updated_at, available_at).
# The result columns are declared, so the result's metadata is built once per statement
# instead of from the cursor on every claim, and no column a worker never reads (the
# other jsonb documents among them) is sent or decoded.
_CLAIM_TO_RUN_COLUMNS = (
    "id",
    "current_attempt_id",
    "attempt",
    "charged_attempts",
    "max_attempts",
    "max_elapsed_seconds",
    "kind",
    "kind_version",
    "owner",
    "input",
    "state",
    "updated_at",
    "available_at",
)
CLAIM_TO_RUN = text(
    f"{_CLAIM_WRITES}SELECT {', '.join(_CLAIM_TO_RUN_COLUMNS)} FROM moved ORDER BY seq"
).columns(*(jobs.c[name] for name in _CLAIM_TO_RUN_COLUMNS))
# The position of each column in the rows of the claim the claimer sends to the driver
# (atlas_jobs._app.db.driver).
CLAIM_TO_RUN_AT = {name: position for position, name in enumerate(_CLAIM_TO_RUN_COLUMNS)}

# expired_leases: jobs whose lease ran out, locked for the reaper in a bounded batch,
# with the facts of their retry budget on database time.
# SKIP LOCKED lets several reapers (one per worker process) share the work; a job whose
# worker is mid-transition is skipped now and seen on the next pass.
EXPIRED_LEASES = text(f"""
SELECT id, state, kind, attempt, charged_attempts, max_attempts, max_elapsed_seconds,
       extract(epoch FROM {_NOW} - budget_started_at)::float8 AS elapsed_seconds
  FROM jobs
 WHERE state IN ('{JobState.RUNNING}', '{JobState.CANCEL_REQUESTED}')
   AND lease_expires_at <= {_NOW}
 ORDER BY lease_expires_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# lease_facts: the same facts for named jobs, locked (a rescue of one job; the budget of
# an attempt that ended with a recoverable error).
LEASE_FACTS = text(f"""
SELECT id, state, kind, attempt, charged_attempts, max_attempts, max_elapsed_seconds,
       current_attempt_id,
       (lease_expires_at <= {_NOW}) IS TRUE AS lease_expired,
       extract(epoch FROM {_NOW} - budget_started_at)::float8 AS elapsed_seconds
  FROM jobs
 WHERE id = ANY(CAST(:job_ids AS uuid[]))
 ORDER BY id
   FOR UPDATE
""")

# lock_for_publication: the job row lock that serializes publication against
# cancellation, taken only while the attempt still holds a live lease.
LOCK_FOR_PUBLICATION = text(f"""
SELECT id
  FROM jobs
 WHERE id = :job_id
   AND current_attempt_id = :attempt_id
   AND state IN ({", ".join(f"'{s}'" for s in sorted(TRANSITIONS[TransitionName.PUBLISH].sources))})
   AND lease_expires_at > {_NOW}
   FOR UPDATE
""")

# record_unit: a unit of a declared stage is done -- its checkpoint (once per unit,
# whichever attempt finishes it) and the stage's count, in one statement. A stage
# without a plan records nothing, so `done` always equals the distinct checkpoints.
RECORD_UNIT = text(f"""
WITH planned AS (
    SELECT 1 FROM job_stages WHERE job_id = CAST(:job_id AS uuid) AND name = CAST(:stage AS text)
), recorded AS (
    INSERT INTO job_checkpoints (job_id, stage, unit_name, attempt_id, data)
    SELECT CAST(:job_id AS uuid), CAST(:stage AS text), CAST(:unit_name AS text),
           CAST(:attempt_id AS uuid), CAST(:data AS jsonb)
      FROM planned
    ON CONFLICT DO NOTHING
    RETURNING 1
)
UPDATE job_stages
   SET done = done + 1, updated_at = {_NOW}
 WHERE job_id = CAST(:job_id AS uuid) AND name = CAST(:stage AS text)
   AND EXISTS (SELECT 1 FROM recorded)
""")

# prune_lanes: claim lanes with no queued job left, removed for the sweeper (at most
# :limit) by atlas_prune_lanes -- under each owner's lanes lock, re-checked after it.
PRUNE_LANES = text("SELECT atlas_prune_lanes(CAST(:limit AS integer))")

# expired_results: published results whose retention passed, for the sweeper.
EXPIRED_RESULTS = text(f"""
SELECT id, owner
  FROM jobs
 WHERE delivery_state = 'available'
   AND delivery_expires_at <= {_NOW}
 ORDER BY delivery_expires_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# prune_finished: finished jobs past their retention, deleted in a bounded batch with
# everything that belongs to them: stages, checkpoints, idempotency keys go by ON DELETE
# CASCADE; the history and the attempts have no foreign key (revisions f1a2b3c4d5e6,
# 5e8b2d4f6a17) and go by PRUNE_RECORDS, run next in the same transaction, so a job's
# history and attempts live exactly as long as the job.
#
# * finished_at IS NOT NULL is the terminal states (CHECK terminal_iff_finished), and
#   with delivery_state <> 'available' the predicate of ix_jobs_prunable: the walk
#   never sees unfinished work, oldest first.
# * A result still downloadable (delivery 'available') is never pruned, whatever the
#   clock says: the sweeper must have expired it (and removed its files) first.
# * A job some replay points at (replay_of, no cascade) stays until its replays are gone.
#   OFFSET 0 keeps that NOT EXISTS a per-row probe of ix_jobs_replay_of: pulled up into
#   an anti-join, the planner may hash it and then sort every prunable row before LIMIT.
# * The ids are handed to the DELETE as an array: primary-key lookups, never a join
#   that could scan the table.
# * SKIP LOCKED: a row a late cancel or a replay holds is left for the next pass; both
#   lock the job row first, so they either see it gone (404) or make the pruner skip it.
# * The job's job_tags rows go in the same statement, each found by job_tags' primary key
#   (its tags, its id; the LATERAL ... OFFSET 0 keeps that a per-job probe, never a hash
#   of the whole table) and deleted by its row address. They were written with the job,
#   so this snapshot sees them all; only the pruner, holding the job's lock, deletes them.
PRUNE_FINISHED = text(f"""
WITH doomed AS (
    SELECT id
      FROM jobs AS j
     WHERE finished_at IS NOT NULL
       AND delivery_state <> '{DeliveryState.AVAILABLE.value}'
       AND finished_at <= {_NOW} - make_interval(secs => :keep_seconds)
       AND NOT EXISTS (SELECT 1 FROM jobs AS r WHERE r.replay_of = j.id OFFSET 0)
     ORDER BY finished_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobs
     WHERE id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING id, tags
), untagged AS (
    DELETE FROM job_tags
     WHERE ctid = ANY(ARRAY(
               SELECT t.ctid
                 FROM gone
                      CROSS JOIN LATERAL (
                          SELECT ctid FROM job_tags
                           WHERE tag = ANY(gone.tags) AND job_id = gone.id
                          OFFSET 0
                      ) AS t))
)
SELECT id FROM gone
""")


def _delete_of_pruned(table: str) -> str:
    """``DELETE`` of ``table``'s rows of the jobs in ``doomed``: one key probe per job."""
    return f"""DELETE FROM {table}
     WHERE ctid = ANY(ARRAY(
               SELECT r.ctid
                 FROM doomed
                      CROSS JOIN LATERAL (
                          SELECT ctid FROM {table} WHERE job_id = doomed.id OFFSET 0
                      ) AS r))"""


# prune_records: the history and the attempts of the jobs PRUNE_FINISHED just deleted
# (their ids), in its transaction. A statement of its own, not CTEs of PRUNE_FINISHED: a
# history row is written only under its job's row lock (a move's UPDATE, a late cancel's
# or late decision's FOR UPDATE), an attempt only by the claim's UPDATE of its job, and
# one committed after PRUNE_FINISHED's snapshot but before its lock would be invisible to
# a CTE of that statement (an orphan forever). This statement's snapshot is taken with
# the jobs already deleted and locked: every row of theirs is committed and seen, and
# none can come after (the writer finds no job). Each id is a probe of a key that leads
# with job_id (pk_job_history, uq_attempts_job_id_number), kept one by LATERAL ...
# OFFSET 0, and the rows found are deleted by their addresses, as PRUNE_FINISHED deletes
# job_tags. With ``job_id = ANY(:job_ids)`` instead, a worker session's generic plan,
# made when the statistics counted few jobs per history, scanned the whole history and
# tested every row against every id (470 ms a batch at 125,000 rows; the pruner fell
# behind the work it had to delete). Neither table's rows change once their job is
# finished: an address read here is the row deleted.
PRUNE_RECORDS = text(f"""
WITH doomed AS (
    SELECT unnest(CAST(:job_ids AS uuid[])) AS id
), unattempted AS (
    {_delete_of_pruned("attempts")}
)
{_delete_of_pruned("job_history")}
""")

# expired_waits: waiting jobs whose deadline passed, locked in a bounded batch for the
# sweeper, which applies each job's rule (fail or escalate to unresolved).
EXPIRED_WAITS = text(f"""
SELECT id, wait_on_deadline
  FROM jobs
 WHERE state = '{JobState.WAITING.value}'
   AND wait_deadline_at <= {_NOW}
 ORDER BY wait_deadline_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# missed_starts: queued jobs never claimed by their start deadline, locked in a bounded
# batch for the sweeper (miss_start), on ix_jobs_start_by.
MISSED_STARTS = text(f"""
SELECT id
  FROM jobs
 WHERE state = '{JobState.QUEUED.value}'
   AND attempt = 0
   AND start_by IS NOT NULL
   AND start_by <= {_NOW}
 ORDER BY start_by
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# idempotency_locks: the in-flight guard of each Idempotency-Key, per owner, held until
# the creating transaction ends; try-only (never waits, so never deadlocks), so a racing
# request is answered 409 at once. One statement for one key or a batch's keys: false
# when any of them is held elsewhere (the locks taken meanwhile go with the rollback).
IDEMPOTENCY_LOCKS = text("""
SELECT bool_and(pg_try_advisory_xact_lock(hashtextextended(scope, 0)))
  FROM unnest(CAST(:scopes AS text[])) AS scope
""")

# remember_idempotency_keys: the key rows, in the transaction that created their jobs.
REMEMBER_IDEMPOTENCY_KEYS = text("""
INSERT INTO idempotency_keys (owner, key, fingerprint, job_id)
SELECT CAST(:owner AS text), i.key, i.fingerprint, i.job_id
  FROM unnest(CAST(:keys AS text[]), CAST(:fingerprints AS text[]), CAST(:job_ids AS uuid[]))
       AS i(key, fingerprint, job_id)
""")


async def try_idempotency_locks(conn: AsyncConnection, owner: str, keys: Sequence[str]) -> bool:
    """Take every key's in-flight lock, or report that another request holds one."""
    scopes = [f"{owner}:{key}" for key in sorted(keys)]
    return bool(await conn.scalar(IDEMPOTENCY_LOCKS, {"scopes": scopes}))


async def remember_idempotency_keys(
    conn: AsyncConnection, owner: str, keys: Sequence[tuple[str, str, uuid.UUID]]
) -> None:
    """Store ``(key, fingerprint, job_id)`` rows for the jobs just created."""
    await conn.execute(
        REMEMBER_IDEMPOTENCY_KEYS,
        {
            "owner": owner,
            "keys": [key for key, _, _ in keys],
            "fingerprints": [digest for _, digest, _ in keys],
            "job_ids": [job_id for _, _, job_id in keys],
        },
    )


# -- index upkeep of jobs (atlas_jobs._workers.reindexer)
# ---------------------------------------------- One worker process at a time rebuilds: a
# session-level advisory lock on the reindexer's own connection (try-only: another process already
# at it means nothing to do here). vacuum: the hot tables with at least :dead_rows dead row versions
# (the statistics' count, reported by every backend within a second of its writes), most dead first,
# for workers.vacuumer; one process at a time, under its own session-level advisory lock.
VACUUM_LOCK = text("SELECT pg_try_advisory_lock(hashtextextended('atlas.vacuum.hot', 0))")
VACUUM_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended('atlas.vacuum.hot', 0))")
DEAD_ROWS = text("""
SELECT relname AS name, n_dead_tup AS dead
  FROM pg_stat_user_tables
 WHERE relid IN (to_regclass('jobs'), to_regclass('job_history'), to_regclass('attempts'))
   AND n_dead_tup >= :dead_rows
 ORDER BY n_dead_tup DESC
""")

REINDEX_LOCK = text("SELECT pg_try_advisory_lock(hashtextextended('atlas.reindex.jobs', 0))")
REINDEX_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended('atlas.reindex.jobs', 0))")

# bloated_job_indexes: the valid B-tree indexes of ``jobs`` larger than both
# :min_bytes and :bytes_per_row per live row of the table (the larger of the statistics'
# live count and the planner's estimate: right after a crash the statistics restart at
# zero). A partial index holds at most that many entries, so the bound is generous for
# it. Sizes are read from the catalog and the storage manager: no scan of anything.
BLOATED_JOB_INDEXES = text("""
SELECT CAST(i.indexrelid AS regclass)::text AS name,
       pg_relation_size(i.indexrelid) AS bytes,
       CAST(greatest(s.n_live_tup, t.reltuples, 0) AS bigint) AS live_rows
  FROM pg_index AS i
  JOIN pg_class AS t ON t.oid = i.indrelid
  JOIN pg_class AS x ON x.oid = i.indexrelid
  JOIN pg_am AS am ON am.oid = x.relam
  JOIN pg_stat_all_tables AS s ON s.relid = i.indrelid
 WHERE i.indrelid = to_regclass('jobs')
   AND i.indisvalid AND i.indisready AND am.amname = 'btree'
   AND x.relname !~ '_cc(new|old)[0-9]*$'
   AND pg_relation_size(i.indexrelid)
       > greatest(CAST(:min_bytes AS bigint),
                  CAST(:bytes_per_row AS bigint) * greatest(s.n_live_tup, t.reltuples, 0))
 ORDER BY pg_relation_size(i.indexrelid) DESC
""")

# rebuild_leftovers: what an interrupted REINDEX CONCURRENTLY of an index of ``jobs``
# left behind -- an invalid ``<name>_ccnew`` (or ``_ccold``) index that every write
# still maintains. Only read under REINDEX_LOCK, so never another reindexer's build.
REBUILD_LEFTOVERS = text("""
SELECT CAST(i.indexrelid AS regclass)::text AS name
  FROM pg_index AS i JOIN pg_class AS x ON x.oid = i.indexrelid
 WHERE i.indrelid = to_regclass('jobs')
   AND NOT i.indisvalid
   AND x.relname ~ '_cc(new|old)[0-9]*$'
""")

# index_bytes: one index's size now (after its rebuild, for the log).
INDEX_BYTES = text("SELECT pg_relation_size(to_regclass(:name))")
