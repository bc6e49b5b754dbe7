"""Request and response models of ``/v1/webhooks`` and a job's notifications."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from atlas_jobs._app.services.schemas import StrictModel


class WebhookCreate(StrictModel):
    """``POST /v1/webhooks``: an endpoint jobs of this owner may notify (``notify``)."""

    url: str = Field(
        min_length=1,
        max_length=2000,
        description=(
            "http(s) URL called with POST. Loopback, private and link-local addresses are "
            "refused unless the operator allows them (ATLAS_WEBHOOK_INTERNAL_HOSTS)."
        ),
        examples=["https://hooks.example.com/atlas"],
    )
    description: str | None = Field(default=None, max_length=500, description="For people.")


class WebhookPublic(BaseModel):
    """A registered endpoint. Its secret is shown once, when it is created."""

    id: uuid.UUID = Field(description="Pass as `notify` when creating a job.")
    owner: str = Field(description="Whose jobs may notify it.")
    url: str = Field(description="Where deliveries are POSTed.")
    description: str | None = Field(description="For people.")
    created_at: datetime = Field(description="When it was registered.")


class WebhookCreated(WebhookPublic):
    """A webhook endpoint just registered, with its signing secret (shown only now)."""

    secret: str = Field(
        description=(
            "The signing secret (`whsec_…`, Standard Webhooks), shown only now: verify "
            "`webhook-signature` = HMAC-SHA256 over `webhook-id.webhook-timestamp.body`."
        )
    )


class WebhookPage(BaseModel):
    """A page of webhook endpoints."""

    items: list[WebhookPublic] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class NotificationPublic(BaseModel):
    """One delivery of one event to one endpoint."""

    id: uuid.UUID = Field(description="The `webhook-id` header: the same on every retry.")
    webhook_id: uuid.UUID = Field(description="The endpoint.")
    event: str = Field(description="`job.<state>` or `job.result_expired`.")
    state: str = Field(
        description="`pending` (next attempt at `next_attempt_at`), `sending`, "
        "`delivered` (a 2xx came back) or `failed` (every attempt failed; the job is "
        "unaffected)."
    )
    attempts: int = Field(description="Attempts made so far.")
    last_status_code: int | None = Field(description="The last attempt's HTTP status, if any.")
    last_error: str | None = Field(
        description="The last failure's class (`http_503`, `ConnectTimeout`, `unsafe_url`)."
    )
    next_attempt_at: datetime | None = Field(description="While pending: the next attempt.")
    created_at: datetime = Field(description="When the event happened (the outbox row).")
    delivered_at: datetime | None = Field(description="When a 2xx came back.")


class NotificationPage(BaseModel):
    """A job's webhook deliveries."""

    items: list[NotificationPublic] = Field(description="Oldest first.")
