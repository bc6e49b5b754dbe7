"""The claim loop's flags (:mod:`atlas_jobs._workers.wakeup`): one waiter future, no task per wait.

The pool-level behaviour (a notification wakes an idle pool with no poll, one sent
during a claim is kept) is in ``test_claim_loop``.
"""

from __future__ import annotations

import asyncio

from tests.workers.inprocess import bounded
from atlas_jobs._workers.wakeup import ClaimCooldown, Flag, wait_any


async def test_a_flag_set_while_waiting_wakes_the_waiter_without_a_task() -> None:
    wake, other = Flag(), Flag()
    tasks_before = len(asyncio.all_tasks())
    waiting = asyncio.ensure_future(wait_any(other, wake, seconds=60))
    await asyncio.sleep(0)  # parked on its one future
    assert not waiting.done()
    assert len(asyncio.all_tasks()) == tasks_before + 1  # the waiter itself, nothing else
    asyncio.get_running_loop().call_soon(wake.set)  # as the LISTEN callback does
    await bounded(waiting)
    assert wake.is_set()
    assert not other.is_set()  # the caller clears what it consumed


async def test_a_flag_set_before_the_wait_is_kept_and_returns_at_once() -> None:
    """A notification that arrived during the claim (after the flag was cleared, before
    the wait) is not lost: the wait returns without parking."""
    wake = Flag()
    wake.set()
    waiting = asyncio.ensure_future(wait_any(wake, seconds=60))
    await asyncio.sleep(0)
    assert waiting.done()
    assert wake.is_set()


async def test_the_time_limit_ends_a_wait_nothing_set_and_detaches_the_waiter() -> None:
    wake = Flag()
    await bounded(wait_any(wake, seconds=0.01))  # the poll fallback
    assert not wake.is_set()
    wake.set()  # no waiter left behind: setting later touches nothing
    wake.clear()
    assert not wake.is_set()


async def test_a_cancelled_wait_leaves_the_flags_usable() -> None:
    wake = Flag()
    waiting = asyncio.ensure_future(wait_any(wake))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()
    wake.set()
    await bounded(wait_any(wake))  # returns at once: set


async def test_a_cooldown_opens_only_after_notified_claims_find_nothing_twice() -> None:
    """The window opens when a notified claim finds nothing and the claim before it
    found nothing either: a winner's one empty claim (its own job's late notification)
    opens none; nor does a claim no notification asked for (poll, reconnect)."""
    cooldown = ClaimCooldown(60.0)
    cooldown.claimed(woken=False, found=0)  # a poll: no race was lost
    assert cooldown.remaining() == 0
    cooldown.claimed(woken=True, found=1)  # won
    cooldown.claimed(woken=True, found=0)  # the won job's own notification
    assert cooldown.remaining() == 0
    cooldown.claimed(woken=True, found=0)  # lost a race
    assert cooldown.remaining() > 0


async def test_a_stop_ends_a_cooldown_early_and_zero_seconds_turns_it_off() -> None:
    stopped = Flag()
    cooldown = ClaimCooldown(60.0)
    cooldown.claimed(woken=True, found=0)
    waiting = asyncio.ensure_future(cooldown.wait(stopped))
    await asyncio.sleep(0)
    assert not waiting.done()
    stopped.set()
    await bounded(waiting)
    off = ClaimCooldown(0.0)
    off.claimed(woken=True, found=0)
    off.claimed(woken=True, found=0)
    assert off.remaining() == 0
