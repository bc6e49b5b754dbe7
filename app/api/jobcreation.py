"""Job creation with the Idempotency-Key protocol (docs/protocol.md §4), for one job
(``POST /v1/jobs``) and for a batch (``POST /v1/jobs:batch``) -- one code path: a single
job is a batch of one, except the common single job with a key (below).

One transaction per request (the caller's):

1. Validate every item (422 naming the field; for a batch, the item's index) and
   fingerprint the ones with a key. The same key twice in one batch is 422.
2. ``pg_try_advisory_xact_lock(hashtextextended(owner || ':' || key, 0))`` for every key,
   in ONE statement -- if another transaction holds one, that request is in flight:
   answer 409 + Retry-After at once rather than queueing behind it.
3. With the locks, ONE read of the keys already stored: a key with the same fingerprint
   returns its existing job (replayed); another fingerprint is 422 -- for the whole
   batch, nothing is created.
4. The queue-age admission check when one is configured (503), then ONE
   ``create_many`` statement for the jobs still to create and their history rows, which
   applies the per-owner cap itself (:mod:`atlas_jobs._app.api.admission`; 429 + Retry-After, all
   of them or none), then ONE insert of their key rows. The caller commits; the 202 is
   sent only after the commit: never a 202 without a durable job, and a batch is
   created whole or not at all. A request that needs no more than that one statement
   (no key, no ``notify``: :func:`needs_transaction`) may run it in its own
   transaction (autocommit), which saves the ``BEGIN`` and ``COMMIT`` round trips.

A single job with a key and without ``notify`` (and no queue-age check configured) runs
steps 2-4 as ONE statement in its own transaction (``Transitions.create_keyed``: the
key's lock, admission, the key row ``ON CONFLICT DO NOTHING``, then the job only if the
key row was written); a key already stored costs one more statement, the read of step 3
(:func:`_create_keyed`). Same answers: 409 while in flight, the stored job or 422 for a
stored key, 429 only when the key is not stored.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app import fairness, tracing
from atlas_jobs._app.api.admission import check_queue_age, too_many_active
from atlas_jobs._app.api.errors import (
    BatchTooLargeError,
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    InvalidRequestError,
    JobNotFoundError,
    UnknownKindError,
    clean_validation_errors,
)
from atlas_jobs._app.api.schemas import JobCreateBase
from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.db import queries, reads, webhooks
from atlas_jobs._app.kinds import KINDS, KindSpec
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, KeyedRefusal, NewJob, OwnerAtCapacity, Transitions


@dataclass(frozen=True, slots=True)
class Created:
    job: Any
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


def validated_input(
    body: JobCreateBase, loc: tuple[str | int, ...] = ("body",)
) -> tuple[KindSpec, dict[str, Any]]:
    """The kind and its normalized input, or a 422 (naming ``loc``) before anything is
    stored."""
    spec = KINDS.get(body.kind)
    if spec is None:
        raise UnknownKindError(f"Unknown kind; known kinds: {', '.join(sorted(KINDS))}")
    if type(body.input) is spec.input_model:  # the request schema validated it already
        return spec, body.input.model_dump(mode="json")
    try:
        # Any other model (the CLI, tests) is validated as the kind's input.
        model = spec.input_model.model_validate(body.input.model_dump(mode="json"))
    except ValidationError as exc:
        located = [{**e, "loc": (*loc, "input", *e.get("loc", ()))} for e in exc.errors()]
        raise InvalidInputError(errors=clean_validation_errors(located)) from None
    return spec, model.model_dump(mode="json")


def fingerprint(
    kind: str,
    normalized_input: dict[str, Any],
    notify: uuid.UUID | None = None,
    *,
    priority: int | None = None,
    concurrency_key: str | None = None,
) -> str:
    """SHA-256 of the canonical JSON of what the job would do (kind + normalized input,
    whom it notifies when it does, and the priority and key it was asked with)."""
    document: dict[str, Any] = {"kind": kind, "input": normalized_input}
    if notify is not None:
        document["notify"] = str(notify)
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


def needs_transaction(body: JobCreateBase, idempotency_key: str | None, settings: Settings) -> bool:
    """Whether ``POST /v1/jobs`` runs more than one statement that writes (webhook links;
    a key checked before the queue-age admission): then it needs a transaction of its
    own. Otherwise the creation is ONE statement -- with or without a key
    (:func:`_create_keyed`) -- which is its own transaction (autocommit)."""
    return body.notify is not None or (
        idempotency_key is not None and settings.admission_max_queue_age_seconds is not None
    )


async def create_job(
    conn: AsyncConnection,
    transitions: Transitions,
    principal: Principal,
    body: JobCreateBase,
    *,
    idempotency_key: str | None,
    request_id: str | None,
    settings: Settings,
) -> Created:
    """``POST /v1/jobs``: a batch of one -- or, when it needs no transaction
    (:func:`needs_transaction`) and has a key, the keyed creation in one statement."""
    request = CreationRequest(body, idempotency_key)
    if idempotency_key is not None and not needs_transaction(body, idempotency_key, settings):
        return await _create_keyed(
            conn, transitions, principal, request, request_id=request_id, settings=settings
        )
    [created] = await create_jobs(
        conn,
        transitions,
        principal,
        [request],
        request_id=request_id,
        settings=settings,
    )
    return created


async def create_batch(
    conn: AsyncConnection,
    transitions: Transitions,
    principal: Principal,
    items: Sequence[JobCreateBase],
    *,
    request_id: str | None,
    settings: Settings,
) -> list[Created]:
    """``POST /v1/jobs:batch``: at most ``batch_max_jobs`` items, each with its own key."""
    if len(items) > settings.batch_max_jobs:
        raise BatchTooLargeError(len(items), settings.batch_max_jobs)
    requests = [
        CreationRequest(item, getattr(item, "idempotency_key", None), ("body", "jobs", i))
        for i, item in enumerate(items)
    ]
    return await create_jobs(
        conn, transitions, principal, requests, request_id=request_id, settings=settings
    )


def submitter(principal: Principal) -> Actor:
    """The creation's actor: ``client:<owner>``, carrying the key that submitted (the
    history row records it: the four-eyes rule of reviews, :mod:`app.reviews`)."""
    return Actor("client", principal.owner, key_id=principal.key_id)


def concurrency_of(
    spec: KindSpec, named: str | None, loc: tuple[str | int, ...] = ("body",)
) -> tuple[str | None, int | None]:
    """The stored concurrency key and declared limit of a job of ``spec`` that names
    ``named`` (or none), or a 422 naming ``concurrency_key`` when its kind takes none."""
    if named is not None and not spec.concurrency_per_job:
        raise InvalidRequestError(
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


def _prepare(request: CreationRequest, owner: str, request_id: str | None) -> _Prepared:
    spec, normalized = validated_input(request.body, request.loc)
    key, limit = concurrency_of(spec, request.body.concurrency_key, request.loc)
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
        traceparent=tracing.current_traceparent(),
    )
    digest = (
        None
        if request.idempotency_key is None
        else fingerprint(
            spec.name,
            normalized,
            request.body.notify,
            priority=request.body.priority,
            concurrency_key=request.body.concurrency_key,
        )
    )
    return _Prepared(request, new, digest)


_KEYED_TRIES = 3
"""A stored key can vanish (its job pruned) between the creation and the read of it;
then the creation is tried again, a bounded number of times."""


async def _create_keyed(
    conn: AsyncConnection,
    transitions: Transitions,
    principal: Principal,
    request: CreationRequest,
    *,
    request_id: str | None,
    settings: Settings,
) -> Created:
    """One job with a key, the protocol of :func:`create_jobs` in ONE statement
    (``Transitions.create_keyed``: the key's in-flight lock, admission, key row, job)
    when the key is new; a stored key costs one more statement, the read of its job. No
    queue-age check runs here (:func:`needs_transaction` sends those to
    :func:`create_jobs`), and no ``notify``."""
    owner = principal.owner
    item = _prepare(request, owner, request_id)
    key, digest = request.idempotency_key, item.fingerprint
    assert key is not None  # the caller's condition
    assert digest is not None  # a key is always fingerprinted
    cap = settings.admission_max_active_per_owner
    for _ in range(_KEYED_TRIES):
        refused: OwnerAtCapacity | None = None
        try:
            outcome = await transitions.create_keyed(
                conn,
                item.new,
                fingerprint=digest,
                actor=submitter(principal),
                admission_cap=cap,
            )
        except OwnerAtCapacity as exc:
            refused, outcome = exc, KeyedRefusal.STORED  # a stored key is still replayed
        if outcome is KeyedRefusal.IN_FLIGHT:
            raise IdempotencyKeyInFlightError(retry_after=1)
        if not isinstance(outcome, KeyedRefusal):
            return Created(outcome.job, False)
        seen = await reads.idempotency_keys_seen(conn, owner, [key], now=transitions.clock.now())
        known = seen.get(key)
        if known is not None and known.job is not None:
            return Created(_replayed(item, known), True)
        if refused is not None:
            assert cap is not None  # only a cap refuses
            raise too_many_active(refused.unfinished, adding=1, limit=cap) from None
    raise IdempotencyKeyInFlightError(retry_after=1)


def _replayed(item: _Prepared, known: reads.SeenKey) -> Any:
    """The stored key's job when the request is the same, else the 422."""
    if known.fingerprint != item.fingerprint:
        raise IdempotencyKeyReusedError(
            errors=[
                {
                    "loc": item.request.key_loc,
                    "msg": "key used with another body",
                    "type": "key_reused",
                }
            ]
        )
    return known.job


def _reject_repeated_keys(prepared: Sequence[_Prepared]) -> None:
    seen: set[str] = set()
    for item in prepared:
        key = item.request.idempotency_key
        if key is None:
            continue
        if key in seen:
            raise InvalidRequestError(
                "The same idempotency_key appears twice in the batch",
                errors=[
                    {"loc": item.request.key_loc, "msg": "repeated key", "type": "key_repeated"}
                ],
            )
        seen.add(key)


async def _check_notify_targets(
    conn: AsyncConnection, owner: str, fresh: Sequence[tuple[int, _Prepared]]
) -> None:
    """Every ``notify`` names one of the owner's endpoints (another owner's is unknown)."""
    wanted = [item.request.body.notify for _, item in fresh if item.request.body.notify]
    known = await webhooks.owned(conn, owner, [w for w in wanted if w is not None])
    for _, item in fresh:
        if item.request.body.notify is not None and item.request.body.notify not in known:
            raise InvalidRequestError(
                "notify names no webhook endpoint of this owner",
                errors=[
                    {
                        "loc": [str(part) for part in (*item.request.loc, "notify")],
                        "msg": "unknown webhook endpoint",
                        "type": "unknown_webhook",
                    }
                ],
            )


async def create_jobs(
    conn: AsyncConnection,
    transitions: Transitions,
    principal: Principal,
    requests: Sequence[CreationRequest],
    *,
    request_id: str | None,
    settings: Settings,
) -> list[Created]:
    """Create (or find, by key) every requested job, in request order. See the module
    docstring for the protocol and the statements it costs."""
    owner = principal.owner
    prepared = [_prepare(request, owner, request_id) for request in requests]
    _reject_repeated_keys(prepared)
    keys = [p.request.idempotency_key for p in prepared if p.request.idempotency_key]
    seen: dict[str, reads.SeenKey] = {}
    if keys:
        if not await queries.try_idempotency_locks(conn, owner, keys):
            raise IdempotencyKeyInFlightError(retry_after=1)
        seen = await reads.idempotency_keys_seen(conn, owner, keys, now=transitions.clock.now())
    found: dict[int, Created] = {}
    fresh: list[tuple[int, _Prepared]] = []
    for index, item in enumerate(prepared):
        known = seen.get(item.request.idempotency_key or "")
        if known is None:
            fresh.append((index, item))
            continue
        job = _replayed(item, known)
        if job is None:  # pragma: no cover - the key row cascades with its job
            raise JobNotFoundError()
        found[index] = Created(job, True)
    if fresh:
        await _check_notify_targets(conn, owner, fresh)
        await check_queue_age(conn, settings=settings, clock=transitions.clock)
        cap = settings.admission_max_active_per_owner
        try:
            created = await transitions.create_many(
                conn,
                [item.new for _, item in fresh],
                actor=submitter(principal),
                admission_cap=cap,
            )
        except OwnerAtCapacity as refused:
            assert cap is not None  # only a cap refuses
            raise too_many_active(refused.unfinished, adding=len(fresh), limit=cap) from None
        remembered: list[tuple[str, str, uuid.UUID]] = []
        for (index, item), applied in zip(fresh, created, strict=True):
            found[index] = Created(applied.job, False)
            if item.request.idempotency_key is not None and item.fingerprint is not None:
                remembered.append((item.request.idempotency_key, item.fingerprint, applied.job.id))
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
