"""Regressions found by the issue-17 review of the Python deadlines (each failed before its fix):

* one ``hullguard.deadline()`` scope entered by concurrent tasks or threads (a module-level
  per-request budget): each entry is kept in its own context — no ``ValueError`` at the exit,
  no budget left behind on a pool thread;
* the httpx transport with less than a millisecond left once admitted: nothing is sent
  (``httpx.PoolTimeout``), the permit is released ``ignored``;
* ``SingleFlight``: one caller's budget never cuts the shared work short for the others (the
  work runs outside every budget; each caller's budget bounds its own wait);
* a bare ``async with bh:`` entered under a budget and exited by another task keeps nothing held
  (a plain bulkhead's bare block keeps only its unit);
* ``apply_limits(queue_delay=...)`` needs ``target`` (shedding is never turned off by omission).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from typing import List, Optional

import httpx
import pytest

import hullguard
from hullguard.dedup import SingleFlight
from hullguard.httpx import BulkheadTransport
from _support import FixedClock, assert_idle


def test_one_scope_entered_by_concurrent_tasks() -> None:
    budget = hullguard.deadline(60)  # one object, shared (a module-level per-request budget)
    seen: List[Optional[float]] = []

    async def handler(hold: float) -> None:
        async with budget:
            await asyncio.sleep(hold)
        seen.append(hullguard.current_deadline())

    async def main() -> None:
        # A enters first and leaves first, B enters second and leaves last: interleaved.
        await asyncio.gather(handler(0.01), handler(0.02))

    asyncio.run(main())
    assert seen == [None, None]


def test_one_scope_entered_by_threads_leaves_no_budget_behind() -> None:
    budget = hullguard.deadline(60)
    barrier = threading.Barrier(2)

    def handler() -> Optional[float]:
        with budget:
            barrier.wait(10)
        return hullguard.current_deadline()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda _: handler(), range(2))) == [None, None]
        # The same pool threads, later, outside any budget: nothing left over.
        after = list(pool.map(lambda _: hullguard.current_deadline(), range(4)))
    assert after == [None] * 4


def test_a_scope_left_in_another_context_changes_nothing() -> None:
    budget = hullguard.deadline(60)
    budget.__enter__()
    inside = hullguard.current_deadline()
    with pytest.raises(RuntimeError, match="left in a context that did not enter it"):
        contextvars.copy_context().run(budget.__exit__, None, None, None)
    assert hullguard.current_deadline() == inside
    budget.__exit__(None, None, None)
    assert hullguard.current_deadline() is None


@pytest.mark.asyncio
async def test_httpx_less_than_a_millisecond_left_sends_nothing(fixed: FixedClock) -> None:
    hits: List[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        hits.append(request)
        return httpx.Response(200)

    reg = hullguard.Registry(max_concurrent=1, _clock=fixed)
    transport = BulkheadTransport(httpx.MockTransport(upstream), registry=reg,
                                  deadline_header="grpc-timeout")
    async with httpx.AsyncClient(transport=transport) as client:
        # Admitted (0.5 ms is left on the frozen clock), but too little to send with.
        with hullguard.deadline_at(fixed.ns / 1e9 + 0.0005):
            with pytest.raises(httpx.PoolTimeout, match="deadline passed before it was sent"):
                await client.get("https://api.example/v1")
        assert hits == []
        with hullguard.deadline_at(fixed.ns / 1e9 + 1.5):
            assert (await client.get("https://api.example/v1")).status_code == 200
        assert hits[0].headers["grpc-timeout"] == "1500m"
    stats = reg.stats()
    (s,) = stats.values()
    assert (s["active"], s["available"]) == (0, 1)


@pytest.mark.asyncio
async def test_single_flight_one_callers_budget_does_not_cut_the_shared_work() -> None:
    bh = hullguard.Bulkhead(max_concurrent=2)
    flights = SingleFlight(bh)
    started, release = asyncio.Event(), asyncio.Event()

    async def work() -> int:
        started.set()
        await release.wait()
        return 42

    async def leader() -> int:
        async with hullguard.deadline(0.05):
            return await flights.run("k", work)

    async def follower() -> int:
        await started.wait()
        return await flights.run("k", work)

    tl, tf = asyncio.ensure_future(leader()), asyncio.ensure_future(follower())
    with pytest.raises(hullguard.CallTimeoutError):
        await tl  # its own budget ended its wait
    release.set()
    assert await tf == 42  # the shared work went on for the follower
    await asyncio.sleep(0)
    assert_idle(bh)


@pytest.mark.asyncio
async def test_a_bare_block_under_a_budget_exited_by_another_task_holds_nothing() -> None:
    bh = hullguard.Bulkhead(max_concurrent=2)

    async def enter() -> None:
        async with hullguard.deadline(60):
            await bh.__aenter__()

    async def leave() -> None:
        await bh.__aexit__(None, None, None)

    await asyncio.ensure_future(enter())
    await asyncio.ensure_future(leave())
    s = assert_idle(bh)
    assert s["released_twice_total"] == 0


def test_apply_limits_queue_delay_needs_a_target() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1, queue_delay_target=0.01, adaptive_lifo=True)
    with pytest.raises(ValueError, match='queue_delay needs "target"'):
        bh.apply_limits(1, queue_delay={"interval": 0.2})
    assert bh.revision == 0
