"""Cancellation fuzz (seeded): random cancel / release / release_partial / acquire /
try_acquire / set_limit orderings within one loop tick, 10 000 iterations in total (half on
the default loop, half on uvloop). After the tick and after the loop settles: I2 conservation,
I3 settle-once, I4 no idle capacity (the head waiter does not fit), I6 FIFO; after cleanup I5
(queued == 0, available == limit, granted_unclaimed == 0)."""

from __future__ import annotations

import asyncio
import math
import random
from typing import List, Optional, Tuple

import pytest

import hullguard
from _support import LOOP_FACTORIES, assert_conserved, assert_idle

ITERATIONS_TOTAL = 10_000
ITERATIONS = ITERATIONS_TOTAL // len(LOOP_FACTORIES)


class Waiter:
    def __init__(self, bh: hullguard.Bulkhead, weight: int, seq: int) -> None:
        self.weight, self.seq = weight, seq
        self.task = asyncio.ensure_future(self._run(bh))
        self.claimed = False  # its permit moved to the held list

    async def _run(self, bh: hullguard.Bulkhead) -> hullguard.Permit:
        return await bh.acquire(weight=self.weight)


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def _collect(waiters: List[Waiter], held: List[hullguard.Permit], where: str) -> None:
    """Moves the permits of granted waiters to ``held``; checks every settled waiter settled
    one way (a permit, its own cancellation, or a concurrency_limit after a shrink)."""
    for w in waiters:
        if not w.task.done() or w.claimed:
            continue
        w.claimed = True
        if w.task.cancelled():
            continue
        exc = w.task.exception()
        if exc is not None:
            assert isinstance(exc, hullguard.BulkheadFullError) and exc.reason == "concurrency_limit", (where, exc)
            continue
        p = w.task.result()
        assert isinstance(p, hullguard.Permit) and p.weight == w.weight and not p.released, where
        held.append(p)


def _check_no_idle_capacity(bh: hullguard.Bulkhead, waiters: List[Waiter], where: str) -> None:
    """I4 + I6: the oldest live waiter is the head and does not fit."""
    s = assert_conserved(bh, where)
    live = [w for w in waiters if not w.task.done()]
    assert s["queued"] == len(live), (where, s, len(live))
    assert s["granted_unclaimed"] == 0, (where, s)
    if live:
        head = min(live, key=lambda w: w.seq)
        assert head.weight > s["available"], f"{where}: head weight {head.weight} fits in {s}"


async def _one_iteration(rng: random.Random, i: int) -> Tuple[int, int, int]:
    limit = rng.randint(1, 4)
    bh = hullguard.Bulkhead(max_concurrent=limit, max_queue=32, queue_timeout=math.inf)
    held: List[hullguard.Permit] = []
    waiters: List[Waiter] = []
    seq = 0
    races = 0  # cancels that hit a waiter already granted but not yet resumed
    for _ in range(rng.randint(0, limit)):
        p = bh.try_acquire(rng.randint(1, limit))
        if p is not None:
            held.append(p)
    for _ in range(rng.randint(1, 4)):
        waiters.append(Waiter(bh, rng.randint(1, limit), seq))
        seq += 1
    await _settle()
    _collect(waiters, held, f"#{i} setup")
    _check_no_idle_capacity(bh, waiters, f"#{i} setup")

    # one tick: no await between these
    ops: List[str] = []
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(("release", "release", "partial", "cancel", "cancel", "acquire", "try", "limit"))
        ops.append(op)
        if op == "release" and held:
            p = held.pop(rng.randrange(len(held)))
            assert p.release() is True
        elif op == "partial" and held:
            p = rng.choice(held)
            if p.weight > 1:
                p.release_partial(rng.randint(1, p.weight - 1))
        elif op == "cancel":
            live = [w for w in waiters if not w.task.done()]
            if live:
                races += bh.stats()["granted_unclaimed"] > 0
                rng.choice(live).task.cancel()
        elif op == "acquire":
            waiters.append(Waiter(bh, rng.randint(1, limit), seq))
            seq += 1
        elif op == "try":
            p = bh.try_acquire(rng.randint(1, limit))
            if p is not None:
                held.append(p)
        elif op == "limit" and rng.random() < 0.5:
            bh.set_limit(rng.randint(1, limit))
    where = f"#{i} limit={limit} ops={ops}"
    assert_conserved(bh, where + " (end of tick)")

    await _settle()
    _collect(waiters, held, where)
    _check_no_idle_capacity(bh, waiters, where)

    # cleanup: release everything, in random order, until every waiter has settled
    bh.set_limit(limit)
    rounds = 0
    while held or any(not w.task.done() for w in waiters):
        rounds += 1
        assert rounds < 100, f"{where}: cleanup does not converge: {bh.stats()}"
        rng.shuffle(held)
        while held:
            held.pop().release()
        await _settle()
        _collect(waiters, held, where + " cleanup")
        _check_no_idle_capacity(bh, waiters, where + " cleanup")
    s = assert_idle(bh, where + " after cleanup")
    assert s["available"] == limit
    cancelled = sum(1 for w in waiters if w.task.cancelled())
    return len(waiters), cancelled, races


@pytest.mark.asyncio
async def test_cancellation_fuzz() -> None:
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    rng = random.Random(f"hullguard-fuzz-{loop_name}")
    waiters = cancelled = races = 0
    for i in range(ITERATIONS):
        w, c, r = await _one_iteration(rng, i)
        waiters += w
        cancelled += c
        races += r
    # the fuzz really exercised cancellation, including cancel-after-grant in the same tick
    assert waiters > ITERATIONS and cancelled > ITERATIONS // 4, (waiters, cancelled)
    assert races > ITERATIONS // 50, races
