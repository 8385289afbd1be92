"""Review of issue 16's Python gateway admission: each test pins a defect found in review (a
permit or budget unit leaked or double-counted, a deadlock, an argument accepted silently or
refused with a wrong message). Each failed before its fix.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

import hullguard
from _support import VirtualClockLoop, assert_idle


def _events_bh(**kw: Any) -> hullguard.Bulkhead:
    return hullguard.Bulkhead(max_concurrent=4, max_queue=4, budget=100, events=True, **kw)


# ----- a release during a report is never lost -------------------------------------------------


def test_a_release_from_a_usage_listener_releases() -> None:
    # The listener runs inside report_usage, while the call is out of the permit's mutex: its
    # release used to see "already released" (False, counted in released_twice_total), and the
    # report then put the call back: the permit stayed held until garbage collection.
    bh = _events_bh()
    p = bh.acquire_sync(cost=40)
    answers: List[bool] = []
    bh.on("usage", lambda e: answers.append(p.release(usage=e["used"])))
    r = p.report_usage(10, remaining=5)
    assert r.change == "shrank"
    assert answers == [True]
    assert p.released and p.weight == 0 and p.cost == 0
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0 and s["leaked_total"] == 0
    assert s["budget"]["in_use"] == 0
    assert p.release() is False  # a real second release is still counted
    assert bh.stats()["released_twice_total"] == 1


def test_a_release_from_a_listener_inside_refund_and_release_partial() -> None:
    bh = _events_bh()
    p = bh.acquire_sync(weight=2, cost=40)
    answers: List[bool] = []
    bh.on("release", lambda e: answers.append(p.release()) if not e["ended"] else None)
    p.release_partial(1)  # fires a (partial) release event: the listener releases the rest
    assert answers == [True] and p.released
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0 and s["leaked_total"] == 0


def test_a_release_from_another_thread_during_a_report_is_not_lost() -> None:
    # Thread A reports usage; its listener runs a while (the GIL is free meanwhile). The main
    # thread releases then: the permit must end up released, counted once.
    bh = _events_bh()
    p = bh.acquire_sync(cost=40)
    inside = threading.Event()

    def slow(e: Dict[str, Any]) -> None:
        inside.set()
        time.sleep(0.2)

    bh.on("usage", slow)
    t = threading.Thread(target=lambda: p.report_usage(10, remaining=10))
    t.start()
    assert inside.wait(5)
    assert p.released is False  # it is held: a report is not a release
    assert p.cost in (20, 40)
    assert p.release() is True
    t.join(5)
    assert p.released
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0 and s["leaked_total"] == 0
    assert s["budget"]["in_use"] == 0


def test_reports_from_two_threads_do_not_see_each_other_as_released() -> None:
    bh = _events_bh()
    p = bh.acquire_sync(cost=40)
    inside = threading.Event()

    def slow(e: Dict[str, Any]) -> None:
        if not inside.is_set():
            inside.set()
            time.sleep(0.2)

    bh.on("usage", slow)
    t = threading.Thread(target=lambda: p.report_usage(10, remaining=10))
    t.start()
    assert inside.wait(5)
    r = p.report_usage(20, remaining=0)  # used to raise UsageError(kind="released")
    t.join(5)
    assert r.held == 20
    p.release()
    assert_idle(bh)


def test_a_report_from_its_own_listener_is_refused_clearly() -> None:
    bh = _events_bh()
    p = bh.acquire_sync(cost=40)
    errors: List[BaseException] = []

    def again(e: Dict[str, Any]) -> None:
        try:
            p.report_usage(e["used"] + 1)
        except ValueError as x:
            errors.append(x)

    bh.on("usage", again)
    p.report_usage(10, remaining=10)
    assert len(errors) == 1 and "listener" in str(errors[0])
    assert not p.released and p.cost == 20
    p.release()
    assert_idle(bh)


def test_async_with_exit_during_another_threads_report_releases() -> None:
    bh = _events_bh()
    inside = threading.Event()

    def slow(e: Dict[str, Any]) -> None:
        inside.set()
        time.sleep(0.2)

    bh.on("usage", slow)
    with bh.acquire_sync(cost=40) as p:
        t = threading.Thread(target=lambda: p.report_usage(10, remaining=0))
        t.start()
        assert inside.wait(5)
    # `with` exited while the report ran: the exit waits for it, then releases.
    t.join(5)
    assert p.released
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0 and s["leaked_total"] == 0


# ----- no permit lock held while a listener runs ------------------------------------------------


_TIMED_OUT_LISTENER = textwrap.dedent(
    """
    import hullguard
    seen = []
    holder = {}
    def on_change(key, old, new):
        seen.append((old, new, holder["p"].released))
    bh = hullguard.Bulkhead(
        max_concurrent=2,
        resilience={"breaker": {"failure_threshold": 1}, "call_timeout": 1.0},
        on_state_change=on_change,
    )
    holder["p"] = p = bh.acquire_sync()
    p._call_timed_out()  # the breaker opens: on_state_change reads the permit
    assert seen == [("closed", "open", False)], seen
    p.release()
    assert bh.stats()["active"] == 0
    print("ok")
    """
)


def test_a_state_change_listener_may_read_the_permit_that_timed_out() -> None:
    # `timed_out` ran under the permit's mutex; the breaker transition it commits calls
    # on_state_change there, and reading the permit locked the mutex again: a deadlock (run in
    # a subprocess so that a hang fails this test instead of the run).
    assert _run_with_timeout(_TIMED_OUT_LISTENER) == "ok"


def _run_with_timeout(code: str, timeout: float = 20.0) -> str:
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung"
    return r.stdout.strip() if r.returncode == 0 else f"rc={r.returncode}: {r.stderr[-2000:]}"


# ----- arguments --------------------------------------------------------------------------------


def test_registry_under_a_global_cap_refuses_admission_class() -> None:
    # Under a global cap each key *is* a class of the shared admission: the core replaces the
    # request's class by the key's, so an admission_class was silently ignored.
    reg = hullguard.Registry(max_concurrent=2, global_cap={"limit": 3}, max_keys=8)
    for call in (
        lambda: reg.try_acquire("k", admission_class=5),
        lambda: reg.try_admit("k", admission_class=1),
        lambda: reg.acquire_sync("k", admission_class=1),
        lambda: reg.acquire("k", admission_class=1),
        lambda: reg.would_admit("k", admission_class=1),
        lambda: reg.guard("k", admission_class=1),
    ):
        with pytest.raises(ValueError, match="admission_class.*global cap"):
            call()
    g = reg.global_stats()
    assert g is not None and g["active"] == 0
    p = reg.try_acquire("k")  # without it: fine
    assert p is not None
    p.release()


def test_refund_names_budget_units_and_its_range() -> None:
    bh = hullguard.Bulkhead(budget=10)
    p = bh.try_acquire(cost=5)
    assert p is not None
    with pytest.raises(ValueError, match=r"^n must be in 1\.\.=5 \(budget units held\), got 6$"):
        p.refund(6)
    with pytest.raises(ValueError, match=r"n must be an integer in 1\.\.="):
        p.refund(0)
    assert p.cost == 5
    p.refund(5)
    assert p.cost == 0
    p.release()
    assert_idle(bh)


# ----- the event stream ---------------------------------------------------------------------------


_STREAM_GC = textwrap.dedent(
    """
    import asyncio, gc, hullguard

    class CollectingLoop(asyncio.SelectorEventLoop):
        def create_future(self):
            gc.collect()  # a collection may run at any allocation: here, at the future's
            return super().create_future()

    async def main():
        bh = hullguard.Bulkhead(max_concurrent=2, events=True)
        stream = bh.events("release")

        class Holder:
            pass

        h = Holder()
        h.me, h.p = h, bh.try_acquire()  # an unreleased permit in a cycle
        del h
        e = await stream.__anext__()  # the collection finalizes it: its release event
        assert e["kind"] == "release" and bh.stats()["leaked_total"] == 1
        assert bh.stats()["active"] == 0
        await stream.aclose()

    loop = CollectingLoop()
    loop.run_until_complete(main())
    loop.close()
    print("ok")
    """
)


def test_event_stream_survives_a_release_event_fired_inside_its_own_lock() -> None:
    # __anext__ allocated its future while holding the stream's (non-reentrant) lock; a
    # garbage collection there finalized an unreleased permit, whose release event reached
    # _push on the same thread, which waited for that lock forever.
    assert _run_with_timeout(_STREAM_GC) == "ok"


# ----- the host's rate timer ----------------------------------------------------------------------


def _rated(per: float, **kw: Any) -> hullguard.Bulkhead:
    return hullguard.Bulkhead(
        max_queue=4, classes=[{}], rates={"requests": {"amount": 1, "per": per, "burst": 1}}, **kw
    )


async def _acquire(bh: hullguard.Bulkhead) -> Any:
    return await bh.acquire()


def test_a_release_on_another_thread_arms_the_rate_timer_on_the_waiters_loop() -> None:
    # The release that leaves the head held by the rate runs on the main thread; the timer
    # belongs to the waiter's loop, running in another thread. `loop.call_later` from the main
    # thread is not thread-safe and does not wake that loop: the head waited for its queue
    # timeout.
    import asyncio

    bh = _rated(0.3, max_concurrent=1)
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    try:
        a = bh.try_acquire()
        assert a is not None
        time.sleep(0.35)  # a token again (a lower bound: any longer sleep is the same)
        fb = asyncio.run_coroutine_threadsafe(_acquire(bh), loop)  # held by the permits
        _until_queued(bh)
        a.release()
        b = fb.result(5)
        fc = asyncio.run_coroutine_threadsafe(_acquire(bh), loop)  # held by the permits
        _until_queued(bh)
        b.release()  # on this thread: c is the head now, held by the rate for ~0.3 s
        c = fc.result(3)
        c.release()
        assert_idle(bh)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()


def _until_queued(bh: hullguard.Bulkhead) -> None:
    """Waits (bounded) until a waiter is queued: sequencing, not a time bound."""
    for _ in range(10_000):
        if bh.stats()["queued"] == 1:
            return
        time.sleep(0.001)
    raise AssertionError(f"never queued: {bh.stats()}")


def test_a_rate_timer_left_on_a_closed_loop_does_not_stop_the_next_loop() -> None:
    # The first loop closed with its rate timer pending: the bulkhead stayed "armed" forever,
    # so no later loop got a timer and its rate-held heads waited for their queue timeout.
    # Virtual time: two virtual loops, the bulkhead on the clock of the one in use.
    first, second = VirtualClockLoop(), VirtualClockLoop()
    current = [first]
    bh = _rated(0.3, max_concurrent=4, _clock=lambda: current[0].clock())
    bh.try_acquire().release()  # type: ignore[union-attr]  # the token is spent
    held = first.create_task(_acquire(bh))
    first.run_until_quiet()
    assert not held.done() and first.pending_timers(), "held by the rate: a timer is armed"
    held.cancel()
    first.run_until_quiet()
    first.shutdown()  # closed with its rate timer pending

    second.now_ns = first.now_ns + 300_000_000  # the token is back
    current[0] = second
    p = bh.try_acquire()  # takes it
    assert p is not None
    task = second.create_task(_acquire(bh))
    second.run_until_quiet()
    assert not task.done() and second.pending_timers(), "the next loop gets its own rate timer"
    second.advance(300)
    assert task.done()
    task.result().release()
    p.release()
    second.shutdown()
    assert_idle(bh)


_OFF_EQ = textwrap.dedent(
    """
    import hullguard
    bh = hullguard.Bulkhead(max_concurrent=2, events=True)
    p = bh.try_acquire()
    seen = []

    class Listener:
        def __call__(self, e):
            seen.append(e["kind"])

        def __eq__(self, other):
            p.release()  # Python code run by off()'s comparison fires a release event
            return self is other

        __hash__ = object.__hash__

    a = Listener()
    bh.on("release", a)
    assert bh.off("release", lambda e: None) is False
    assert seen == ["release"] and bh.stats()["active"] == 0
    assert bh.off("release", a) is True
    print("ok")
    """
)


def test_off_compares_listeners_outside_the_listener_lock() -> None:
    # off() ran `==` (Python code) while holding the listener list's mutex; an event fired
    # from there (or by another thread meanwhile) locked it again: a deadlock.
    assert _run_with_timeout(_OFF_EQ) == "ok"


# ----- apply_limits names the Python arguments ----------------------------------------------------


def test_registry_apply_limits_refuses_unknown_names_even_as_none() -> None:
    reg = hullguard.Registry(max_concurrent=2)
    with pytest.raises(ValueError, match='defaults: unknown option "bogus"'):
        reg.apply_limits(1, defaults={"bogus": None})
    with pytest.raises(ValueError, match=r'overrides\["k"\]: unknown option "limt"'):
        reg.apply_limits(1, overrides={"k": {"limt": None}})
    assert reg.revision == 0
    reg.apply_limits(1, defaults={"limit": None})  # a known name as None: not given


def test_apply_limits_errors_name_the_python_arguments() -> None:
    reg = hullguard.Registry(max_concurrent=2)
    with pytest.raises(ValueError, match=r"^global_cap: .*Registry\(global_cap="):
        reg.apply_limits(1, global_cap={"limit": 3})
    capped = hullguard.Registry(max_concurrent=2, global_cap={"limit": 3}, max_keys=8)
    with pytest.raises(ValueError, match=r'^overrides\["k"\]\.budget: .*global_cap='):
        capped.apply_limits(1, overrides={"k": {"budget": 3}})
    with pytest.raises(ValueError, match=r"^defaults\.max_queue: "):
        capped.apply_limits(1, defaults={"max_queue": 3})
    plain = hullguard.Bulkhead(max_concurrent=3)
    kws: List[Dict[str, Any]] = [{"reserve": {"permits": 1}}, {"rates": {}}]
    for kw in kws:
        with pytest.raises(ValueError, match=r"^(reserve|rates): .*Bulkhead\(classes="):
            plain.apply_limits(1, **kw)
    assert plain.revision == 0
    calls: List[Callable[[], Any]] = [
        lambda: reg.apply_limits(2, global_cap={"limit": 3}),
        lambda: plain.apply_limits(2, rates={}),
    ]
    for msg in ("RegistryConfig", "with_classes"):
        for call in calls:
            with pytest.raises(ValueError) as e:
                call()
            assert msg not in str(e.value)


# ----- async with bh.admit() is a guarded call --------------------------------------------------


@pytest.mark.asyncio
async def test_async_with_admit_bounds_the_block_by_call_timeout() -> None:
    # `async with bh.acquire()` arms call_timeout; `async with bh.admit()` did not: its block
    # ran unbounded on a bulkhead whose resilience says every block is bounded.
    import asyncio

    bh = hullguard.Bulkhead(resilience={"call_timeout": 0.05, "breaker": {"failure_threshold": 10}})
    with pytest.raises(hullguard.CallTimeoutError):
        async with bh.admit() as a:
            assert a.ok
            await asyncio.sleep(10)
    s = assert_idle(bh)
    assert s["rejected_by_reason"]["call_timeout"] == 1
    assert s["circuit"]["consecutive_failures"] == 1
    async with bh.admit() as a:  # a quick block: nothing recorded
        await asyncio.sleep(0)
    assert bh.stats()["rejected_by_reason"]["call_timeout"] == 1
    assert_idle(bh)


def test_set_observe_off_on_a_classed_bulkhead_keeps_it_admitting() -> None:
    # The core's set_observe rewrote the engine's mode word without its "classed" bit: after
    # set_observe("off") (the only mode a classed bulkhead takes) an idle classed bulkhead
    # refused every admission `concurrency_limit`. The binding no longer calls it for that no-op.
    bh = hullguard.Bulkhead(max_concurrent=2, budget=100, classes=[{"name": "a"}, {"name": "b"}])
    bh.set_observe("off")
    a = bh.try_admit(cost=10, admission_class="b")
    assert a.ok, a.detail
    a.permit.release()
    with pytest.raises(ValueError, match="observe"):
        bh.set_observe("all")
    a = bh.try_admit(cost=10)
    assert a.ok, a.detail
    a.permit.release()
    assert_idle(bh)


# ----- a rejection builds its detail on demand -------------------------------------------------


def test_a_rejection_builds_its_detail_only_when_read() -> None:
    # Every rejection exception built its `.detail` dict (four dicts) eagerly: +40% on a
    # refused acquire of a bulkhead built without any gateway option, for a detail nobody read
    # (async-bulkhead-llm's "full detail built for every rejection", ANCHORS-ADMISSION §4.9).
    import copy
    import pickle

    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, budget=10)
    held = bh.try_acquire()
    with pytest.raises(hullguard.BulkheadFullError) as e:
        bh.acquire_sync(timeout=0)
    err = e.value
    assert not isinstance(vars(err)["_detail"], dict)  # nothing built yet
    d = err.detail
    assert d["reason"] == "concurrency_limit" and d["bound"] == "limit"
    assert d["calls"] == {"limit": 1, "in_use": 1, "available": 0}
    assert err.detail is d  # built once
    assert pickle.loads(pickle.dumps(err)).detail == d
    assert copy.copy(err).detail == d
    assert hullguard.BulkheadFullError("by hand", reason="queue_limit").detail == {}
    a = bh.try_admit()  # the non-throwing answer carries its detail as a dict
    assert not a.ok and a.detail["bound"] == "limit" and a.error.detail == a.detail
    held.release()  # type: ignore[union-attr]
    assert_idle(bh)


@pytest.mark.parametrize("events", [False, True])
def test_threads_racing_release_report_and_refund_count_once(events: bool) -> None:
    import random

    bh = hullguard.Bulkhead(max_concurrent=8, budget=1000, events=events)
    if events:
        bh.on("usage", lambda e: None)
        bh.on("release", lambda e: None)
    for _ in range(50):
        p = bh.try_acquire(cost=100)
        assert p is not None
        start = threading.Barrier(4)
        answers: List[bool] = []

        def reporter() -> None:
            start.wait()
            for u in range(0, 50, 5):
                try:
                    p.report_usage(u, remaining=10)
                except ValueError:
                    pass  # released meanwhile
                _ = (p.cost, p.released, p.weight)

        def refunder() -> None:
            start.wait()
            for _ in range(5):
                try:
                    p.refund(1)
                except ValueError:
                    pass

        def releaser() -> None:
            start.wait()
            answers.append(p.release(usage=random.choice([None, 30])))

        ts = [threading.Thread(target=f) for f in (reporter, refunder, releaser, releaser)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert sorted(answers) == [False, True] and p.released
    s = assert_idle(bh)
    assert (s["released_twice_total"], s["leaked_total"], s["budget"]["in_use"]) == (50, 0, 0)


def test_an_event_during_a_propagating_exception_keeps_the_exception() -> None:
    # Review finding: a Permit dropped while an exception propagated ran its release event's
    # listener with that exception still set, and the caller got SystemError ("error return
    # without exception set") instead of the real error.
    bh = hullguard.Bulkhead(max_concurrent=2, max_queue=0, events=True)
    ended: List[Any] = []
    bh.on("release", lambda e: ended.append(e.get("ended")))
    with pytest.raises(hullguard.BulkheadFullError):
        [bh.acquire_sync(timeout=0.1) for _ in range(3)]
    gc.collect()
    assert len(ended) == 2
    assert bh.stats()["active"] == 0
