"""Every API and error of the Python binding on a plain Bulkhead: construction, the acquire
forms, try_acquire, Permit, set_limit, guard, stats, close, drain, the exception hierarchy,
leak accounting, bad inputs, and options read from the core's option table. Registry and
origin_key: test_registry.py. Timeout semantics: test_timeouts.py."""

from __future__ import annotations

import asyncio
import copy
import functools
import gc
import math
import pickle
import threading

import pytest

import hullguard
from hullguard import _native
from _support import REASONS, STATS_KEYS, assert_conserved, assert_idle, settle

# ---------------------------------------------------------------------------------------------
# module, constants, construction


def test_constants_and_exports() -> None:
    assert hullguard.MAX_PERMITS == 2**60 - 1
    assert hullguard.MAX_QUEUE == 2**20
    assert isinstance(hullguard.__version__, str) and hullguard.__version__
    for name in hullguard.__all__:
        assert hasattr(hullguard, name), name
    assert hullguard.Bulkhead is _native.Bulkhead
    assert hullguard.Permit is _native.Permit
    assert hullguard.Registry is _native.Registry
    assert hullguard.AcquireContext is _native.AcquireContext


def test_defaults() -> None:
    bh = hullguard.Bulkhead()
    assert (bh.max_concurrent, bh.max_queue, bh.queue_timeout, bh.enabled) == (10, 100, 30.0, True)
    assert (bh.limit, bh.closed, bh.key) == (10, False, None)
    s = bh.stats()
    assert (s["limit"], s["max_concurrent"], s["available"]) == (10, 10, 10)
    assert "limit=10" in repr(bh)


def test_constructor_arguments() -> None:
    bh = hullguard.Bulkhead(max_concurrent=3, max_queue=0, queue_timeout=1.5, enabled=False)
    assert (bh.max_concurrent, bh.max_queue, bh.queue_timeout, bh.enabled) == (3, 0, 1.5, False)
    bh = hullguard.Bulkhead(4, 5, 2, True)  # positional, int seconds
    assert (bh.max_concurrent, bh.max_queue, bh.queue_timeout, bh.enabled) == (4, 5, 2.0, True)
    assert hullguard.Bulkhead(queue_timeout=math.inf).queue_timeout == math.inf
    assert hullguard.Bulkhead(max_concurrent=None).max_concurrent == 10  # None = default
    # The extremes are accepted, exactly.
    big = hullguard.Bulkhead(max_concurrent=hullguard.MAX_PERMITS, max_queue=0)
    p = big.try_acquire(hullguard.MAX_PERMITS)
    assert p is not None and p.weight == hullguard.MAX_PERMITS
    assert big.stats()["active"] == hullguard.MAX_PERMITS and big.stats()["available"] == 0
    p.release()
    assert_idle(big)
    assert hullguard.Bulkhead(max_queue=hullguard.MAX_QUEUE).max_queue == hullguard.MAX_QUEUE
    with pytest.raises(TypeError):
        hullguard.Bulkhead(1, 2, 3.0, True, 5)  # _clock is keyword-only


BAD_CONFIG = [
    ({"max_concurrent": True}, TypeError, "max_concurrent"),
    ({"max_concurrent": 2.0}, TypeError, "max_concurrent"),
    ({"max_concurrent": "3"}, TypeError, "max_concurrent"),
    ({"max_concurrent": 0}, ValueError, "max_concurrent"),
    ({"max_concurrent": -1}, ValueError, "max_concurrent"),
    ({"max_concurrent": hullguard.MAX_PERMITS + 1}, ValueError, "max_concurrent"),
    ({"max_concurrent": 2**100}, ValueError, "max_concurrent"),
    ({"max_queue": False}, TypeError, "max_queue"),
    ({"max_queue": 1.0}, TypeError, "max_queue"),
    ({"max_queue": -1}, ValueError, "max_queue"),
    ({"max_queue": hullguard.MAX_QUEUE + 1}, ValueError, "max_queue"),
    ({"queue_timeout": math.nan}, ValueError, "queue_timeout"),
    ({"queue_timeout": -1.0}, ValueError, "queue_timeout"),
    ({"queue_timeout": -math.inf}, ValueError, "queue_timeout"),
    ({"queue_timeout": "30"}, TypeError, "queue_timeout"),
    ({"queue_timeout": True}, TypeError, "queue_timeout"),
    ({"enabled": 1}, TypeError, "enabled"),
    ({"enabled": "yes"}, TypeError, "enabled"),
]


@pytest.mark.parametrize(("kwargs", "exc", "name"), BAD_CONFIG, ids=[repr(c[0]) for c in BAD_CONFIG])
def test_bad_config_names_the_option(kwargs: dict, exc: type, name: str) -> None:
    with pytest.raises(exc, match=name):
        hullguard.Bulkhead(**kwargs)



@pytest.mark.parametrize("where", ["max_concurrent", "max_queue", "weight", "try_acquire", "set_limit", "release_partial", "max_keys"])
def test_huge_int_count_is_a_value_error_naming_it(where: str) -> None:
    # errors.rs:81 count_arg: `let n: i128 = value.extract()?` raises OverflowError ("Python int
    # too large to convert to C long") for |n| >= 2**127, naming nothing. Fix: map the
    # extraction error to the same ValueError as the range check (e.g.
    # `.map_err(|_| PyValueError::new_err(format!("{name} must be in {min}..={max}, got {value}")))`).
    huge = 2**200
    bh = hullguard.Bulkhead(max_concurrent=4)
    p = bh.try_acquire()
    assert p is not None
    calls = {
        "max_concurrent": lambda: hullguard.Bulkhead(max_concurrent=huge),
        "max_queue": lambda: hullguard.Bulkhead(max_queue=huge),
        "weight": lambda: bh.acquire(weight=huge),
        "try_acquire": lambda: bh.try_acquire(huge),
        "set_limit": lambda: bh.set_limit(huge),
        "release_partial": lambda: p.release_partial(huge),
        "max_keys": lambda: hullguard.Registry(max_keys=huge),
    }
    with pytest.raises(ValueError, match=where.replace("try_acquire", "weight").replace("set_limit", "limit").replace("release_partial", "n")):
        calls[where]()



@pytest.mark.parametrize("where", ["queue_timeout", "acquire", "acquire_sync", "drain_sync"])
def test_huge_int_timeout_is_a_value_error_or_no_deadline(where: str) -> None:
    # errors.rs:108 seconds_arg: `value.extract::<f64>()` of an int beyond f64 raises
    # OverflowError (an ArithmeticError) that names nothing. docs/design.md §7.3: bad input ->
    # ValueError/TypeError naming the argument. Either fix passes: a ValueError naming it, or
    # (as 1e300 already is) accepted as "no deadline" like math.inf.
    huge = 2**2000
    bh = hullguard.Bulkhead(max_concurrent=1)
    holder = bh.try_acquire()
    assert holder is not None
    threading.Timer(0.05, holder.release).start()  # so an accepted acquire_sync returns
    try:
        if where == "queue_timeout":
            assert hullguard.Bulkhead(queue_timeout=huge).queue_timeout == math.inf
        elif where == "acquire":
            bh.acquire(timeout=huge)
        elif where == "acquire_sync":
            bh.acquire_sync(timeout=huge).release()
        else:
            assert bh.drain_sync(huge)["drained"]
    except ValueError as e:
        assert "timeout" in str(e)


# ---------------------------------------------------------------------------------------------
# the acquire forms


@pytest.mark.asyncio
async def test_await_acquire_gives_a_permit_the_caller_releases(bh: hullguard.Bulkhead) -> None:
    permit = await bh.acquire()
    assert isinstance(permit, hullguard.Permit)
    assert (permit.weight, permit.released, permit.key) == (1, False, None)
    assert bh.stats()["active"] == 1 and bh.stats()["admitted_total"] == 1
    assert permit.release() is True
    assert (permit.weight, permit.released) == (0, True)
    assert_idle(bh)


@pytest.mark.asyncio
async def test_async_with_acquire_binds_the_permit(bh: hullguard.Bulkhead) -> None:
    async with bh.acquire(weight=2) as permit:
        assert isinstance(permit, hullguard.Permit)
        assert permit.weight == 2 and not permit.released
        assert bh.stats()["active"] == 2
    assert permit.released
    assert_idle(bh)
    with pytest.raises(ZeroDivisionError):
        async with bh.acquire() as permit:
            1 / 0
    assert permit.released
    assert_idle(bh)


@pytest.mark.asyncio
async def test_async_with_bulkhead(bh: hullguard.Bulkhead) -> None:
    async with bh as nothing:
        assert nothing is None
        assert bh.stats()["active"] == 1
        async with bh:
            assert bh.stats()["active"] == 2
            # full now: a do-not-queue acquire is refused
            with pytest.raises(hullguard.BulkheadFullError):
                await bh.acquire(timeout=0)
        assert bh.stats()["active"] == 1
    assert_idle(bh)
    with pytest.raises(KeyError):
        async with bh:
            raise KeyError("x")
    assert_idle(bh)
    assert bh.stats()["released_twice_total"] == 0


@pytest.mark.asyncio
async def test_acquire_context_awaited_twice_is_an_error(bh: hullguard.Bulkhead) -> None:
    ctx = bh.acquire()
    permit = await ctx
    with pytest.raises(RuntimeError, match="already"):
        await ctx
    permit.release()
    assert_idle(bh)


def test_acquire_outside_a_loop_raises_and_leaks_nothing() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    held = bh.try_acquire()
    it = bh.acquire().__await__()
    with pytest.raises(RuntimeError):  # no running event loop: the queued place is given back
        it.send(None)
    s = bh.stats()
    assert s["queued"] == 0 and s["active"] == 1
    assert held is not None
    held.release()
    assert_idle(bh)


def test_fast_path_finishes_in_the_first_send_even_without_a_loop() -> None:
    # Immediate admission needs no loop and no future: StopIteration on the first send().
    bh = hullguard.Bulkhead(max_concurrent=1)
    it = bh.acquire().__await__()
    with pytest.raises(StopIteration) as stop:
        it.send(None)
    permit = stop.value.value
    assert isinstance(permit, hullguard.Permit) and not permit.released
    permit.release()
    assert_idle(bh)


# ---------------------------------------------------------------------------------------------
# try_acquire


def test_try_acquire(bh: hullguard.Bulkhead) -> None:
    a = bh.try_acquire()
    b = bh.try_acquire(weight=1)
    assert a is not None and b is not None
    assert bh.try_acquire() is None  # concurrency_limit -> None, counted
    assert bh.stats()["rejected_by_reason"]["concurrency_limit"] == 1
    a.release()
    c = bh.try_acquire()
    assert c is not None
    for p in (b, c):
        p.release()
    w2 = bh.try_acquire(2)
    assert w2 is not None and w2.weight == 2
    assert bh.try_acquire() is None
    w2.release()
    assert_idle(bh)


def test_try_acquire_raises_every_other_reason() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4)
    bh.set_limit(2)
    # weight above the *current* limit: concurrency_limit -> None
    assert bh.try_acquire(3) is None
    bh.close()
    with pytest.raises(hullguard.BulkheadClosedError) as info:
        bh.try_acquire()
    e = info.value
    assert (e.reason, e.code, e.retryable, e.category) == ("shutdown", "BULKHEAD_CLOSED", False, "resilience")
    assert e.snapshot == {"active": 0, "queued": 0, "limit": 2, "available": 2, "key": None}
    assert bh.stats()["rejected_by_reason"]["shutdown"] == 1


@pytest.mark.asyncio
async def test_try_acquire_does_not_barge_past_a_waiter() -> None:
    bh = hullguard.Bulkhead(max_concurrent=3, max_queue=4)
    held = bh.try_acquire(2)
    assert held is not None
    waiter = asyncio.ensure_future(bh.acquire(weight=2))
    await settle()
    assert bh.stats()["queued"] == 1 and bh.stats()["available"] == 1
    assert bh.try_acquire() is None  # one permit free, but a waiter is queued (I6)
    held.release()
    permit = await waiter
    extra = bh.try_acquire()  # now free: 1 available, no waiter
    assert extra is not None
    for p in (extra, permit):
        p.release()
    assert_idle(bh)
    assert bh.stats()["leaked_total"] == 0


# ---------------------------------------------------------------------------------------------
# Permit


def test_release_is_idempotent_and_counts_explicit_second_calls(bh: hullguard.Bulkhead) -> None:
    p = bh.try_acquire()
    assert p is not None
    assert p.release() is True
    assert p.release() is False
    assert p.release() is False
    s = assert_idle(bh)
    assert s["released_twice_total"] == 2
    assert s["available"] == 2  # never an extra permit (I9)


@pytest.mark.asyncio
async def test_context_exit_never_counts_as_second_release(bh: hullguard.Bulkhead) -> None:
    async with bh.acquire() as p:
        assert p.release() is True  # explicit, first: fine
    with bh.acquire_sync() as q:
        assert q.release() is True
    r = bh.try_acquire()
    assert r is not None
    with r:
        pass
    assert r.released
    assert bh.stats()["released_twice_total"] == 0
    assert r.release() is False  # explicit second call: counted
    assert bh.stats()["released_twice_total"] == 1

    @bh.guard
    async def fn() -> None:
        pass

    await fn()
    assert_idle(bh)
    assert bh.stats()["released_twice_total"] == 1


def test_permit_as_sync_context_manager(bh: hullguard.Bulkhead) -> None:
    with bh.acquire_sync(weight=2) as p:
        assert isinstance(p, hullguard.Permit)
        assert bh.stats()["active"] == 2
    assert p.released
    assert_idle(bh)


@pytest.mark.asyncio
async def test_release_partial_refunds_and_wakes() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, max_queue=4)
    p = await bh.acquire(weight=4)
    waiter = asyncio.ensure_future(bh.acquire(weight=2))
    await settle()
    assert bh.stats()["queued"] == 1
    assert p.release_partial(1) is None
    await settle()
    assert not waiter.done() and p.weight == 3
    assert bh.stats()["active"] == 3
    p.release_partial(1)
    q = await waiter  # two permits free now
    assert q.weight == 2 and p.weight == 2
    assert_conserved(bh)
    assert bh.stats()["active"] == 4
    with pytest.raises(ValueError, match="n"):
        p.release_partial(3)  # more than held
    with pytest.raises(ValueError, match="n"):
        p.release_partial(0)
    with pytest.raises(ValueError, match="n"):
        p.release_partial(-1)
    with pytest.raises(TypeError, match="n"):
        p.release_partial(True)
    with pytest.raises(TypeError, match="n"):
        p.release_partial(1.0)
    assert p.weight == 2  # argument errors change nothing
    assert p.release() is True
    with pytest.raises(ValueError):
        p.release_partial(1)  # already released
    q.release()
    assert_idle(bh)
    assert bh.stats()["released_twice_total"] == 0


def test_release_partial_of_everything_then_release() -> None:
    bh = hullguard.Bulkhead(max_concurrent=3)
    p = bh.try_acquire(3)
    assert p is not None
    p.release_partial(3)
    assert_idle(bh)
    assert p.release() is True  # nothing left to return, but the first release
    assert_idle(bh)
    assert bh.stats()["released_twice_total"] == 0


# ---------------------------------------------------------------------------------------------
# set_limit


@pytest.mark.asyncio
async def test_set_limit_grow_hands_permits_to_waiters_shrink_never_revokes() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, max_queue=8)
    bh.set_limit(1)
    assert bh.limit == 1
    held = await bh.acquire()
    waiters = [asyncio.ensure_future(bh.acquire()) for _ in range(2)]
    await settle()
    assert bh.stats()["queued"] == 2
    bh.set_limit(3)  # grow: both waiters are granted
    permits = [await w for w in waiters]
    s = assert_conserved(bh)
    assert (s["active"], s["limit"], s["available"]) == (3, 3, 0)
    bh.set_limit(1)  # shrink: nothing revoked, available negative
    s = assert_conserved(bh)
    assert (s["active"], s["limit"], s["available"]) == (3, 1, -2)
    assert bh.try_acquire() is None
    held.release()
    permits[0].release()
    assert bh.stats()["available"] == 0
    permits[1].release()
    s = assert_idle(bh)
    assert s["available"] == 1


@pytest.mark.asyncio
async def test_set_limit_below_a_waiters_weight_rejects_it() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, max_queue=8)
    held = await bh.acquire(weight=4)
    heavy = asyncio.ensure_future(bh.acquire(weight=3))
    light = asyncio.ensure_future(bh.acquire(weight=1))
    await settle()
    bh.set_limit(2)
    await settle()
    with pytest.raises(hullguard.BulkheadFullError) as info:
        await heavy
    assert info.value.reason == "concurrency_limit"
    assert not light.done()
    held.release()
    (await light).release()
    assert_idle(bh)


BAD_LIMITS = [(0, ValueError), (5, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError), ("2", TypeError), (None, TypeError)]


@pytest.mark.parametrize(("limit", "exc"), BAD_LIMITS)
def test_set_limit_bad_input(limit: object, exc: type) -> None:
    bh = hullguard.Bulkhead(max_concurrent=4)
    with pytest.raises(exc, match="limit"):
        bh.set_limit(limit)
    assert bh.limit == 4
    assert sum(bh.stats()["rejected_by_reason"].values()) == 0


# ---------------------------------------------------------------------------------------------
# guard


def test_guard_sync_function(bh: hullguard.Bulkhead) -> None:
    seen = []

    @bh.guard
    def work(x: int, *, y: int = 0) -> int:
        """doc"""
        seen.append(bh.stats()["active"])
        return x + y

    assert work.__name__ == "work" and work.__doc__ == "doc"
    assert work(1, y=2) == 3
    assert seen == [1]
    assert_idle(bh)

    @bh.guard(weight=2, timeout=1.0)
    def heavy() -> int:
        return bh.stats()["active"]

    assert heavy() == 2
    assert_idle(bh)

    @bh.guard
    def boom() -> None:
        raise OSError("upstream")

    with pytest.raises(OSError, match="upstream"):
        boom()
    assert_idle(bh)

    @bh.guard(timeout=0)
    def nowait() -> None:
        pass

    held = bh.try_acquire(2)
    with pytest.raises(hullguard.BulkheadFullError):
        nowait()
    assert held is not None
    held.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_guard_async_function(bh: hullguard.Bulkhead) -> None:
    @bh.guard
    async def work(x: int) -> int:
        await asyncio.sleep(0)
        return x * bh.stats()["active"]

    assert asyncio.iscoroutinefunction(work)
    assert await work(5) == 5

    @bh.guard(weight=2, timeout=1.0)
    async def heavy() -> int:
        return bh.stats()["active"]

    assert await heavy() == 2

    @bh.guard(weight=1)
    async def slow(ev: asyncio.Event) -> None:
        await ev.wait()

    ev = asyncio.Event()
    tasks = [asyncio.ensure_future(slow(ev)) for _ in range(4)]
    await settle()
    s = bh.stats()
    assert (s["active"], s["queued"]) == (2, 2)
    ev.set()
    await asyncio.gather(*tasks)
    assert_idle(bh)

    @bh.guard
    async def boom() -> None:
        raise OSError("upstream")

    with pytest.raises(OSError):
        await boom()
    assert_idle(bh)
    assert bh.stats()["released_twice_total"] == 0


@pytest.mark.asyncio
async def test_guard_async_partial(bh: hullguard.Bulkhead) -> None:
    async def work(x: int, y: int) -> int:
        await asyncio.sleep(0)
        return x + y + 10 * bh.stats()["active"]

    guarded = bh.guard(functools.partial(work, 1))
    assert await guarded(2) == 13
    assert_idle(bh)



@pytest.mark.asyncio
async def test_guard_async_callable_object(bh: hullguard.Bulkhead) -> None:
    # _guard.py:17 picks the wrapper with `inspect.iscoroutinefunction(fn)`, which is False for
    # an instance whose `__call__` is `async def` (a client object, say). The sync wrapper then
    # takes the permit with acquire_sync (blocking the event loop's thread if the bulkhead is
    # full), creates the coroutine, releases at once, and the work runs with no permit held.
    # Fix: also check `inspect.iscoroutinefunction(getattr(fn, "__call__", None))` (or wrap
    # any result that is awaitable so the permit is held until it completes).
    class Client:
        async def __call__(self) -> int:
            await asyncio.sleep(0)
            return bh.stats()["active"]

    guarded = bh.guard(Client())
    assert await guarded() == 1


def test_guard_bad_arguments(bh: hullguard.Bulkhead) -> None:
    with pytest.raises(TypeError, match="weight"):
        bh.guard(weight=True)
    with pytest.raises(TypeError, match="weight"):
        bh.guard(weight=1.5)
    with pytest.raises(ValueError, match="weight"):
        bh.guard(weight=3)  # above max_concurrent
    with pytest.raises(ValueError, match="timeout"):
        bh.guard(timeout=math.nan)
    with pytest.raises(TypeError, match="timeout"):
        bh.guard(timeout="1")
    with pytest.raises(TypeError, match="callable"):
        bh.guard(42)


# ---------------------------------------------------------------------------------------------
# stats


def test_stats_schema(bh: hullguard.Bulkhead) -> None:
    s = bh.stats()
    assert list(s) == list(STATS_KEYS)
    assert set(s["rejected_by_reason"]) == set(REASONS)
    assert all(v == 0 for v in s["rejected_by_reason"].values())
    assert s["adaptive"] is None and s["circuit"] is None and s["budget"] is None
    assert s["load"] is None  # no shedding threshold (issue 18)
    # Observe mode (docs/design.md §4.7): off, and nothing observed.
    assert s["observe"] == "off"
    # The queue-wait histogram (C35): power-of-two buckets of ns, keyed by their exclusive
    # upper bound, then "inf".
    assert list(s["queue_wait_histogram"]) == [str(1 << k) for k in range(10, 37)] + ["inf"]
    assert all(v == 0 for v in s["queue_wait_histogram"].values())
    assert s["observed_by_reason"] == dict.fromkeys(REASONS, 0)
    for k in STATS_KEYS:
        if k not in ("rejected_by_reason", "queue_wait_histogram", "observe", "observed_by_reason", "adaptive", "circuit", "budget", "load"):
            assert type(s[k]) is int, k
    # The ring: next_power_of_two(max_queue + max(max_queue, 64)) cells, all free.
    assert (s["limit"], s["max_concurrent"], s["available"], s["ring_free"]) == (2, 2, 2, 128)
    # a fresh dict every time
    s["active"] = 99
    assert bh.stats()["active"] == 0


def test_observe_option_comes_from_the_core_table() -> None:
    # Observe (shadow) mode is a row of the core's option table (docs/design.md §4.7): the
    # binding takes it with no rule of its own; the core decides and counts (C32 step 1 in
    # small). Per-call costs and the rest of C32 come with the bindings' gateway admission.
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, observe="all")
    a, b = bh.try_acquire(), bh.try_acquire()
    s = bh.stats()
    assert (s["active"], s["available"], s["observe"]) == (2, -1, "all")
    assert s["observed_by_reason"]["concurrency_limit"] == 1
    assert s["rejected_by_reason"]["concurrency_limit"] == 0
    a.release()
    b.release()
    with pytest.raises(ValueError, match=r'observe must be one of "off", "concurrency", "budget", "all"'):
        hullguard.Bulkhead(observe="shadow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="observe"):
        hullguard.Bulkhead(observe=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='observe "budget" needs a budget'):
        hullguard.Bulkhead(observe="budget")
    r = hullguard.Registry(max_concurrent=1, max_queue=0, overrides={"shadow": {"observe": "all"}})
    p, q = r.try_acquire("shadow"), r.try_acquire("shadow")
    assert r.stats()["shadow"]["observed_by_reason"]["concurrency_limit"] == 1
    p.release()
    q.release()


def test_budget_option_comes_from_the_core_table() -> None:
    # `budget` is a keyword-only option walked from the core's table (docs/design.md §4.5, §7);
    # its state is stats()["budget"]. Per-call costs come with the bindings' gateway admission.
    bh = hullguard.Bulkhead(max_concurrent=4, budget=500)
    b = bh.stats()["budget"]
    assert (b["limit"], b["max_budget"], b["in_use"], b["available"]) == (500, 500, 0, 500)
    with bh.try_acquire() as _:  # cost 0: passes the budget
        assert bh.stats()["budget"]["in_use"] == 0
    # The streaming and queue-bound keys of the block (docs/design.md §4.5).
    assert (b["overrun_held"], b["queued_cost"]) == (0, 0)
    assert hullguard.Bulkhead(budget=10, max_queued_cost=5).stats()["budget"]["queued_cost"] == 0
    with pytest.raises(ValueError, match="max_queued_cost must be an integer in 1..=1099511627775, on a bulkhead with a budget"):
        hullguard.Bulkhead(max_queued_cost=5)
    with pytest.raises(ValueError, match=r"budget must be an integer in 1\.\.=1099511627775"):
        hullguard.Bulkhead(budget=0)
    with pytest.raises(TypeError, match="budget must be an integer"):
        hullguard.Bulkhead(budget="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="with max_concurrent at most 262143"):
        hullguard.Bulkhead(max_concurrent=300_000, budget=10)
    # Keyword-only: adding it shifted no positional argument.
    with pytest.raises(TypeError, match="at most 4 positional arguments"):
        hullguard.Bulkhead(4, 10, 1.0, True, 500)  # type: ignore[misc]
    r = hullguard.Registry(budget=100, overrides={"small": {"budget": 10}})
    with r.try_acquire("small") as _, r.try_acquire("big") as _:
        s = r.stats()
    assert (s["small"]["budget"]["limit"], s["big"]["budget"]["limit"]) == (10, 100)
    assert hullguard.Bulkhead().stats()["budget"] is None


@pytest.mark.asyncio
async def test_stats_count_what_happened() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=1)
    held = await bh.acquire()
    queued = asyncio.ensure_future(bh.acquire())
    await settle()
    with pytest.raises(hullguard.BulkheadFullError) as info:
        await bh.acquire()
    assert info.value.reason == "queue_limit"
    assert bh.try_acquire() is None
    s = bh.stats()
    assert (s["active"], s["queued"], s["available"], s["ring_free"]) == (1, 1, 0, 127)
    held.release()
    (await queued).release()
    s = assert_idle(bh)
    assert s["admitted_total"] == 2
    assert s["rejected_by_reason"]["queue_limit"] == 1
    assert s["rejected_by_reason"]["concurrency_limit"] == 1
    assert s["queue_wait_count"] == 1
    assert s["queue_wait_sum_ns"] >= s["queue_wait_max_ns"] > 0


# ---------------------------------------------------------------------------------------------
# close, drain


@pytest.mark.asyncio
async def test_close_rejects_waiters_and_new_admissions() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4)
    held = await bh.acquire()
    waiters = [asyncio.ensure_future(bh.acquire()) for _ in range(2)]
    await settle()
    bh.close()
    assert bh.closed
    await settle()
    for w in waiters:
        with pytest.raises(hullguard.BulkheadClosedError) as info:
            w.result()
        assert info.value.reason == "shutdown" and info.value.retryable is False
    with pytest.raises(hullguard.BulkheadClosedError):
        await bh.acquire()
    with pytest.raises(hullguard.BulkheadClosedError):
        await bh.acquire(timeout=0)
    with pytest.raises(hullguard.BulkheadClosedError):
        bh.try_acquire()
    with pytest.raises(hullguard.BulkheadClosedError):
        bh.acquire_sync()
    with pytest.raises(hullguard.BulkheadClosedError):
        async with bh:
            pass
    # in-flight work completes and releases normally
    assert bh.stats()["active"] == 1
    assert held.release() is True
    s = assert_idle(bh)
    assert s["rejected_by_reason"]["shutdown"] == 7
    bh.close()  # idempotent
    assert (await bh.drain(0))["drained"] is True


@pytest.mark.asyncio
async def test_drain_does_not_close_and_waits_until_idle(bh: hullguard.Bulkhead) -> None:
    assert await bh.drain() == {"drained": True, "active": 0, "queued": 0}
    assert bh.drain_sync() == {"drained": True, "active": 0, "queued": 0}
    assert bh.drain_sync(0) == {"drained": True, "active": 0, "queued": 0}
    p = await bh.acquire(weight=2)
    w = asyncio.ensure_future(bh.acquire())
    await settle()
    assert await bh.drain(0) == {"drained": False, "active": 2, "queued": 1}
    assert bh.drain_sync(0) == {"drained": False, "active": 2, "queued": 1}
    assert bh.drain_sync(0.001)["drained"] is False
    async def drain() -> dict:
        return await bh.drain()

    d = asyncio.ensure_future(drain())
    await settle()
    assert not d.done()
    p.release()
    await settle()
    assert not d.done()  # the waiter holds one now
    (await w).release()
    assert await d == {"drained": True, "active": 0, "queued": 0}
    assert not bh.closed
    assert (await bh.acquire()).release()


@pytest.mark.asyncio
async def test_drain_timeout_reports_not_drained(bh: hullguard.Bulkhead) -> None:
    p = bh.try_acquire()
    assert p is not None
    assert await bh.drain(0.01) == {"drained": False, "active": 1, "queued": 0}
    async def drain() -> dict:
        return await bh.drain(math.inf)

    d = asyncio.ensure_future(drain())
    await settle()
    d.cancel()  # cancelling a drain is clean
    with pytest.raises(asyncio.CancelledError):
        await d
    p.release()
    assert_idle(bh)



@pytest.mark.asyncio
async def test_drain_works_with_asyncio_task_helpers(bh: hullguard.Bulkhead) -> None:
    # awaitable.rs, `impl DrainAwaitable` (#[pymethods]): __await__ returns self, which has
    # __next__/send/throw but no __iter__ and no close(). `await bh.drain()` works, but
    # asyncio.ensure_future / gather / wait_for / create_task wrap a non-Coroutine awaitable
    # in `yield from aw.__await__()`, which needs __iter__: TypeError "object is not iterable".
    # (AcquireContext escapes only because it also has close(), so collections.abc.Coroutine
    # accepts it.) Fix: add `fn __iter__(slf) -> PyRef<Self> { slf }` and a `close()` to
    # DrainAwaitable (and `__iter__` to AcquireContext and _Ready for the same reason).
    assert await asyncio.wait_for(bh.drain(), 1.0) == {"drained": True, "active": 0, "queued": 0}
    assert await asyncio.gather(bh.drain(0), bh.drain()) == [{"drained": True, "active": 0, "queued": 0}] * 2
    assert (await asyncio.ensure_future(bh.drain()))["drained"] is True


@pytest.mark.asyncio
async def test_acquire_works_with_asyncio_task_helpers(bh: hullguard.Bulkhead) -> None:
    p = await asyncio.wait_for(bh.acquire(), 1.0)
    q = await asyncio.ensure_future(bh.acquire())
    assert bh.stats()["active"] == 2
    w = asyncio.create_task(bh.acquire())
    await settle()
    p.release()
    r, = await asyncio.gather(w)
    for x in (q, r):
        x.release()
    assert_idle(bh)


def test_drain_sync_completes_when_another_thread_releases(bh: hullguard.Bulkhead) -> None:
    p = bh.try_acquire(2)
    assert p is not None
    t = threading.Timer(0.02, p.release)
    t.start()
    assert bh.drain_sync() == {"drained": True, "active": 0, "queued": 0}
    t.join()


@pytest.mark.parametrize(("timeout", "exc"), [(math.nan, ValueError), (-1, ValueError), ("1", TypeError), (True, TypeError)])
def test_drain_bad_timeout(bh: hullguard.Bulkhead, timeout: object, exc: type) -> None:
    with pytest.raises(exc, match="timeout"):
        bh.drain(timeout)
    with pytest.raises(exc, match="timeout"):
        bh.drain_sync(timeout)


# ---------------------------------------------------------------------------------------------
# exceptions


def test_exception_hierarchy() -> None:
    base = hullguard.BulkheadError
    assert issubclass(base, Exception)
    expected = {
        hullguard.BulkheadFullError: "BULKHEAD_FULL",
        hullguard.BulkheadQueueTimeoutError: "BULKHEAD_QUEUE_TIMEOUT",
        hullguard.BulkheadClosedError: "BULKHEAD_CLOSED",
        hullguard.CircuitOpenError: "CIRCUIT_OPEN",
        hullguard.CallTimeoutError: "BULKHEAD_CALL_TIMEOUT",
    }
    for cls, code in expected.items():
        assert issubclass(cls, base)
        assert cls.code == code
        e = cls("msg", reason="x", snapshot={"key": None})
        assert (e.code, e.reason, e.category, e.retryable, e.snapshot, str(e)) == (
            code, "x", "resilience", True, {"key": None}, "msg",
        )
    # retry libraries must not treat local overload as a network timeout
    assert not issubclass(hullguard.BulkheadQueueTimeoutError, TimeoutError)
    assert not issubclass(hullguard.BulkheadQueueTimeoutError, asyncio.TimeoutError)
    assert not issubclass(hullguard.BulkheadError, (asyncio.CancelledError, OSError))



def test_errors_survive_pickle_and_copy() -> None:
    # _errors.py:37 BulkheadError.__init__ takes `reason` keyword-only; BaseException's
    # default __reduce__ rebuilds with `cls(*self.args)` = `cls(message)`, so pickle.loads and
    # copy.copy raise TypeError. A rejection raised in a ProcessPoolExecutor / multiprocessing
    # worker then reaches the parent as a pickling error. Fix: define __reduce__, e.g.
    # `return (functools.partial(type(self), reason=self.reason, code=self.code,
    #  retryable=self.retryable, snapshot=self.snapshot), self.args)`.
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0)
    held = bh.try_acquire()
    with pytest.raises(hullguard.BulkheadFullError) as info:
        bh.acquire_sync()
    for clone in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value)):
        assert type(clone) is hullguard.BulkheadFullError
        assert (clone.code, clone.reason, clone.retryable, clone.category, clone.snapshot, str(clone)) == (
            "BULKHEAD_FULL", "concurrency_limit", True, "resilience", info.value.snapshot, str(info.value),
        )
    assert held is not None
    held.release()


@pytest.mark.asyncio
async def test_rejections_carry_code_reason_retryable_category_snapshot() -> None:
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=0)
    held = await bh.acquire(weight=2)
    with pytest.raises(hullguard.BulkheadFullError) as full:
        await bh.acquire()
    e = full.value
    assert (e.code, e.reason, e.retryable, e.category) == ("BULKHEAD_FULL", "concurrency_limit", True, "resilience")
    assert e.snapshot == {"active": 2, "queued": 0, "limit": 2, "available": 0, "key": None}
    assert "concurrency_limit" in str(e)
    held.release()


# ---------------------------------------------------------------------------------------------
# leaks, enabled=False


@pytest.mark.asyncio
async def test_leaked_permit_is_returned_and_counted() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, max_queue=4)
    p = bh.try_acquire(3)
    assert p is not None
    del p
    gc.collect()
    s = assert_idle(bh)
    assert s["leaked_total"] == 3  # permits returned (the weight), not handles
    q = await bh.acquire()
    held = await bh.acquire(weight=3)
    w = asyncio.ensure_future(bh.acquire(weight=2))
    await settle()
    del q
    gc.collect()
    await settle()
    assert not w.done()
    del held
    gc.collect()  # the leaked permits go to the waiter
    r = await w
    assert bh.stats()["leaked_total"] == 7
    r.release()
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0
    # a released permit that is collected is no leak
    t = bh.try_acquire()
    assert t is not None
    t.release()
    del t
    gc.collect()
    assert bh.stats()["leaked_total"] == 7


def test_disabled_admits_everything_and_still_counts() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, enabled=False)
    permits = [bh.try_acquire() for _ in range(5)]
    assert all(p is not None for p in permits)
    more = bh.acquire_sync(timeout=0)
    s = bh.stats()
    assert s["active"] == 6 and s["admitted_total"] == 6
    for p in permits + [more]:
        assert p is not None
        p.release()
    assert_idle(bh)


# ---------------------------------------------------------------------------------------------
# bad inputs at every call (argument errors are raised before admission and never counted)

BAD_WEIGHTS = [
    (True, TypeError),
    (False, TypeError),
    (1.0, TypeError),
    ("1", TypeError),
    (0, ValueError),
    (-1, ValueError),
    (3, ValueError),  # above max_concurrent (2)
    (2**64, ValueError),
    (-(2**100), ValueError),
]
BAD_TIMEOUTS = [
    (math.nan, ValueError),
    (-0.5, ValueError),
    (-1, ValueError),
    (-math.inf, ValueError),
    ("1", TypeError),
    (True, TypeError),
    ([1], TypeError),
]


@pytest.mark.parametrize(("weight", "exc"), BAD_WEIGHTS, ids=[repr(w) for w, _ in BAD_WEIGHTS])
def test_bad_weight_everywhere(bh: hullguard.Bulkhead, weight: object, exc: type) -> None:
    calls = [
        lambda: bh.acquire(weight=weight),
        lambda: bh.acquire(weight),
        lambda: bh.acquire_sync(weight=weight),
        lambda: bh.try_acquire(weight=weight),
        lambda: bh.try_acquire(weight),
        lambda: bh.guard(weight=weight),
    ]
    for call in calls:
        with pytest.raises(exc, match="weight"):
            call()
    s = assert_idle(bh)
    assert sum(s["rejected_by_reason"].values()) == 0


@pytest.mark.parametrize(("timeout", "exc"), BAD_TIMEOUTS, ids=[repr(t) for t, _ in BAD_TIMEOUTS])
def test_bad_timeout_everywhere(bh: hullguard.Bulkhead, timeout: object, exc: type) -> None:
    calls = [
        lambda: bh.acquire(timeout=timeout),
        lambda: bh.acquire(1, timeout),
        lambda: bh.acquire_sync(timeout=timeout),
        lambda: bh.guard(timeout=timeout),
        lambda: bh.drain(timeout),
        lambda: bh.drain_sync(timeout),
    ]
    for call in calls:
        with pytest.raises(exc, match="timeout"):
            call()
    s = assert_idle(bh)
    assert sum(s["rejected_by_reason"].values()) == 0


def test_valid_timeout_types() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    for t in (0, 0.0, 1, 2.5, math.inf, None):
        p = bh.acquire_sync(timeout=t)
        p.release()
    assert_idle(bh)


@pytest.mark.asyncio
async def test_stray_bulkhead_aexit_never_mints_a_permit() -> None:
    # A `Bulkhead.__aexit__` with no matching `__aenter__` returns nothing (I9) and is
    # counted as a double release; I1/I2 hold afterwards.
    bh = hullguard.Bulkhead(max_concurrent=1)
    await bh.__aexit__(None, None, None)
    s = bh.stats()
    assert (s["available"], s["limit"], s["released_twice_total"]) == (1, 1, 1)
    async with bh:
        assert bh.try_acquire() is None
    assert bh.stats()["available"] == 1


# ---------------------------------------------------------------------------------------------
# options: walked from the core's option table


def test_unknown_options_are_refused_with_the_known_names() -> None:
    # A keyword argument: TypeError (as Python refuses one), listing the options.
    with pytest.raises(TypeError, match='unknown option "max_concurent"') as e:
        hullguard.Bulkhead(max_concurent=3)  # type: ignore[call-arg]
    assert '"max_concurrent", "max_queue", "queue_timeout", "enabled", "budget", "max_queued_cost", "observe", "max_orphaned", "start_limit", "max_reservations", "cancel_on_overrun", "min_service_time", "queue_delay_target", "queue_delay_interval", "adaptive_lifo", "shed_lag_threshold", "shed_cpu_threshold", "critical_priority", "resilience"' in str(e.value)
    with pytest.raises(TypeError, match='"max_keys", "overrides"'):
        hullguard.Registry(maxkeys=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match='unknown option "max_keys"'):
        hullguard.Bulkhead(max_keys=3)  # type: ignore[call-arg]  # a registry option only
    # Keys of resilience and of its parts: ValueError, listing that object's keys.
    with pytest.raises(ValueError, match=r'resilience: unknown option "retry" \(known: "adaptive", "breaker", "call_timeout"\)'):
        hullguard.Bulkhead(resilience={"retry": {}})
    with pytest.raises(ValueError, match=r'resilience\.breaker: unknown option "open_duration_ms" \(known: "failure_threshold", '):
        hullguard.Bulkhead(resilience={"breaker": {"open_duration_ms": 5}})
    with pytest.raises(ValueError, match=r'resilience\.adaptive: unknown option "max_queue"'):
        hullguard.Bulkhead(resilience={"adaptive": {"max_queue": 1}})  # an option of another section
    # An override: ValueError naming the key and listing the bulkhead's options.
    with pytest.raises(ValueError, match=r'overrides\["k"\]: unknown option "max_keys" \(known: "max_concurrent", '):
        hullguard.Registry(overrides={"k": {"max_keys": 3}})
    with pytest.raises(ValueError, match=r'overrides\["k"\]: resilience\.breaker: unknown option "bogus"'):
        hullguard.Registry(overrides={"k": {"resilience": {"breaker": {"bogus": 1}}}})


def test_positional_options_follow_the_table_order() -> None:
    bh = hullguard.Bulkhead(4, 5, 2.5, False)
    assert (bh.max_concurrent, bh.max_queue, bh.queue_timeout, bh.enabled) == (4, 5, 2.5, False)
    reg = hullguard.Registry(3, 0)
    assert (reg.get("k").max_concurrent, reg.get("k").max_queue) == (3, 0)
    with pytest.raises(TypeError, match="at most 4 positional arguments"):
        hullguard.Registry(1, 2, 3.0, True, 5)
    with pytest.raises(TypeError, match='multiple values for argument "max_concurrent"'):
        hullguard.Bulkhead(4, max_concurrent=5)  # type: ignore[misc]


@pytest.mark.parametrize("where", ["queue_timeout", "resilience", "registry", "override", "acquire", "acquire_sync", "guard", "drain", "drain_sync"])
def test_a_positive_duration_below_one_ns_is_refused(where: str) -> None:
    # 1e-12 s rounds to 0 ns: read as "do not queue" (or "none") it would change the meaning;
    # it is refused, and the message shows the smallest accepted value.
    bh = hullguard.Bulkhead(max_concurrent=1)
    tiny = 1e-12
    calls = {
        "queue_timeout": lambda: hullguard.Bulkhead(queue_timeout=tiny),
        "resilience": lambda: hullguard.Bulkhead(resilience={"call_timeout": tiny}),
        "registry": lambda: hullguard.Registry(queue_timeout=tiny),
        "override": lambda: hullguard.Registry(overrides={"k": {"resilience": {"breaker": {"open_duration": tiny}}}}),
        "acquire": lambda: bh.acquire(timeout=tiny),
        "acquire_sync": lambda: bh.acquire_sync(timeout=tiny),
        "guard": lambda: bh.guard(timeout=tiny),
        "drain": lambda: bh.drain(tiny),
        "drain_sync": lambda: bh.drain_sync(tiny),
    }
    with pytest.raises(ValueError, match=r"at least 1e-9 seconds.*got 1e-12 \(below the resolution of 1 ns\)"):
        calls[where]()
    assert sum(bh.stats()["rejected_by_reason"].values()) == 0
    assert hullguard.Bulkhead(queue_timeout=1e-9).queue_timeout == 1e-9  # the smallest value


def test_range_errors_show_the_range_and_the_value() -> None:
    with pytest.raises(ValueError) as e:
        hullguard.Bulkhead(max_queue=-1)
    assert str(e.value) == f"max_queue must be an integer in 0..={hullguard.MAX_QUEUE}; got -1 (out of range)"
    with pytest.raises(ValueError, match=r"resilience\.adaptive\.decrease_ratio must be a number in \(0, 1\); got 1\.0"):
        hullguard.Bulkhead(resilience={"adaptive": {"decrease_ratio": 1.0}})
    with pytest.raises(ValueError, match=r'resilience\.adaptive\.algorithm must be one of "gradient2", "aimd"; got \'vegas\''):
        hullguard.Bulkhead(resilience={"adaptive": {"algorithm": "vegas"}})
    with pytest.raises(TypeError, match=r"resilience\.breaker\.open_duration must be at least 1e-9 seconds .*, not str"):
        hullguard.Bulkhead(resilience={"breaker": {"open_duration": "5"}})
    with pytest.raises(ValueError, match=r"resilience\.adaptive\.max_limit must be an integer in 1\.\.=max_concurrent"):
        hullguard.Bulkhead(max_concurrent=4, resilience={"adaptive": {"max_limit": 5}})  # checked by the core


# ---------------------------------------------------------------------------------------------
# the reason table


def test_reasons_are_the_core_table() -> None:
    assert isinstance(_native.REASONS, tuple) and len(_native.REASONS) == len(REASONS) == 11
    for r in _native.REASONS:
        assert set(r) == {"name", "code", "retryable", "category"}
        assert isinstance(r["name"], str) and isinstance(r["code"], str)
        assert isinstance(r["retryable"], bool) and r["category"] == "resilience"
    assert set(hullguard.Bulkhead().stats()["rejected_by_reason"]) == set(REASONS)
    by_name = {r["name"]: r for r in _native.REASONS}
    assert by_name["shutdown"]["retryable"] is False and by_name["timeout"]["code"] == "BULKHEAD_QUEUE_TIMEOUT"
    # shed (docs/design.md §4.8): its own code and class, retryable.
    assert by_name["shed"]["code"] == "BULKHEAD_SHED" and by_name["shed"]["retryable"] is True
    from hullguard import _errors

    assert _errors._class_for("BULKHEAD_SHED") is hullguard.BulkheadShedError
    assert by_name["rate_limit"]["code"] == "BULKHEAD_RATE_LIMITED"
    assert _errors._class_for("BULKHEAD_RATE_LIMITED") is hullguard.BulkheadRateLimitError


def test_the_exception_class_is_the_one_declaring_the_code() -> None:
    from hullguard import _errors

    for r in _native.REASONS:
        cls = _errors._class_for(r["code"])
        assert issubclass(cls, hullguard.BulkheadError)
        assert cls.code == r["code"] or cls is hullguard.BulkheadFullError, r
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0)
    bh.close()
    with pytest.raises(hullguard.BulkheadClosedError) as e:
        bh.try_acquire()
    info = {r["name"]: r for r in _native.REASONS}["shutdown"]
    assert (e.value.code, e.value.reason, e.value.retryable, e.value.category) == (
        info["code"], info["name"], info["retryable"], info["category"],
    )
