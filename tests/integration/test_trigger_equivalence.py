"""Revision e1f2a3b4c5d6 (cheaper triggers on ``jobs``) has the same effects as the
triggers before it, statement for statement; so has revision f2a3b4c5d6e7 (the counters
on the connection's slot), where what must stay equal is each owner's SUM of counter rows.

One script of raw statements -- one-job and many-job inserts, updates that finish, unfinish,
move a job to another owner or id, touch nothing the triggers count, reach a webhook event,
match no row; deletes; a multi-statement transaction; a counter driven below zero; a
truncate -- runs on a database at the previous revision and on one at this revision, each
statement its own transaction. After each: the same ``owner_backlog`` rows, the same outbox
rows, the same notifications (``atlas_work`` payloads; ``atlas_job_changed``: the same ids in
as many payloads of at most 100), and the same error when the statement fails. For revision
f2a3b4c5d6e7 the statements alternate between two connections with different slots, so
that jobs are counted up on one row and down on another.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from atlas_jobs._app.db.engine import libpq_url
from tests.support import Server, alembic

PREVIOUS = "d0e1f2a3b4c5"
REVISION = "e1f2a3b4c5d6"
SLOT_REVISION = "f2a3b4c5d6e7"
WEBHOOK = uuid.UUID("00000000-0000-4000-8000-00000000beef")
COUNTERS = "SELECT owner, slot, unfinished FROM owner_backlog ORDER BY owner, slot"
SUMS = (
    "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
    " HAVING sum(unfinished) <> 0 ORDER BY owner"
)
BELOW_ZERO = "SELECT count(*) FROM owner_backlog WHERE unfinished < 0"
CONNECTION_SLOT = "SELECT pg_backend_pid() & 15"
OUTBOX = "SELECT job_id, webhook_id, event FROM webhook_deliveries ORDER BY 1, 2, 3"


def job(n: int) -> uuid.UUID:
    """Job ``n``'s id: its last byte is ``n``'s, so its counter slot is ``n % 16``."""
    return uuid.UUID(f"00000000-0000-7000-8000-{n:012x}")


def ids(numbers: Sequence[int]) -> str:
    return ", ".join(f"'{job(n)}'" for n in numbers)


# Rows that satisfy the jobs constraints, by state.
_COLUMNS = (
    "id, owner, kind, kind_version, input, state, reason, max_attempts, "
    "max_elapsed_seconds, finished_at, delivery_state, result_ref"
)
_STATES = {
    "queued": "'queued', 'new', 3, 60, NULL, 'none', NULL",
    "canceled": "'canceled', 'canceled', 3, 60, now(), 'none', NULL",
    "succeeded": "'succeeded', 'published', 3, 60, now(), 'available', '{}'",
    "unresolved": "'unresolved', 'lease_lost', 3, 60, NULL, 'none', NULL",
}


def insert(*rows: tuple[int, str, str, str]) -> str:
    """INSERT of ``(job number, owner, kind, state)`` rows, in one statement."""
    values = ", ".join(
        f"('{job(n)}', '{owner}', '{kind}', 1, '{{}}', {_STATES[state]})"
        for n, owner, kind, state in rows
    )
    return f"INSERT INTO jobs ({_COLUMNS}) VALUES {values}"


def update(numbers: Sequence[int], sets: str) -> str:
    return f"UPDATE jobs SET {sets} WHERE id IN ({ids(numbers)})"


CANCEL = "state = 'canceled', reason = 'canceled', finished_at = now(), version = version + 1"
REQUEUE = "state = 'queued', reason = 'retry', finished_at = NULL, version = version + 1"
UNRESOLVE = "state = 'unresolved', reason = 'lease_lost', version = version + 1"
FAIL = (
    "state = 'failed', reason = 'error', error = '{}', finished_at = now(), version = version + 1"
)
EXPIRE = "delivery_state = 'expired', version = version + 1"
TOUCH = "available_at = available_at"  # a heartbeat's kind of update: no version bump

MANY = list(range(100, 250))  # 150 jobs: two payloads of changed ids

SCRIPT: tuple[str | tuple[str, ...], ...] = (
    insert((1, "alice", "k1", "queued")),  # one job, its counter row missing
    insert((17, "alice", "k1", "queued")),  # one job, same slot: its counter row exists
    insert((2, "alice", "k2", "canceled")),  # one finished job: counts nothing, wakes no one
    insert((3, "bob", "k1", "unresolved")),  # unfinished, not queued
    f"INSERT INTO jobs ({_COLUMNS}) SELECT {_COLUMNS} FROM jobs WHERE false",  # no row
    insert(  # many jobs: two owners, two kinds, some finished
        (4, "alice", "k1", "queued"),
        (20, "alice", "k2", "queued"),
        (5, "bob", "k2", "queued"),
        (6, "bob", "k1", "succeeded"),
        (7, "carol", "k3", "unresolved"),
        (8, "carol", "k3", "canceled"),
        (9, "alice", "k1", "succeeded"),
    ),
    "INSERT INTO webhooks (id, owner, url, secret, created_by)"
    f" VALUES ('{WEBHOOK}', 'alice', 'http://hook', 's', 'alice')",
    f"INSERT INTO job_webhooks (job_id, webhook_id) SELECT id, '{WEBHOOK}' FROM jobs"
    f" WHERE id IN ({ids([1, 3, 9])})",
    insert(*((n, "dave", f"k{n % 3}", "queued") for n in MANY)),
    update([1], CANCEL),  # one job finishes, with a webhook
    update([17], CANCEL),  # one job finishes, no webhook
    update([1], REQUEUE),  # one job comes back: +1, and the workers wake
    update([3], CANCEL),  # one job of bob's, with a webhook
    update([4, 20, 5], UNRESOLVE),  # several, unfinished -> unfinished: counters stay
    update([4], TOUCH),  # nothing bumps the version: silent
    update(MANY, TOUCH),
    update(MANY, "version = version + 1"),  # 150 changed ids in one statement
    update([1], "owner = 'erin'"),  # one job to another owner, unfinished
    update([2], "owner = 'erin'"),  # one finished job to another owner
    update([5, 7], "owner = 'frank', " + CANCEL),  # owner change and finish at once
    update([6], EXPIRE),  # result expired, no webhook: no outbox row
    update([9], EXPIRE),  # result expired with a webhook
    update([6, 9], "version = version + 1"),  # expired already: no event
    update([999], CANCEL),  # matches no row
    update([20], f"id = '{job(36)}'"),  # a new id (no webhook refers to it)
    update([36], FAIL),
    update(MANY[:60], FAIL),  # a batch finishes
    update(MANY[60:80], CANCEL),
    update(MANY[:10], "state = 'queued', reason = 'retry', error = NULL, finished_at = NULL"),
    (update([100], CANCEL), insert((300, "dave", "k1", "queued")), update([300], TOUCH)),
    f"DELETE FROM jobs WHERE id = '{job(17)}'",  # a finished one: nothing to take
    f"DELETE FROM jobs WHERE id IN ({ids(MANY[80:120])})",
    *(
        DAMAGE := (
            # a counter row gone: one job finishing recreates it at 0 (as before), the next fails
            f"DELETE FROM owner_backlog WHERE owner = 'dave' AND slot = {MANY[121] % 16}",
            update([MANY[121]], CANCEL),
            update([MANY[121 + 16]], CANCEL),
        )
    ),
    *(END := ("TRUNCATE jobs CASCADE", insert((1, "alice", "k1", "queued")))),
)

# One owner's jobs, one finishing and one coming back in one statement: a delta of 0.
SWAP = update(
    [MANY[60], MANY[140]],
    "state = CASE WHEN state = 'queued' THEN 'canceled' ELSE 'queued' END,"
    " reason = CASE WHEN state = 'queued' THEN 'canceled' ELSE 'retry' END,"
    " finished_at = CASE WHEN state = 'queued' THEN now() END, version = version + 1",
)
# Revision f2a3b4c5d6e7 removed the per-row CHECK, which the damage above ran into: no
# longer the same effect by design (only the sums are the contract, and deleting a counter
# row breaks them on both sides).
SLOT_SCRIPT: tuple[str | tuple[str, ...], ...] = (
    *(step for step in SCRIPT if step not in DAMAGE + END),
    SWAP,
    update([MANY[121], MANY[122], 3, 4], CANCEL),  # two owners at once
    f"DELETE FROM jobs WHERE id IN ({ids([MANY[123], MANY[124], 5])})",
    *END,
)


@dataclass
class Side:
    """A database at one revision: the connection running the script and a listener."""

    script: asyncpg.Connection
    listener: asyncpg.Connection
    other: asyncpg.Connection | None = None  # a second connection, another slot
    counters: str = COUNTERS
    heard: list[tuple[str, str]] = field(default_factory=list)

    def listen(self, _: object, __: int, channel: str, payload: str) -> None:
        self.heard.append((channel, payload))

    async def run(self, statements: Sequence[str], *, on_other: bool = False) -> tuple[Any, ...]:
        """Run ``statements`` in one transaction (on the other connection if asked and
        there is one); what the triggers did."""
        self.heard.clear()
        failed = None
        conn = self.other if on_other and self.other is not None else self.script
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
        except asyncpg.PostgresError as exc:
            failed = (exc.sqlstate, getattr(exc, "constraint_name", None))
        await self.script.execute("SELECT pg_notify('sentinel', '')")
        for _ in range(2000):
            if ("sentinel", "") in self.heard:
                break
            await asyncio.sleep(0.005)
        else:
            raise AssertionError(f"the sentinel never came; heard {self.heard}")
        return (
            failed,
            [tuple(row) for row in await self.script.fetch(self.counters)],
            [tuple(row) for row in await self.script.fetch(OUTBOX)],
            notifications(self.heard),
        )


def notifications(heard: list[tuple[str, str]]) -> tuple[Any, ...]:
    """What a listener learns: the kinds woken, and the changed ids with the size of each
    payload (the order of ids within and across payloads is not part of the contract)."""
    changed = [payload.split(",") for channel, payload in heard if channel == "atlas_job_changed"]
    return (
        sorted(payload for channel, payload in heard if channel == "atlas_work"),
        sorted(len(payload) for payload in changed),
        sorted(one for payload in changed for one in payload),
    )


@asynccontextmanager
async def side(pg_server: Server, revision: str, *, sums: bool = False) -> AsyncIterator[Side]:
    """A database at ``revision``; with ``sums``, a second script connection whose slot
    differs from the first's, and the counters compared as each owner's sum."""
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", revision)
        opened = [await asyncpg.connect(libpq_url(url)) for _ in range(2)]
        try:
            at = Side(opened[0], opened[1])
            if sums:
                slot = await at.script.fetchval(CONNECTION_SLOT)
                while await opened[-1].fetchval(CONNECTION_SLOT) == slot:
                    opened.append(await asyncpg.connect(libpq_url(url)))
                at.other, at.counters = opened[-1], SUMS
            for channel in ("atlas_job_changed", "atlas_work", "sentinel"):
                await at.listener.add_listener(channel, at.listen)
            yield at
        finally:
            for conn in opened:
                await conn.close()


async def test_the_cheaper_triggers_do_what_the_previous_ones_did(pg_server: Server) -> None:
    async with side(pg_server, PREVIOUS) as before, side(pg_server, REVISION) as after:
        for number, step in enumerate(SCRIPT):
            statements = (step,) if isinstance(step, str) else step
            expected = await before.run(statements)
            assert await after.run(statements) == expected, f"statement {number}: {step}"
        # the script reached what it is for
        assert expected[1] == [("alice", 1, 1)]


async def test_the_script_covers_each_path_of_the_new_triggers(pg_server: Server) -> None:
    """Each branch of the new functions ran at least once (pg_stat_user_functions cannot
    tell branches apart; the effects above can): the outbox got rows, a counter went
    below zero and was refused, 150 ids came in two payloads."""
    async with side(pg_server, REVISION) as after:
        seen = [await after.run((step,) if isinstance(step, str) else step) for step in SCRIPT]
    failures = [failed for failed, *_ in seen if failed is not None]
    assert failures == [("23514", "ck_owner_backlog_unfinished_not_negative")]
    assert any(outbox for _, _, outbox, _ in seen)
    assert any(sizes == [50, 100] for _, _, _, (_, sizes, _) in seen)
    assert any(kinds == ["k1"] for _, _, _, (kinds, _, _) in seen)


async def test_the_connection_slots_keep_every_owners_sum(pg_server: Server) -> None:
    async with (
        side(pg_server, REVISION, sums=True) as before,
        side(pg_server, SLOT_REVISION, sums=True) as after,
    ):
        below_zero = 0
        for number, step in enumerate(SLOT_SCRIPT):
            statements = (step,) if isinstance(step, str) else step
            on_other = number % 2 == 1
            expected = await before.run(statements, on_other=on_other)
            assert expected[0] is None, f"statement {number} failed: {step}"
            assert await after.run(statements, on_other=on_other) == expected, (
                f"statement {number}: {step}"
            )
            below_zero += await after.script.fetchval(BELOW_ZERO)
        assert expected[1] == [("alice", 1)]
    assert below_zero > 0  # the script reached a row below zero: only the sums count
