"""Database rows -> public representations (status body, history item, result files)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from atlas_jobs._app.db.records import JobRow as JobRow  # what the rows read here are
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import (
    ACTIVE_STATES,
    DeliveryState,
    JobState,
    Reason,
    WaitingReason,
    is_terminal,
)
from atlas_jobs._app.presentation import paused_phrase
from atlas_jobs._app.services import live_workers
from atlas_jobs._app.services.schemas import (
    HistoryItem,
    JobPublic,
    PublicationPublic,
    ResultFile,
    WaitingForPublic,
)
from atlas_jobs._app.signing import DownloadGrant, DownloadSigner

API_PREFIX = "/v1"


def job_path(job_id: uuid.UUID) -> str:
    return f"{API_PREFIX}/jobs/{job_id}"


def _error(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return None
    evidence = value.get("evidence")
    return {
        "code": str(value.get("code", "error")),
        "message": str(value.get("message", "")),
        "retryable": bool(value.get("retryable", False)),
        "evidence": evidence if isinstance(evidence, dict) else None,
    }


def _cancel(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return None
    return {"requested_at": value["requested_at"], "requested_by": value["requested_by"]}


UNSETTLED = frozenset({DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE})
"""Delivery states a terminal job still leaves (its private outputs being discarded)."""


def settled(state: JobState, delivery: DeliveryState) -> bool:
    """Nothing more will change but retention: where a job's event stream ends."""
    return is_terminal(state) and delivery not in UNSETTLED


def effective_delivery(job: JobRow) -> DeliveryState:
    """The delivery state as of the database time the row was read (``observed_at``):
    retention holds at the boundary, whether or not the sweeper has run yet."""
    delivery = DeliveryState(job.delivery_state)
    observed = getattr(job, "observed_at", None)
    if (
        delivery == DeliveryState.AVAILABLE
        and observed is not None
        and job.delivery_expires_at is not None
        and job.delivery_expires_at <= observed
    ):
        return DeliveryState.EXPIRED
    return delivery


BEHIND_SECONDS = 5.0
"""The queue is *behind* once its oldest claimable job has waited this long: only then
does a queued job say it waits for its turn (``fair_share``) or for older jobs
(``backlog``)."""


def waiting_for(job: JobRow, now: datetime | None = None) -> dict[str, Any] | None:
    """What holds a queued job (``waiting_for``), from the row and this process's view of
    the paused kinds, the live workers and the claim's lanes and keys
    (:mod:`atlas_jobs._app.services.live_workers`): no query. ``None`` for a job that is
    not queued, or while nothing is known (no API in this process, or its first read has
    not answered). In order: its time (a passed start deadline, a ``run_at`` ahead); its
    kind paused; no worker for its kind@version; its concurrency key at its limit; the
    queue behind -- other lanes first (fair share), else older jobs (backlog)."""
    if job.state != JobState.QUEUED:
        return None
    timing = _timing_hold(job, now)
    if timing is not None:
        return timing
    live = live_workers.current()
    key = handler_key(job.kind, job.kind_version)
    pause = None if live is None else live.pause_of(job.kind, job.kind_version)
    if pause is not None:
        return {
            "reason": WaitingReason.PAUSED,
            "kind": key,
            "by": pause.paused_by,
            "at": pause.paused_at,
            "note": pause.note,
            "message": paused_phrase(pause.paused_by, pause.paused_at, pause.note),
        }
    if live is None or live.serving(key) is None:
        return None
    if live.serving(key) == 0:
        return {
            "reason": WaitingReason.NO_WORKER,
            "kind": key,
            "message": f"no live worker serves {key}",
        }
    view = live.scheduling
    observed = getattr(job, "observed_at", None)
    if view is None or (
        job.reason == Reason.RETRY and (observed is None or job.available_at > observed)
    ):
        return None
    full = view.full_keys.get(job.concurrency_key) if job.concurrency_key else None
    if full is not None and (full.at_limit or full.next_start_at is None):
        return {
            "reason": WaitingReason.CONCURRENCY,
            "key": job.concurrency_key,
            "limit": full.limit,
            "running": full.running,
            "message": f"waiting for a slot in {job.concurrency_key}"
            + ("" if full.limit is None else f" ({full.running} of {full.limit} busy)"),
        }
    if full is not None:
        return {
            "reason": WaitingReason.RATE,
            "key": job.concurrency_key,
            "starts": full.rate,
            "per_seconds": full.period_seconds,
            "next_start_at": full.next_start_at,
            "message": f"waiting for a start in {job.concurrency_key} "
            f"({full.rate} per {full.period_seconds:g} s)",
        }
    age = view.queue_age_seconds
    if age is None or age < BEHIND_SECONDS:
        return None
    ahead = live.lanes_ahead((job.owner, job.kind, job.kind_version, job.concurrency_key))
    if ahead:
        return {
            "reason": WaitingReason.FAIR_SHARE,
            "ahead_of_you": ahead,
            "estimate": True,
            "queue_age_seconds": round(age, 1),
            "message": f"about {ahead} other lanes take their turn first",
        }
    return {
        "reason": WaitingReason.BACKLOG,
        "queue_age_seconds": round(age, 1),
        "estimate": True,
        "message": f"older jobs start first (the oldest has waited {round(age)} s)",
    }


def _timing_hold(job: JobRow, now: datetime | None) -> dict[str, Any] | None:
    """A queued job held by time, as of ``now`` (else the database time the row was
    read, ``observed_at``; else this process's clock): a passed start deadline (it will
    never start: the claim refuses it, whether or not the sweeper has ended it yet),
    else a ``run_at`` still ahead."""
    observed = now or getattr(job, "observed_at", None) or datetime.now(UTC)
    start_by = getattr(job, "start_by", None)
    if start_by is not None and job.attempt == 0 and start_by <= observed:
        return {
            "reason": WaitingReason.START_DEADLINE_PASSED,
            "start_by": start_by,
            "message": "not started by its start deadline: it will not run",
        }
    run_at = getattr(job, "run_at", None)
    if run_at is not None and run_at > observed:
        return {
            "reason": WaitingReason.SCHEDULED,
            "run_at": run_at,
            "message": f"scheduled for {run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
        }
    return None


def waiting_tag(waiting: Mapping[str, Any] | WaitingForPublic | None) -> str | None:
    """The part of the status validator that ``waiting_for`` decides (its reason)."""
    if waiting is None:
        return None
    if isinstance(waiting, WaitingForPublic):
        return waiting.reason.value
    return str(WaitingReason(waiting["reason"]).value)


def with_current_waiting(public: JobPublic, job: JobRow, at: datetime | None = None) -> JobPublic:
    """``public`` (built earlier: a feed's snapshot) with ``waiting_for`` as the live
    workers are now and as of the database time ``at`` (a ``run_at`` may have passed
    since) -- the same object when nothing changed."""
    now = waiting_for(job, at)
    if waiting_tag(now) == waiting_tag(public.waiting_for):
        return public
    return public.model_copy(
        update={"waiting_for": None if now is None else WaitingForPublic.model_validate(now)}
    )


def status_document(job: JobRow, stages: Sequence[Any]) -> dict[str, Any]:
    """The status body as JSON data, exactly as ``GET /v1/jobs/{id}`` sends it (the
    webhook sender's body)."""
    return job_status(job, stages).model_dump(mode="json", by_alias=True)


def job_status(job: JobRow, stages: Sequence[Any]) -> JobPublic:
    """The status body of docs/protocol.md §3.3 for one job row and its stage rows: ONE
    validation of :func:`status_fields`, cheaper than building each nested model on its
    own (docs/performance.md, "Figures behind the code")."""
    return JobPublic.model_validate(status_fields(job, stages))


def status_fields(job: JobRow, stages: Sequence[Any]) -> dict[str, Any]:
    """The members of a job's status body (:class:`JobPublic`'s fields, nested objects as
    dicts) from its row and its stage rows, before validation."""
    state = JobState(job.state)
    reason = Reason(job.reason)
    delivery = effective_delivery(job)
    active = state in ACTIVE_STATES
    retrying = state == JobState.QUEUED and reason == Reason.RETRY
    path = job_path(job.id)
    wait = (
        {"deadline": job.wait_deadline_at, "on_deadline": job.wait_on_deadline}
        if state == JobState.WAITING and job.wait_deadline_at is not None
        else None
    )
    return {
        "id": job.id,
        "kind": job.kind,
        "kind_version": job.kind_version,
        "state": state,
        "reason": reason,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "finished_at": job.finished_at,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "next_attempt_at": next_attempt_at(job),
        "last_error": _error(job.last_error) if retrying or state == JobState.UNRESOLVED else None,
        "lease_expires_at": job.lease_expires_at if active else None,
        "heartbeat_at": job.heartbeat_at if active else None,
        "wait": wait,
        "progress": {
            "stage": job.current_stage,
            "plan_revision": job.plan_revision,
            "stages": [
                {"name": s.name, "unit": s.unit, "done": s.done, "total": s.total} for s in stages
            ],
        },
        "delivery": {
            "state": delivery,
            "expires_at": job.delivery_expires_at,
            "files": job.result_files,
            "destination": job.result_destination,
        },
        "error": _error(job.error),
        "cancel": _cancel(job.cancel),
        "tags": list(getattr(job, "tags", None) or ()),
        "replay_of": job.replay_of,
        "run_at": getattr(job, "run_at", None),
        "start_by": getattr(job, "start_by", None),
        "waiting_for": waiting_for(job),
        "links": {
            "self": path,
            "history": f"{path}/history",
            "events": f"{path}/events",
            "result": f"{path}/result" if delivery == DeliveryState.AVAILABLE else None,
            "cancel": None if is_terminal(state) else f"{path}/cancel",
        },
    }


def result_files(
    job: JobRow, signer: DownloadSigner, key_id: uuid.UUID, base_url: str
) -> list[ResultFile]:
    """The published files of a job row, each with a download URL signed for the key
    ``key_id`` (revoking the key revokes its links). Call only for an ``available``
    delivery: nothing here checks it."""
    expires = datetime.now(UTC) + timedelta(seconds=signer.ttl_seconds)
    files = []
    for entry in (job.result_ref or {}).get("files", []):
        token = signer.sign(DownloadGrant(job.id, job.owner, entry["name"], key_id))
        files.append(
            ResultFile(
                name=entry["name"],
                size=entry["size"],
                sha256=entry["sha256"],
                url=f"{base_url}/v1/downloads/{token}",
                token=token,
                url_expires_at=expires,
            )
        )
    return files


def result_publication(job: JobRow) -> PublicationPublic | None:
    """Where a job's external publication lives (``result_ref.publication``, written by
    the kind's publish step), or ``None`` for a kind that publishes files only."""
    found = (job.result_ref or {}).get("publication")
    return None if found is None else PublicationPublic.model_validate(found)


def history_item(row: Any) -> HistoryItem:
    return HistoryItem.model_validate(
        {
            "seq": row.seq,
            "at": row.at,
            "from": row.from_state,
            "to": row.to_state,
            "transition": row.transition,
            "reason": row.reason,
            "actor": row.actor,
            "attempt": row.attempt_number,
            "attempt_id": row.attempt_id,
            "event_id": row.event_id,
            "note": row.note,
            "error": _error((row.data or {}).get("error")),
            "count": int((row.data or {}).get("count", 1)),
            "data": row.data,
            "trigger": _trigger(row.data),
        }
    )


def _trigger(data: Any) -> dict[str, Any] | None:
    if not data or "schedule_id" not in data:
        return None
    return {"schedule_id": data["schedule_id"], "tick": data["tick"]}


def next_attempt_at(job: JobRow) -> datetime | None:
    """When a job queued for a retry becomes claimable again (else ``None``)."""
    retrying = job.state == JobState.QUEUED.value and job.reason == Reason.RETRY.value
    return job.available_at if retrying else None


def due_at(job: JobRow) -> datetime | None:
    """When a queued job becomes claimable, if that is ahead: a retry's backoff
    (``next_attempt_at``) or its ``run_at`` (for ``Retry-After``)."""
    retry = next_attempt_at(job)
    if retry is not None:
        return retry
    run_at = getattr(job, "run_at", None)
    return run_at if job.state == JobState.QUEUED.value and run_at is not None else None


def _opaque(version: int, waiting: str | None) -> str:
    return f'"{version}-{waiting}"' if waiting else f'"{version}"'


def etag(version: int, waiting: str | None = None) -> str:
    """The status's validator: the row's version, and what holds it (``waiting_for``'s
    reason) -- the body changes when a queued job's last worker goes away although the
    row does not, so a client holding the old body must not get 304."""
    return f"W/{_opaque(version, waiting)}"


def etag_matches(header: str | None, version: int, waiting: str | None = None) -> bool:
    """``If-None-Match`` semantics with weak comparison (RFC 9110 section 13.1.2)."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    wanted = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return _opaque(version, waiting) in wanted


def retry_after_seconds(state: JobState, next_attempt_at: datetime | None, now: datetime) -> int:
    """A polite polling interval for a job that is not terminal yet."""
    if state == JobState.QUEUED and next_attempt_at is not None:
        return max(1, min(60, int((next_attempt_at - now).total_seconds()) + 1))
    if state in {JobState.WAITING, JobState.UNRESOLVED}:
        return 30
    return 2
