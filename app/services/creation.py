"""Job creation with the Idempotency-Key protocol (docs/protocol.md §4): ONE path for one
job (``POST /v1/jobs``) and a batch (``POST /v1/jobs:batch``), keyed or not. The service
chooses the connection and the transaction, and answers with typed outcomes: every job
:class:`Accepted` (created, or ``replayed`` from its stored key), or one
:class:`~atlas_jobs._app.services.refusals.Refusal` for the whole request (key in flight,
key reused, at capacity, queue backed up, invalid input) -- then nothing was created.

The protocol, written once:

1. Validate every item (the refusal names the field; for a batch, the item's index) and
   fingerprint the ones with a key. The same key twice in one request is refused.
2. Take every key's in-flight lock (``pg_try_advisory_xact_lock``); a key held by
   another transaction is :class:`KeyInFlight` at once rather than queueing behind it.
3. Read the keys already stored: the same fingerprint replays the key's job
   (:func:`_stored`), another fingerprint is :class:`KeyReused` -- for the whole
   request, nothing is created. A replay is never refused by admission.
4. Admission (:mod:`atlas_jobs._app.services.admission`): the queue-age check when one is
   configured, then ONE ``create_many`` statement for the jobs still to create (the
   per-owner cap is applied by the statement itself: all of them or none,
   :class:`AtCapacity`), then their key rows and ``notify`` links.

The statements each shape costs (:func:`_plan`):

* no key and no ``notify``: steps 4 are ONE statement, run in its own transaction
  (autocommit: no ``BEGIN``/``COMMIT`` round trips);
* ONE job with a key, no ``notify`` and no queue-age check: steps 2-4 as ONE statement
  (``Transitions.create_keyed``: the key's lock, admission, the key row, then the job
  only if the key row was written), its own transaction; a stored key costs one more
  statement, the read of step 3. Same outcomes as the steps (what it saves is in
  docs/performance.md, "Figures behind the code");
* anything else: the steps above in one transaction. The caller is answered after the
  commit: never a 202 without a durable job, and a batch is created whole or not at all.
"""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app import fairness, tracing
from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import queries, reads, webhooks
from atlas_jobs._app.db.engine import AutocommitConnections
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.kinds import KINDS, KindSpec
from atlas_jobs._app.services.access import submitter
from atlas_jobs._app.services.admission import at_capacity, check_queue_age
from atlas_jobs._app.services.reading import public_statuses
from atlas_jobs._app.services.refusals import (
    BatchTooLarge,
    InvalidInput,
    InvalidRequest,
    JobNotFound,
    KeyInFlight,
    KeyReused,
    Refusal,
    UnknownKind,
    clean_validation_errors,
)
from atlas_jobs._app.services.schemas import JobCreateBase, JobPublic
from atlas_jobs._app.services.timing import Timing, timing
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.tags import first_repeat
from atlas_jobs._app.tags import normalized as normalized_tags
from atlas_jobs._app.transitions import KeyedRefusal, NewJob, OwnerAtCapacity, Transitions


@dataclass(frozen=True, slots=True)
class Accepted:
    """One job of a creation: its row (the status columns of a created job, the whole
    row of a replayed one), its status body (read in the creation's transaction) and
    whether it was replayed from a stored key."""

    job: JobRow
    status: JobPublic
    replayed: bool


@dataclass(frozen=True, slots=True)
class CreationRequest:
    """One job asked for: its body, its optional key, and where it sits in the request
    (``("body",)`` for ``POST /v1/jobs``, ``("body", "jobs", i)`` for a batch item)."""

    body: JobCreateBase
    idempotency_key: str | None
    loc: tuple[str | int, ...] = ("body",)

    @property
    def key_loc(self) -> list[str]:
        if self.loc == ("body",):
            return ["header", "Idempotency-Key"]
        return [str(part) for part in (*self.loc, "idempotency_key")]


@dataclass(frozen=True, slots=True)
class _Prepared:
    request: CreationRequest
    new: NewJob
    fingerprint: str | None


@dataclass(frozen=True, slots=True)
class _Written:
    job: JobRow
    replayed: bool


class _Plan(enum.Enum):
    """How a creation reaches the database (:func:`_plan`)."""

    ONE_STATEMENT = "one_statement"
    """No key, no ``notify``: ``create_many`` alone, its own transaction."""
    KEYED_STATEMENT = "keyed_statement"
    """One keyed job, no ``notify``, no queue-age check: ``create_keyed``, its own
    transaction."""
    TRANSACTION = "transaction"
    """The steps in one transaction."""


def _plan(prepared: Sequence[_Prepared], settings: Settings) -> _Plan:
    if any(item.request.body.notify is not None for item in prepared):
        return _Plan.TRANSACTION  # the links are a second write
    keyed = [item for item in prepared if item.request.idempotency_key is not None]
    if not keyed:
        return _Plan.ONE_STATEMENT
    if len(prepared) == 1 and settings.admission_max_queue_age_seconds is None:
        return _Plan.KEYED_STATEMENT
    return _Plan.TRANSACTION  # the keys' locks hold to the end of a transaction


class JobCreation:
    """The creation service: one instance per process (``ApiState.creation``)."""

    def __init__(
        self,
        engine: AsyncEngine,
        autocommit: AutocommitConnections,
        transitions: Transitions,
        settings: Settings,
    ) -> None:
        self.engine = engine
        self.autocommit = autocommit
        self.transitions = transitions
        self.settings = settings

    async def create_one(
        self,
        principal: Principal,
        body: JobCreateBase,
        *,
        idempotency_key: str | None,
        request_id: str | None,
    ) -> Accepted | Refusal:
        """``POST /v1/jobs``: the job, or the refusal."""
        outcome = await self.create(
            principal, [CreationRequest(body, idempotency_key)], request_id=request_id
        )
        return outcome if isinstance(outcome, Refusal) else outcome[0]

    async def create_batch(
        self, principal: Principal, items: Sequence[JobCreateBase], *, request_id: str | None
    ) -> list[Accepted] | Refusal:
        """``POST /v1/jobs:batch``: at most ``batch_max_jobs`` items, each with its own key."""
        if len(items) > self.settings.batch_max_jobs:
            return BatchTooLarge(len(items), self.settings.batch_max_jobs)
        requests = [
            CreationRequest(item, getattr(item, "idempotency_key", None), ("body", "jobs", i))
            for i, item in enumerate(items)
        ]
        return await self.create(principal, requests, request_id=request_id)

    async def create(
        self,
        principal: Principal,
        requests: Sequence[CreationRequest],
        *,
        request_id: str | None,
    ) -> list[Accepted] | Refusal:
        """Create (or find, by key) every requested job, in request order, committed
        before this returns; or the one refusal, with nothing created."""
        try:
            clock = self.transitions.clock
            prepared = [
                _prepare(request, principal.owner, request_id, clock) for request in requests
            ]
            _reject_repeated_keys(prepared)
            plan = _plan(prepared, self.settings)
            connections = self.engine if plan is _Plan.TRANSACTION else self.autocommit
            async with connections.begin() as conn:
                if plan is _Plan.KEYED_STATEMENT:
                    written = [await self._keyed_statement(conn, principal, prepared[0])]
                else:
                    written = await self._steps(conn, principal, prepared)
                statuses = await public_statuses(conn, [w.job for w in written])
        except Refusal as refusal:
            return refusal
        return [
            Accepted(w.job, status, w.replayed) for w, status in zip(written, statuses, strict=True)
        ]

    async def _steps(
        self, conn: AsyncConnection, principal: Principal, prepared: Sequence[_Prepared]
    ) -> list[_Written]:
        """Steps 2-4 of the protocol, one statement each."""
        owner, clock = principal.owner, self.transitions.clock
        keys = [p.request.idempotency_key for p in prepared if p.request.idempotency_key]
        seen: dict[str, reads.SeenKey] = {}
        if keys:
            if not await queries.try_idempotency_locks(conn, owner, keys):
                raise KeyInFlight()
            seen = await reads.idempotency_keys_seen(conn, owner, keys, now=clock.now())
        found: dict[int, _Written] = {}
        fresh: list[tuple[int, _Prepared]] = []
        for index, item in enumerate(prepared):
            known = seen.get(item.request.idempotency_key or "")
            if known is None:
                fresh.append((index, item))
            else:
                found[index] = _stored(item, known)
        if fresh:
            await _check_notify_targets(conn, owner, [item for _, item in fresh])
            await check_queue_age(conn, settings=self.settings, clock=clock)
            cap = self.settings.admission_max_active_per_owner
            try:
                created = await self.transitions.create_many(
                    conn,
                    [item.new for _, item in fresh],
                    actor=submitter(principal),
                    admission_cap=cap,
                )
            except OwnerAtCapacity as refused:
                raise at_capacity(refused, adding=len(fresh), limit=cap) from None
            remembered: list[tuple[str, str, uuid.UUID]] = []
            for (index, item), applied in zip(fresh, created, strict=True):
                found[index] = _Written(applied.job, False)
                key = item.request.idempotency_key
                if key is not None and item.fingerprint is not None:
                    remembered.append((key, item.fingerprint, applied.job.id))
            if remembered:
                await queries.remember_idempotency_keys(conn, owner, remembered)
            await webhooks.attach(
                conn,
                [
                    (applied.job.id, item.request.body.notify)
                    for (_, item), applied in zip(fresh, created, strict=True)
                    if item.request.body.notify is not None
                ],
            )
        return [found[index] for index in range(len(prepared))]

    async def _keyed_statement(
        self, conn: AsyncConnection, principal: Principal, item: _Prepared
    ) -> _Written:
        """Steps 2-4 for one keyed job as ONE statement (``create_keyed``) when the key
        is new; a stored key costs one more statement, its read (step 3). The outcomes
        are the steps': in flight, replayed or reused, and at capacity only when the key
        is not stored."""
        key, digest = item.request.idempotency_key, item.fingerprint
        assert key is not None  # the plan's condition
        assert digest is not None  # a key is always fingerprinted
        cap = self.settings.admission_max_active_per_owner
        for _ in range(_KEYED_TRIES):
            refused: OwnerAtCapacity | None = None
            try:
                outcome = await self.transitions.create_keyed(
                    conn,
                    item.new,
                    fingerprint=digest,
                    actor=submitter(principal),
                    admission_cap=cap,
                )
            except OwnerAtCapacity as exc:
                refused, outcome = exc, KeyedRefusal.STORED  # a stored key is still replayed
            if outcome is KeyedRefusal.IN_FLIGHT:
                raise KeyInFlight()
            if not isinstance(outcome, KeyedRefusal):
                return _Written(outcome.job, False)
            seen = await reads.idempotency_keys_seen(
                conn, principal.owner, [key], now=self.transitions.clock.now()
            )
            known = seen.get(key)
            if known is not None and known.job is not None:
                return _stored(item, known)
            if refused is not None:
                raise at_capacity(refused, adding=1, limit=cap) from None
        raise KeyInFlight()


_KEYED_TRIES = 3
"""A stored key can vanish (its job pruned) between the creation and the read of it;
then the creation is tried again, a bounded number of times."""


def validated_input(
    body: JobCreateBase, loc: tuple[str | int, ...] = ("body",)
) -> tuple[KindSpec, dict[str, Any]]:
    """The kind and its normalized input, or the refusal (naming ``loc``) before
    anything is stored."""
    spec = KINDS.get(body.kind)
    if spec is None:
        raise UnknownKind(known=sorted(KINDS))
    if type(body.input) is spec.input_model:  # the request schema validated it already
        return spec, body.input.model_dump(mode="json")
    try:
        # Any other model (the CLI, tests) is validated as the kind's input.
        model = spec.input_model.model_validate(body.input.model_dump(mode="json"))
    except ValidationError as exc:
        located = [{**e, "loc": (*loc, "input", *e.get("loc", ()))} for e in exc.errors()]
        raise InvalidInput(errors=clean_validation_errors(located)) from None
    return spec, model.model_dump(mode="json")


def fingerprint(
    kind: str,
    normalized_input: dict[str, Any],
    notify: uuid.UUID | None = None,
    tags: Sequence[str] = (),
    when: Timing | None = None,
    *,
    priority: int | None = None,
    concurrency_key: str | None = None,
) -> str:
    """SHA-256 of the canonical JSON of what the job would do (kind + normalized input,
    whom it notifies when it does, its tags, sorted, when it may start, and the priority
    and key it was asked with)."""
    document: dict[str, Any] = {"kind": kind, "input": normalized_input}
    if notify is not None:
        document["notify"] = str(notify)
    if tags:
        document["tags"] = list(tags)
    if when is not None:
        document |= when.fingerprinted()
    if priority is not None:
        document["priority"] = priority
    if concurrency_key is not None:
        document["concurrency_key"] = concurrency_key
    canonical = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def concurrency_of(
    spec: KindSpec, named: str | None, loc: tuple[str | int, ...] = ("body",)
) -> tuple[str | None, int | None]:
    """The stored concurrency key and declared limit of a job of ``spec`` that names
    ``named`` (or none), or the refusal naming ``concurrency_key`` when its kind takes
    none."""
    if named is not None and not spec.concurrency_per_job:
        raise InvalidRequest(
            f"{spec.name} takes no concurrency key",
            errors=[
                {
                    "loc": [str(part) for part in (*loc, "concurrency_key")],
                    "msg": f"kind {spec.name} declares no per-job concurrency key",
                    "type": "concurrency_key_unknown",
                }
            ],
        )
    if spec.concurrency_key is None:
        return None, None
    return fairness.job_key(spec.concurrency_key, named), spec.concurrency_limit


def checked_tags(body: JobCreateBase, loc: tuple[str | int, ...] = ("body",)) -> tuple[str, ...]:
    """The body's tags as stored (sorted), or a 422 naming the first repeated one."""
    repeat = first_repeat(body.tags)
    if repeat is not None:
        raise InvalidRequest(
            "A job's tags are a set: a tag appears twice",
            errors=[
                {
                    "loc": [str(part) for part in (*loc, "tags", repeat)],
                    "msg": "repeated tag",
                    "type": "tag_repeated",
                }
            ],
        )
    return normalized_tags(body.tags)


def _prepare(
    request: CreationRequest, owner: str, request_id: str | None, clock: Clock
) -> _Prepared:
    spec, normalized = validated_input(request.body, request.loc)
    key, limit = concurrency_of(spec, request.body.concurrency_key, request.loc)
    tags = checked_tags(request.body, request.loc)
    when = timing(request.body, request.loc, clock)
    new = NewJob(
        owner=owner,
        kind=spec.name,
        kind_version=spec.version,
        input=normalized,
        max_attempts=spec.max_attempts,
        max_elapsed_seconds=spec.max_elapsed_seconds,
        request_id=request_id,
        idempotency_key=request.idempotency_key,
        priority=request.body.priority,
        concurrency_key=key,
        concurrency_limit=limit,
        concurrency_rate=None if key is None else spec.concurrency_rate,
        concurrency_period_seconds=None if key is None else spec.concurrency_period_seconds,
        tags=tags,
        traceparent=tracing.current_traceparent(),
        run_at=when.run_at,
        run_after=when.run_after,
        start_by=when.start_by,
        start_within=when.start_within,
    )
    digest = (
        None
        if request.idempotency_key is None
        else fingerprint(
            spec.name,
            normalized,
            request.body.notify,
            tags,
            when,
            priority=request.body.priority,
            concurrency_key=request.body.concurrency_key,
        )
    )
    return _Prepared(request, new, digest)


def _stored(item: _Prepared, known: reads.SeenKey) -> _Written:
    """A stored key's answer: its job replayed when the request is the same, else
    :class:`KeyReused`."""
    if known.fingerprint != item.fingerprint:
        raise KeyReused(item.request.key_loc)
    if known.job is None:  # pragma: no cover - the key row cascades with its job
        raise JobNotFound()
    return _Written(known.job, True)


def _reject_repeated_keys(prepared: Sequence[_Prepared]) -> None:
    seen: set[str] = set()
    for item in prepared:
        key = item.request.idempotency_key
        if key is None:
            continue
        if key in seen:
            raise InvalidRequest(
                "The same idempotency_key appears twice in the batch",
                errors=[
                    {"loc": item.request.key_loc, "msg": "repeated key", "type": "key_repeated"}
                ],
            )
        seen.add(key)


async def check_notify_target(
    conn: AsyncConnection, owner: str, notify: uuid.UUID | None, loc: tuple[str | int, ...]
) -> None:
    """``notify`` names one of the owner's endpoints (another owner's is unknown)."""
    if notify is None:
        return
    known = await webhooks.owned(conn, owner, [notify])
    if notify not in known:
        raise _unknown_webhook(loc)


async def _check_notify_targets(
    conn: AsyncConnection, owner: str, fresh: Sequence[_Prepared]
) -> None:
    """Every ``notify`` names one of the owner's endpoints, in ONE read."""
    wanted = [item.request.body.notify for item in fresh if item.request.body.notify]
    known = await webhooks.owned(conn, owner, [w for w in wanted if w is not None])
    for item in fresh:
        if item.request.body.notify is not None and item.request.body.notify not in known:
            raise _unknown_webhook(item.request.loc)


def _unknown_webhook(loc: tuple[str | int, ...]) -> InvalidRequest:
    return InvalidRequest(
        "notify names no webhook endpoint of this owner",
        errors=[
            {
                "loc": [str(part) for part in (*loc, "notify")],
                "msg": "unknown webhook endpoint",
                "type": "unknown_webhook",
            }
        ],
    )
