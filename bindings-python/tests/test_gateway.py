"""Gateway admission in Python (issue 16): ``cost`` / ``admission_class`` / ``observe`` on every
acquire, the class table's constructor arguments, settlement (``release(usage=)``,
``report_usage``, ``refund``), ``apply_limits`` / ``would_admit`` / ``set_budget`` /
``set_observe``, rejection ``.detail``, the non-throwing style (``admit`` / ``admit_sync`` /
``try_admit`` → ``Admission``), a registry's global cap, and the events (``on`` / ``off``, the
``events()`` stream, a raising listener, no cost without ``events=True``).

The decisions themselves are the vectors' (test_vectors.py runs every admission vector); these
tests pin the Python surface: argument checking that names the bad argument, result shapes and
the event plumbing.
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import threading
from typing import Any, Dict, List

import pytest

import hullguard
from _support import VirtualClockLoop, assert_idle


def budgeted(**kw: Any) -> hullguard.Bulkhead:
    return hullguard.Bulkhead(max_concurrent=4, max_queue=4, budget=100, **kw)


def classed(**kw: Any) -> hullguard.Bulkhead:
    return hullguard.Bulkhead(
        max_concurrent=3,
        max_queue=4,
        classes=[{"name": "interactive", "priority": 10, "floor": 1}, {"name": "batch"}],
        **kw,
    )


# ----- arguments -------------------------------------------------------------------------------


def test_cost_is_charged_and_returned() -> None:
    bh = budgeted()
    p = bh.acquire_sync(cost=60)
    assert (p.cost, p.weight, p.revision) == (60, 1, 0)
    assert bh.stats()["budget"]["in_use"] == 60
    with pytest.raises(hullguard.BulkheadFullError, match="budget"):
        bh.try_acquire(cost=50)  # a budget refusal raises: only concurrency_limit is None
    p.release()
    assert bh.stats()["budget"]["in_use"] == 0
    assert_idle(bh)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"cost": "5"}, TypeError, ["cost", "int"]),
        ({"cost": -1}, ValueError, ["cost", "0..="]),
        ({"cost": hullguard.MAX_BUDGET + 1}, ValueError, ["cost"]),
        ({"cost": 1.5}, TypeError, ["cost"]),
        ({"observe": "shadow"}, ValueError, ["observe", "concurrency"]),
        ({"observe": 1}, TypeError, ["observe"]),
        ({"admission_class": "nope"}, ValueError, ["admission_class", "interactive", "batch"]),
        ({"admission_class": 1.0}, TypeError, ["admission_class"]),
        ({"admission_class": 7}, ValueError, ["admission_class", "0..=1"]),
        ({"weight": 0}, ValueError, ["weight"]),
    ],
)
def test_bad_request_arguments_name_the_argument(kwargs: Dict[str, Any], exc: type, words: List[str]) -> None:
    bh = hullguard.Bulkhead(max_concurrent=3, budget=10, classes=[{"name": "interactive"}, {"name": "batch"}])
    for call in (bh.acquire_sync, bh.try_acquire, bh.try_admit, bh.admit_sync, bh.would_admit):
        with pytest.raises(exc) as e:
            call(**kwargs)
        for w in words:
            assert w in str(e.value), (call, str(e.value))
    assert_idle(bh)
    assert bh.stats()["admitted_total"] == 0 and sum(bh.stats()["rejected_by_reason"].values()) == 0


def test_cost_without_a_budget_is_refused_as_an_argument() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    with pytest.raises(ValueError, match="cost"):
        bh.acquire_sync(cost=1)
    with pytest.raises(ValueError, match="cost"):
        bh.try_admit(cost=1)  # a bad argument raises even in the non-throwing style


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"classes": [{"name": "a", "prio": 1}]}, ValueError, ["classes[0]", "prio", "priority", "budget_floor"]),
        ({"classes": [{"priority": 256}]}, ValueError, ["classes[0].priority", "0..=255"]),
        ({"classes": [{"priority": "1"}]}, TypeError, ["classes[0].priority"]),
        ({"classes": [{"name": "a"}, {"name": "a"}]}, ValueError, ["a", "two classes"]),
        ({"classes": {"name": "a"}}, TypeError, ["classes", "list"]),
        ({"classes": [{}], "reserve": {"permit": 1}}, ValueError, ["reserve", "permit", "min_priority"]),
        ({"classes": [{}], "rates": {"tokens": {}}}, ValueError, ["rates", "tokens", "requests"]),
        ({"classes": [{}], "rates": {"requests": {"amount": 1, "per_ms": 5}}}, ValueError, ["rates.requests", "per_ms", "per"]),
        ({"classes": [{}], "rates": {"requests": {"amount": 0, "per": 1.0, "burst": 1}}}, ValueError, ["amount"]),
        ({"classes": [{}], "lending": 1}, TypeError, ["lending"]),
        ({"classes": [{"observe": "sometimes"}]}, ValueError, ["classes[0].observe"]),
        ({"classes": [{"floor": 9}]}, ValueError, ["floor"]),
    ],
)
def test_bad_class_tables_name_the_option(kwargs: Dict[str, Any], exc: type, words: List[str]) -> None:
    with pytest.raises(exc) as e:
        hullguard.Bulkhead(max_concurrent=3, **kwargs)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_classes_by_name_and_index() -> None:
    bh = classed()
    assert bh.classes == ["interactive", "batch"]
    a = bh.acquire_sync(admission_class="batch")
    b = bh.acquire_sync(admission_class=0)
    c = bh.class_stats("batch")
    assert (c["class"], c["name"], c["in_flight"], c["priority"]) == (1, "batch", 1, 0)
    assert bh.class_stats(0)["in_flight"] == 1
    assert bh.class_shared_in_use() is not None
    with pytest.raises(ValueError, match="admission_class"):
        bh.class_stats("gone")
    with pytest.raises(ValueError, match="admission_class"):
        bh.class_stats(5)
    a.release()
    b.release()
    assert hullguard.Bulkhead(max_concurrent=1).class_shared_in_use() is None


# ----- rejections and the non-throwing style ---------------------------------------------------


def test_rejections_carry_the_detail() -> None:
    bh = budgeted()
    p = bh.acquire_sync(cost=90)
    with pytest.raises(hullguard.BulkheadFullError) as e:
        bh.try_acquire(cost=20)
    d = e.value.detail
    assert (e.value.reason, d["reason"], d["bound"]) == ("budget_limit", "budget_limit", "budget")
    assert d["budget"] == {"limit": 100, "in_use": 90, "available": 10}
    assert d["calls"]["in_use"] == 1 and d["retry_after"] is None and d["class"] is None
    # pickles with its detail (a process pool's rejection reaches the parent intact)
    back = pickle.loads(pickle.dumps(e.value))
    assert back.detail == d and back.reason == "budget_limit"
    p.release()


def test_try_admit_never_raises_a_refusal() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, budget=10)
    a = bh.try_admit(cost=4)
    assert a.ok and bool(a) and isinstance(a.permit, hullguard.Permit) and a.reason is None
    refused = bh.try_admit()
    assert not refused.ok and not refused and refused.permit is None
    assert refused.reason == "concurrency_limit" and refused.detail["bound"] == "limit"
    assert isinstance(refused.error, hullguard.BulkheadFullError)
    assert refused.error.detail == refused.detail
    # admit_sync: the same, after any wait (here none: max_queue 0)
    b = bh.admit_sync(timeout=0)
    assert (b.ok, b.reason) == (False, "concurrency_limit")
    a.permit.release()
    bh.close()
    c = bh.admit_sync()
    assert (c.ok, c.reason, type(c.error)) == (False, "shutdown", hullguard.BulkheadClosedError)
    assert "Refused" in repr(c) and "ok" in repr(a)
    assert isinstance(a, hullguard.Admitted) and isinstance(c, hullguard.Refused)
    assert isinstance(c, hullguard.Admission)


@pytest.mark.asyncio
async def test_admit_awaits_an_admission() -> None:
    bh = budgeted()
    if (a := await bh.admit(cost=500 // 10)).ok:
        async with a.permit:
            assert bh.stats()["budget"]["in_use"] == 50
    assert_idle(bh)
    held = await bh.acquire(cost=100)
    waiter = asyncio.ensure_future(bh.admit(cost=1, timeout=0.0))
    got = await waiter
    assert (got.ok, got.reason, got.detail["bound"]) == (False, "budget_limit", "budget")
    held.release()
    with pytest.raises(ValueError, match="cost"):
        bh.admit(cost=-1)  # a bad argument raises at the call


# ----- settlement ------------------------------------------------------------------------------


def test_release_with_usage_refunds_the_rest() -> None:
    bh = budgeted()
    p = bh.acquire_sync(cost=50)
    assert p.release(usage=20) is True
    b = bh.stats()["budget"]
    assert (b["consumed_total"], b["refunded_total"], b["in_use"]) == (20, 30, 0)
    assert p.release(usage=20) is False  # a second release is counted, not applied
    with pytest.raises(TypeError, match="usage"):
        bh.acquire_sync(cost=1).release(usage="3")


def test_report_usage_shrinks_grows_and_refuses() -> None:
    bh = budgeted(cancel_on_overrun=True)
    p = bh.acquire_sync(cost=50)
    r = p.report_usage(10, remaining=20)
    assert (r.change, r.by, r.held, r.used, r.overrun, r.cancel) == ("shrank", 20, 30, 10, 0, False)
    r = p.report_usage(20, 40)
    assert (r.change, r.by) == ("grew", 30)
    with pytest.raises(hullguard.UsageError) as e:
        p.report_usage(5)
    assert e.value.kind == "decreased" and isinstance(e.value, ValueError)
    other = bh.acquire_sync(cost=40)
    r = p.report_usage(60, 30)  # 90 wanted, 60 held, 40 held by the other: overran
    assert (r.change, r.cancel) == ("overran", True) and p.cancel_requested
    p.refund(5)
    assert p.cost == 85
    with pytest.raises(ValueError, match="n"):
        p.refund(10_000)
    with pytest.raises(TypeError, match="used"):
        p.report_usage("1")
    p.release()
    other.release()
    with pytest.raises(hullguard.UsageError) as e:
        p.report_usage(70)
    assert e.value.kind == "released"
    with pytest.raises(ValueError, match="released"):
        p.refund(1)


def test_orphan_hands_the_permits_back() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_orphaned=1)
    p = bh.acquire_sync()
    assert p.orphan() is True and p.orphan() is False
    assert bh.stats()["orphaned_in_flight"] == 1
    q = bh.acquire_sync()  # the orphaned permit is free again
    q.release()
    p.release()
    with pytest.raises(ValueError):
        hullguard.Bulkhead(max_concurrent=1).acquire_sync().orphan()


# ----- limits, dry runs ------------------------------------------------------------------------


def test_apply_limits_and_stale_revisions() -> None:
    bh = budgeted()
    assert bh.apply_limits(3, limit=2, budget=50, queue_timeout=1.5) is None
    assert (bh.revision, bh.limit, bh.stats()["budget"]["limit"], bh.queue_timeout) == (3, 2, 50, 1.5)
    with pytest.raises(hullguard.StaleRevision) as e:
        bh.apply_limits(3, limit=1)
    assert e.value.current == 3 and isinstance(e.value, ValueError) and "3" in str(e.value)
    with pytest.raises(ValueError, match="max_queue"):
        bh.apply_limits(4, max_queue=9)  # above the max_queue it was built with
    with pytest.raises(TypeError, match="limit"):
        bh.apply_limits(4, limit="1")
    with pytest.raises(ValueError, match="queue_timeout"):
        bh.apply_limits(4, queue_timeout=-1)
    with pytest.raises(TypeError):
        bh.apply_limits(4, 1)  # type: ignore[misc]  # keyword-only
    assert (bh.revision, bh.limit) == (3, 2)
    # the kill switch: a limit of 0 refuses everything at once, holders keep their permits
    p = bh.acquire_sync()
    bh.apply_limits(5, limit=0)
    refused = bh.try_admit()
    assert (refused.reason, refused.detail["bound"]) == ("concurrency_limit", "kill_switch")
    p.release()


def test_apply_limits_reserve_and_rates_on_a_classed_bulkhead() -> None:
    bh = classed()
    bh.apply_limits(1, reserve={"permits": 1, "min_priority": 5}, rates={"requests": {"amount": 10, "per": 1.0, "burst": 10}})
    with pytest.raises(ValueError, match="reserve"):
        bh.apply_limits(2, reserve={"permits": 9})
    with pytest.raises(ValueError, match="rates"):
        bh.apply_limits(2, rates={"requests": {"amount": 1, "per": 0}})
    bh.apply_limits(2, rates={})
    assert bh.revision == 2


def test_would_admit_commits_nothing() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=2, budget=10)
    w = bh.would_admit(cost=3)
    assert (w.decision, w.admit_now, w.position) == ("admit_now", True, None)
    p = bh.acquire_sync()
    before = bh.stats()
    w = bh.would_admit()
    assert (w.decision, w.position, w.ahead) == ("would_queue", 1, 0) and "would_queue" in repr(w)
    w = bh.would_admit(timeout=0)
    assert (w.decision, w.detail["bound"]) == ("concurrency_limit", "limit")
    assert bh.stats() == before
    p.release()


def test_set_budget_and_set_observe() -> None:
    bh = budgeted()
    bh.set_budget(10)
    assert bh.stats()["budget"]["limit"] == 10
    with pytest.raises(ValueError, match="budget"):
        bh.set_budget(1000)
    with pytest.raises(ValueError, match="budget"):
        hullguard.Bulkhead(max_concurrent=1).set_budget(1)
    bh.set_observe("budget")
    p = bh.acquire_sync(cost=50)  # observed, not enforced
    assert bh.stats()["observed_by_reason"]["budget_limit"] == 1
    with pytest.raises(ValueError, match="mode"):
        bh.set_observe("loud")
    p.release()


def test_request_observe_lets_the_limit_through() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0)
    p = bh.acquire_sync()
    q = bh.acquire_sync(observe="concurrency")
    assert bh.stats()["observed_by_reason"]["concurrency_limit"] == 1
    p.release()
    q.release()


# ----- a registry's global cap -----------------------------------------------------------------


def test_registry_global_cap() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=4, max_keys=8, global_cap={"limit": 2, "max_queue": 4})
    a = reg.try_acquire("a")
    assert a is not None
    refused = reg.try_admit("a")
    assert (refused.reason, refused.detail["bound"]) == ("concurrency_limit", "class")
    b = reg.try_acquire("b")
    assert reg.try_acquire("c") is None
    ks = reg.key_stats("a")
    assert ks is not None and (ks["in_flight"], ks["ceiling"]) == (1, 1)
    g = reg.global_stats()
    assert g is not None and (g["limit"], g["active"]) == (2, 2)
    assert reg.would_admit("zzz").decision == "would_queue" and "zzz" not in reg.keys()
    assert reg.would_admit("zzz", timeout=0).decision == "concurrency_limit"
    a.release()
    b.release() if b else None
    assert hullguard.Registry().global_stats() is None
    with pytest.raises(ValueError, match="global_cap"):
        hullguard.Registry(global_cap={"limit": 1, "queue": 2})
    with pytest.raises(ValueError, match="global_cap.limit"):
        hullguard.Registry(global_cap={"max_queue": 2})


def test_registry_gateway_arguments() -> None:
    reg = hullguard.Registry(max_concurrent=2, budget=10)
    p = reg.acquire_sync("k", cost=4)
    assert p.cost == 4 and reg.stats()["k"]["budget"]["in_use"] == 4
    a = reg.try_admit("k", cost=7)
    assert (a.ok, a.reason) == (False, "budget_limit")
    b = reg.admit_sync("k", cost=6)
    assert b.ok and b.permit.key == "k"
    b.permit.release()
    p.release()
    with pytest.raises(ValueError, match="admission_class"):
        reg.try_acquire("k", admission_class="named")


# ----- events ----------------------------------------------------------------------------------


def test_admission_events_need_events_true() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    with pytest.raises(ValueError, match="events=True"):
        bh.on("admit", print)
    with pytest.raises(ValueError, match="events=True"):
        bh.events()
    bh.on("state_change", print)  # breaker transitions need no admission events
    assert bh.off("state_change", print) is True and bh.off("state_change", print) is False
    with pytest.raises(ValueError, match="admit"):
        hullguard.Bulkhead(events=True).on("admitted", print)
    with pytest.raises(TypeError, match="callable"):
        hullguard.Bulkhead(events=True).on("admit", 3)
    with pytest.raises(TypeError, match="events"):
        hullguard.Bulkhead(events="yes")


def test_events_in_order_with_their_fields() -> None:
    seen: List[Dict[str, Any]] = []
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, budget=10, events=True)
    for kind in hullguard.EVENT_KINDS:
        bh.on(kind, seen.append)
    p = bh.acquire_sync(cost=4)
    assert bh.try_admit(cost=1).reason == "concurrency_limit"
    p.report_usage(2, 1)
    p.release()
    bh.apply_limits(1, limit=1)
    kinds = [e["kind"] for e in seen]
    assert kinds == ["admit", "reject", "usage", "release", "reconfigure"], kinds
    admit, reject, usage, release, reconf = seen
    assert admit["id"] == release["id"] == usage["id"] != reject["id"]
    assert (admit["weight"], admit["cost"], admit["queued"], admit["wait"], admit["key"]) == (1, 4, False, 0.0, None)
    assert isinstance(admit["decision"], float) and admit["class"] == 0
    assert (reject["reason"], reject["cost"]) == ("concurrency_limit", 1)
    assert (usage["change"], usage["by"], usage["held"], usage["used"]) == ("shrank", 1, 3, 2)
    assert (release["ended"], release["weight"]) == (True, 1)
    assert (reconf["revision"], reconf["limit"], reconf["budget"]) == (1, 1, 10)


def test_events_name_the_class() -> None:
    seen: List[Dict[str, Any]] = []
    bh = classed(events=True)
    bh.on("admit", seen.append)
    bh.acquire_sync(admission_class="batch").release()
    assert (seen[0]["class"], seen[0]["class_name"]) == (1, "batch")


def test_a_raising_listener_is_reported_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    hooked: List[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: hooked.append(u))
    bh = hullguard.Bulkhead(max_concurrent=1, events=True)
    calls: List[str] = []

    def boom(e: Dict[str, Any]) -> None:
        calls.append(e["kind"])
        raise RuntimeError("listener bug")

    bh.on("admit", boom)
    bh.on("admit", lambda e: calls.append("second"))
    p = bh.acquire_sync()  # admission goes on
    assert p.weight == 1 and calls == ["admit", "second"]
    assert bh.listener_errors == 1
    assert len(hooked) == 1 and isinstance(hooked[0].exc_value, RuntimeError)
    assert hooked[0].object is boom
    p.release()
    assert bh.off("admit", boom)
    bh.acquire_sync().release()
    assert bh.listener_errors == 1 and calls == ["admit", "second", "second"]


def _python_calls(fn: Any, n: int) -> int:
    count = 0

    def prof(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(prof)
    try:
        for _ in range(n):
            fn()
    finally:
        sys.setprofile(None)
    return count


def test_no_listener_no_cost() -> None:
    """Without ``events=True`` the core builds no admission event (no Python is reached); with
    it but nobody listening to a kind, an event of that kind costs no Python call either; a
    listener is called exactly once per event."""
    plain = hullguard.Bulkhead(max_concurrent=2)
    quiet = hullguard.Bulkhead(max_concurrent=2, events=True)
    quiet.on("shed", print)  # listening to another kind only
    heard: List[Dict[str, Any]] = []
    loud = hullguard.Bulkhead(max_concurrent=2, events=True)

    def listen(e: Dict[str, Any]) -> None:
        heard.append(e)

    loud.on("admit", listen)

    def cycle(bh: hullguard.Bulkhead) -> Any:
        return lambda: bh.try_acquire().release()  # type: ignore[union-attr]

    base = _python_calls(cycle(plain), 50)
    assert _python_calls(cycle(quiet), 50) == base
    assert _python_calls(cycle(loud), 50) == base + 2 * 50  # the listener and its append
    assert len(heard) == 50


@pytest.mark.asyncio
async def test_event_stream() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, events=True)
    stream = bh.events("admit", "release", maxsize=3)
    for _ in range(3):
        (await bh.acquire()).release()  # 6 events, 3 fit
    assert stream.dropped == 3 and stream.pending() == 3
    got = [e["kind"] async for e in _take(stream, 3)]
    assert got == ["admit", "release", "admit"]

    async def later() -> None:
        await asyncio.sleep(0)
        (await bh.acquire()).release()

    task = asyncio.ensure_future(later())
    e = await asyncio.wait_for(stream.__anext__(), 5)  # woken by an event
    assert e["kind"] == "admit"
    await task
    await stream.aclose()
    rest = [e["kind"] async for e in stream]
    assert rest == ["release"]  # buffered events still come, then the end
    (await bh.acquire()).release()
    assert stream.pending() == 0  # unregistered
    async with bh.events() as s2:
        (await bh.acquire()).release()
        assert [e["kind"] for e in [await s2.__anext__(), await s2.__anext__()]] == ["admit", "release"]
    with pytest.raises(ValueError, match="maxsize"):
        bh.events(maxsize=0)


async def _take(stream: hullguard.EventStream, n: int) -> Any:
    for _ in range(n):
        yield await stream.__anext__()


def test_events_from_other_threads_reach_the_stream(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, events=True)

    async def read() -> Dict[str, Any]:
        stream = bh.events("admit")
        try:
            return await stream.__anext__()
        finally:
            await stream.aclose()

    task = vloop.create_task(read())
    vloop.run_until_quiet()
    t = threading.Thread(target=lambda: bh.acquire_sync().release())
    t.start()
    t.join(10)
    for _ in range(100):  # bounded: the wake-up comes through call_soon_threadsafe
        vloop.run_once()
        if task.done():
            break
    assert task.result()["kind"] == "admit"


def test_registry_events() -> None:
    seen: List[Dict[str, Any]] = []
    reg = hullguard.Registry(max_concurrent=1, events=True)
    reg.on("admit", seen.append)
    reg.acquire_sync("k").release()
    assert [(e["kind"], e["key"]) for e in seen] == [("admit", "k")]
    with pytest.raises(ValueError, match="Registry.on"):
        reg.get("k").on("admit", print)
    assert reg.off("admit", seen.append) and reg.listener_errors == 0


# ----- the rate timer --------------------------------------------------------------------------


def test_rate_timer_grants_a_held_head_on_the_loop(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(
        max_concurrent=4, classes=[{}], rates={"requests": {"amount": 1, "per": 0.1, "burst": 1}}, _clock=vloop.clock
    )
    first = bh.try_acquire()
    task = vloop.create_task(_awaited(bh.acquire()))
    vloop.run_until_quiet()
    assert not task.done() and 100_000_000 in vloop.pending_timers()  # beside its 30 s deadline
    vloop.advance(100)
    assert task.done() and isinstance(task.result(), hullguard.Permit)
    task.result().release()
    first.release()  # type: ignore[union-attr]


async def _awaited(ctx: Any) -> Any:
    return await ctx


def test_acquire_sync_ticks_the_rates_itself() -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, classes=[{}], rates={"requests": {"amount": 1, "per": 0.05, "burst": 1}})
    a = bh.acquire_sync()
    b = bh.acquire_sync(timeout=10)  # held back ~50 ms by the rate; the waiting thread ticks
    assert b.weight == 1
    a.release()
    b.release()


@pytest.mark.asyncio
async def test_guard_and_registry_admit_take_the_gateway_arguments() -> None:
    bh = budgeted()
    seen: List[int] = []

    @bh.guard(cost=30)
    async def call() -> None:
        seen.append(bh.stats()["budget"]["in_use"])

    @bh.guard(cost=20, weight=2)
    def sync_call() -> None:
        seen.append(bh.stats()["budget"]["in_use"])

    await call()
    sync_call()
    assert seen == [30, 20]
    with pytest.raises(TypeError, match="cost"):
        bh.guard(cost="x")
    assert_idle(bh)
    reg = hullguard.Registry(max_concurrent=1, budget=10)
    a = await reg.admit("k", cost=10)
    assert a.ok and a.permit.cost == 10
    b = await reg.admit("k", timeout=0)
    assert (b.ok, b.reason, b.error.snapshot["key"]) == (False, "concurrency_limit", "k")
    a.permit.release()


@pytest.mark.asyncio
async def test_admit_as_a_context_manager_releases_at_the_exit() -> None:
    bh = budgeted()
    async with bh.admit(cost=5) as a:
        assert a.ok and bh.stats()["budget"]["in_use"] == 5
    assert_idle(bh)
    assert bh.stats()["leaked_total"] == 0


def test_registry_apply_limits() -> None:
    reg = hullguard.Registry(max_concurrent=4, max_queue=4, budget=100)
    reg.get("a")
    reg.apply_limits(1, defaults={"limit": 2, "budget": 50}, overrides={"b": {"limit": 1}})
    assert reg.revision == 1
    assert (reg.get("a").limit, reg.get("b").limit, reg.get("c").limit) == (2, 1, 2)
    assert reg.stats()["c"]["budget"]["limit"] == 50  # a key created later takes them too
    with pytest.raises(hullguard.StaleRevision) as e:
        reg.apply_limits(1, defaults={"limit": 3})
    assert e.value.current == 1
    with pytest.raises(ValueError, match="defaults.limt|limt"):
        reg.apply_limits(2, defaults={"limt": 3})
    with pytest.raises(TypeError, match=r"overrides\[\"a\"\].limit"):
        reg.apply_limits(2, overrides={"a": {"limit": "3"}})
    with pytest.raises(ValueError, match="global"):
        reg.apply_limits(2, global_cap={"limit": 3})  # no global cap
    assert reg.revision == 1
    capped = hullguard.Registry(max_concurrent=2, max_keys=4, global_cap={"limit": 4, "max_queue": 4})
    capped.apply_limits(1, global_cap={"limit": 1})
    g = capped.global_stats()
    assert g is not None and g["limit"] == 1


def test_queued_admissions_report_their_wait(vloop: VirtualClockLoop) -> None:
    seen: List[Dict[str, Any]] = []
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4, queue_timeout=0.1, events=True, _clock=vloop.clock)
    for kind in ("admit", "reject"):
        bh.on(kind, seen.append)
    held = bh.try_acquire()
    first = vloop.create_task(_awaited(bh.acquire()))
    second = vloop.create_task(_awaited(bh.acquire(timeout=0.2)))
    vloop.run_until_quiet()
    vloop.advance(40)
    held.release()  # type: ignore[union-attr]
    vloop.run_until_quiet()
    vloop.advance(200)
    assert first.done() and second.done()
    got = [(e["kind"], e["queued"], round(e["wait"], 3), e.get("reason")) for e in seen]
    assert got == [("admit", False, 0.0, None), ("admit", True, 0.04, None), ("reject", True, 0.2, "timeout")], got
    first.result().release()
    with pytest.raises(hullguard.BulkheadQueueTimeoutError):
        second.result()


def test_shed_and_observe_bypass_events(vloop: VirtualClockLoop) -> None:
    seen: List[Dict[str, Any]] = []
    bh = hullguard.Bulkhead(
        max_concurrent=1, max_queue=1, events=True, shed=True, _clock=vloop.clock,
        classes=[{"name": "high", "priority": 10}, {"name": "low"}],
    )
    for kind in ("shed", "reject", "observe_bypass"):
        bh.on(kind, seen.append)
    held = bh.try_acquire(admission_class="high")
    low = vloop.create_task(_awaited(bh.acquire(admission_class="low")))
    vloop.run_until_quiet()
    high = vloop.create_task(_awaited(bh.acquire(admission_class="high")))
    vloop.run_until_quiet()
    assert low.done() and isinstance(low.exception(), hullguard.BulkheadShedError)
    shed = [e for e in seen if e["kind"] == "shed"]
    assert len(shed) == 1 and (shed[0]["class_name"], shed[0]["victim_class"]) == ("high", 1)
    rejects = [e for e in seen if e["kind"] == "reject"]
    assert [(e["reason"], e["id"]) for e in rejects] == [("shed", shed[0]["victim"])]
    held.release()  # type: ignore[union-attr]
    vloop.run_until_quiet()
    high.result().release()
    plain = hullguard.Bulkhead(max_concurrent=1, events=True)
    plain.on("observe_bypass", seen.append)
    p = plain.acquire_sync()
    q = plain.acquire_sync(observe="concurrency")
    assert seen[-1]["kind"] == "observe_bypass" and seen[-1]["reason"] == "concurrency_limit"
    p.release()
    q.release()


def test_a_release_arms_the_rate_timer_for_a_head_the_rate_now_holds(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(
        max_concurrent=1, max_queue=4, classes=[{}], _clock=vloop.clock,
        rates={"requests": {"amount": 1, "per": 0.1, "burst": 1}},
    )
    a = bh.try_acquire()
    vloop.advance(150)
    b = vloop.create_task(_awaited(bh.acquire()))  # held by the permits, not the rate
    vloop.run_until_quiet()
    a.release()  # type: ignore[union-attr]
    vloop.run_until_quiet()
    assert b.done()  # conforming since 100 ms: granted by the release
    vloop.advance(10)
    c = vloop.create_task(_awaited(bh.acquire()))  # held by the permits
    vloop.run_until_quiet()
    vloop.advance(40)
    b.result().release()  # at 200 ms: c is the head, held by the rate until 250 ms
    vloop.run_until_quiet()
    assert not c.done()
    vloop.advance(49)
    assert not c.done()
    vloop.advance(1)
    assert c.done()
    c.result().release()
