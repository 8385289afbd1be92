"""Property tests of the Python API (issue 21): a Hypothesis state machine drives one
``hullguard.Bulkhead`` through random steps — ``try_acquire``, ``acquire_sync`` in threads
(no wait, a short real timeout, no deadline), asyncio acquires on a virtual clock (queue
timeouts, cancellation at a random point: before the first step, while queued, right after
the grant, inside an ``async with`` block), releases (outcome, usage), ``release_partial``,
``refund``, ``orphan``, permits dropped unreleased, ``set_limit`` / ``apply_limits`` (stale
revisions, the kill switch) / ``set_budget``, ``close``, ``drain`` and ``drain_sync`` — and
checks it against a naive model after every step:

* **conservation** (I2, honestly: against what the test itself holds): ``active`` is the
  weight of the calls the model holds, ``granted_unclaimed`` the weight of its granted
  waiters nobody polled yet, ``available == limit - active - granted_unclaimed``; the same
  for the budget (``in_use``, ``granted_unclaimed``, ``available``, ``queued_cost``) and
  the settlement identity;
* **settle once** (I3, I7, I9): every acquire attempt ends exactly once, as the model says —
  granted (then released exactly once: a second ``release()`` is ``False`` and counted),
  refused with the model's reason, timed out, or cancelled (a task cancelled after its grant
  passes the permits on) — never both, never a leaked permit; a permit dropped unreleased
  is reclaimed at once (``leaked_total``), an orphan dropped is not a leak;
* **the counters**: ``admitted_total``, ``rejected_by_reason`` (every reason),
  ``released_twice_total``, ``leaked_total``, ``orphaned_*``, ``queue_wait_count``,
  ``revision``, the budget's ``reserved`` / ``consumed`` / ``refunded`` / ``overrun`` totals,
  ``drain_sync(0)``.

The model simulates the event loop's ready queue (task steps and wake-ups in FIFO order, as
``VirtualClockLoop.run_until_quiet`` runs them), so it knows which wake-up sees a grant and
which a cancellation. Time is the loop's virtual clock (``_clock=loop.clock``): queue timeouts
fire only in ``advance``. The one real-time wait is a thread's ``acquire_sync`` with a short
timeout, which the step waits out (nothing else can settle it meanwhile, so its outcome is
still exact).

Bounded: derandomized (reproducible), ``PROPS_EXAMPLES`` runs of at most ``PROPS_STEPS`` steps
(about 7 s on one worker); ``HULLGUARD_PROPS=long`` runs 10x the runs of longer programs,
randomized (about 3 minutes; a failure prints its reproduction blob).
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import sys
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import hullguard
from _support import REASONS, VirtualClockLoop

LONG = os.environ.get("HULLGUARD_PROPS") == "long"
PROPS_EXAMPLES = 3000 if LONG else 300
PROPS_STEPS = 80 if LONG else 50

# A thread's bounded waits (a lost wake-up fails the step instead of hanging it): iterations of
# a 1 ms sleep, never an assertion about how fast anything is.
SPIN_ITERATIONS = 60_000
# The short real queue timeout of a thread's acquire_sync (the step waits it out).
SHORT_S = 0.002

OUTCOMES = ("success", "failure", "ignored", "overload")


class Req:
    """One acquire attempt, as the model sees it."""

    __slots__ = ("rid", "kind", "weight", "cost", "core", "reason", "at", "seq", "deadline_ms", "tid")

    def __init__(self, rid: int, kind: str, weight: int, cost: int) -> None:
        self.rid = rid
        self.kind = kind  # "try" | "thread" | "task"
        self.weight = weight
        self.cost = cost
        # "new" (not decided yet) | "queued" | "granted" (unclaimed) | "claimed" | "refused"
        # | "passed" (granted, then abandoned: passed on) | "nothing" (cancelled before its
        # first step: never reached the bulkhead)
        self.core = "new"
        self.reason: Optional[str] = None
        self.at: Optional[float] = None  # the queue timer's deadline (loop seconds)
        self.seq = 0
        self.deadline_ms: Optional[int] = None
        self.tid: Optional[int] = None


class Call:
    """A held call (a permit in the pool, or the permit of an ``async with`` block)."""

    __slots__ = ("weight", "cost", "orphaned", "live")

    def __init__(self, weight: int, cost: int) -> None:
        self.weight = weight
        self.cost = cost
        self.orphaned = 0
        self.live = True


class Task:
    """An asyncio task of the machine: ``plain`` (``return await bh.acquire(...)``),
    ``block`` (``async with bh.acquire(...): await ev.wait()``) or ``drain``."""

    __slots__ = (
        "tid", "kind", "task", "req", "ev", "fut", "cancel", "phase", "call", "timeout_ms",
        "drain_due", "idle_seen", "idle_at_due",
    )

    def __init__(self, tid: int, kind: str, task: "asyncio.Task[Any]", req: Optional[Req]) -> None:
        self.tid = tid
        self.kind = kind
        self.task = task
        self.req = req
        self.ev: Optional[asyncio.Event] = None
        # What the task awaits: "none" (its first step is pending), "pending", "resolved"
        # (a wake-up is in the ready queue) or "cancelled".
        self.fut = "none"
        self.cancel = False
        # "new" | "waiting" (queued) | "holding" (in the block) | "done"
        self.phase = "new"
        self.call: Optional[Call] = None
        self.timeout_ms: Optional[float] = None
        # A drain: its timer's time (virtual ms), whether the model was idle at some point
        # since its first step, and whether it was idle when its timer fired.
        self.drain_due: Optional[int] = None
        self.idle_seen = False
        self.idle_at_due: Optional[bool] = None


async def _plain(ctx: Any) -> Any:
    return await ctx


async def _block(ctx: Any, ev: asyncio.Event) -> None:
    async with ctx:
        await ev.wait()


def _reason_of(exc: BaseException) -> str:
    assert isinstance(exc, hullguard.BulkheadError), repr(exc)
    return exc.reason


class BulkheadMachine(RuleBasedStateMachine):
    """The machine: the SUT (``self.bh``, its loop, tasks and threads) and the model beside it
    (``queue``, ``reqs``, the calls of ``pool`` and of the tasks, the counts)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualClockLoop()
        self.bh: Any = None
        self.budget: Optional[int] = None
        self.now_ms = 0
        self.queue: List[Req] = []
        self.reqs: Dict[int, Req] = {}
        self.tasks: Dict[int, Task] = {}
        self.threads: Dict[int, Tuple[threading.Thread, Dict[str, Any]]] = {}
        self.pool: Dict[int, Tuple[Any, Call]] = {}  # live and released permits the test holds
        self.ready: Deque[Tuple[str, int]] = deque()
        self.next_id = 0
        self.timer_seq = 0
        self.closed = False
        self.revision = 0
        self.counts: Dict[str, int] = {
            "admitted": 0,
            "released_twice": 0,
            "leaked": 0,
            "orphaned_total": 0,
            "queue_wait": 0,
            "reserved": 0,
            "consumed": 0,
            "refunded": 0,
            "overrun": 0,
        }
        self.rejected: Dict[str, int] = {r: 0 for r in REASONS}

    # ----- set-up ---------------------------------------------------------------------------

    @initialize(
        max_concurrent=st.integers(1, 5),
        max_queue=st.integers(1, 8),
        budget=st.one_of(st.none(), st.integers(1, 12)),
        max_orphaned=st.sampled_from([0, 2, 5]),
    )
    def build(self, max_concurrent: int, max_queue: int, budget: Optional[int], max_orphaned: int) -> None:
        kw: Dict[str, Any] = dict(
            max_concurrent=max_concurrent,
            max_queue=max_queue,
            queue_timeout=math.inf,
            _clock=self.loop.clock,
        )
        if budget is not None:
            kw["budget"] = budget
        if max_orphaned:
            kw["max_orphaned"] = max_orphaned
        self.bh = hullguard.Bulkhead(**kw)
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self.limit = max_concurrent
        self.budget = budget  # the ceiling the bulkhead was built with (None: no budget)
        self.ceiling = budget or 0
        self.max_orphaned = max_orphaned

    def teardown(self) -> None:
        """Ends everything — close (queued waiters refused), every task cancelled (a waiter
        gives its place up, a grant passes on, a block releases), every permit released —
        and, unless the run already failed, checks I5: the bulkhead is idle in both
        dimensions."""
        failing = sys.exc_info()[0] is not None
        try:
            if self.bh is None:
                return
            self.bh.close()
            for t in self.tasks.values():
                if not t.task.done():
                    t.task.cancel()
            self.loop.run_until_quiet()
            for t in self.tasks.values():
                if t.task.done() and not t.task.cancelled() and t.task.exception() is None:
                    if isinstance(t.task.result(), hullguard.Permit):
                        t.task.result().release()
            for th, rec in self.threads.values():
                th.join(SPIN_ITERATIONS / 1000)
                if isinstance(rec.get("out"), hullguard.Permit):
                    rec["out"].release()
            for permit, _ in self.pool.values():
                permit.release()
            if failing:
                return
            assert all(t.task.done() for t in self.tasks.values())
            assert not any(th.is_alive() for th, _ in self.threads.values())
            s = self.bh.stats()
            held = (s["active"], s["queued"], s["granted_unclaimed"], s["orphaned_in_flight"])
            assert held == (0, 0, 0, 0), s
            assert s["available"] == s["limit"], s
            if s["budget"] is not None:
                b = s["budget"]
                units = (b["in_use"], b["granted_unclaimed"], b["queued_cost"], b["available"])
                assert units == (0, 0, 0, b["limit"]), b
                settled = b["consumed_total"] + b["refunded_total"]
                assert b["reserved_total"] + b["overrun_total"] == settled, b
            assert self.bh.drain_sync(0)["drained"]
        finally:
            self.loop.shutdown()

    # ----- the model: sums ------------------------------------------------------------------

    def calls(self) -> List[Call]:
        out = [c for _, c in self.pool.values() if c.live]
        out += [t.call for t in self.tasks.values() if t.call is not None and t.call.live]
        return out

    def active(self) -> int:
        return sum(c.weight for c in self.calls())

    def in_use(self) -> int:
        return sum(c.cost for c in self.calls())

    def granted(self) -> List[Req]:
        return [r for r in self.reqs.values() if r.core == "granted"]

    def available(self) -> int:
        return self.limit - self.active() - sum(r.weight for r in self.granted())

    def units_available(self) -> int:
        return self.ceiling - self.in_use() - sum(r.cost for r in self.granted())

    def orphaned(self) -> int:
        return sum(c.orphaned for c in self.calls())

    def fits(self, r: Req) -> bool:
        """Both dimensions fit now (a cost of 0 asks nothing of the budget, overdrawn or not)."""
        return r.weight <= self.available() and (r.cost == 0 or r.cost <= self.units_available())

    def idle(self) -> bool:
        """What drain waits for: nothing queued, granted, held (a call whose permits all went
        back early holds none) or orphaned."""
        return not self.queue and not self.granted() and self.active() == 0 and self.orphaned() == 0

    # ----- the model: admission -------------------------------------------------------------

    def new_req(self, kind: str, weight: int, cost: int) -> Req:
        self.next_id += 1
        r = Req(self.next_id, kind, weight, cost)
        self.reqs[r.rid] = r
        return r

    def refuse(self, r: Req, reason: str) -> None:
        r.core = "refused"
        r.reason = reason
        self.rejected[reason] += 1

    def grant(self, r: Req, queued: bool) -> None:
        r.core = "granted"
        self.counts["admitted"] += 1
        self.counts["reserved"] += r.cost
        if queued:
            self.counts["queue_wait"] += 1

    def decide(self, r: Req, may_queue: bool) -> None:
        """The admission of ``r`` (docs/design.md §4.5, §5.1): granted, refused or queued."""
        if self.closed:
            return self.refuse(r, "shutdown")
        if not self.queue and self.fits(r):
            return self.grant(r, queued=False)
        if not may_queue:
            if self.queue or r.weight > self.available():
                return self.refuse(r, "concurrency_limit")
            return self.refuse(r, "budget_limit")
        if r.weight > self.limit:
            return self.refuse(r, "concurrency_limit")
        if self.budget is not None and r.cost > self.ceiling:
            return self.refuse(r, "budget_limit")
        if len(self.queue) >= self.max_queue:
            return self.refuse(r, "queue_limit")
        r.core = "queued"
        self.queue.append(r)

    def dispatch(self, via_thread: bool = False) -> None:
        """The dispatcher pass: grants the head while it fits, refuses a head that can never
        fit the current limit / ceiling (FIFO, head of line)."""
        while self.queue:
            r = self.queue[0]
            if r.weight > self.limit:
                self.queue.pop(0)
                self.refuse(r, "concurrency_limit")
            elif self.budget is not None and r.cost > self.ceiling:
                self.queue.pop(0)
                self.refuse(r, "budget_limit")
            elif self.fits(r):
                self.queue.pop(0)
                self.grant(r, queued=True)
            else:
                break
            self.notify(r, via_thread)
        self.idle_changed()

    def notify(self, r: Req, via_thread: bool) -> None:
        """A queued waiter settled: its owner is woken (a thread unparks; a task's future is
        resolved now on the loop's thread, else through ``call_soon_threadsafe``)."""
        if r.kind == "task":
            if via_thread:
                self.ready.append(("ts", r.tid))
            else:
                self.resolve(self.tasks[r.tid])

    def resolve(self, t: Task) -> None:
        if t.fut == "pending":
            t.fut = "resolved"
            self.ready.append(("wake", t.tid))

    def remove_queued(self, r: Req, reason: str, via_thread: bool = False, wake: bool = False) -> None:
        """A queued waiter leaves (its owner's cancel, or — ``wake`` — an expiry by a third
        party, which wakes the owner); the turn passes on."""
        self.queue.remove(r)
        self.refuse(r, reason)
        if wake:
            self.notify(r, via_thread)
        self.dispatch(via_thread)

    def end_call(
        self, c: Call, used: Optional[int] = None, leaked: bool = False, via_thread: bool = False
    ) -> None:
        c.live = False
        if used is None:
            self.counts["consumed"] += c.cost
        else:
            self.counts["consumed"] += used
            self.counts["refunded"] += max(0, c.cost - used)
            self.counts["overrun"] += max(0, used - c.cost)
        if leaked:
            self.counts["leaked"] += c.weight
        self.dispatch(via_thread)

    def idle_changed(self) -> None:
        """A waiting drain may complete from now on: it is woken by every change that may
        make the bulkhead idle and completes if it is idle when it polls — which the loop may
        run after a later change made it busy again, so the model keeps only the fact."""
        if self.idle():
            for t in self.tasks.values():
                if t.kind == "drain" and t.phase == "waiting":
                    t.idle_seen = True

    # ----- the model: the event loop ---------------------------------------------------------

    def run_ready(self) -> None:
        """What ``run_until_quiet`` runs: the ready queue in FIFO order, each step's own
        wake-ups appended behind it."""
        for _ in range(100_000):
            if not self.ready:
                return
            what, tid = self.ready.popleft()
            t = self.tasks[tid]
            if what == "ts":
                self.resolve(t)
            elif what == "step":
                self.first_step(t)
            else:
                self.wake(t)
        raise AssertionError("the model's loop never went quiet")

    def first_step(self, t: Task) -> None:
        if t.kind == "drain":
            t.phase = "waiting"
            if not t.cancel and self.idle():
                t.idle_seen = True  # it polls now: complete at once
            return
        r = t.req
        assert r is not None
        if t.cancel:  # cancelled before its first step: the acquire never ran
            r.core = "nothing"
            t.phase = "done"
            return
        self.decide(r, may_queue=t.timeout_ms != 0)
        if r.core == "granted":
            self.claim(t)
        elif r.core == "refused":
            t.phase = "done"
        else:
            t.phase = "waiting"
            t.fut = "pending"
            if t.timeout_ms is not None and t.timeout_ms != math.inf:
                self.timer_seq += 1
                r.seq = self.timer_seq
                r.at = (self.now_ms * 1_000_000) / 1e9 + t.timeout_ms / 1000
                r.deadline_ms = self.now_ms + int(t.timeout_ms)

    def claim(self, t: Task) -> None:
        r = t.req
        assert r is not None and r.core == "granted"
        r.core = "claimed"
        t.call = Call(r.weight, r.cost)
        if t.kind == "plain":
            t.phase = "done"  # the permit goes to the pool when the test collects the task
        else:
            t.phase = "holding"
            t.fut = "pending"  # ev.wait()

    def wake(self, t: Task) -> None:
        r = t.req
        assert r is not None
        if t.phase == "holding":
            # ev.wait() returned (or was cancelled): the block exits and releases.
            assert t.call is not None
            self.end_call(t.call)
            t.phase = "done"
            return
        assert t.phase == "waiting", (t.phase, r.core)
        if t.cancel:
            # CancelledError thrown into the acquire: the waiter is abandoned.
            if r.core == "queued":
                self.remove_queued(r, "aborted")
            elif r.core == "granted":
                r.core = "passed"
                self.counts["refunded"] += r.cost
                self.dispatch()
            t.phase = "done"
            return
        if r.core == "granted":
            self.claim(t)
        elif r.core == "refused":
            t.phase = "done"
        else:
            raise AssertionError(f"woken while {r.core}")

    def expire_due(self, target_ms: int) -> None:
        """The queue timers and drain timers due by ``target_ms``, in deadline order (the
        shared queue timer: by ``loop.time() + timeout``, ties in arrival order)."""
        events: List[Tuple[float, int, str, Any]] = []
        for r in self.queue:
            if r.deadline_ms is not None and r.deadline_ms < target_ms:
                assert r.at is not None
                events.append((r.at, r.seq, "expire", r))
        for t in self.tasks.values():
            due = t.drain_due
            if t.kind == "drain" and t.phase == "waiting" and due is not None and due < target_ms:
                events.append((t.drain_due / 1000, 0, "drain", t))
        for at, _, kind, x in sorted(events, key=lambda e: (e[0], e[1])):
            self.now_ms = max(self.now_ms, math.ceil(at * 1000 - 1e-6))
            if kind == "expire":
                if x.core == "queued":
                    self.remove_queued(x, "timeout", wake=True)
            elif x.phase == "waiting" and not x.cancel:
                x.idle_at_due = self.idle()  # it polls now: drained or not, it completes
            self.run_ready()

    # ----- collecting what the SUT did ------------------------------------------------------

    def run_loop(self) -> None:
        self.run_ready()
        self.loop.run_until_quiet()
        self.collect()

    def collect(self) -> None:
        """Every task the model says finished has finished as it says (and only those)."""
        for tid, t in list(self.tasks.items()):
            task = t.task
            if t.kind == "drain":
                if not self.drain_done(t):
                    continue
            elif t.phase != "done":
                assert not task.done(), f"task {tid} ({t.kind}) finished early: {task!r}"
                if t.phase == "holding":
                    assert t.call is not None
                continue
            else:
                assert task.done(), f"task {tid} ({t.kind}, {t.req and t.req.core}) still pending"
            r = t.req
            if t.kind == "drain":
                pass
            elif t.cancel:
                assert task.cancelled(), f"task {tid} was cancelled ({r and r.core}) but {task!r}"
            elif r is not None and r.core == "refused":
                exc = task.exception()
                assert exc is not None and _reason_of(exc) == r.reason, (exc, r.reason)
            elif t.kind == "plain":
                permit = task.result()
                assert t.call is not None
                assert isinstance(permit, hullguard.Permit)
                assert (permit.weight, permit.cost) == (t.call.weight, t.call.cost)
                self.pool[self.new_pool_id()] = (permit, t.call)
                t.call = None  # held by the pool now
                del permit
            else:  # a block that ended normally
                assert task.result() is None
            del self.tasks[tid]
            del task

    def drain_done(self, t: Task) -> bool:
        """A drain task at a quiescent point: cancelled ones ended cancelled; one that
        finished reported ``drained`` only if the bulkhead was idle since it started, and not
        drained only when its timer fired while busy; one still waiting is neither idle now
        nor past its timer (so every drain ends: liveness)."""
        task = t.task
        if t.phase == "new":
            assert not task.done() or (t.cancel and task.cancelled()), task
            return False
        if t.cancel:
            assert task.cancelled(), f"a cancelled drain: {task!r}"
            return True
        if not task.done():
            assert not self.idle(), "idle at a quiescent point, yet a drain still waits"
            assert t.idle_at_due is None, "a drain past its timer still waits"
            return False
        res = task.result()
        if res["drained"]:
            assert t.idle_seen, f"drained although never idle since it started: {res}"
        else:
            assert t.idle_at_due is False, f"not drained before its timer: {res}"
        return True

    def new_pool_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def settle_threads(self) -> None:
        """Joins every thread whose waiter the model says settled (it unparks at once)."""
        for rid, (th, rec) in list(self.threads.items()):
            r = self.reqs[rid]
            if r.core == "queued":
                assert not rec.get("done"), f"thread {rid} finished while queued: {rec}"
                continue
            self.join(th)
            out = rec.pop("out")
            if r.core == "granted":
                assert isinstance(out, hullguard.Permit), (out, r.core)
                assert (out.weight, out.cost) == (r.weight, r.cost)
                r.core = "claimed"
                self.pool[self.new_pool_id()] = (out, Call(r.weight, r.cost))
            else:
                assert r.core == "refused", r.core
                assert _reason_of(out) == r.reason, (out, r.reason)
            del out
            del self.threads[rid]

    def join(self, th: threading.Thread) -> None:
        """Joins a thread the model says settled (bounded: a lost wake-up fails the step; a
        thread the SUT queued where the model did not fails at once)."""
        for _ in range(SPIN_ITERATIONS):
            th.join(0.001)
            if not th.is_alive():
                return
            queued = self.bh.stats()["queued"]
            assert queued <= len(self.queue), f"the SUT queued a thread the model settled: {queued}"
        raise AssertionError("a settled thread never returned: a lost wake-up")

    def wait_queued(self, rec: Dict[str, Any]) -> None:
        """Waits (bounded) until the SUT shows the model's queue: a thread enqueues on its own."""
        for _ in range(SPIN_ITERATIONS):
            if self.bh.stats()["queued"] == len(self.queue):
                return
            assert not rec.get("done"), f"the model queued a thread the SUT settled: {rec}"
            time.sleep(0.001)
        raise AssertionError(f"queued never reached {len(self.queue)}: {self.bh.stats()}")

    # ----- strategies -----------------------------------------------------------------------

    def cost_of(self, c: int) -> int:
        return 0 if self.budget is None else c % (self.budget + 1)

    def weight_of(self, w: int) -> int:
        return 1 + w % self.max_concurrent

    def pick(self, i: int, live: Optional[bool] = None) -> Optional[int]:
        keys = [k for k, (_, c) in self.pool.items() if live is None or c.live == live]
        return keys[i % len(keys)] if keys else None

    def kw(self, cost: int) -> Dict[str, Any]:
        return {} if self.budget is None else {"cost": cost}

    # ----- rules: admission -----------------------------------------------------------------

    ACQUIRE = dict(
        how=st.sampled_from(["try", "thread", "task", "block"]),
        w=st.integers(0, 4),
        c=st.integers(0, 12),
        timeout=st.sampled_from([math.inf, 0, 5, 15, 25, 45]),
        step_now=st.booleans(),
    )

    @rule(**ACQUIRE)
    def acquire(self, how: str, w: int, c: int, timeout: float, step_now: bool) -> None:
        """One acquire attempt: ``try_acquire``; ``acquire_sync`` in a thread (timeout ``0``,
        no deadline, or — any finite one — a short real one, waited out); a task
        (``return await bh.acquire(...)``, or an ``async with`` block that waits for
        ``finish_block``) with a virtual queue timeout (ms), whose first step runs with the
        loop (at once if ``step_now``)."""
        weight, cost = self.weight_of(w), self.cost_of(c)
        if how == "try":
            self.try_acquire(weight, cost)
        elif how == "thread":
            self.thread_acquire(weight, cost, "inf" if timeout == math.inf else timeout and "short")
        else:
            self.task_acquire(weight, cost, timeout, how == "block", step_now)

    # Twice the acquire rule: Hypothesis picks among the rules uniformly, and a queue forms only
    # when acquires outnumber releases.
    @rule(**ACQUIRE)
    def acquire_more(self, how: str, w: int, c: int, timeout: float, step_now: bool) -> None:
        self.acquire(how, w, c, timeout, step_now)

    def try_acquire(self, weight: int, cost: int) -> None:
        r = self.new_req("try", weight, cost)
        self.decide(r, may_queue=False)
        try:
            permit = self.bh.try_acquire(r.weight, **self.kw(r.cost))
        except hullguard.BulkheadError as e:
            assert r.core == "refused" and r.reason != "concurrency_limit", (e, r.core, r.reason)
            assert e.reason == r.reason, (e, r.reason)
            return
        if permit is None:
            assert r.core == "refused" and r.reason == "concurrency_limit", (r.core, r.reason)
            return
        assert r.core == "granted", (r.core, r.reason)
        assert (permit.weight, permit.cost) == (r.weight, r.cost)
        r.core = "claimed"
        self.pool[self.new_pool_id()] = (permit, Call(r.weight, r.cost))

    def thread_acquire(self, weight: int, cost: int, timeout: Any) -> None:
        r = self.new_req("thread", weight, cost)
        self.decide(r, may_queue=timeout != 0)
        t = math.inf if timeout == "inf" else SHORT_S if timeout == "short" else 0
        rec: Dict[str, Any] = {}
        bh, kw = self.bh, self.kw(r.cost)

        def run() -> None:
            try:
                rec["out"] = bh.acquire_sync(r.weight, t, **kw)
            except BaseException as e:  # noqa: BLE001 - checked by settle_threads
                rec["out"] = e
            rec["done"] = True

        th = threading.Thread(target=run, daemon=True)
        self.threads[r.rid] = (th, rec)
        th.start()
        if r.core == "queued":
            if timeout == "short":
                # Nothing else can settle it: it times out, its turn passes on (from its thread).
                self.join(th)
                self.remove_queued(r, "timeout", via_thread=True)
            else:
                self.wait_queued(rec)
        self.settle_threads()

    def task_acquire(self, weight: int, cost: int, timeout_ms: float, block: bool, step_now: bool) -> None:
        r = self.new_req("task", weight, cost)
        ctx = self.bh.acquire(r.weight, timeout_ms / 1000, **self.kw(r.cost))
        self.next_id += 1
        tid = self.next_id
        if block:
            ev = asyncio.Event()
            task = self.loop.create_task(_block(ctx, ev))
        else:
            task = self.loop.create_task(_plain(ctx))
        del ctx
        t = Task(tid, "block" if block else "plain", task, r)
        t.timeout_ms = timeout_ms
        if block:
            t.ev = ev
        r.tid = tid
        self.tasks[tid] = t
        self.ready.append(("step", tid))
        if step_now:
            self.run_loop()

    @rule(
        w=st.integers(0, 4),
        c=st.integers(0, 12),
        block=st.booleans(),
        order=st.sampled_from(
            ["cancel", "cancel_then_grant", "grant_then_cancel", "grant_in_thread_then_cancel"]
        ),
    )
    def race(self, w: int, c: int, block: bool, order: str) -> None:
        """A task queues (if the model says it does), then its cancellation and a grant race:
        cancelled while queued (``aborted``); cancelled, then granted before it resumed; or
        granted (from this thread or, through ``call_soon_threadsafe``, another), then
        cancelled before it resumed — either way it passes the grant on. The grant comes from
        releasing the pool's permits one by one until the model grants it."""
        weight = self.max_concurrent if w == 0 else self.weight_of(w)
        self.task_acquire(weight, self.cost_of(c), math.inf, block, step_now=True)
        r = self.reqs[max(self.reqs)]
        t = self.tasks.get(r.tid) if r.tid is not None else None
        if t is None or r.core != "queued":
            return
        if order.startswith("cancel"):
            self.cancel_task_obj(t)
        if order != "cancel":
            for k in [k for k, (_, c) in self.pool.items() if c.live]:
                if r.core != "queued":
                    break
                self.op_release(k, "success", None, in_thread=order.startswith("grant_in_thread"))
                self.settle_threads()
        if not t.cancel:
            self.cancel_task_obj(t)
        self.run_loop()

    @rule(i=st.integers(0, 50), point=st.sampled_from(["queued", "granted", "holding", "new", "drain"]))
    def cancel_task(self, i: int, point: str) -> None:
        """Cancels a task at a point of its life — ``point``, when a task is there, else any:
        before its first step (``new``), queued, granted but not resumed yet (it passes the
        grant on), inside its ``async with`` block (``holding``), or a waiting drain."""
        live = [t for t in self.tasks.values() if not t.task.done() and not t.cancel and t.phase != "done"]
        there = [t for t in live if self.point_of(t) == point]
        if not there and point != "drain":
            there = [t for t in live if t.kind != "drain"]
        if there:
            self.cancel_task_obj(there[i % len(there)])

    def point_of(self, t: Task) -> str:
        if t.kind == "drain":
            return "drain"
        if t.phase == "waiting" and t.req is not None and t.req.core == "granted":
            return "granted"
        return {"waiting": "queued"}.get(t.phase, t.phase)

    def cancel_task_obj(self, t: Task) -> None:
        t.task.cancel()
        t.cancel = True
        if t.fut == "pending":
            t.fut = "cancelled"
            self.ready.append(("wake", t.tid))

    @rule(i=st.integers(0, 50))
    def finish_block(self, i: int) -> None:
        holding = [t for t in self.tasks.values() if t.phase == "holding" and not t.ev.is_set()]
        if not holding:
            return
        t = holding[i % len(holding)]
        t.ev.set()
        self.resolve(t)

    @rule()
    def run_loop_rule(self) -> None:
        self.run_loop()

    @rule(ms=st.sampled_from([10, 20, 50]))
    def advance(self, ms: int) -> None:
        target = self.now_ms + ms
        self.run_ready()
        self.expire_due(target)
        self.now_ms = target
        self.loop.advance(ms)
        self.collect()

    # ----- rules: the permits ---------------------------------------------------------------

    @rule(
        i=st.integers(0, 50),
        outcome=st.sampled_from(OUTCOMES),
        usage=st.one_of(st.none(), st.integers(0, 20)),
        in_thread=st.booleans(),
        cancel_granted=st.booleans(),
    )
    def release(
        self, i: int, outcome: str, usage: Optional[int], in_thread: bool, cancel_granted: bool
    ) -> None:
        """Releases a permit of the pool (see ``op_release``). ``cancel_granted``: then cancels
        every task the release granted, before any of them resumed (each passes its grant
        on)."""
        step = lambda k: self.op_release(k, outcome, usage, in_thread)  # noqa: E731
        self.on_permit(i, cancel_granted, step, live_first=True)

    @rule(
        op=st.sampled_from(["release_partial", "refund", "orphan", "drop"]),
        i=st.integers(0, 50),
        n=st.integers(1, 12),
        cancel_granted=st.booleans(),
    )
    def permit_op(self, op: str, i: int, n: int, cancel_granted: bool) -> None:
        """One other step on a permit of the pool (``cancel_granted`` as for ``release``)."""
        self.on_permit(i, cancel_granted, lambda k: getattr(self, "op_" + op)(k, n))

    def on_permit(self, i: int, cancel_granted: bool, step: Any, live_first: bool = False) -> None:
        """``step`` on permit ``i`` of the pool (``live_first``: of its unreleased ones if it
        has any)."""
        k = self.pick(i, live=True) if live_first else None
        k = self.pick(i) if k is None else k
        if k is None:
            return
        before = {r.rid for r in self.granted()}
        step(k)
        self.settle_threads()
        if cancel_granted:
            for r in self.granted():
                t = self.tasks.get(r.tid) if r.tid is not None else None
                if r.rid not in before and t is not None and not t.cancel:
                    self.cancel_task_obj(t)

    def op_release(self, k: int, outcome: str, usage: Optional[int], in_thread: bool) -> None:
        """The first ``release()`` returns ``True`` (from this thread, or from another: the
        tasks it grants are woken through ``call_soon_threadsafe``); a released permit's
        ``False``, counted in ``released_twice_total`` and nothing else."""
        permit, c = self.pool[k]
        if not c.live:
            assert permit.release() is False
            assert permit.released
            self.counts["released_twice"] += 1
            return
        used = None if self.budget is None else usage
        kw: Dict[str, Any] = {"outcome": outcome}
        if used is not None:
            kw["usage"] = used
        if in_thread:
            out: List[Any] = []
            th = threading.Thread(target=lambda: out.append(permit.release(**kw)))
            th.start()
            self.join(th)
            assert out == [True]
        else:
            assert permit.release(**kw) is True
        assert permit.released and permit.weight == 0 and permit.cost == 0
        self.end_call(c, used, via_thread=in_thread)

    def op_release_partial(self, k: int, n: int) -> None:
        permit, c = self.pool[k]
        if not c.live or c.orphaned or not 1 <= n <= c.weight:
            with pytest.raises(ValueError):
                permit.release_partial(n)
            return
        permit.release_partial(n)
        c.weight -= n
        if c.weight == 0:  # the last permit returns the units too (refunded)
            self.counts["refunded"] += c.cost
            c.cost = 0
        assert (permit.weight, permit.cost) == (c.weight, c.cost)
        self.dispatch()

    def op_refund(self, k: int, n: int) -> None:
        if self.budget is None:
            return
        permit, c = self.pool[k]
        if not c.live or not 1 <= n <= c.cost:
            with pytest.raises(ValueError):
                permit.refund(n)
            return
        permit.refund(n)
        c.cost -= n
        self.counts["refunded"] += n
        self.dispatch()

    def op_orphan(self, k: int, n: int) -> None:
        if self.max_orphaned == 0:
            return
        permit, c = self.pool[k]
        if not c.live:
            with pytest.raises(ValueError):
                permit.orphan()
            return
        if c.weight == 0:
            assert permit.orphan() is False
            return
        if self.orphaned() + c.weight > self.max_orphaned:
            with pytest.raises(ValueError):
                permit.orphan()
            return
        assert permit.orphan() is True
        c.orphaned = c.weight
        c.weight = 0
        self.counts["orphaned_total"] += c.orphaned
        assert permit.weight == 0
        self.dispatch()

    def op_drop(self, k: int, n: int) -> None:
        """Drops a permit without releasing it: reclaimed at once (its finalizer), counted in
        ``leaked_total`` by the permits it still held (an orphan's none); a released one
        changes nothing. Then GC pressure: nothing else the test holds is collectable, so
        nothing else changes."""
        permit, c = self.pool.pop(k)
        del permit
        if c.live:
            self.end_call(c, leaked=True)
        gc.collect(0)

    # ----- rules: limits, close, drain ------------------------------------------------------

    @rule(
        op=st.sampled_from(["set_limit", "apply_limits", "set_budget"]),
        step=st.integers(-1, 2),
        limit=st.one_of(st.none(), st.integers(0, 5)),
        budget=st.one_of(st.none(), st.integers(0, 12)),
    )
    def limits(self, op: str, step: int, limit: Optional[int], budget: Optional[int]) -> None:
        """``set_limit`` (1..=max_concurrent), ``set_budget`` or ``apply_limits`` under a
        revision (a stale one is refused and changes nothing; a limit of 0 is the kill
        switch)."""
        if limit is not None:
            limit = min(limit, self.max_concurrent)
        if self.budget is None or budget is None:
            budget = None
        else:
            budget %= self.budget + 1
        if op == "set_limit":
            limit = max(1, limit or 1)
            self.bh.set_limit(limit)
            self.limit = limit
        elif op == "set_budget":
            if budget is None:
                return
            self.bh.set_budget(budget)
            self.ceiling = budget
        else:
            rev = max(1, self.revision + step)
            kw = {k: v for k, v in (("limit", limit), ("budget", budget)) if v is not None}
            if rev <= self.revision:
                with pytest.raises(hullguard.StaleRevision) as e:
                    self.bh.apply_limits(rev, **kw)
                assert e.value.current == self.revision
                return
            self.bh.apply_limits(rev, **kw)
            self.revision = rev
            if limit is not None:
                self.limit = limit
            if budget is not None:
                self.ceiling = budget
        self.dispatch()
        self.settle_threads()

    @rule(go=st.integers(0, 9))
    def close(self, go: int) -> None:
        if go != 5:  # rare: the rest of a run after it only drains
            return
        self.bh.close()
        self.closed = True
        for r in list(self.queue):
            self.queue.remove(r)
            self.refuse(r, "shutdown")
            self.notify(r, via_thread=False)
        self.idle_changed()
        self.settle_threads()

    @rule(timeout_ms=st.sampled_from([math.inf, 17, 37]))
    def start_drain(self, timeout_ms: float) -> None:
        self.next_id += 1
        tid = self.next_id
        task = self.loop.create_task(self.bh.drain(timeout_ms / 1000))
        t = Task(tid, "drain", task, None)
        if timeout_ms != math.inf:
            t.drain_due = self.now_ms + int(timeout_ms)
        self.tasks[tid] = t
        self.ready.append(("step", tid))

    # ----- the invariant --------------------------------------------------------------------

    @invariant()
    def conserved_and_counted(self) -> None:
        if self.bh is None:
            return
        self.settle_threads()  # quiescence: a thread granted meanwhile has returned
        s = self.bh.stats()
        gu = self.granted()
        want = {
            "active": self.active(),
            "queued": len(self.queue),
            "granted_unclaimed": sum(r.weight for r in gu),
            "limit": self.limit,
            "available": self.available(),
            "admitted_total": self.counts["admitted"],
            "released_twice_total": self.counts["released_twice"],
            "leaked_total": self.counts["leaked"],
            "orphaned_in_flight": self.orphaned(),
            "orphaned_total": self.counts["orphaned_total"],
            "queue_wait_count": self.counts["queue_wait"],
            "revision": self.revision,
            "rejected_by_reason": self.rejected,
        }
        got = {k: s[k] for k in want}
        assert got == want, f"\n got {got}\nwant {want}"
        d = self.bh.drain_sync(0)
        assert d == {"drained": self.idle(), "active": want["active"], "queued": want["queued"]}, d
        # I2 as the stats state it (and honest: every term is the model's own count above).
        assert s["available"] + s["active"] + s["granted_unclaimed"] == s["limit"]
        if self.budget is None:
            assert s["budget"] is None
            return
        b = s["budget"]
        bwant = {
            "limit": self.ceiling,
            "in_use": self.in_use(),
            "granted_unclaimed": sum(r.cost for r in gu),
            "available": self.units_available(),
            "queued_cost": sum(r.cost for r in self.queue),
            "reserved_total": self.counts["reserved"],
            "consumed_total": self.counts["consumed"],
            "refunded_total": self.counts["refunded"],
            "overrun_total": self.counts["overrun"],
            "overrun_held": 0,
        }
        bgot = {k: b[k] for k in bwant}
        assert bgot == bwant, f"\n got {bgot}\nwant {bwant}"
        assert b["available"] + b["in_use"] + b["granted_unclaimed"] == b["limit"]
        assert b["reserved_total"] + b["overrun_total"] == (
            b["consumed_total"]
            + b["refunded_total"]
            + b["in_use"]
            + b["granted_unclaimed"]
            + b["overrun_held"]
        )


def _settings() -> settings:
    return settings(
        max_examples=PROPS_EXAMPLES,
        stateful_step_count=PROPS_STEPS,
        deadline=None,
        derandomize=not LONG,
        database=None,
        print_blob=LONG,
        # A failure shrinks one bug, without the (slow, coverage-traced) explain phase.
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.mark.timeout(3600 if LONG else 600, method="thread")
def test_bulkhead_against_the_model() -> None:
    run_state_machine_as_test(BulkheadMachine, settings=_settings())
