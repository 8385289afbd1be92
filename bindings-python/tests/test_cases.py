"""The Python cases of shared/cases/CASES.md as named regression tests:

* C05 (Python flavour): a queued acquire parks; the waiter resumes exactly once, at most 3
  loop iterations after the release (counted, on a virtual clock and on real loops);
* C11: a woken waiter cancelled before it runs never wedges the bulkhead (+ 10 000-iteration
  fuzz of {release, cancel W1, cancel W2, new acquire} within one tick);
* C13: a non-blocking (or blocking) acquire during the hand-off window never steals the permit.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from typing import Any, Callable, Dict, List, Optional

import pytest

import hullguard
from _support import (
    CountingAwaitable,
    CountingContext,
    Ticker,
    VirtualClockLoop,
    assert_conserved,
    assert_idle,
    outcome_of,
)


class _LoopIterations:
    """A ``Ticker``-like view of ``VirtualClockLoop.iterations``."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self.loop = loop

    @property
    def n(self) -> int:
        return self.loop.iterations


C05_FLAVOURS = ["await", "async_with", "async_with_bulkhead", "weighted", "with_timeout", "no_deadline", "registry"]


def _c05_waiter(flavour: str, bh: hullguard.Bulkhead, reg: hullguard.Registry, ticker: Any) -> "tuple[Callable[[], Any], CountingAwaitable]":
    """W for one acquire flavour: a coroutine function and the counter of its resumptions."""
    if flavour in ("async_with", "async_with_bulkhead"):
        cm = CountingContext(bh.acquire() if flavour == "async_with" else bh, ticker)

        async def with_cm() -> Any:
            async with cm as p:
                return p

        return with_cm, cm.enter
    aw = {
        "await": lambda: bh.acquire(),
        "weighted": lambda: bh.acquire(weight=2),
        "with_timeout": lambda: bh.acquire(timeout=5.0),
        "no_deadline": lambda: bh.acquire(timeout=math.inf),
        "registry": lambda: reg.acquire("k"),
    }[flavour]()
    counted = CountingAwaitable(aw, ticker)

    async def plain() -> Any:
        return await counted

    return plain, counted


@pytest.mark.parametrize("flavour", C05_FLAVOURS)
def test_c05_waiter_parks_and_resumes_once_on_virtual_clock(vloop: VirtualClockLoop, flavour: str) -> None:
    """L=1 (2 for the weighted flavour); H holds and sleeps 200 ms of virtual time; W waits.
    W is granted at t=200 ms, resumed exactly once, within 3 loop iterations of the release,
    and is never polled while it waits."""
    weight = 2 if flavour == "weighted" else 1
    bh = hullguard.Bulkhead(max_concurrent=weight, queue_timeout=30.0, _clock=vloop.clock)
    reg = hullguard.Registry(max_concurrent=1, _clock=vloop.clock)
    target = reg.get("k") if flavour == "registry" else bh
    iters = _LoopIterations(vloop)
    released: Dict[str, int] = {}

    async def holder() -> None:
        p = await target.acquire(weight=weight)
        await asyncio.sleep(0.2)
        released["iteration"], released["ns"] = vloop.iterations, vloop.now_ns
        p.release()

    w_fn, counted = _c05_waiter(flavour, bh, reg, iters)
    h = vloop.create_task(holder())
    vloop.run_until_quiet()
    w = vloop.create_task(w_fn())
    vloop.run_until_quiet()
    assert target.stats()["queued"] == 1
    assert len(counted.sends) == 1
    for _ in range(199):
        vloop.advance(1)
    assert len(counted.sends) == 1 and not w.done()  # parked: no polls while it waits
    vloop.advance(1)
    assert h.done() and w.done()
    assert released["ns"] == 200_000_000
    assert len(counted.sends) == 2  # resumed exactly once
    assert counted.sends[1] - released["iteration"] <= 3
    permit = w.result() if flavour != "async_with_bulkhead" else None
    if flavour in ("async_with", "async_with_bulkhead"):
        assert_idle(target)  # the async with already returned it
    else:
        assert isinstance(permit, hullguard.Permit) and permit.weight == weight
        assert target.stats()["active"] == weight
        s = target.stats()
        assert (s["queue_wait_count"], s["queue_wait_sum_ns"]) == (1, 200_000_000)
        permit.release()
        assert_idle(target)
    vloop.advance(10_000)  # W's queue timer (if any) was cancelled with the grant
    assert target.stats()["rejected_by_reason"]["timeout"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("flavour", C05_FLAVOURS)
async def test_c05_waiter_resumes_once_on_real_loops(flavour: str) -> None:
    weight = 2 if flavour == "weighted" else 1
    bh = hullguard.Bulkhead(max_concurrent=weight)
    reg = hullguard.Registry(max_concurrent=1)
    target = reg.get("k") if flavour == "registry" else bh
    ticker = Ticker()
    held = await target.acquire(weight=weight)
    w_fn, counted = _c05_waiter(flavour, bh, reg, ticker)
    w = asyncio.ensure_future(w_fn())
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(counted.sends) == 1 and not w.done()
    held.release()
    released_at = ticker.n
    result = await w
    ticker.stop()
    assert len(counted.sends) == 2
    assert counted.sends[1] - released_at <= 3
    if isinstance(result, hullguard.Permit):
        result.release()
    assert_idle(target)


# ---------------------------------------------------------------------------------------------
# C11


@pytest.mark.asyncio
async def test_c11_woken_waiter_cancelled_before_it_runs() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8)
    h = await bh.acquire()
    w1_holds: List[Any] = []

    async def w1_body() -> None:
        p = await bh.acquire()
        w1_holds.append(p)  # never reached

    w1 = asyncio.ensure_future(w1_body())
    w2 = asyncio.ensure_future(bh.acquire())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert bh.stats()["queued"] == 2
    ticker = Ticker()
    # the same tick: release (W1 is woken), then cancel W1 before it runs
    h.release()
    w1.cancel()
    start = ticker.n
    assert_conserved(bh)
    while not w2.done():
        await asyncio.sleep(0)
        assert ticker.n - start <= 3, "W2 not granted within 2 loop iterations"
    granted_at = ticker.n
    ticker.stop()
    assert granted_at - start <= 2
    assert w1.cancelled() and w1_holds == []
    with pytest.raises(asyncio.CancelledError):
        await w1
    p2 = w2.result()
    s = assert_conserved(bh)
    assert (s["active"], s["queued"], s["granted_unclaimed"]) == (1, 0, 0)
    p2.release()
    s = assert_idle(bh)
    assert s["available"] == 1  # value 1, no waiters, not locked
    fresh = bh.try_acquire()
    assert fresh is not None
    fresh.release()
    # a fresh acquire completes without suspending
    ran: List[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    p = await bh.acquire()
    assert ran == []
    p.release()
    assert_idle(bh)


C11_OPS = ("release", "cancel_w1", "cancel_w2", "new_acquire", "try_acquire")


def test_c11_fuzz_10000_orderings_within_one_tick(vloop: VirtualClockLoop) -> None:
    """10 000 iterations: {release H, cancel W1, cancel W2, a new acquire X} (plus a
    non-blocking try_acquire, as in C13), a random subset in a random order, all inside one
    loop iteration. Every iteration ends (virtual time never moves: well within 100 ms) with
    one permit free and nothing queued; every acquire settles once; a cancelled waiter holds
    nothing; the non-blocking acquire never barges."""
    rng = random.Random(0xC11)
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8, queue_timeout=math.inf, _clock=vloop.clock)

    async def acquire() -> hullguard.Permit:
        return await bh.acquire()

    for i in range(10_000):
        h = bh.try_acquire()
        assert h is not None, i
        w1 = vloop.create_task(acquire())
        w2 = vloop.create_task(acquire())
        vloop.run_until_quiet()
        assert bh.stats()["queued"] == 2
        ops = [op for op in C11_OPS if op == "release" or rng.random() < 0.6]
        rng.shuffle(ops)
        tasks = [w1, w2]
        barged: List[Optional[hullguard.Permit]] = []

        def one_tick() -> None:
            for op in ops:
                if op == "release":
                    h.release()
                elif op == "cancel_w1":
                    w1.cancel()
                elif op == "cancel_w2":
                    w2.cancel()
                elif op == "new_acquire":
                    tasks.append(vloop.create_task(acquire()))
                else:
                    barged.append(bh.try_acquire())
            assert_conserved(bh, f"iteration {i} {ops}")

        vloop.call_soon(one_tick)
        vloop.run_until_quiet()
        assert barged in ([], [None]), f"iteration {i} {ops}: try_acquire barged"
        # exactly one holder at a time until every acquire has settled
        settled: List[asyncio.Task] = []
        while True:
            s = assert_conserved(bh, f"iteration {i} {ops}")
            assert s["active"] <= 1 and s["granted_unclaimed"] == 0, (i, ops, s)
            holders = [t for t in tasks if t.done() and t not in settled and outcome_of(t) == "granted"]
            assert len(holders) <= 1, (i, ops)
            pending = [t for t in tasks if not t.done()]
            if not holders:
                assert not pending, f"iteration {i} {ops}: a waiter left queued with the permit free"
                break
            settled.append(holders[0])
            holders[0].result().release()
            vloop.run_until_quiet()
        for t in tasks:
            assert t.done()
            if t.cancelled():
                assert t not in settled
        assert w1.cancelled() == ("cancel_w1" in ops)
        assert w2.cancelled() == ("cancel_w2" in ops)
        s = assert_idle(bh, f"iteration {i} {ops}")
        assert s["available"] == 1
    assert vloop.now_ns == 0  # no iteration needed any time to pass
    assert vloop.timers_armed == 0


# ---------------------------------------------------------------------------------------------
# C13


def _check_handoff(bh: hullguard.Bulkhead, trace: List[Dict[str, int]]) -> None:
    s = bh.stats()
    trace.append(s)
    assert s["available"] >= 0, s
    assert s["active"] <= 1 and s["active"] + s["granted_unclaimed"] <= 1, s
    assert_conserved(bh)


@pytest.mark.asyncio
@pytest.mark.parametrize("x_from", ["same_task", "thread"])
async def test_c13_try_acquire_during_handoff_fails(x_from: str) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8)
    trace: List[Dict[str, int]] = []
    observer = _Observer(bh, trace)
    a = await bh.acquire()
    b = asyncio.ensure_future(bh.acquire())
    await asyncio.sleep(0)
    assert bh.stats()["queued"] == 1
    a.release()
    # same tick, before B resumes: X tries without waiting
    x: List[Optional[hullguard.Permit]] = []
    if x_from == "same_task":
        x.append(bh.try_acquire())
    else:
        t = threading.Thread(target=lambda: x.append(bh.try_acquire()))
        t.start()
        t.join()
    assert x == [None]  # WouldBlock
    assert not b.done()
    s = bh.stats()
    assert (s["available"], s["active"] + s["granted_unclaimed"]) == (0, 1)
    pb = await b  # B resumes as the holder
    s = bh.stats()
    assert (s["active"], s["available"], s["granted_unclaimed"]) == (1, 0, 0)
    assert s["rejected_by_reason"]["concurrency_limit"] == 1
    pb.release()
    await asyncio.sleep(0)
    observer.stop()
    assert_idle(bh)
    assert len(trace) >= 3 and all(t["available"] >= 0 for t in trace)


@pytest.mark.asyncio
async def test_c13_blocking_acquire_during_handoff_queues_behind() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8)
    trace: List[Dict[str, int]] = []
    observer = _Observer(bh, trace)
    order: List[str] = []

    async def run(name: str) -> hullguard.Permit:
        p = await bh.acquire()
        order.append(name)
        return p

    a = await bh.acquire()
    b = asyncio.ensure_future(run("B"))
    await asyncio.sleep(0)
    a.release()
    x = asyncio.ensure_future(run("X"))  # the same tick, before B resumes
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["B"] and not x.done()
    assert bh.stats()["queued"] == 1
    for _ in range(5):
        await asyncio.sleep(0)
    assert not x.done()  # granted only after B releases
    b.result().release()
    px = await x
    assert order == ["B", "X"]
    px.release()
    observer.stop()
    assert_idle(bh)
    assert all(t["available"] >= 0 and t["active"] <= 1 for t in trace)


class _Observer:
    """Checks the C13 observation points once per loop iteration."""

    def __init__(self, bh: hullguard.Bulkhead, trace: List[Dict[str, int]]) -> None:
        self.bh, self.trace = bh, trace
        self.loop = asyncio.get_running_loop()
        self.stopped = False
        self.error: Optional[BaseException] = None
        self.handle = self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        try:
            _check_handoff(self.bh, self.trace)
        except BaseException as e:  # noqa: BLE001 - re-raised in stop()
            self.error = self.error or e
        if not self.stopped:
            self.handle = self.loop.call_soon(self._tick)

    def stop(self) -> None:
        self.stopped = True
        self.handle.cancel()
        if self.error is not None:
            raise self.error


def test_c35_queue_waits_on_the_virtual_clock(vloop: VirtualClockLoop) -> None:
    """C35 (../shared/cases/CASES.md): L=1, Q=10 on the binding's test clock. W1 waits exactly
    90 ms; W2's timeout is not a wait; W3 (admitted at once) records none; an awaitable created
    at t=0 and first awaited at t=500 ms waits from its first await (100 ms), not 600 ms. The
    histogram holds each wait once (both in the bucket below 2^27 ns)."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=10, _clock=vloop.clock)
    late = bh.acquire()  # step 4: created at t=0, not awaited yet (nothing queues)
    outcomes: Dict[str, str] = {}

    async def hold(name: str, ms: int, timeout: Optional[float] = None, ctx: Any = None) -> None:
        try:
            p = await (ctx if ctx is not None else bh.acquire(timeout=timeout))
        except hullguard.BulkheadQueueTimeoutError:
            outcomes[name] = "timeout"
            return
        outcomes[name] = "granted"
        await asyncio.sleep(ms / 1000)
        p.release()

    def at(ms: int, coro: Any) -> None:
        vloop.advance(ms - vloop.now_ns // 1_000_000)
        vloop.create_task(coro)
        vloop.run_until_quiet()

    queued = []
    at(0, hold("h", 100))
    at(10, hold("w1", 100))
    queued.append(bh.stats()["queued"])
    at(20, hold("w2", 0, timeout=0.05))
    queued.append(bh.stats()["queued"])
    vloop.advance(50)  # t=70: W2 times out
    queued.append(bh.stats()["queued"])
    assert outcomes["w2"] == "timeout"
    assert (bh.stats()["queue_wait_count"], bh.stats()["queue_wait_sum_ns"]) == (0, 0)
    vloop.advance(30)  # t=100: H releases, W1 is granted after exactly 90 ms
    queued.append(bh.stats()["queued"])
    assert queued == [1, 2, 1, 0]  # step 5: the gauge equals the live waiters at every sample
    s = bh.stats()
    assert (s["queue_wait_count"], s["queue_wait_sum_ns"], s["queue_wait_max_ns"]) == (1, 90_000_000, 90_000_000)
    at(300, hold("w3", 50))  # step 3: admitted at once, no wait
    assert bh.stats()["queue_wait_count"] == 1
    at(400, hold("h2", 200))
    at(500, hold("late", 0, ctx=late))
    vloop.advance(100)  # t=600: H2 releases, the late awaitable is granted
    vloop.run_until_quiet()
    assert outcomes["late"] == "granted"
    s = bh.stats()
    assert (s["queue_wait_count"], s["queue_wait_sum_ns"], s["queue_wait_max_ns"]) == (2, 190_000_000, 100_000_000)
    h = s["queue_wait_histogram"]
    assert h["134217728"] == 2 and sum(h.values()) == 2, h
    vloop.advance(1_000)
    assert_idle(bh)
