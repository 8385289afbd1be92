"""hullguard.SingleFlight (in-flight dedup, issue 16 item 3).

Each test is named after the failure it prevents. They run on the virtual-clock loop
(``vloop``): the test drives every step (``run_until_quiet``, ``advance``), so no assertion
depends on wall-clock time.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Optional

import pytest

import hullguard
from hullguard.dedup import SingleFlight, UnshareableResultError, cost_bucket

from _support import VirtualClockLoop, assert_idle


class Gate:
    """The shared work: counts its runs, waits for ``open``, records cancellation."""

    def __init__(self, result: Any = "answer") -> None:
        self.runs = 0
        self.cancelled = 0
        self.result = result
        self.open = asyncio.Event()

    async def __call__(self) -> Any:
        self.runs += 1
        try:
            await self.open.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def _bh(vloop: VirtualClockLoop, **kw: Any) -> hullguard.Bulkhead:
    kw.setdefault("max_concurrent", 2)
    kw.setdefault("max_queue", 8)
    return hullguard.Bulkhead(_clock=vloop.clock, **kw)


def test_followers_share_one_admission_and_one_run(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    tasks = [vloop.create_task(sf.run("k", gate)) for _ in range(3)]
    vloop.run_until_quiet()
    assert (gate.runs, len(sf), sf.hits) == (1, 1, 2)
    assert bh.stats()["active"] == 1
    gate.open.set()
    vloop.run_until_quiet()
    assert [t.result() for t in tasks] == ["answer"] * 3
    assert bh.stats()["admitted_total"] == 1
    assert len(sf) == 0
    assert_idle(bh)


def test_nothing_is_cached_after_the_flight_lands(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    gate.open.set()
    first = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    second = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    assert (first.result(), second.result(), gate.runs) == ("answer", "answer", 2)


def test_different_keys_never_share(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    a, b = Gate("a"), Gate("b")
    ta = vloop.create_task(sf.run("a", a))
    tb = vloop.create_task(sf.run("b", b))
    vloop.run_until_quiet()
    assert (a.runs, b.runs, len(sf), bh.stats()["active"]) == (1, 1, 2, 2)
    a.open.set()
    b.open.set()
    vloop.run_until_quiet()
    assert (ta.result(), tb.result()) == ("a", "b")


def test_different_weights_never_share(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    t1 = vloop.create_task(sf.run("k", gate, weight=1))
    t2 = vloop.create_task(sf.run("k", gate, weight=1))
    vloop.run_until_quiet()
    assert bh.stats()["active"] == 1
    vloop.create_task(sf.run("k", gate, weight=2))
    vloop.run_until_quiet()
    assert (gate.runs, len(sf), bh.stats()["queued"]) == (1, 2, 1)  # queued on its own
    gate.open.set()
    vloop.run_until_quiet()
    assert (t1.result(), t2.result(), gate.runs) == ("answer", "answer", 2)
    assert_idle(bh)


def test_leader_abort_does_not_fail_followers(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    leader = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    followers = [vloop.create_task(sf.run("k", gate)) for _ in range(2)]
    vloop.run_until_quiet()
    leader.cancel()
    vloop.run_until_quiet()
    assert leader.cancelled()
    assert (gate.cancelled, bh.stats()["active"]) == (0, 1)  # the work goes on
    gate.open.set()
    vloop.run_until_quiet()
    assert [f.result() for f in followers] == ["answer", "answer"]
    assert gate.runs == 1
    assert_idle(bh)


def test_a_followers_cancellation_never_fails_the_others(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    leader = vloop.create_task(sf.run("k", gate))
    f1 = vloop.create_task(sf.run("k", gate))
    f2 = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    f1.cancel()
    vloop.run_until_quiet()
    gate.open.set()
    vloop.run_until_quiet()
    assert f1.cancelled()
    assert (leader.result(), f2.result(), gate.cancelled) == ("answer", "answer", 0)


def test_last_waiter_cancellation_cancels_the_work(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    tasks = [vloop.create_task(sf.run("k", gate)) for _ in range(2)]
    vloop.run_until_quiet()
    tasks[0].cancel()
    vloop.run_until_quiet()
    assert gate.cancelled == 0
    tasks[1].cancel()
    vloop.run_until_quiet()
    assert gate.cancelled == 1
    assert len(sf) == 0
    assert_idle(bh)  # the permit was released once the work unwound
    # The partition is free: a new caller starts a new flight.
    gate.open.set()
    again = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    assert (again.result(), gate.runs) == ("answer", 2)


def test_last_waiter_cancellation_while_queued_frees_the_queue_place(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, max_concurrent=1)
    sf = SingleFlight(bh)
    holder = bh.try_acquire()
    assert holder is not None
    gate = Gate()
    t = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    assert bh.stats()["queued"] == 1
    t.cancel()
    vloop.run_until_quiet()
    assert (gate.runs, bh.stats()["queued"], len(sf)) == (0, 0, 0)
    holder.release()
    assert_idle(bh)


def test_refused_leader_then_followers_admitted_themselves(vloop: VirtualClockLoop) -> None:
    # The leader queues first and times out (its own 1 s queue timeout); a follower that
    # joined 0.9 s later must not inherit that decision: it queues itself and is admitted.
    bh = _bh(vloop, max_concurrent=1, queue_timeout=1.0)
    sf = SingleFlight(bh)
    holder = bh.try_acquire()
    assert holder is not None
    gate = Gate()
    gate.open.set()
    leader = vloop.create_task(sf.run("k", gate))
    vloop.advance(900)
    follower = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    vloop.advance(100)
    assert isinstance(leader.exception(), hullguard.BulkheadQueueTimeoutError)
    assert leader.exception().reason == "timeout"
    assert not follower.done()
    assert bh.stats()["queued"] == 1  # the follower's own admission
    holder.release()
    vloop.run_until_quiet()
    assert (follower.result(), gate.runs) == ("answer", 1)
    assert_idle(bh)


def test_refused_leader_refusal_is_raised_by_the_leader_only(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, max_concurrent=1, max_queue=0)
    sf = SingleFlight(bh)
    holder = bh.try_acquire()
    assert holder is not None
    gate = Gate()
    leader = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    exc = leader.exception()
    assert isinstance(exc, hullguard.BulkheadFullError)
    assert exc.reason == "concurrency_limit"
    assert (gate.runs, len(sf)) == (0, 0)
    holder.release()


def test_an_error_of_the_work_is_shared_and_recorded_once(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate(result=KeyError("boom"))
    tasks = [vloop.create_task(sf.run("k", gate)) for _ in range(2)]
    vloop.run_until_quiet()
    gate.open.set()
    vloop.run_until_quiet()
    assert all(isinstance(t.exception(), KeyError) for t in tasks)
    assert gate.runs == 1
    assert_idle(bh)


# ----- streaming results -------------------------------------------------------------------


class Source:
    """An async iterator of ``n`` items that counts reads and records closing."""

    def __init__(self, n: int = 3, fail_at: int = -1) -> None:
        self.n = n
        self.reads = 0
        self.closed = False
        self.fail_at = fail_at

    def __aiter__(self) -> "Source":
        return self

    async def __anext__(self) -> int:
        if self.closed or self.reads >= self.n:
            raise StopAsyncIteration
        await asyncio.sleep(0)
        if self.reads == self.fail_at:
            raise ValueError("upstream broke")
        self.reads += 1
        return self.reads

    async def aclose(self) -> None:
        self.closed = True


async def _collect(it: AsyncIterator[int]) -> List[int]:
    return [x async for x in it]


async def _stream_of(sf: SingleFlight, key: str, src: Source, gate: asyncio.Event, **kw: Any) -> List[int]:
    async def fn() -> Source:
        await gate.wait()
        return src

    return await _collect(await sf.run(key, fn, **kw))


def test_non_shareable_stream_refused(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source()
    gate = asyncio.Event()
    leader = vloop.create_task(_stream_of(sf, "k", src, gate))
    follower = vloop.create_task(_stream_of(sf, "k", src, gate))
    vloop.run_until_quiet()
    gate.set()
    vloop.run_until_quiet()
    assert leader.result() == [1, 2, 3]
    exc = follower.exception()
    assert isinstance(exc, UnshareableResultError) and exc.key == "k"
    assert not isinstance(exc, hullguard.BulkheadError)
    assert_idle(bh)


def test_a_stream_holds_its_permit_until_it_ends(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source(n=2)

    async def fn() -> Source:
        return src

    async def main() -> List[int]:
        it = await sf.run("k", fn)
        assert bh.stats()["active"] == 1  # returned, not yet read
        return await _collect(it)

    t = vloop.create_task(main())
    vloop.run_until_quiet()
    assert t.result() == [1, 2]
    assert_idle(bh)


def test_tee_shares_it(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source(n=4)
    gate = asyncio.Event()
    tasks = [vloop.create_task(_stream_of(sf, "k", src, gate, tee=True)) for _ in range(3)]
    vloop.run_until_quiet()
    gate.set()
    vloop.run_until_quiet()
    assert [t.result() for t in tasks] == [[1, 2, 3, 4]] * 3
    assert src.reads == 4  # the source was read once
    assert bh.stats()["admitted_total"] == 1
    assert_idle(bh)


def test_a_tee_consumer_cancelled_mid_read_never_breaks_the_others(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source(n=3)
    gate = asyncio.Event()
    a = vloop.create_task(_stream_of(sf, "k", src, gate, tee=True))
    b = vloop.create_task(_stream_of(sf, "k", src, gate, tee=True))
    vloop.run_until_quiet()
    gate.set()
    vloop.run_once()  # the flight lands
    vloop.run_once()  # both start reading
    a.cancel()
    vloop.run_until_quiet()
    assert a.cancelled()
    assert b.result() == [1, 2, 3]
    assert_idle(bh)


def test_every_consumer_leaving_early_closes_the_stream_and_releases(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source(n=100)

    async def fn() -> Source:
        return src

    async def first_only() -> int:
        it = await sf.run("k", fn, tee=True)
        x = await it.__anext__()
        await it.aclose()
        return x

    tasks = [vloop.create_task(first_only()) for _ in range(2)]
    vloop.run_until_quiet()
    assert [t.result() for t in tasks] == [1, 1]
    assert src.closed and src.reads < 100
    assert_idle(bh)


def test_a_failing_stream_fails_every_consumer_and_releases(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source(n=3, fail_at=1)
    gate = asyncio.Event()
    tasks = [vloop.create_task(_stream_of(sf, "k", src, gate, tee=True)) for _ in range(2)]
    vloop.run_until_quiet()
    gate.set()
    vloop.run_until_quiet()
    assert all(isinstance(t.exception(), ValueError) for t in tasks)
    assert_idle(bh)


def test_a_dropped_stream_result_is_released(vloop: VirtualClockLoop) -> None:
    import gc

    bh = _bh(vloop)
    sf = SingleFlight(bh)
    src = Source()

    async def fn() -> Source:
        return src

    kept: List[Any] = []

    async def keep() -> None:
        kept.append(await sf.run("k", fn))  # never read, never closed

    vloop.create_task(keep())
    vloop.run_until_quiet()
    assert bh.stats()["active"] == 1
    kept.clear()  # dropped outside the loop: the close is scheduled on the stream's loop
    gc.collect()
    vloop.run_until_quiet()
    assert src.closed
    assert_idle(bh)


# ----- partitions ---------------------------------------------------------------------------


def test_cost_bucket_rule() -> None:
    assert [cost_bucket(c) for c in (0, 1, 2, 3, 4, 7, 8)] == [0, 1, 2, 2, 3, 3, 4]


def test_a_call_reserving_far_more_never_rides_a_cheaper_admission(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, budget=1000)
    sf = SingleFlight(bh)
    gate = Gate()
    vloop.create_task(sf.run("k", gate, cost=100))
    vloop.create_task(sf.run("k", gate, cost=120))  # same bucket (64..127): joins
    vloop.create_task(sf.run("k", gate, cost=400))  # another bucket: its own admission
    vloop.run_until_quiet()
    assert (gate.runs, len(sf), sf.hits) == (2, 2, 1)
    assert bh.stats()["budget"]["in_use"] == 500
    gate.open.set()
    vloop.run_until_quiet()
    assert_idle(bh)


def test_a_custom_cost_bucket_partitions_exact_costs(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, budget=1000)
    sf = SingleFlight(bh, cost_bucket=lambda c: c)
    gate = Gate()
    vloop.create_task(sf.run("k", gate, cost=100))
    vloop.create_task(sf.run("k", gate, cost=101))
    vloop.run_until_quiet()
    assert (gate.runs, len(sf)) == (2, 2)
    gate.open.set()
    vloop.run_until_quiet()


def test_enforce_follower_never_joins_an_observed_leader(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, max_concurrent=1)
    sf = SingleFlight(bh)
    holder = bh.try_acquire()
    assert holder is not None
    shadow, enforced = Gate("shadow"), Gate("enforced")
    enforced.open.set()
    t_shadow = vloop.create_task(sf.run("k", shadow, observe="concurrency"))
    vloop.run_until_quiet()
    assert bh.stats()["observed_by_reason"].get("concurrency_limit") == 1  # let through
    # The shadow call is still running: the enforce call does not join it, it queues for
    # its own permit instead of taking the bypassed result.
    t_enforced = vloop.create_task(sf.run("k", enforced))
    vloop.run_until_quiet()
    assert (sf.hits, bh.stats()["queued"]) == (0, 1)
    shadow.open.set()
    vloop.run_until_quiet()
    assert t_shadow.result() == "shadow"
    assert not t_enforced.done()
    holder.release()
    vloop.run_until_quiet()
    assert (t_enforced.result(), enforced.runs) == ("enforced", 1)
    assert_idle(bh)


def test_observe_none_and_off_share_a_flight(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop)
    sf = SingleFlight(bh)
    gate = Gate()
    vloop.create_task(sf.run("k", gate))
    vloop.create_task(sf.run("k", gate, observe="off"))
    vloop.run_until_quiet()
    assert (gate.runs, sf.hits) == (1, 1)
    gate.open.set()
    vloop.run_until_quiet()


def test_different_admission_classes_never_share(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(
        max_concurrent=4,
        classes=[{"name": "batch"}, {"name": "interactive", "priority": 1}],
        _clock=vloop.clock,
    )
    sf = SingleFlight(bh)
    gate = Gate()
    vloop.create_task(sf.run("k", gate, admission_class="batch"))
    vloop.create_task(sf.run("k", gate, admission_class="interactive"))
    vloop.create_task(sf.run("k", gate, admission_class="interactive"))
    vloop.run_until_quiet()
    assert (gate.runs, len(sf), sf.hits) == (2, 2, 1)
    gate.open.set()
    vloop.run_until_quiet()
    assert_idle(bh)


# ----- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        ({"key": 1.5}, TypeError, "key"),
        ({"key": None}, TypeError, "key"),
        ({"fn": 3}, TypeError, "fn"),
        ({"cost": -1}, ValueError, "cost"),
        ({"cost": "1"}, TypeError, "cost"),
        ({"tee": 1}, TypeError, "tee"),
        ({"weight": [1]}, TypeError, "weight"),
        ({"admission_class": ["a"]}, TypeError, "admission_class"),
        ({"observe": 1}, TypeError, "observe"),
    ],
)
def test_bad_arguments_are_named(vloop: VirtualClockLoop, kw: Any, exc: type, name: str) -> None:
    sf = SingleFlight(_bh(vloop))
    args = {"key": "k", "fn": Gate()}
    args.update(kw)
    key, fn = args.pop("key"), args.pop("fn")
    t = vloop.create_task(sf.run(key, fn, **args))
    vloop.run_until_quiet()
    e = t.exception()
    assert isinstance(e, exc) and name in str(e)
    assert len(sf) == 0


def test_a_bulkhead_is_required() -> None:
    with pytest.raises(TypeError, match="bulkhead"):
        SingleFlight(object())
    with pytest.raises(TypeError, match="cost_bucket"):
        SingleFlight(hullguard.Bulkhead(max_concurrent=1), cost_bucket=3)  # type: ignore[arg-type]


def test_an_error_of_work_nobody_waits_for_is_not_reported_as_never_retrieved(vloop: VirtualClockLoop) -> None:
    import gc

    reported: List[Any] = []
    vloop.set_exception_handler(lambda loop, ctx: reported.append(ctx))
    bh = _bh(vloop)
    sf = SingleFlight(bh)

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    t = vloop.create_task(sf.run("k", stubborn))
    vloop.run_until_quiet()
    t.cancel()
    vloop.run_until_quiet()
    gc.collect()
    vloop.run_until_quiet()
    assert reported == []
    assert_idle(bh)  # released ("failure") once it unwound


def test_a_bulkhead_observe_switch_starts_a_new_flight(vloop: VirtualClockLoop) -> None:
    # A binding that exposes the bulkhead's mode (`bh.observe`) puts it in the partition: an
    # enforce-mode arrival after `set_observe("off")` never joins a flight admitted in shadow.
    class Exposed:
        def __init__(self, bh: hullguard.Bulkhead) -> None:
            self.bh, self.observe = bh, "off"

        def acquire(self, *a: Any, **kw: Any) -> Any:
            return self.bh.acquire(*a, **kw)

    bh = _bh(vloop, max_concurrent=1)
    exposed = Exposed(bh)
    sf = SingleFlight(exposed)
    holder = bh.try_acquire()
    assert holder is not None
    bh.set_observe("concurrency")
    exposed.observe = "concurrency"
    shadow = Gate("shadow")
    t_shadow = vloop.create_task(sf.run("k", shadow))
    vloop.run_until_quiet()
    assert bh.stats()["active"] == 2  # let through in shadow
    bh.set_observe("off")
    exposed.observe = "off"
    enforced = Gate("enforced")
    enforced.open.set()
    t_enforced = vloop.create_task(sf.run("k", enforced))
    vloop.run_until_quiet()
    assert (sf.hits, bh.stats()["queued"]) == (0, 1)
    shadow.open.set()
    vloop.run_until_quiet()
    assert t_shadow.result() == "shadow" and not t_enforced.done()
    holder.release()
    vloop.run_until_quiet()  # the shadow call's permit is back, but active was 2 > limit 1
    assert t_enforced.result() == "enforced"
    assert_idle(bh)


def test_a_follower_of_a_leader_that_left_is_never_handed_its_refusal(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, max_concurrent=1, queue_timeout=1.0)
    sf = SingleFlight(bh)
    holder = bh.try_acquire()
    assert holder is not None
    gate = Gate()
    gate.open.set()
    leader = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    follower = vloop.create_task(sf.run("k", gate))
    vloop.run_until_quiet()
    leader.cancel()  # the follower is now the first waiter, but still a follower
    vloop.advance(1000)  # the shared admission times out
    assert not follower.done()  # retried: queued on its own
    holder.release()
    vloop.run_until_quiet()
    assert follower.result() == "answer"
    assert_idle(bh)


def test_get_usage_refunds_the_unused_reservation_once(vloop: VirtualClockLoop) -> None:
    from hullguard import llm

    bh = _bh(vloop, budget=1000)
    sf = SingleFlight(bh)
    gate = Gate(result={"usage": {"input_tokens": 30, "output_tokens": 12}})

    def total(r: Any) -> Optional[int]:
        u = llm.usage_of(r)
        return None if u is None else u.total

    tasks = [vloop.create_task(sf.run("k", gate, cost=500, get_usage=total)) for _ in range(3)]
    vloop.run_until_quiet()
    gate.open.set()
    vloop.run_until_quiet()
    assert all(t.result() is gate.result for t in tasks)
    b = bh.stats()["budget"]
    assert (b["reserved_total"], b["consumed_total"], b["refunded_total"], b["in_use"]) == (500, 42, 458, 0)


def test_a_raising_get_usage_still_releases_and_is_raised(vloop: VirtualClockLoop) -> None:
    bh = _bh(vloop, budget=1000)
    sf = SingleFlight(bh)
    gate = Gate()
    gate.open.set()

    def broken(r: Any) -> int:
        raise LookupError("no usage in this response")

    t = vloop.create_task(sf.run("k", gate, cost=100, get_usage=broken))
    vloop.run_until_quiet()
    assert isinstance(t.exception(), LookupError)
    b = bh.stats()["budget"]
    assert (b["consumed_total"], b["in_use"]) == (100, 0)  # the whole cost charged
    assert_idle(bh)
    with pytest.raises(TypeError, match="get_usage"):
        vloop.run_until_complete(sf.run("k", gate, get_usage=3))  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_sharing_and_a_leaders_cancellation_on_every_loop() -> None:
    # On the default loop and on uvloop (conftest.py): no virtual clock, no timing.
    bh = hullguard.Bulkhead(max_concurrent=2)
    sf = SingleFlight(bh)
    gate = Gate()
    leader = asyncio.ensure_future(sf.run("k", gate))
    await asyncio.sleep(0)
    followers = [asyncio.ensure_future(sf.run("k", gate)) for _ in range(2)]
    for _ in range(3):
        await asyncio.sleep(0)
    leader.cancel()
    await asyncio.sleep(0)
    gate.open.set()
    assert await asyncio.gather(*followers) == ["answer", "answer"]
    assert leader.cancelled() and (gate.runs, gate.cancelled) == (1, 0)
    assert_idle(bh)
