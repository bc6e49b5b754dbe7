"""External operations done right, for any kind: :class:`ExternalOperations`.

An operation is one side effect at a configured destination (``atlas_jobs._app.destinations``),
named by the job step that makes it. The rules (docs/protocol.md §4):

* its id is ``uuid5(job id, step)`` -- stable across attempts -- and is sent as the
  destination's ``Idempotency-Key``; the record (``intended``) commits *before* the
  request leaves, so a worker killed mid-call leaves a trace the next attempt sees;
* a definitive answer settles it: 2xx ``confirmed`` (202: the destination confirms
  later, the job waits for a signal), 4xx ``refused`` (the job fails, nothing applied);
* a timeout, a reset or a 5xx once the request may have left is *uncertain*: before any
  repeat, the destination is asked (``GET {path}/{operation id}``); "applied" is adopted
  as the result, "not applied" (404) is the only answer that allows sending again, and
  when ``reconcile_checks`` lookups cannot decide, the job goes ``unresolved``
  (``unreconciled``) with the evidence;
* a connection that could not even be opened sent nothing: a recoverable error;
* at most ``concurrency`` operations are in flight per destination across every worker
  process: each holds one of the destination's database slots (``atlas_jobs._app.db.external``);
* every outcome is an entry of the job's history (``record_operation``, fenced): the
  operation id, the outcome, the HTTP status or the error's class -- never the body;
  and, once recorded, a count in ``atlas_external_operations_total{destination,
  outcome}`` (plus ``unresolved`` when reconciliation gives up).
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import httpx

from atlas_jobs._app import metrics
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.external import RELEASE_DESTINATION_SLOT, TRY_DESTINATION_SLOT
from atlas_jobs._app.destinations import Destination
from atlas_jobs._app.lifecycle import Reason
from atlas_jobs._app.transitions import OperationEntry
from atlas_jobs._workers.errors import PermanentError, RecoverableError, UnreconciledError, WaitStop

if TYPE_CHECKING:
    from atlas_jobs._workers.context import JobContext

OPERATION_NAMESPACE = uuid.UUID("6f1d52a4-3f0e-4c39-9a55-0d7c1e6b2f10")
MAX_SENDS_PER_ATTEMPT = 3
"""Sends one attempt may make of one operation (each after a confirmed "not applied")."""
MAX_RECEIPT_BYTES = 4096
SLOT_POLL_SECONDS = 0.2

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures before a single byte of the request could leave."""


def operation_id(job_id: uuid.UUID, step: str) -> uuid.UUID:
    """The operation's id: a function of the job and the step, the same in every attempt."""
    return uuid.uuid5(OPERATION_NAMESPACE, f"{job_id}/{step}")


@dataclass(frozen=True, slots=True)
class Operation:
    """``POST {destination url}{path}`` with ``body``; looked up at ``{path}/{id}``."""

    step: str
    destination: str
    path: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Receipt:
    """A settled operation: ``confirmed`` by its answer or ``adopted`` from a lookup."""

    operation_id: uuid.UUID
    how: str
    data: Mapping[str, Any]


class Verdict(StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNDECIDED = "undecided"


class ExternalOperations:
    """The operations of one attempt (``ctx.external``)."""

    def __init__(self, ctx: JobContext, destinations: Mapping[str, Destination]) -> None:
        self.ctx = ctx
        self.destinations = destinations

    async def perform(self, op: Operation) -> Receipt:
        """Make ``op`` happen exactly once at its destination, or say why not."""
        destination = self.destinations.get(op.destination)
        if destination is None:
            raise PermanentError(
                "unknown_destination", f"destination {op.destination!r} is not configured"
            )
        oid = operation_id(self.ctx.job_id, op.step)
        async with self.ctx.engine.connect() as conn:
            record = await reads.operation(conn, oid)
        if record is not None and record.state == "confirmed":
            return Receipt(oid, "confirmed", record.receipt or {})
        if record is not None and record.state == "refused":
            raise _refused(op, record.last_http_status)
        async with (
            self._slot(op.destination, destination.concurrency),
            httpx.AsyncClient(
                base_url=destination.url,
                timeout=destination.timeout_seconds,
                follow_redirects=False,
            ) as client,
        ):
            return await self._settle(op, oid, destination, client, pending=record is not None)

    async def _settle(
        self,
        op: Operation,
        oid: uuid.UUID,
        destination: Destination,
        client: httpx.AsyncClient,
        *,
        pending: bool,
    ) -> Receipt:
        sends = 0
        while True:
            if pending:
                verdict, found = await self._reconcile(op, oid, destination, client)
                if verdict == Verdict.APPLIED:
                    return Receipt(oid, "adopted", found)
                if verdict == Verdict.UNDECIDED:
                    metrics.EXTERNAL_OPERATIONS.labels(op.destination, "unresolved").inc()
                    raise UnreconciledError(
                        f"the outcome of {op.step} at {op.destination} is unknown",
                        evidence={"operation_id": str(oid), "destination": op.destination, **found},
                    )
            if sends >= MAX_SENDS_PER_ATTEMPT:
                raise RecoverableError(
                    "destination_unavailable",
                    f"{op.destination} did not settle {op.step} in {sends} sends",
                )
            await self.ctx.safe_point()
            await self._record(op, oid, "attempted", "intended", sends=1)
            sends += 1
            pending = True
            try:
                answer = await client.post(
                    op.path, json=dict(op.body), headers={"Idempotency-Key": str(oid)}
                )
            except _NOT_SENT as exc:
                await self._record(op, oid, "not_sent", "intended", error=exc)
                raise RecoverableError(
                    "destination_unreachable", f"{op.destination} could not be reached"
                ) from None
            except httpx.TransportError as exc:  # a timeout or a reset once sent
                await self._record(op, oid, "uncertain", "uncertain", error=exc)
                continue
            status = answer.status_code
            if status == 202:
                await self._record(
                    op, oid, "awaiting_confirmation", "awaiting_confirmation", status=status
                )
                raise WaitStop(
                    Reason.EXTERNAL,
                    deadline_seconds=destination.confirm_deadline_seconds,
                    on_deadline="escalate",
                )
            if 200 <= status < 300:
                receipt = _receipt(answer)
                await self._record(
                    op, oid, "confirmed", "confirmed", status=status, receipt=receipt
                )
                return Receipt(oid, "confirmed", receipt)
            if 400 <= status < 500 and status not in {408, 409, 425, 429}:
                await self._record(op, oid, "refused", "refused", status=status)
                raise _refused(op, status)
            await self._record(op, oid, "uncertain", "uncertain", status=status)

    async def _reconcile(
        self,
        op: Operation,
        oid: uuid.UUID,
        destination: Destination,
        client: httpx.AsyncClient,
    ) -> tuple[Verdict, dict[str, Any]]:
        """Ask the destination whether ``oid`` was applied, up to ``reconcile_checks``
        times; the evidence of the last check when it cannot tell."""
        evidence: dict[str, Any] = {}
        for check in range(destination.reconcile_checks):
            if check:
                await self.ctx.sleep(destination.reconcile_interval_seconds)
            try:
                answer = await client.get(f"{op.path}/{oid}")
            except httpx.TransportError as exc:
                await self._record(op, oid, "undecided", "uncertain", checks=1, error=exc)
                evidence = {"checks": check + 1, "last_error_class": type(exc).__name__}
                continue
            if answer.status_code == 200:
                receipt = _receipt(answer)
                await self._record(
                    op, oid, "adopted", "confirmed", checks=1, status=200, receipt=receipt
                )
                return Verdict.APPLIED, receipt
            if answer.status_code == 404:
                await self._record(op, oid, "not_applied_found", "intended", checks=1, status=404)
                return Verdict.NOT_APPLIED, {}
            await self._record(
                op, oid, "undecided", "uncertain", checks=1, status=answer.status_code
            )
            evidence = {"checks": check + 1, "last_http_status": answer.status_code}
        return Verdict.UNDECIDED, evidence

    async def _record(
        self,
        op: Operation,
        oid: uuid.UUID,
        outcome: str,
        state: str,
        *,
        status: int | None = None,
        error: BaseException | None = None,
        receipt: Mapping[str, Any] | None = None,
        sends: int = 0,
        checks: int = 0,
    ) -> None:
        entry = OperationEntry(
            operation_id=oid,
            step=op.step,
            destination=op.destination,
            outcome=outcome,
            state=state,
            http_status=status,
            error_class=None if error is None else type(error).__name__,
            receipt=receipt,
            sends=sends,
            checks=checks,
        )
        await self.ctx.record_operation(entry)
        metrics.EXTERNAL_OPERATIONS.labels(op.destination, outcome).inc()  # once recorded

    @asynccontextmanager
    async def _slot(self, name: str, limit: int) -> AsyncIterator[None]:
        """Hold one of the destination's ``limit`` slots (a session advisory lock) for
        the whole operation; wait, at safe points, while all are taken."""
        async with self.ctx.engine.connect() as conn:
            taken: int | None = None
            while taken is None:
                for slot in random.sample(range(limit), limit):  # nosec B311
                    got = await conn.execute(TRY_DESTINATION_SLOT, {"name": name, "slot": slot})
                    await conn.commit()
                    if got.scalar_one():
                        taken = slot
                        break
                else:
                    await self.ctx.safe_point()
                    await self.ctx.sleep(SLOT_POLL_SECONDS * (0.5 + random.random()))  # noqa: S311  # nosec B311
            try:
                yield
            finally:
                await asyncio.shield(_release(conn, name, taken))


async def _release(conn: Any, name: str, slot: int) -> None:
    await conn.execute(RELEASE_DESTINATION_SLOT, {"name": name, "slot": slot})
    await conn.commit()


def _refused(op: Operation, status: int | None) -> PermanentError:
    return PermanentError(
        "destination_refused",
        f"{op.destination} refused {op.step} (HTTP {status}); nothing was applied",
    )


def _receipt(answer: httpx.Response) -> dict[str, Any]:
    """The destination's answer, when it is a small JSON object (else nothing)."""
    if len(answer.content) > MAX_RECEIPT_BYTES:
        return {}
    try:
        found = json.loads(answer.content or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
