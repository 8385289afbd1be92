"""hullguard.FleetBulkhead's fleet budget, admission classes and events (docs/design.md §16.10)
against a real ``redis-server`` (``test_fleet``'s fixture), through redis-py clients.

Covered: two holders of one pool with ``budget=100`` never hold more than 100 units between them
(every sample of the pool's budget table in Redis, and an in-flight oracle of the costs admitted);
a cost above this process's block waits and is granted once the other holder gives units back; a
cost above the fleet budget is refused ``budget_limit`` at once; an empty budget block refuses
with the bound ``fleet_lease``; ``apply_limits(budget=…)`` (sync and asyncio) changes the fleet
budget every holder sees; classes order waiters by priority inside the block; ``events=True``
delivers this process's admission events (``on``, ``events()``); ``close`` gives both leases
back; bad input named.

Time bounds are queue timeouts or ``eventually`` bounds of at least 10x the target: nothing here
asserts speed.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any, Dict, List

import pytest

import hullguard
from test_fleet import (  # noqa: F401  (the fixtures are used by name)
    RedisServer,
    admin,
    eventually,
    held_in_redis,
    redis_server,
)

redis = pytest.importorskip("redis")


def budget_lease(fleet: hullguard.FleetBulkhead) -> Dict[str, Any]:
    b = fleet.stats()["budget_lease"]
    assert b is not None
    return b  # type: ignore[no-any-return]


def budget_held_in_redis(admin: Any, pool: str) -> Dict[str, int]:
    """The pool's budget table as Redis holds it now (one ``HGETALL``: an atomic snapshot)."""
    raw = admin.hgetall(f"{{hg:{pool}}}:budget:held")
    return {k.decode(): int(v) for k, v in raw.items()}


class Sampler:
    """Samples the sum of the holders' budget blocks in Redis every 2 ms until stopped."""

    def __init__(self, admin: Any, pool: str) -> None:
        self.admin, self.pool = admin, pool
        self.samples = 0
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.002):
            total = sum(budget_held_in_redis(self.admin, self.pool).values())
            self.peak = max(self.peak, total)
            self.samples += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


class Oracle:
    """The units admitted and not yet released across both holders (incremented after a grant,
    decremented before the release) and its peak."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def add(self, units: int) -> None:
        with self.lock:
            self.now += units
            self.peak = max(self.peak, self.now)

    def sub(self, units: int) -> None:
        with self.lock:
            self.now -= units


# ----- the fleet budget --------------------------------------------------------------------------


def test_two_holders_share_the_fleet_budget_a_cost_waits_for_the_block_and_101_is_refused(
    redis_server: RedisServer, admin: Any
) -> None:
    pool = "tokens"
    ra, rb = redis_server.client(), redis_server.client()
    a = hullguard.FleetBulkhead(ra, pool, max_concurrent=10, budget=100, lease_ttl=0.6)
    b = hullguard.FleetBulkhead(rb, pool, max_concurrent=10, budget=100, lease_ttl=0.6)
    sampler = Sampler(admin, pool)
    oracle = Oracle()
    try:
        # The fleet budget is known from the budget lease's first sync (the driver's, after
        # open: under load it may not have happened yet — failed once under a CPU hog).
        eventually(10, "a's first budget sync", lambda: budget_lease(a)["fleet_limit"] == 100)
        le = budget_lease(a)
        assert le["pool"] == pool and le["holder"] == a.holder and le["fleet_limit"] == 100, le
        assert set(le) == set(a.stats()["lease"])
        # a holds 60 units: its budget block grows to cover them.
        pa = a.acquire_sync(cost=60, timeout=10)
        oracle.add(60)
        assert budget_lease(a)["held"] >= 60 and a.stats()["budget"]["in_use"] == 60
        b.acquire_sync(timeout=10).release()  # b's permits are leased
        # 60 more cannot fit beside a's 60: b's request waits for its block to grow.
        released = threading.Event()
        outcome: List[Any] = []

        def wait_for_60() -> None:
            try:
                p = b.acquire_sync(cost=60, timeout=30)
            except BaseException as e:  # reported below
                outcome.append(e)
                return
            outcome.append(released.is_set())  # granted only after a gave its 60 back
            oracle.add(60)
            oracle.sub(60)
            p.release()

        t = threading.Thread(target=wait_for_60)
        t.start()
        eventually(10, "b's request queued", lambda: b.stats()["budget"]["queued_cost"] == 60)
        assert b.stats()["queued"] == 1 and not outcome
        assert budget_lease(b)["held"] <= 40, budget_lease(b)
        # Above the fleet budget: refused at once (BulkheadFullError, never a queue timeout).
        with pytest.raises(hullguard.BulkheadFullError) as e:
            b.acquire_sync(cost=101, timeout=30)
        assert e.value.reason == "budget_limit"
        with pytest.raises(hullguard.BulkheadFullError) as e:
            a.try_acquire(cost=101)
        assert e.value.reason == "budget_limit" and e.value.detail["bound"] == "budget"
        refused = a.try_admit(cost=101)
        assert not refused.ok and refused.reason == "budget_limit"
        # a gives its units back: its block shrinks at its next sync, b's grows and the
        # waiter is granted (within its 30 s queue timeout: target well under a second).
        released.set()
        oracle.sub(60)
        pa.release()
        t.join(40)
        assert not t.is_alive()
        assert outcome == [True], outcome

        # Mixed load on both holders: never more than 100 units held or admitted at once.
        errors: List[BaseException] = []

        def load(fleet: hullguard.FleetBulkhead, seed: int) -> None:
            rnd = random.Random(seed)
            for _ in range(25):
                cost = rnd.randint(1, 50)
                try:
                    p = fleet.acquire_sync(cost=cost, timeout=30)
                except BaseException as e:
                    errors.append(e)
                    return
                oracle.add(cost)
                threading.Event().wait(rnd.random() * 0.004)
                oracle.sub(cost)
                p.release(usage=rnd.randint(0, cost))
        threads = [threading.Thread(target=load, args=(f, i)) for i, f in enumerate([a, b] * 3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not any(th.is_alive() for th in threads)
        assert errors == [], errors
    finally:
        sampler.close()
        a.close()
        b.close()
        ra.close()
        rb.close()
    assert sampler.samples > 0
    assert 0 < sampler.peak <= 100, f"{sampler.peak} units held in Redis at once, budget 100"
    assert 60 <= oracle.peak <= 100, f"{oracle.peak} units admitted at once, budget 100"
    # Both leases given back at close.
    assert budget_held_in_redis(admin, pool) == {} and held_in_redis(admin, pool) == {}
    assert int(admin.hget(f"{{hg:{pool}}}:budget:cfg", "used")) == 0


def test_budget_demand_wakes_the_driver_before_its_beat(redis_server: RedisServer) -> None:
    """A 60 s lease renews every 20 s; a cost the budget block does not cover wakes the driver
    at once: admitted within a 10 s queue timeout, half the beat (no wall-clock assertion)."""
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "bbell", max_concurrent=8, budget=100, lease_ttl=60.0)
    try:
        first = fleet.acquire_sync(cost=30, timeout=10)
        held = budget_lease(fleet)["held"]
        more = [fleet.acquire_sync(cost=20, timeout=10) for _ in range(3)]
        assert budget_lease(fleet)["held"] >= 90 and budget_lease(fleet)["held"] > held
        for p in more + [first]:
            p.release()
    finally:
        fleet.close()
        r.close()


def test_an_empty_budget_block_refuses_with_the_bound_fleet_lease(
    redis_server: RedisServer, admin: Any
) -> None:
    ra, rb = redis_server.client(), redis_server.client()
    a = hullguard.FleetBulkhead(ra, "empty", max_concurrent=4, budget=100, lease_ttl=3.0)
    b = hullguard.FleetBulkhead(rb, "empty", max_concurrent=4, budget=100, lease_ttl=3.0)
    try:
        pa = a.acquire_sync(cost=100, timeout=10)  # the whole fleet budget
        pb = b.acquire_sync(timeout=10)  # b's permits are leased, its budget block is empty
        assert budget_lease(b)["held"] == 0 and b.stats()["budget"]["limit"] == 0
        # Refused `concurrency_limit` while b's permit block is full (the demand grows it),
        # then `budget_limit`: the budget block stays empty while a holds the whole budget.
        tries: List[Any] = []

        def refused_by_the_budget() -> bool:
            tries.append(b.try_admit(cost=1))
            return bool(tries[-1].reason == "budget_limit")

        eventually(10, "a refusal by the budget", refused_by_the_budget)
        adm = tries[-1]
        assert not adm.ok and adm.reason == "budget_limit", adm
        assert adm.detail is not None and adm.detail["bound"] == "fleet_lease", adm.detail
        assert adm.detail["budget"]["limit"] == 0
        with pytest.raises(hullguard.BulkheadFullError) as e:
            b.acquire_sync(cost=1, timeout=0)
        assert e.value.reason == "budget_limit" and e.value.detail["bound"] == "fleet_lease"
        # A request without a cost is not held back by the budget.
        q = b.try_acquire()
        assert q is not None
        q.release()
        pb.release()
        pa.release()
    finally:
        a.close()
        b.close()
        ra.close()
        rb.close()


def test_apply_limits_sets_the_fleet_budget_every_holder_sees(redis_server: RedisServer) -> None:
    ra, rb = redis_server.client(), redis_server.client(decode_responses=True)
    a = hullguard.FleetBulkhead(ra, "abudget", max_concurrent=10, budget=100, lease_ttl=0.6)
    b = hullguard.FleetBulkhead(rb, "abudget", max_concurrent=10, budget=100, lease_ttl=0.6)
    try:
        a.acquire_sync(cost=1, timeout=10).release()
        b.acquire_sync(cost=1, timeout=10).release()
        assert a.apply_limits(2, budget=50) == {"applied": True, "revision": 2, "limit": None, "budget": 50}
        assert budget_lease(a)["fleet_limit"] == 50 and budget_lease(a)["rev"] == 2
        eventually(10, "b sees the new budget", lambda: budget_lease(b)["fleet_limit"] == 50 and budget_lease(b)["rev"] == 2)
        assert a.stats()["lease"]["fleet_limit"] == 10, "the fleet limit is unchanged"
        pool = a.pool_stats(dimension="budget")
        assert (pool["limit"], pool["rev"]) == (50, 2)
        assert a.pool_stats()["limit"] == 10 and a.pool_stats("permits")["rev"] == 0
        # A cost above the new fleet budget is refused at once by the holder that applied it.
        with pytest.raises(hullguard.BulkheadFullError) as e:
            a.acquire_sync(cost=51, timeout=30)
        assert e.value.reason == "budget_limit"
        # A stale revision is not an error: the budget in force is returned.
        assert b.apply_limits(2, budget=70) == {"applied": False, "revision": 2, "limit": None, "budget": 50}
        # Both at once (each lease table keeps its own revision): the limit's first.
        assert b.apply_limits(3, limit=7, budget=80) == {"applied": True, "revision": 3, "limit": 7, "budget": 80}
        eventually(10, "a sees both", lambda: budget_lease(a)["fleet_limit"] == 80 and a.stats()["lease"]["fleet_limit"] == 7)
        # Revision 4 of the limit is in force with this value: a retry of it answers applied
        # (the budget's table takes revision 4 as new).
        assert a.apply_limits(4, limit=6) == {"applied": True, "revision": 4, "limit": 6, "budget": None}
        assert a.apply_limits(4, limit=6, budget=90) == {"applied": True, "revision": 4, "limit": 6, "budget": 90}
        # Revision 4 of the budget is in force with another value: not applied.
        assert a.apply_limits(4, budget=95) == {"applied": False, "revision": 4, "limit": None, "budget": 90}
        for kwargs, name in [
            (dict(budget=0), "budget"),
            (dict(budget=2**32 + 1), "budget"),
            (dict(), "limit"),
            (dict(budget=5, max_queue=1), "limits"),
        ]:
            with pytest.raises(ValueError, match=f"^{name}: "):
                a.apply_limits(5, **kwargs)
        with pytest.raises(TypeError, match="budget"):
            a.apply_limits(5, budget="5")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="^dimension"):
            a.pool_stats(dimension="tokens")  # type: ignore[arg-type]
    finally:
        a.close()
        b.close()
        ra.close()
        rb.close()


def test_a_fleet_bulkhead_without_a_budget_refuses_budget_input_by_name(redis_server: RedisServer) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "nobudget", max_concurrent=2, lease_ttl=3.0)
    try:
        assert fleet.stats()["budget_lease"] is None and fleet.stats()["budget"] is None
        with pytest.raises(ValueError, match="^budget: this fleet bulkhead has no fleet budget"):
            fleet.apply_limits(1, budget=10)
        with pytest.raises(ValueError, match="^dimension: this fleet bulkhead has no fleet budget"):
            fleet.pool_stats(dimension="budget")
        with pytest.raises(ValueError, match="cost"):
            fleet.try_acquire(cost=1)
        assert fleet.pool_stats()["rev"] == 0, "nothing was applied"
    finally:
        fleet.close()
        r.close()
    F: Any = hullguard.FleetBulkhead
    cases: List[Any] = [
        (dict(budget=0), ValueError, "budget must be an integer in 1 ..= 4294967296, got 0"),
        (dict(budget=-5), ValueError, "budget must be an integer"),
        (dict(rates={}), TypeError, "rates: not supported by a fleet bulkhead"),
        (dict(on_state_change=None), TypeError, "on_state_change: not supported by a fleet bulkhead"),
        (dict(classes=[{"budget_floor": 5}]), ValueError, r"classes\[0\]: a budget floor"),
        (dict(classes=[{"floor": 5, "ceiling": 2}]), ValueError, r"classes\[0\]: the permits floor"),
        (dict(classes=[{"floor": 1}]), ValueError, r"lending: class floors on a fleet bulkhead need lending"),
    ]
    for kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            F(r, "nobudget", **kwargs)


# ----- classes and events ------------------------------------------------------------------------


def test_classes_order_the_waiters_of_the_block_by_priority(redis_server: RedisServer) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(
        r, "classes", max_concurrent=1, budget=100, lease_ttl=3.0,
        classes=[{"name": "hi", "priority": 10}, {"name": "lo", "budget_ceiling": 50}],
    )
    order: List[str] = []
    try:
        assert fleet.classes == ["hi", "lo"]
        held = fleet.acquire_sync(timeout=10, admission_class="hi")
        assert fleet.class_stats("hi")["in_flight"] == 1

        def wait(name: str) -> None:
            p = fleet.acquire_sync(timeout=30, admission_class=name, cost=10)
            order.append(name)
            p.release()

        lo = threading.Thread(target=wait, args=("lo",))
        lo.start()
        eventually(10, "lo queued", lambda: fleet.class_stats("lo")["queued"] == 1)
        hi = threading.Thread(target=wait, args=("hi",))
        hi.start()
        eventually(10, "hi queued", lambda: fleet.stats()["queued"] == 2)
        held.release()
        lo.join(40)
        hi.join(40)
        assert not lo.is_alive() and not hi.is_alive()
        assert order == ["hi", "lo"], "the higher priority first, though it came second"
        # A class's own ceiling of the budget, inside the fleet budget.
        with pytest.raises(hullguard.BulkheadFullError) as e:
            fleet.acquire_sync(timeout=30, admission_class="lo", cost=60)
        assert e.value.reason == "budget_limit"
        with pytest.raises(ValueError, match="admission_class: unknown class"):
            fleet.try_acquire(admission_class="nope")
        assert fleet.stats()["lease"]["fleet_limit"] == 1
    finally:
        fleet.close()
        r.close()


def test_events_deliver_this_process_s_admissions(redis_server: RedisServer) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(
        r, "events", max_concurrent=2, budget=100, lease_ttl=3.0, events=True,
        classes=[{"name": "a"}, {"name": "b"}],
    )
    plain = hullguard.FleetBulkhead(r, "events2", max_concurrent=2, lease_ttl=3.0)
    seen: List[Dict[str, Any]] = []
    actives: List[int] = []

    def on_admit(event: Dict[str, Any]) -> None:
        seen.append(event)
        actives.append(fleet.stats()["active"])  # a listener may read the stats

    try:
        fleet.on("admit", on_admit)
        fleet.on("release", seen.append)
        p = fleet.acquire_sync(timeout=10, cost=7, admission_class="b")
        [admit] = [e for e in seen if e["kind"] == "admit"]
        assert (admit["cost"], admit["weight"], admit["class"], admit["class_name"]) == (7, 1, 1, "b")
        assert actives == [1]
        p.release(usage=5)
        assert seen[-1]["kind"] == "release" and seen[-1]["class_name"] == "b"
        assert fleet.off("release", seen.append) and not fleet.off("release", seen.append)
        fleet.acquire_sync(timeout=10).release()
        assert [e["kind"] for e in seen] == ["admit", "release", "admit"]
        assert fleet.listener_errors == 0
        # The local bulkhead is the same one: its listeners hear the same events.
        local: List[str] = []
        fleet.bulkhead.on("admit", lambda e: local.append(e["kind"]))
        fleet.acquire_sync(timeout=10).release()
        assert local == ["admit"]
        with pytest.raises(ValueError, match="events=True"):
            plain.on("admit", seen.append)
        with pytest.raises(ValueError, match="events=True"):
            plain.events("admit")
    finally:
        fleet.close()
        plain.close()
        r.close()


@pytest.mark.asyncio
async def test_async_budget_events_apply_limits_and_aclose(redis_server: RedisServer, admin: Any) -> None:
    r = redis_server.aclient()
    try:
        # A 60 s lease renews every 20 s: the waits below end within their 10 s queue timeouts
        # only because budget demand wakes the driver (on the loop, or from another thread).
        async with hullguard.FleetBulkhead(r, "abud", max_concurrent=8, budget=100, lease_ttl=60.0,
                                           events=True) as fleet:
            stream = fleet.events("admit")
            async with fleet.acquire(cost=30, timeout=10) as p:
                assert isinstance(p, hullguard.Permit)
                assert budget_lease(fleet)["held"] >= 30
            event = await asyncio.wait_for(stream.__anext__(), 10)
            await stream.aclose()
            assert (event["kind"], event["cost"]) == ("admit", 30)
            got = await fleet.apply_limits(2, limit=6, budget=50)
            assert got == {"applied": True, "revision": 2, "limit": 6, "budget": 50}
            assert budget_lease(fleet)["fleet_limit"] == 50
            assert (await fleet.pool_stats(dimension="budget"))["limit"] == 50
            with pytest.raises(hullguard.BulkheadFullError) as e:
                await fleet.acquire(cost=51, timeout=10)
            assert e.value.reason == "budget_limit"
            # A cost above the block waits for it to grow (the driver is woken by demand).
            permits: List[hullguard.Permit] = await asyncio.gather(
                *(fleet.acquire(cost=12, timeout=10) for _ in range(2)),
                *(asyncio.to_thread(fleet.acquire_sync, cost=12, timeout=10) for _ in range(2)),
            )
            assert fleet.stats()["budget"]["in_use"] == 48 and budget_lease(fleet)["held"] >= 48
            for q in permits:
                q.release()
        assert fleet.closed
        # `async with` waited for both releases.
        assert budget_held_in_redis(admin, "abud") == {} and held_in_redis(admin, "abud") == {}
    finally:
        await r.aclose()
