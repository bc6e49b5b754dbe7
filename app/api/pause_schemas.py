"""Request and response models of the kind pauses (``/v1/kinds/{kind}/pause``,
``/resume``, ``GET /v1/pauses``): docs/protocol.md §3.9."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from atlas_jobs._app.db.pauses import Pause, PauseEvent
from atlas_jobs._app.services.schemas import StrictModel


class KindPauseCreate(StrictModel):
    """``POST /v1/kinds/{kind}/pause``: which versions, and why."""

    version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Pause only this version of the kind; omitted or null: every version.",
    )
    note: str | None = Field(
        default=None,
        max_length=2000,
        description="Why; shown in each held job's `waiting_for` and on the status page.",
        examples=["destination down; resume once it answers"],
    )


class KindResumeCreate(StrictModel):
    """``POST /v1/kinds/{kind}/resume``: which pause to end."""

    version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="End the pause of this version; omitted or null: the every-version pause.",
    )
    note: str | None = Field(default=None, max_length=2000, description="Recorded with it.")


class KindPausePublic(BaseModel):
    """A pause in force: no worker claims the kind's (or version's) queued jobs."""

    kind: str = Field(description="The paused kind.", examples=["document.publish"])
    version: int | None = Field(description="The paused version; null: every version.")
    paused_by: str = Field(description="Who paused it.", examples=["operator:ops"])
    paused_at: datetime = Field(description="When (database time).")
    note: str | None = Field(description="Why, as the operator said.")

    @staticmethod
    def of(pause: Pause) -> KindPausePublic:
        return KindPausePublic(
            kind=pause.kind,
            version=pause.version,
            paused_by=pause.paused_by,
            paused_at=pause.paused_at,
            note=pause.note,
        )


class KindPauseEventPublic(BaseModel):
    """One recorded pause or resume."""

    at: datetime = Field(description="When (database time).")
    kind: str = Field(description="The kind.")
    version: int | None = Field(description="The version; null: every version.")
    action: str = Field(description="`pause` or `resume`.", examples=["pause"])
    actor: str = Field(description="Who did it.", examples=["operator:ops"])
    note: str | None = Field(description="The note given.")

    @staticmethod
    def of(event: PauseEvent) -> KindPauseEventPublic:
        return KindPauseEventPublic(
            at=event.at,
            kind=event.kind,
            version=event.version,
            action=event.action,
            actor=event.actor,
            note=event.note,
        )


class KindPausesPublic(BaseModel):
    """The pauses in force, and the latest pauses and resumes."""

    items: list[KindPausePublic] = Field(description="Every pause in force, by kind.")
    events: list[KindPauseEventPublic] = Field(
        description="The latest pauses and resumes (at most 50), newest first."
    )
