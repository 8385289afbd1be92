"""Per-call timeouts (docs/design.md §5.1): None -> queue_timeout; math.inf -> no deadline; 0 -> do
not queue; bad values -> ValueError/TypeError naming the argument (test_api.py). The asyncio
cases run on a virtual clock (``vloop``): the binding arms its queue timers with
``loop.call_later`` and the test fires them by advancing the clock, so nothing here depends on
wall-clock time."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import pytest

import hullguard
from _support import VirtualClockLoop, assert_conserved, assert_idle, outcome_of


async def _acquire(aw: Any) -> Any:
    return await aw


def _held(bh: hullguard.Bulkhead, weight: int = 1) -> hullguard.Permit:
    p = bh.try_acquire(weight)
    assert p is not None
    return p


def test_none_means_queue_timeout(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=0.05, _clock=vloop.clock)
    holder = _held(bh)
    for t in (bh.acquire(), bh.acquire(timeout=None)):
        task = vloop.create_task(_acquire(t))
        vloop.run_until_quiet()
        assert bh.stats()["queued"] == 1
        assert vloop.pending_timers() == [vloop.now_ns + 50_000_000]
        vloop.advance(49)
        assert not task.done()
        vloop.advance(1)
        assert task.done() and outcome_of(task) == "timeout"
        err = task.exception()
        assert isinstance(err, hullguard.BulkheadQueueTimeoutError)
        assert not isinstance(err, TimeoutError)
        assert err.snapshot == {"active": 1, "queued": 0, "limit": 1, "available": 0, "key": None}
    s = bh.stats()
    assert (s["queued"], s["rejected_by_reason"]["timeout"]) == (0, 2)
    holder.release()  # a timed-out waiter is never handed a permit later (I7)
    assert_idle(bh)


def test_explicit_timeout_overrides_queue_timeout(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=30.0, _clock=vloop.clock)
    holder = _held(bh)
    short = vloop.create_task(_acquire(bh.acquire(timeout=0.2)))
    default = vloop.create_task(_acquire(bh.acquire()))
    vloop.run_until_quiet()
    # One loop timer for every queued deadline, armed for the earliest; re-armed when it fires.
    assert vloop.pending_timers() == [200_000_000]
    vloop.advance(200)
    assert outcome_of(short) == "timeout" and not default.done()
    assert vloop.pending_timers() == [30_000_000_000]
    vloop.advance(29_799)
    assert not default.done()
    vloop.advance(1)
    assert outcome_of(default) == "timeout"
    holder.release()
    assert_idle(bh)


@pytest.mark.parametrize("where", ["call", "config"])
def test_inf_means_no_deadline(vloop: VirtualClockLoop, where: str) -> None:
    qt = math.inf if where == "config" else 0.01
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=qt, _clock=vloop.clock)
    assert bh.queue_timeout == qt
    holder = _held(bh)
    aw = bh.acquire(timeout=math.inf) if where == "call" else bh.acquire()
    task = vloop.create_task(_acquire(aw))
    vloop.run_until_quiet()
    assert vloop.timers_armed == 0 and bh.stats()["queued"] == 1
    vloop.advance(86_400_000)  # a day
    assert not task.done()
    holder.release()
    vloop.run_until_quiet()
    assert outcome_of(task) == "granted"
    s = bh.stats()
    assert (s["queue_wait_count"], s["queue_wait_sum_ns"]) == (1, 86_400_000_000_000)
    task.result().release()
    assert_idle(bh)


def test_zero_means_do_not_queue(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=4, _clock=vloop.clock)
    free = vloop.create_task(_acquire(bh.acquire(timeout=0)))
    vloop.run_until_quiet()
    assert outcome_of(free) == "granted"  # admitted at once when free
    holder = _held(bh)
    for t in (0, 0.0):
        task = vloop.create_task(_acquire(bh.acquire(timeout=t)))
        vloop.run_until_quiet()
        assert outcome_of(task) == "concurrency_limit"
        assert isinstance(task.exception(), hullguard.BulkheadFullError)
    assert vloop.timers_armed == 0
    s = bh.stats()
    assert (s["queued"], s["rejected_by_reason"]["concurrency_limit"]) == (0, 2)
    free.result().release()
    # with a waiter queued, timeout=0 does not barge (I6)
    waiter = vloop.create_task(_acquire(bh.acquire(weight=2)))
    vloop.run_until_quiet()
    assert bh.stats()["queued"] == 1 and bh.stats()["available"] == 1
    nowait = vloop.create_task(_acquire(bh.acquire(timeout=0)))
    vloop.run_until_quiet()
    assert outcome_of(nowait) == "concurrency_limit"
    holder.release()
    vloop.run_until_quiet()
    assert outcome_of(waiter) == "granted"
    waiter.result().release()
    assert_idle(bh)


def test_config_queue_timeout_zero_fails_fast(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=0, _clock=vloop.clock)
    holder = _held(bh)
    task = vloop.create_task(_acquire(bh.acquire()))
    vloop.run_until_quiet()
    assert outcome_of(task) == "concurrency_limit"
    holder.release()


def test_grant_cancels_the_timer_and_queue_wait_is_virtual(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=1.0, _clock=vloop.clock)
    holder = _held(bh)
    task = vloop.create_task(_acquire(bh.acquire()))
    vloop.run_until_quiet()
    vloop.advance(30)
    holder.release()
    vloop.run_until_quiet()
    assert outcome_of(task) == "granted"
    # The shared queue timer stays armed for the deadline; when it fires it finds the ticket
    # settled and counts nothing.
    assert vloop.pending_timers() == [1_000_000_000]
    vloop.advance(5_000)
    assert vloop.pending_timers() == []
    s = bh.stats()
    assert s["rejected_by_reason"]["timeout"] == 0
    assert (s["queue_wait_count"], s["queue_wait_sum_ns"], s["queue_wait_max_ns"]) == (1, 30_000_000, 30_000_000)
    task.result().release()
    assert_idle(bh)


def test_asyncio_timeout_and_wait_for_still_raise_timeout_error(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, _clock=vloop.clock)
    holder = _held(bh)

    async def with_timeout() -> None:
        async with asyncio.timeout(0.1):
            await bh.acquire(timeout=math.inf)

    async def with_wait_for() -> None:
        await asyncio.wait_for(bh.acquire(), 0.1)

    for fn in (with_timeout, with_wait_for):
        task = vloop.create_task(fn())
        vloop.run_until_quiet()
        assert bh.stats()["queued"] == 1
        vloop.advance(100)
        assert task.done()
        assert type(task.exception()) is TimeoutError
        assert bh.stats()["queued"] == 0
    s = bh.stats()
    assert (s["rejected_by_reason"]["aborted"], s["rejected_by_reason"]["timeout"]) == (2, 0)
    holder.release()
    assert_idle(bh)


def test_drain_timeout_is_not_a_queue_timeout(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=0.01, _clock=vloop.clock)
    holder = _held(bh)
    forever = vloop.create_task(_acquire(bh.drain()))
    bounded = vloop.create_task(_acquire(bh.drain(0.5)))
    vloop.run_until_quiet()
    vloop.advance(499)
    assert not bounded.done()
    vloop.advance(1)
    assert bounded.result() == {"drained": False, "active": 1, "queued": 0}
    vloop.advance(3_600_000)
    assert not forever.done()
    holder.release()
    vloop.run_until_quiet()
    assert forever.result() == {"drained": True, "active": 0, "queued": 0}


def test_registry_timeouts_on_the_virtual_clock(vloop: VirtualClockLoop) -> None:
    reg = hullguard.Registry(
        max_concurrent=1, queue_timeout=0.1, overrides={"slow": {"queue_timeout": 1.0}}, _clock=vloop.clock
    )
    holders = [reg.try_acquire("fast"), reg.try_acquire("slow")]
    fast = vloop.create_task(_acquire(reg.acquire("fast")))
    slow = vloop.create_task(_acquire(reg.acquire("slow")))
    vloop.run_until_quiet()
    vloop.advance(100)
    assert outcome_of(fast) == "timeout" and not slow.done()
    assert fast.exception().snapshot["key"] == "fast"
    vloop.advance(900)
    assert outcome_of(slow) == "timeout"
    for h in holders:
        assert h is not None
        h.release()
    for key in ("fast", "slow"):
        assert_idle(reg.get(key))


# ---------------------------------------------------------------------------------------------
# acquire_sync: real threads; only generous upper bounds, never exact durations


def test_acquire_sync_timeout_zero_does_not_queue() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    holder = _held(bh)
    with pytest.raises(hullguard.BulkheadFullError) as info:
        bh.acquire_sync(timeout=0)
    assert info.value.reason == "concurrency_limit"
    assert bh.stats()["queued"] == 0
    holder.release()
    bh.acquire_sync(timeout=0).release()
    assert_idle(bh)


@pytest.mark.parametrize("how", ["call", "config"])
def test_acquire_sync_times_out(how: str) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=0.02 if how == "config" else 30.0)
    holder = _held(bh)
    start = time.monotonic()
    with pytest.raises(hullguard.BulkheadQueueTimeoutError) as info:
        bh.acquire_sync(timeout=0.02 if how == "call" else None)
    assert time.monotonic() - start < 5.0
    assert not isinstance(info.value, TimeoutError)
    assert info.value.reason == "timeout"
    s = bh.stats()
    assert (s["queued"], s["rejected_by_reason"]["timeout"]) == (0, 1)
    holder.release()
    assert_idle(bh)


def test_acquire_sync_inf_waits_for_a_release_from_another_thread() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=0.001)
    holder = _held(bh)

    def release_when_queued() -> None:
        for _ in range(5000):
            if bh.stats()["queued"] == 1:
                break
            time.sleep(0.001)
        holder.release()

    t = threading.Thread(target=release_when_queued)
    t.start()
    p = bh.acquire_sync(timeout=math.inf)
    t.join()
    assert bh.stats()["active"] == 1
    p.release()
    assert_conserved(bh)
    assert_idle(bh)


# ---------------------------------------------------------------------------------------------
# two events in one loop iteration (I7: one winner, nothing lost, in either order)

# (first, second) -> (W's outcome, V's outcome) after the iteration
RACES = {
    ("release", "timer"): ("granted", "queued"),  # the grant won; the timer finds it settled
    ("timer", "release"): ("timeout", "granted"),  # W timed out; the release goes to V
    ("release", "close"): ("granted", "shutdown"),
    ("close", "release"): ("shutdown", "shutdown"),
    ("cancel", "timer"): ("aborted", "queued"),  # the task's own CancelledError; core: timeout
    ("timer", "cancel"): ("aborted", "queued"),
    ("release", "cancel"): ("aborted", "granted"),  # granted, then cancelled: passed on to V
    ("cancel", "release"): ("aborted", "granted"),
    ("release", "shrink"): ("granted", "queued"),  # never revoked: available goes negative
    ("shrink", "release"): ("concurrency_limit", "granted"),  # W no longer fits the limit
}


@pytest.mark.parametrize("events", list(RACES), ids=["-then-".join(r) for r in RACES])
def test_two_events_in_one_iteration(vloop: VirtualClockLoop, events: "tuple[str, str]") -> None:
    """W (weight 2, 100 ms) then V (weight 1) wait behind H (weight 2, limit 2); two events
    land in the same loop iteration, in both orders. One winner per race (I7): each acquire
    settles once, nothing is granted to a timed-out or cancelled waiter, V is not left waiting
    with capacity free, and everything is back at the end."""
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=4, _clock=vloop.clock)
    holder = _held(bh, 2)
    w = vloop.create_task(_acquire(bh.acquire(weight=2, timeout=0.1)))
    v = vloop.create_task(_acquire(bh.acquire(weight=1, timeout=math.inf)))
    vloop.run_until_quiet()
    fire_w_timer = vloop.take_timer()
    actions = {
        "release": holder.release,
        "timer": fire_w_timer,
        "close": bh.close,
        "cancel": w.cancel,
        "shrink": lambda: bh.set_limit(1),
    }

    def one_iteration() -> None:
        for e in events:
            actions[e]()
        assert_conserved(bh)

    vloop.call_soon(one_iteration)
    vloop.run_until_quiet()
    w_out = outcome_of(w) if w.done() else "queued"
    v_out = outcome_of(v) if v.done() else "queued"
    assert (w_out, v_out) == RACES[events]
    s = assert_conserved(bh)
    assert s["granted_unclaimed"] == 0
    assert s["queued"] == (v_out == "queued")
    if "timer" in events:
        # the timer's cancel reaches the core first whenever it runs before a grant (a task
        # cancel only takes effect when the task next runs)
        assert s["rejected_by_reason"]["timeout"] == (events != ("release", "timer"))
    if events == ("release", "shrink"):
        assert (s["active"], s["limit"], s["available"]) == (2, 1, -1)
    # cleanup: release everything that is held; V settles; everything is back
    if "release" not in events:
        holder.release()
    if w_out == "granted":
        w.result().release()
    vloop.run_until_quiet()
    assert v.done()
    if outcome_of(v) == "granted":
        v.result().release()
    s = bh.stats()
    assert (s["active"], s["queued"], s["granted_unclaimed"]) == (0, 0, 0)
    assert s["available"] == s["limit"]
