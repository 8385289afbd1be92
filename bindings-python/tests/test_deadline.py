"""Deadlines and timeout budgets in Python (issue 17; docs/design.md §5.9, §4.10; CASES C36).

``deadline=`` on every acquire (absolute seconds on the ``time.monotonic()`` scale), the ambient
budget ``hullguard.deadline(seconds)`` / ``deadline_at`` (a ContextVar: nested budgets narrow,
tasks and ``copy_context`` threads see it), the call timeout capped by the deadline, the
queue-delay options (CoDel ``shed``, adaptive LIFO, ``apply_limits(queue_delay=...)``) and the
httpx transport's timeouts and ``grpc-timeout`` header.

Everything that waits runs on a virtual clock (``vloop``: the bulkhead's ``_clock`` and the
budgets' ``_deadline._set_clock`` hook read the loop's virtual ns), except three checks that
the real ``time.monotonic()`` scale is the core's (CLOCK_MONOTONIC), which allow 10x their
target.
"""

from __future__ import annotations

import asyncio
import contextvars
import http.server
import math
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import httpx
import pytest

import hullguard
from hullguard import _deadline, _native
from hullguard.httpx import BulkheadTransport, SyncBulkheadTransport, grpc_timeout
from _support import FixedClock, VirtualClockLoop, assert_idle, outcome_of

S = 1_000_000_000  # ns


@pytest.fixture
def vclock(vloop: VirtualClockLoop) -> Iterator[VirtualClockLoop]:
    """``vloop`` whose virtual clock is also "now" for ``hullguard.deadline`` / ``remaining``."""
    _deadline._set_clock(vloop.clock)
    try:
        yield vloop
    finally:
        _deadline._set_clock(None)


async def _acquire(aw: Any) -> Any:
    return await aw


def _task(loop: VirtualClockLoop, aw: Any) -> "asyncio.Task[Any]":
    t = loop.create_task(_acquire(aw))
    loop.run_until_quiet()
    return t


def _held(bh: Any) -> hullguard.Permit:
    p = bh.try_acquire()
    assert p is not None
    return p


def _timeouts(bh: hullguard.Bulkhead) -> int:
    return int(bh.stats()["rejected_by_reason"]["timeout"])


# ----- C36 ------------------------------------------------------------------------------------


def test_c36_passed_deadline_is_refused_timeout_not_invalid(fixed: FixedClock) -> None:
    """C36 step 3: a deadline that has passed (or is exactly now) is refused ``timeout`` at once
    — never ``ValueError``, never queued, no ticket — even with permits free, in every entry
    point; the dry run reads it as the admission does."""
    fixed.ns = 6 * S
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, queue_timeout=60.0, _clock=fixed)
    reg = hullguard.Registry(max_concurrent=1, max_queue=2, queue_timeout=60.0, _clock=fixed)
    for passed in (5.0, 6.0, 6, 0, -1.0, -1e300, -(10**400)):
        with pytest.raises(hullguard.BulkheadQueueTimeoutError) as e:
            bh.try_acquire(deadline=passed)
        assert e.value.reason == "timeout" and e.value.detail["bound"] == "deadline"
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            bh.acquire_sync(deadline=passed)
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            reg.try_acquire("k", deadline=passed)
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            reg.acquire_sync("k", deadline=passed)
        for a in (bh.try_admit(deadline=passed), bh.admit_sync(deadline=passed),
                  reg.try_admit("k", deadline=passed), reg.admit_sync("k", deadline=passed)):
            assert not a.ok and a.reason == "timeout" and a.detail["bound"] == "deadline"
        assert bh.would_admit(deadline=passed).decision == "timeout"
        assert reg.would_admit("k", deadline=passed).decision == "timeout"
    s = bh.stats()
    assert (s["queued"], s["active"], s["available"]) == (0, 0, 1)
    assert s["rejected_by_reason"]["timeout"] == 7 * 4  # the dry runs count nothing
    # One ns left: admitted while permits are free.
    p = bh.try_acquire(deadline=6.000000001)
    assert p is not None
    p.release()
    assert_idle(bh)


def test_c36_passed_deadline_async_raises_the_timeout_error(vclock: VirtualClockLoop) -> None:
    vclock.advance(6000)
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, queue_timeout=60.0, _clock=vclock.clock)
    reg = hullguard.Registry(max_concurrent=1, _clock=vclock.clock)
    tasks = [
        _task(vclock, bh.acquire(deadline=5.0)),
        _task(vclock, bh.admit(deadline=5.0)),
        _task(vclock, reg.acquire("k", deadline=6.0)),
        _task(vclock, reg.admit("k", deadline=6.0)),
    ]
    assert all(t.done() for t in tasks)
    assert outcome_of(tasks[0]) == "timeout" and outcome_of(tasks[2]) == "timeout"
    assert isinstance(tasks[0].exception(), hullguard.BulkheadQueueTimeoutError)
    assert tasks[1].result().reason == "timeout" and tasks[3].result().reason == "timeout"

    async def block() -> None:
        async with bh:
            raise AssertionError("never admitted")

    async def spent() -> None:
        with hullguard.deadline(0):
            await block()

    t = _task(vclock, spent())
    assert outcome_of_any(t) == "timeout"
    assert bh.stats()["queued"] == 0 and _timeouts(bh) == 3
    assert_idle(bh)


def outcome_of_any(task: "asyncio.Task[Any]") -> str:
    exc = task.exception()
    assert isinstance(exc, hullguard.BulkheadError), exc
    return str(exc.reason)


def test_c36_deadline_bounds_the_queue_wait(vclock: VirtualClockLoop) -> None:
    """C36 steps 1, 2 and 4: W1 (deadline 5 s, queue timeout 60 s) and W2 (deadline 5 s, no
    queue timeout) leave the queue ``timeout`` at 5 s; the dead waiters keep no place, so X1 and
    X2 without a deadline both queue and are granted in turn."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, queue_timeout=60.0, _clock=vclock.clock)
    h = _held(bh)
    w1 = _task(vclock, bh.acquire(deadline=5.0))
    w2 = _task(vclock, bh.acquire(timeout=math.inf, deadline=5))
    assert bh.stats()["queued"] == 2
    # The binding's queue timer is the waiter's capped wait: one timer, at 5 s.
    assert vclock.pending_timers() == [5 * S]
    vclock.advance(4999)
    assert not w1.done() and not w2.done()
    vclock.advance(1)
    assert (outcome_of(w1), outcome_of(w2)) == ("timeout", "timeout")
    assert bh.stats()["queued"] == 0
    vclock.advance(1)
    x1, x2 = _task(vclock, bh.acquire()), _task(vclock, bh.acquire())
    assert not x1.done() and not x2.done() and bh.stats()["queued"] == 2
    vclock.advance(24_999)
    h.release()
    vclock.run_until_quiet()
    assert outcome_of(x1) == "granted" and not x2.done()
    x1.result().release()
    vclock.run_until_quiet()
    assert outcome_of(x2) == "granted"
    x2.result().release()
    assert _timeouts(bh) == 2
    assert_idle(bh)


def test_c36_registry_and_the_ambient_budget_bound_the_wait(vclock: VirtualClockLoop) -> None:
    reg = hullguard.Registry(max_concurrent=1, queue_timeout=60.0, _clock=vclock.clock)
    h = _held(reg.get("k"))

    async def waiter() -> Any:
        async with hullguard.deadline(2.5):
            return await reg.acquire("k")

    w = vclock.create_task(waiter())
    vclock.run_until_quiet()
    assert vclock.pending_timers() == [2_500_000_000]
    vclock.advance(2500)
    assert outcome_of(w) == "timeout" and isinstance(w.exception(), hullguard.BulkheadQueueTimeoutError)
    assert w.exception().snapshot["key"] == "k"
    h.release()


def test_c36_no_deadline_spellings(vclock: VirtualClockLoop) -> None:
    """C36 step 6: None, math.inf, 1e300, a huge int, 2**63 ns and up, and a huge finite
    deadline (2**62 ns from 0, about 146 years) all mean "no deadline" or one the queue timeout
    bounds: nothing expires at once, nothing overflows; each waiter is granted when H releases
    at 30 s, inside its 60 s queue timeout."""
    spellings: List[Any] = [None, math.inf, 1e300, 10**400, 2**63 / 1e9, 2**64, 4_611_686_018.427]
    for s in spellings[:-1]:
        assert _native._check_deadline(s) is None, s
    assert _native._check_deadline(spellings[-1]) == spellings[-1]
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=len(spellings), queue_timeout=60.0, _clock=vclock.clock)
    h = _held(bh)
    waiters = [_task(vclock, bh.acquire(deadline=d)) for d in spellings]
    assert bh.stats()["queued"] == len(spellings)
    vclock.advance(30_000)
    assert not any(w.done() for w in waiters)
    h.release()
    for w in waiters:
        vclock.run_until_quiet()
        assert outcome_of(w) == "granted"
        w.result().release()
    assert _timeouts(bh) == 0
    # And through the ambient budget: `deadline(math.inf)` adds none.
    with hullguard.deadline(math.inf) as inside:
        assert inside is None and hullguard.current_deadline() is None
        with hullguard.deadline(1e300) as huge:
            assert huge is None
        p = bh.try_acquire()
        assert p is not None
        p.release()
    assert_idle(bh)


def test_c36_retries_end_with_the_deadline(vclock: VirtualClockLoop) -> None:
    """C36 step 5: one budget (deadline 10 s) across retries with a 3 s queue timeout each: the
    attempts end at 3, 6 and 9 s; the 4th is bounded by the 1 s left and ends at 10 s; the next
    is refused at once (``bound`` "deadline"); no attempt waits past 10 s."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, queue_timeout=60.0, _clock=vclock.clock)
    h = _held(bh)
    ends: List[int] = []
    bounds: List[str] = []

    async def retry() -> None:
        async with hullguard.deadline_at(10.0):
            for _ in range(10):  # bounded
                try:
                    await bh.acquire(timeout=3.0)
                except hullguard.BulkheadQueueTimeoutError as e:
                    ends.append(vclock.now_ns // 1_000_000)
                    bounds.append(e.detail["bound"])
                if hullguard.remaining() == 0.0:
                    break

    task = vclock.create_task(retry())
    vclock.advance(20_000)
    assert task.done() and task.exception() is None
    assert ends == [3000, 6000, 9000, 10_000]
    with hullguard.deadline_at(10.0):
        with pytest.raises(hullguard.BulkheadQueueTimeoutError) as e:
            bh.try_acquire()
    assert e.value.detail["bound"] == "deadline"
    assert _timeouts(bh) == 5
    h.release()
    assert_idle(bh)


def test_c36_min_service_time_refuses_early(vclock: VirtualClockLoop) -> None:
    """C36 step 7: with ``min_service_time=2`` W4 (deadline 5 s) waits at most 3 s; at 3 s a
    request that would have to queue with 2 s left is refused at once; with the permit free it
    is admitted."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, queue_timeout=60.0, min_service_time=2.0, _clock=vclock.clock)
    h = _held(bh)
    w4 = _task(vclock, bh.acquire(deadline=5.0))
    assert vclock.pending_timers() == [3 * S]
    vclock.advance(2999)
    assert not w4.done()
    vclock.advance(1)
    assert outcome_of(w4) == "timeout"
    assert bh.would_admit(deadline=5.0).decision == "timeout"
    close = _task(vclock, bh.acquire(deadline=5.0))
    assert outcome_of(close) == "timeout"
    assert bh.stats()["queued"] == 0 and _timeouts(bh) == 2
    h.release()
    free = bh.try_acquire(deadline=4.0)
    assert free is not None
    free.release()
    assert_idle(bh)


# ----- the argument ---------------------------------------------------------------------------


def _entry_points(bh: hullguard.Bulkhead, reg: hullguard.Registry) -> Dict[str, Callable[[Any], Any]]:
    return {
        "acquire": lambda d: bh.acquire(deadline=d),
        "admit": lambda d: bh.admit(deadline=d),
        "acquire_sync": lambda d: bh.acquire_sync(deadline=d),
        "admit_sync": lambda d: bh.admit_sync(deadline=d),
        "try_acquire": lambda d: bh.try_acquire(deadline=d),
        "try_admit": lambda d: bh.try_admit(deadline=d),
        "would_admit": lambda d: bh.would_admit(deadline=d),
        "guard": lambda d: bh.guard(deadline=d),
        "reg.acquire": lambda d: reg.acquire("k", deadline=d),
        "reg.admit": lambda d: reg.admit("k", deadline=d),
        "reg.acquire_sync": lambda d: reg.acquire_sync("k", deadline=d),
        "reg.admit_sync": lambda d: reg.admit_sync("k", deadline=d),
        "reg.try_acquire": lambda d: reg.try_acquire("k", deadline=d),
        "reg.try_admit": lambda d: reg.try_admit("k", deadline=d),
        "reg.would_admit": lambda d: reg.would_admit("k", deadline=d),
        "reg.guard": lambda d: reg.guard("k", deadline=d),
    }


@pytest.mark.parametrize(
    "bad, exc",
    [(math.nan, ValueError), (-math.inf, ValueError), ("5", TypeError),
     (True, TypeError), ([1.0], TypeError)],
    ids=["nan", "-inf", "str", "bool", "list"],
)
def test_bad_deadlines_name_the_argument_and_the_range(bad: Any, exc: type) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    reg = hullguard.Registry(max_concurrent=1)
    for name, call in _entry_points(bh, reg).items():
        with pytest.raises(exc, match=r"deadline must be an absolute time in seconds on the time\.monotonic\(\) scale") as e:
            call(bad)
        assert "math.inf" in str(e.value), name
    assert bh.stats()["rejected_by_reason"] == hullguard.Bulkhead().stats()["rejected_by_reason"]
    with pytest.raises(exc, match="when must be"):
        hullguard.deadline_at(bad)
    with pytest.raises(exc, match="seconds must be a number of seconds"):
        hullguard.deadline(bad)


def test_valid_deadlines_are_accepted_everywhere(fixed: FixedClock) -> None:
    bh = hullguard.Bulkhead(max_concurrent=4)
    reg = hullguard.Registry(max_concurrent=4)
    for name, call in _entry_points(bh, reg).items():
        for d in (None, math.inf, 1e300, time.monotonic() + 60):
            r = call(d)
            if isinstance(r, hullguard.Permit):
                r.release()
            elif isinstance(r, (hullguard.Admitted, hullguard.Refused)):
                assert r.ok, (name, r)
                r.permit.release()
            elif isinstance(r, hullguard.AcquireContext):
                r.close()


def test_the_real_monotonic_scale_is_the_cores() -> None:
    """With the host clock the deadline is on the ``time.monotonic()`` scale (CLOCK_MONOTONIC,
    the core's absolute scale): a second ago is passed, a minute ahead is not; a queued
    ``acquire_sync`` leaves at its deadline (0.2 s; this allows 10x)."""
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=60.0)
    with pytest.raises(hullguard.BulkheadQueueTimeoutError):
        bh.try_acquire(deadline=time.monotonic() - 1.0)
    p = bh.try_acquire(deadline=time.monotonic() + 60.0)
    assert p is not None
    start = time.monotonic()
    with pytest.raises(hullguard.BulkheadQueueTimeoutError):
        bh.acquire_sync(deadline=start + 0.2)
    took = time.monotonic() - start
    assert 0.1 <= took < 2.0, took
    with hullguard.deadline(0.2):
        start = time.monotonic()
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            bh.acquire_sync()
        assert time.monotonic() - start < 2.0
    p.release()
    assert_idle(bh)


# ----- the ambient budget ---------------------------------------------------------------------


def test_nested_budgets_take_the_minimum(fixed: FixedClock) -> None:
    fixed.ns = 100 * S
    assert hullguard.current_deadline() is None and hullguard.remaining() is None
    with hullguard.deadline(5) as outer:
        assert outer == 105.0 == hullguard.current_deadline()
        assert hullguard.remaining() == 5.0
        with hullguard.deadline(10) as inner:  # cannot extend
            assert inner == 105.0
        with hullguard.deadline_at(math.inf) as none:
            assert none == 105.0
        with hullguard.deadline_at(None) as none:
            assert none == 105.0
        fixed.ns = 101 * S
        with hullguard.deadline(1.5) as narrower:
            assert narrower == 102.5 == hullguard.current_deadline()
            assert hullguard.remaining() == 1.5
            fixed.ns = 200 * S
            assert hullguard.remaining() == 0.0  # never negative
        assert hullguard.current_deadline() == 105.0
    assert hullguard.current_deadline() is None
    # A scope may be entered again, and nested in itself.
    scope = hullguard.deadline(1)
    with scope as a:
        with scope as b:
            assert a == b == 201.0
        assert hullguard.current_deadline() == 201.0
    assert hullguard.current_deadline() is None
    assert repr(scope) == "hullguard.deadline(1.0)"
    assert isinstance(scope, hullguard.DeadlineScope)


def test_explicit_deadline_is_mind_with_the_ambient(fixed: FixedClock) -> None:
    fixed.ns = 10 * S
    bh = hullguard.Bulkhead(max_concurrent=1, _clock=fixed)
    with hullguard.deadline(-1):  # spent
        for d in (None, math.inf, 100.0):
            with pytest.raises(hullguard.BulkheadQueueTimeoutError):
                bh.try_acquire(deadline=d)
    with hullguard.deadline(100):
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            bh.try_acquire(deadline=9.0)
        p = bh.try_acquire(deadline=math.inf)
        assert p is not None
        # Its call timeout is the time left on the ambient budget.
        assert p._call_timeout() == 100.0
        p.release()
        p = bh.try_acquire(deadline=12.5)
        assert p is not None and p._call_timeout() == 2.5
        p.release()
    assert_idle(bh)


def test_a_thread_started_in_a_copied_context_sees_the_budget(fixed: FixedClock) -> None:
    bh = hullguard.Bulkhead(max_concurrent=2, _clock=fixed)
    seen: Dict[str, Any] = {}

    def work(name: str) -> None:
        seen[name] = hullguard.current_deadline()
        try:
            p = bh.try_acquire()
            assert p is not None
            p.release()
            seen[name + ".acquire"] = "granted"
        except hullguard.BulkheadError as e:
            seen[name + ".acquire"] = e.reason

    with hullguard.deadline(0) as spent:
        ctx = contextvars.copy_context()
        copied = threading.Thread(target=ctx.run, args=(work, "copied"))
        plain = threading.Thread(target=work, args=("plain",))
        for t in (copied, plain):
            t.start()
        for t in (copied, plain):
            t.join(30)
    assert seen == {"copied": spent, "copied.acquire": "timeout", "plain": None, "plain.acquire": "granted"}
    assert_idle(bh)


def test_tasks_created_in_a_budget_see_it(vclock: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=60.0, _clock=vclock.clock)
    h = _held(bh)
    seen: List[Optional[float]] = []

    async def child() -> None:
        seen.append(hullguard.current_deadline())
        await bh.acquire()

    async def parent() -> None:
        async with hullguard.deadline(4):
            t = asyncio.ensure_future(child())
        seen.append(hullguard.current_deadline())  # left the block
        await asyncio.gather(t, return_exceptions=True)

    task = vclock.create_task(parent())
    vclock.advance(3999)
    assert not task.done() and seen == [None, 4.0]
    vclock.advance(1)
    assert task.done() and bh.stats()["rejected_by_reason"]["timeout"] == 1
    h.release()
    assert_idle(bh)


# ----- the call timeout capped by the deadline ----------------------------------------------


@pytest.mark.parametrize("form", ["acquire", "admit", "bare_policies", "guard"])
def test_the_work_is_bounded_by_the_deadline(vclock: VirtualClockLoop, form: str) -> None:
    """The call timeout armed for a guarded call is ``call_timeout`` capped by the time left
    (``Bulkhead::call_timeout_within``): a block or guarded coroutine still running at the
    deadline gets ``CallTimeoutError`` then (``call_timeout`` counted), also on a bulkhead
    without ``call_timeout`` — and with one of 2 s, at the 0.5 s deadline. (A bare
    ``async with bh:`` on a plain bulkhead keeps only its unit — its exit may run in another
    task — so the deadline bounds its wait, not its work: ``test_a_bare_plain_block``.)"""
    resilience = {"call_timeout": 2.0, "breaker": {}} if form in ("bare_policies", "guard") else None
    bh = hullguard.Bulkhead(max_concurrent=1, resilience=resilience, _clock=vclock.clock)

    async def work() -> str:
        await asyncio.sleep(10)
        return "done"

    guarded = bh.guard(work)

    async def run() -> str:
        async with hullguard.deadline(0.5):
            if form == "acquire":
                async with bh.acquire():
                    return await work()
            if form == "admit":
                async with bh.admit() as a:
                    assert a.ok
                    return await work()
            if form == "guard":
                return str(await guarded())
            async with bh:
                return await work()

    task = vclock.create_task(run())
    vclock.advance(499)
    assert not task.done()
    vclock.advance(1)
    assert task.done() and isinstance(task.exception(), hullguard.CallTimeoutError), task
    assert bh.stats()["rejected_by_reason"]["call_timeout"] == 1
    vclock.advance(1)
    assert_idle(bh)


def test_a_block_without_a_deadline_keeps_its_plain_path(vclock: VirtualClockLoop) -> None:
    """``async with bh:`` on a plain bulkhead: a block with a deadline holds a permit (its work
    bounded), one without keeps only its unit; nested and sibling blocks of both kinds exit
    cleanly, and a stray exit is counted, never a release."""
    bh = hullguard.Bulkhead(max_concurrent=4, _clock=vclock.clock)

    async def run() -> None:
        async with bh:
            assert bh.stats()["active"] == 1
            async with hullguard.deadline(5):
                async with bh:
                    async with bh:
                        assert bh.stats()["active"] == 3
                    await asyncio.sleep(1)
            async with bh:
                assert bh.stats()["active"] == 2
        assert bh.stats()["active"] == 0
        await bh.__aexit__(None, None, None)  # stray

    task = vclock.create_task(run())
    vclock.advance(2000)
    assert task.done() and task.exception() is None
    s = bh.stats()
    assert s["released_twice_total"] == 1 and s["rejected_by_reason"]["call_timeout"] == 0
    assert_idle(bh)


def test_sync_guard_classifies_a_call_that_outlives_its_deadline() -> None:
    """A plain callable is not interrupted, only classified: a call still running at its
    deadline (50 ms; it sleeps 100 ms of real time) counts ``call_timeout`` and returns its own
    result."""
    bh = hullguard.Bulkhead(max_concurrent=1)

    @bh.guard
    def slow() -> str:
        time.sleep(0.1)
        return "mine"

    with hullguard.deadline(0.05):
        assert slow() == "mine"
    assert slow() == "mine"  # no deadline, no call_timeout: nothing counted
    assert bh.stats()["rejected_by_reason"]["call_timeout"] == 1
    assert_idle(bh)


# ----- queue-delay dispatch -------------------------------------------------------------------


def test_codel_sheds_a_standing_queue(vclock: VirtualClockLoop) -> None:
    """``queue_delay_target`` (CoDel, docs/design.md §4.10) on a virtual clock: six waiters queue
    at 0; W0 is granted at 150 ms, W1 shed at 260 ms (``BulkheadShedError``, reason ``shed``),
    W3 at 370 ms; the others granted."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8, queue_timeout=math.inf,
                            queue_delay_target=0.01, queue_delay_interval=0.1, _clock=vclock.clock)
    h = _held(bh)
    w = [_task(vclock, bh.acquire()) for _ in range(6)]
    vclock.advance(150)
    h.release()
    vclock.run_until_quiet()
    assert outcome_of(w[0]) == "granted"
    vclock.advance(110)
    w[0].result().release()
    vclock.run_until_quiet()
    assert outcome_of(w[1]) == "shed" and outcome_of(w[2]) == "granted"
    err = w[1].exception()
    assert isinstance(err, hullguard.BulkheadShedError) and err.retryable
    vclock.advance(110)
    w[2].result().release()
    vclock.run_until_quiet()
    assert outcome_of(w[3]) == "shed" and outcome_of(w[4]) == "granted"
    vclock.advance(1)
    w[4].result().release()
    vclock.run_until_quiet()
    assert outcome_of(w[5]) == "granted"
    w[5].result().release()
    assert bh.stats()["rejected_by_reason"]["shed"] == 2
    assert_idle(bh)


def _order(vclock: VirtualClockLoop, bh: hullguard.Bulkhead, tasks: List["asyncio.Task[Any]"], first: hullguard.Permit) -> List[int]:
    """Releases ``first`` and then each grant in turn; the order the waiters were granted."""
    order: List[int] = []
    holding = first
    for _ in range(len(tasks)):  # bounded
        holding.release()
        vclock.run_until_quiet()
        done = [i for i, t in enumerate(tasks) if t.done() and i not in order]
        assert len(done) == 1, done
        order.append(done[0])
        holding = tasks[done[0]].result()
    holding.release()
    return order


def test_adaptive_lifo_serves_the_newest_past_the_target(vclock: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8, queue_timeout=math.inf, queue_delay_target=0.01,
                            queue_delay_interval=1.0, adaptive_lifo=True, _clock=vclock.clock)
    h = _held(bh)
    w = [_task(vclock, bh.acquire()) for _ in range(3)]
    vclock.advance(5)  # the oldest below the target: FIFO
    h.release()
    vclock.run_until_quiet()
    assert outcome_of(w[0]) == "granted"
    w.append(_task(vclock, bh.acquire()))
    vclock.advance(5)  # the oldest (W1) has queued 10 ms: newest first
    assert _order(vclock, bh, w[1:], w[0].result()) == [2, 1, 0]
    assert bh.stats()["rejected_by_reason"]["shed"] == 0
    assert_idle(bh)


def test_apply_limits_queue_delay(vclock: VirtualClockLoop) -> None:
    """``apply_limits(queue_delay={"target", "interval", "lifo"})`` turns LIFO on (and a target
    of 0 everything off) on a bulkhead built with a target; refused on a plain one, for an
    unknown key (named) or a bad value (named, with its range); nothing applied then."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8, queue_timeout=math.inf, queue_delay_target=0.01,
                            queue_delay_interval=1.0, _clock=vclock.clock)
    bh.apply_limits(1, queue_delay={"target": 0.01, "interval": 1.0, "lifo": True})
    h = _held(bh)
    w = [_task(vclock, bh.acquire()) for _ in range(3)]
    vclock.advance(20)
    assert _order(vclock, bh, w, h) == [2, 1, 0]
    bh.apply_limits(2, queue_delay={"target": 0})  # off: FIFO again
    h = _held(bh)
    w = [_task(vclock, bh.acquire()) for _ in range(3)]
    vclock.advance(20)
    assert _order(vclock, bh, w, h) == [0, 1, 2]
    bad = [
        ({"targett": 0.01}, ValueError, 'queue_delay: unknown option "targett" \\(known: "target", "interval", "lifo"\\)'),
        ({"target": -1}, ValueError, "queue_delay.target must be"),
        ({"interval": 0}, ValueError, "queue_delay.interval must be"),
        ({"target": 0, "lifo": True}, ValueError, "adaptive_lifo needs a queue_delay_target"),
        ({"interval": 0.2}, ValueError, 'queue_delay needs "target"'),
        ({"lifo": 1}, TypeError, "queue_delay.lifo"),
        ([0.01], TypeError, "queue_delay must be a dict"),
    ]
    for q, exc, match in bad:
        with pytest.raises(exc, match=match):
            bh.apply_limits(3, queue_delay=q)
    assert bh.revision == 2
    plain = hullguard.Bulkhead(max_concurrent=1)
    with pytest.raises(ValueError, match="queue_delay_target"):
        plain.apply_limits(1, queue_delay={"target": 0.01})
    assert plain.revision == 0
    assert_idle(bh)


def test_queue_delay_options_are_checked() -> None:
    with pytest.raises(ValueError, match="adaptive_lifo"):
        hullguard.Bulkhead(adaptive_lifo=True)
    with pytest.raises(ValueError, match="min_service_time must be"):
        hullguard.Bulkhead(min_service_time=-1)
    with pytest.raises(TypeError, match="queue_delay_target"):
        hullguard.Bulkhead(queue_delay_target="10ms")
    hullguard.Bulkhead(queue_delay_target=0.005, queue_delay_interval=0.1, adaptive_lifo=True, min_service_time=0.5)
    hullguard.Registry(queue_delay_target=0.005, min_service_time=0.5)


# ----- httpx ----------------------------------------------------------------------------------


def test_grpc_timeout_format() -> None:
    cases = {
        1.5: "1500m", 2: "2S", 120: "2M", 7200: "2H", 0.25: "250m", 0.000_001: "1u",
        0.000_000_5: "500n", 0.000_000_000_4: "0n", 0.1234567891: "123456u", 0.099_999_999: "99999999n", 59.999: "59999m",
        0: "0n", -3: "0n", 1e12: "99999999H",
    }
    assert {s: grpc_timeout(s) for s in cases} == cases


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        server: _Server = self.server  # type: ignore[assignment]
        server.hits += 1
        if self.path == "/gate":
            server.gate.wait(10)
        body = repr(dict(self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.gate = threading.Event()
        self.hits = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def upstream() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Recording(httpx.AsyncBaseTransport):
    """Records what reaches the inner transport."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.seen: List[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _headers(r: httpx.Response) -> Dict[str, str]:
    return {k.lower(): v for k, v in eval(r.text).items()}  # our own server's repr of a dict


@pytest.mark.asyncio
async def test_httpx_deadline_becomes_the_timeout_and_the_header(upstream: _Server, fixed: FixedClock) -> None:
    """On a frozen clock: inside a 1.5 s budget each of httpx's timeouts is lowered to 1.5 s
    (never raised: a 0.5 s one stays) and, with ``deadline_header``, the server gets
    ``grpc-timeout: 1500m``; outside a budget nothing changes; the header is off by default."""
    fixed.ns = 1000 * S
    reg = hullguard.Registry(_clock=fixed)
    rec = _Recording()
    transport = BulkheadTransport(rec, registry=reg, deadline_header="grpc-timeout")
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
        async with hullguard.deadline(1.5):
            r = await client.get(upstream.url + "/echo")
        assert _headers(r)["grpc-timeout"] == "1500m"
        assert rec.seen[-1].extensions["timeout"] == {"connect": 1.5, "read": 1.5, "write": 1.5, "pool": 1.5}
        with hullguard.deadline(1.5):
            r = await client.get(upstream.url + "/echo", timeout=httpx.Timeout(0.5, connect=None))
        assert rec.seen[-1].extensions["timeout"] == {"connect": 1.5, "read": 0.5, "write": 0.5, "pool": 0.5}
        r = await client.get(upstream.url + "/echo")
        assert "grpc-timeout" not in _headers(r)
        assert rec.seen[-1].extensions["timeout"] == {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    off = BulkheadTransport(registry=reg)
    async with httpx.AsyncClient(transport=off) as client:
        with hullguard.deadline(1.5):
            r = await client.get(upstream.url + "/echo")
        assert "grpc-timeout" not in _headers(r)
    named = BulkheadTransport(registry=reg, deadline_header="X-Deadline")
    async with httpx.AsyncClient(transport=named) as client:
        with hullguard.deadline(2):
            r = await client.get(upstream.url + "/echo")
        assert _headers(r)["x-deadline"] == "2S"


@pytest.mark.asyncio
async def test_httpx_a_passed_deadline_is_refused_before_sending(upstream: _Server, fixed: FixedClock) -> None:
    fixed.ns = 1000 * S
    reg = hullguard.Registry(_clock=fixed)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg, deadline_header="grpc-timeout")) as client:
        with hullguard.deadline(0):
            with pytest.raises(hullguard.BulkheadQueueTimeoutError) as e:
                await client.get(upstream.url + "/echo")
    assert e.value.reason == "timeout" and e.value.detail["bound"] == "deadline"
    assert upstream.hits == 0
    assert reg.stats()[hullguard.origin_key(upstream.url)]["rejected_by_reason"]["timeout"] == 1


@pytest.mark.asyncio
async def test_httpx_the_budget_times_the_request_out(upstream: _Server) -> None:
    """Real time: the upstream never answers within the 0.2 s budget; httpx raises its own
    timeout from the deadline (this allows 10x), and the permit is back."""
    reg = hullguard.Registry()
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg), timeout=30.0) as client:
        start = time.monotonic()
        with hullguard.deadline(0.2):
            with pytest.raises(httpx.TimeoutException):
                await client.get(upstream.url + "/gate")
        assert time.monotonic() - start < 2.0
    upstream.gate.set()
    assert_idle(reg.get(hullguard.origin_key(upstream.url)))


def test_httpx_sync_transport_takes_the_budget(upstream: _Server, fixed: FixedClock) -> None:
    fixed.ns = 1000 * S
    reg = hullguard.Registry(_clock=fixed)
    transport = SyncBulkheadTransport(registry=reg, deadline_header="grpc-timeout")
    with httpx.Client(transport=transport, timeout=5.0) as client:
        with hullguard.deadline(0.25):
            r = client.get(upstream.url + "/echo")
        assert _headers(r)["grpc-timeout"] == "250m"
        with hullguard.deadline(-1):
            with pytest.raises(hullguard.BulkheadQueueTimeoutError):
                client.get(upstream.url + "/echo")
    assert upstream.hits == 1


@pytest.mark.parametrize(
    "header, exc",
    [(1, TypeError), ("", ValueError), ("grpc timeout", ValueError), ("a:b", ValueError)],
)
def test_httpx_deadline_header_is_checked(header: Any, exc: type) -> None:
    for cls in (BulkheadTransport, SyncBulkheadTransport):
        with pytest.raises(exc, match="deadline_header"):
            cls(deadline_header=header)
