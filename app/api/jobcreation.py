"""Job creation with the Idempotency-Key protocol (SPEC section 2).

One transaction per request (the caller's):

1. ``pg_try_advisory_xact_lock(hashtextextended(owner || ':' || key, 0))`` -- if another
   transaction holds it, that request is in flight: answer 409 + Retry-After at once
   rather than queueing behind it.
2. With the lock: an ``idempotency_keys`` row with the same fingerprint returns the
   existing job (replayed); another fingerprint is 422.
3. Otherwise admission control (:mod:`app.api.admission`; 429/503 + Retry-After),
   then create the job through :class:`~app.transitions.Transitions` and insert the
   key row, then commit. The 202 is sent only after the commit: never a 202 without a
   durable job.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.admission import check_admission
from app.api.errors import (
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    JobNotFoundError,
    UnknownKindError,
    clean_validation_errors,
)
from app.api.schemas import JobCreateBase
from app.apikeys import Principal
from app.db import queries, reads
from app.kinds import KINDS, KindSpec
from app.settings import Settings
from app.transitions import Actor, NewJob, Transitions


@dataclass(frozen=True, slots=True)
class Created:
    job: Any
    replayed: bool


def validated_input(body: JobCreateBase) -> tuple[KindSpec, dict[str, Any]]:
    """The kind and its normalized input, or a 422 before anything is stored."""
    spec = KINDS.get(body.kind)
    if spec is None:
        raise UnknownKindError(f"Unknown kind; known kinds: {', '.join(sorted(KINDS))}")
    try:
        # Already validated by the request schema; re-validating keeps this function
        # safe to call with any model (the CLI, tests) at negligible cost.
        model = spec.input_model.model_validate(body.input.model_dump(mode="json"))
    except ValidationError as exc:
        raise InvalidInputError(errors=clean_validation_errors(exc.errors())) from None
    return spec, model.model_dump(mode="json")


def fingerprint(kind: str, normalized_input: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of what the job would do (kind + normalized input)."""
    canonical = json.dumps(
        {"kind": kind, "input": normalized_input},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    spec, normalized = validated_input(body)
    new = NewJob(
        owner=principal.owner,
        kind=spec.name,
        kind_version=spec.version,
        input=normalized,
        max_attempts=spec.max_attempts,
        max_elapsed_seconds=spec.max_elapsed_seconds,
        request_id=request_id,
        idempotency_key=idempotency_key,
    )
    actor = Actor("client", principal.owner)
    if idempotency_key is None:
        await check_admission(
            conn, owner=principal.owner, settings=settings, clock=transitions.clock
        )
        return Created((await transitions.create(conn, new, actor=actor)).job, False)
    if not await queries.try_idempotency_lock(conn, principal.owner, idempotency_key):
        raise IdempotencyKeyInFlightError(retry_after=1)
    digest = fingerprint(spec.name, normalized)
    seen = await reads.idempotency_key(
        conn, principal.owner, idempotency_key, now=transitions.clock.now()
    )
    if seen is not None:
        if seen.fingerprint != digest:
            raise IdempotencyKeyReusedError()
        if seen.job is None:  # pragma: no cover - the key row cascades with its job
            raise JobNotFoundError()
        return Created(seen.job, True)
    await check_admission(conn, owner=principal.owner, settings=settings, clock=transitions.clock)
    created = await transitions.create(conn, new, actor=actor)
    await queries.remember_idempotency_key(
        conn, principal.owner, idempotency_key, fingerprint=digest, job_id=created.job.id
    )
    return Created(created.job, False)
