"""Pausing a kind (operators): no worker claims its queued jobs until it is resumed.

The pause itself is a row (:mod:`atlas_jobs._app.db.pauses`); the claim statement reads
it, so it holds in every worker from its commit on. This service checks the kind is one
the API or a live worker knows (a typo pauses nothing), writes the pause or resume with
its actor and note in one transaction, and refreshes this process's view of the pauses
(``waiting_for: paused``) at once; other API processes see it within
``ATLAS_LIVE_WORKERS_REFRESH_SECONDS``. docs/protocol.md §3.9.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import pauses
from atlas_jobs._app.db.pauses import Pause, PauseEvent
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.services.live_workers import LiveWorkers, refresh_once
from atlas_jobs._app.services.refusals import KindNotFound, KindNotPaused


@dataclass(frozen=True, slots=True)
class PauseService:
    """What pausing needs of the process: the engine, database time, and the view of
    the live workers and pauses it keeps current."""

    engine: AsyncEngine
    clock: Clock
    live: LiveWorkers
    live_window_seconds: float

    async def refresh(self) -> None:
        await refresh_once(
            self.engine, self.clock, self.live, window_seconds=self.live_window_seconds
        )

    def _served(self) -> set[str]:
        return {key.split("@", 1)[0] for key in self.live.counts or {}}

    def known_kinds(self) -> list[str]:
        return sorted({*KINDS, *self._served()})

    async def _check_known(self, kind: str) -> None:
        """A kind the API accepts or a live worker serves; anything else is a typo."""
        if kind in KINDS or kind in self._served():
            return
        await self.refresh()  # a worker that started since the last refresh
        if kind not in self._served():
            raise KindNotFound(kind=kind, known=self.known_kinds())

    async def pause(
        self, *, kind: str, version: int | None, actor: str, note: str | None
    ) -> tuple[Pause, bool]:
        """The pause in force, and whether this call made it (an existing pause is kept)."""
        await self._check_known(kind)
        async with self.engine.begin() as conn:
            found = await pauses.pause(
                conn, self.clock, kind=kind, version=version, actor=actor, note=note
            )
        await self.refresh()
        return found

    async def resume(
        self, *, kind: str, version: int | None, actor: str, note: str | None
    ) -> Pause:
        """The pause that ended; refused when no such pause is in force."""
        async with self.engine.begin() as conn:
            ended = await pauses.resume(
                conn, self.clock, kind=kind, version=version, actor=actor, note=note
            )
        if ended is None:
            raise KindNotPaused(kind=kind, version=version)
        await self.refresh()
        return ended

    async def listing(self, *, events: int = 50) -> tuple[list[Pause], list[PauseEvent]]:
        """The pauses in force, and the latest pauses and resumes (newest first)."""
        async with self.engine.connect() as conn:
            return await pauses.paused(conn), await pauses.events(conn, limit=events)
