"""Paused kinds: an operator stops the claim from taking a kind's queued jobs.

A pause names a kind and either every version (``version`` 0, :data:`EVERY_VERSION`) or
one. The claim statement (``atlas_jobs._app.db.queries.CLAIM``) skips the queued jobs of
a paused kind, so a pause holds in every worker process from its commit on; attempts
already running finish. A resume deletes the row and notifies ``atlas_work`` with the
kind in the same transaction, so idle workers claim its jobs at once. Each pause and
resume is appended to ``kind_pause_events`` with the actor and the note. Database time
(:class:`~atlas_jobs._app.clock.Clock`) throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import delete, func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import kind_pause_events, kind_pauses

EVERY_VERSION: Final = 0
"""The ``version`` of a pause that holds every version of its kind."""


@dataclass(frozen=True, slots=True)
class Pause:
    """One paused kind (or kind version): who paused it, when, and why."""

    kind: str
    version: int | None
    """``None``: every version."""
    paused_by: str
    paused_at: datetime
    note: str | None

    def covers(self, kind: str, version: int) -> bool:
        return self.kind == kind and self.version in (None, version)

    @staticmethod
    def from_row(row: Any) -> Pause:
        return Pause(
            kind=row.kind,
            version=None if row.version == EVERY_VERSION else row.version,
            paused_by=row.paused_by,
            paused_at=row.paused_at,
            note=row.note,
        )


@dataclass(frozen=True, slots=True)
class PauseEvent:
    """One recorded pause or resume."""

    at: datetime
    kind: str
    version: int | None
    action: str
    actor: str
    note: str | None


def _stored(version: int | None) -> int:
    return EVERY_VERSION if version is None else version


async def pause(
    conn: AsyncConnection,
    clock: Clock,
    *,
    kind: str,
    version: int | None,
    actor: str,
    note: str | None,
) -> tuple[Pause, bool]:
    """Pause ``kind`` (one ``version``, or every one with ``None``). Answers the pause in
    force and whether this call made it: pausing what is already paused keeps the
    first pause (its actor, time and note) and records nothing."""
    made = await conn.execute(
        pg_insert(kind_pauses)
        .values(
            kind=kind, version=_stored(version), paused_by=actor, paused_at=clock.now(), note=note
        )
        .on_conflict_do_nothing(index_elements=[kind_pauses.c.kind, kind_pauses.c.version])
        .returning(*kind_pauses.c)
    )
    row = made.one_or_none()
    if row is None:
        existing = await conn.execute(
            select(*kind_pauses.c).where(
                kind_pauses.c.kind == kind, kind_pauses.c.version == _stored(version)
            )
        )
        return Pause.from_row(existing.one()), False
    await _record(conn, clock, kind=kind, version=version, action="pause", actor=actor, note=note)
    return Pause.from_row(row), True


async def resume(
    conn: AsyncConnection,
    clock: Clock,
    *,
    kind: str,
    version: int | None,
    actor: str,
    note: str | None,
) -> Pause | None:
    """End the pause of ``kind`` (that ``version``, or the every-version pause with
    ``None``) and wake the workers for it; ``None`` when there was no such pause."""
    ended = await conn.execute(
        delete(kind_pauses)
        .where(kind_pauses.c.kind == kind, kind_pauses.c.version == _stored(version))
        .returning(*kind_pauses.c)
    )
    row = ended.one_or_none()
    if row is None:
        return None
    await _record(conn, clock, kind=kind, version=version, action="resume", actor=actor, note=note)
    await conn.execute(select(func.pg_notify("atlas_work", kind)))
    return Pause.from_row(row)


async def _record(
    conn: AsyncConnection,
    clock: Clock,
    *,
    kind: str,
    version: int | None,
    action: str,
    actor: str,
    note: str | None,
) -> None:
    await conn.execute(
        insert(kind_pause_events).values(
            at=clock.now(),
            kind=kind,
            version=_stored(version),
            action=action,
            actor=actor,
            note=note,
        )
    )


async def paused(conn: AsyncConnection) -> list[Pause]:
    """Every pause in force, by kind then version (every-version pauses first)."""
    rows = await conn.execute(
        select(*kind_pauses.c).order_by(kind_pauses.c.kind, kind_pauses.c.version)
    )
    return [Pause.from_row(row) for row in rows]


async def events(conn: AsyncConnection, *, limit: int = 50) -> list[PauseEvent]:
    """The latest pauses and resumes, newest first."""
    rows = await conn.execute(
        select(*kind_pause_events.c).order_by(kind_pause_events.c.seq.desc()).limit(limit)
    )
    return [
        PauseEvent(
            at=row.at,
            kind=row.kind,
            version=None if row.version == EVERY_VERSION else row.version,
            action=row.action,
            actor=row.actor,
            note=row.note,
        )
        for row in rows
    ]


__all__ = ["EVERY_VERSION", "Pause", "PauseEvent", "events", "pause", "paused", "resume"]
