"""The declared schema. Alembic migrations must produce exactly this (``alembic check``).

CHECK constraints are generated from :mod:`atlas_jobs._app.lifecycle` (those of ``jobs`` by
:mod:`atlas_jobs._app.db.row_rules`), so the database refuses any
value or combination the lifecycle does not allow, even from a buggy writer.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Double,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    and_,
    event,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from atlas_jobs._app.db.row_rules import JOB_RULES, RULES_NAME, sql_list
from atlas_jobs._app.fairness import DEFAULT_PRIORITY, MAX_SHARE
from atlas_jobs._app.lifecycle import (
    ALL_ATTEMPT_OUTCOMES,
    ALL_STATES,
    ATTENTION_STATES,
    BULK_OPERATION_STATES,
    TERMINAL_BULK_OPERATION_STATES,
    TERMINAL_STATES,
    BulkAction,
    DeliveryState,
    JobState,
)
from atlas_jobs._app.scheduling import MAX_CATCH_UP_LIMIT, FireRefusal, MisfirePolicy, OverlapPolicy
from atlas_jobs._app.webhooks import WEBHOOK_EVENTS, DeliveryAttemptState

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

TERMINAL_SQL = sql_list(TERMINAL_STATES)
ATTENTION_STATES_SQL = sorted(s.value for s in ATTENTION_STATES)


# The rules of ``jobs`` are ONE CHECK constraint calling ONE IMMUTABLE PL/pgSQL function
# (atlas_jobs._app.db.row_rules: why, which tables not, and how a refusal still names the rule it
# broke). Revision a3b4c5d6e7f8 wrote the function (frozen there); ``metadata.create_all``
# creates it before the tables (the declared-schema test).
def _create_row_rules(_metadata: MetaData, connection: Connection, **_kw: Any) -> None:
    connection.exec_driver_sql(JOB_RULES.create_function())


event.listen(metadata, "before_create", _create_row_rules)


# Storage parameters of the tables that churn (PGQueuer's ``pgq autovac``, Oban's
# scaling guide). ``jobs``: every transition writes a new row version, and pruning
# deletes finished rows; room on each page (fillfactor) keeps a job's next version on its
# page, and autovacuum runs after 1 % + 1,000 dead rows instead of 20 %, unthrottled, so
# the space pruning frees is reused before the table grows. ``job_history`` is appended
# to and pruned: vacuumed at 5 %, unthrottled. ``attempts`` likewise, and each row is
# updated in place when its attempt ends (and at heartbeats): none of those columns is
# indexed, so with room on the page (fillfactor) those updates are HOT -- no new index
# entries in the drain's publication.
JOBS_STORAGE = {
    "fillfactor": "80",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_cost_delay": "0",
}
APPENDED_STORAGE = {
    "autovacuum_vacuum_scale_factor": "0.05",
    "autovacuum_vacuum_cost_delay": "0",
}
ATTEMPTS_STORAGE = {"fillfactor": "70", **APPENDED_STORAGE}

TZ = DateTime(timezone=True)
NOW = text("now()")

jobs = Table(
    "jobs",
    metadata,
    Column("id", UUID(as_uuid=True), server_default=text("gen_random_uuid()"), nullable=False),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("owner", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("kind_version", Integer, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("state", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("version", BigInteger, nullable=False, server_default=text("1")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("finished_at", TZ),
    Column("available_at", TZ, nullable=False, server_default=NOW),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    Column("charged_attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("max_elapsed_seconds", Integer, nullable=False),
    Column("budget_started_at", TZ, nullable=False, server_default=NOW),
    Column("current_attempt_id", UUID(as_uuid=True)),
    Column("worker_id", Text),
    Column("lease_expires_at", TZ),
    Column("heartbeat_at", TZ),
    Column("last_error", JSONB),
    Column("error", JSONB),
    Column("cancel", JSONB),
    Column("wait_deadline_at", TZ),
    Column("wait_on_deadline", Text),
    Column("plan_revision", Integer, nullable=False, server_default=text("0")),
    Column("current_stage", Text),
    Column("delivery_state", Text, nullable=False, server_default=text("'none'")),
    Column("delivery_expires_at", TZ),
    Column("result_ref", JSONB),
    # What the status says of a published result without reading ``result_ref`` (which
    # can be large): how many files it holds and where the kind's publish step published
    # it (``result_ref.publication.destination``). Written with ``result_ref``.
    Column("result_files", Integer),
    Column("result_destination", Text),
    Column("replay_of", UUID(as_uuid=True), ForeignKey("jobs.id")),
    Column("request_id", Text),
    Column("idempotency_key", Text),
    # Not before (the owner's delay; NULL: none) and start deadline (NULL: none). The
    # claim reads available_at, which a creation or reschedule sets from run_at; run_at
    # keeps what the owner asked for, whatever a retry's backoff later does to
    # available_at.
    Column("run_at", TZ),
    Column("start_by", TZ),
    # Scheduling (atlas_jobs._app.fairness): the job's priority (higher starts first within
    # its lane), its concurrency key ('' for none) and the limit its kind declared for it.
    # Their ranges are the API's to check: jobs keeps ONE CHECK, its lifecycle rules.
    Column("priority", SmallInteger, nullable=False, server_default=text(str(DEFAULT_PRIORITY))),
    Column("concurrency_key", Text, nullable=False, server_default=text("''")),
    Column("concurrency_limit", Integer),
    # The start rate its kind declared for the key: starts per period (NULL: none).
    Column("concurrency_rate", Integer),
    Column("concurrency_period_seconds", Double),
    # ``key=value`` labels given at creation (atlas_jobs._app.tags), never confidential;
    # set once, never updated.
    Column("tags", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    PrimaryKeyConstraint("id"),
    # No unique index on seq: an identity column never repeats, and every index that is
    # not partial costs an insertion on each state change (state changes are not HOT).
    CheckConstraint(JOB_RULES.check, name=RULES_NAME),
    postgresql_with=JOBS_STORAGE,
)

# The columns of a job that its status body (atlas_jobs._app.services.views.job_status) and status
# headers (ETag, Retry-After) are built from -- with ``observed_at``, the database time
# of the read, which each statement adds. The status read and the creation statements
# answer these, not the whole row: the input, the result reference, the lease's owner
# and the budget's bookkeeping are nobody's business there, and decoding the input and
# result documents would cost client CPU on every row (docs/performance.md, "Figures
# behind the code").
JOB_STATUS_COLUMNS = tuple(
    jobs.c[name]
    for name in (
        "id",
        "kind",
        "kind_version",
        "state",
        "reason",
        "version",
        "created_at",
        "updated_at",
        "finished_at",
        "available_at",
        "attempt",
        "max_attempts",
        "lease_expires_at",
        "heartbeat_at",
        "last_error",
        "error",
        "cancel",
        "wait_deadline_at",
        "wait_on_deadline",
        "plan_revision",
        "current_stage",
        "delivery_state",
        "delivery_expires_at",
        "result_files",
        "result_destination",
        "replay_of",
        "run_at",
        "start_by",
        # A queued job's lane (owner, kind@version, concurrency key) and its priority:
        # what ``waiting_for`` looks up in the API's view of the claim's lanes and keys.
        "owner",
        "priority",
        "concurrency_key",
        "tags",
    )
)

# The claim query walks this index in order and stops after LIMIT rows: only queued
# jobs are in it, so it stays small however many finished jobs the table holds.
Index(
    "ix_jobs_claimable",
    jobs.c.available_at,
    jobs.c.seq,
    postgresql_where=jobs.c.state == JobState.QUEUED.value,
)


def lane_hash(alias: str | None) -> str:
    """The 64-bit hash of a lane -- owner, kind@version, concurrency key -- of the row
    ``alias`` (a job or a ``claim_lanes`` row; None: unqualified, as the index spells it):
    the first column of ``ix_jobs_lanes``. Every lane probe compares it AND the lane's
    columns, so two lanes with one hash share index entries but never jobs."""
    a = "" if alias is None else f"{alias}."
    # Spelled as the index's expression is reflected, so that ``alembic check`` finds the
    # declared index and the migrated one equal.
    return (
        f"hashtextextended(((({a}owner || '/'::text) || {a}kind) || '/'::text)"
        f" || {a}concurrency_key, {a}kind_version::bigint)"
    )


# The claim's per-lane scan (atlas_jobs._app.db.queries, ``candidates``): one lane's queued
# jobs -- owner, kind@version, concurrency key -- highest priority first, then FIFO. The
# lane is indexed as one bigint (``lane_hash``), not as its three text columns and its
# version: every creation writes an entry, and a narrow fixed-width key is cheaper to
# insert and to descend (docs/performance.md, "Figures behind the code").
Index(
    "ix_jobs_lanes",
    text(lane_hash(None)),
    jobs.c.priority.desc(),
    jobs.c.available_at,
    jobs.c.seq,
    postgresql_where=jobs.c.state == JobState.QUEUED.value,
)
# The reaper finds expired leases without scanning finished work.
Index(
    "ix_jobs_lease_expiry",
    jobs.c.lease_expires_at,
    postgresql_where=jobs.c.state.in_([JobState.RUNNING.value, JobState.CANCEL_REQUESTED.value]),
)
# Status listings: the caller's jobs, newest first, cursor on seq -- read backwards.
# Ascending on purpose: seq only grows, so a new job's entry lands at the end of the
# owner's range, where page splits keep pages full; descending, it lands on the range's
# first page and splits leave half-empty pages behind (revision d3c4d5e6f7a8; the sizes
# in docs/performance.md, "Figures behind the code"). The later versions of a job (its
# updates are not HOT) land mid-range either way, so under a steady churn the two sizes
# are alike; the gain is in a backlog. Every version of every job has an entry here.
Index("ix_jobs_owner_seq", jobs.c.owner, jobs.c.seq)
# Search across owners (operators, reviewers with the global scope), newest first, has
# no index of its own: job ids are UUIDv7 (time-ordered, atlas_jobs._app.ids), so it walks
# ``pk_jobs`` backwards with a keyset on ``id`` (revision 6e2b4c8d0f13 dropped
# ``ix_jobs_seq``: one more entry per job version, which the drain paid for; its cost in
# docs/performance.md, "Figures behind the code").
# Search by the states an operator looks for, newest first by id. Partial: the drain's
# states (queued, running, succeeded) are not in it, so claims and publications pay
# nothing; a job enters it when it waits, needs attention or ends another way.
Index(
    "ix_jobs_attention",
    jobs.c.state,
    jobs.c.id,
    postgresql_where=jobs.c.state.in_(ATTENTION_STATES_SQL),
)
# The planner's knowledge that a job's kind and state go together (an outage leaves one
# kind unresolved): without it, "state=unresolved&kind=K" is estimated as the product of
# the two frequencies, and the search reads every unresolved job and sorts them instead
# of walking ix_jobs_attention for one page (revision b8fd571ff01f).
JOBS_STATE_KIND_STATISTICS = "CREATE STATISTICS jobs_state_kind (mcv) ON state, kind FROM jobs"
event.listen(jobs, "after_create", DDL(JOBS_STATE_KIND_STATISTICS))  # type: ignore[no-untyped-call]
# Admission control counts an owner's unfinished jobs without touching finished ones.
Index(
    "ix_jobs_owner_active",
    jobs.c.owner,
    postgresql_where=jobs.c.state.not_in(sorted(s.value for s in TERMINAL_STATES)),
)
# The retention sweeper finds results to expire.
Index(
    "ix_jobs_delivery_expiry",
    jobs.c.delivery_expires_at,
    postgresql_where=jobs.c.delivery_state == DeliveryState.AVAILABLE.value,
)
Index(
    "ix_jobs_wait_deadline",
    jobs.c.wait_deadline_at,
    postgresql_where=jobs.c.state == JobState.WAITING.value,
)
# The pruner walks finished jobs whose result is not downloadable, oldest first. A job
# enters this index once: when it fails or is canceled, or when its result expires --
# not when it is published, so the drain's hot path (claim, publish) pays nothing for it.
Index(
    "ix_jobs_prunable",
    jobs.c.finished_at,
    postgresql_where=and_(
        jobs.c.finished_at.is_not(None), jobs.c.delivery_state != DeliveryState.AVAILABLE.value
    ),
)
# The sweeper finds queued jobs that were never claimed by their start deadline. Only
# jobs with a deadline that never started are in it: the rest pay nothing on updates.
Index(
    "ix_jobs_start_by",
    jobs.c.start_by,
    postgresql_where=and_(
        jobs.c.state == JobState.QUEUED.value,
        jobs.c.attempt == 0,
        jobs.c.start_by.is_not(None),
    ),
)
# Partial: only replays are indexed, so ordinary jobs pay nothing for it on updates.
Index(
    "ix_jobs_replay_of",
    jobs.c.replay_of,
    postgresql_where=jobs.c.replay_of.is_not(None),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False),
    # No foreign key (revision 5e8b2d4f6a17): every row is written by the claim, from the
    # rows its own UPDATE moved (the job exists, its row locked until the claim commits),
    # and the pruner deletes it with its job (atlas_jobs._app.db.queries.PRUNE_RECORDS);
    # the key's check per row (a KEY SHARE lock of the row the claim had just written)
    # proved nothing more.
    Column("job_id", UUID(as_uuid=True), nullable=False),
    Column("number", Integer, nullable=False),
    Column("worker_id", Text, nullable=False),
    Column("claimed_at", TZ, nullable=False, server_default=NOW),
    Column("lease_expires_at", TZ, nullable=False),
    Column("heartbeat_at", TZ),
    Column("ended_at", TZ),
    Column("outcome", Text, nullable=False, server_default=text("'running'")),
    Column("charged", Integer, nullable=False, server_default=text("1")),
    Column("error", JSONB),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("job_id", "number"),
    CheckConstraint(f"outcome IN ({sql_list(ALL_ATTEMPT_OUTCOMES)})", name="outcome_known"),
    CheckConstraint("(outcome = 'running') = (ended_at IS NULL)", name="ended_iff_not_running"),
    postgresql_with=ATTEMPTS_STORAGE,
)

# Search by tag across owners (revision 9c3d5e7f1a24): one row per tag of a tagged job,
# written by the job's creation statement (tags are set once, never updated) and deleted
# by the pruner's statement with the job, so a transition never touches it. A search
# walks the primary key backwards from its cursor -- ``tag = :t AND job_id < :before``,
# newest first (ids are UUIDv7) -- and joins each job by its primary key: a page reads a
# page of rows, however many jobs carry the tag. One owner's tag search walks
# ``ix_jobs_owner_seq`` (bounded by that owner's jobs); no GIN index on ``jobs.tags``.
job_tags = Table(
    "job_tags",
    metadata,
    Column("tag", Text, nullable=False),
    Column("job_id", UUID(as_uuid=True), nullable=False),
    PrimaryKeyConstraint("tag", "job_id"),
)

job_history = Table(
    "job_history",
    metadata,
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    # No foreign key (revision f1a2b3c4d5e6): every row is written by the statement that
    # changes or holds its job, and the pruner deletes it with its job
    # (atlas_jobs._app.db.queries.PRUNE_RECORDS); a key's check per row proved nothing more.
    Column("job_id", UUID(as_uuid=True), nullable=False),
    Column("at", TZ, nullable=False, server_default=NOW),
    Column("transition", Text, nullable=False),
    Column("from_state", Text),
    Column("to_state", Text, nullable=False),
    Column("reason", Text),
    Column("actor", Text, nullable=False),
    Column("attempt_id", UUID(as_uuid=True)),
    Column("event_id", Text),
    Column("note", Text),
    Column("data", JSONB),
    # The API key that made the move, on moves a key made (a client's creation): who
    # submitted a job, for the four-eyes rule of reviews (app.reviews). No foreign key:
    # a key row is never deleted (revoked keys stay), and history outlives nothing.
    Column("key_id", UUID(as_uuid=True)),
    # (job_id, seq): the one index serves both uniqueness (seq is an identity) and
    # "this job's history in order"; a second index would cost every transition.
    PrimaryKeyConstraint("job_id", "seq"),
    CheckConstraint(
        f"from_state IS NULL OR from_state IN ({sql_list(ALL_STATES)})", name="from_known"
    ),
    CheckConstraint(f"to_state IN ({sql_list(ALL_STATES)})", name="to_known"),
    postgresql_with=APPENDED_STORAGE,
)

job_stages = Table(
    "job_stages",
    metadata,
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("unit", Text, nullable=False),
    Column("done", Integer, nullable=False, server_default=text("0")),
    Column("total", Integer, nullable=False),
    Column("plan_revision", Integer, nullable=False, server_default=text("1")),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("job_id", "name"),
    CheckConstraint("done >= 0 AND total >= 0 AND done <= total", name="done_within_total"),
)

job_checkpoints = Table(
    "job_checkpoints",
    metadata,
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("stage", Text, nullable=False),
    Column("unit_name", Text, nullable=False),
    Column("attempt_id", UUID(as_uuid=True), nullable=False),
    Column("at", TZ, nullable=False, server_default=NOW),
    Column("data", JSONB),
    PrimaryKeyConstraint("job_id", "stage", "unit_name"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("owner", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("owner", "key"),
)
Index("ix_idempotency_keys_job_id", idempotency_keys.c.job_id)

# The per-owner count of unfinished jobs that admission reads (``owner_backlog``): kept
# exact by statement-level triggers on ``jobs`` (migrations c4d5e6f7a8b9, f2a3b4c5d6e7),
# never written by the application. Each owner's count is split over 16 slots: a
# statement adds its whole delta for an owner to the slot of its connection
# (``pg_backend_pid() & 15``), so concurrent writers of one owner's jobs rarely wait for
# the same row. A job may be counted up on one slot and down on another, so a row may be
# negative: only the SUM of an owner's rows is its count (admission sums them). With room
# on the page, updates are HOT.
BACKLOG_STORAGE = {"fillfactor": "50", **APPENDED_STORAGE}

owner_backlog = Table(
    "owner_backlog",
    metadata,
    Column("owner", Text, nullable=False),
    Column("slot", SmallInteger, nullable=False),
    Column("unfinished", BigInteger, nullable=False),
    PrimaryKeyConstraint("owner", "slot"),
    CheckConstraint("slot >= 0 AND slot < 16", name="slot_in_range"),
    postgresql_with=BACKLOG_STORAGE,
)

# Fair share (atlas_jobs._app.fairness). ``claim_lanes``: one row per lane -- an owner's queued
# jobs of one kind@version and concurrency key -- added by the jobs triggers when a job of
# a new lane is queued (one turn ahead of the least-served lane), removed by the sweeper
# once the lane is empty
# (atlas_prune_lanes). ``served`` is the lane's virtual time: each claim takes lanes
# least-served first and advances each lane it visited by the jobs it took over the
# owner's share. Updated by every claim, so its pages keep room for HOT-less churn and
# it is vacuumed early.
LANES_STORAGE = {
    "fillfactor": "50",
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "500",
    "autovacuum_vacuum_cost_delay": "0",
}

claim_lanes = Table(
    "claim_lanes",
    metadata,
    Column("owner", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("kind_version", Integer, nullable=False),
    Column("concurrency_key", Text, nullable=False),
    Column("served", Double, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("owner", "kind", "kind_version", "concurrency_key"),
    postgresql_with=LANES_STORAGE,
)
Index("ix_claim_lanes_served", claim_lanes.c.served)

# Concurrency and start-rate keys: how many jobs of the key run now (see below), the limit
# and start rate the key's first job declared (``declared_*``), an operator's limit
# (``max_running``, which wins over the declared one) and the start rate in force
# (``rate`` starts per ``period_seconds``, a token bucket: ``tokens`` as of
# ``refilled_at``): the declared one from the key's creation, an operator's once set, the
# declared one again when an operator clears theirs. The claim locks the rows of the keys
# it takes jobs of (SKIP LOCKED), so two claims never spend the same room. The jobs update
# trigger counts a job entering running up on the key's row (``running``, under that
# lock) and a job leaving it up in ``concurrency_key_releases`` (a slot per connection, so
# a completion never locks the key's row every claim of the key needs); ``folded`` is the
# releases' sum already taken off ``running`` by a claim. The jobs running now:
# atlas_jobs._app.db.queries.KEY_RUNNING.
concurrency_keys = Table(
    "concurrency_keys",
    metadata,
    Column("key", Text, nullable=False),
    Column("declared_limit", Integer),
    Column("declared_rate", Integer),
    Column("declared_period_seconds", Double),
    Column("max_running", Integer),
    Column("running", Integer, nullable=False, server_default=text("0")),
    Column("rate", Integer),
    Column("period_seconds", Double),
    Column("tokens", Double),
    Column("refilled_at", TZ),
    Column("updated_by", Text),
    Column("updated_at", TZ),
    PrimaryKeyConstraint("key"),
    CheckConstraint(
        "(declared_limit IS NULL OR declared_limit >= 1)"
        " AND (max_running IS NULL OR max_running >= 0)",
        name="limits_valid",
    ),
    CheckConstraint(
        "(rate IS NULL) = (period_seconds IS NULL) AND (rate IS NULL OR rate >= 1) "
        "AND (period_seconds IS NULL OR period_seconds > 0)",
        name="rate_valid",
    ),
    CheckConstraint(
        "(declared_rate IS NULL) = (declared_period_seconds IS NULL) "
        "AND (declared_rate IS NULL OR declared_rate >= 1) "
        "AND (declared_period_seconds IS NULL OR declared_period_seconds > 0)",
        name="declared_rate_valid",
    ),
    Column("folded", BigInteger, nullable=False, server_default=text("0")),
    postgresql_with=LANES_STORAGE,
)

# Jobs of a concurrency key that left running (ended, lease expired, deleted), counted by
# the jobs triggers on the slot of the writing connection (``pg_backend_pid() & 15``, as
# ``owner_backlog``): a count that only grows, summed per key by every reader of the
# running count (KEY_RUNNING). Written by completions, never by claims, so the two never
# wait for each other's row.
concurrency_key_releases = Table(
    "concurrency_key_releases",
    metadata,
    Column("key", Text, nullable=False),
    Column("slot", SmallInteger, nullable=False),
    Column("released", BigInteger, nullable=False),
    PrimaryKeyConstraint("key", "slot"),
    CheckConstraint("slot >= 0 AND slot < 16", name="slot_in_range"),
    postgresql_with=BACKLOG_STORAGE,
)

# An owner's weight in the fair share (default 1 when it has no row), set by operators.
owner_shares = Table(
    "owner_shares",
    metadata,
    Column("owner", Text, nullable=False),
    Column("share", Integer, nullable=False),
    Column("updated_by", Text, nullable=False),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("owner"),
    CheckConstraint(f"share BETWEEN 1 AND {MAX_SHARE}", name="share_in_range"),
)

# Every operator change of a share or a key's limits: who, when, before and after.
scheduling_changes = Table(
    "scheduling_changes",
    metadata,
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("at", TZ, nullable=False, server_default=NOW),
    Column("actor", Text, nullable=False),
    Column("setting", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("before", JSONB),
    Column("after", JSONB),
    Column("note", Text),
    PrimaryKeyConstraint("seq"),
    CheckConstraint("setting IN ('owner_share', 'concurrency_key')", name="setting_known"),
)
Index(
    "ix_scheduling_changes_setting_subject",
    scheduling_changes.c.setting,
    scheduling_changes.c.subject,
    scheduling_changes.c.seq,
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), server_default=text("gen_random_uuid()"), nullable=False),
    Column("key_hash", Text, nullable=False),
    Column("prefix", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("roles", ARRAY(Text), nullable=False),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("revoked_at", TZ),
    # The person (or system) holding the key: one holder may have several keys, and the
    # four-eyes rule of reviews compares holders, not keys.
    Column("holder", Text),
    # The kinds an operator key may act on (bulk operations); NULL: every kind.
    Column("kinds", ARRAY(Text)),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("key_hash"),
    CheckConstraint(
        "roles <@ ARRAY['client', 'reviewer', 'operator']::text[] AND cardinality(roles) >= 1",
        name="roles_known",
    ),
    CheckConstraint(
        "holder IS NULL OR (holder = btrim(holder) AND length(holder) BETWEEN 1 AND 200)",
        name="holder_trimmed",
    ),
)

# Status-page logins (atlas_jobs._app.ui.session): one row per browser session, found by the SHA-256
# of the random token its signed cookie carries. Logout deletes the row; revoking the key
# or an operator's "log out everywhere" deletes its key's (or owner's) rows: the cookie
# then answers nothing at the next request. Every page checks its session in ONE primary
# key probe joined to its key (atlas_jobs._app.apikeys.authenticate_session).
ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("token_hash", Text, nullable=False),
    Column(
        "key_id", UUID(as_uuid=True), ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False
    ),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("expires_at", TZ, nullable=False),
    PrimaryKeyConstraint("token_hash"),
)
Index("ix_ui_sessions_key_id", ui_sessions.c.key_id)


OPERATION_STATES: tuple[str, ...] = (
    "intended",
    "uncertain",
    "awaiting_confirmation",
    "confirmed",
    "refused",
)
"""Where an external operation stands (``atlas_jobs._workers.external``): ``intended`` is recorded
before the request leaves; ``uncertain`` after a timeout, reset or 5xx once sent;
``awaiting_confirmation`` when the destination accepted it and confirms later (a
signal); ``confirmed`` when the destination applied it (answered, or found applied by
reconciliation); ``refused`` when it answered a definitive 4xx (nothing applied)."""

external_operations = Table(
    "external_operations",
    metadata,
    # f(job id, step): stable across attempts; sent as the destination's Idempotency-Key.
    Column("id", UUID(as_uuid=True), nullable=False),
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("step", Text, nullable=False),
    Column("destination", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("sends", Integer, nullable=False, server_default=text("0")),
    Column("checks", Integer, nullable=False, server_default=text("0")),
    Column("last_http_status", Integer),
    Column("last_error_class", Text),
    Column("receipt", JSONB),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("job_id", "step"),
    CheckConstraint(f"state IN ({sql_list(OPERATION_STATES)})", name="state_known"),
    CheckConstraint("sends >= 0 AND checks >= 0", name="counters_nonnegative"),
)

job_signals = Table(
    "job_signals",
    metadata,
    # One row per (job, event id): a repeated event finds it and answers its outcome.
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("event_id", Text, nullable=False),
    Column("received_at", TZ, nullable=False, server_default=NOW),
    Column("actor", Text, nullable=False),
    Column("data", JSONB),
    Column("outcome", JSONB, nullable=False),
    PrimaryKeyConstraint("job_id", "event_id"),
)
# -- schedules (cron triggers) -------------------------------------------------------

schedules = Table(
    "schedules",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("owner", Text, nullable=False),
    Column("name", Text),
    Column("cron", Text, nullable=False),
    Column("timezone", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("kind_version", Integer, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("notify_webhook_id", UUID(as_uuid=True), ForeignKey("webhooks.id", ondelete="SET NULL")),
    # Each tick's job: not before tick + delay, start deadline tick + start_within
    # (revision 5c1d2e3f4a6b); NULL: none.
    Column("job_delay_seconds", Integer),
    Column("job_start_within_seconds", Integer),
    # The created jobs' priority (NULL: the default) and the concurrency key they name
    # (NULL: none; where their kind takes one).
    Column("priority", SmallInteger),
    Column("concurrency_key", Text),
    # The ``key=value`` tags each created job carries, sorted as ``jobs.tags`` (revision
    # 829e19e3d198; '{}': none).
    Column("job_tags", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("enabled", Boolean, nullable=False),
    Column("misfire_policy", Text, nullable=False),
    Column("misfire_grace_seconds", Integer, nullable=False),
    Column("catch_up_limit", Integer, nullable=False),
    Column("overlap", Text, nullable=False, server_default=text("'allow'")),
    Column("next_fire_at", TZ, nullable=False),
    Column("last_fire_at", TZ),
    Column("last_job_id", UUID(as_uuid=True)),
    Column("fired_count", BigInteger, nullable=False, server_default=text("0")),
    # Ticks refused (revision fb1ecd289857): how many, the last one, and why.
    Column("refused_count", BigInteger, nullable=False, server_default=text("0")),
    Column("last_refused_at", TZ),
    Column("last_refusal", Text),
    Column("created_by", Text, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("seq"),
    CheckConstraint(
        f"misfire_policy IN ({sql_list(p.value for p in MisfirePolicy)})", name="policy_known"
    ),
    CheckConstraint("misfire_grace_seconds >= 1", name="grace_positive"),
    CheckConstraint(
        f"overlap IN ({sql_list(p.value for p in OverlapPolicy)})", name="overlap_known"
    ),
    CheckConstraint(
        f"catch_up_limit BETWEEN 1 AND {MAX_CATCH_UP_LIMIT}", name="catch_up_limit_bounded"
    ),
    CheckConstraint(
        f"last_refusal IS NULL OR last_refusal IN ({sql_list(r.value for r in FireRefusal)})",
        name="last_refusal_known",
    ),
)
# The scheduler's one query: due, enabled schedules in tick order.
Index(
    "ix_schedules_next_fire_at",
    schedules.c.next_fire_at,
    postgresql_where=schedules.c.enabled,
)
Index("ix_schedules_owner_seq", schedules.c.owner, schedules.c.seq.desc())
Index("ix_schedules_notify_webhook_id", schedules.c.notify_webhook_id)

schedule_fires = Table(
    "schedule_fires",
    metadata,
    Column(
        "schedule_id",
        UUID(as_uuid=True),
        ForeignKey("schedules.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("fire_at", TZ, nullable=False),
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="SET NULL")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    # Why the tick created no job (revision fb1ecd289857); NULL: it created one.
    Column("refusal", Text),
    CheckConstraint(
        f"refusal IS NULL OR refusal IN ({sql_list(r.value for r in FireRefusal)})",
        name="refusal_known",
    ),
    CheckConstraint("refusal IS NULL OR job_id IS NULL", name="refused_has_no_job"),
    # One row per tick: the arbiter that makes any number of schedulers create exactly
    # one job per tick (INSERT ... ON CONFLICT DO NOTHING in the job's transaction).
    PrimaryKeyConstraint("schedule_id", "fire_at"),
)
Index("ix_schedule_fires_job_id", schedule_fires.c.job_id)
Index("ix_schedule_fires_fire_at", schedule_fires.c.fire_at)

# -- webhooks (completion callbacks) ---------------------------------------------------

webhooks = Table(
    "webhooks",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("owner", Text, nullable=False),
    Column("url", Text, nullable=False),
    # The signing secret must be usable to sign (HMAC), so it is stored as is -- unlike
    # API keys, which are only ever compared and are stored hashed.
    Column("secret", Text, nullable=False),
    Column("description", Text),
    Column("created_by", Text, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("seq"),
)
Index("ix_webhooks_owner_seq", webhooks.c.owner, webhooks.c.seq.desc())

job_webhooks = Table(
    "job_webhooks",
    metadata,
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column(
        "webhook_id",
        UUID(as_uuid=True),
        ForeignKey("webhooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    PrimaryKeyConstraint("job_id", "webhook_id"),
)
Index("ix_job_webhooks_webhook_id", job_webhooks.c.webhook_id)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    # The delivery's id is its ``webhook-id``: the same on every retry of it.
    Column("id", UUID(as_uuid=True), server_default=text("gen_random_uuid()"), nullable=False),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column(
        "webhook_id",
        UUID(as_uuid=True),
        ForeignKey("webhooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event", Text, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ, nullable=False, server_default=NOW),
    Column("lease_expires_at", TZ),
    Column("last_status_code", Integer),
    Column("last_error", Text),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("delivered_at", TZ),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("seq"),
    CheckConstraint(
        f"state IN ({sql_list(s.value for s in DeliveryAttemptState)})", name="state_known"
    ),
    CheckConstraint(f"event IN ({sql_list(WEBHOOK_EVENTS)})", name="event_known"),
)
# The sender's one query: what is due (pending, or sending with an expired lease).
Index(
    "ix_webhook_deliveries_due",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=text("state IN ('pending', 'sending')"),
)
Index("ix_webhook_deliveries_job_id", webhook_deliveries.c.job_id, webhook_deliveries.c.seq)
Index("ix_webhook_deliveries_webhook_id", webhook_deliveries.c.webhook_id)

# -- the worker registry -------------------------------------------------------------
# One row per running worker process, written by the process itself
# (atlas_jobs._app.db.workers): upserted when it starts and every
# ATLAS_WORKER_HEARTBEAT_SECONDS, deleted on a clean shutdown. A row whose heartbeat is
# older than ATLAS_WORKER_LIVE_WINDOW_SECONDS is a dead process's (killed, frozen, its
# machine gone): readers do not count it, and the sweeper deletes it after
# ATLAS_WORKER_FORGET_SECONDS. A few rows, one small update per process per interval:
# with room on the page and nothing indexed but the key, every beat is a HOT update.
# Never read or written by the claim path.
WORKERS_STORAGE = {"fillfactor": "50", **APPENDED_STORAGE}

worker_processes = Table(
    "worker_processes",
    metadata,
    Column("worker_id", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", TZ, nullable=False, server_default=NOW),
    Column("heartbeat_at", TZ, nullable=False, server_default=NOW),
    # The "kind@version" keys it runs (atlas_jobs._app.kinds.handler_key), compatible
    # versions included: what its claims ask for.
    Column("serves", ARRAY(Text), nullable=False),
    Column("concurrency", Integer, nullable=False),
    PrimaryKeyConstraint("worker_id"),
    CheckConstraint("concurrency > 0", name="concurrency_positive"),
    postgresql_with=WORKERS_STORAGE,
)

# Paused kinds (atlas_jobs._app.db.pauses): while a row names a kind -- every version
# (``version`` 0) or one -- the claim takes none of its queued jobs; running attempts
# finish. A few rows, read by every claim (the claim's ``picked`` selection) and by the
# API's view of what holds a queued job (``waiting_for``: paused). Each pause and resume
# is also appended to ``kind_pause_events`` with its actor and note.
kind_pauses = Table(
    "kind_pauses",
    metadata,
    Column("kind", Text, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("0")),
    Column("paused_by", Text, nullable=False),
    Column("paused_at", TZ, nullable=False, server_default=NOW),
    Column("note", Text),
    PrimaryKeyConstraint("kind", "version"),
    CheckConstraint("version >= 0", name="version_known"),
)

KIND_PAUSE_ACTIONS: tuple[str, ...] = ("pause", "resume")

kind_pause_events = Table(
    "kind_pause_events",
    metadata,
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("at", TZ, nullable=False, server_default=NOW),
    Column("kind", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("action", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("note", Text),
    PrimaryKeyConstraint("seq"),
    CheckConstraint(f"action IN ({sql_list(KIND_PAUSE_ACTIONS)})", name="action_known"),
)

# The charts' per-minute rollup (atlas_jobs._app.db.activity): per minute and kind, jobs
# created and finished by outcome, and the queue sampled in that minute (claimable
# queued jobs, the oldest one's age). Maintained by the workers' activity service, which
# recomputes only the last minute or two from the history; charts read ONE primary-key
# range of it, whatever the size of ``jobs``. Rows older than two days are deleted.
job_activity = Table(
    "job_activity",
    metadata,
    Column("minute", TZ, nullable=False),
    Column("kind", Text, nullable=False),
    Column("created", Integer, nullable=False, server_default=text("0")),
    Column("succeeded", Integer, nullable=False, server_default=text("0")),
    Column("failed", Integer, nullable=False, server_default=text("0")),
    Column("canceled", Integer, nullable=False, server_default=text("0")),
    Column("queued", Integer, nullable=False, server_default=text("0")),
    Column("oldest_queued_seconds", Float),
    PrimaryKeyConstraint("minute", "kind"),
)
# The rollup finds the last minutes' history rows through a BRIN index on ``at``: the
# history is appended in time order, and a BRIN index costs the appends almost nothing
# (the newest pages stay unsummarized until vacuum), unlike a B-tree on every transition.
Index("ix_job_history_at", job_history.c.at, postgresql_using="brin")


# -- bulk operations -----------------------------------------------------------------
# One row per operator bulk action (atlas_jobs._app.bulk): an action over a filter or an
# id list, run by the workers in batches. A worker holds a running operation by a lease
# (``worker_id``, ``lease_expires_at``); each batch moves its jobs and advances
# ``position`` and the counts in ONE transaction, so a crash loses at most the batch in
# flight, which the next holder redoes (no job is acted on twice). A filter is bounded
# to the jobs that existed when the operation was accepted: one owner's filter walks
# ``(owner, seq)`` after ``position`` up to ``through_seq`` (that owner's newest job), a
# filter across owners walks ``pk_jobs`` after ``after_id`` up to ``through_id`` (the
# newest id). The other walk's pair is NULL; an id list uses ``position`` as its index.
bulk_operations = Table(
    "bulk_operations",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("action", Text, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'queued'")),
    Column("filter", JSONB),
    Column("job_ids", ARRAY(UUID(as_uuid=True))),
    Column("note", Text),
    Column("requested_by", Text, nullable=False),
    Column("key_id", UUID(as_uuid=True)),
    Column("kinds", ARRAY(Text)),
    Column("through_seq", BigInteger),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("matched", BigInteger, nullable=False, server_default=text("0")),
    Column("done", BigInteger, nullable=False, server_default=text("0")),
    Column("skipped", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("error", JSONB),
    Column("version", BigInteger, nullable=False, server_default=text("1")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("started_at", TZ),
    Column("finished_at", TZ),
    Column("cancel_requested_at", TZ),
    Column("worker_id", Text),
    Column("lease_expires_at", TZ),
    Column("through_id", UUID(as_uuid=True)),
    Column("after_id", UUID(as_uuid=True)),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("seq"),
    CheckConstraint(f"action IN ({sql_list(a.value for a in BulkAction)})", name="action_known"),
    CheckConstraint(f"state IN ({sql_list(BULK_OPERATION_STATES)})", name="state_known"),
    CheckConstraint(
        f"(state IN ({sql_list(TERMINAL_BULK_OPERATION_STATES)})) = (finished_at IS NOT NULL)",
        name="finished_iff_terminal",
    ),
    CheckConstraint("(filter IS NULL) <> (job_ids IS NULL)", name="filter_or_ids"),
    CheckConstraint("done >= 0 AND matched >= done", name="counts_consistent"),
)
# The runner's one query: operations still to run, oldest first.
Index(
    "ix_bulk_operations_unfinished",
    bulk_operations.c.created_at,
    postgresql_where=text("state IN ('queued', 'running')"),
)
