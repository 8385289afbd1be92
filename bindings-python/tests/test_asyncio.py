"""asyncio semantics of the binding (docs/design.md §5: admission, wake-up):

(a) an immediate admission finishes inside the first ``send()``: no loop turn, no future;
(b) the default loop and uvloop (every async test runs on both, see conftest.py), several
    loops in several threads at once, releases from other threads;
(c) cancellation: the task gets its own CancelledError; asyncio.timeout / wait_for still raise
    TimeoutError; a grant and a cancel in the same loop iteration never lose a permit.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import threading
from typing import Any, Callable, List

import pytest

import hullguard
from _support import LOOP_FACTORIES, CountingAwaitable, Ticker, assert_conserved, assert_idle, settle

# ---------------------------------------------------------------------------------------------
# (a) the fast path


@pytest.mark.asyncio
async def test_fast_path_does_not_yield_to_the_loop() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4)
    ran: List[str] = []
    loop = asyncio.get_running_loop()

    loop.call_soon(ran.append, "await")
    permit = await bh.acquire()
    assert ran == []  # the loop did not run: no yield
    permit.release()

    loop.call_soon(ran.append, "async with acquire")
    async with bh.acquire(weight=2) as p:
        assert ran == [] and p.weight == 2
    assert ran == []  # __aexit__ does not yield either

    loop.call_soon(ran.append, "async with bh")
    async with bh:
        assert ran == []

    loop.call_soon(ran.append, "timeouts")
    for t in (0, 1.0, math.inf):
        (await bh.acquire(timeout=t)).release()
    assert ran == []

    await asyncio.sleep(0)
    assert ran == ["await", "async with acquire", "async with bh", "timeouts"]
    assert_idle(bh)


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_fast_path_creates_no_future(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    futures_made = 0
    create_future_calls = 0

    class CountingFuture(asyncio.Future):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal futures_made
            futures_made += 1
            super().__init__(*args, **kwargs)

    real_create_future = loop.create_future

    def create_future() -> "asyncio.Future[Any]":
        nonlocal create_future_calls
        create_future_calls += 1
        return real_create_future()

    monkeypatch.setattr(asyncio, "Future", CountingFuture)
    monkeypatch.setattr(asyncio.futures, "Future", CountingFuture)  # what create_future builds
    monkeypatch.setattr(loop, "create_future", create_future)

    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=4)
    for _ in range(3):
        p = await bh.acquire()
        async with bh.acquire() as q:
            pass
        async with bh:
            pass
        p.release()
    assert q.released
    assert (futures_made, create_future_calls) == (0, 0)

    # The slow path does use the (patched) loop: the counters are live.
    held = await bh.acquire(weight=2)
    waiter = asyncio.ensure_future(bh.acquire())
    await settle()
    assert create_future_calls == 1 and futures_made == 1
    held.release()
    (await waiter).release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_queued_acquire_parks_until_granted() -> None:
    # The slow path yields exactly one future and is resumed exactly once, by the grant.
    bh = hullguard.Bulkhead(max_concurrent=1)
    ticker = Ticker()
    held = await bh.acquire()
    counted = CountingAwaitable(bh.acquire(), ticker)
    task = asyncio.ensure_future(_await(counted))
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(counted.sends) == 1  # parked: never re-polled while nothing changed
    held.release()
    released_at = ticker.n
    permit = await task
    ticker.stop()
    assert len(counted.sends) == 2
    assert counted.sends[1] - released_at <= 1
    permit.release()
    assert_idle(bh)


async def _await(aw: Any) -> Any:
    return await aw


# ---------------------------------------------------------------------------------------------
# (b) loops, threads


@pytest.mark.asyncio
async def test_release_from_another_thread_wakes_the_waiter() -> None:
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=8)
    held = [bh.try_acquire(), bh.try_acquire()]
    waiters = [asyncio.ensure_future(bh.acquire()) for _ in range(3)]
    await settle()
    assert bh.stats()["queued"] == 3

    def release_all() -> None:
        for p in held:
            assert p is not None
            p.release()

    t = threading.Thread(target=release_all)
    t.start()
    await asyncio.get_running_loop().run_in_executor(None, t.join)
    got = await asyncio.wait_for(asyncio.gather(waiters[0], waiters[1]), 10)
    assert not waiters[2].done()
    # release one of the task-held permits from a thread too
    t2 = threading.Thread(target=got[0].release)
    t2.start()
    t2.join()
    third = await asyncio.wait_for(waiters[2], 10)
    for p in (got[1], third):
        p.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_acquire_sync_in_executor_while_tasks_wait() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=8)
    loop = asyncio.get_running_loop()
    held = await bh.acquire()
    task_waiter = asyncio.ensure_future(bh.acquire())
    await settle()
    thread_waiter = loop.run_in_executor(None, bh.acquire_sync)
    while bh.stats()["queued"] < 2:
        await asyncio.sleep(0.001)
    held.release()
    first = await task_waiter  # FIFO: the task queued first
    assert not thread_waiter.done()
    first.release()
    second = await asyncio.wait_for(thread_waiter, 10)
    second.release()
    assert_idle(bh)


@pytest.mark.parametrize("factory", list(LOOP_FACTORIES))
def test_several_loops_in_several_threads(factory: str) -> None:
    """Each thread runs its own event loop; all share one bulkhead. Grants cross threads
    (call_soon_threadsafe), FIFO holds, I1 holds throughout, I5 at the end."""
    limit, threads, tasks_per_loop, rounds = 3, 4, 16, 15
    bh = hullguard.Bulkhead(max_concurrent=limit, max_queue=threads * tasks_per_loop)
    lock = threading.Lock()
    state = {"in": 0, "max": 0, "done": 0}
    errors: List[BaseException] = []
    rng = random.Random(1234)
    weights = [[rng.randint(1, limit) for _ in range(tasks_per_loop)] for _ in range(threads)]

    async def worker(w: int) -> None:
        for _ in range(rounds):
            async with bh.acquire(weight=w, timeout=math.inf):
                with lock:
                    state["in"] += w
                    state["max"] = max(state["max"], state["in"])
                await asyncio.sleep(0)
                with lock:
                    state["in"] -= w
        with lock:
            state["done"] += 1

    async def main(i: int) -> None:
        await asyncio.gather(*(worker(w) for w in weights[i]))

    def run(i: int) -> None:
        loop = LOOP_FACTORIES[factory]()
        try:
            loop.run_until_complete(main(i))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            loop.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    assert state["done"] == threads * tasks_per_loop
    assert 0 < state["max"] <= limit
    s = assert_idle(bh)
    assert s["admitted_total"] == threads * tasks_per_loop * rounds
    assert sum(s["rejected_by_reason"].values()) == 0


# ---------------------------------------------------------------------------------------------
# (c) cancellation


@pytest.mark.asyncio
async def test_cancelled_waiter_gets_its_own_cancelled_error() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    seen: List[BaseException] = []

    async def waiter() -> None:
        try:
            await bh.acquire()
        except BaseException as e:
            seen.append(e)
            raise

    task = asyncio.ensure_future(waiter())
    await settle()
    task.cancel("stop it")
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    assert type(seen[0]) is asyncio.CancelledError
    assert seen[0].args == ("stop it",)
    assert not isinstance(info.value, hullguard.BulkheadError)
    s = bh.stats()
    assert (s["queued"], s["rejected_by_reason"]["aborted"], s["active"]) == (0, 1, 1)
    held.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_thrown_exception_is_the_same_object() -> None:
    """Driving the coroutine by hand: what is thrown in comes out, identical, and the queued
    place is given up (whatever the exception type)."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()

    async def waiter() -> Any:
        return await bh.acquire()

    class Custom(Exception):
        pass

    for exc in (asyncio.CancelledError("mine"), Custom("custom"), KeyboardInterrupt()):
        coro = waiter()
        fut = coro.send(None)
        assert isinstance(fut, asyncio.Future) and bh.stats()["queued"] == 1
        with pytest.raises(BaseException) as info:
            coro.throw(exc)
        assert info.value is exc
        assert bh.stats()["queued"] == 0
    # close() of a suspended coroutine (GeneratorExit) gives the place up too
    coro = waiter()
    coro.send(None)
    assert bh.stats()["queued"] == 1
    coro.close()
    assert bh.stats()["queued"] == 0
    held.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_timeout_helpers_raise_timeout_error() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(bh.acquire(), 0.001)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.001):
            async with bh.acquire():
                pass
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.001):
            async with bh:
                pass
    s = bh.stats()
    assert (s["queued"], s["rejected_by_reason"]["aborted"], s["rejected_by_reason"]["timeout"]) == (0, 3, 0)
    held.release()
    assert_idle(bh)


@pytest.mark.asyncio
@pytest.mark.parametrize("order", ["release_then_cancel", "cancel_then_release"])
async def test_grant_and_cancel_in_the_same_iteration_pass_the_permit_on(order: str) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    w1 = asyncio.ensure_future(bh.acquire())
    w2 = asyncio.ensure_future(bh.acquire())
    await settle()
    assert bh.stats()["queued"] == 2
    if order == "release_then_cancel":
        held.release()
        w1.cancel()
    else:
        w1.cancel()
        held.release()
    assert_conserved(bh)
    await settle()
    assert w1.cancelled()
    assert w2.done() and not w2.cancelled()
    s = assert_conserved(bh)
    assert (s["active"], s["queued"], s["granted_unclaimed"]) == (1, 0, 0)
    w2.result().release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_cancel_after_grant_keeps_nothing_and_wakes_the_next() -> None:
    """The grant lands, then the task is cancelled before it resumes: the task raises its
    CancelledError (asyncio semantics) and the permit goes to the next waiter; nothing
    stays granted-unclaimed."""
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=4)
    held = await bh.acquire(weight=2)
    heavy = asyncio.ensure_future(bh.acquire(weight=2))
    light = asyncio.ensure_future(bh.acquire(weight=1))
    await settle()
    held.release()
    assert bh.stats()["granted_unclaimed"] == 2
    heavy.cancel()
    await settle()
    assert heavy.cancelled()
    p = light.result()
    s = assert_conserved(bh)
    assert (s["active"], s["available"], s["granted_unclaimed"]) == (1, 1, 0)
    p.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_cancelling_the_head_wakes_lighter_waiters() -> None:
    bh = hullguard.Bulkhead(max_concurrent=10, max_queue=10)
    held = await bh.acquire(weight=8)
    head = asyncio.ensure_future(bh.acquire(weight=5))
    small = asyncio.ensure_future(bh.acquire(weight=2))
    await settle()
    assert not small.done()  # head-of-line blocks the lighter one
    head.cancel()
    await settle()
    assert head.cancelled() and small.done()
    small.result().release()
    held.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_dropped_acquire_gives_its_place_back() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    ctx = bh.acquire()
    it = ctx.__await__()
    it.send(None)  # queued
    w = asyncio.ensure_future(bh.acquire())
    await settle()
    assert bh.stats()["queued"] == 2
    del it, ctx
    gc.collect()
    assert bh.stats()["queued"] == 1
    held.release()
    (await w).release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_dropped_acquire_after_grant_passes_the_permit_on() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    ctx = bh.acquire()
    it = ctx.__await__()
    it.send(None)
    w = asyncio.ensure_future(bh.acquire())
    await settle()
    held.release()  # granted to the hand-driven acquire, which is never resumed
    assert bh.stats()["granted_unclaimed"] == 1
    del it, ctx
    gc.collect()
    await settle()
    assert w.done()
    w.result().release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_cancelled_task_in_async_with_releases() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    inside = asyncio.Event()

    async def body() -> None:
        async with bh.acquire():
            inside.set()
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(body())
    await inside.wait()
    assert bh.stats()["active"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0 and s["leaked_total"] == 0


@pytest.mark.asyncio
async def test_many_waiters_fifo_and_cancel_mix() -> None:
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=64)
    order: List[int] = []

    async def worker(i: int) -> None:
        async with bh.acquire():
            order.append(i)
            await asyncio.sleep(0)

    held = [await bh.acquire(), await bh.acquire()]
    tasks = [asyncio.ensure_future(worker(i)) for i in range(40)]
    await settle()
    for i in range(0, 40, 3):
        tasks[i].cancel()
    for p in held:
        p.release()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == [i for i in range(40) if i % 3 != 0]
    assert_idle(bh)


# ---------------------------------------------------------------------------------------------
# (d) one Permit touched from two places at once (threads; or re-entrantly, deterministically)


def _reentrant_future_hook(loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None]) -> None:
    """The next waiter future created on ``loop`` runs ``hook`` when the grant resolves it,
    i.e. inside the ``release`` call that performs the grant (a grant on the waiter's own loop
    thread resolves the future directly). This stands in, deterministically, for another
    thread touching the same Permit while that release is in progress (the GIL can switch
    threads whenever the wake-up runs Python code, e.g. call_soon / call_soon_threadsafe)."""
    real = loop.create_future

    class HookFuture(asyncio.Future):
        def set_result(self, result: Any) -> None:
            hook()
            super().set_result(result)

    def create_future() -> "asyncio.Future[Any]":
        monkeypatch.setattr(loop, "create_future", real)
        return HookFuture(loop=loop)

    monkeypatch.setattr(loop, "create_future", create_future)



@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_second_release_while_the_first_is_in_progress_returns_false(monkeypatch: pytest.MonkeyPatch) -> None:
    # permit.rs:14 `Permit` is a mutable (non-frozen) pyclass; release(&mut self) keeps the
    # PyO3 borrow while release_units runs the wakers, which run Python code. A second
    # release() in that window (another thread after a GIL switch; here re-entrantly) gets
    # RuntimeError("Already borrowed") instead of False (I9: a second release through any API
    # is a reported no-op). Seen with threads: 4 threads releasing one permit whose release
    # wakes an asyncio waiter, sys.setswitchinterval(1e-6): ~10% of the calls raise.
    # Fix: make Permit `frozen` with its state behind a short std Mutex (or atomics): take
    # `held` under the lock, drop the lock, then release_units; same for release_partial and
    # for AcquireContext.__aexit__ (awaitable.rs:323 `p.borrow_mut(py)`).
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    p = await bh.acquire()
    second: List[Any] = []

    def hook() -> None:
        try:
            second.append(p.release())
        except BaseException as e:  # noqa: BLE001 - recorded and checked below
            second.append(e)

    _reentrant_future_hook(asyncio.get_running_loop(), monkeypatch, hook)
    w = asyncio.ensure_future(bh.acquire())
    await settle()
    assert p.release() is True
    q = await w
    assert second == [False]
    assert bh.stats()["released_twice_total"] == 1
    q.release()
    assert_idle(bh)



@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_async_with_exit_while_its_permit_is_being_released(monkeypatch: pytest.MonkeyPatch) -> None:
    # awaitable.rs:323 AcquireContext.__aexit__ does `p.borrow_mut(py)`, which *panics* if the
    # Permit is borrowed (a release() of it in progress in another thread): the task gets
    # pyo3_runtime.PanicException (a BaseException) plus a Rust backtrace on stderr.
    # Reproduced with threads: `async with bh.acquire() as p:` handing p to a thread that calls
    # p.release() while the block exits -> ~8% of 300 rounds panic. Fix as above (frozen Permit
    # with interior locking; __aexit__ then never fails: already released = silent no-op).
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    ctx = bh.acquire()
    p = await ctx  # ctx remembers p: its __aexit__ releases p
    exits: List[Any] = []

    def hook() -> None:
        try:
            exits.append(ctx.__aexit__(None, None, None))
        except BaseException as e:  # noqa: BLE001 - recorded and checked below
            exits.append(e)

    _reentrant_future_hook(asyncio.get_running_loop(), monkeypatch, hook)
    w = asyncio.ensure_future(bh.acquire())
    await settle()
    assert p.release() is True
    q = await w
    assert len(exits) == 1 and not isinstance(exits[0], BaseException), exits
    assert bh.stats()["released_twice_total"] == 0
    q.release()
    assert_idle(bh)


def test_an_admission_granted_at_once_finishes_without_a_stop_iteration() -> None:
    """`async with bh:` and every `__aexit__` finish with `None` the way C iterators do
    (`tp_iternext` returns NULL with no exception), so no `StopIteration` is created on the
    fast path; the protocol seen from Python is unchanged."""
    bh = hullguard.Bulkhead(max_concurrent=1)
    enter = bh.__aenter__().__await__()
    with pytest.raises(StopIteration) as stopped:
        next(enter)  # the builtin turns "NULL, no exception" into StopIteration()
    assert stopped.value.value is None
    assert bh.stats()["active"] == 1
    leave = bh.__aexit__(None, None, None).__await__()
    with pytest.raises(StopIteration) as stopped:
        leave.send(None)  # a method call raises it, as a generator's send does
    assert stopped.value.value is None
    assert bh.stats()["active"] == 0

    async def main() -> None:
        async with bh:
            assert bh.stats()["active"] == 1
        permit = await bh.acquire()  # a value other than None still comes through
        assert permit.weight == 1
        permit.release()

    asyncio.run(main())
